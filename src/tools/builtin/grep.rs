//! `grep`: search file contents with a regex, on ripgrep's own crates.
//!
//! The walk is `ignore`'s (the one `rg` uses): `.gitignore`, `.ignore` and
//! `.git/info/exclude` are honoured, hidden files and directories are
//! skipped, symlinks are never followed, and the agent's data dir is never
//! entered. Matching is `grep-regex` + `grep-searcher`: line by line, with
//! binary files (a NUL byte) skipped and counted, as `rg` does by default.
//!
//! Results come in path order, so the same call gives the same answer. The
//! output is capped ([`MAX_CONTENT_LINES`], [`MAX_FILES`]) and each line is
//! cut at [`MAX_LINE_CHARS`]; past the cap the search still counts, so the
//! last line says how much more there is and how to narrow it.
//!
//! [`search_walk`] builds the walk; `glob` shares it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{Access, ToolContext, access_failed, blocking, cancelled, failed, messages, target};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::runtime::beneath::{Located, Root};
use crate::tools::{Tool, ToolSpec, arg_bool, arg_str, arg_u64};

/// Output lines (matches and context) shown at most in `content` mode.
/// About 10k tokens at typical line lengths: enough to see where something
/// is used, small enough that one search never floods the context.
pub const MAX_CONTENT_LINES: usize = 200;

/// Files listed at most in `files` and `count` modes: names are short, so
/// more fit, and past a hundred the model needs a narrower search anyway.
pub const MAX_FILES: usize = 100;

/// Characters of one line shown before it is cut. A minified bundle has
/// lines of megabytes; 500 characters show the match's neighbourhood and
/// keep [`MAX_CONTENT_LINES`] lines near 100 KB at worst.
pub const MAX_LINE_CHARS: usize = 500;

/// Context lines the model may ask for on each side. More than this is a
/// read, and `read_file` with an offset does it better.
pub const MAX_CONTEXT: u64 = 10;

/// The most memory the searcher may use for one line. A line longer than
/// this (a huge generated file without newlines) makes the file unreadable
/// for grep instead of growing the buffer without bound.
const HEAP_LIMIT_BYTES: usize = 16 * 1024 * 1024;

/// The path searched when the model gives none.
const DEFAULT_PATH: &str = ".";

const DESCRIPTION: &str = "Searches file contents with a regular expression (Rust regex syntax, like ripgrep) and returns matching lines as `path:line:text`. \
Respects .gitignore and .ignore, skips hidden files and binary files, and never looks into ignored directories such as target/ or node_modules/. \
Use it instead of run_shell with grep -r or rg. Narrow with `path` (a file or directory) and `glob` (e.g. `*.rs`, or `!tests/**` to exclude). \
output_mode `files` lists only the matching files, `count` the number of matching lines per file. \
Results are capped at 200 lines (100 files); the last line says how many more there are. Patterns match within one line.";

/// What the search reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Matching lines (and context) with line numbers.
    Content,
    /// Names of files with a match.
    Files,
    /// Matching lines per file.
    Count,
}

impl Mode {
    fn parse(text: &str) -> Option<Mode> {
        match text.trim() {
            "" | "content" => Some(Mode::Content),
            "files" | "files_with_matches" => Some(Mode::Files),
            "count" => Some(Mode::Count),
            _ => None,
        }
    }
}

/// The `grep` tool.
pub struct Grep {
    spec: ToolSpec,
}

impl Grep {
    pub fn new() -> Self {
        Grep {
            spec: ToolSpec {
                name: "grep".to_string(),
                description: DESCRIPTION.to_string(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "pattern": {
                            "type": "string",
                            "description": "Regular expression to search for (Rust regex syntax; escape literal braces and brackets)."
                        },
                        "path": {
                            "type": "string",
                            "description": "File or directory to search, absolute or relative to the workspace root. Default: the workspace root."
                        },
                        "glob": {
                            "type": "string",
                            "description": "Only search files matching this glob, e.g. `*.rs` or `src/**/*.ts`; start with `!` to exclude, e.g. `!tests/**`."
                        },
                        "case_insensitive": {
                            "type": "boolean",
                            "description": "Match regardless of case. Default false."
                        },
                        "context": {
                            "type": "integer",
                            "description": "Lines of context before and after each match (content mode), at most 10. Default 0."
                        },
                        "before": {
                            "type": "integer",
                            "description": "Lines of context before each match; overrides `context` for that side."
                        },
                        "after": {
                            "type": "integer",
                            "description": "Lines of context after each match; overrides `context` for that side."
                        },
                        "output_mode": {
                            "type": "string",
                            "enum": ["content", "files", "count"],
                            "description": "`content` (default): matching lines as path:line:text; `files`: matching file names only; `count`: matching lines per file."
                        }
                    },
                    "required": ["pattern"]
                }),
            },
        }
    }
}

impl Default for Grep {
    fn default() -> Self {
        Self::new()
    }
}

/// One search, as the model asked for it.
struct Request {
    pattern: String,
    case_insensitive: bool,
    glob: Option<String>,
    before: usize,
    after: usize,
    mode: Mode,
}

impl Tool for Grep {
    fn is_mutating(&self) -> bool {
        false
    }

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let Some(mode) = Mode::parse(arg_str(&args, "output_mode")) else {
                return invalid(messages::grep_bad_mode(arg_str(&args, "output_mode")));
            };
            let context = arg_u64(&args, "context").unwrap_or(0);
            let side =
                |name: &str| arg_u64(&args, name).unwrap_or(context).min(MAX_CONTEXT) as usize;
            let glob = Some(arg_str(&args, "glob").trim())
                .filter(|g| !g.is_empty())
                .map(str::to_string);
            let request = Request {
                pattern: arg_str(&args, "pattern").to_string(),
                case_insensitive: arg_bool(&args, "case_insensitive"),
                glob,
                before: side("before"),
                after: side("after"),
                mode,
            };
            let shown = shown_path(arg_str(&args, "path"));
            let root = match search_target(&ctx, &shown).await {
                Ok(place) => place,
                Err(output) => return output,
            };
            let scope = Scope::new(&ctx, root, shown);
            let cancel = ctx.cancel.clone();
            blocking(move || grep(&scope, &request, &cancel)).await
        })
    }
}

/// Where a search starts: beneath an allowed root, and, when the path is
/// a symlink, one that stays beneath it (checked in the kernel).
pub(super) async fn search_target(ctx: &ToolContext, shown: &str) -> Result<Located, ToolOutput> {
    let place = target(ctx, shown, Access::Read).await?;
    match place.metadata() {
        Err(e) => match access_failed("search", shown, &e) {
            Some(out) => Err(out),
            None => Ok(place),
        },
        Ok(_) => Ok(place),
    }
}

/// The path argument, or the workspace when none was given.
pub(super) fn shown_path(given: &str) -> String {
    if given.trim().is_empty() {
        DEFAULT_PATH.to_string()
    } else {
        given.to_string()
    }
}

fn invalid(text: String) -> ToolOutput {
    ToolOutput::failed(ErrorKind::InvalidArgs, text)
}

/// Where a search runs and how its paths are shown.
pub(super) struct Scope {
    /// The file or directory to search, beneath `base`.
    pub root: PathBuf,
    /// The allowed root it lies beneath: every file is opened through it,
    /// so a directory swapped for a symlink mid-walk cannot lead a read
    /// outside.
    pub base: Root,
    /// The path as the model wrote it.
    pub shown: String,
    /// The canonical workspace: results are shown relative to it.
    pub workspace: PathBuf,
    /// The agent's data dir (transcripts, spilled outputs), never walked.
    pub data_dir: Option<PathBuf>,
}

impl Scope {
    pub fn new(ctx: &ToolContext, place: Located, shown: String) -> Scope {
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        Scope {
            root: place.path.clone(),
            base: place.root().clone(),
            shown,
            workspace: canonical(&ctx.runtime.workspace),
            data_dir: ctx.runtime.data_dir.as_deref().map(canonical),
        }
    }

    /// A walked path as the model should see it: relative to the
    /// workspace, absolute when it lies elsewhere (the spill dir, an extra
    /// root).
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.workspace) {
            Ok(rel) if rel.as_os_str().is_empty() => DEFAULT_PATH.to_string(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }
}

/// The walk `grep` and `glob` share: `rg`'s rules for ignore files and
/// hidden files, `.gitignore` honoured even outside a git repository (a
/// workspace copied without `.git` still has a `target/` to skip), no
/// symlinks followed, the data dir pruned, entries in path order, and an
/// optional `rg -g`-style glob filter. `Err` is the message for a bad glob.
pub(super) fn search_walk(scope: &Scope, glob: Option<&str>) -> Result<WalkBuilder, String> {
    let mut walk = WalkBuilder::new(&scope.root);
    walk.follow_links(false)
        .hidden(true)
        .require_git(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    if let Some(glob) = glob {
        let mut overrides = OverrideBuilder::new(&scope.root);
        overrides
            .add(glob)
            .map_err(|e| messages::grep_bad_glob(glob, &e.to_string()))?;
        let overrides = overrides
            .build()
            .map_err(|e| messages::grep_bad_glob(glob, &e.to_string()))?;
        walk.overrides(overrides);
    }
    if let Some(data_dir) = scope.data_dir.clone() {
        walk.filter_entry(move |entry| entry.path() != data_dir);
    }
    Ok(walk)
}

/// Opens a walked file beneath the scope's root (`openat2` with
/// `RESOLVE_BENEATH`): a symlink or directory swapped in after the walk
/// listed a regular file cannot redirect the read.
fn open_beneath(scope: &Scope, path: &Path) -> Option<File> {
    let rel = path.strip_prefix(scope.base.path()).ok()?;
    scope.base.open_read(rel).ok().map(|(file, _)| file)
}

fn grep(scope: &Scope, request: &Request, cancel: &CancellationToken) -> ToolOutput {
    if !scope.root.exists() {
        return failed(messages::search_not_found(&scope.shown));
    }
    let matcher = match RegexMatcherBuilder::new()
        .case_insensitive(request.case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(&request.pattern)
    {
        Ok(matcher) => matcher,
        Err(e) => return invalid(messages::grep_bad_regex(&request.pattern, &e.to_string())),
    };
    let walk = match search_walk(scope, request.glob.as_deref()) {
        Ok(walk) => walk,
        Err(text) => return invalid(text),
    };
    let context = request.mode == Mode::Content;
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(HEAP_LIMIT_BYTES))
        .before_context(if context { request.before } else { 0 })
        .after_context(if context { request.after } else { 0 })
        .build();
    let mut results = Results::new(request.mode);
    for entry in walk.build() {
        if cancel.is_cancelled() {
            return cancelled();
        }
        let Ok(entry) = entry else {
            results.unreadable += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let Some(file) = open_beneath(scope, path) else {
            results.unreadable += 1;
            continue;
        };
        results.search_file(&mut searcher, &matcher, &file, &scope.display(path));
    }
    ToolOutput::ok(results.render(&request.pattern, &scope.shown))
}

/// Everything found so far: the lines kept for the output and the counts
/// of what did not fit.
struct Results {
    mode: Mode,
    /// Output lines, in order.
    lines: Vec<String>,
    /// Matching lines past the cap, and the files holding them.
    more_matches: u64,
    more_files: u64,
    /// Files with at least one match.
    files_matched: u64,
    /// Files skipped as binary.
    binary: u64,
    /// Files or directories that could not be read.
    unreadable: u64,
}

impl Results {
    fn new(mode: Mode) -> Results {
        Results {
            mode,
            lines: Vec::new(),
            more_matches: 0,
            more_files: 0,
            files_matched: 0,
            binary: 0,
            unreadable: 0,
        }
    }

    fn cap(&self) -> usize {
        match self.mode {
            Mode::Content => MAX_CONTENT_LINES,
            Mode::Files | Mode::Count => MAX_FILES,
        }
    }

    fn search_file(
        &mut self,
        searcher: &mut Searcher,
        matcher: &RegexMatcher,
        file: &File,
        shown: &str,
    ) {
        let room = self.cap().saturating_sub(self.lines.len());
        let mut sink = FileSink {
            shown,
            mode: self.mode,
            room,
            lines: Vec::new(),
            matches: 0,
            shown_matches: 0,
            binary: false,
            last_line: None,
        };
        if searcher.search_file(matcher, file, &mut sink).is_err() {
            self.unreadable += 1;
            return;
        }
        if sink.binary {
            self.binary += 1;
            return;
        }
        if sink.matches == 0 {
            return;
        }
        self.files_matched += 1;
        match self.mode {
            Mode::Content => {
                let hidden = sink.matches - sink.shown_matches;
                if hidden > 0 {
                    self.more_matches += hidden;
                    self.more_files += 1;
                }
                self.lines.extend(sink.lines);
            }
            Mode::Files | Mode::Count if room == 0 => {
                self.more_matches += sink.matches;
                self.more_files += 1;
            }
            Mode::Files => self.lines.push(shown.to_string()),
            Mode::Count => self.lines.push(format!("{shown}:{}", sink.matches)),
        }
    }

    fn render(self, pattern: &str, shown: &str) -> String {
        let mut out = self.lines;
        if out.is_empty() {
            out.push(messages::grep_no_matches(pattern, shown));
        }
        if self.more_files > 0 {
            out.push(match self.mode {
                Mode::Content => messages::grep_more(self.more_matches, self.more_files),
                Mode::Files | Mode::Count => messages::grep_more_files(self.more_files),
            });
        }
        if self.binary > 0 || self.unreadable > 0 {
            out.push(messages::search_skipped(self.binary, self.unreadable));
        }
        out.join("\n")
    }
}

/// Collects one file's results. They are kept apart until the file is
/// done, so a file found to be binary part-way shows nothing.
struct FileSink<'a> {
    shown: &'a str,
    mode: Mode,
    /// Output lines this file may still add.
    room: usize,
    lines: Vec<String>,
    /// Matching lines in the file, and how many of them are in `lines`.
    matches: u64,
    shown_matches: u64,
    binary: bool,
    /// The number of the last line pushed, to put `--` between groups.
    last_line: Option<u64>,
}

impl FileSink<'_> {
    /// Pushes `path:N:text` (a match) or `path-N-text` (context) when there
    /// is room; returns whether it was pushed.
    fn push(&mut self, number: Option<u64>, bytes: &[u8], separator: char) -> bool {
        if self.lines.len() >= self.room {
            return false;
        }
        let number = number.unwrap_or(0);
        if self.last_line.is_some_and(|last| number > last + 1) {
            if self.lines.len() + 1 >= self.room {
                return false;
            }
            self.lines.push("--".to_string());
        }
        self.last_line = Some(number);
        let text = cut_line(bytes);
        self.lines.push(format!(
            "{}{separator}{number}{separator}{text}",
            self.shown
        ));
        true
    }
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.matches += 1;
        if self.mode == Mode::Content && self.push(mat.line_number(), mat.bytes(), ':') {
            self.shown_matches += 1;
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, io::Error> {
        if matches!(ctx.kind(), SinkContextKind::Before | SinkContextKind::After) {
            self.push(ctx.line_number(), ctx.bytes(), '-');
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A line without its line ending, lossily decoded, cut at
/// [`MAX_LINE_CHARS`] characters with a marker saying how much is left.
fn cut_line(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    let total = text.chars().count();
    if total <= MAX_LINE_CHARS {
        return text.into_owned();
    }
    let mut cut = crate::text::first_chars(&text, MAX_LINE_CHARS).to_string();
    cut.push_str(&messages::line_truncated(total - MAX_LINE_CHARS));
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolCall;
    use crate::protocol::ToolStatus;
    use crate::tools::Registry;
    use crate::tools::builtin::test_support::{call, ctx};
    use std::fs;

    fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    /// A small project: tracked sources, an ignored `target/` full of
    /// matches, a hidden dir and a binary file, all containing `needle`.
    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, ".gitignore", "target/\n*.log\n");
        write(root, "src/main.rs", "fn main() {\n    needle();\n}\n");
        write(
            root,
            "src/lib.rs",
            "pub fn needle() {}\n// Needle in a comment\n",
        );
        write(root, "notes.log", "needle in a log\n");
        write(root, ".hidden/secret.txt", "needle hidden\n");
        for i in 0..300 {
            write(root, &format!("target/debug/build/f{i}.rs"), "needle\n");
        }
        fs::write(root.join("blob.bin"), b"needle\0\x01\x02binary").unwrap();
        dir
    }

    /// The walk listed `sub/secret.txt` as a regular file; then `sub` was
    /// swapped for a symlink to a directory outside. The read is refused.
    #[test]
    fn a_directory_swapped_for_a_symlink_after_the_walk_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.txt", "needle: the secret\n");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
        let root = Root::new(dir.path());
        let scope = Scope {
            root: dir.path().to_path_buf(),
            base: root,
            shown: ".".into(),
            workspace: dir.path().to_path_buf(),
            data_dir: None,
        };
        let listed = dir.path().join("sub/secret.txt");
        assert!(
            std::fs::read_to_string(&listed).is_ok(),
            "the path does lead outside"
        );
        assert!(
            open_beneath(&scope, &listed).is_none(),
            "read outside the root"
        );
        write(dir.path(), "inside.txt", "needle\n");
        assert!(open_beneath(&scope, &dir.path().join("inside.txt")).is_some());
    }

    #[tokio::test]
    async fn honours_gitignore_hidden_and_binary_rules() {
        let dir = project();
        let out = call(dir.path(), "grep", json!({"pattern": "needle"})).await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(
            out.text,
            "src/lib.rs:1:pub fn needle() {}\nsrc/main.rs:2:    needle();\n[1 binary file skipped]"
        );
    }

    #[tokio::test]
    async fn a_large_ignored_target_is_never_searched() {
        let dir = project();
        // target/ holds 300 matching files; none is counted.
        let out = call(
            dir.path(),
            "grep",
            json!({"pattern": "needle", "output_mode": "count"}),
        )
        .await;
        assert_eq!(
            out.text,
            "src/lib.rs:1\nsrc/main.rs:1\n[1 binary file skipped]"
        );
        // Searching inside it explicitly works, as with rg.
        let out = call(
            dir.path(),
            "grep",
            json!({"pattern": "needle", "path": "target/debug/build/f7.rs"}),
        )
        .await;
        assert_eq!(out.text, "target/debug/build/f7.rs:1:needle");
    }

    #[tokio::test]
    async fn case_insensitive_glob_and_modes() {
        let dir = project();
        let root = dir.path();
        let out = call(
            root,
            "grep",
            json!({"pattern": "NEEDLE", "case_insensitive": true, "output_mode": "count"}),
        )
        .await;
        assert_eq!(
            out.text,
            "src/lib.rs:2\nsrc/main.rs:1\n[1 binary file skipped]"
        );
        let out = call(
            root,
            "grep",
            json!({"pattern": "needle", "output_mode": "files", "glob": "*.rs"}),
        )
        .await;
        assert_eq!(out.text, "src/lib.rs\nsrc/main.rs");
        let out = call(
            root,
            "grep",
            json!({"pattern": "needle", "output_mode": "files", "glob": "!main.rs"}),
        )
        .await;
        assert_eq!(out.text, "src/lib.rs\n[1 binary file skipped]");
        let out = call(
            root,
            "grep",
            json!({"pattern": "needle", "path": "src", "output_mode": "files"}),
        )
        .await;
        assert_eq!(out.text, "src/lib.rs\nsrc/main.rs");
        let out = call(
            root,
            "grep",
            json!({"pattern": "x", "output_mode": "lines"}),
        )
        .await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(
            out.text.contains("`content`, `files` or `count`"),
            "{}",
            out.text
        );
        let out = call(root, "grep", json!({"pattern": "x", "glob": "{a"})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(
            out.text.starts_with("Error: the glob `{a` is not valid"),
            "{}",
            out.text
        );
    }

    #[tokio::test]
    async fn context_lines_are_marked_and_groups_separated() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        write(dir.path(), "a.txt", &text);
        let out = call(
            dir.path(),
            "grep",
            json!({"pattern": "^line (5|15)$", "context": 1}),
        )
        .await;
        assert_eq!(
            out.text,
            "a.txt-4-line 4\na.txt:5:line 5\na.txt-6-line 6\n--\na.txt-14-line 14\na.txt:15:line 15\na.txt-16-line 16"
        );
        let out = call(
            dir.path(),
            "grep",
            json!({"pattern": "^line 5$", "context": 3, "before": 0}),
        )
        .await;
        assert_eq!(
            out.text,
            "a.txt:5:line 5\na.txt-6-line 6\na.txt-7-line 7\na.txt-8-line 8"
        );
    }

    #[tokio::test]
    async fn caps_with_the_n_more_line() {
        let dir = tempfile::tempdir().unwrap();
        let text = "hit\n".repeat(150);
        for name in ["a.txt", "b.txt", "c.txt"] {
            write(dir.path(), name, &text);
        }
        let out = call(dir.path(), "grep", json!({"pattern": "hit"})).await;
        let lines: Vec<&str> = out.text.lines().collect();
        // 150 of a and 50 of b: 200 lines, then the note.
        assert_eq!(lines.len(), MAX_CONTENT_LINES + 1, "{}", out.text);
        assert_eq!(lines[0], "a.txt:1:hit");
        assert_eq!(lines[199], "b.txt:50:hit");
        assert_eq!(
            lines[200],
            "[250 more matches in 2 files not shown; narrow the pattern or add a glob/path]"
        );
        for i in 0..MAX_FILES + 7 {
            write(dir.path(), &format!("many/f{i:03}.txt"), "hit\n");
        }
        let out = call(
            dir.path(),
            "grep",
            json!({"pattern": "hit", "path": "many", "output_mode": "files"}),
        )
        .await;
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines.len(), MAX_FILES + 1);
        assert_eq!(lines[0], "many/f000.txt");
        assert_eq!(
            lines[MAX_FILES],
            "[7 more files with matches not shown; narrow the pattern or add a glob/path]"
        );
    }

    #[tokio::test]
    async fn long_lines_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "min.js",
            &format!("{}needle{}\n", "a".repeat(10), "b".repeat(5000)),
        );
        let out = call(dir.path(), "grep", json!({"pattern": "needle"})).await;
        assert!(
            out.text.starts_with("min.js:1:aaaaaaaaaaneedlebbb"),
            "{}",
            out.text
        );
        assert!(
            out.text
                .ends_with("… [line truncated: 4516 more characters]"),
            "{}",
            out.text
        );
        assert!(out.text.chars().count() < MAX_LINE_CHARS + 100);
    }

    #[tokio::test]
    async fn bad_regex_and_no_matches_say_what_to_do() {
        let dir = project();
        let out = call(dir.path(), "grep", json!({"pattern": "fn (main"})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(
            out.text
                .starts_with("Error: `fn (main` is not a valid regular expression"),
            "{}",
            out.text
        );
        assert!(out.text.contains("unclosed group"), "{}", out.text);
        let out = call(
            dir.path(),
            "grep",
            json!({"pattern": "zebra", "path": "src"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Ok);
        assert!(
            out.text.starts_with("No matches for `zebra` in src"),
            "{}",
            out.text
        );
        let out = call(dir.path(), "grep", json!({"pattern": "x", "path": "nope"})).await;
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text.starts_with("Error: nope does not exist."),
            "{}",
            out.text
        );
    }

    #[tokio::test]
    async fn paths_outside_the_workspace_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.txt", "needle\n");
        let dir = project();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        for path in [
            outside.path().to_str().unwrap(),
            "../",
            "out",
            "out/secret.txt",
        ] {
            let out = call(
                dir.path(),
                "grep",
                json!({"pattern": "needle", "path": path}),
            )
            .await;
            assert_eq!(
                out.error_kind,
                Some(ErrorKind::InvalidArgs),
                "{path}: {}",
                out.text
            );
            assert!(
                out.text.contains("outside the workspace"),
                "{path}: {}",
                out.text
            );
        }
        // The walk does not follow the symlink either.
        let out = call(
            dir.path(),
            "grep",
            json!({"pattern": "needle", "output_mode": "files"}),
        )
        .await;
        assert!(!out.text.contains("secret"), "{}", out.text);
    }

    #[tokio::test]
    async fn the_data_dir_is_never_walked() {
        let dir = project();
        write(
            dir.path(),
            "agent-data/sessions/s.jsonl",
            "needle from a transcript\n",
        );
        let mut ctx = ctx(dir.path());
        let mut runtime = (*ctx.runtime).clone();
        runtime.data_dir = Some(dir.path().join("agent-data"));
        ctx.runtime = std::sync::Arc::new(runtime);
        let call = ToolCall {
            id: "c".into(),
            name: "grep".into(),
            arguments: json!({"pattern": "needle", "output_mode": "files"}).to_string(),
        };
        let out = Registry::with_builtins().dispatch(&call, ctx).await;
        assert_eq!(out.text, "src/lib.rs\nsrc/main.rs\n[1 binary file skipped]");
    }

    #[tokio::test]
    async fn a_cancelled_turn_stops_the_search() {
        let dir = project();
        let ctx = ctx(dir.path());
        ctx.cancel.cancel();
        let call = ToolCall {
            id: "c".into(),
            name: "grep".into(),
            arguments: json!({"pattern": "needle"}).to_string(),
        };
        let out = Registry::with_builtins().dispatch(&call, ctx).await;
        assert_eq!(out.error_kind, Some(ErrorKind::Cancelled));
    }
}

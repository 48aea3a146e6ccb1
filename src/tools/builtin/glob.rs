//! `glob`: find files by name pattern, newest first.
//!
//! The walk is `grep`'s ([`search_walk`]): `.gitignore` and hidden-file
//! rules like `rg`'s, no symlinks followed, the data dir never entered.
//! Patterns are `globset` globs. One without `/` matches file names at any
//! depth (`*.rs`); one with `/` matches the path from the search root
//! (`src/**/*.rs`), where `*` stays inside one directory. The newest files
//! come first (by modification time), since the files being worked on are
//! usually the ones wanted, and the list is capped at [`MAX_RESULTS`].

use std::path::Path;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::grep::{Scope, search_target, search_walk, shown_path};
use super::{ToolContext, blocking, cancelled, failed, messages};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::tools::{Tool, ToolSpec, arg_str};

/// Paths listed at most: a hundred names are a few thousand tokens, and a
/// pattern matching more needs narrowing anyway.
pub const MAX_RESULTS: usize = 100;

const DESCRIPTION: &str = "Finds files whose names match a glob pattern and returns their paths, newest first (by modification time). \
A pattern without `/` matches file names at any depth (`*.rs`, `Cargo.toml`); with `/` it matches the path from `path` (`src/**/*.rs`, `tests/*.py`). \
Respects .gitignore and .ignore and skips hidden files, like grep. Use it instead of run_shell with find or ls -R. At most 100 paths are returned.";

/// The `glob` tool.
pub struct Glob {
    spec: ToolSpec,
}

impl Glob {
    pub fn new() -> Self {
        Glob {
            spec: ToolSpec {
                name: "glob".to_string(),
                description: DESCRIPTION.to_string(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "pattern": {
                            "type": "string",
                            "description": "Glob to match, e.g. `*.rs`, `src/**/*.ts`, `**/test_*.py`, `{Cargo,package}.*`."
                        },
                        "path": {
                            "type": "string",
                            "description": "Directory to search in, absolute or relative to the workspace root. Default: the workspace root."
                        }
                    },
                    "required": ["pattern"]
                }),
            },
        }
    }
}

impl Default for Glob {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for Glob {
    fn is_mutating(&self) -> bool {
        false
    }

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let pattern = arg_str(&args, "pattern").trim().to_string();
            let shown = shown_path(arg_str(&args, "path"));
            let root = match search_target(&ctx, &shown).await {
                Ok(place) => place,
                Err(output) => return output,
            };
            let scope = Scope::new(&ctx, root, shown);
            let cancel = ctx.cancel.clone();
            blocking(move || glob(&scope, &pattern, &cancel)).await
        })
    }
}

/// A compiled pattern and what it is matched against.
struct Pattern {
    matcher: GlobMatcher,
    /// Whether it matches the whole relative path (it has a `/`) rather
    /// than the file name.
    whole_path: bool,
}

impl Pattern {
    fn new(text: &str) -> Result<Pattern, String> {
        let text = text.strip_prefix("./").unwrap_or(text);
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .build()
            .map_err(|e| messages::glob_bad_pattern(text, &e.kind().to_string()))?;
        Ok(Pattern {
            matcher: glob.compile_matcher(),
            whole_path: text.contains('/'),
        })
    }

    fn matches(&self, relative: &Path) -> bool {
        if self.whole_path {
            self.matcher.is_match(relative)
        } else {
            relative
                .file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        }
    }
}

fn glob(scope: &Scope, pattern: &str, cancel: &CancellationToken) -> ToolOutput {
    let pattern = match Pattern::new(pattern) {
        Ok(pattern) => pattern,
        Err(text) => return ToolOutput::failed(ErrorKind::InvalidArgs, text),
    };
    match std::fs::metadata(&scope.root) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return failed(messages::list_not_dir(&scope.shown)),
        Err(_) => return failed(messages::search_not_found(&scope.shown)),
    }
    let walk = match search_walk(scope, None) {
        Ok(walk) => walk,
        Err(text) => return ToolOutput::failed(ErrorKind::InvalidArgs, text),
    };
    let mut found: Vec<(SystemTime, String)> = Vec::new();
    let mut unreadable = 0;
    for entry in walk.build() {
        if cancel.is_cancelled() {
            return cancelled();
        }
        let Ok(entry) = entry else {
            unreadable += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let relative = path.strip_prefix(&scope.root).unwrap_or(path);
        if !pattern.matches(relative) {
            continue;
        }
        // A file that vanished since it was listed sorts as the oldest.
        let modified = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        found.push((modified, scope.display(path)));
    }
    ToolOutput::ok(render(
        found,
        unreadable,
        pattern_text(&pattern),
        &scope.shown,
    ))
}

fn pattern_text(pattern: &Pattern) -> &str {
    pattern.matcher.glob().glob()
}

/// Newest first (ties by path), capped at [`MAX_RESULTS`].
fn render(
    mut found: Vec<(SystemTime, String)>,
    unreadable: u64,
    pattern: &str,
    shown: &str,
) -> String {
    if found.is_empty() {
        return messages::glob_no_matches(pattern, shown);
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let more = found.len().saturating_sub(MAX_RESULTS);
    let mut lines: Vec<String> = found
        .into_iter()
        .take(MAX_RESULTS)
        .map(|(_, p)| p)
        .collect();
    if more > 0 {
        lines.push(messages::glob_more(more));
    }
    if unreadable > 0 {
        lines.push(messages::search_skipped(0, unreadable));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolStatus;
    use crate::tools::builtin::test_support::call;
    use std::fs;
    use std::time::Duration;

    fn write(root: &Path, rel: &str, age_secs: u64) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "x").unwrap();
        let when = SystemTime::now() - Duration::from_secs(age_secs);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join(".gitignore"), "target/\n").unwrap();
        write(root, "src/old.rs", 3000);
        write(root, "src/new.rs", 10);
        write(root, "src/deep/mid.rs", 500);
        write(root, "README.md", 100);
        write(root, ".hidden/h.rs", 1);
        for i in 0..200 {
            write(root, &format!("target/debug/gen{i}.rs"), 0);
        }
        dir
    }

    #[tokio::test]
    async fn newest_first_and_gitignore_honoured() {
        let dir = project();
        let out = call(dir.path(), "glob", json!({"pattern": "*.rs"})).await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(out.text, "src/new.rs\nsrc/deep/mid.rs\nsrc/old.rs");
    }

    #[tokio::test]
    async fn patterns_with_a_slash_match_the_path() {
        let dir = project();
        let out = call(dir.path(), "glob", json!({"pattern": "src/*.rs"})).await;
        assert_eq!(out.text, "src/new.rs\nsrc/old.rs");
        let out = call(dir.path(), "glob", json!({"pattern": "**/deep/*.rs"})).await;
        assert_eq!(out.text, "src/deep/mid.rs");
        let out = call(
            dir.path(),
            "glob",
            json!({"pattern": "*.rs", "path": "src/deep"}),
        )
        .await;
        assert_eq!(out.text, "src/deep/mid.rs");
        let out = call(dir.path(), "glob", json!({"pattern": "{README,Cargo}.*"})).await;
        assert_eq!(out.text, "README.md");
    }

    #[tokio::test]
    async fn caps_with_the_n_more_line() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_RESULTS + 3 {
            write(dir.path(), &format!("f{i:03}.txt"), i as u64);
        }
        let out = call(dir.path(), "glob", json!({"pattern": "*.txt"})).await;
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines.len(), MAX_RESULTS + 1);
        assert_eq!(lines[0], "f000.txt");
        assert_eq!(lines[MAX_RESULTS - 1], "f099.txt");
        assert_eq!(
            lines[MAX_RESULTS],
            "[3 more files not shown (oldest); narrow the pattern or give a path]"
        );
    }

    #[tokio::test]
    async fn bad_patterns_no_matches_and_outside_paths() {
        let dir = project();
        let out = call(dir.path(), "glob", json!({"pattern": "src/[a"})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(
            out.text
                .starts_with("Error: the glob `src/[a` is not valid"),
            "{}",
            out.text
        );
        let out = call(dir.path(), "glob", json!({"pattern": "*.py"})).await;
        assert_eq!(out.status, ToolStatus::Ok);
        assert!(
            out.text.starts_with("No files match `*.py` in ."),
            "{}",
            out.text
        );
        let out = call(dir.path(), "glob", json!({"pattern": "*", "path": "/etc"})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(out.text.contains("outside the workspace"), "{}", out.text);
        let out = call(
            dir.path(),
            "glob",
            json!({"pattern": "*", "path": "README.md"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text.contains("is a file, not a directory"),
            "{}",
            out.text
        );
    }
}

//! Model-facing texts of the built-in tools: failures and the fixed parts of
//! results. Like `tools::messages`, these are an interface: the model reads
//! them to decide its next step, and tests assert on them. Each failure says
//! what was wrong and what to do next.
//!
//! Paths are shown as the model wrote them, since that is the name it knows.

use std::io;

use crate::runtime::fs::human_size;

// ---- shared by the file tools ----

/// `Runtime::locate` (or the access beneath the root) refused the path.
pub fn bad_path(path: &str, reason: &str) -> String {
    format!("Error: cannot use the path `{path}`: {reason}. Call the tool again with a valid path.")
}

/// An IO error with no more specific advice.
pub fn io_failed(action: &str, path: &str, err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::PermissionDenied => format!(
            "Error: cannot {action} {path}: permission denied. Check the permissions with run_shell (`ls -l`), or choose another path."
        ),
        _ => format!("Error: cannot {action} {path}: {err}."),
    }
}

/// A FIFO, device or socket: refused before anything could block on it.
pub fn not_regular(action: &str, path: &str, kind: &str) -> String {
    format!(
        "Error: {path} is a {kind}, not a regular file, so the file tools will not {action} it (that could block or reach a device). Use run_shell if you really need it."
    )
}

/// A file with several hard links may be the same file as one outside the
/// workspace, so it is not read.
pub fn read_hard_linked(path: &str, links: u64) -> String {
    format!(
        "Error: {path} has {links} hard links, so it may be the same file as one outside the workspace; the file tools do not read hard-linked files. Use run_shell (`cat {path}`) if you need its contents."
    )
}

/// A write beneath the agent's own directories (data, config, spill).
pub fn write_protected(path: &str, dir: &str) -> String {
    format!(
        "Error: {path} lies in {dir}, which belongs to the agent (saved outputs, sessions, scripts) and is read-only to tools. Write inside the workspace instead."
    )
}

/// A write inside a repository's `.git`: its config and hooks run
/// programs whenever git runs, so file tools never write there.
pub fn write_git_metadata(path: &str) -> String {
    format!(
        "Error: {path} is inside a repository's .git, which file tools never write: its config and hooks run programs whenever git runs. Change the work tree instead; git commands (commit, branch, ...) keep .git up to date."
    )
}

/// Any other refusal or failure of a file access.
pub fn access_failed(action: &str, path: &str, why: &str) -> String {
    format!("Error: cannot {action} {path}: {why}.")
}

/// The blocking task running a file operation died (a bug, not the model's
/// fault).
pub fn task_failed(err: &str) -> String {
    format!(
        "Error: the tool failed internally ({err}). Try the call again; if it keeps failing, use run_shell instead."
    )
}

// ---- read_file ----

pub fn read_not_found(path: &str) -> String {
    format!(
        "Error: {path} does not exist. Use list_dir on its directory to see which files are there, then call read_file with an existing path."
    )
}

pub fn read_is_dir(path: &str) -> String {
    format!("Error: {path} is a directory; use list_dir to see its entries.")
}

/// Why a file was judged binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryReason {
    NulBytes,
    NotUtf8,
}

pub fn read_binary(path: &str, size: u64, reason: BinaryReason) -> String {
    let why = match reason {
        BinaryReason::NulBytes => "it contains NUL bytes",
        BinaryReason::NotUtf8 => "most of it is not valid UTF-8",
    };
    format!(
        "Error: {path} looks like a binary file ({}; {why}), and read_file only shows text. To inspect it, use run_shell with `file {path}` or `xxd {path} | head`.",
        human_size(size)
    )
}

pub fn read_offset_past_end(path: &str, offset: u64, total: u64) -> String {
    let lines = plural(total, "line", "lines");
    format!(
        "Error: offset {offset} is past the end of {path}, which has {total} {lines}. Call read_file with an offset between 1 and {total}."
    )
}

pub const READ_EMPTY_FILE: &str = "(empty file)";

/// Marker replacing the end of a line that is too long to show whole.
pub fn line_truncated(more_chars: usize) -> String {
    format!("… [line truncated: {more_chars} more characters]")
}

/// Last line of a read that did not reach the end of the file: what is
/// left ("2 more lines, 4–5"), and the next call only when the read was
/// stopped by the tool (its default limit or the output cap) rather than
/// by the model's own `limit` — a hint that tells a small model what to do
/// next lures it into paging on when it asked for a few lines on purpose.
pub fn read_more_remains(
    first: u64,
    last: u64,
    total: u64,
    byte_cap_hit: Option<usize>,
    suggest_next: bool,
) -> String {
    let why = match byte_cap_hit {
        Some(cap) => format!(" (output limit of {} reached)", human_size(cap as u64)),
        None => String::new(),
    };
    let left = total - last;
    let rest = if left == 1 {
        format!("1 more line, {total}")
    } else {
        format!("{left} more lines, {}–{total}", last + 1)
    };
    let next = if suggest_next {
        format!("; call read_file with offset={} to read on", last + 1)
    } else {
        String::new()
    };
    format!("[lines {first}-{last} of {total} shown{why}; {rest}{next}]")
}

// ---- write_file ----

pub fn write_is_dir(path: &str) -> String {
    format!(
        "Error: {path} is a directory, so write_file cannot replace it. Give the path of a file inside it instead."
    )
}

pub fn write_done(path: &str, bytes: usize, existed: bool) -> String {
    let what = if existed {
        "replaced the existing file"
    } else {
        "new file"
    };
    let unit = plural(bytes as u64, "byte", "bytes");
    format!("Wrote {bytes} {unit} to {path} ({what})")
}

// ---- edit_file ----

pub const EDIT_EMPTY_OLD: &str = "Error: old_string is empty. edit_file replaces existing text; to create a file or replace its whole content, use write_file.";

pub const EDIT_SAME_STRINGS: &str = "Error: old_string and new_string are identical, so the edit would change nothing. Pass the new text in new_string.";

pub fn edit_not_found_file(path: &str) -> String {
    format!(
        "Error: {path} does not exist. To create a new file use write_file; to find the file, use list_dir on its directory."
    )
}

pub fn edit_is_dir(path: &str) -> String {
    format!(
        "Error: {path} is a directory; edit_file edits files. Use list_dir to find the file to edit."
    )
}

pub fn edit_not_utf8(path: &str) -> String {
    format!(
        "Error: {path} is not valid UTF-8 text, so edit_file cannot edit it without damaging it. Use run_shell (for example `sed -i`) or rewrite it with write_file."
    )
}

pub fn edit_no_match(path: &str, looks_numbered: bool) -> String {
    let numbered = if looks_numbered {
        " old_string seems to start its lines with the line numbers that read_file prints; leave those prefixes (number and tab) out."
    } else {
        ""
    };
    format!(
        "Error: old_string was not found in {path} (0 occurrences). The file may have changed since you read it, or the whitespace or indentation differs.{numbered} Call read_file on {path} again and copy the exact text into old_string."
    )
}

pub fn edit_many_matches(path: &str, count: usize) -> String {
    format!(
        "Error: old_string matches {count} times in {path}, so the edit is ambiguous. Add surrounding lines to old_string to make it unique, or set replace_all to true to replace every occurrence."
    )
}

pub fn edit_done(path: &str, count: usize) -> String {
    let unit = plural(count as u64, "occurrence", "occurrences");
    format!("Edited {path}: replaced {count} {unit}")
}

/// Shown between separate regions of an edit snippet.
pub const SNIPPET_GAP: &str = "   ...";

pub fn snippet_cut(max_lines: usize) -> String {
    format!("   ... [snippet cut at {max_lines} lines; use read_file to see the rest]")
}

// ---- list_dir ----

pub fn list_not_found(path: &str) -> String {
    format!(
        "Error: {path} does not exist. Use list_dir on a parent directory (or the workspace root, path \".\") to find the right path."
    )
}

pub fn list_not_dir(path: &str) -> String {
    format!("Error: {path} is a file, not a directory; use read_file to read it.")
}

pub const LIST_EMPTY_DIR: &str = "(empty directory)";

pub fn list_more(more: usize, path: &str) -> String {
    let entries = plural(more as u64, "entry", "entries");
    format!(
        "[{more} more {entries} not shown; narrow the listing with run_shell, e.g. `ls {path} | grep PATTERN`]"
    )
}

// ---- run_shell ----

pub const SHELL_EMPTY_COMMAND: &str =
    "Error: command is empty. Pass the shell command line to run in `command`.";

pub fn shell_spawn_failed(err: &io::Error) -> String {
    format!(
        "Error: the command could not be started: {err}. Nothing ran. Check that the command exists and try again."
    )
}

pub const SHELL_NO_OUTPUT: &str = "(no output)";

pub const SHELL_STDERR_HEADER: &str = "[stderr]";

/// A stream was larger than the output cap and saved whole to a file.
pub fn shell_spilled(stream: &str, total_bytes: u64, file: &str) -> String {
    format!(
        "[{stream} was {} and was cut in the middle; the whole of it is saved in {file}: read parts with read_file (offset/limit) or search it with grep]",
        human_size(total_bytes)
    )
}

/// A stream so large that the spill cap dropped the middle of its file too.
pub fn shell_spilled_capped(stream: &str, total_bytes: u64, file: &str, dropped: u64) -> String {
    format!(
        "[{stream} was {} and was cut in the middle; {file} keeps its start and end ({} of the middle passed the spill cap and were dropped): read parts with read_file (offset/limit) or search it with grep]",
        human_size(total_bytes),
        human_size(dropped)
    )
}

pub fn shell_exit_code(code: i32) -> String {
    format!("[exit code: {code}]")
}

pub fn shell_signal(signal: i32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("[killed by signal {signal} ({name})]"),
        None => format!("[killed by signal {signal}]"),
    }
}

pub const SHELL_NO_STATUS: &str = "[the command ended without an exit code or signal]";

pub fn shell_timed_out(timeout_secs: u64, max_secs: u64) -> String {
    let next = if timeout_secs < max_secs {
        format!(
            "Re-run with a larger timeout (max {max_secs}) or run it in the background with output redirected to a file"
        )
    } else {
        "It already had the maximum timeout, so run it in the background with output redirected to a file (`cmd > log 2>&1 &`) and check the file".to_string()
    };
    format!(
        "[timed out after {timeout_secs} s: the command and its process group were killed; the output above is partial. {next}]"
    )
}

pub fn shell_inactive(inactivity_secs: u64) -> String {
    format!(
        "[killed after {inactivity_secs} s without output: the command looked hung, so it and its process group were killed; the output above is partial. stdin is closed, so if it waits for input, pass a non-interactive flag or pipe the input in; if it is just slow and silent, run it in the background with output redirected to a file]"
    )
}

pub const SHELL_CANCELLED: &str = "[cancelled by the person]";

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

// ---- grep and glob ----

/// The path to search does not exist.
pub fn search_not_found(path: &str) -> String {
    format!(
        "Error: {path} does not exist. Use list_dir (or glob) to find the right path, or leave `path` out to search the whole workspace."
    )
}

pub fn grep_bad_regex(pattern: &str, err: &str) -> String {
    format!(
        "Error: `{pattern}` is not a valid regular expression (Rust regex syntax): {err}\nFix the pattern and call grep again; escape special characters such as ( [ {{ . * + ? with a backslash to match them literally."
    )
}

pub fn grep_bad_glob(glob: &str, err: &str) -> String {
    format!(
        "Error: the glob `{glob}` is not valid: {err}. Use a pattern such as `*.rs`, `src/**/*.ts`, or `!tests/**` to exclude."
    )
}

pub fn grep_bad_mode(mode: &str) -> String {
    format!(
        "Error: output_mode `{mode}` is not known; use `content`, `files` or `count` (or leave it out for `content`)."
    )
}

pub fn grep_no_matches(pattern: &str, path: &str) -> String {
    format!(
        "No matches for `{pattern}` in {path} (files ignored by .gitignore, hidden files and binary files are not searched). Try a broader pattern, case_insensitive, or another path."
    )
}

/// Last line of a `content` search past its cap.
pub fn grep_more(matches: u64, files: u64) -> String {
    let unit = plural(matches, "match", "matches");
    let in_files = plural(files, "file", "files");
    format!(
        "[{matches} more {unit} in {files} {in_files} not shown; narrow the pattern or add a glob/path]"
    )
}

/// Last line of a `files` or `count` search past its cap.
pub fn grep_more_files(files: u64) -> String {
    let unit = plural(files, "file", "files");
    format!("[{files} more {unit} with matches not shown; narrow the pattern or add a glob/path]")
}

/// What a search left out besides ignored files.
pub fn search_skipped(binary: u64, unreadable: u64) -> String {
    let mut parts = Vec::new();
    if binary > 0 {
        parts.push(format!(
            "{binary} binary {} skipped",
            plural(binary, "file", "files")
        ));
    }
    if unreadable > 0 {
        parts.push(format!(
            "{unreadable} {} could not be read",
            plural(unreadable, "entry", "entries")
        ));
    }
    format!("[{}]", parts.join("; "))
}

pub fn glob_bad_pattern(pattern: &str, err: &str) -> String {
    format!(
        "Error: the glob `{pattern}` is not valid: {err}. Use a pattern such as `*.rs` (any depth), `src/*.rs` (one directory) or `**/test_*.py`."
    )
}

pub fn glob_no_matches(pattern: &str, path: &str) -> String {
    format!(
        "No files match `{pattern}` in {path} (files ignored by .gitignore and hidden files are not listed). A pattern without `/` matches file names at any depth; one with `/` matches the path from {path}."
    )
}

/// Last line of a glob past its cap.
pub fn glob_more(more: usize) -> String {
    let unit = plural(more as u64, "file", "files");
    format!("[{more} more {unit} not shown (oldest); narrow the pattern or give a path]")
}

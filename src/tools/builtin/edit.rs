//! `edit_file`: replace an exact string in a file.
//!
//! Matching is literal (no regex, no `$` expansion): the text is spliced at
//! the match positions. A CRLF file edited with `\n` strings keeps its CRLF
//! endings. The result shows the edited region with line numbers, so the
//! model can check the edit without reading the file again.

use std::io::Read;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::read::{number_line, open_for_read};
use super::write::write_failed;
use super::{Access, ToolContext, blocking, failed, messages, target};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::runtime::beneath::{AccessError, Located};
use crate::tools::{Tool, ToolSpec, arg_bool, arg_str};

/// Unchanged lines shown before and after each edited region.
const SNIPPET_CONTEXT_LINES: usize = 3;

/// Most lines of the snippet: enough to check a typical edit, small enough
/// that a large `replace_all` does not echo the file back.
const SNIPPET_MAX_LINES: usize = 20;

const DESCRIPTION: &str = "Replaces exact text in a file. old_string must match the file exactly, including whitespace and indentation \
(copy it from read_file output without the line-number prefix), and must occur exactly once unless replace_all is true; \
include enough surrounding lines to make it unique. Matching is literal: no regex, no escapes. \
To create a file or rewrite it whole, use write_file.";

/// The `edit_file` tool.
pub struct EditFile {
    spec: ToolSpec,
}

impl EditFile {
    pub fn new() -> Self {
        EditFile {
            spec: ToolSpec {
                name: "edit_file".to_string(),
                description: DESCRIPTION.to_string(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Path of the file to edit, absolute or relative to the workspace root."
                        },
                        "old_string": {
                            "type": "string",
                            "description": "The exact text to replace. Must be unique in the file unless replace_all is true."
                        },
                        "new_string": {
                            "type": "string",
                            "description": "The text to put in its place; must differ from old_string. Empty deletes old_string."
                        },
                        "replace_all": {
                            "type": "boolean",
                            "description": "Replace every occurrence of old_string. Default false."
                        }
                    },
                    "required": ["path", "old_string", "new_string"]
                }),
            },
        }
    }
}

impl Default for EditFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for EditFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let old = arg_str(&args, "old_string").to_string();
            let new = arg_str(&args, "new_string").to_string();
            if old.is_empty() {
                return ToolOutput::failed(ErrorKind::InvalidArgs, messages::EDIT_EMPTY_OLD);
            }
            if old == new {
                return ToolOutput::failed(ErrorKind::InvalidArgs, messages::EDIT_SAME_STRINGS);
            }
            let shown = arg_str(&args, "path").to_string();
            // Placed first, asked about once the change (and its diff) is
            // known, so the question can show it.
            let place = match target(&ctx, &shown, Access::Read).await {
                Ok(place) => place,
                Err(output) => return output,
            };
            let replace_all = arg_bool(&args, "replace_all");
            let (p, s) = (place.clone(), shown.clone());
            let planned =
                tokio::task::spawn_blocking(move || prepare(&p, &s, &old, &new, replace_all)).await;
            let (edit, diff) = match planned {
                Ok(Ok(planned)) => planned,
                Ok(Err(output)) => return output,
                Err(e) => {
                    return failed(messages::io_failed(
                        "edit",
                        &shown,
                        &std::io::Error::other(e),
                    ));
                }
            };
            if let Err(text) = ctx
                .runtime
                .check_write_showing(&place.path, diff.clone())
                .await
            {
                return ToolOutput::failed(ErrorKind::Denied, text);
            }
            blocking(move || apply(&place, &shown, &edit).with_diff(diff)).await
        })
    }
}

/// Reads the file and plans the edit: the new content and its diff, or
/// the output that ends the call.
fn prepare(
    place: &Located,
    shown: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(Edit, Option<String>), ToolOutput> {
    let mut file = match place.metadata() {
        Ok(meta) if meta.is_dir() => return Err(failed(messages::edit_is_dir(shown))),
        Err(AccessError::NotFound) => return Err(failed(messages::edit_not_found_file(shown))),
        _ => open_for_read(place, shown)?.0,
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.read_to_end(&mut bytes) {
        return Err(failed(messages::io_failed("read", shown, &e)));
    }
    let Ok(content) = String::from_utf8(bytes) else {
        return Err(failed(messages::edit_not_utf8(shown)));
    };
    let edit = match plan_edit(&content, old, new, replace_all) {
        Ok(edit) => edit,
        Err(Mismatch::NotFound) => {
            return Err(failed(messages::edit_no_match(
                shown,
                looks_line_numbered(old),
            )));
        }
        Err(Mismatch::Many(count)) => {
            return Err(failed(messages::edit_many_matches(shown, count)));
        }
    };
    let diff = crate::tools::diff::unified(shown, Some(&content), &edit.content);
    Ok((edit, diff))
}

/// Writes the planned edit and says what changed.
fn apply(place: &Located, shown: &str, edit: &Edit) -> ToolOutput {
    if let Err(e) = place.write(edit.content.as_bytes()) {
        return write_failed(shown, &e);
    }
    let mut text = messages::edit_done(shown, edit.regions.len());
    text.push('\n');
    text.push_str(&snippet(&edit.content, &edit.regions));
    ToolOutput::ok(text)
}

/// Why an edit cannot be made.
#[derive(Debug, PartialEq, Eq)]
enum Mismatch {
    NotFound,
    /// Several matches and `replace_all` was not set.
    Many(usize),
}

/// A planned edit: the new content and where the replacements landed in it.
#[derive(Debug)]
struct Edit {
    content: String,
    /// Byte ranges of the inserted `new_string`s in `content`.
    regions: Vec<(usize, usize)>,
}

/// Works out the edit without touching the disk.
fn plan_edit(content: &str, old: &str, new: &str, replace_all: bool) -> Result<Edit, Mismatch> {
    // The model writes `\n`; a CRLF file should stay CRLF. Fall back to the
    // strings as given when the converted ones do not match (a file with
    // mixed endings may have LF lines).
    if content.contains("\r\n") && !old.contains("\r\n") && !new.contains("\r\n") {
        let (crlf_old, crlf_new) = (to_crlf(old), to_crlf(new));
        if content.contains(crlf_old.as_str()) {
            return splice(content, &crlf_old, &crlf_new, replace_all);
        }
    }
    splice(content, old, new, replace_all)
}

fn splice(content: &str, old: &str, new: &str, replace_all: bool) -> Result<Edit, Mismatch> {
    let starts: Vec<usize> = content.match_indices(old).map(|(i, _)| i).collect();
    match starts.len() {
        0 => return Err(Mismatch::NotFound),
        1 => {}
        n if !replace_all => return Err(Mismatch::Many(n)),
        _ => {}
    }
    let mut out = String::with_capacity(content.len() + starts.len() * new.len());
    let mut regions = Vec::with_capacity(starts.len());
    let mut copied = 0;
    for start in starts {
        out.push_str(content.get(copied..start).unwrap_or(""));
        let at = out.len();
        out.push_str(new);
        regions.push((at, out.len()));
        copied = start + old.len();
    }
    out.push_str(content.get(copied..).unwrap_or(""));
    Ok(Edit {
        content: out,
        regions,
    })
}

/// `\n` line endings to `\r\n`, leaving existing `\r\n` alone.
fn to_crlf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// Whether every line of `s` starts like `read_file` output (`  12\t`), a
/// common reason for a failed match.
fn looks_line_numbered(s: &str) -> bool {
    s.lines().all(|line| {
        let digits = line.trim_start_matches(' ');
        let after = digits.trim_start_matches(|c: char| c.is_ascii_digit());
        after.len() < digits.len() && after.starts_with('\t')
    })
}

/// The edited regions of `content` with a few lines of context, numbered
/// like `read_file` output and capped at [`SNIPPET_MAX_LINES`].
fn snippet(content: &str, regions: &[(usize, usize)]) -> String {
    let lines: Vec<&str> = content.split_terminator('\n').collect();
    if lines.is_empty() {
        return messages::READ_EMPTY_FILE.to_string();
    }
    let last_index = lines.len() - 1;
    let line_of = |byte: usize| {
        crate::text::prefix(content, byte)
            .matches('\n')
            .count()
            .min(last_index)
    };

    // Line ranges (0-based, inclusive) to show, merged when they touch.
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &(start, end) in regions {
        let first = line_of(start);
        // A replacement ending in `\n` ends on the line before `end`.
        let last = line_of(if end > start { end - 1 } else { start });
        let from = first.saturating_sub(SNIPPET_CONTEXT_LINES);
        let to = (last + SNIPPET_CONTEXT_LINES).min(last_index);
        match ranges.last_mut() {
            Some(prev) if from <= prev.1 + 1 => prev.1 = prev.1.max(to),
            _ => ranges.push((from, to)),
        }
    }

    let mut out = Vec::new();
    let mut shown = 0;
    for (i, &(from, to)) in ranges.iter().enumerate() {
        if i > 0 {
            out.push(messages::SNIPPET_GAP.to_string());
        }
        for (index, line) in lines.iter().enumerate().take(to + 1).skip(from) {
            if shown == SNIPPET_MAX_LINES {
                out.push(messages::snippet_cut(SNIPPET_MAX_LINES));
                return out.join("\n");
            }
            out.push(number_line(index as u64 + 1, line));
            shown += 1;
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolStatus;
    use crate::tools::builtin::test_support::call;

    use std::path::Path;

    async fn edit(dir: &Path, args: Value) -> ToolOutput {
        call(dir, "edit_file", args).await
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    #[tokio::test]
    async fn replaces_exactly_once_and_shows_the_region() {
        let dir = tempfile::tempdir().unwrap();
        let content: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("a.txt"), content).unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "a.txt", "old_string": "line 5\n", "new_string": "five\nFIVE\n"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(
            out.text,
            "Edited a.txt: replaced 1 occurrence\n     2\tline 2\n     3\tline 3\n     4\tline 4\n     5\tfive\n     6\tFIVE\n     7\tline 6\n     8\tline 7\n     9\tline 8"
        );
        assert!(read(dir.path(), "a.txt").contains("line 4\nfive\nFIVE\nline 6\n"));
    }

    #[tokio::test]
    async fn not_found_says_so_with_a_zero_count() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "fn main() {}\n").unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "a.txt", "old_string": "fn  main", "new_string": "fn start"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text
                .contains("old_string was not found in a.txt (0 occurrences)"),
            "{}",
            out.text
        );
        assert!(
            out.text.contains("whitespace or indentation differs"),
            "{}",
            out.text
        );
        assert!(
            out.text.contains("Call read_file on a.txt again"),
            "{}",
            out.text
        );
        assert!(!out.text.contains("line numbers"), "{}", out.text);
        assert_eq!(read(dir.path(), "a.txt"), "fn main() {}\n");

        let out = edit(
            dir.path(),
            json!({"path": "a.txt", "old_string": "     1\tfn main() {}", "new_string": "x"}),
        )
        .await;
        assert!(
            out.text
                .contains("leave those prefixes (number and tab) out"),
            "{}",
            out.text
        );
    }

    #[tokio::test]
    async fn several_matches_need_context_or_replace_all() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "x = 1\ny = 1\nz = 1\n").unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "a.txt", "old_string": "= 1", "new_string": "= 2"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text.contains("old_string matches 3 times in a.txt"),
            "{}",
            out.text
        );
        assert!(out.text.contains("set replace_all to true"), "{}", out.text);

        let out = edit(
            dir.path(),
            json!({"path": "a.txt", "old_string": "= 1", "new_string": "= 2", "replace_all": true}),
        )
        .await;
        assert!(
            out.text
                .starts_with("Edited a.txt: replaced 3 occurrences\n"),
            "{}",
            out.text
        );
        assert_eq!(read(dir.path(), "a.txt"), "x = 2\ny = 2\nz = 2\n");
    }

    #[tokio::test]
    async fn dollar_signs_are_literal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.sh"), "echo NAME\n").unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "a.sh", "old_string": "NAME", "new_string": "$1 $& ${x} $$"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(read(dir.path(), "a.sh"), "echo $1 $& ${x} $$\n");
    }

    #[tokio::test]
    async fn crlf_files_stay_crlf() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.txt"), "a\r\nb\r\nc\r\n").unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "w.txt", "old_string": "a\nb\n", "new_string": "A\nB1\nB2\n"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(read(dir.path(), "w.txt"), "A\r\nB1\r\nB2\r\nc\r\n");
        assert!(!out.text.contains('\r'), "{:?}", out.text);
    }

    #[tokio::test]
    async fn refuses_empty_and_identical_strings_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "abc").unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "a.txt", "old_string": "", "new_string": "x"}),
        )
        .await;
        assert_eq!(out.text, messages::EDIT_EMPTY_OLD);
        let out = edit(
            dir.path(),
            json!({"path": "a.txt", "old_string": "b", "new_string": "b"}),
        )
        .await;
        assert_eq!(out.text, messages::EDIT_SAME_STRINGS);
        let out = edit(
            dir.path(),
            json!({"path": "new.txt", "old_string": "b", "new_string": "c"}),
        )
        .await;
        assert!(
            out.text.contains("To create a new file use write_file"),
            "{}",
            out.text
        );
        let out = edit(dir.path(), json!({"path": "a.txt", "old_string": "b"})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
    }

    #[tokio::test]
    async fn keeps_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sh");
        std::fs::write(&path, "echo a\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "run.sh", "old_string": "a", "new_string": "b"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
    }

    #[test]
    fn mixed_endings_fall_back_to_the_given_strings() {
        let edit = plan_edit("a\r\nb\nc\n", "b\nc", "B\nC", false).unwrap();
        assert_eq!(edit.content, "a\r\nB\nC\n");
    }

    #[test]
    fn snippets_merge_nearby_regions_and_are_capped() {
        let content: String = (1..=100).map(|i| format!("{i}\n")).collect();
        let edit = plan_edit(&content, "\n5", "\nfive", true).unwrap();
        // "\n5" matches before 5 and 50..59: lines 5 and 50-59.
        assert_eq!(edit.regions.len(), 11);
        let s = snippet(&edit.content, &edit.regions);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "     1\t1");
        assert_eq!(lines[4], "     5\tfive");
        assert_eq!(lines[7], "     8\t8");
        assert_eq!(lines[8], messages::SNIPPET_GAP);
        assert_eq!(lines[9], "    46\t46");
        assert_eq!(lines.len(), SNIPPET_MAX_LINES + 2);
        assert_eq!(lines[21], messages::snippet_cut(SNIPPET_MAX_LINES));
    }

    #[test]
    fn deleting_the_last_line_still_shows_context() {
        let edit = plan_edit("a\nb\nc\n", "c\n", "", false).unwrap();
        assert_eq!(edit.content, "a\nb\n");
        assert_eq!(
            snippet(&edit.content, &edit.regions),
            "     1\ta\n     2\tb"
        );
    }
}

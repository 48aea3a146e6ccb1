//! Unified diffs of what a file tool changes, for the person (shown after
//! an edit or write, and in the approval question before one). The model
//! never reads them: its result text says what changed on its own terms.

use similar::TextDiff;

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// Most lines of one diff shown; the rest is counted in a last line.
pub const MAX_DIFF_LINES: usize = 120;

/// Old content larger than this is not diffed (the diff would say little
/// and cost much).
pub const MAX_DIFF_INPUT: usize = 512 * 1024;

/// The unified diff of `old` → `new` for `path` (`old` is `None` for a
/// new file), at most [`MAX_DIFF_LINES`] lines; `None` when nothing
/// changed or the input is too large. Pure: text in, text out.
pub fn unified(path: &str, old: Option<&str>, new: &str) -> Option<String> {
    let before = old.unwrap_or("");
    if before == new || before.len() > MAX_DIFF_INPUT || new.len() > MAX_DIFF_INPUT {
        return None;
    }
    let diff = TextDiff::from_lines(before, new);
    let from = if old.is_some() {
        format!("a/{path}")
    } else {
        "/dev/null".to_string()
    };
    let text = diff
        .unified_diff()
        .context_radius(CONTEXT)
        .header(&from, &format!("b/{path}"))
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines
        .iter()
        .take(MAX_DIFF_LINES)
        .map(|l| l.to_string())
        .collect();
    if lines.len() > MAX_DIFF_LINES {
        out.push(format!(
            "… {} more diff lines",
            lines.len() - MAX_DIFF_LINES
        ));
    }
    Some(out.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_is_a_minus_and_a_plus_with_context() {
        let old = "a\nb\nc\nd\n";
        let new = "a\nb\nC\nd\n";
        let diff = unified("src/x.rs", Some(old), new).unwrap();
        assert_eq!(
            diff,
            "--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1,4 +1,4 @@\n a\n b\n-c\n+C\n d"
        );
    }

    #[test]
    fn a_new_file_is_all_additions_and_nothing_changed_is_none() {
        let diff = unified("n.txt", None, "one\ntwo\n").unwrap();
        assert!(diff.starts_with("--- /dev/null\n+++ b/n.txt\n"), "{diff}");
        assert!(diff.ends_with("+one\n+two"), "{diff}");
        assert_eq!(unified("same", Some("x\n"), "x\n"), None);
    }

    #[test]
    fn a_long_diff_is_cut_with_a_count() {
        let new: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let diff = unified("big", None, &new).unwrap();
        assert_eq!(diff.lines().count(), MAX_DIFF_LINES + 1);
        assert!(diff.ends_with("more diff lines"), "{diff}");
    }
}

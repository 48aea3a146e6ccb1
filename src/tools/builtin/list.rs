//! `list_dir`: the entries of one directory, sorted by name, with kinds and
//! sizes. Not recursive: a recursive listing of a real project is too large
//! to be useful, and `glob` (by name) or `grep` (by content) does it better.

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::{Access, ToolContext, access_failed, blocking, failed, messages, target};
use crate::protocol::ToolOutput;
use crate::runtime::beneath::{self, AccessError, EntryKind, Located};
use crate::runtime::fs::human_size;
use crate::tools::{Tool, ToolSpec, arg_str};

/// Entries shown at most. A directory of generated files can hold tens of
/// thousands; a thousand names is already more than a model can use.
pub const MAX_ENTRIES: usize = 1000;

/// The directory listed when the model gives no path.
const DEFAULT_PATH: &str = ".";

const DESCRIPTION: &str = "Lists the entries of one directory, sorted by name: `name/  (dir)`, `name  (file, SIZE)`, `name -> target  (symlink)`. \
Not recursive; to find files by name at any depth use glob, to search their contents use grep.";

/// The `list_dir` tool.
pub struct ListDir {
    spec: ToolSpec,
}

impl ListDir {
    pub fn new() -> Self {
        ListDir {
            spec: ToolSpec {
                name: "list_dir".to_string(),
                description: DESCRIPTION.to_string(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Directory to list, absolute or relative to the workspace root. Default: the workspace root."
                        }
                    },
                    "required": []
                }),
            },
        }
    }
}

impl Default for ListDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for ListDir {
    fn is_mutating(&self) -> bool {
        false
    }

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let given = arg_str(&args, "path");
            let shown = if given.trim().is_empty() {
                DEFAULT_PATH.to_string()
            } else {
                given.to_string()
            };
            let place = match target(&ctx, &shown, Access::Read).await {
                Ok(place) => place,
                Err(output) => return output,
            };
            blocking(move || list_dir(&place, &shown)).await
        })
    }
}

/// One directory entry, ready to print.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    name: String,
    kind: Kind,
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File(u64),
    Symlink(String),
    /// A socket, pipe or device.
    Other,
}

impl Entry {
    fn line(&self) -> String {
        match &self.kind {
            Kind::Dir => format!("{}/  (dir)", self.name),
            Kind::File(size) => format!("{}  (file, {})", self.name, human_size(*size)),
            Kind::Symlink(target) => format!("{} -> {target}  (symlink)", self.name),
            Kind::Other => format!("{}  (other)", self.name),
        }
    }
}

fn list_dir(place: &Located, shown: &str) -> ToolOutput {
    let refused = |e: AccessError| match e {
        AccessError::NotFound => failed(messages::list_not_found(shown)),
        AccessError::NotDir => failed(messages::list_not_dir(shown)),
        other => access_failed("list", shown, &other)
            .unwrap_or_else(|| failed(messages::access_failed("list", shown, &other.to_string()))),
    };
    match place.metadata() {
        Ok(meta) if !meta.is_dir() => return failed(messages::list_not_dir(shown)),
        Ok(_) => {}
        Err(e) => return refused(e),
    }
    match place.read_dir() {
        Ok(entries) => ToolOutput::ok(format_listing(
            entries.into_iter().map(describe).collect(),
            shown,
        )),
        Err(e) => refused(e),
    }
}

/// An entry as the listing shows it (described without following
/// symlinks).
fn describe(entry: beneath::Entry) -> Entry {
    let kind = match entry.kind {
        EntryKind::Dir => Kind::Dir,
        EntryKind::File(size) => Kind::File(size),
        EntryKind::Symlink(target) => Kind::Symlink(target),
        EntryKind::Other => Kind::Other,
    };
    Entry {
        name: entry.name,
        kind,
    }
}

/// Sorts by name and prints at most [`MAX_ENTRIES`] entries.
fn format_listing(mut entries: Vec<Entry>, shown: &str) -> String {
    if entries.is_empty() {
        return messages::LIST_EMPTY_DIR.to_string();
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let more = entries.len().saturating_sub(MAX_ENTRIES);
    let mut lines: Vec<String> = entries.iter().take(MAX_ENTRIES).map(Entry::line).collect();
    if more > 0 {
        lines.push(messages::list_more(more, shown));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ErrorKind, ToolStatus};
    use crate::tools::builtin::test_support::call;

    #[tokio::test]
    async fn lists_sorted_with_kinds_and_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("Cargo.toml"), "x".repeat(1229)).unwrap();
        std::fs::write(root.join("a.txt"), "hi").unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
        let out = call(root, "list_dir", json!({})).await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(
            out.text,
            "Cargo.toml  (file, 1.2 KB)\na.txt  (file, 2 B)\nlink -> a.txt  (symlink)\nsrc/  (dir)"
        );
    }

    #[tokio::test]
    async fn empty_missing_and_file_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        std::fs::write(dir.path().join("f.txt"), "x").unwrap();
        let out = call(dir.path(), "list_dir", json!({"path": "empty"})).await;
        assert_eq!(out.text, "(empty directory)");
        let out = call(dir.path(), "list_dir", json!({"path": "f.txt"})).await;
        assert_eq!(out.status, ToolStatus::Failed);
        assert_eq!(
            out.text,
            "Error: f.txt is a file, not a directory; use read_file to read it."
        );
        let out = call(dir.path(), "list_dir", json!({"path": "nope"})).await;
        assert!(
            out.text.starts_with("Error: nope does not exist."),
            "{}",
            out.text
        );
        let out = call(dir.path(), "list_dir", json!({"path": 5})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
    }

    #[test]
    fn caps_the_number_of_entries() {
        let entries: Vec<Entry> = (0..MAX_ENTRIES + 5)
            .map(|i| Entry {
                name: format!("f{i:05}"),
                kind: Kind::File(0),
            })
            .collect();
        let text = format_listing(entries, "gen");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), MAX_ENTRIES + 1);
        assert_eq!(lines[0], "f00000  (file, 0 B)");
        assert!(
            lines[MAX_ENTRIES].starts_with("[5 more entries not shown;"),
            "{}",
            lines[MAX_ENTRIES]
        );
        assert!(lines[MAX_ENTRIES].contains("`ls gen | grep PATTERN`"));
    }
}

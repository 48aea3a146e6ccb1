//! An identifier of the workspace state, recorded with each tool call so
//! the watchdog can tell a write that changed something from one that did
//! not, and an edit/undo flip-flop from real progress.
//!
//! The identifier hashes two things: the content of every file the agent's
//! write tools touched, and, in a git work tree, `HEAD` plus the content of
//! every file `git status` lists as changed or untracked. Read-only tools
//! leave it as it was without looking.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Files listed by `git status` that are hashed; past this many, only their
/// names count. Keeps a huge untracked tree from slowing every call.
const MAX_HASHED_FILES: usize = 500;

/// Bytes of one file that are hashed; a file bigger than this is
/// identified by its size, mtime and first bytes.
const MAX_HASHED_BYTES: u64 = 4 << 20;

/// Tracks the workspace state of one session.
#[derive(Debug)]
pub struct WorkspaceTracker {
    root: PathBuf,
    git: Option<bool>,
    touched: BTreeMap<PathBuf, u64>,
    /// Each touched file's hash before the agent first wrote it, so a file
    /// edited back to its original content drops out of the identifier.
    original: BTreeMap<PathBuf, u64>,
    current: Option<String>,
}

impl WorkspaceTracker {
    pub fn new(root: PathBuf) -> Self {
        WorkspaceTracker {
            root,
            git: None,
            touched: BTreeMap::new(),
            original: BTreeMap::new(),
            current: None,
        }
    }

    /// The identifier as last computed (computes it on first use).
    pub fn current(&mut self) -> String {
        match &self.current {
            Some(id) => id.clone(),
            None => self.refresh(),
        }
    }

    /// Remembers a file's content before the agent's first write to it.
    pub fn before_write(&mut self, path: &str) {
        let full = self.full_path(path);
        if let std::collections::btree_map::Entry::Vacant(slot) = self.original.entry(full) {
            let h = hash_file(slot.key());
            slot.insert(h);
        }
    }

    fn full_path(&self, p: &str) -> PathBuf {
        if Path::new(p).is_absolute() {
            PathBuf::from(p)
        } else {
            self.root.join(p)
        }
    }

    /// Recomputes after a call that may have changed files. `path` is the
    /// file a write tool touched, if any.
    pub fn after_call(&mut self, path: Option<&str>) -> String {
        if let Some(p) = path {
            let full = self.full_path(p);
            let h = hash_file(&full);
            self.touched.insert(full, h);
        }
        self.refresh()
    }

    fn refresh(&mut self) -> String {
        let mut h = DefaultHasher::new();
        // Files back at their original content do not count.
        self.touched
            .iter()
            .filter(|(p, hash)| self.original.get(*p) != Some(*hash))
            .for_each(|entry| entry.hash(&mut h));
        if self.is_git() {
            git_state(&self.root).hash(&mut h);
        }
        let id = format!("{:016x}", h.finish());
        self.current = Some(id.clone());
        id
    }

    fn is_git(&mut self) -> bool {
        *self.git.get_or_insert_with(|| {
            git(&self.root, &["rev-parse", "--is-inside-work-tree"])
                .is_some_and(|o| o.trim() == "true")
        })
    }
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `HEAD` plus each changed or untracked file with a hash of its content.
fn git_state(root: &Path) -> (String, Vec<(String, u64)>) {
    let head = git(root, &["rev-parse", "HEAD"]).unwrap_or_default();
    let status = git(
        root,
        &["status", "--porcelain=v1", "-z", "--untracked-files=all"],
    )
    .unwrap_or_default();
    let top = git(root, &["rev-parse", "--show-toplevel"])
        .map(|t| PathBuf::from(t.trim()))
        .unwrap_or_else(|| root.to_path_buf());
    let entries = status
        .split('\0')
        .filter(|e| e.len() > 3)
        .enumerate()
        .map(|(i, e)| {
            let path = &e[3..];
            let h = if i < MAX_HASHED_FILES {
                hash_file(&top.join(path))
            } else {
                0
            };
            (e.to_string(), h)
        })
        .collect();
    (head, entries)
}

fn hash_file(path: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    match std::fs::File::open(path) {
        Ok(file) => {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            len.hash(&mut h);
            let mut buf = Vec::new();
            if file.take(MAX_HASHED_BYTES).read_to_end(&mut buf).is_ok() {
                buf.hash(&mut h);
            }
        }
        Err(_) => "missing".hash(&mut h),
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_change_the_id_and_undo_returns_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut ws = WorkspaceTracker::new(dir.path().to_path_buf());
        std::fs::write(dir.path().join("a.txt"), "one").unwrap();
        let first = ws.after_call(Some("a.txt"));
        std::fs::write(dir.path().join("a.txt"), "two").unwrap();
        let second = ws.after_call(Some("a.txt"));
        assert_ne!(first, second);
        assert_eq!(
            ws.after_call(Some("a.txt")),
            second,
            "an unchanged write keeps the id"
        );
        std::fs::write(dir.path().join("a.txt"), "one").unwrap();
        assert_eq!(
            ws.after_call(Some("a.txt")),
            first,
            "undo returns to the earlier id"
        );
    }

    #[test]
    fn a_file_edited_back_to_its_original_returns_to_the_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "original").unwrap();
        let mut ws = WorkspaceTracker::new(dir.path().to_path_buf());
        let start = ws.current();
        ws.before_write("a.txt");
        std::fs::write(dir.path().join("a.txt"), "edited").unwrap();
        assert_ne!(ws.after_call(Some("a.txt")), start);
        ws.before_write("a.txt");
        std::fs::write(dir.path().join("a.txt"), "original").unwrap();
        assert_eq!(
            ws.after_call(Some("a.txt")),
            start,
            "the undo is recognised the first time"
        );
    }

    #[test]
    fn git_changes_made_by_shell_commands_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
        };
        run(&["init", "-q"]);
        let mut ws = WorkspaceTracker::new(dir.path().to_path_buf());
        let before = ws.current();
        std::fs::write(dir.path().join("new.txt"), "x").unwrap();
        let after = ws.after_call(None);
        assert_ne!(before, after);
        std::fs::remove_file(dir.path().join("new.txt")).unwrap();
        assert_eq!(ws.after_call(None), before);
    }
}

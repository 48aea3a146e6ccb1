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
    /// The top of the git work tree holding the workspace (`Some(None)`:
    /// not in git). Asked once per session, like whether it is in git at
    /// all: a session does not move between repositories.
    git: Option<Option<PathBuf>>,
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
        if let Some(top) = self.git_top() {
            git_state(&self.root, &top).hash(&mut h);
        }
        let id = format!("{:016x}", h.finish());
        self.current = Some(id.clone());
        id
    }

    /// Whether [`WorkspaceTracker::after_call`] without a path may touch
    /// the disk: unless the workspace is known not to be in git, it asks
    /// git (and hashes what git lists).
    pub fn may_read_disk(&self) -> bool {
        !matches!(self.git, Some(None))
    }

    /// The top of the work tree, when the workspace is in one.
    fn git_top(&mut self) -> Option<PathBuf> {
        let root = &self.root;
        self.git
            .get_or_insert_with(|| {
                let out = git(
                    root,
                    &["rev-parse", "--is-inside-work-tree", "--show-toplevel"],
                )?;
                let mut lines = out.lines();
                (lines.next()?.trim() == "true").then(|| {
                    lines
                        .next()
                        .map_or_else(|| root.clone(), |top| PathBuf::from(top.trim()))
                })
            })
            .clone()
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

/// `HEAD` plus each changed or untracked file with a hash of its content;
/// `top` is the top of the work tree, which the paths are relative to.
fn git_state(root: &Path, top: &Path) -> (String, Vec<(String, u64)>) {
    // Two independent questions: asked at once, the call waits for one git
    // process instead of two in a row.
    let (head, status) = std::thread::scope(|scope| {
        let head = scope.spawn(|| git(root, &["rev-parse", "HEAD"]));
        let status = git(
            root,
            &["status", "--porcelain=v1", "-z", "--untracked-files=all"],
        );
        (head.join().ok().flatten(), status)
    });
    let head = head.unwrap_or_default();
    let status = status.unwrap_or_default();
    let entries = status
        .split('\0')
        .filter(|e| e.len() > 3)
        .enumerate()
        .map(|(i, e)| {
            let path = e.get(3..).unwrap_or("");
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

    #[test]
    fn a_workspace_below_the_top_of_the_work_tree_hashes_the_right_files() {
        let dir = tempfile::tempdir().unwrap();
        Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let sub = dir.path().join("crates").join("one");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("lib.rs"), "one").unwrap();
        let mut ws = WorkspaceTracker::new(sub.clone());
        assert!(ws.may_read_disk(), "not known yet");
        let first = ws.current();
        assert!(ws.may_read_disk(), "in git");
        // Same file list, new content: only a hash of the file (found
        // from the top of the work tree) can tell.
        std::fs::write(sub.join("lib.rs"), "two").unwrap();
        let second = ws.after_call(None);
        assert_ne!(first, second);
        std::fs::write(sub.join("lib.rs"), "one").unwrap();
        assert_eq!(ws.after_call(None), first);

        let plain = tempfile::tempdir().unwrap();
        let mut ws = WorkspaceTracker::new(plain.path().to_path_buf());
        ws.current();
        assert!(!ws.may_read_disk(), "known not to be in git");
    }
}

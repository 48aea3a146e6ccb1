//! An identifier of the workspace state, recorded with each tool call so
//! the watchdog can tell a write that changed something from one that did
//! not, and an edit/undo flip-flop from real progress.
//!
//! It runs no program: an earlier version asked `git status`, which runs
//! whatever `core.fsmonitor` in the workspace's `.git/config` names,
//! outside the sandbox and with the agent's environment. Instead the tree
//! is walked with the `ignore` crate (so `.gitignore`d output such as a
//! huge `target/` costs nothing, and `.git` is skipped), each file's size,
//! mtime and inode are compared with the last walk, and only files whose
//! metadata moved are hashed again. The identifier combines every file's
//! path and content hash, plus the files the agent's write tools touched
//! outside the walk. So a write that changes content gives a new id,
//! writing the old content back gives the earlier id, and an untracked new
//! file counts.
//!
//! Hashing is bounded per call ([`MAX_HASH_BYTES_PER_CALL`],
//! [`MAX_HASHED_FILE_BYTES`]); a file past the budget is identified by its
//! size and mtime until its metadata moves again.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bytes of one file that are hashed; a bigger file is identified by its
/// size and its first bytes.
const MAX_HASHED_FILE_BYTES: u64 = 4 << 20;

/// Bytes hashed in one call at most, over all files. The first walk of a
/// big tree hashes this much and identifies the rest by metadata; later
/// walks only hash what moved, which is almost always far less.
const MAX_HASH_BYTES_PER_CALL: u64 = 64 << 20;

/// How close to the previous walk a file's mtime may be and still be
/// trusted unhashed. File timestamps come from a coarse clock (a jiffy,
/// up to 10 ms), so two writes of the same size that close together can
/// leave identical metadata; such "racily clean" files are hashed again.
const RACY_SLACK_NS: i64 = 50_000_000;

/// Files walked at most; past this many the rest of the tree does not
/// count (a workspace this big is not a project but a home directory).
const MAX_WALKED_FILES: usize = 200_000;

/// What the last walk saw of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    /// The content hash, or `None` when the budget ran out and the file is
    /// identified by its metadata.
    hash: Option<u64>,
}

impl Seen {
    fn same_metadata(&self, other: &Seen) -> bool {
        (self.size, self.mtime_ns, self.ctime_ns, self.ino)
            == (other.size, other.mtime_ns, other.ctime_ns, other.ino)
    }

    /// What this file adds to the identifier.
    fn identity(&self) -> (u64, i64, Option<u64>) {
        match self.hash {
            Some(h) => (self.size, 0, Some(h)),
            None => (self.size, self.mtime_ns, None),
        }
    }
}

/// Tracks the workspace state of one session.
#[derive(Debug)]
pub struct WorkspaceTracker {
    root: PathBuf,
    /// Every file of the last walk, by path relative to the root.
    files: HashMap<PathBuf, Seen>,
    /// Content hashes of files the agent's write tools touched.
    touched: BTreeMap<PathBuf, u64>,
    /// Each touched file's hash before the agent first wrote it, so a file
    /// edited back to its original content drops out of the identifier.
    original: BTreeMap<PathBuf, u64>,
    current: Option<String>,
    /// When the previous walk started (ns since 1970).
    last_walk_ns: i64,
}

impl WorkspaceTracker {
    pub fn new(root: PathBuf) -> Self {
        WorkspaceTracker {
            root,
            last_walk_ns: 0,
            files: HashMap::new(),
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

    /// Whether [`WorkspaceTracker::after_call`] without a path may touch
    /// the disk: it walks the tree, so always.
    pub fn may_read_disk(&self) -> bool {
        true
    }

    fn refresh(&mut self) -> String {
        self.walk();
        // Order-independent: a sum of per-file hashes, so no sorting.
        let mut sum: u64 = 0;
        for (path, seen) in &self.files {
            let mut h = DefaultHasher::new();
            path.hash(&mut h);
            seen.identity().hash(&mut h);
            sum = sum.wrapping_add(h.finish());
        }
        let mut h = DefaultHasher::new();
        sum.hash(&mut h);
        self.files.len().hash(&mut h);
        // Files back at their original content do not count.
        self.touched
            .iter()
            .filter(|(p, hash)| self.original.get(*p) != Some(*hash))
            .for_each(|entry| entry.hash(&mut h));
        let id = format!("{:016x}", h.finish());
        self.current = Some(id.clone());
        id
    }

    /// Walks the tree and updates [`WorkspaceTracker::files`], hashing the
    /// files whose metadata moved, within the budget.
    fn walk(&mut self) {
        let mut budget = MAX_HASH_BYTES_PER_CALL;
        let racy_after = self.last_walk_ns - RACY_SLACK_NS;
        self.last_walk_ns = now_ns();
        let mut next: HashMap<PathBuf, Seen> = HashMap::with_capacity(self.files.len());
        let walker = ignore::WalkBuilder::new(&self.root)
            .hidden(false)
            .parents(true)
            .ignore(true)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(false)
            .require_git(false)
            .follow_links(false)
            .filter_entry(|e| e.file_name() != ".git")
            .build();
        for entry in walker.flatten() {
            if next.len() >= MAX_WALKED_FILES {
                break;
            }
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            let Ok(rel) = entry.path().strip_prefix(&self.root) else {
                continue;
            };
            let mut seen = Seen {
                size: meta.len(),
                mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
                ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
                ino: meta.ino(),
                hash: None,
            };
            match self.files.get(rel) {
                Some(old) if old.same_metadata(&seen) && seen.mtime_ns < racy_after => {
                    seen.hash = old.hash;
                }
                // Identified by metadata already: stays so until it moves.
                Some(old) if old.same_metadata(&seen) && old.hash.is_none() => {}
                _ => {
                    let cost = seen.size.min(MAX_HASHED_FILE_BYTES);
                    if cost <= budget {
                        budget -= cost;
                        seen.hash = Some(hash_file(entry.path()));
                    }
                }
            }
            next.insert(rel.to_path_buf(), seen);
        }
        self.files = next;
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A hash of a file's size and its first [`MAX_HASHED_FILE_BYTES`] bytes.
/// Opened without blocking on a FIFO planted in the tree.
fn hash_file(path: &Path) -> u64 {
    use std::os::unix::fs::OpenOptionsExt;
    let mut h = DefaultHasher::new();
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0))
        .open(path);
    match opened {
        Ok(file) => match file.metadata() {
            Ok(meta) if meta.is_file() => {
                meta.len().hash(&mut h);
                let mut buf = Vec::new();
                if file
                    .take(MAX_HASHED_FILE_BYTES)
                    .read_to_end(&mut buf)
                    .is_ok()
                {
                    buf.hash(&mut h);
                }
            }
            _ => "not a regular file".hash(&mut h),
        },
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
    fn changes_made_by_shell_commands_are_seen_and_ignored_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
        std::fs::write(dir.path().join("lib.rs"), "one").unwrap();
        let mut ws = WorkspaceTracker::new(dir.path().to_path_buf());
        assert!(ws.may_read_disk());
        let before = ws.current();
        // An untracked new file counts; removing it returns to the start.
        std::fs::write(dir.path().join("new.txt"), "x").unwrap();
        let after = ws.after_call(None);
        assert_ne!(before, after);
        std::fs::remove_file(dir.path().join("new.txt")).unwrap();
        assert_eq!(ws.after_call(None), before);
        // Same file list, new content, then the old content back (as `sed
        // -i` and an undo would): a new id, then the first one.
        std::fs::write(dir.path().join("lib.rs"), "two").unwrap();
        assert_ne!(ws.after_call(None), before);
        std::fs::write(dir.path().join("lib.rs"), "one").unwrap();
        assert_eq!(ws.after_call(None), before);
        // Ignored output and .git do not count.
        std::fs::create_dir_all(dir.path().join("target/debug")).unwrap();
        std::fs::write(dir.path().join("target/debug/big"), "x".repeat(1000)).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/index"), "i").unwrap();
        assert_eq!(ws.after_call(None), before);
    }

    #[test]
    fn no_git_runs_even_with_an_fsmonitor_configured() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        std::fs::create_dir_all(dir.path().join("ws/.git")).unwrap();
        std::fs::write(
            dir.path().join("ws/.git/config"),
            format!("[core]\n\tfsmonitor = \"touch {}\"\n", marker.display()),
        )
        .unwrap();
        let mut ws = WorkspaceTracker::new(dir.path().join("ws"));
        ws.current();
        ws.after_call(None);
        assert!(!marker.exists());
    }

    #[test]
    fn hashing_is_bounded_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![b'x'; (MAX_HASHED_FILE_BYTES + 10) as usize];
        let files = (MAX_HASH_BYTES_PER_CALL / MAX_HASHED_FILE_BYTES) as usize + 3;
        for i in 0..files {
            std::fs::write(dir.path().join(format!("f{i}")), &big).unwrap();
        }
        let mut ws = WorkspaceTracker::new(dir.path().to_path_buf());
        let first = ws.current();
        let unhashed = ws.files.values().filter(|s| s.hash.is_none()).count();
        assert_eq!(unhashed, 3);
        // Unchanged metadata: nothing is hashed again, the id is stable.
        assert_eq!(ws.after_call(None), first);
    }
}

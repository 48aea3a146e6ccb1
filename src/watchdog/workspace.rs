//! An identifier of the workspace state, recorded with each tool call so
//! the watchdog can tell a write that changed something from one that did
//! not, and an edit/undo flip-flop from real progress.
//!
//! It runs no program: an earlier version asked `git status`, which runs
//! whatever `core.fsmonitor` in the workspace's `.git/config` names,
//! outside the sandbox and with the agent's environment. Instead the tree
//! is walked with the `ignore` crate's rules (so `.gitignore`d output such
//! as a huge `target/` costs nothing, and `.git` is skipped). A directory
//! is listed again only when its own metadata moved (an entry was added,
//! removed or renamed); every listed file is stat'ed, and hashed again
//! only when its size, mtime, ctime or inode moved. In a big tree (from
//! [`WATCH_MIN_FILES`] files or [`WATCH_MIN_DIRS`] directories) every listed
//! directory is then watched with inotify, so a later call looks only at
//! the directories and files the kernel reported changing (and falls back
//! to stat'ing everything when the report queue overflowed or the watch
//! limit was reached); a small tree is stat'ed whole each time, which is
//! cheaper than an inotify descriptor. A changed `.gitignore` makes the next
//! walk list everything again. The identifier combines every file's
//! path and content hash, plus the files the agent's write tools touched
//! outside the walk. So a write that changes content gives a new id,
//! writing the old content back gives the earlier id, and an untracked new
//! file counts.
//!
//! Hashing is bounded per call ([`MAX_HASH_BYTES_PER_CALL`],
//! [`MAX_HASHED_FILE_BYTES`]); a file past the budget is identified by its
//! size and mtime until its metadata moves again.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStrExt;

use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

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

/// A directory's own metadata: it moves when entries are added, removed
/// or renamed, so an unmoved directory keeps its listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
}

/// One file of a directory listing, with what it adds to the identifier.
#[derive(Debug)]
struct FileSlot {
    name: OsString,
    seen: Option<Seen>,
    contribution: u64,
}

/// What the last walk knew of one directory: its stamp and its entries
/// that `.gitignore` and friends do not exclude.
#[derive(Debug)]
struct DirState {
    stamp: Stamp,
    files: Vec<FileSlot>,
    subdirs: Vec<OsString>,
}

/// Names whose change changes which files are ignored.
const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

fn is_ignore_file(name: &OsStr) -> bool {
    IGNORE_FILES.contains(&name.to_str().unwrap_or_default())
}

/// A tree with fewer listed files and directories than these is walked
/// again on every call instead of watched: stat'ing a few thousand files
/// costs about a millisecond, while an inotify descriptor costs a kernel
/// grace period when it is closed (6-15 ms measured, paid at exit by
/// every one-shot task).
pub const WATCH_MIN_FILES: usize = 2000;
pub const WATCH_MIN_DIRS: usize = 200;

/// Bytes read from the inotify descriptor at a time.
const WATCH_READ_BYTES: usize = 64 * 1024;

/// The kernel's change reports (inotify) for every walked directory, so a
/// call stats only what changed instead of every file.
#[derive(Debug)]
struct Watch {
    fd: OwnedFd,
    /// Watch descriptor → directory, relative to the root.
    dirs: HashMap<i32, PathBuf>,
}

/// Directories whose entries changed and files whose content or metadata
/// changed, as reported.
#[derive(Debug, Default)]
struct Changes {
    dirs: std::collections::HashSet<PathBuf>,
    files: std::collections::HashSet<(PathBuf, OsString)>,
}

fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// A directory beneath the root, opened, and its stamp.
fn dir_at(root: &OwnedFd, rel: &Path) -> Option<(OwnedFd, Stamp)> {
    let fd = if rel.as_os_str().is_empty() {
        root.try_clone().ok()?
    } else {
        rustix::fs::openat(
            root,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?
    };
    let st = rustix::fs::fstat(&fd).ok()?;
    let stamp = Stamp {
        mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
        ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
        ino: st.st_ino,
    };
    Some((fd, stamp))
}

/// Tracks the workspace state of one session.
#[derive(Debug)]
pub struct WorkspaceTracker {
    root: PathBuf,
    /// Every directory of the last walk, by path relative to the root.
    dirs: HashMap<PathBuf, DirState>,
    /// Content hashes of files the agent's write tools touched.
    touched: BTreeMap<PathBuf, u64>,
    /// Each touched file's hash before the agent first wrote it, so a file
    /// edited back to its original content drops out of the identifier.
    original: BTreeMap<PathBuf, u64>,
    current: Option<String>,
    /// When the previous walk started (ns since 1970).
    last_walk_ns: i64,
    /// The kernel's change reports, while they can be trusted.
    watch: Option<Watch>,
    /// Files the last full walk looked at; a big tree is watched.
    walked_files: usize,
}

impl WorkspaceTracker {
    pub fn new(root: PathBuf) -> Self {
        WorkspaceTracker {
            root,
            last_walk_ns: 0,
            watch: None,
            walked_files: 0,
            dirs: HashMap::new(),
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

    /// Every file of the last walk, relative to the root, with its
    /// metadata (for checkpoints: content is read only where this moved).
    pub fn files(&self) -> Vec<(PathBuf, crate::runtime::checkpoint::Stamp)> {
        let mut out = Vec::new();
        for (dir, state) in &self.dirs {
            for slot in &state.files {
                if let Some(seen) = slot.seen {
                    out.push((
                        dir.join(&slot.name),
                        crate::runtime::checkpoint::Stamp {
                            size: seen.size,
                            mtime_ns: seen.mtime_ns,
                            ctime_ns: seen.ctime_ns,
                            ino: seen.ino,
                        },
                    ));
                }
            }
        }
        out
    }

    /// Whether [`WorkspaceTracker::after_call`] without a path may touch
    /// the disk: it walks the tree, so always.
    pub fn may_read_disk(&self) -> bool {
        true
    }

    fn refresh(&mut self) -> String {
        if self.walk() {
            // An ignore file changed: which files count may have changed
            // anywhere below it, so every listing is read again.
            self.dirs.clear();
            self.walk();
        }
        // Order-independent: a sum of per-file hashes, so no sorting.
        let mut sum: u64 = 0;
        let mut count: u64 = 0;
        for state in self.dirs.values() {
            for slot in &state.files {
                if slot.seen.is_some() {
                    sum = sum.wrapping_add(slot.contribution);
                    count += 1;
                }
            }
        }
        let mut h = DefaultHasher::new();
        sum.hash(&mut h);
        count.hash(&mut h);
        // Files back at their original content do not count.
        self.touched
            .iter()
            .filter(|(p, hash)| self.original.get(*p) != Some(*hash))
            .for_each(|entry| entry.hash(&mut h));
        let id = format!("{:016x}", h.finish());
        self.current = Some(id.clone());
        id
    }

    /// Walks the tree: each directory is stat'ed, and listed again (with
    /// the ignore rules) only when it moved; each listed file is stat'ed,
    /// and hashed again only when its metadata moved, within the budget.
    /// Returns whether an ignore file changed.
    fn walk(&mut self) -> bool {
        if !self.dirs.is_empty()
            && let Some(changes) = self.watched_changes()
        {
            return self.apply(changes);
        }
        self.full_walk()
    }

    /// What the kernel reported changing since the last walk, or `None`
    /// when it cannot tell (no watch, or its queue overflowed): then every
    /// file is stat'ed.
    fn watched_changes(&mut self) -> Option<Changes> {
        let watch = self.watch.as_mut()?;
        let mut changes = Changes::default();
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); WATCH_READ_BYTES];
        let mut reader = inotify::Reader::new(&watch.fd, &mut buf);
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                Err(_) => return None,
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                return None;
            }
            let Some(dir) = watch.dirs.get(&event.wd()) else {
                continue;
            };
            let name = event
                .file_name()
                .map(|n| OsStr::from_bytes(n.to_bytes()).to_os_string());
            let structural =
                ReadFlags::CREATE | ReadFlags::DELETE | ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO;
            if flags.intersects(structural) {
                changes.dirs.insert(dir.clone());
            } else if let Some(name) = name {
                changes.files.insert((dir.clone(), name));
            }
        }
        Some(changes)
    }

    /// Updates the listings of the directories and the files the kernel
    /// reported. Returns whether an ignore file changed.
    fn apply(&mut self, changes: Changes) -> bool {
        let mut budget = MAX_HASH_BYTES_PER_CALL;
        self.last_walk_ns = now_ns();
        let Ok(root) = open_dir(&self.root) else {
            self.dirs.clear();
            return false;
        };
        for dir in &changes.dirs {
            let Some(old) = self.dirs.remove(dir) else {
                continue;
            };
            let Some((fd, stamp)) = dir_at(&root, dir) else {
                self.forget_below(dir);
                continue;
            };
            let old_subdirs = old.subdirs.clone();
            let (mut state, removed_ignore) = self.list(dir, stamp, Some(old));
            if removed_ignore {
                return true;
            }
            for slot in &mut state.files {
                let before = slot.seen;
                slot.seen = look(&fd, slot, i64::MAX, &mut budget);
                if slot.seen != before {
                    slot.contribution = contribution(dir, slot);
                    if before.is_none() && is_ignore_file(&slot.name) {
                        return true;
                    }
                }
            }
            for gone in old_subdirs.iter().filter(|d| !state.subdirs.contains(d)) {
                self.forget_below(&dir.join(gone));
            }
            let fresh: Vec<PathBuf> = state
                .subdirs
                .iter()
                .filter(|d| !old_subdirs.contains(d))
                .map(|d| dir.join(d))
                .collect();
            self.dirs.insert(dir.clone(), state);
            for sub in fresh {
                self.walk_from(&root, sub, i64::MAX, &mut budget);
            }
        }
        for (dir, name) in &changes.files {
            let Some(state) = self.dirs.get_mut(dir) else {
                continue;
            };
            let Some(slot) = state.files.iter_mut().find(|f| &f.name == name) else {
                continue;
            };
            let Some((fd, _)) = dir_at(&root, dir) else {
                continue;
            };
            let before = slot.seen;
            // Reported as changed: hashed again whatever its metadata says.
            slot.seen = look(&fd, slot, i64::MIN, &mut budget);
            if slot.seen != before {
                slot.contribution = contribution(dir, slot);
                if is_ignore_file(&slot.name) {
                    return true;
                }
            }
        }
        false
    }

    /// Drops a directory and everything below it from the listings.
    fn forget_below(&mut self, dir: &Path) {
        self.dirs.retain(|d, _| !d.starts_with(dir));
    }

    /// Walks a directory that appeared (and what is below it) into the
    /// listings, watching each.
    fn walk_from(&mut self, root: &OwnedFd, start: PathBuf, racy_after: i64, budget: &mut u64) {
        let mut queue = vec![start];
        while let Some(rel) = queue.pop() {
            let Some((fd, stamp)) = dir_at(root, &rel) else {
                continue;
            };
            let (mut state, _) = self.list(&rel, stamp, None);
            for slot in &mut state.files {
                slot.seen = look(&fd, slot, racy_after, budget);
                slot.contribution = contribution(&rel, slot);
            }
            self.add_watch(&rel);
            queue.extend(state.subdirs.iter().map(|d| rel.join(d)));
            self.dirs.insert(rel, state);
        }
    }

    /// Starts watching a directory; on failure (the watch limit) watching
    /// stops and every walk stats every file again.
    fn add_watch(&mut self, rel: &Path) {
        let Some(watch) = self.watch.as_mut() else {
            return;
        };
        let mask = WatchFlags::MODIFY
            | WatchFlags::ATTRIB
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::DONT_FOLLOW
            | WatchFlags::ONLYDIR;
        match inotify::add_watch(&watch.fd, self.root.join(rel), mask) {
            Ok(wd) => {
                watch.dirs.insert(wd, rel.to_path_buf());
            }
            Err(_) => self.watch = None,
        }
    }

    /// Stats every listed file (the first walk, and whenever the kernel's
    /// reports cannot be trusted), and starts watching every directory.
    fn full_walk(&mut self) -> bool {
        // Sized by the last walk: the first one of a big tree only counts.
        let big = self.walked_files >= WATCH_MIN_FILES || self.dirs.len() >= WATCH_MIN_DIRS;
        self.watch = big
            .then(|| {
                inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).ok()
            })
            .flatten()
            .map(|fd| Watch {
                fd,
                dirs: HashMap::new(),
            });
        let mut budget = MAX_HASH_BYTES_PER_CALL;
        let racy_after = self.last_walk_ns - RACY_SLACK_NS;
        self.last_walk_ns = now_ns();
        let Ok(root) = rustix::fs::open(
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            self.dirs.clear();
            return false;
        };
        let mut ignore_changed = false;
        let first = self.dirs.is_empty();
        let mut walked = 0usize;
        let mut next: HashMap<PathBuf, DirState> = HashMap::with_capacity(self.dirs.len());
        let mut queue = vec![PathBuf::new()];
        while let Some(rel) = queue.pop() {
            let fd = if rel.as_os_str().is_empty() {
                root.try_clone().ok()
            } else {
                rustix::fs::openat(
                    &root,
                    &rel,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .ok()
            };
            let Some(fd) = fd else { continue };
            let Ok(st) = rustix::fs::fstat(&fd) else {
                continue;
            };
            let stamp = Stamp {
                mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
                ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
                ino: st.st_ino,
            };
            let old = self.dirs.remove(&rel);
            let mut state = match old {
                Some(state) if state.stamp == stamp && stamp.mtime_ns < racy_after => state,
                old => {
                    let (state, removed_ignore) = self.list(&rel, stamp, old);
                    ignore_changed |= removed_ignore;
                    state
                }
            };
            for slot in &mut state.files {
                if walked >= MAX_WALKED_FILES {
                    slot.seen = None;
                    continue;
                }
                walked += 1;
                let before = slot.seen;
                slot.seen = look(&fd, slot, racy_after, &mut budget);
                if slot.seen != before {
                    slot.contribution = contribution(&rel, slot);
                    let name = slot.name.to_str().unwrap_or_default();
                    if !first && IGNORE_FILES.contains(&name) {
                        ignore_changed = true;
                    }
                }
            }
            queue.extend(state.subdirs.iter().map(|d| rel.join(d)));
            self.add_watch(&rel);
            next.insert(rel, state);
        }
        self.dirs = next;
        self.walked_files = walked;
        ignore_changed
    }

    /// Lists a directory that is new or moved: its files and subdirectories
    /// that the ignore rules keep (`.git` skipped), reusing what is known
    /// of files that were there before. Also says whether an ignore file
    /// that was there is gone.
    fn list(&self, rel: &Path, stamp: Stamp, old: Option<DirState>) -> (DirState, bool) {
        let mut known: HashMap<OsString, FileSlot> = old
            .map(|o| o.files.into_iter().map(|f| (f.name.clone(), f)).collect())
            .unwrap_or_default();
        let mut files = Vec::new();
        let mut subdirs = Vec::new();
        let walker = ignore::WalkBuilder::new(self.root.join(rel))
            .max_depth(Some(1))
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
            if entry.depth() == 0 {
                continue;
            }
            let name = entry.file_name().to_os_string();
            match entry.file_type() {
                Some(t) if t.is_dir() => subdirs.push(name),
                Some(t) if t.is_file() => files.push(known.remove(&name).unwrap_or(FileSlot {
                    name,
                    seen: None,
                    contribution: 0,
                })),
                _ => {}
            }
        }
        let removed_ignore = known
            .keys()
            .any(|name| IGNORE_FILES.contains(&name.to_str().unwrap_or_default()));
        (
            DirState {
                stamp,
                files,
                subdirs,
            },
            removed_ignore,
        )
    }
}

/// A file's metadata, and its content hash when it moved (within the
/// budget). `None` when it is gone or not a regular file any more.
fn look(dir: &OwnedFd, slot: &FileSlot, racy_after: i64, budget: &mut u64) -> Option<Seen> {
    let st = rustix::fs::statat(dir, slot.name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut seen = Seen {
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
        ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
        ino: st.st_ino,
        hash: None,
    };
    match slot.seen {
        Some(old) if old.same_metadata(&seen) && seen.mtime_ns < racy_after => {
            seen.hash = old.hash;
        }
        // Identified by metadata already: stays so until it moves.
        Some(old) if old.same_metadata(&seen) && old.hash.is_none() => {}
        _ => {
            let cost = seen.size.min(MAX_HASHED_FILE_BYTES);
            if cost <= *budget {
                *budget -= cost;
                seen.hash = Some(hash_at(dir, &slot.name));
            }
        }
    }
    Some(seen)
}

/// What one file adds to the identifier: its path and content (or
/// metadata, past the budget).
fn contribution(dir: &Path, slot: &FileSlot) -> u64 {
    let mut h = DefaultHasher::new();
    dir.join(&slot.name).hash(&mut h);
    slot.seen.map(|s| s.identity()).hash(&mut h);
    h.finish()
}

/// [`hash_file`] of `name` in `dir`, opened without following a link or
/// blocking on a FIFO.
fn hash_at(dir: &OwnedFd, name: &OsStr) -> u64 {
    match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => hash_open(File::from(fd)),
        Err(_) => {
            let mut h = DefaultHasher::new();
            "missing".hash(&mut h);
            h.finish()
        }
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
    match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => hash_open(File::from(fd)),
        Err(_) => {
            let mut h = DefaultHasher::new();
            "missing".hash(&mut h);
            h.finish()
        }
    }
}

fn hash_open(file: File) -> u64 {
    let mut h = DefaultHasher::new();
    match file.metadata() {
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
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_tree_is_watched_and_a_small_one_is_not() {
        let small = tempfile::tempdir().unwrap();
        std::fs::write(small.path().join("a.txt"), "one").unwrap();
        let mut ws = WorkspaceTracker::new(small.path().to_path_buf());
        ws.after_call(None);
        ws.after_call(None);
        assert!(
            ws.watch.is_none(),
            "a small tree needs no inotify descriptor"
        );

        let big = tempfile::tempdir().unwrap();
        for i in 0..WATCH_MIN_FILES {
            std::fs::write(big.path().join(format!("f{i}.txt")), "x").unwrap();
        }
        let mut ws = WorkspaceTracker::new(big.path().to_path_buf());
        let first = ws.after_call(None);
        assert!(ws.watch.is_none(), "the first walk only counts");
        assert_eq!(ws.after_call(None), first);
        assert!(ws.watch.is_some(), "the second walk starts watching");
        // Changes are seen through the kernel's reports.
        std::fs::write(big.path().join("f7.txt"), "changed").unwrap();
        let changed = ws.after_call(None);
        assert_ne!(changed, first);
        assert!(ws.watch.is_some());
        std::fs::write(big.path().join("f7.txt"), "x").unwrap();
        assert_eq!(ws.after_call(None), first);
        std::fs::write(big.path().join("new.txt"), "new").unwrap();
        assert_ne!(ws.after_call(None), first);
    }

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
    fn new_and_removed_directories_and_quick_same_size_edits_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let mut ws = WorkspaceTracker::new(dir.path().to_path_buf());
        let start = ws.current();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/f.txt"), "one").unwrap();
        let with_tree = ws.after_call(None);
        assert_ne!(with_tree, start);
        // Same size, written at once: only the content differs.
        for round in 0..20 {
            std::fs::write(dir.path().join("a/b/f.txt"), "two").unwrap();
            let two = ws.after_call(None);
            assert_ne!(two, with_tree, "round {round}");
            std::fs::write(dir.path().join("a/b/f.txt"), "one").unwrap();
            assert_eq!(ws.after_call(None), with_tree, "round {round}");
        }
        std::fs::remove_dir_all(dir.path().join("a")).unwrap();
        assert_eq!(ws.after_call(None), start);
    }

    #[test]
    fn a_changed_gitignore_changes_what_counts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("out/deep")).unwrap();
        std::fs::write(dir.path().join("out/deep/gen.txt"), "a").unwrap();
        let mut ws = WorkspaceTracker::new(dir.path().to_path_buf());
        let with_out = ws.current();
        std::fs::write(dir.path().join(".gitignore"), "out/\n").unwrap();
        let ignored = ws.after_call(None);
        assert_ne!(with_out, ignored);
        // Now ignored: changes below it do not count.
        std::fs::write(dir.path().join("out/deep/gen.txt"), "bb").unwrap();
        assert_eq!(ws.after_call(None), ignored);
        std::fs::remove_file(dir.path().join(".gitignore")).unwrap();
        assert_ne!(ws.after_call(None), ignored);
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
        let unhashed = ws
            .dirs
            .values()
            .flat_map(|d| &d.files)
            .filter(|f| f.seen.is_some_and(|s| s.hash.is_none()))
            .count();
        assert_eq!(unhashed, 3);
        // Unchanged metadata: nothing is hashed again, the id is stable.
        assert_eq!(ws.after_call(None), first);
    }
}

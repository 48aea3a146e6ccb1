//! Race-free file access beneath a root directory: the one way file tools,
//! script file functions and `AGENTS.md` reach the disk.
//!
//! A [`Root`] holds an open descriptor of an allowed directory (the
//! workspace, the spill dir, an extra root). Every path is opened relative
//! to it, in the kernel, with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`: a `..` or a symlink that leads out fails inside
//! the same system call that would have followed it, so there is no window
//! between a check and an open for a racing command to swap a symlink in.
//! The last component is never followed by the kernel: a symlink there is
//! read with `readlinkat` and resolved again beneath the root, so a write
//! through a link replaces the link's target (inside) and keeps the link,
//! and the final `renameat` replaces whatever sits at the name, never what
//! it points to.
//!
//! Absolute symlinks (`/ws/a -> /ws/b`) are refused by `RESOLVE_BENEATH`
//! even when they point inside, and old kernels lack `openat2`. For both,
//! a component-by-component walk with `O_NOFOLLOW` takes over
//! ([`Root::walk_dir`]): it reads each symlink itself, maps an absolute
//! target that lies inside the root back to a path relative to it, and
//! refuses anything else. It never leaves the directory-descriptor stack it
//! started from.
//!
//! Only regular files are read or written. The kind is checked on an
//! `O_PATH` descriptor (which opens nothing), and the real open uses
//! `O_NONBLOCK | O_NOCTTY | O_NOFOLLOW` and checks the same inode again,
//! so a FIFO, a device or a socket is refused before anything can block on
//! it. A file with more than one hard link may be the same inode as a file
//! outside, so it is not read.
//!
//! Why `rustix` and not `cap-std`: the agent needs exactly these few calls
//! (`openat2`, `statat`, `readlinkat`, `mkdirat`, `renameat`, `fstat`) with
//! flags `cap-std` does not expose together (`O_PATH` then a checked
//! reopen with `O_NONBLOCK | O_NOCTTY`, the link count), and `rustix` is
//! already in the dependency tree (through `tempfile`), so it adds no code.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// Symlinks followed for one path before giving up, as the kernel does
/// (`MAXSYMLINKS` is 40).
const MAX_SYMLINKS: usize = 40;

/// Times `openat2` is retried when the kernel reports a concurrent rename
/// (`EAGAIN`) before the walk takes over.
const OPENAT2_RETRIES: usize = 4;

/// Directories climbed (`..`) when checking whether a directory lies
/// beneath a protected one; deeper than any real tree.
const MAX_ANCESTORS: usize = 4096;

/// Attempts at finding an unused temporary name next to a file.
const TEMP_NAME_ATTEMPTS: u32 = 16;

/// The name of a repository's metadata directory (or gitdir file).
const GIT_DIR: &str = ".git";

/// What a write beneath a root may not touch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fence<'a> {
    /// Directories (the agent's own) refused by identity, wherever a
    /// symlink makes them appear.
    pub dirs: &'a [PathBuf],
    /// Refuse anything inside a `.git` directory beneath the root, and
    /// creating, replacing or removing an entry named `.git`.
    pub git: bool,
}

impl Fence<'_> {
    /// No fence: the agent's own restores (undo) put back what was there.
    pub const NONE: Fence<'static> = Fence {
        dirs: &[],
        git: false,
    };
}

/// Why a path beneath a root cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// A `..` or a symlink leads outside the root; `resolved` is where.
    #[error(
        "it resolves to {}, which is outside the workspace {}; file tools only work inside the workspace (use a path inside it, or ask the user to add the directory to extra_roots in policy.rhai)",
        resolved.display(),
        root.display()
    )]
    Outside { resolved: PathBuf, root: PathBuf },
    /// Nothing exists at the path (or at one of its directories).
    #[error("it does not exist")]
    NotFound,
    /// The path names a directory where a file was needed.
    #[error("it is a directory")]
    IsDir,
    /// A component that must be a directory is not one.
    #[error("it is not a directory")]
    NotDir,
    /// A FIFO, socket or device; `kind` says which.
    #[error("it is a {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    /// A regular file with more than one hard link.
    #[error("it has {links} hard links")]
    HardLinked { links: u64 },
    /// The write would land beneath one of the agent's own directories.
    #[error("it lies in {}, which belongs to the agent and is read-only", dir.display())]
    Protected { dir: PathBuf },
    /// The write would land inside a repository's `.git` (or create or
    /// remove a `.git` entry): its config and hooks run programs whenever
    /// git runs, so a write there is a way out.
    #[error("it is in a repository's metadata ({}), which file tools never write", path.display())]
    GitMetadata { path: PathBuf },
    /// Symlinks nest deeper than [`MAX_SYMLINKS`].
    #[error("it goes through more than {MAX_SYMLINKS} symlinks")]
    TooManyLinks,
    /// The file changed between its check and its open (a racing writer).
    #[error("it changed while it was being opened; try again")]
    Changed,
    /// Any other error from the file system.
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl From<Errno> for AccessError {
    fn from(e: Errno) -> Self {
        match e {
            Errno::NOENT => AccessError::NotFound,
            Errno::NOTDIR => AccessError::NotDir,
            Errno::ISDIR => AccessError::IsDir,
            Errno::LOOP => AccessError::TooManyLinks,
            other => AccessError::Io(other.into()),
        }
    }
}

/// What kind of thing an entry is, without following a symlink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    /// A regular file and its size in bytes.
    File(u64),
    /// A symlink and its target, as written.
    Symlink(String),
    /// A FIFO, socket or device.
    Other,
}

/// One entry of [`Root::read_dir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: EntryKind,
}

/// What [`Root::metadata`] reports (symlinks inside followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub file_type: FileType,
    pub len: u64,
    pub links: u64,
}

impl Meta {
    fn of(st: &Stat) -> Meta {
        Meta {
            file_type: FileType::from_raw_mode(st.st_mode),
            len: u64::try_from(st.st_size).unwrap_or(0),
            links: st.st_nlink,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.file_type == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.file_type == FileType::RegularFile
    }
}

/// An allowed directory, held open. Cheap to clone (the descriptor is
/// shared).
#[derive(Clone, Debug)]
pub struct Root {
    /// The path as configured, for messages and for mapping absolute paths.
    path: PathBuf,
    /// Its canonical form, when it could be found.
    canonical: PathBuf,
    /// The directory, opened once; `None` when it did not exist at start
    /// (the spill dir is created on first use), then opened per call.
    fd: Option<Arc<OwnedFd>>,
}

/// A resolved path: a directory beneath the root and, unless the path is
/// that directory itself, one name in it that is not a symlink (as of the
/// resolution; every later use passes `O_NOFOLLOW` or does not follow).
struct Target {
    dir: OwnedFd,
    name: Option<OsString>,
}

impl Root {
    /// The root at `path`. The directory is opened now when it exists.
    pub fn new(path: &Path) -> Root {
        let fd = open_root(path).ok().map(Arc::new);
        Root {
            path: path.to_path_buf(),
            canonical: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
            fd,
        }
    }

    /// The root's path as configured.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path` relative to this root, when it lies lexically beneath it (as
    /// configured or in canonical form). `path` must be normalized.
    pub fn strip(&self, path: &Path) -> Option<PathBuf> {
        path.strip_prefix(&self.path)
            .or_else(|_| path.strip_prefix(&self.canonical))
            .ok()
            .map(Path::to_path_buf)
    }

    fn dir_fd(&self) -> Result<OwnedFd, AccessError> {
        match &self.fd {
            Some(fd) => Ok(fd.try_clone()?),
            None => open_root(&self.path).map_err(AccessError::from),
        }
    }

    fn outside(&self, resolved: PathBuf) -> AccessError {
        AccessError::Outside {
            resolved,
            root: self.path.clone(),
        }
    }

    /// Opens a regular file for reading. FIFOs, devices and sockets are
    /// refused without being opened for IO; so are hard-linked files.
    pub fn open_read(&self, rel: &Path) -> Result<(File, Meta), AccessError> {
        let target = self.resolve(rel)?;
        let Some(name) = target.name else {
            return Err(AccessError::IsDir);
        };
        let probe = rustix::fs::openat(
            &target.dir,
            name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let before = rustix::fs::fstat(&probe)?;
        check_regular(&before)?;
        if before.st_nlink > 1 {
            return Err(AccessError::HardLinked {
                links: before.st_nlink,
            });
        }
        let fd = rustix::fs::openat(
            &target.dir,
            name.as_os_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let after = rustix::fs::fstat(&fd)?;
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
            return Err(AccessError::Changed);
        }
        check_regular(&after)?;
        if after.st_nlink > 1 {
            return Err(AccessError::HardLinked {
                links: after.st_nlink,
            });
        }
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
        Ok((File::from(fd), Meta::of(&after)))
    }

    /// What is at `rel`, with symlinks inside the root followed.
    pub fn metadata(&self, rel: &Path) -> Result<Meta, AccessError> {
        let target = self.resolve(rel)?;
        let st = match &target.name {
            Some(name) => {
                rustix::fs::statat(&target.dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?
            }
            None => rustix::fs::fstat(&target.dir)?,
        };
        Ok(Meta::of(&st))
    }

    /// The entries of the directory at `rel` (without `.` and `..`), in no
    /// particular order, described without following symlinks.
    pub fn read_dir(&self, rel: &Path) -> Result<Vec<Entry>, AccessError> {
        let target = self.resolve(rel)?;
        let name = target.name.as_deref().unwrap_or(OsStr::new("."));
        let dir = rustix::fs::openat(
            &target.dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut entries = Vec::new();
        for entry in rustix::fs::Dir::read_from(&dir)? {
            let entry = entry?;
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let name = OsStr::from_bytes(bytes);
            let kind = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::Directory => EntryKind::Dir,
                    FileType::RegularFile => {
                        EntryKind::File(u64::try_from(st.st_size).unwrap_or(0))
                    }
                    FileType::Symlink => EntryKind::Symlink(
                        rustix::fs::readlinkat(&dir, name, Vec::new())
                            .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned())
                            .unwrap_or_else(|_| "?".to_string()),
                    ),
                    _ => EntryKind::Other,
                },
                // It vanished, or cannot be looked at: still listed.
                Err(_) => EntryKind::Other,
            };
            entries.push(Entry {
                name: name.to_string_lossy().into_owned(),
                kind,
            });
        }
        Ok(entries)
    }

    /// Creates the directory `rel` and its missing parents, beneath the
    /// root (symlinks inside followed, none out).
    /// No directory is created behind the `fence`.
    pub fn create_dir_all(&self, rel: &Path, fence: Fence<'_>) -> Result<(), AccessError> {
        let root = self.dir_fd()?;
        self.create_dir_all_in(root.as_fd(), rel, fence, 0)
    }

    fn create_dir_all_in(
        &self,
        root: BorrowedFd<'_>,
        rel: &Path,
        fence: Fence<'_>,
        depth: usize,
    ) -> Result<(), AccessError> {
        if depth > MAX_ANCESTORS {
            return Err(AccessError::TooManyLinks);
        }
        match self.open_dir(root, rel) {
            Ok(_) => return Ok(()),
            Err(AccessError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let (parent, Some(name)) = split_last(rel) else {
            // The root itself is missing.
            return Err(AccessError::NotFound);
        };
        self.create_dir_all_in(root, &parent, fence, depth + 1)?;
        let dir = self.open_dir(root, &parent)?;
        check_fence(root, &dir, &name, fence)?;
        match rustix::fs::mkdirat(&dir, name.as_os_str(), Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces (or creates) the regular file at `rel` with `bytes`, so
    /// readers see the old file or the new one: a temporary file in the
    /// same directory is written, synced and renamed over the name, all
    /// relative to one directory descriptor. An existing file keeps its
    /// permissions. A symlink inside is followed (its target replaced, the
    /// link kept). Refused: a directory, a FIFO, device or socket, and
    /// anything behind the `fence`. Returns whether a file existed.
    pub fn write_atomic(
        &self,
        rel: &Path,
        bytes: &[u8],
        fence: Fence<'_>,
    ) -> Result<bool, AccessError> {
        let target = self.resolve(rel)?;
        let Some(name) = target.name else {
            return Err(AccessError::IsDir);
        };
        check_fence(self.dir_fd()?.as_fd(), &target.dir, &name, fence)?;
        let existing =
            match rustix::fs::statat(&target.dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Some(st),
                Err(Errno::NOENT) => None,
                Err(e) => return Err(e.into()),
            };
        let mode = match &existing {
            Some(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => return Err(AccessError::IsDir),
                // Swapped in after the resolution: the rename below
                // replaces the link itself, never its target.
                FileType::RegularFile | FileType::Symlink => {
                    Some(Mode::from_raw_mode(st.st_mode) & Mode::from_raw_mode(0o7777))
                }
                other => {
                    return Err(AccessError::NotRegular {
                        kind: kind_name(other),
                    });
                }
            },
            None => None,
        };
        let (temp, file) = create_temp(&target.dir, &name)?;
        let result = fill(file, bytes, mode).and_then(|()| {
            rustix::fs::renameat(&target.dir, temp.as_os_str(), &target.dir, name.as_os_str())
                .map_err(io::Error::from)
        });
        if let Err(e) = result {
            // Best effort: the write failed, and that is the error to report.
            let _ = rustix::fs::unlinkat(&target.dir, temp.as_os_str(), AtFlags::empty());
            return Err(e.into());
        }
        sync_dir(&target.dir);
        Ok(existing.is_some())
    }

    /// Removes the regular file (or symlink) named `rel`, never what a
    /// symlink there points to: the parent is resolved beneath the root and
    /// the name unlinked relative to it. A directory is refused. Returns
    /// whether something was removed.
    pub fn remove_file(&self, rel: &Path, fence: Fence<'_>) -> Result<bool, AccessError> {
        let (parent, Some(name)) = split_last(rel) else {
            return Err(AccessError::IsDir);
        };
        let root = self.dir_fd()?;
        let dir = self.open_dir(root.as_fd(), &parent)?;
        check_fence(root.as_fd(), &dir, &name, fence)?;
        match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => return Err(AccessError::IsDir),
                FileType::RegularFile | FileType::Symlink => {}
                other => {
                    return Err(AccessError::NotRegular {
                        kind: kind_name(other),
                    });
                }
            },
            Err(Errno::NOENT) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        rustix::fs::unlinkat(&dir, name.as_os_str(), AtFlags::empty())?;
        sync_dir(&dir);
        Ok(true)
    }

    /// Resolves `rel` to a directory beneath the root and a final name that
    /// is not a symlink, following symlinks inside the root.
    fn resolve(&self, rel: &Path) -> Result<Target, AccessError> {
        let root = self.dir_fd()?;
        let mut rel = rel.to_path_buf();
        for _ in 0..MAX_SYMLINKS {
            let (parent, name) = split_last(&rel);
            let dir = self.open_dir(root.as_fd(), &parent)?;
            let Some(name) = name else {
                return Ok(Target { dir, name: None });
            };
            match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    let link = rustix::fs::readlinkat(&dir, name.as_os_str(), Vec::new())?;
                    let link = PathBuf::from(OsStr::from_bytes(link.as_bytes()));
                    rel = if link.is_absolute() {
                        let normal = lexical(&link);
                        self.strip(&normal).ok_or_else(|| self.outside(normal))?
                    } else {
                        parent.join(link)
                    };
                }
                _ => {
                    return Ok(Target {
                        dir,
                        name: Some(name),
                    });
                }
            }
        }
        Err(AccessError::TooManyLinks)
    }

    /// Opens the directory `rel` beneath `root` as an `O_PATH` descriptor:
    /// one `openat2` call, or the walk where it cannot decide.
    fn open_dir(&self, root: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, AccessError> {
        if rel.as_os_str().is_empty() {
            return Ok(root.try_clone_to_owned()?);
        }
        let how = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        for _ in 0..OPENAT2_RETRIES {
            match rustix::fs::openat2(root, rel, how, Mode::empty(), resolve) {
                Ok(fd) => return Ok(fd),
                Err(Errno::AGAIN) => continue,
                // Leaving the root, or an absolute symlink (maybe inside),
                // or no openat2 on this kernel: the walk decides.
                Err(Errno::XDEV | Errno::NOSYS | Errno::PERM) => break,
                Err(e) => return Err(e.into()),
            }
        }
        self.walk_dir(root, rel)
    }

    /// Opens the directory `rel` beneath `root` one component at a time,
    /// never following a symlink in the kernel: each is read and resolved
    /// here, an absolute target only when it lies inside the root.
    fn walk_dir(&self, root: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, AccessError> {
        let mut stack = vec![root.try_clone_to_owned()?];
        let mut pending: VecDeque<OsString> = parts(rel).collect();
        let mut links = 0;
        let mut seen = PathBuf::new();
        while let Some(part) = pending.pop_front() {
            if part == ".." {
                if stack.len() == 1 {
                    return Err(self.outside(lexical(&self.path.join(&seen).join(".."))));
                }
                stack.pop();
                seen.pop();
                continue;
            }
            let top = stack.last().ok_or(AccessError::NotFound)?;
            let st = rustix::fs::statat(top, part.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Symlink => {
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(AccessError::TooManyLinks);
                    }
                    let link = rustix::fs::readlinkat(top, part.as_os_str(), Vec::new())?;
                    let link = PathBuf::from(OsStr::from_bytes(link.as_bytes()));
                    if link.is_absolute() {
                        let normal = lexical(&link);
                        let inside = self.strip(&normal).ok_or_else(|| self.outside(normal))?;
                        stack.truncate(1);
                        seen = PathBuf::new();
                        for p in parts(&inside).rev() {
                            pending.push_front(p);
                        }
                    } else {
                        for p in parts(&link).rev() {
                            pending.push_front(p);
                        }
                    }
                }
                FileType::Directory => {
                    let fd = rustix::fs::openat(
                        top,
                        part.as_os_str(),
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )?;
                    seen.push(&part);
                    stack.push(fd);
                }
                _ => return Err(AccessError::NotDir),
            }
        }
        stack.pop().ok_or(AccessError::NotFound)
    }
}

/// A path a tool was given, placed beneath one of the runtime's roots: the
/// handle file tools use instead of a checked path.
#[derive(Clone, Debug)]
pub struct Located {
    root: Root,
    rel: PathBuf,
    /// The path as the policy and people see it: the root joined with the
    /// relative part, normalized.
    pub path: PathBuf,
    /// The agent's own directories: readable, never written.
    protected: Arc<[PathBuf]>,
}

impl Located {
    pub fn new(root: Root, rel: PathBuf, protected: Arc<[PathBuf]>) -> Located {
        let path = lexical(&root.path.join(&rel));
        Located {
            root,
            rel,
            path,
            protected,
        }
    }

    /// What the tools' writes may not touch: the agent's own dirs and
    /// the repository's metadata.
    fn fence(&self) -> Fence<'_> {
        Fence {
            dirs: &self.protected,
            git: true,
        }
    }

    /// The root this path lies beneath.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// See [`Root::open_read`].
    pub fn open_read(&self) -> Result<(File, Meta), AccessError> {
        self.root.open_read(&self.rel)
    }

    /// See [`Root::metadata`].
    pub fn metadata(&self) -> Result<Meta, AccessError> {
        self.root.metadata(&self.rel)
    }

    /// See [`Root::read_dir`].
    pub fn read_dir(&self) -> Result<Vec<Entry>, AccessError> {
        self.root.read_dir(&self.rel)
    }

    /// Creates the missing parent directories, then writes the file
    /// atomically ([`Root::write_atomic`]). Returns whether it existed.
    pub fn write(&self, bytes: &[u8]) -> Result<bool, AccessError> {
        if let Some(parent) = self.rel.parent() {
            self.root.create_dir_all(parent, self.fence())?;
        }
        self.root.write_atomic(&self.rel, bytes, self.fence())
    }
}

/// Opens a root directory (its own path is trusted configuration).
fn open_root(path: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// The path's parts, without `.` (a `/` prefix cannot occur: paths here are
/// relative).
fn parts(path: &Path) -> impl DoubleEndedIterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(p) => Some(p.to_os_string()),
        Component::ParentDir => Some(OsString::from("..")),
        Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
    })
}

/// Splits off the last name. A path that ends in `..` (or is empty) names a
/// directory as a whole: no last name.
fn split_last(path: &Path) -> (PathBuf, Option<OsString>) {
    let mut all: Vec<OsString> = parts(path).collect();
    match all.last() {
        Some(last) if last != ".." => {
            let name = all.pop();
            (all.iter().collect(), name)
        }
        _ => (all.iter().collect(), None),
    }
}

/// Removes `.` and resolves `..` without touching the file system.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn check_regular(st: &Stat) -> Result<(), AccessError> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(()),
        FileType::Directory => Err(AccessError::IsDir),
        // The name was a plain file a moment ago and is a link now.
        FileType::Symlink => Err(AccessError::Changed),
        other => Err(AccessError::NotRegular {
            kind: kind_name(other),
        }),
    }
}

/// A file type as people name it.
fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::Fifo => "FIFO (named pipe)",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        _ => "special file",
    }
}

/// Refuses an entry `name` in the opened directory `dir` (beneath the
/// root `root`) that lies behind the fence. Both checks read the
/// directory as opened, so a symlink swapped in by the path's text changes
/// nothing.
fn check_fence(
    root: BorrowedFd<'_>,
    dir: &OwnedFd,
    name: &OsStr,
    fence: Fence<'_>,
) -> Result<(), AccessError> {
    if let Some(dir) = beneath_any(dir, fence.dirs)? {
        return Err(AccessError::Protected { dir });
    }
    if fence.git {
        let opened = opened_path(dir.as_fd())?;
        let inside = opened_path(root)
            .ok()
            .and_then(|root| opened.strip_prefix(root).ok().map(Path::to_path_buf))
            .unwrap_or_else(|| opened.clone());
        if name == GIT_DIR || inside.components().any(|c| c.as_os_str() == GIT_DIR) {
            return Err(AccessError::GitMetadata {
                path: opened.join(name),
            });
        }
    }
    Ok(())
}

/// Where an open directory is, as the kernel resolved it. Without
/// `/proc` this is an error: the fence is not guessed.
fn opened_path(dir: BorrowedFd<'_>) -> Result<PathBuf, AccessError> {
    use std::os::fd::AsRawFd;
    Ok(std::fs::read_link(format!(
        "/proc/self/fd/{}",
        dir.as_raw_fd()
    ))?)
}

/// The protected directory `dir` lies beneath (or is), found by climbing
/// `..` from the descriptor and comparing device and inode numbers, so no
/// path spelling or symlink can hide it.
fn beneath_any(dir: &OwnedFd, protected: &[PathBuf]) -> Result<Option<PathBuf>, AccessError> {
    let ids: Vec<((u64, u64), &PathBuf)> = protected
        .iter()
        .filter_map(|p| {
            let st = rustix::fs::stat(p).ok()?;
            Some(((st.st_dev, st.st_ino), p))
        })
        .collect();
    if ids.is_empty() {
        return Ok(None);
    }
    let mut current = dir.try_clone()?;
    for _ in 0..MAX_ANCESTORS {
        let st = rustix::fs::fstat(&current)?;
        let id = (st.st_dev, st.st_ino);
        if let Some((_, p)) = ids.iter().find(|(pid, _)| *pid == id) {
            return Ok(Some((*p).clone()));
        }
        let parent = rustix::fs::openat(
            &current,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let pst = rustix::fs::fstat(&parent)?;
        if (pst.st_dev, pst.st_ino) == id {
            return Ok(None);
        }
        current = parent;
    }
    Ok(None)
}

/// Creates `.NAME.tmp-PID-RANDOM` next to the target, new and not
/// following links.
fn create_temp(dir: &OwnedFd, name: &OsStr) -> io::Result<(OsString, File)> {
    let pid = std::process::id();
    let mut last_err = None;
    for _ in 0..TEMP_NAME_ATTEMPTS {
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(".tmp-{pid}-{:016x}", random_u64()));
        match rustix::fs::openat(
            dir,
            temp.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => return Ok((temp, File::from(fd))),
            Err(Errno::EXIST) => last_err = Some(io::Error::from(Errno::EXIST)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

fn fill(mut file: File, bytes: &[u8], mode: Option<Mode>) -> io::Result<()> {
    file.write_all(bytes)?;
    if let Some(mode) = mode {
        rustix::fs::fchmod(&file, mode)?;
    }
    file.sync_all()
}

/// Makes a rename durable. Best effort: some file systems refuse to sync a
/// directory, and the data is already safe in the file.
fn sync_dir(dir: &OwnedFd) {
    if let Ok(d) = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = rustix::fs::fsync(&d);
    }
}

/// 64 random bits from the kernel, for names another process must not
/// guess. Falls back to the time and a counter if `getrandom` fails (names
/// are created with `O_EXCL` anyway).
pub fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static FALLBACK: AtomicU64 = AtomicU64::new(0);
    let mut buf = [0u8; 8];
    match rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_ne_bytes(buf),
        _ => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            nanos ^ FALLBACK.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::time::{Duration, Instant};

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "top secret").unwrap();
        (dir, ws, outside)
    }

    fn read(root: &Root, rel: &str) -> Result<String, AccessError> {
        let (mut f, _) = root.open_read(Path::new(rel))?;
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        Ok(s)
    }

    #[test]
    fn symlinks_out_are_refused_and_inside_ones_followed() {
        let (_d, ws, outside) = setup();
        std::fs::create_dir(ws.join("real")).unwrap();
        std::fs::write(ws.join("real/a.txt"), "alpha").unwrap();
        symlink("real", ws.join("rel")).unwrap();
        symlink(ws.join("real"), ws.join("abs")).unwrap();
        symlink("real/a.txt", ws.join("file-link")).unwrap();
        symlink(outside.join("secret"), ws.join("out-abs")).unwrap();
        symlink("../outside/secret", ws.join("out-rel")).unwrap();
        symlink(&outside, ws.join("out-dir")).unwrap();
        let root = Root::new(&ws);
        assert_eq!(read(&root, "rel/a.txt").unwrap(), "alpha");
        assert_eq!(read(&root, "abs/a.txt").unwrap(), "alpha");
        assert_eq!(read(&root, "file-link").unwrap(), "alpha");
        assert_eq!(read(&root, "real/../real/a.txt").unwrap(), "alpha");
        for bad in ["out-abs", "out-rel", "out-dir/secret", "../outside/secret"] {
            let err = read(&root, bad).unwrap_err();
            assert!(matches!(err, AccessError::Outside { .. }), "{bad}: {err}");
        }
        let err = root
            .write_atomic(Path::new("out-dir/planted"), b"x", Fence::NONE)
            .unwrap_err();
        assert!(matches!(err, AccessError::Outside { .. }), "{err}");
        assert!(!outside.join("planted").exists());
    }

    #[test]
    fn a_write_through_an_inside_link_keeps_the_link() {
        let (_d, ws, _) = setup();
        std::fs::write(ws.join("real.txt"), "old").unwrap();
        std::fs::set_permissions(ws.join("real.txt"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        symlink(ws.join("real.txt"), ws.join("link.txt")).unwrap();
        let root = Root::new(&ws);
        assert!(
            root.write_atomic(Path::new("link.txt"), b"new", Fence::NONE)
                .unwrap()
        );
        assert!(
            std::fs::symlink_metadata(ws.join("link.txt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(ws.join("real.txt")).unwrap(), "new");
        let mode = std::fs::metadata(ws.join("real.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 2);
        assert!(
            !root
                .write_atomic(Path::new("new.txt"), b"n", Fence::NONE)
                .unwrap()
        );
    }

    #[test]
    fn fifos_and_devices_are_refused_at_once() {
        let (_d, ws, _) = setup();
        let made = std::process::Command::new("mkfifo")
            .arg(ws.join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        symlink("/dev/zero", ws.join("zero")).unwrap();
        std::fs::create_dir(ws.join("dev")).unwrap();
        let root = Root::new(&ws);
        let started = Instant::now();
        let err = read(&root, "fifo").unwrap_err();
        assert!(
            matches!(err, AccessError::NotRegular { kind } if kind.contains("FIFO")),
            "{err}"
        );
        let err = root
            .write_atomic(Path::new("fifo"), b"x", Fence::NONE)
            .unwrap_err();
        assert!(matches!(err, AccessError::NotRegular { .. }), "{err}");
        // /dev/zero through a link is outside the root.
        assert!(matches!(
            read(&root, "zero"),
            Err(AccessError::Outside { .. })
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
        // A device inside a root (the root is /dev) is refused by kind.
        let dev = Root::new(Path::new("/dev"));
        let err = read(&dev, "null").unwrap_err();
        assert!(matches!(err, AccessError::NotRegular { .. }), "{err}");
        let err = dev
            .write_atomic(Path::new("null"), b"x", Fence::NONE)
            .unwrap_err();
        assert!(matches!(err, AccessError::NotRegular { .. }), "{err}");
    }

    #[test]
    fn hard_links_are_not_read() {
        let (_d, ws, outside) = setup();
        std::fs::hard_link(outside.join("secret"), ws.join("h")).unwrap();
        let root = Root::new(&ws);
        let err = read(&root, "h").unwrap_err();
        assert!(matches!(err, AccessError::HardLinked { links: 2 }), "{err}");
    }

    #[test]
    fn protected_dirs_are_refused_for_writes_by_inode() {
        let (_d, ws, _) = setup();
        std::fs::create_dir_all(ws.join("data/out")).unwrap();
        symlink("data/out", ws.join("alias")).unwrap();
        let root = Root::new(&ws);
        let protected = [ws.join("data")];
        let fence = Fence {
            dirs: &protected,
            git: false,
        };
        for path in ["data/x", "data/out/x", "alias/x"] {
            let err = root.write_atomic(Path::new(path), b"x", fence).unwrap_err();
            assert!(
                matches!(err, AccessError::Protected { .. }),
                "{path}: {err}"
            );
        }
        assert!(root.write_atomic(Path::new("ok"), b"x", fence).is_ok());
    }

    #[test]
    fn the_git_fence_refuses_repository_metadata_by_where_it_is() {
        let (_d, ws, _) = setup();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.join("sub/.git")).unwrap();
        symlink(".git", ws.join("meta")).unwrap();
        symlink(".git/hooks", ws.join("hooks")).unwrap();
        let root = Root::new(&ws);
        let fence = Fence {
            dirs: &[],
            git: true,
        };
        for path in [
            ".git/config",
            ".git/hooks/post-checkout",
            "meta/config",
            "hooks/pre-commit",
            "sub/.git/config",
            "sub/.git",
            ".git",
        ] {
            let err = root.write_atomic(Path::new(path), b"x", fence).unwrap_err();
            assert!(
                matches!(err, AccessError::GitMetadata { .. }),
                "{path}: {err}"
            );
        }
        for dir in [".git/hooks/x", "new/.git", "new/.git/hooks"] {
            let err = root.create_dir_all(Path::new(dir), fence).unwrap_err();
            assert!(
                matches!(err, AccessError::GitMetadata { .. }),
                "{dir}: {err}"
            );
        }
        assert!(!ws.join("new/.git").exists());
        let err = root.remove_file(Path::new("meta/HEAD"), fence).unwrap_err();
        assert!(matches!(err, AccessError::GitMetadata { .. }), "{err}");
        assert!(!ws.join(".git/config").exists());
        // Names that only look like it are ordinary files.
        for path in [".gitignore", "src/.github/ci.yml", "x.git"] {
            root.create_dir_all(Path::new(path).parent().unwrap(), fence)
                .unwrap();
            root.write_atomic(Path::new(path), b"x", fence).unwrap();
        }
    }

    #[test]
    fn dirs_are_created_and_listed_beneath() {
        let (_d, ws, outside) = setup();
        symlink(&outside, ws.join("out")).unwrap();
        let root = Root::new(&ws);
        root.create_dir_all(Path::new("a/b/c"), Fence::NONE)
            .unwrap();
        assert!(ws.join("a/b/c").is_dir());
        assert!(matches!(
            root.create_dir_all(Path::new("out/new"), Fence::NONE),
            Err(AccessError::Outside { .. })
        ));
        assert!(!outside.join("new").exists());
        std::fs::write(ws.join("a/f"), "12345").unwrap();
        let mut entries = root.read_dir(Path::new("a")).unwrap();
        entries.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(
            entries,
            [
                Entry {
                    name: "b".into(),
                    kind: EntryKind::Dir
                },
                Entry {
                    name: "f".into(),
                    kind: EntryKind::File(5)
                },
            ]
        );
        assert!(matches!(
            root.read_dir(Path::new("out")),
            Err(AccessError::Outside { .. })
        ));
        assert!(root.metadata(Path::new("")).unwrap().is_dir());
        assert!(matches!(
            root.metadata(Path::new("nope")),
            Err(AccessError::NotFound)
        ));
    }
}

//! Spill files: where a command's stream that outgrew the output cap is
//! saved, so the model can page through it with `read_file` or `grep`.
//!
//! A spill file is the agent's, not the command's:
//! - its directory (`<data dir>/outputs/<session>`) is created with mode
//!   0700 and is not among the sandbox's writable dirs;
//! - the file is created new (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600)
//!   relative to that directory's descriptor, under a name with 64 random
//!   bits, so a command cannot plant a symlink or a file where the agent
//!   will write;
//! - it holds at most the spill cap (`spill_cap` in `policy.rhai`, about
//!   1 GB by default). Past it, the first half of the cap stays in the
//!   file, the latest bytes go round a second, unnamed segment of the other
//!   half, and when the command ends the file becomes head + a marker that
//!   says how much was dropped + tail.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::beneath::random_u64;

/// Default most bytes of one spill file on disk: large enough for any
/// build or test log a model would page through, small enough that a
/// command printing forever cannot fill the disk.
pub const DEFAULT_SPILL_CAP: u64 = 1 << 30;

/// The smallest spill cap `policy.rhai` may set: below it the head and the
/// tail segment would be too small to be useful.
pub const MIN_SPILL_CAP: u64 = 4096;

/// Mode of the spill directories the agent creates: only its user.
const SPILL_DIR_MODE: u32 = 0o700;

/// Mode of a spill file.
const SPILL_FILE_MODE: u32 = 0o600;

/// Attempts at a fresh random name before giving up (a clash of 64 random
/// bits means someone is planting names; a few tries are plenty).
const NAME_ATTEMPTS: u32 = 8;

/// Where and how to spill one stream.
#[derive(Clone, Debug)]
pub struct SpillTarget {
    /// The spill dir, created on first use.
    pub dir: PathBuf,
    /// The start of the file name (a sanitized call id).
    pub label: String,
    /// `stdout` or `stderr`: the file name's extension.
    pub stream: &'static str,
    /// Most bytes kept on disk.
    pub cap: u64,
}

/// What became of a spilled stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spilled {
    pub path: PathBuf,
    /// Bytes of the stream that the cap dropped from the middle (0: the
    /// file holds the whole stream).
    pub dropped: u64,
}

/// An open spill file being written.
#[derive(Debug)]
pub struct SpillFile {
    path: PathBuf,
    dir: OwnedFd,
    file: File,
    /// Bytes in `file` so far (the head, while no tail segment exists).
    written: u64,
    head_cap: u64,
    tail_cap: u64,
    tail: Option<Ring>,
}

/// The latest bytes of a stream, in a fixed-size file written round.
#[derive(Debug)]
struct Ring {
    file: File,
    size: u64,
    /// Bytes ever pushed.
    pushed: u64,
}

impl Ring {
    fn push(&mut self, mut chunk: &[u8]) -> io::Result<()> {
        let len = chunk.len() as u64;
        if len > self.size {
            let skip = len - self.size;
            self.pushed += skip;
            chunk = &chunk[skip as usize..];
        }
        while !chunk.is_empty() {
            let at = self.pushed % self.size;
            let n = (chunk.len() as u64).min(self.size - at) as usize;
            self.file.write_all_at(&chunk[..n], at)?;
            self.pushed += n as u64;
            chunk = &chunk[n..];
        }
        Ok(())
    }

    /// Appends the ring's bytes, oldest first, to `out`.
    fn copy_to(mut self, out: &mut File) -> io::Result<()> {
        let (start, len) = if self.pushed <= self.size {
            (0, self.pushed)
        } else {
            (self.pushed % self.size, self.size)
        };
        let first = len.min(self.size - start);
        self.file.seek(SeekFrom::Start(start))?;
        io::copy(&mut io::Read::take(&mut self.file, first), out)?;
        self.file.seek(SeekFrom::Start(0))?;
        io::copy(&mut io::Read::take(&mut self.file, len - first), out)?;
        Ok(())
    }

    fn dropped(&self) -> u64 {
        self.pushed.saturating_sub(self.size)
    }
}

impl SpillFile {
    /// Creates the spill dir (0700) when missing, and a new file in it.
    pub fn create(target: &SpillTarget) -> io::Result<SpillFile> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(SPILL_DIR_MODE)
            .create(&target.dir)?;
        let dir = rustix::fs::open(
            &target.dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let (name, file) = create_new(&dir, |r| {
            format!("{}-{r:016x}.{}", target.label, target.stream)
        })?;
        let cap = target.cap.max(MIN_SPILL_CAP);
        let head_cap = cap / 2;
        Ok(SpillFile {
            path: target.dir.join(name),
            dir,
            file,
            written: 0,
            head_cap,
            tail_cap: cap - head_cap,
            tail: None,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a chunk of the stream: to the head while it has room, then
    /// round the tail segment.
    pub fn write(&mut self, mut chunk: &[u8]) -> io::Result<()> {
        if self.written < self.head_cap {
            let n = (chunk.len() as u64).min(self.head_cap - self.written) as usize;
            self.file.write_all(&chunk[..n])?;
            self.written += n as u64;
            chunk = &chunk[n..];
        }
        if chunk.is_empty() {
            return Ok(());
        }
        if self.tail.is_none() {
            let (name, file) = create_new(&self.dir, |r| format!(".tail-{r:016x}"))?;
            // Unnamed from now on: nothing can open it by name.
            let _ = rustix::fs::unlinkat(&self.dir, name.as_str(), AtFlags::empty());
            self.tail = Some(Ring {
                file,
                size: self.tail_cap,
                pushed: 0,
            });
        }
        match &mut self.tail {
            Some(ring) => ring.push(chunk),
            None => Ok(()),
        }
    }

    /// Stitches head, marker (when bytes were dropped) and tail into the
    /// file, and says what it holds.
    pub fn finish(mut self) -> io::Result<Spilled> {
        let dropped = match self.tail.take() {
            None => 0,
            Some(ring) => {
                let dropped = ring.dropped();
                if dropped > 0 {
                    let marker = spill_gap_marker(dropped, self.head_cap + self.tail_cap);
                    self.file.write_all(marker.as_bytes())?;
                }
                ring.copy_to(&mut self.file)?;
                dropped
            }
        };
        self.file.flush()?;
        Ok(Spilled {
            path: self.path,
            dropped,
        })
    }

    /// Removes the file (a failed spill would only mislead).
    pub fn discard(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Creates a new file with a random name in `dir`, never following or
/// reusing what is there.
fn create_new(dir: &OwnedFd, name: impl Fn(u64) -> String) -> io::Result<(String, File)> {
    for _ in 0..NAME_ATTEMPTS {
        let candidate = name(random_u64());
        match rustix::fs::openat(
            dir,
            candidate.as_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(SPILL_FILE_MODE),
        ) {
            Ok(fd) => return Ok((candidate, File::from(fd))),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "every spill file name tried was already taken",
    ))
}

/// Written into a spill file where the cap dropped the middle.
pub fn spill_gap_marker(dropped: u64, cap: u64) -> String {
    format!(
        "\n[... {dropped} bytes dropped here: the output passed the spill cap of {cap} bytes (spill_cap in policy.rhai); above is its start, below its end ...]\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn target(dir: &Path, cap: u64) -> SpillTarget {
        SpillTarget {
            dir: dir.join("outputs/s1"),
            label: "call_1".into(),
            stream: "stdout",
            cap,
        }
    }

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| b'a' + (i % 26) as u8).collect()
    }

    #[test]
    fn within_the_cap_the_file_is_the_stream() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(dir.path(), 10_000);
        let mut spill = SpillFile::create(&t).unwrap();
        let bytes = data(9_000);
        for chunk in bytes.chunks(777) {
            spill.write(chunk).unwrap();
        }
        let done = spill.finish().unwrap();
        assert_eq!(done.dropped, 0);
        assert_eq!(std::fs::read(&done.path).unwrap(), bytes);
        let name = done.path.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("call_1-") && name.ends_with(".stdout"),
            "{name}"
        );
        let mode = std::fs::metadata(&t.dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let mode = std::fs::metadata(&done.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // The tail segment left no name behind.
        assert_eq!(std::fs::read_dir(&t.dir).unwrap().count(), 1);
    }

    #[test]
    fn past_the_cap_the_middle_is_dropped_and_marked() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(dir.path(), 10_000);
        let mut spill = SpillFile::create(&t).unwrap();
        let bytes = data(1_000_003);
        for chunk in bytes.chunks(4093) {
            spill.write(chunk).unwrap();
        }
        let done = spill.finish().unwrap();
        assert_eq!(done.dropped, 1_000_003 - 10_000);
        let saved = std::fs::read(&done.path).unwrap();
        let marker = spill_gap_marker(done.dropped, 10_000);
        assert_eq!(saved.len(), 10_000 + marker.len());
        assert_eq!(&saved[..5_000], &bytes[..5_000]);
        assert_eq!(&saved[5_000..5_000 + marker.len()], marker.as_bytes());
        assert_eq!(
            &saved[5_000 + marker.len()..],
            &bytes[bytes.len() - 5_000..]
        );
    }

    #[test]
    fn names_are_fresh_and_planted_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(dir.path(), 10_000);
        std::fs::create_dir_all(&t.dir).unwrap();
        let a = SpillFile::create(&t).unwrap();
        let b = SpillFile::create(&t).unwrap();
        assert_ne!(a.path(), b.path());
        // A link planted at the old, predictable name is left alone.
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "keep").unwrap();
        std::os::unix::fs::symlink(&outside, t.dir.join("call_1.stdout")).unwrap();
        let mut c = SpillFile::create(&t).unwrap();
        c.write(b"data").unwrap();
        c.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    }
}

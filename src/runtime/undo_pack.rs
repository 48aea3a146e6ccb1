//! The undo store's objects: one append-only file per session
//! (`<session>/objects.pack`) instead of a file per object, so keeping a
//! workspace's baseline creates one file, not one per workspace file.
//! Creating a file costs the file system an inode; on a disk where many
//! files were deleted (a build tree removed and rebuilt) ext4 searched
//! its inode tables for about 1 ms per new file, which made a one-shot
//! task in a 51-file workspace 3.5 times slower.
//!
//! A record is a header line, `<sha256 hex> <length>\n`, then the bytes.
//! Records are appended without a sync (see [`Pack::put`]); a record cut
//! by a crash is dropped when the pack is opened, and [`Pack::get`]
//! checks every object's hash, so a damaged one is never returned.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Bytes of a header line: the hash, a space, at most 20 digits, newline.
const MAX_HEADER: usize = 64 + 1 + 20 + 1;

/// One session's pack: where each object's bytes are.
#[derive(Debug)]
pub struct Pack {
    path: PathBuf,
    /// Open once something was read or written.
    file: Option<File>,
    /// Each object's bytes: offset and length.
    at: HashMap<String, (u64, u64)>,
    /// Where the next record goes (the end of the last whole record).
    end: u64,
}

impl Pack {
    /// The pack at `path`: an existing one is read (its record headers
    /// only) and a cut record at its end dropped; none yet is created at
    /// the first [`Pack::put`].
    pub fn open(path: PathBuf) -> Pack {
        let mut pack = Pack {
            path,
            file: None,
            at: HashMap::new(),
            end: 0,
        };
        if let Ok(file) = open(&pack.path, false) {
            pack.end = scan(&file, &mut pack.at);
            pack.file = Some(file);
        }
        pack
    }

    pub fn contains(&self, hash: &str) -> bool {
        self.at.contains_key(hash)
    }

    /// The bytes the pack's whole records take.
    pub fn bytes(&self) -> u64 {
        self.end
    }

    /// Appends the object `bytes` named `hash`. No sync: the first call of
    /// a session keeps every file of the workspace, and a sync there costs
    /// more than the write; the hash check on reading stands in for it.
    pub fn put(&mut self, hash: &str, bytes: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            self.file = Some(open(&self.path, true)?);
        }
        let Some(file) = self.file.as_mut() else {
            return Err(io::Error::other("the pack is not open"));
        };
        let header = format!("{hash} {}\n", bytes.len());
        // A failed write leaves a cut record past `end`; the next put
        // writes over it.
        file.seek(SeekFrom::Start(self.end))?;
        file.write_all(header.as_bytes())?;
        file.write_all(bytes)?;
        let offset = self.end + header.len() as u64;
        self.at
            .insert(hash.to_string(), (offset, bytes.len() as u64));
        self.end = offset + bytes.len() as u64;
        Ok(())
    }

    /// The object named `hash`; `None` when the pack has none, or its
    /// bytes are not what the name says.
    pub fn get(&self, hash: &str) -> Option<Vec<u8>> {
        let (offset, len) = *self.at.get(hash)?;
        let file = self.file.as_ref()?;
        let mut bytes = vec![0; usize::try_from(len).ok()?];
        file.read_exact_at(&mut bytes, offset).ok()?;
        (super::checkpoint::sha256(&bytes) == hash).then_some(bytes)
    }
}

/// Opens the pack for reading and writing, never through a symlink.
fn open(path: &Path, create: bool) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Reads the record headers of `file` into `at` and returns where the
/// last whole record ends.
fn scan(file: &File, at: &mut HashMap<String, (u64, u64)>) -> u64 {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = BufReader::new(file);
    let mut end = 0u64;
    loop {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(MAX_HEADER as u64)
            .read_until(b'\n', &mut line);
        if !matches!(read, Ok(n) if n > 0) || line.last() != Some(&b'\n') {
            return end;
        }
        let Some((hash, len)) = header(&line) else {
            return end;
        };
        let offset = end + line.len() as u64;
        if offset + len > size || reader.seek_relative(len as i64).is_err() {
            return end;
        }
        at.insert(hash, (offset, len));
        end = offset + len;
    }
}

/// A header line's hash and length.
fn header(line: &[u8]) -> Option<(String, u64)> {
    let text = std::str::from_utf8(line.strip_suffix(b"\n")?).ok()?;
    let (hash, len) = text.split_once(' ')?;
    let hex = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    Some((hash.to_string(), len.parse().ok()?)).filter(|_| hex)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::checkpoint::sha256;

    #[test]
    fn objects_are_kept_and_found_again_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s/objects.pack");
        let mut pack = Pack::open(path.clone());
        assert!(!path.exists(), "nothing is created before the first put");
        for content in [&b"one"[..], b"", b"three\nlines\n"] {
            pack.put(&sha256(content), content).unwrap();
        }
        assert_eq!(pack.get(&sha256(b"one")).unwrap(), b"one");
        let pack = Pack::open(path.clone());
        assert_eq!(pack.bytes(), std::fs::metadata(&path).unwrap().len());
        for content in [&b"one"[..], b"", b"three\nlines\n"] {
            assert!(pack.contains(&sha256(content)));
            assert_eq!(pack.get(&sha256(content)).unwrap(), content);
        }
        assert!(pack.get(&sha256(b"never put")).is_none());
    }

    #[test]
    fn a_record_cut_by_a_crash_is_dropped_and_written_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.pack");
        let mut pack = Pack::open(path.clone());
        pack.put(&sha256(b"whole"), b"whole").unwrap();
        let whole = pack.bytes();
        drop(pack);
        // As after a crash in the middle of the second record.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        write!(file, "{} 100\nonly part", sha256(b"cut")).unwrap();
        drop(file);
        let mut pack = Pack::open(path.clone());
        assert_eq!(pack.bytes(), whole);
        assert!(!pack.contains(&sha256(b"cut")));
        pack.put(&sha256(b"next"), b"next").unwrap();
        let pack = Pack::open(path);
        assert_eq!(pack.get(&sha256(b"whole")).unwrap(), b"whole");
        assert_eq!(pack.get(&sha256(b"next")).unwrap(), b"next");
    }

    #[test]
    fn an_object_whose_bytes_changed_is_not_returned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.pack");
        let mut pack = Pack::open(path.clone());
        pack.put(&sha256(b"before"), b"before").unwrap();
        let (offset, _) = pack.at[&sha256(b"before")];
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(b"BEFORE", offset).unwrap();
        assert!(Pack::open(path).get(&sha256(b"before")).is_none());
    }

    #[test]
    fn a_symlink_in_its_place_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"kept").unwrap();
        let path = dir.path().join("objects.pack");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let mut pack = Pack::open(path);
        assert!(pack.put(&sha256(b"x"), b"x").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"kept");
    }
}

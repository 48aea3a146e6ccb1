//! Paths and files: joining a path the model gave to the workspace,
//! writing the agent's own files atomically (scripts written by `agent
//! init`), and printing sizes.
//!
//! File tools do not open paths here: `Runtime::locate` places a path
//! beneath an allowed root and every access goes through
//! [`super::beneath`], which cannot be raced by a swapped symlink.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Attempts at finding an unused temporary name before giving up. A name is
/// only taken when another writer of this process or a stale leftover holds
/// it, so a handful is plenty.
const TEMP_NAME_ATTEMPTS: u32 = 16;

/// Makes temporary names unique among concurrent writes of this process
/// (the pid makes them unique among processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Resolves a path the model gave against the workspace root: absolute paths
/// are kept, relative ones are joined to `workspace`.
///
/// The `Err` is a short reason (no leading "Error"), which the calling tool
/// wraps into its message. Confinement is `Runtime::locate`'s.
pub fn resolve(workspace: &Path, path: &str) -> Result<PathBuf, String> {
    if path.trim().is_empty() {
        return Err("the path is empty".to_string());
    }
    if path.contains('\0') {
        return Err("the path contains a NUL character".to_string());
    }
    let p = Path::new(path);
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(workspace.join(p))
    }
}

/// Canonicalizes the longest existing ancestor and appends the rest. Used
/// only to choose a root for a path spelled through a symlink; access
/// itself goes through [`super::beneath`].
pub fn resolve_existing(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut out = canonical;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Writes `bytes` to `path` so that readers see either the old file or the
/// new one, never a half-written one: the bytes go to a temporary file in
/// the same directory (`.name.tmp-<pid>-<n>`), which is synced and then
/// renamed over `path`. An existing file's permissions are kept. On error
/// the temporary file is removed and `path` is untouched.
///
/// When `path` is a symlink, its target is replaced and the link is kept.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let target = follow_symlink(path);
    let Some(name) = target.file_name() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file", target.display()),
        ));
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let existing_permissions = fs::metadata(&target).ok().map(|m| m.permissions());

    let (temp_path, file) = create_temp(&dir, &name.to_string_lossy())?;
    let result = fill_and_rename(file, &temp_path, &target, bytes, existing_permissions);
    if result.is_err() {
        // Best effort: the write already failed, and that is the error worth
        // reporting.
        let _ = fs::remove_file(&temp_path);
    }
    result?;
    sync_dir(&dir);
    Ok(())
}

/// The file a write to `path` should replace: the symlink's target when
/// `path` is a symlink that resolves, else `path` itself.
fn follow_symlink(path: &Path) -> PathBuf {
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        if let Ok(real) = fs::canonicalize(path) {
            return real;
        }
    }
    path.to_path_buf()
}

/// Creates a fresh temporary file next to the target.
fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    let mut last_err = None;
    for _ in 0..TEMP_NAME_ATTEMPTS {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp_path = dir.join(format!(".{name}.tmp-{pid}-{n}"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp_path)
        {
            Ok(file) => return Ok((temp_path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

fn fill_and_rename(
    mut file: File,
    temp_path: &Path,
    target: &Path,
    bytes: &[u8],
    permissions: Option<fs::Permissions>,
) -> io::Result<()> {
    file.write_all(bytes)?;
    if let Some(permissions) = permissions {
        file.set_permissions(permissions)?;
    }
    file.sync_all()?;
    drop(file);
    fs::rename(temp_path, target)
}

/// Makes the rename itself durable. Best effort: some file systems refuse
/// to sync a directory, and the data is already safe in the file.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// A size for people and models: `512 B`, `1.2 KB`, `3.4 MB`, `1.0 GB`
/// (units of 1024, one decimal above bytes).
pub fn human_size(bytes: u64) -> String {
    const UNIT: f64 = 1024.0;
    const UNITS: [&str; 5] = ["KB", "MB", "GB", "TB", "PB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / UNIT;
    let mut unit = 0;
    // Promote when rounding to one decimal would print "1024.0 KB".
    while value >= UNIT - 0.05 && unit + 1 < UNITS.len() {
        value /= UNIT;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn relative_paths_join_the_workspace() {
        let ws = Path::new("/ws");
        assert_eq!(resolve(ws, "src/a.rs"), Ok(PathBuf::from("/ws/src/a.rs")));
        assert_eq!(resolve(ws, "/etc/hosts"), Ok(PathBuf::from("/etc/hosts")));
        assert!(resolve(ws, "  ").is_err());
        assert!(resolve(ws, "a\0b").is_err());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KB");
        assert_eq!(human_size(1229), "1.2 KB");
        assert_eq!(human_size(1024 * 1024 - 1), "1.0 MB");
        assert_eq!(human_size(5 * 1024 * 1024 * 1024), "5.0 GB");
    }

    #[test]
    fn write_atomic_replaces_and_keeps_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sh");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn write_atomic_through_a_symlink_keeps_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.txt");
        let link = dir.path().join("link.txt");
        fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
    }

    #[test]
    fn write_atomic_fails_cleanly_without_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("a.txt");
        assert!(write_atomic(&path, b"x").is_err());
        assert!(!dir.path().join("missing").exists());
    }
}

//! What the data dir keeps: old sessions, with their run logs and saved
//! tool outputs, are deleted by the rule of `retention()` in `policy.rhai`
//! (an age and a total size). A session is everything named by its id:
//! `sessions/ID.jsonl`, `runs/ID.jsonl`, `outputs/ID/`, `checkpoints/ID/`.
//! [`plan`] is pure; [`prune`] reads the dir and deletes.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::DataDir;

/// A session touched this recently is never deleted: another agent may be
/// writing it right now.
pub const RECENT: Duration = Duration::from_secs(3600);

/// How often the data dir is pruned at most: a start within this time of
/// the last prune ([`DataDir::prune_stamp`]) leaves it alone, so a person
/// starting many one-shot tasks does not walk a big store each time.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Whether a prune is due at `now`, given when the last one started
/// (`None`: never, or unknown). A stamp in the future (a clock set back)
/// counts as due. Pure.
pub fn due(last: Option<SystemTime>, now: SystemTime) -> bool {
    match last {
        None => true,
        Some(t) => now.duration_since(t).map_or(true, |ago| ago >= PRUNE_EVERY),
    }
}

/// Claims the prune at `now`: true when one is [`due`], after moving the
/// stamp to now (so a second agent started meanwhile skips it). A stamp
/// that cannot be written does not stop the prune.
pub fn claim(data: &DataDir) -> bool {
    let stamp = data.prune_stamp();
    let last = std::fs::symlink_metadata(&stamp)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .and_then(|m| m.modified().ok());
    if !due(last, SystemTime::now()) {
        return false;
    }
    let _ = std::fs::create_dir_all(data.root());
    // O_NOFOLLOW: a link planted as the stamp is never written through.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&stamp);
    if let Ok(f) = file {
        let _ = f.set_modified(SystemTime::now());
    }
    true
}

/// The rule: delete sessions older than `keep_days`, then the oldest while
/// all of them together are over `keep_mb`. 0 turns a limit off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub keep_days: u64,
    pub keep_mb: u64,
}

/// One session's files on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub id: String,
    /// The newest change to any of its files.
    pub modified: SystemTime,
    pub bytes: u64,
    pub paths: Vec<PathBuf>,
}

/// What a prune did, for the person (and the tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub sessions: usize,
    pub bytes: u64,
}

/// The ids to delete from `stored` under `rule` at `now`, never `keep`
/// nor anything touched within [`RECENT`]: first by age, then the oldest
/// until the rest fits the size. Pure.
pub fn plan(stored: &[Stored], rule: Retention, now: SystemTime, keep: &[&str]) -> Vec<String> {
    let age = |s: &Stored| now.duration_since(s.modified).unwrap_or_default();
    let mut oldest_first: Vec<&Stored> = stored.iter().collect();
    oldest_first.sort_by(|a, b| a.modified.cmp(&b.modified).then_with(|| a.id.cmp(&b.id)));
    let protected = |s: &Stored| keep.contains(&s.id.as_str()) || age(s) < RECENT;
    let max_age = Duration::from_secs(rule.keep_days.saturating_mul(86_400));
    let mut total: u64 = stored.iter().map(|s| s.bytes).sum();
    let max_bytes = rule.keep_mb.saturating_mul(1 << 20);
    let mut doomed = Vec::new();
    for s in oldest_first {
        if protected(s) {
            continue;
        }
        let too_old = rule.keep_days > 0 && age(s) > max_age;
        let too_big = rule.keep_mb > 0 && total > max_bytes;
        if too_old || too_big {
            total -= s.bytes;
            doomed.push(s.id.clone());
        }
    }
    doomed
}

/// The sessions stored in `data`, grouped by id.
pub fn stored(data: &DataDir) -> Vec<Stored> {
    let mut by_id: BTreeMap<String, Stored> = BTreeMap::new();
    let mut add = |id: String, path: PathBuf, modified: SystemTime, bytes: u64| {
        let s = by_id.entry(id.clone()).or_insert_with(|| Stored {
            id,
            modified: SystemTime::UNIX_EPOCH,
            bytes: 0,
            paths: Vec::new(),
        });
        s.modified = s.modified.max(modified);
        s.bytes += bytes;
        s.paths.push(path);
    };
    for dir in [data.sessions(), data.runs()] {
        for (path, meta) in entries(&dir) {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if let Some(id) = name.strip_suffix(".jsonl")
                && meta.is_file()
            {
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                add(id.to_string(), path.clone(), modified, meta.len());
            }
        }
    }
    for dir in [data.outputs_root(), data.checkpoints_root()] {
        for (path, meta) in entries(&dir) {
            if !meta.is_dir() {
                continue;
            }
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            let (modified, bytes) = tree_size(&path);
            add(
                id,
                path.clone(),
                modified.max(meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)),
                bytes,
            );
        }
    }
    by_id.into_values().collect()
}

/// Deletes what [`plan`] names; a file that cannot be deleted is left
/// for the next start.
pub fn prune(data: &DataDir, rule: Retention, keep: &[&str]) -> Pruned {
    let stored = stored(data);
    let doomed = plan(&stored, rule, SystemTime::now(), keep);
    let mut done = Pruned::default();
    for s in stored.iter().filter(|s| doomed.contains(&s.id)) {
        for path in &s.paths {
            // symlink_metadata: a link is removed, never followed.
            let removed = match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
                Ok(_) => std::fs::remove_file(path),
                Err(e) => Err(e),
            };
            if removed.is_err() {
                continue;
            }
        }
        done.sessions += 1;
        done.bytes += s.bytes;
    }
    done
}

/// A directory's entries with their metadata (links not followed).
fn entries(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    read.flatten()
        .filter_map(|e| Some((e.path(), e.path().symlink_metadata().ok()?)))
        .collect()
}

/// The newest change and the bytes of the files under `dir` (links not
/// followed).
fn tree_size(dir: &Path) -> (SystemTime, u64) {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for (path, meta) in entries(&d) {
            newest = newest.max(meta.modified().unwrap_or(SystemTime::UNIX_EPOCH));
            if meta.is_dir() {
                stack.push(path);
            } else {
                bytes += meta.len();
            }
        }
    }
    (newest, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn s(id: &str, days_old: u64, mb: u64, now: SystemTime) -> Stored {
        Stored {
            id: id.into(),
            modified: now - DAY * days_old as u32,
            bytes: mb << 20,
            paths: Vec::new(),
        }
    }

    #[test]
    fn a_prune_is_due_once_an_hour_and_when_the_clock_went_back() {
        let now = SystemTime::now();
        assert!(due(None, now));
        assert!(!due(Some(now - Duration::from_secs(60)), now));
        assert!(due(Some(now - PRUNE_EVERY), now));
        assert!(due(Some(now + Duration::from_secs(60)), now));
    }

    #[test]
    fn claiming_a_prune_moves_the_stamp_and_a_second_start_skips_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::new(dir.path().join("data"));
        assert!(claim(&data), "a fresh data dir is pruned");
        assert!(data.prune_stamp().is_file());
        assert!(!claim(&data), "a second start within the hour skips it");
        let old = SystemTime::now() - PRUNE_EVERY - Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(data.prune_stamp())
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert!(claim(&data), "an hour later it is due again");
    }

    #[test]
    fn old_sessions_go_then_the_oldest_until_the_rest_fits() {
        let now = SystemTime::now();
        let stored = [
            s("a", 40, 1, now),
            s("b", 20, 300, now),
            s("c", 10, 300, now),
            s("d", 1, 300, now),
        ];
        let rule = Retention {
            keep_days: 30,
            keep_mb: 700,
        };
        // a by age; then 900 MB > 700: b, the oldest left, goes too.
        assert_eq!(plan(&stored, rule, now, &[]), ["a", "b"]);
        let off = Retention {
            keep_days: 0,
            keep_mb: 0,
        };
        assert!(plan(&stored, off, now, &[]).is_empty());
    }

    #[test]
    fn the_current_and_recently_touched_sessions_are_kept() {
        let now = SystemTime::now();
        let mut recent = s("r", 0, 900, now);
        recent.modified = now - Duration::from_secs(60);
        let stored = [s("old", 90, 1, now), recent, s("cur", 90, 1, now)];
        let rule = Retention {
            keep_days: 30,
            keep_mb: 1,
        };
        assert_eq!(plan(&stored, rule, now, &["cur"]), ["old"]);
    }
}

//! Checkpoints for undo: what the agent's tools changed in the workspace,
//! per model turn, and putting it back.
//!
//! Before a call that may change files, every file the workspace tracker
//! lists (and the file a write tool names) whose metadata moved since it
//! was last seen is read and its bytes kept in a content-addressed store
//! (`<data dir>/checkpoints/<session>/objects.pack`, one append-only file
//! of objects named by their sha256, [`super::undo_pack`]; never in the
//! person's repository). After the call the listing is compared again;
//! each file that appeared, changed or vanished becomes a [`Change`]
//! (content before, content after) of the current model turn. A turn with
//! changes is written to `index.json` beside the objects, so `agent undo`
//! works outside the session.
//!
//! Restoring checks every file first: one whose content is no longer what
//! the agent left (the person edited it since) is a [`Conflict`], shown
//! with a diff, and nothing is written unless the person forces it. Writes
//! go through [`Root`] (`openat2` beneath the workspace, no symlink out).
//!
//! Storage is bounded by [`Caps`] (`checkpoint_file_cap` and
//! `checkpoint_total_cap` in `policy.rhai`): a file over the file cap, or
//! one that would pass the session's total, is recorded as not saved and
//! cannot be restored (undo says so). The store is deleted with its session
//! (`data_dir::retention`).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::undo_pack::Pack;

use super::beneath::{AccessError, Fence, Root, lexical};

/// Default bytes of one file kept for undo (8 MB): source files are far
/// smaller; a bigger file is usually generated or binary.
pub const DEFAULT_FILE_CAP: u64 = 8 << 20;
/// Default bytes kept per session in all (256 MB).
pub const DEFAULT_TOTAL_CAP: u64 = 256 << 20;

/// Characters of the person's message kept as a turn's label.
const PROMPT_CHARS: usize = 60;

/// Lines of diff shown per conflicting file.
const CONFLICT_DIFF_LINES: usize = 40;

/// The store's size rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// A file bigger than this is not saved.
    pub file: u64,
    /// Bytes the session's store may hold in all.
    pub total: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            file: DEFAULT_FILE_CAP,
            total: DEFAULT_TOTAL_CAP,
        }
    }
}

/// A file's metadata as the tracker saw it; content is read again only
/// when this moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
}

/// What a file held at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Content {
    /// No file at the path.
    Absent,
    /// The bytes are in the store under `hash`.
    Saved { hash: String, size: u64 },
    /// Not kept; `reason` says why (a cap, an unreadable file).
    Unsaved { reason: String },
}

/// One file a turn changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Relative to the workspace.
    pub path: PathBuf,
    pub before: Content,
    pub after: Content,
}

/// One model turn that changed files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// 1, 2, ... in the session.
    pub n: u32,
    /// The person's message this turn answered (first line, cut).
    pub prompt: String,
    /// Local time the turn ended.
    pub time: String,
    pub changes: Vec<Change>,
    /// Reverted already.
    #[serde(default)]
    pub undone: bool,
    /// The mark of the person's message the turn answered, as the agent
    /// gave it ([`Checkpoints::mark_message`]): how `/rewind N --chat`
    /// finds where the conversation goes back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<u64>,
}

/// What `index.json` holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Index {
    workspace: PathBuf,
    turns: Vec<Turn>,
}

/// A file whose content is no longer what the agent left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub path: PathBuf,
    /// What differs, for the person: a diff or a sentence.
    pub detail: String,
}

/// What a restore did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Turns reverted.
    pub turns: Vec<u32>,
    /// Files written back or removed.
    pub files: Vec<PathBuf>,
    /// Files that could not be restored, and why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Why a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    /// Nothing to revert.
    #[error("there is nothing to undo: {0}")]
    Nothing(String),
    /// The person changed files since the agent did; nothing was written.
    #[error("{} file(s) changed since the agent's edit; nothing was restored", .0.len())]
    Conflicts(Vec<Conflict>),
    /// The store cannot be read or written.
    #[error("the undo store {}: {message}", path.display())]
    Store { path: PathBuf, message: String },
}

/// The checkpoints of one session.
#[derive(Debug)]
pub struct Checkpoints {
    dir: PathBuf,
    pack: Shared,
    root: Root,
    caps: Caps,
    index: Index,
    /// What each file held when last seen, and whether the tracker lists it.
    baseline: HashMap<PathBuf, (Option<Stamp>, Content, bool)>,
    /// The current model turn's changes: content before, content after.
    pending: BTreeMap<PathBuf, (Content, Content)>,
    prompt: String,
    chat: Option<u64>,
    stored_bytes: u64,
    /// The baseline being kept in the background ([`Checkpoints::prefill`]).
    prefill: Option<std::thread::JoinHandle<Prefilled>>,
}

/// What a background prefill kept: each file with the stamp it was listed
/// with, and the store's bytes after it.
#[derive(Debug, Default)]
struct Prefilled {
    kept: Vec<(PathBuf, Stamp, Content)>,
    stored_bytes: u64,
}

/// Where objects go and within which caps: what a capture needs, apart
/// from the session's state, so a background thread can capture too.
#[derive(Clone, Debug)]
struct Store {
    root: Root,
    pack: Shared,
    caps: Caps,
}

/// The session's pack, written by the background prefill and the calls.
type Shared = std::sync::Arc<std::sync::Mutex<Pack>>;

/// The pack's name in a session's store.
const PACK: &str = "objects.pack";
/// Where sessions before the pack kept one file per object; still read.
const LEGACY_OBJECTS: &str = "objects";

/// The session's pack and the bytes its store holds.
fn open_store(dir: &Path) -> (Shared, u64) {
    let pack = Pack::open(dir.join(PACK));
    let bytes = pack.bytes() + dir_bytes(&dir.join(LEGACY_OBJECTS));
    (std::sync::Arc::new(std::sync::Mutex::new(pack)), bytes)
}

impl Checkpoints {
    /// The checkpoints of a session stored in `dir`, for the workspace at
    /// `workspace`. An existing index (a resumed session) is kept.
    pub fn new(dir: PathBuf, workspace: &Path, caps: Caps) -> Self {
        let mut index = load_index(&dir).unwrap_or_default();
        index.workspace = workspace.to_path_buf();
        let (pack, stored_bytes) = open_store(&dir);
        Checkpoints {
            root: Root::new(workspace),
            dir,
            pack,
            caps,
            index,
            baseline: HashMap::new(),
            pending: BTreeMap::new(),
            prompt: String::new(),
            chat: None,
            stored_bytes,
            prefill: None,
        }
    }

    /// Opens a stored session for `agent undo`.
    pub fn open(dir: PathBuf) -> Result<Self, UndoError> {
        let index = load_index(&dir).map_err(|message| UndoError::Store {
            path: dir.clone(),
            message,
        })?;
        let (pack, stored_bytes) = open_store(&dir);
        Ok(Checkpoints {
            root: Root::new(&index.workspace),
            stored_bytes,
            dir,
            pack,
            caps: Caps::default(),
            index,
            baseline: HashMap::new(),
            pending: BTreeMap::new(),
            prompt: String::new(),
            chat: None,
            prefill: None,
        })
    }

    /// The newest session under `root` (the checkpoints root) whose
    /// workspace is `workspace`.
    pub fn latest_for(root: &Path, workspace: &Path) -> Option<PathBuf> {
        let want = workspace.canonicalize().unwrap_or(workspace.to_path_buf());
        let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
        for entry in std::fs::read_dir(root).ok()?.flatten() {
            let dir = entry.path();
            let Ok(meta) = std::fs::metadata(dir.join("index.json")) else {
                continue;
            };
            let Ok(index) = load_index(&dir) else {
                continue;
            };
            let theirs = index.workspace.canonicalize().unwrap_or(index.workspace);
            let Ok(time) = meta.modified() else { continue };
            if theirs == want && best.as_ref().is_none_or(|(t, _)| time > *t) {
                best = Some((time, dir));
            }
        }
        best.map(|(_, d)| d)
    }

    pub fn set_caps(&mut self, caps: Caps) {
        self.caps = caps;
    }

    /// The workspace these checkpoints restore into.
    pub fn workspace(&self) -> &Path {
        self.root.path()
    }

    /// The person's new message: the label of the turns that follow.
    pub fn begin_user_turn(&mut self, prompt: &str) {
        self.prompt = crate::text::shorten(crate::text::first_line(prompt), PROMPT_CHARS);
        self.chat = None;
    }

    /// Names the person's current message in the conversation: the turns
    /// that follow carry `mark`.
    pub fn mark_message(&mut self, mark: u64) {
        self.chat = Some(mark);
    }

    /// Starts keeping the content of every file in `listed` not kept yet,
    /// in the background: the first call that may change files (which
    /// needs all of them, 0.76 s for 10,000 files) then finds most of the
    /// work done while the model was thinking. Called when the person's
    /// message arrives; the next call waits for what is left. A file that
    /// changes meanwhile has a new stamp and is read again then.
    pub fn prefill(&mut self, listed: Vec<(PathBuf, Stamp)>) {
        self.take_prefill();
        let todo: Vec<(PathBuf, Stamp)> = listed
            .into_iter()
            .filter(|(rel, stamp)| {
                !self
                    .baseline
                    .get(rel)
                    .is_some_and(|(s, ..)| *s == Some(*stamp))
            })
            .collect();
        if todo.is_empty() {
            return;
        }
        let store = self.store();
        let mut stored_bytes = self.stored_bytes;
        self.prefill = std::thread::Builder::new()
            .name("undo-baseline".into())
            .spawn(move || {
                let kept = todo
                    .into_iter()
                    .map(|(rel, stamp)| {
                        let content = store.capture(&rel, &mut stored_bytes);
                        (rel, stamp, content)
                    })
                    .collect();
                Prefilled { kept, stored_bytes }
            })
            .ok();
    }

    /// Waits for a running prefill and takes what it kept into the
    /// baseline (never over what was seen since).
    fn take_prefill(&mut self) {
        let Some(done) = self.prefill.take().and_then(|h| h.join().ok()) else {
            return;
        };
        for (rel, stamp, content) in done.kept {
            self.baseline
                .entry(rel)
                .or_insert((Some(stamp), content, true));
        }
        self.stored_bytes = self.stored_bytes.max(done.stored_bytes);
    }

    fn store(&self) -> Store {
        Store {
            root: self.root.clone(),
            pack: self.pack.clone(),
            caps: self.caps,
        }
    }

    /// Before a call that may change files: keeps the content of every
    /// file in `listed` (the tracker's listing, relative paths) whose stamp
    /// moved, and of `named` (the path a write tool names, as given). A
    /// write tool changes only its file, so it passes no listing.
    pub fn before_call(&mut self, listed: Option<&[(PathBuf, Stamp)]>, named: Option<&str>) {
        self.take_prefill();
        for (rel, stamp) in listed.unwrap_or_default() {
            let known = self
                .baseline
                .get(rel)
                .is_some_and(|(s, ..)| *s == Some(*stamp));
            if !known {
                let content = self.capture(rel);
                self.baseline
                    .insert(rel.clone(), (Some(*stamp), content, true));
            }
        }
        if let Some(rel) = named.and_then(|p| self.relative(p)) {
            // Read again: the person may have changed it since it was seen.
            let content = self.capture(&rel);
            let is_listed = self.baseline.get(&rel).is_some_and(|(.., l)| *l);
            self.baseline.insert(rel, (None, content, is_listed));
        }
    }

    /// After the call: records what changed against what was kept before.
    pub fn after_call(&mut self, listed: Option<&[(PathBuf, Stamp)]>, named: Option<&str>) {
        self.take_prefill();
        let mut seen = std::collections::HashSet::new();
        if let Some(listed) = listed {
            for (rel, stamp) in listed {
                seen.insert(rel.clone());
                match self.baseline.get(rel) {
                    Some((Some(s), ..)) if s == stamp => {}
                    _ => {
                        let after = self.capture(rel);
                        self.note(rel, after, Some(*stamp), true);
                    }
                }
            }
            // Listed before and gone now: removed (or newly ignored).
            let gone: Vec<PathBuf> = self
                .baseline
                .iter()
                .filter(|(p, (_, c, listed))| {
                    *listed && !seen.contains(*p) && *c != Content::Absent
                })
                .map(|(p, _)| p.clone())
                .collect();
            for rel in gone {
                if matches!(self.root.metadata(&rel), Err(AccessError::NotFound)) {
                    self.note(&rel, Content::Absent, None, true);
                }
            }
        }
        if let Some(rel) = named.and_then(|p| self.relative(p))
            && !seen.contains(&rel)
        {
            let after = self.capture(&rel);
            let is_listed = self.baseline.get(&rel).is_some_and(|(.., l)| *l);
            self.note(&rel, after, None, is_listed);
        }
    }

    fn note(&mut self, rel: &Path, after: Content, stamp: Option<Stamp>, listed: bool) {
        let before = self
            .baseline
            .get(rel)
            .map(|(_, c, _)| c.clone())
            .unwrap_or(Content::Absent);
        if before != after {
            self.pending
                .entry(rel.to_path_buf())
                .or_insert((before, after.clone()))
                .1 = after.clone();
        }
        self.baseline
            .insert(rel.to_path_buf(), (stamp, after, listed));
    }

    /// The model turn ended: its changes become a checkpoint. Returns its
    /// number, or `None` when it changed nothing. A store that cannot be
    /// written is the error.
    pub fn end_turn(&mut self) -> Result<Option<u32>, UndoError> {
        let changes: Vec<Change> = std::mem::take(&mut self.pending)
            .into_iter()
            .filter(|(_, (b, a))| b != a)
            .map(|(path, (before, after))| Change {
                path,
                before,
                after,
            })
            .collect();
        if changes.is_empty() {
            return Ok(None);
        }
        let n = self.index.turns.last().map_or(1, |t| t.n + 1);
        self.index.turns.push(Turn {
            n,
            prompt: self.prompt.clone(),
            time: chrono::Local::now().format("%H:%M:%S").to_string(),
            changes,
            undone: false,
            chat: self.chat,
        });
        self.save()?;
        Ok(Some(n))
    }

    /// Every checkpoint, oldest first.
    pub fn turns(&self) -> &[Turn] {
        &self.index.turns
    }

    /// The newest turn not yet reverted.
    pub fn last_open(&self) -> Option<u32> {
        self.index
            .turns
            .iter()
            .rev()
            .find(|t| !t.undone)
            .map(|t| t.n)
    }

    /// Reverts every turn from `from` on (those not reverted yet), newest
    /// last-in first-out, so files are as they were before turn `from`.
    /// With conflicts and without `force`, nothing is written.
    pub fn restore(&mut self, from: u32, force: bool) -> Result<Restored, UndoError> {
        self.take_prefill();
        let turns: Vec<&Turn> = self
            .index
            .turns
            .iter()
            .filter(|t| t.n >= from && !t.undone)
            .collect();
        if turns.is_empty() {
            return Err(UndoError::Nothing(format!(
                "no turn from {from} on changed files (or all were undone)"
            )));
        }
        // Per file: the content before the earliest turn, after the latest.
        let mut plan: BTreeMap<PathBuf, (Content, Content)> = BTreeMap::new();
        for turn in &turns {
            for c in &turn.changes {
                plan.entry(c.path.clone())
                    .or_insert((c.before.clone(), c.after.clone()))
                    .1 = c.after.clone();
            }
        }
        let numbers: Vec<u32> = turns.iter().map(|t| t.n).collect();
        let conflicts: Vec<Conflict> = plan
            .iter()
            .filter_map(|(path, (_, expected))| self.conflict(path, expected))
            .collect();
        if !conflicts.is_empty() && !force {
            return Err(UndoError::Conflicts(conflicts));
        }
        let mut done = Restored {
            turns: numbers.clone(),
            ..Restored::default()
        };
        for (path, (target, _)) in plan {
            match self.put_back(&path, &target) {
                Ok(()) => done.files.push(path.clone()),
                Err(why) => done.skipped.push((path.clone(), why)),
            }
            // Seen again before the next call.
            self.baseline.remove(&path);
        }
        for turn in self.index.turns.iter_mut() {
            if numbers.contains(&turn.n) {
                turn.undone = true;
            }
        }
        self.save()?;
        Ok(done)
    }

    /// Whether `path` still holds what the agent left.
    fn conflict(&self, path: &Path, expected: &Content) -> Option<Conflict> {
        let now = self.root.open_read(path);
        let detail = match (expected, now) {
            (Content::Absent, Err(AccessError::NotFound)) => return None,
            (Content::Absent, _) => "the agent removed it, and it exists again".to_string(),
            (Content::Saved { .. }, Err(AccessError::NotFound)) => {
                "it was deleted after the agent's change".to_string()
            }
            (Content::Saved { hash, .. }, Ok((mut file, _))) => {
                let mut bytes = Vec::new();
                if file.read_to_end(&mut bytes).is_err() {
                    return Some(Conflict {
                        path: path.to_path_buf(),
                        detail: "it cannot be read now".to_string(),
                    });
                }
                if sha256(&bytes) == *hash {
                    return None;
                }
                let agent = self.object(hash).unwrap_or_default();
                diff(&agent, &bytes)
            }
            (Content::Saved { .. }, Err(e)) => format!("it cannot be read now: {e}"),
            (Content::Unsaved { reason }, _) => {
                format!(
                    "the agent's version was not saved ({reason}), so a later change cannot be ruled out"
                )
            }
        };
        Some(Conflict {
            path: path.to_path_buf(),
            detail,
        })
    }

    fn put_back(&self, path: &Path, target: &Content) -> Result<(), String> {
        match target {
            Content::Absent => self
                .root
                .remove_file(path, Fence::NONE)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Content::Saved { hash, .. } => {
                let bytes = self
                    .object(hash)
                    .ok_or_else(|| "its saved content is missing from the store".to_string())?;
                if let Some(parent) = path.parent() {
                    self.root
                        .create_dir_all(parent, Fence::NONE)
                        .map_err(|e| e.to_string())?;
                }
                self.root
                    .write_atomic(path, &bytes, Fence::NONE)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Content::Unsaved { reason } => Err(format!("it was not saved: {reason}")),
        }
    }

    /// `path` as given to a write tool, relative to the workspace, when it
    /// lies inside.
    fn relative(&self, path: &str) -> Option<PathBuf> {
        let full = lexical(&self.root.path().join(path));
        self.root.strip(&full).filter(|r| !r.as_os_str().is_empty())
    }

    /// Reads a file and keeps its bytes, within the caps.
    fn capture(&mut self, rel: &Path) -> Content {
        let mut stored_bytes = self.stored_bytes;
        let content = self.store().capture(rel, &mut stored_bytes);
        self.stored_bytes = stored_bytes;
        content
    }

    /// A stored object's bytes; `None` when it is missing or its content
    /// is not what its name says (objects are written without a sync, so
    /// after a crash one may be empty or cut: it is never restored).
    fn object(&self, hash: &str) -> Option<Vec<u8>> {
        if let Some(bytes) = self.pack.lock().ok().and_then(|p| p.get(hash)) {
            return Some(bytes);
        }
        // A hash is hex only, so it names a file in objects/ and nothing else.
        if !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let bytes = std::fs::read(self.dir.join(LEGACY_OBJECTS).join(hash)).ok()?;
        (sha256(&bytes) == hash).then_some(bytes)
    }

    fn save(&self) -> Result<(), UndoError> {
        let store = |message: String| UndoError::Store {
            path: self.dir.clone(),
            message,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| store(e.to_string()))?;
        let json = serde_json::to_vec_pretty(&self.index).map_err(|e| store(e.to_string()))?;
        super::fs::write_atomic(&self.dir.join("index.json"), &json)
            .map_err(|e| store(e.to_string()))
    }
}

impl Store {
    /// Reads a file and keeps its bytes, within the caps.
    fn capture(&self, rel: &Path, stored_bytes: &mut u64) -> Content {
        let (file, meta) = match self.root.open_read(rel) {
            Ok(open) => open,
            Err(AccessError::NotFound) => return Content::Absent,
            Err(e) => {
                return Content::Unsaved {
                    reason: e.to_string(),
                };
            }
        };
        if meta.len > self.caps.file {
            return Content::Unsaved {
                reason: format!("larger than checkpoint_file_cap ({} bytes)", self.caps.file),
            };
        }
        let mut bytes = Vec::new();
        if let Err(e) = file.take(self.caps.file + 1).read_to_end(&mut bytes) {
            return Content::Unsaved {
                reason: e.to_string(),
            };
        }
        if bytes.len() as u64 > self.caps.file {
            return Content::Unsaved {
                reason: format!("larger than checkpoint_file_cap ({} bytes)", self.caps.file),
            };
        }
        let hash = sha256(&bytes);
        let Ok(mut pack) = self.pack.lock() else {
            return Content::Unsaved {
                reason: "the undo store is unusable after an earlier failure".to_string(),
            };
        };
        if !pack.contains(&hash) {
            if *stored_bytes + bytes.len() as u64 > self.caps.total {
                return Content::Unsaved {
                    reason: format!(
                        "the session's undo store reached checkpoint_total_cap ({} bytes)",
                        self.caps.total
                    ),
                };
            }
            if let Err(e) = pack.put(&hash, &bytes) {
                return Content::Unsaved {
                    reason: format!("cannot write the undo store: {e}"),
                };
            }
            *stored_bytes += bytes.len() as u64;
        }
        Content::Saved {
            hash,
            size: bytes.len() as u64,
        }
    }
}

fn load_index(dir: &Path) -> Result<Index, String> {
    let path = dir.join("index.json");
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{} is damaged: {e}", path.display()))
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

pub(super) fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A unified diff from the agent's version to the file now, cut to
/// [`CONFLICT_DIFF_LINES`]; binary content gets a sentence.
fn diff(agent: &[u8], now: &[u8]) -> String {
    let (Ok(a), Ok(b)) = (std::str::from_utf8(agent), std::str::from_utf8(now)) else {
        return format!(
            "its content changed since the agent's edit ({} bytes then, {} now)",
            agent.len(),
            now.len()
        );
    };
    let text = similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(2)
        .header("agent's version", "now")
        .to_string();
    let mut lines: Vec<&str> = text.lines().collect();
    let more = lines.len().saturating_sub(CONFLICT_DIFF_LINES);
    lines.truncate(CONFLICT_DIFF_LINES);
    let mut out = lines.join("\n");
    if more > 0 {
        out.push_str(&format!("\n... {more} more lines"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp_of(path: &Path) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).unwrap();
        Stamp {
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
        }
    }

    fn listing(ws: &Path) -> Vec<(PathBuf, Stamp)> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(ws).unwrap().flatten() {
            if e.path().is_file() {
                out.push((PathBuf::from(e.file_name()), stamp_of(&e.path())));
            }
        }
        out
    }

    #[test]
    fn a_turn_is_recorded_and_undone_byte_for_byte() {
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), b"one\r\n\x00two").unwrap();
        let mut cp = Checkpoints::new(data.path().join("s"), ws.path(), Caps::default());
        cp.begin_user_turn("change a");
        cp.before_call(Some(&listing(ws.path())), None);
        std::fs::write(ws.path().join("a.txt"), b"changed").unwrap();
        std::fs::write(ws.path().join("new.txt"), b"new").unwrap();
        cp.after_call(Some(&listing(ws.path())), None);
        assert_eq!(cp.end_turn().unwrap(), Some(1));
        assert_eq!(cp.turns()[0].changes.len(), 2);
        let done = cp.restore(1, false).unwrap();
        assert_eq!(done.files.len(), 2);
        assert_eq!(
            std::fs::read(ws.path().join("a.txt")).unwrap(),
            b"one\r\n\x00two"
        );
        assert!(!ws.path().join("new.txt").exists());
        assert!(matches!(cp.restore(1, false), Err(UndoError::Nothing(_))));
        // The index outlives the session.
        let again = Checkpoints::open(data.path().join("s")).unwrap();
        assert!(again.turns()[0].undone);
    }

    #[test]
    fn a_prefilled_baseline_is_used_and_a_file_changed_since_is_read_again() {
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        for name in ["a.txt", "b.txt"] {
            std::fs::write(ws.path().join(name), format!("{name} before")).unwrap();
        }
        let mut cp = Checkpoints::new(data.path().join("s"), ws.path(), Caps::default());
        cp.begin_user_turn("change both");
        cp.prefill(listing(ws.path()));
        // The person edits b after the prefill listed it: a new stamp.
        cp.take_prefill();
        std::fs::write(ws.path().join("b.txt"), "b edited by the person").unwrap();
        cp.before_call(Some(&listing(ws.path())), None);
        std::fs::write(ws.path().join("a.txt"), "a after").unwrap();
        std::fs::write(ws.path().join("b.txt"), "b after").unwrap();
        cp.after_call(Some(&listing(ws.path())), None);
        assert_eq!(cp.end_turn().unwrap(), Some(1));
        cp.restore(1, false).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "a.txt before"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("b.txt")).unwrap(),
            "b edited by the person"
        );
    }

    #[test]
    fn an_object_whose_content_is_not_its_hash_is_never_restored() {
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), b"before").unwrap();
        let mut cp = Checkpoints::new(data.path().join("s"), ws.path(), Caps::default());
        cp.begin_user_turn("change a");
        cp.before_call(Some(&listing(ws.path())), None);
        std::fs::write(ws.path().join("a.txt"), b"after").unwrap();
        cp.after_call(Some(&listing(ws.path())), None);
        assert_eq!(cp.end_turn().unwrap(), Some(1));
        // As after a crash: the object was written but never synced.
        let pack = data.path().join("s").join(PACK);
        let len = std::fs::metadata(&pack).unwrap().len();
        std::fs::write(&pack, vec![0u8; len as usize]).unwrap();
        let done = cp.restore(1, false);
        assert_eq!(std::fs::read(ws.path().join("a.txt")).unwrap(), b"after");
        let shown = format!("{done:?}");
        assert!(shown.contains("missing from the store"), "{shown}");
    }

    #[test]
    fn a_later_edit_by_the_person_is_a_conflict() {
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
        let mut cp = Checkpoints::new(data.path().join("s"), ws.path(), Caps::default());
        cp.before_call(None, Some("a.txt"));
        std::fs::write(ws.path().join("a.txt"), "agent\n").unwrap();
        cp.after_call(None, Some("a.txt"));
        cp.end_turn().unwrap();
        std::fs::write(ws.path().join("a.txt"), "person\n").unwrap();
        let Err(UndoError::Conflicts(c)) = cp.restore(1, false) else {
            panic!("expected a conflict");
        };
        assert!(c[0].detail.contains("+person"), "{}", c[0].detail);
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "person\n"
        );
        cp.restore(1, true).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "one\n"
        );
    }

    #[test]
    fn a_file_over_the_cap_is_not_saved() {
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("big"), vec![b'x'; 100]).unwrap();
        let caps = Caps {
            file: 10,
            total: 1000,
        };
        let mut cp = Checkpoints::new(data.path().join("s"), ws.path(), caps);
        cp.before_call(None, Some("big"));
        std::fs::write(ws.path().join("big"), "y").unwrap();
        cp.after_call(None, Some("big"));
        cp.end_turn().unwrap();
        let done = cp.restore(1, false).unwrap();
        assert!(
            done.skipped[0].1.contains("checkpoint_file_cap"),
            "{done:?}"
        );
    }
}

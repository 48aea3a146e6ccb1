//! The data dir and everything the agent keeps in it: saved conversations
//! (`sessions/`), run logs for `agent replay` (`runs/`), spilled tool
//! outputs (`outputs/<session>/`), undo checkpoints (`checkpoints/<session>/`)
//! and the REPL's history. One type owns
//! the paths, so no other module joins names onto the data dir;
//! [`retention`] deletes old sessions by the script's rule.

use std::path::{Path, PathBuf};

pub mod retention;

/// The agent's data dir (`~/.local/share/agent` or `AGENT_DATA_DIR`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DataDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Saved conversations, one JSON-lines transcript each.
    pub fn sessions(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// The transcript of session `id`.
    pub fn session(&self, id: &str) -> PathBuf {
        self.sessions().join(format!("{id}.jsonl"))
    }

    /// Run logs, in the format `agent replay` reads.
    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// The run log of session `id`.
    pub fn run_log(&self, id: &str) -> PathBuf {
        self.runs().join(format!("{id}.jsonl"))
    }

    /// Where session `id` saves tool outputs too long for the model.
    pub fn outputs(&self, id: &str) -> PathBuf {
        self.outputs_root().join(id)
    }

    /// The saved tool outputs of every session, one dir per session id.
    pub fn outputs_root(&self) -> PathBuf {
        self.root.join("outputs")
    }

    /// The undo checkpoints of every session, one dir per session id.
    pub fn checkpoints_root(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    /// Where session `id` keeps what undo needs.
    pub fn checkpoints(&self, id: &str) -> PathBuf {
        self.checkpoints_root().join(id)
    }

    /// The REPL's input history.
    pub fn history(&self) -> PathBuf {
        self.root.join("history.txt")
    }

    /// An empty file whose modification time is the last prune's start.
    pub fn prune_stamp(&self) -> PathBuf {
        self.root.join("pruned")
    }
}

/// A sortable, unique-enough id for a new session: local time plus pid,
/// plus a counter so two sessions of one process (`/clear`) differ.
pub fn new_session_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let base = format!(
        "{}-{}",
        chrono::Local::now().format("%Y%m%d-%H%M%S"),
        std::process::id()
    );
    if n == 0 { base } else { format!("{base}-{n}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_live_under_the_root() {
        let d = DataDir::new("/d");
        assert_eq!(d.session("s1"), Path::new("/d/sessions/s1.jsonl"));
        assert_eq!(d.run_log("s1"), Path::new("/d/runs/s1.jsonl"));
        assert_eq!(d.outputs("s1"), Path::new("/d/outputs/s1"));
        assert_eq!(d.history(), Path::new("/d/history.txt"));
        assert_ne!(new_session_id(), new_session_id());
    }
}

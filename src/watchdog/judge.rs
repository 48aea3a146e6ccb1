//! The judge: everything the turn loop needs from the watchdog, in one
//! type. It owns the [`Watchdog`], the [`WorkspaceTracker`] and the
//! [`RunLog`]; the loop hands it each call as it runs and each model turn
//! as it ends, and gets a [`Verdict`] back. Whether a call may have
//! changed files is the tool's own declaration (`Tool::is_mutating`), never
//! a guess from its name.
//!
//! The judge also carries the session's [`Checkpoints`] (undo): they ride
//! on the tracker's walks, so a command's changes are found without a walk
//! of their own.
//!
//! Methods that may read the disk (workspace hashing) or call scripts
//! (`is_progress`) are blocking; the loop runs them on a blocking thread.

use std::path::PathBuf;

use serde_json::Value;

use super::replay::RunLog;
use super::workspace::WorkspaceTracker;
use super::{Budget, CallRecord, Settings, TurnRecord, Verdict, Watchdog};
use crate::protocol::ToolOutput;
use crate::runtime::checkpoint::Checkpoints;

pub struct Judge {
    watchdog: Watchdog,
    workspace: WorkspaceTracker,
    run_log: Option<RunLog>,
    /// The person's message, until the first model turn is logged.
    pending_user: Option<String>,
    /// Things the person should know (a run log that cannot be written).
    notices: Vec<String>,
    /// What the tools changed, per model turn, for undo.
    checkpoints: Option<Checkpoints>,
}

impl Judge {
    /// A judge for a workspace rooted at `workspace`.
    pub fn new(watchdog: Watchdog, workspace: PathBuf) -> Self {
        Judge {
            watchdog,
            workspace: WorkspaceTracker::new(workspace),
            run_log: None,
            pending_user: None,
            notices: Vec::new(),
            checkpoints: None,
        }
    }

    /// Records what each mutating call changes in `checkpoints`.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// Replaces the checkpoints (a new session).
    pub fn set_checkpoints(&mut self, checkpoints: Checkpoints) {
        self.checkpoints = Some(checkpoints);
    }

    /// The session's checkpoints, for undo.
    pub fn checkpoints_mut(&mut self) -> Option<&mut Checkpoints> {
        self.checkpoints.as_mut()
    }

    /// Whether [`Judge::before_call`] has work for every mutating call.
    pub fn records_checkpoints(&self) -> bool {
        self.checkpoints.is_some()
    }

    /// Appends every model turn to `log`, in the replay format.
    pub fn with_run_log(mut self, log: RunLog) -> Self {
        self.run_log = Some(log);
        self
    }

    /// Replaces the watchdog (a script reload); the workspace history and
    /// the run log stay.
    pub fn set_watchdog(&mut self, watchdog: Watchdog) {
        self.watchdog = watchdog;
    }

    pub fn settings(&self) -> &Settings {
        self.watchdog.settings()
    }

    pub fn budget(&self) -> Budget {
        self.watchdog.budget()
    }

    /// Whether [`Judge::begin_user_turn`] or a mutating call's
    /// [`Judge::after_call`] may read the disk (and so belongs on a
    /// blocking thread).
    pub fn may_read_disk(&self) -> bool {
        self.workspace.may_read_disk()
    }

    /// A new message from the person: a fresh budget, and the workspace as
    /// it is now. Blocking.
    pub fn begin_user_turn(&mut self, user: &str) {
        self.pending_user = Some(user.to_string());
        let workspace = self.workspace.after_call(None);
        if let Some(cp) = self.checkpoints.as_mut() {
            cp.begin_user_turn(user);
            // What the first mutating call would keep, kept while the
            // model thinks.
            cp.prefill(self.workspace.files());
        }
        self.watchdog.begin_user_turn(Some(workspace));
    }

    /// The person raises the hard cap by `extra` turns for the next (or
    /// continued) user turn; returns that turn's cap. `/budget +N`.
    pub fn raise_cap(&mut self, extra: u32) -> u32 {
        self.watchdog.raise_cap(extra)
    }

    /// The hard cap of the current user turn.
    pub fn hard_cap(&self) -> u32 {
        self.watchdog.hard_cap()
    }

    /// The person chose to continue after a stop.
    pub fn resume(&mut self) {
        self.watchdog.resume();
    }

    /// The file a write tool is about to change, if `name` is one.
    pub fn write_path(&self, name: &str, input: &Value) -> Option<String> {
        self.settings()
            .is_write_tool(name)
            .then(|| {
                input
                    .get("path")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .flatten()
    }

    /// Before a mutating call runs: remembers what a write is about to
    /// overwrite, so writing it back is recognised as an undo, and keeps
    /// the content a checkpoint needs. Blocking.
    pub fn before_call(&mut self, name: &str, input: &Value) {
        let path = self.write_path(name, input);
        if let Some(path) = &path {
            self.workspace.before_write(path);
        }
        if let Some(cp) = self.checkpoints.as_mut() {
            // A write tool changes its own file; anything else may change
            // any file the tracker lists.
            let listed = path.is_none().then(|| self.workspace.files());
            cp.before_call(listed.as_deref(), path.as_deref());
        }
    }

    /// After a call ran: its record, with the workspace state after it.
    /// `mutating` is the tool's own declaration; a call that did not run
    /// (a duplicate, a cancelled one) changed nothing. Blocking when
    /// `mutating`.
    pub fn after_call(
        &mut self,
        name: &str,
        input: Value,
        output: &ToolOutput,
        mutating: bool,
    ) -> CallRecord {
        let workspace = if mutating {
            let path = self.write_path(name, &input);
            let id = self.workspace.after_call(path.as_deref());
            if let Some(cp) = self.checkpoints.as_mut() {
                let listed = path.is_none().then(|| self.workspace.files());
                cp.after_call(listed.as_deref(), path.as_deref());
            }
            id
        } else {
            self.workspace.current()
        };
        CallRecord {
            name: name.to_string(),
            input,
            status: output.status,
            output: output.text.clone(),
            exit_code: output.exit_code,
            error_kind: output.error_kind,
            workspace: Some(workspace),
        }
    }

    /// A model turn ended: log it (with `redact` blanking secret values)
    /// and judge it. Blocking (script rules).
    pub fn end_turn(
        &mut self,
        text: &str,
        calls: Vec<CallRecord>,
        redact: &dyn Fn(String) -> String,
    ) -> Verdict {
        let record = TurnRecord {
            user: self.pending_user.take(),
            text: text.to_string(),
            calls,
        };
        if let Some(log) = self.run_log.as_mut()
            && let Err(e) = log.append(&record, redact)
        {
            let path = log.path().display().to_string();
            self.run_log = None;
            // Reported once; the run goes on without a log.
            self.notices.push(format!(
                "cannot write the run log {path}: {e}; the run goes on without it"
            ));
        }
        if let Some(cp) = self.checkpoints.as_mut()
            && let Err(e) = cp.end_turn()
        {
            self.notices
                .push(format!("{e}; undo cannot revert this turn"));
        }
        self.watchdog.observe(&record)
    }

    /// Notices raised since the last call, for the person.
    pub fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolStatus;
    use crate::watchdog::{VerdictKind, rules::FallbackRules};

    fn judge(dir: &std::path::Path) -> Judge {
        Judge::new(
            Watchdog::new(crate::watchdog::tests::settings(), Box::new(FallbackRules)),
            dir.to_path_buf(),
        )
    }

    #[test]
    fn a_write_back_to_the_original_is_an_undo() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one").unwrap();
        let mut j = judge(dir.path());
        j.begin_user_turn("fix it");
        let input = serde_json::json!({"path": "a.txt", "content": "two"});
        j.before_call("write_file", &input);
        std::fs::write(dir.path().join("a.txt"), "two").unwrap();
        let first = j.after_call("write_file", input.clone(), &ToolOutput::ok("wrote"), true);
        j.before_call("write_file", &input);
        std::fs::write(dir.path().join("a.txt"), "one").unwrap();
        let undo = j.after_call("write_file", input, &ToolOutput::ok("wrote"), true);
        assert_ne!(first.workspace, undo.workspace);
        let v = j.end_turn("", vec![first, undo], &|l| l);
        assert_eq!(v.kind(), VerdictKind::Continue, "{v:?}");
    }

    #[test]
    fn a_read_only_call_keeps_the_workspace_state_and_turns_are_logged() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = tempfile::tempdir().unwrap();
        let mut j = judge(dir.path()).with_run_log(RunLog::new(log_dir.path().join("r.jsonl")));
        j.begin_user_turn("look");
        let before = j.workspace.current();
        let record = j.after_call(
            "read_file",
            serde_json::json!({"path": "x"}),
            &ToolOutput::failed(crate::protocol::ErrorKind::Failed, "no such file"),
            false,
        );
        assert_eq!(record.workspace.as_deref(), Some(before.as_str()));
        assert_eq!(record.status, ToolStatus::Failed);
        j.end_turn("looking", vec![record], &|l| l);
        let logged = std::fs::read_to_string(log_dir.path().join("r.jsonl")).unwrap();
        assert!(logged.contains("\"user\":\"look\""), "{logged}");
        assert!(j.take_notices().is_empty());
    }
}

//! What the watchdog learns from one call before `is_progress` and the
//! detectors see it: its outcome (masked and raw), whether it waits,
//! whether it moved the workspace, whether its output only echoes its
//! counter, how long its failure has outlived edits, and how many files
//! its content nearly duplicates. [`observe_call`] computes these once and
//! updates the per-key memory that needs the call itself; the counters a
//! detector owns stay with the detector.

use serde_json::Value;

use super::mask::{
    action_key, echo_outcome, hash_of, is_small, mask_volatile, says_nothing, shape_key,
};
use super::settings::Settings;
use super::{CallFacts, CallRecord, UserTurn, outcomes, waiting};
use crate::protocol::ToolStatus;

/// One call as the watchdog has understood it.
pub struct Observed {
    /// The action key and its shape (numbers masked).
    pub key: String,
    pub shape: String,
    /// The output with volatile tokens masked.
    pub masked: String,
    /// Hashes of status, exit code and the masked (`outcome`) or raw output.
    pub outcome: u64,
    pub raw: u64,
    pub is_write: bool,
    pub failed: bool,
    /// A failing probe soon after something was started in the background.
    pub waiting: bool,
    /// A wait word in the command, or `waiting`: the polling allowance.
    pub is_wait: bool,
    pub workspace_changed: bool,
    pub workspace_seen: bool,
    /// The workspace state after the call.
    pub state: Option<String>,
    /// The last outcome of this key (and the state it came in), and its
    /// last raw output, before this call.
    pub last: Option<(u64, Option<String>)>,
    pub last_raw: Option<u64>,
    pub counter_echo: bool,
    /// Workspace states in a row this failing check failed the same way in.
    pub streak: u32,
    pub near_duplicates: u32,
}

impl Observed {
    /// The facts handed to `is_progress`.
    pub fn facts<'a>(&self, call: &'a CallRecord, s: &Settings, t: &UserTurn) -> CallFacts<'a> {
        CallFacts {
            call,
            command: command_of(call),
            first_time: self.last.is_none(),
            output_changed: match &self.last {
                None => !t.outputs_seen.contains(&self.outcome),
                Some((last, _)) => *last != self.outcome,
            },
            output_empty: says_nothing(&call.output, call.exit_code),
            is_write: self.is_write,
            workspace_changed: self.workspace_changed,
            workspace_seen: self.workspace_seen,
            raw_changed: self.last_raw.is_some_and(|r| r != self.raw),
            output_small: is_small(
                &call.output,
                call.exit_code,
                s.small_output_lines,
                s.small_output_bytes,
            ),
            waiting: self.waiting,
            counter_echo: self.counter_echo,
            same_failure_after_edits: self.streak,
            near_duplicates: self.near_duplicates,
            quiet_turns: t.quiet_turns,
        }
    }
}

/// What a model turn's calls added up to, for the turn-level detectors
/// and the budget.
pub struct TurnSummary {
    /// Some call made progress (by `is_progress`).
    pub progress: bool,
    /// Some call wrote or changed the workspace.
    pub changed_state: bool,
    /// There were calls and every one failed.
    pub all_failed: bool,
    /// There were calls and every one waited.
    pub only_waits: bool,
}

impl TurnSummary {
    pub fn new(record: &super::TurnRecord) -> Self {
        let any = !record.calls.is_empty();
        TurnSummary {
            progress: false,
            changed_state: false,
            all_failed: any,
            only_waits: any,
        }
    }

    /// Adds one observed call and whether it made progress.
    pub fn add(&mut self, seen: &Observed, progress: bool) {
        self.progress |= progress;
        self.changed_state |= seen.is_write || seen.workspace_changed;
        self.all_failed &= seen.failed;
        self.only_waits &= seen.is_wait;
    }
}

/// The shell command of a call (`run_shell` and tools with a `command`).
pub fn command_of(call: &CallRecord) -> &str {
    call.input
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Understands one call of the current model turn, updating the memory of
/// the workspace, of starts, of failing checks, of shapes and of written
/// files.
pub fn observe_call(t: &mut UserTurn, s: &Settings, call: &CallRecord) -> Observed {
    let key = action_key(&call.name, &call.input);
    let shape = shape_key(&key);
    let masked = mask_volatile(&call.output);
    let exit = call.exit_code.map(|c| c.to_string()).unwrap_or_default();
    let status = call.status.as_str();
    let outcome = hash_of(&[status, &exit, &masked]);
    let raw = hash_of(&[status, &exit, &call.output]);
    let is_write = s.is_write_tool(&call.name);
    let failed = call.status == ToolStatus::Failed;
    let command = command_of(call);
    let waiting = waiting::is_waiting(t, s, command, failed && !is_write);
    let is_wait = waiting || waiting::is_wait(command, &s.wait_words);
    let (workspace_changed, workspace_seen) = workspace_facts(t, call, is_write);
    let state = t.workspace.clone();
    let stats = t.actions.get(&key);
    let last = stats.and_then(|a| a.last.clone());
    let last_raw = stats.and_then(|a| a.last_raw);
    let echo = echo_outcome(&key, status, &exit, &masked);
    let counter_echo = outcomes::is_counter_echo(
        t.shapes.entry(shape.clone()).or_default(),
        &key,
        outcome,
        echo,
    ) && !is_write
        && !workspace_changed;
    let streak = if failed && !is_write && !is_wait {
        outcomes::check_streak(t.checks.entry(key.clone()).or_default(), outcome, &state)
    } else {
        t.checks.remove(&key);
        0
    };
    let near_duplicates = if is_write {
        outcomes::generation_cluster(&mut t.generated, s, call)
    } else {
        0
    };
    Observed {
        key,
        shape,
        masked,
        outcome,
        raw,
        is_write,
        failed,
        waiting,
        is_wait,
        workspace_changed,
        workspace_seen,
        state,
        last,
        last_raw,
        counter_echo,
        streak,
        near_duplicates,
    }
}

/// Whether a call changed the workspace, and whether it went back to a
/// state seen before. When the state before the call is unknown (no
/// identifier, or a log that did not record where it started), a write is
/// presumed to change the workspace (the seed's rule) and anything else
/// not to.
fn workspace_facts(t: &mut UserTurn, call: &CallRecord, is_write: bool) -> (bool, bool) {
    match &call.workspace {
        Some(ws) => {
            let changed = match t.workspace.as_deref() {
                Some(before) => before != ws,
                None => is_write,
            };
            let seen = changed && t.workspaces_seen.contains(ws);
            t.workspaces_seen.insert(ws.clone());
            t.workspace = Some(ws.clone());
            (changed, seen)
        }
        None => (is_write, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shell(command: &str, output: &str, exit: i32, ws: &str) -> CallRecord {
        CallRecord {
            name: "run_shell".into(),
            input: json!({ "command": command }),
            status: if exit == 0 {
                ToolStatus::Ok
            } else {
                ToolStatus::Failed
            },
            output: output.into(),
            exit_code: Some(exit),
            workspace: Some(ws.into()),
            ..CallRecord::default()
        }
    }

    #[test]
    fn a_probe_after_a_start_is_waiting_and_one_without_is_not() {
        let s = crate::watchdog::tests::settings();
        let mut t = UserTurn {
            turns: 1,
            ..UserTurn::default()
        };
        let start = observe_call(&mut t, &s, &shell("./server &", "[1] 42", 0, "w"));
        assert!(!start.waiting && !start.is_wait);
        t.turns = 2;
        let probe = observe_call(&mut t, &s, &shell("curl -f x", "refused", 7, "w"));
        assert!(probe.waiting && probe.is_wait);
        assert_eq!(probe.streak, 0, "a waiting probe is not a failing check");
        let mut cold = UserTurn::default();
        let probe = observe_call(&mut cold, &s, &shell("curl -f x", "refused", 7, "w"));
        assert!(!probe.waiting);
        assert_eq!(probe.streak, 1);
    }

    #[test]
    fn the_facts_carry_the_raw_change_of_a_small_output() {
        let s = crate::watchdog::tests::settings();
        let mut t = UserTurn::default();
        let first = shell("date +%s%N", "1764672000123456789", 0, "w");
        let seen = observe_call(&mut t, &s, &first);
        t.actions.entry(seen.key.clone()).or_default().last_raw = Some(seen.raw);
        t.actions.entry(seen.key.clone()).or_default().last = Some((seen.outcome, seen.state));
        let second = shell("date +%s%N", "1764672000987654321", 0, "w");
        let seen = observe_call(&mut t, &s, &second);
        let facts = seen.facts(&second, &s, &t);
        assert!(!facts.output_changed, "masking hides the clock");
        assert!(facts.raw_changed && facts.output_small);
    }
}

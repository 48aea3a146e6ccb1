//! The watchdog: catch runaway loops early, never stop diligent work.
//!
//! It follows the seed's loop budget (a soft budget of turns, renewed on
//! progress up to a hard cap; one repair prompt per user turn, then a stop)
//! and judges progress by *outcomes* instead of first sightings:
//!
//! - a repeated call whose (masked) output changed is progress, and an
//!   output that says nothing (`(no output)`) is not;
//! - a call that moves the workspace to a new state (a write, `sed -i`) is
//!   progress; a write that leaves it unchanged, or returns it to a state
//!   already seen, is not;
//! - whether a call is progress is decided by [`Rules::is_progress`]
//!   (`is_progress(record)` in `watchdog.rhai`), given the facts computed
//!   here.
//!
//! | file | owns |
//! |---|---|
//! | `settings` | the thresholds (values in `watchdog.rhai`) |
//! | `detectors` | one function per runaway class, each with its tests |
//! | `budget` | the soft budget, its renewal, the notice and the cap |
//! | `judge` | the [`Judge`]: watchdog, workspace tracker and run log for the loop |
//! | `rules` | the [`Rules`] trait and the script-free [`rules::FallbackRules`] |
//! | `mask` | stable call keys and volatile-token masking |
//! | `replay` | `agent replay` and the run log format |
//!
//! [`Watchdog::observe`] is a pure state machine over [`TurnRecord`]s: the
//! live loop, `agent replay` and the tests all drive the same code.

pub mod budget;
pub mod detectors;
pub mod judge;
pub mod mask;
pub mod replay;
pub mod rules;
pub mod settings;
pub mod workspace;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::{ErrorKind, ToolStatus};
use mask::{action_key, hash_of, mask_volatile, says_nothing};

pub use judge::Judge;
pub use rules::Rules;
pub use settings::Settings;

/// One tool call as the watchdog sees it; also a line of `agent replay`
/// input.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub name: String,
    #[serde(default)]
    pub input: Value,
    #[serde(default, with = "replay_status")]
    pub status: ToolStatus,
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// An opaque identifier of the workspace state after the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// `"completed"` / `"failed"` in replay files.
mod replay_status {
    use crate::protocol::ToolStatus;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(status: &ToolStatus, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match status {
            ToolStatus::Ok => "completed",
            ToolStatus::Failed => "failed",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ToolStatus, D::Error> {
        let text = String::deserialize(d)?;
        match text.as_str() {
            "completed" | "ok" => Ok(ToolStatus::Ok),
            "failed" | "error" => Ok(ToolStatus::Failed),
            other => Err(serde::de::Error::custom(format!(
                "status must be \"completed\" or \"failed\", not {other:?}"
            ))),
        }
    }
}

/// One model turn: its text and the calls it made. Unknown fields are
/// errors, so a file that is not a run log is not read as empty turns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnRecord {
    /// Set when this turn starts a new user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(default)]
    pub calls: Vec<CallRecord>,
}

/// What the watchdog knows about one call, handed to `is_progress`.
#[derive(Clone, Debug, PartialEq)]
pub struct CallFacts<'a> {
    pub call: &'a CallRecord,
    /// The shell command, for `run_shell` (and tools with a `command`).
    pub command: &'a str,
    pub first_time: bool,
    pub output_changed: bool,
    /// The output is blank or only a placeholder such as `(no output)`.
    pub output_empty: bool,
    pub is_write: bool,
    pub workspace_changed: bool,
    pub workspace_seen: bool,
}

/// Why the watchdog stepped in, for the repair prompt and the person.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StopInfo {
    /// The rule that fired (`repeated_action`, `max_steps`...).
    pub rule: &'static str,
    pub message: String,
    pub evidence: String,
    pub turns_used: u32,
    pub budget: u32,
    pub hard_cap: u32,
    /// The person's request this turn, shortened, so the note can restate
    /// it (a small model otherwise answers the note instead).
    pub request: String,
    /// The last call that succeeded and what it returned, shortened; ""
    /// when none did.
    pub last_result: String,
}

/// How much of the request and of the last result a note restates.
pub const NOTE_REQUEST_CHARS: usize = 400;
pub const NOTE_RESULT_CHARS: usize = 600;

/// Turns used in the current user turn, and the current limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    pub used: u32,
    pub limit: u32,
}

/// The judgement of one model turn.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Continue {
        budget: Budget,
    },
    /// Continue, and tell the model how much budget is left.
    Notice {
        budget: Budget,
        text: String,
    },
    /// A rule fired for the first time this user turn: send the repair
    /// prompt `text`.
    Repair {
        budget: Budget,
        stop: StopInfo,
        reason: String,
        text: String,
    },
    /// Hand control back to the person. With `summarise`, the budget ran
    /// out: the model gets one tool-less turn to summarise first.
    Stop {
        budget: Budget,
        stop: StopInfo,
        reason: String,
        summarise: bool,
    },
}

/// The kind of a [`Verdict`], for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictKind {
    Continue,
    Notice,
    Repair,
    Stop,
}

impl VerdictKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Continue => "continue",
            VerdictKind::Notice => "notice",
            VerdictKind::Repair => "repair",
            VerdictKind::Stop => "stop",
        }
    }
}

impl Verdict {
    pub fn kind(&self) -> VerdictKind {
        match self {
            Verdict::Continue { .. } => VerdictKind::Continue,
            Verdict::Notice { .. } => VerdictKind::Notice,
            Verdict::Repair { .. } => VerdictKind::Repair,
            Verdict::Stop { .. } => VerdictKind::Stop,
        }
    }

    pub fn budget(&self) -> Budget {
        match self {
            Verdict::Continue { budget }
            | Verdict::Notice { budget, .. }
            | Verdict::Repair { budget, .. }
            | Verdict::Stop { budget, .. } => *budget,
        }
    }

    /// Why, for the person: the rule, its message and the evidence (empty
    /// for `continue`; the note itself for `notice`).
    pub fn reason(&self) -> &str {
        match self {
            Verdict::Continue { .. } => "",
            Verdict::Notice { text, .. } => text,
            Verdict::Repair { reason, .. } | Verdict::Stop { reason, .. } => reason,
        }
    }

    /// The rule that fired, for repairs and stops.
    pub fn stop(&self) -> Option<&StopInfo> {
        match self {
            Verdict::Repair { stop, .. } | Verdict::Stop { stop, .. } => Some(stop),
            _ => None,
        }
    }
}

/// Texts of the rules, shown to the model in the repair prompt and to the
/// person when a turn stops.
pub mod messages {
    /// How every note from the watchdog starts, so the model never takes
    /// it for the person's words.
    pub const AGENT_NOTE: &str =
        "[agent watchdog — this note is from the agent, not from the user]";
    pub const REPEATED_ACTION: &str = "the same tool call was repeated with the same result";
    pub const POLL_REPEATS: &str =
        "the same waiting command was repeated many times with the same result";
    pub const CONSECUTIVE_ERRORS: &str = "every tool call failed several turns in a row";
    pub const SAME_ERROR: &str = "the same error came back from calls with different arguments";
    pub const STAGNATION: &str = "several turns passed without any progress";
    pub const PING_PONG: &str =
        "the agent is cycling between the same calls with unchanged results";
    pub const COUNTER_ARGS: &str = "calls that differ only by a number keep giving the same result";
    pub const DUPLICATE_CALLS: &str = "one response asked for the same call many times";
    pub const REPEATED_TEXT: &str = "the model keeps writing the same text without making progress";
    pub const EMPTY_RESPONSE: &str = "the model sent an empty response (no text and no tool calls)";
    pub const MAX_STEPS: &str = "the turn budget is used up and the last turns made no progress";
    pub const HARD_CAP: &str = "the hard cap on turns was reached";
}

/// The note sent with the final, tool-less request when the budget ran
/// out: it restates the person's request and the last result, so the
/// answer is to the task rather than about the note.
pub fn summary_turn_prompt(request: &str, last_result: &str) -> String {
    let returned = if last_result.is_empty() {
        String::new()
    } else {
        format!(" Your calls last returned: {last_result}.")
    };
    format!(
        "{} Tools are off now: the turn budget is used up. The person asked: {request}.{returned} Answer the person's request now, from what your calls returned; say plainly what is done and what is left.",
        messages::AGENT_NOTE
    )
}

/// A detector that fired: which rule, its message and the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    pub rule: &'static str,
    pub message: &'static str,
    pub evidence: String,
}

impl Fired {
    pub fn new(rule: &'static str, message: &'static str, evidence: String) -> Self {
        Fired {
            rule,
            message,
            evidence,
        }
    }
}

/// What the watchdog remembers of one call key in the current user turn.
#[derive(Default)]
pub struct ActionStats {
    /// Occurrences with the current outcome in the current workspace state.
    pub same: u32,
    /// The last outcome and the workspace state it came in.
    pub last: Option<(u64, Option<String>)>,
}

/// Calls of one shape (a key with its numbers masked).
#[derive(Default)]
pub struct ShapeStats {
    pub keys: HashSet<String>,
    pub outcomes: HashSet<u64>,
    /// Calls of this shape in a row without progress.
    pub stale: u32,
}

/// The state of one user turn.
#[derive(Default)]
pub struct UserTurn {
    pub turns: u32,
    pub budget: u32,
    pub repaired: bool,
    pub stopped: bool,
    pub actions: HashMap<String, ActionStats>,
    pub shapes: HashMap<String, ShapeStats>,
    /// masked failed outcome → distinct action keys that produced it
    pub errors: HashMap<u64, HashSet<String>>,
    pub outputs_seen: HashSet<u64>,
    pub workspaces_seen: HashSet<String>,
    pub workspace: Option<String>,
    /// (action key + outcome) of each call, and whether it was progress
    pub sequence: Vec<(u64, bool)>,
    pub texts: HashMap<String, u32>,
    pub no_progress_turns: u32,
    pub error_turns: u32,
    pub empty_responses: u32,
    /// The person's message, and the last successful call's result, for
    /// the notes (see [`StopInfo::request`]).
    pub request: String,
    pub last_result: String,
}

/// The watchdog of one conversation.
pub struct Watchdog {
    settings: Settings,
    rules: Box<dyn Rules>,
    turn: UserTurn,
}

impl Watchdog {
    pub fn new(settings: Settings, rules: Box<dyn Rules>) -> Self {
        let mut w = Watchdog {
            settings,
            rules,
            turn: UserTurn::default(),
        };
        w.begin_user_turn(None);
        w
    }

    /// A watchdog that never intervenes (see [`Settings::disabled`]).
    pub fn disabled() -> Self {
        Watchdog::new(Settings::disabled(), Box::new(rules::FallbackRules))
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Starts a new user message: fresh budget, counters and repair.
    /// `workspace` is the state before the first call, when known.
    pub fn begin_user_turn(&mut self, workspace: Option<String>) {
        self.turn = UserTurn {
            budget: self.settings.base_budget.max(1),
            ..UserTurn::default()
        };
        if let Some(ws) = workspace {
            self.turn.workspaces_seen.insert(ws.clone());
            self.turn.workspace = Some(ws);
        }
    }

    /// Turns used and the current limit.
    pub fn budget(&self) -> Budget {
        Budget {
            used: self.turn.turns,
            limit: self.turn.budget,
        }
    }

    /// Whether this user turn was stopped (later turns are skipped).
    pub fn stopped(&self) -> bool {
        self.turn.stopped
    }

    /// Lets the person continue after a stop: a fresh budget and repair.
    pub fn resume(&mut self) {
        let workspace = self.turn.workspace.clone();
        let request = std::mem::take(&mut self.turn.request);
        self.begin_user_turn(workspace);
        self.turn.request = request;
    }

    /// Judges one model turn. A turn with a `user` field starts a new user
    /// message first. The detectors run in a fixed order and the first that
    /// fires is the one reported.
    pub fn observe(&mut self, record: &TurnRecord) -> Verdict {
        if let Some(user) = &record.user {
            let workspace = self.turn.workspace.clone();
            self.begin_user_turn(workspace);
            self.turn.request = crate::text::shorten(user, NOTE_REQUEST_CHARS);
        }
        if let Some(ok) = record
            .calls
            .iter()
            .rev()
            .find(|c| c.status == ToolStatus::Ok)
        {
            self.turn.last_result = format!(
                "{}: {}",
                ok.name,
                crate::text::shorten(ok.output.trim(), NOTE_RESULT_CHARS)
            );
        }
        let s = &self.settings;
        let t = &mut self.turn;
        t.turns += 1;

        let mut fired: Vec<Fired> = Vec::new();
        fired.extend(detectors::empty_response(t, s, record));
        fired.extend(detectors::duplicate_calls(s, record));

        let mut turn_progress = false;
        let mut all_failed = !record.calls.is_empty();
        let mut only_waits = !record.calls.is_empty();
        let mut counted: HashSet<String> = HashSet::new();
        for call in &record.calls {
            let key = action_key(&call.name, &call.input);
            let command = call
                .input
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or("");
            let masked = mask_volatile(&call.output);
            let exit = call.exit_code.map(|c| c.to_string()).unwrap_or_default();
            let outcome = hash_of(&[call.status.as_str(), &exit, &masked]);
            let is_write = s.is_write_tool(&call.name);
            let is_wait = detectors::is_wait(command, &s.wait_words);
            only_waits &= is_wait;
            all_failed &= call.status == ToolStatus::Failed;

            let (workspace_changed, workspace_seen) = workspace_facts(t, call, is_write);
            let state = t.workspace.clone();
            let last = t.actions.get(&key).and_then(|a| a.last.clone());
            let facts = CallFacts {
                call,
                command,
                first_time: last.is_none(),
                output_changed: match &last {
                    None => !t.outputs_seen.contains(&outcome),
                    Some((last, _)) => *last != outcome,
                },
                output_empty: says_nothing(&call.output, call.exit_code),
                is_write,
                workspace_changed,
                workspace_seen,
            };
            let progress = self.rules.is_progress(&facts);
            turn_progress |= progress;

            // A duplicate inside one response counts once.
            if counted.insert(key.clone()) {
                let stats = t.actions.entry(key.clone()).or_default();
                fired.extend(detectors::repeated_call(
                    stats,
                    s,
                    &key,
                    (outcome, state),
                    is_wait,
                    progress,
                    &call.output,
                ));
            }
            let shape = t.shapes.entry(mask::shape_key(&key)).or_default();
            fired.extend(detectors::counter_args(
                shape,
                s,
                &key,
                outcome,
                is_wait,
                progress,
                &call.output,
            ));
            if call.status == ToolStatus::Failed && !is_wait {
                fired.extend(detectors::same_error(&mut t.errors, s, call, &key, &masked));
            }
            t.outputs_seen.insert(outcome);
            t.sequence
                .push((hash_of(&[&key, &outcome.to_string()]), progress));
        }

        fired.extend(detectors::ping_pong(t, s));
        fired.extend(detectors::consecutive_errors(
            t, s, record, all_failed, only_waits,
        ));
        fired.extend(detectors::repeated_text(
            t,
            s,
            record,
            turn_progress,
            only_waits,
        ));
        fired.extend(detectors::stagnation(
            t,
            s,
            record,
            turn_progress,
            only_waits,
        ));

        match fired.into_iter().next() {
            Some(first) => self.intervene(first),
            None => budget::after_turn(&mut self.turn, &self.settings, record, turn_progress),
        }
    }

    /// The verdict for a detector that fired: the first time in a user
    /// turn a repair prompt, after that a stop.
    fn intervene(&mut self, fired: Fired) -> Verdict {
        let t = &mut self.turn;
        let budget = Budget {
            used: t.turns,
            limit: t.budget,
        };
        let stop = StopInfo {
            rule: fired.rule,
            message: fired.message.to_string(),
            evidence: fired.evidence,
            turns_used: t.turns,
            budget: t.budget,
            hard_cap: self.settings.hard_cap(),
            request: t.request.clone(),
            last_result: t.last_result.clone(),
        };
        let reason = format!("{}: {} ({})", stop.rule, stop.message, stop.evidence);
        if !t.repaired {
            t.repaired = true;
            let text = self.rules.repair_prompt(&stop);
            return Verdict::Repair {
                budget,
                stop,
                reason,
                text,
            };
        }
        t.stopped = true;
        Verdict::Stop {
            budget,
            stop,
            reason,
            summarise: false,
        }
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

/// The first line of a text, shortened, for evidence.
pub fn snippet(text: &str) -> String {
    const MAX: usize = 120;
    // Section markers such as `[stderr]` say nothing on their own.
    let mut lines = text
        .trim()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "[stderr]");
    let line = lines.next().unwrap_or("");
    let more = lines.next().is_some();
    if crate::text::longer_than(line, MAX) {
        crate::text::shorten(line, MAX)
    } else if more {
        format!("{line} …")
    } else if line.is_empty() {
        "(no output)".to_string()
    } else {
        line.to_string()
    }
}

/// A sample call and its facts, for `agent check` to try `is_progress`.
pub fn sample_call() -> CallRecord {
    CallRecord {
        name: "run_shell".into(),
        input: serde_json::json!({"command": "git commit -m 'fix'"}),
        status: ToolStatus::Ok,
        output: "[main 1a2b3c4] fix\n 1 file changed".into(),
        exit_code: Some(0),
        error_kind: None,
        workspace: Some("w1".into()),
    }
}

/// The facts of [`sample_call`].
pub fn sample_facts(call: &CallRecord) -> CallFacts<'_> {
    CallFacts {
        call,
        command: "git commit -m 'fix'",
        first_time: true,
        output_changed: true,
        output_empty: false,
        is_write: false,
        workspace_changed: true,
        workspace_seen: false,
    }
}

/// A sample stop, for `agent check` to try `repair_prompt`.
pub fn sample_stop() -> StopInfo {
    StopInfo {
        rule: "repeated_action",
        message: messages::REPEATED_ACTION.into(),
        evidence: "run_shell ls ran 3 times with the same result".into(),
        turns_used: 3,
        budget: 12,
        hard_cap: 48,
        request: "Run the command: echo hello".into(),
        last_result: "run_shell: hello".into(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Thresholds for unit tests, pinned here so a test does not change
    /// meaning when the person-facing defaults in `watchdog.rhai` move.
    pub fn settings() -> Settings {
        Settings {
            base_budget: 12,
            hard_cap_multiplier: 4,
            renew_when_left: 2,
            notice_when_left: 2,
            repeated_action: 3,
            poll_repeats: 8,
            consecutive_errors: 3,
            same_error: 3,
            stagnation: 4,
            ping_pong: 2,
            counter_args: 3,
            duplicate_calls: 3,
            repeated_text: 3,
            empty_responses: 1,
            write_tools: vec!["write_file".into(), "edit_file".into()],
            wait_words: ["sleep", "wait", "until", "retry", "timeout", "watch"]
                .map(String::from)
                .to_vec(),
            note_placement: settings::NotePlacement::default(),
        }
    }

    fn shell(command: &str, output: &str) -> TurnRecord {
        TurnRecord {
            calls: vec![CallRecord {
                name: "run_shell".into(),
                input: serde_json::json!({ "command": command }),
                output: output.into(),
                workspace: Some("w".into()),
                ..CallRecord::default()
            }],
            ..TurnRecord::default()
        }
    }

    #[test]
    fn the_first_rule_repairs_and_the_next_stops() {
        let mut w = Watchdog::new(settings(), Box::new(rules::FallbackRules));
        let kinds: Vec<VerdictKind> = (0..5)
            .map(|_| w.observe(&shell("ls", "a.txt")).kind())
            .collect();
        assert_eq!(kinds[..2], [VerdictKind::Continue, VerdictKind::Continue]);
        assert_eq!(kinds[2], VerdictKind::Repair);
        assert!(kinds[3..].contains(&VerdictKind::Stop));
        assert!(w.stopped());
        w.resume();
        assert!(!w.stopped());
        assert_eq!(w.budget().used, 0);
    }

    #[test]
    fn a_changing_output_is_progress() {
        let mut w = Watchdog::new(settings(), Box::new(rules::FallbackRules));
        for i in 0..10 {
            let v = w.observe(&shell("cat log", &format!("line {i}")));
            assert_eq!(v.kind(), VerdictKind::Continue, "{v:?}");
        }
    }

    #[test]
    fn a_disabled_watchdog_never_intervenes() {
        let mut w = Watchdog::disabled();
        for _ in 0..100 {
            assert_eq!(
                w.observe(&shell("ls", "same")).kind(),
                VerdictKind::Continue
            );
        }
    }
}

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
//! - a poll of a small output (a clock, a counter) whose raw text changed
//!   is progress, though masking hides the change;
//! - a probe that fails the same way soon after the agent started
//!   something in the background is waiting, with a poller's allowance;
//! - outcome-level detectors catch work that looks new call by call but
//!   goes nowhere: wandering (many turns that change nothing), flailing
//!   (edits that never move a failing check), runaway generation
//!   (near-duplicate files), announcing (the same announcement without a
//!   call) and counter echoes (outputs that only echo the call's counter);
//! - whether a call is progress is decided by [`Rules::is_progress`]
//!   (`is_progress(record)` in `watchdog.rhai`), given the facts computed
//!   here.
//!
//! | file | owns |
//! |---|---|
//! | `settings` | the thresholds (values in `watchdog.rhai`) |
//! | `facts` | what one call tells (outcomes, waiting, echoes, streaks): the facts for `is_progress` |
//! | `detectors` | the call-level detectors, one function per runaway class, and their order |
//! | `outcomes` | the outcome-level detectors: wandering, flailing, runaway generation, announcing, counter echoes |
//! | `waiting` | waits and background starts: the polling allowance and its back-off note |
//! | `budget` | the soft budget, its renewal, the notice and the cap |
//! | `judge` | the [`Judge`]: watchdog, workspace tracker and run log for the loop |
//! | `rules` | the [`Rules`] trait and the script-free [`rules::FallbackRules`] |
//! | `mask` | stable call keys, volatile-token masking, small outputs and counter echoes |
//! | `replay` | `agent replay` and the run log format |
//!
//! [`Watchdog::observe`] is a pure state machine over [`TurnRecord`]s: the
//! live loop, `agent replay` and the tests all drive the same code.

pub mod budget;
pub mod detectors;
pub mod facts;
pub mod judge;
pub mod mask;
pub mod outcomes;
pub mod replay;
pub mod rules;
pub mod settings;
pub mod waiting;
pub mod workspace;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::{ErrorKind, ToolStatus};
use facts::TurnSummary;

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
    /// The raw output differs from the last identical call's.
    pub raw_changed: bool,
    /// The output is a few short lines (see [`mask::is_small`]).
    pub output_small: bool,
    /// A failing probe soon after something was started in the background.
    pub waiting: bool,
    /// The output differs from the last call of this shape only by the
    /// call's own counter.
    pub counter_echo: bool,
    /// Workspace states in a row this failing check failed the same way in.
    pub same_failure_after_edits: u32,
    /// Distinct files this write's content nearly duplicates, itself included.
    pub near_duplicates: u32,
    /// Turns in a row before this one that changed nothing.
    pub quiet_turns: u32,
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
    pub const WANDERING: &str =
        "many turns in a row only read or ran things, without changing anything or answering";
    pub const FLAILING: &str =
        "the same check keeps failing the same way after each of several different edits";
    pub const RUNAWAY_GENERATION: &str = "many files with near-identical contents were written";
    pub const ANNOUNCING: &str = "the model keeps announcing the same action without making a call";
    pub const COUNTER_ECHO: &str =
        "calls that differ only by a counter give outputs that differ only by that counter";

    /// The note after `polls` identical results of a waiting command: keep
    /// waiting, but back off.
    pub fn wait_notice(polls: u32, limit: u32) -> String {
        format!(
            "[agent watchdog] Still waiting: this check gave the same result {polls} times ({limit} are allowed). Back off instead of polling every turn: wait in one command with growing pauses (for i in 1 2 4 8; do CHECK && break; sleep $i; done), and look at the log of what you started to see whether it is still running."
        )
    }
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
    /// The hash of the last raw output.
    pub last_raw: Option<u64>,
}

/// Calls of one shape (a key with its numbers masked).
#[derive(Default)]
pub struct ShapeStats {
    pub keys: HashSet<String>,
    pub outcomes: HashSet<u64>,
    /// Calls of this shape in a row without progress.
    pub stale: u32,
    /// The last call of this shape: its key, outcome and echo outcome
    /// (see [`mask::echo_outcome`]).
    pub last: Option<(String, u64, u64)>,
    /// Counter echoes of this shape in a row.
    pub echoes: u32,
}

/// What the watchdog remembers of one failing check (flailing).
#[derive(Default)]
pub struct CheckStats {
    /// The last failed outcome and the workspace state it came in.
    pub last: Option<(u64, Option<String>)>,
    /// Workspace states in a row with that same failure.
    pub streak: u32,
}

/// A file the agent wrote, by the lines of its content (runaway generation).
pub struct Generated {
    pub path: String,
    pub lines: HashSet<u64>,
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
    /// The person's message, for thresholds that grow with the request.
    pub asked: String,
    /// Turns the person added to the hard cap for this user turn.
    pub extra_cap: u32,
    /// The turn something was last started in the background (or a
    /// waiting probe last ran).
    pub started_at: Option<u32>,
    pub checks: HashMap<String, CheckStats>,
    pub generated: Vec<Generated>,
    /// Turns in a row that changed nothing (wandering).
    pub quiet_turns: u32,
    /// A note for the model to go with this turn's verdict.
    pub notice: Option<String>,
}

impl UserTurn {
    /// The hard cap of this user turn: the setting plus what the person
    /// added.
    pub fn hard_cap(&self, s: &Settings) -> u32 {
        s.hard_cap().saturating_add(self.extra_cap)
    }
}

/// Same text-only announcements in a row, across user messages: a model
/// that says "I'll now run the tests" and stops, each time it is asked.
#[derive(Default)]
pub struct Announced {
    pub text: String,
    pub times: u32,
}

/// The watchdog of one conversation.
pub struct Watchdog {
    settings: Settings,
    rules: Box<dyn Rules>,
    turn: UserTurn,
    announced: Announced,
    /// Turns the person added to the hard cap for the next user turn.
    pending_extra: u32,
}

impl Watchdog {
    pub fn new(settings: Settings, rules: Box<dyn Rules>) -> Self {
        let mut w = Watchdog {
            settings,
            rules,
            turn: UserTurn::default(),
            announced: Announced::default(),
            pending_extra: 0,
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
        let extra = std::mem::take(&mut self.pending_extra);
        self.turn = UserTurn {
            budget: self.settings.base_budget.max(1),
            extra_cap: extra,
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
        let asked = std::mem::take(&mut self.turn.asked);
        let request = std::mem::take(&mut self.turn.request);
        let extra = self.turn.extra_cap;
        self.begin_user_turn(workspace);
        self.turn.asked = asked;
        self.turn.request = request;
        self.turn.extra_cap = self.turn.extra_cap.saturating_add(extra);
    }

    /// The person raises the hard cap by `extra` turns for the next user
    /// turn (a new message, or continuing after a stop); `/budget +100`.
    /// Returns the cap that turn will have.
    pub fn raise_cap(&mut self, extra: u32) -> u32 {
        self.pending_extra = self.pending_extra.saturating_add(extra);
        self.settings.hard_cap().saturating_add(self.pending_extra)
    }

    /// The hard cap of the current user turn.
    pub fn hard_cap(&self) -> u32 {
        self.turn.hard_cap(&self.settings)
    }

    /// Judges one model turn. A turn with a `user` field starts a new user
    /// message first (unless the live loop has just begun it). The
    /// detectors run in a fixed order and the first that fires is the one
    /// reported.
    pub fn observe(&mut self, record: &TurnRecord) -> Verdict {
        if let Some(user) = &record.user {
            if self.turn.turns > 0 {
                let workspace = self.turn.workspace.clone();
                self.begin_user_turn(workspace);
            } else {
                let extra = std::mem::take(&mut self.pending_extra);
                self.turn.extra_cap = self.turn.extra_cap.saturating_add(extra);
            }
            self.turn.asked = user.clone();
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
        let announced = outcomes::announcing(&mut self.announced, &self.settings, record);
        self.turn.turns += 1;
        let mut fired: Vec<Fired> = Vec::new();
        fired.extend(detectors::empty_response(
            &mut self.turn,
            &self.settings,
            record,
        ));
        fired.extend(detectors::duplicate_calls(&self.settings, record));
        let summary = self.observe_calls(record, &mut fired);
        fired.extend(detectors::after_turn(
            &mut self.turn,
            &self.settings,
            record,
            &summary,
        ));
        fired.extend(announced);
        match fired.into_iter().next() {
            Some(first) => self.intervene(first),
            None => self.after_turn(record, summary.progress),
        }
    }

    /// Understands each call, asks `is_progress` about it and runs the
    /// call-level detectors.
    fn observe_calls(&mut self, record: &TurnRecord, fired: &mut Vec<Fired>) -> TurnSummary {
        let (s, t) = (&self.settings, &mut self.turn);
        let mut summary = TurnSummary::new(record);
        let mut counted: HashSet<String> = HashSet::new();
        for call in &record.calls {
            let seen = facts::observe_call(t, s, call);
            let progress = self.rules.is_progress(&seen.facts(call, s, t));
            summary.add(&seen, progress);
            let first = counted.insert(seen.key.clone());
            fired.extend(detectors::after_call(t, s, call, &seen, progress, first));
        }
        summary
    }

    /// The budget's verdict for a turn no detector fired on, with a
    /// pending note (back-off hints) joined to it.
    fn after_turn(&mut self, record: &TurnRecord, progress: bool) -> Verdict {
        let verdict = budget::after_turn(&mut self.turn, &self.settings, record, progress);
        match (self.turn.notice.take(), verdict) {
            (Some(note), Verdict::Continue { budget }) => Verdict::Notice { budget, text: note },
            (Some(note), Verdict::Notice { budget, text }) => Verdict::Notice {
                budget,
                text: format!("{note}\n{text}"),
            },
            (_, verdict) => verdict,
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
            hard_cap: t.hard_cap(&self.settings),
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
        raw_changed: false,
        output_small: true,
        waiting: false,
        counter_echo: false,
        same_failure_after_edits: 0,
        near_duplicates: 0,
        quiet_turns: 0,
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
        hard_cap: 250,
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
            hard_cap: 48,
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
            small_output_lines: 2,
            small_output_bytes: 120,
            start_words: ["&", "nohup", "docker run -d", "systemctl start"]
                .map(String::from)
                .to_vec(),
            wait_window: 4,
            wait_notice: 5,
            wandering: 24,
            wandering_review: 80,
            review_words: ["review", "audit"].map(String::from).to_vec(),
            flailing: 4,
            runaway_generation: 4,
            generation_min_bytes: 120,
            near_duplicate_percent: 90,
            announcing: 2,
            announce_words: ["i'll", "let me"].map(String::from).to_vec(),
            counter_echo: 3,
        }
    }

    /// A `run_shell` call, for the watchdog's unit tests.
    pub fn shell_call(command: &str, status: ToolStatus, output: &str) -> CallRecord {
        CallRecord {
            name: "run_shell".into(),
            input: serde_json::json!({ "command": command }),
            status,
            output: output.into(),
            ..CallRecord::default()
        }
    }

    fn shell(command: &str, output: &str) -> TurnRecord {
        TurnRecord {
            calls: vec![CallRecord {
                workspace: Some("w".into()),
                ..shell_call(command, ToolStatus::Ok, output)
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

//! The watchdog: catch runaway loops early, never stop diligent work.
//!
//! It follows the seed's loop budget (a soft budget of turns, renewed on
//! progress up to a hard cap; repeated-action, consecutive-error and
//! stagnation detectors; one repair prompt per user turn, then a stop) and
//! judges progress by *outcomes* instead of first sightings:
//!
//! - a repeated call whose (masked) output changed is progress, and an
//!   output that says nothing (`(no output)`) is not;
//! - a call that moves the workspace to a new state (a write, `sed -i`) is
//!   progress; a write that leaves it unchanged, or returns it to a state
//!   already seen, is not;
//! - whether a call is progress is decided by `is_progress(record)` in
//!   `watchdog.rhai`, given the facts computed here.
//!
//! Beyond exact repeats it catches ping-pong cycles, the same error from
//! different arguments, arguments that differ only by a counter, duplicate
//! calls inside one response, repeated assistant text, read-only wandering
//! (stagnation) and empty responses. Calls that wait (`sleep`, `until`...)
//! get more room, so polling a slow service is not mistaken for a loop.
//!
//! [`Watchdog::observe`] is a pure state machine over [`TurnRecord`]s: the
//! live loop, `agent replay` and the tests all drive the same code.

pub mod mask;
pub mod replay;
pub mod rules;
pub mod workspace;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::{ErrorKind, ToolStatus};
use mask::{action_key, hash_of, mask_volatile, says_nothing, shape_key};

/// Thresholds, from `settings()` in `watchdog.rhai`. A detector set to 0
/// is switched off. Unknown fields are errors, so typos are caught.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Model turns per user message before the budget runs out.
    pub base_budget: u32,
    /// The budget is renewed on progress up to base_budget × this.
    pub hard_cap_multiplier: u32,
    /// Renew when this few turns are left and the last turn made progress.
    pub renew_when_left: u32,
    /// Tell the model how much is left when this few turns remain.
    pub notice_when_left: u32,
    /// The same call with the same outcome, in the same workspace state.
    pub repeated_action: u32,
    /// The same for calls that wait (`sleep`, `until`...): polling.
    pub poll_repeats: u32,
    /// Turns in a row where every call failed (waits excepted).
    pub consecutive_errors: u32,
    /// The same error from calls with different arguments.
    pub same_error: u32,
    /// Turns in a row without progress.
    pub stagnation: u32,
    /// Full A-B (or A-B-C) cycles with unchanged outcomes.
    pub ping_pong: u32,
    /// Calls that differ only by numbers, all with the same outcome.
    pub counter_args: u32,
    /// Identical calls inside one response.
    pub duplicate_calls: u32,
    /// The same assistant text in this many turns without progress.
    pub repeated_text: u32,
    /// Responses with neither text nor tool calls.
    pub empty_responses: u32,
    /// Tools that change files; their progress is judged by the workspace.
    pub write_tools: Vec<String>,
    /// Words that mark a shell command as waiting (polling).
    pub wait_words: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
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
        }
    }
}

impl Settings {
    /// Reads settings from the value `settings()` returned.
    pub fn from_script(value: &rhai::Dynamic) -> Result<Settings, String> {
        let json = serde_json::to_value(value).map_err(|e| e.to_string())?;
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    pub fn hard_cap(&self) -> u32 {
        self.base_budget
            .saturating_mul(self.hard_cap_multiplier.max(1))
    }
}

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

/// One model turn: its text and the calls it made.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq)]
pub struct StopInfo {
    /// The rule that fired (`repeated_action`, `max_steps`...).
    pub rule: &'static str,
    pub message: String,
    pub evidence: String,
    pub turns_used: u32,
    pub budget: u32,
    pub hard_cap: u32,
}

/// The judgement of one model turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictKind {
    Continue,
    /// Continue, and tell the model how much budget is left.
    Notice,
    /// A rule fired for the first time this user turn: send the repair prompt.
    Repair,
    /// Hand control back to the person.
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

/// The watchdog's answer for one turn.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub kind: VerdictKind,
    /// Empty for `continue`.
    pub reason: String,
    pub used: u32,
    pub limit: u32,
    /// Set for repairs and stops.
    pub stop: Option<StopInfo>,
    /// The repair prompt, for `repair`.
    pub repair_text: Option<String>,
    /// The budget ran out: give the model one tool-less turn to summarise.
    pub summarise: bool,
}

/// The hooks the watchdog consults; `watchdog.rhai` in the live agent.
pub trait Rules: Send {
    fn is_progress(&mut self, facts: &CallFacts<'_>) -> bool;
    fn repair_prompt(&mut self, stop: &StopInfo) -> String;
}

/// Texts of the rules, shown to the model in the repair prompt and to the
/// person when a turn stops.
pub mod messages {
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

#[derive(Default)]
struct ActionStats {
    /// Occurrences with the current outcome in the current workspace state.
    same: u32,
    last: Option<(u64, Option<String>)>,
}

#[derive(Default)]
struct UserTurn {
    turns: u32,
    budget: u32,
    repaired: bool,
    stopped: bool,
    actions: HashMap<String, ActionStats>,
    /// shape → (keys seen, outcomes seen, calls without progress)
    shapes: HashMap<String, (HashSet<String>, HashSet<u64>, u32)>,
    /// masked failed outcome → distinct action keys that produced it
    errors: HashMap<u64, HashSet<String>>,
    outputs_seen: HashSet<u64>,
    workspaces_seen: HashSet<String>,
    workspace: Option<String>,
    /// (action key + outcome) of each call, for cycle detection
    sequence: Vec<(u64, bool)>,
    texts: HashMap<String, u32>,
    no_progress_turns: u32,
    error_turns: u32,
    empty_responses: u32,
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
    pub fn budget(&self) -> (u32, u32) {
        (self.turn.turns, self.turn.budget)
    }

    /// Whether this user turn was stopped (later turns are skipped).
    pub fn stopped(&self) -> bool {
        self.turn.stopped
    }

    /// Lets the person continue after a stop: a fresh budget and repair.
    pub fn resume(&mut self) {
        let workspace = self.turn.workspace.clone();
        self.begin_user_turn(workspace);
    }

    /// Judges one model turn. A turn with a `user` field starts a new user
    /// message first.
    pub fn observe(&mut self, record: &TurnRecord) -> Verdict {
        if record.user.is_some() {
            let workspace = self.turn.workspace.clone();
            self.begin_user_turn(workspace);
        }
        let s = self.settings.clone();
        let t = &mut self.turn;
        t.turns += 1;

        let mut fired: Option<(&'static str, &'static str, String)> = None;
        let mut fire = |rule: &'static str, message: &'static str, evidence: String| {
            if fired.is_none() {
                fired = Some((rule, message, evidence));
            }
        };

        // Empty responses.
        if record.calls.is_empty() && record.text.trim().is_empty() {
            t.empty_responses += 1;
            if on(s.empty_responses) && t.empty_responses >= s.empty_responses {
                fire(
                    "empty_response",
                    messages::EMPTY_RESPONSE,
                    format!("{} empty response(s) in this turn", t.empty_responses),
                );
            }
        }

        // Duplicates inside this response.
        let mut in_response: HashMap<String, u32> = HashMap::new();
        for call in &record.calls {
            *in_response
                .entry(action_key(&call.name, &call.input))
                .or_default() += 1;
        }
        if let Some((key, n)) = in_response.iter().max_by_key(|(_, n)| **n)
            && on(s.duplicate_calls)
            && *n >= s.duplicate_calls
        {
            fire(
                "duplicate_calls",
                messages::DUPLICATE_CALLS,
                format!("{} was asked for {n} times in one response", short(key)),
            );
        }

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
            let is_write = s.write_tools.iter().any(|w| w == &call.name);
            let is_wait = is_wait(command, &s.wait_words);
            only_waits &= is_wait;
            all_failed &= call.status == ToolStatus::Failed;

            // Workspace facts. When the state before the call is unknown
            // (no identifier, or a log that did not record where it
            // started), a write is presumed to change the workspace (the
            // seed's rule) and anything else not to.
            let (workspace_changed, workspace_seen) = match &call.workspace {
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
            };
            let state = t.workspace.clone();

            let stats = t.actions.entry(key.clone()).or_default();
            let first_time = stats.last.is_none();
            let output_changed = match &stats.last {
                None => !t.outputs_seen.contains(&outcome),
                Some((last, _)) => *last != outcome,
            };
            let facts = CallFacts {
                call,
                command,
                first_time,
                output_changed,
                output_empty: says_nothing(&call.output, call.exit_code),
                is_write,
                workspace_changed,
                workspace_seen,
            };
            let progress = self.rules.is_progress(&facts);
            turn_progress |= progress;

            // Repeats: same outcome in the same workspace state. A duplicate
            // inside one response counts once.
            if counted.insert(key.clone()) {
                let same_as_last = stats.last.as_ref() == Some(&(outcome, state.clone()));
                stats.same = if same_as_last { stats.same + 1 } else { 1 };
                stats.last = Some((outcome, state));
                let (limit, message, rule) = if is_wait {
                    (s.poll_repeats, messages::POLL_REPEATS, "poll_repeats")
                } else {
                    (
                        s.repeated_action,
                        messages::REPEATED_ACTION,
                        "repeated_action",
                    )
                };
                if !progress && on(limit) && stats.same >= limit {
                    fire(
                        rule,
                        message,
                        format!(
                            "{} ran {} times with the same result: {}",
                            short(&key),
                            stats.same,
                            snippet(&call.output)
                        ),
                    );
                }
            }

            // Counter arguments. Waits that differ only by a number
            // (`sleep 2`, `sleep 4`...) are a back-off: a poller's room.
            let shape = t.shapes.entry(shape_key(&key)).or_default();
            shape.0.insert(key.clone());
            shape.1.insert(outcome);
            shape.2 = if progress { 0 } else { shape.2 + 1 };
            let (limit, message, rule) = if is_wait {
                (s.poll_repeats, messages::POLL_REPEATS, "poll_repeats")
            } else {
                (s.counter_args, messages::COUNTER_ARGS, "counter_args")
            };
            if on(limit) && shape.0.len() >= 2 && shape.1.len() == 1 && shape.2 >= limit {
                fire(
                    rule,
                    message,
                    format!(
                        "{} calls shaped like {} all gave: {}",
                        shape.2,
                        short(&shape_key(&key)),
                        snippet(&call.output)
                    ),
                );
            }

            // The same error from different arguments.
            if call.status == ToolStatus::Failed && !is_wait {
                let keys = t.errors.entry(hash_of(&[&call.name, &masked])).or_default();
                keys.insert(key.clone());
                if on(s.same_error) && keys.len() >= s.same_error as usize {
                    fire(
                        "same_error",
                        messages::SAME_ERROR,
                        format!(
                            "{} different calls to {} failed with: {}",
                            keys.len(),
                            call.name,
                            snippet(&call.output)
                        ),
                    );
                }
            }

            t.outputs_seen.insert(outcome);
            t.sequence
                .push((hash_of(&[&key, &outcome.to_string()]), progress));
        }

        // Cycles: A B A B (or A B C A B C) with unchanged outcomes.
        if on(s.ping_pong)
            && let Some(period) = cycle_period(&t.sequence, s.ping_pong as usize)
        {
            fire(
                "ping_pong",
                messages::PING_PONG,
                format!(
                    "the last {} calls repeat a cycle of {period} calls with the same results",
                    period * s.ping_pong as usize
                ),
            );
        }

        // Turns where everything failed.
        t.error_turns = if all_failed && !only_waits {
            t.error_turns + 1
        } else {
            0
        };
        if on(s.consecutive_errors) && t.error_turns >= s.consecutive_errors {
            let last = record
                .calls
                .last()
                .map(|c| snippet(&c.output))
                .unwrap_or_default();
            fire(
                "consecutive_errors",
                messages::CONSECUTIVE_ERRORS,
                format!(
                    "{} turns in a row failed; the last error: {last}",
                    t.error_turns
                ),
            );
        }

        // Repeated assistant text. Saying "still waiting" while polling is
        // not a loop: waiting turns are left to `poll_repeats`.
        let text = record.text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() && !record.calls.is_empty() && !turn_progress && !only_waits {
            let n = t.texts.entry(text.clone()).or_default();
            *n += 1;
            if on(s.repeated_text) && *n >= s.repeated_text {
                fire(
                    "repeated_text",
                    messages::REPEATED_TEXT,
                    format!("\"{}\" was written {n} times", snippet(&text)),
                );
            }
        }

        // Stagnation (read-only wandering). Waiting turns neither count
        // nor reset; a final answer ends the turn anyway.
        if turn_progress {
            t.no_progress_turns = 0;
        } else if !record.calls.is_empty() && !only_waits {
            t.no_progress_turns += 1;
        }
        if on(s.stagnation) && t.no_progress_turns >= s.stagnation {
            fire(
                "stagnation",
                messages::STAGNATION,
                format!(
                    "{} turns without progress; the calls either failed or showed nothing new",
                    t.no_progress_turns
                ),
            );
        }

        let (used, budget, hard_cap) = (t.turns, t.budget, s.hard_cap());
        if let Some((rule, message, evidence)) = fired {
            let stop = StopInfo {
                rule,
                message: message.to_string(),
                evidence,
                turns_used: used,
                budget,
                hard_cap,
            };
            let reason = format!("{rule}: {message} ({})", stop.evidence);
            if !t.repaired {
                t.repaired = true;
                let text = self.rules.repair_prompt(&stop);
                return Verdict {
                    kind: VerdictKind::Repair,
                    reason,
                    used,
                    limit: budget,
                    stop: Some(stop),
                    repair_text: Some(text),
                    summarise: false,
                };
            }
            t.stopped = true;
            return Verdict {
                kind: VerdictKind::Stop,
                reason,
                used,
                limit: budget,
                stop: Some(stop),
                repair_text: None,
                summarise: false,
            };
        }

        // The budget: renew on progress near its end, up to the hard cap.
        if turn_progress && used + s.renew_when_left >= t.budget && t.budget < hard_cap {
            t.budget = (t.budget + s.base_budget).min(hard_cap);
        }
        let budget = t.budget;
        if used >= budget && !record.calls.is_empty() {
            t.stopped = true;
            let (rule, message) = if budget >= hard_cap {
                ("hard_cap", messages::HARD_CAP)
            } else {
                ("max_steps", messages::MAX_STEPS)
            };
            let stop = StopInfo {
                rule,
                message: message.to_string(),
                evidence: format!("{used} of {budget} turns used"),
                turns_used: used,
                budget,
                hard_cap,
            };
            return Verdict {
                kind: VerdictKind::Stop,
                reason: format!("{rule}: {message} ({used} of {budget} turns)"),
                used,
                limit: budget,
                stop: Some(stop),
                repair_text: None,
                summarise: true,
            };
        }
        if !record.calls.is_empty() && budget - used <= s.notice_when_left {
            return Verdict {
                kind: VerdictKind::Notice,
                reason: budget_notice(budget - used, budget, hard_cap),
                used,
                limit: budget,
                stop: None,
                repair_text: None,
                summarise: false,
            };
        }
        Verdict {
            kind: VerdictKind::Continue,
            reason: String::new(),
            used,
            limit: budget,
            stop: None,
            repair_text: None,
            summarise: false,
        }
    }
}

/// The note the model sees near the end of its budget.
pub fn budget_notice(left: u32, budget: u32, hard_cap: u32) -> String {
    format!(
        "[agent watchdog] {left} of {budget} turns left in this budget (hard cap {hard_cap}). The budget is renewed only while you make progress; finish the task or summarise where you are."
    )
}

/// The note sent with the final, tool-less request when the budget ran out.
pub const SUMMARISE_PROMPT: &str = "[agent watchdog — this note is from the agent, not from the user] The turn budget is used up, so tools are off for this last answer. Summarise for the user what you did, what works, and what is left to do.";

fn on(threshold: u32) -> bool {
    threshold > 0
}

fn is_wait(command: &str, words: &[String]) -> bool {
    command
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-')
        .any(|word| words.iter().any(|w| w == word))
}

/// The period (2 or 3) of a cycle repeated `cycles` times at the end of
/// `seq`, made of distinct calls none of which made progress.
fn cycle_period(seq: &[(u64, bool)], cycles: usize) -> Option<usize> {
    for period in 2..=3 {
        let need = period * cycles.max(2);
        if seq.len() < need {
            continue;
        }
        let tail = &seq[seq.len() - need..];
        let distinct: HashSet<u64> = tail[..period].iter().map(|(h, _)| *h).collect();
        if distinct.len() != period {
            continue;
        }
        let periodic = tail
            .iter()
            .enumerate()
            .all(|(i, (h, _))| *h == tail[i % period].0);
        let stale = tail[period..].iter().all(|(_, progress)| !progress);
        if periodic && stale {
            return Some(period);
        }
    }
    None
}

fn short(key: &str) -> String {
    snippet(key)
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
    if line.chars().count() > MAX {
        format!("{}…", line.chars().take(MAX).collect::<String>())
    } else if more {
        format!("{line} …")
    } else if line.is_empty() {
        "(no output)".to_string()
    } else {
        line.to_string()
    }
}

/// A sample call map for `agent check`.
pub fn sample_call_map() -> rhai::Dynamic {
    let call = CallRecord {
        name: "run_shell".into(),
        input: serde_json::json!({"command": "git commit -m 'fix'"}),
        status: ToolStatus::Ok,
        output: "[main 1a2b3c4] fix\n 1 file changed".into(),
        exit_code: Some(0),
        error_kind: None,
        workspace: Some("w1".into()),
    };
    rules::facts_map(&CallFacts {
        call: &call,
        command: "git commit -m 'fix'",
        first_time: true,
        output_changed: true,
        output_empty: false,
        is_write: false,
        workspace_changed: true,
        workspace_seen: false,
    })
}

/// A sample stop map for `agent check`.
pub fn sample_stop_map() -> rhai::Dynamic {
    rules::stop_map(&StopInfo {
        rule: "repeated_action",
        message: messages::REPEATED_ACTION.into(),
        evidence: "run_shell ls ran 3 times with the same result".into(),
        turns_used: 3,
        budget: 12,
        hard_cap: 48,
    })
}

//! The watchdog's thresholds. Their values live in `settings()` of
//! `watchdog.rhai` only: the script layer merges the person's map over the
//! built-in script's map before it is read here, so no default is repeated
//! in Rust. A detector set to 0 is switched off. Unknown fields are errors,
//! so typos are caught.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Model turns per user message before the budget runs out.
    pub base_budget: u32,
    /// The budget is renewed on progress up to this many turns: a cost
    /// guard for long tasks, not a loop detector.
    pub hard_cap: u32,
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

    // ---- Watchdog II (issue 16) ----
    /// An output of at most this many lines and bytes (the exit-code line
    /// aside) is "small": any raw change in it is news to a poll.
    pub small_output_lines: u32,
    pub small_output_bytes: u32,
    /// Phrases that start something in the background (`&` is the shell's
    /// background operator); a failing probe soon after is waiting.
    pub start_words: Vec<String>,
    /// Turns after a start (or the last waiting probe) in which a failing
    /// probe counts as waiting and gets the polling allowance.
    pub wait_window: u32,
    /// After this many identical polls, a note with back-off hints.
    pub wait_notice: u32,
    /// Turns in a row that change nothing (read-only wandering).
    pub wandering: u32,
    /// The same when the request asks for reading (a review, an audit).
    pub wandering_review: u32,
    /// Words in the person's message that make it a reading request.
    pub review_words: Vec<String>,
    /// The same failing check after this many different workspace states.
    pub flailing: u32,
    /// Near-duplicate files written to this many distinct paths.
    pub runaway_generation: u32,
    /// Writes smaller than this are not counted as generation.
    pub generation_min_bytes: u32,
    /// Two writes are near-duplicates at this line similarity (percent).
    pub near_duplicate_percent: u32,
    /// The same announcement, without calls, in this many model turns in
    /// a row.
    pub announcing: u32,
    /// Words that make a text an announcement of an action.
    pub announce_words: Vec<String>,
    /// Calls whose only effect on the output is their counter, in a row.
    pub counter_echo: u32,
    /// Where the repair prompt and the budget notices go.
    #[serde(default)]
    pub note_placement: NotePlacement,
}

/// Where the watchdog's notes to the model go (`note_placement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotePlacement {
    /// `ToolResult` for models whose calls are read from text (local
    /// models, `tool_calls` "auto" or "text"), `Message` for native ones:
    /// the hosted path stays as it was.
    #[default]
    Auto,
    /// Appended to the last tool result, which the model reads as the
    /// outcome of its own call (a separate message when there is none).
    ToolResult,
    /// A message of its own, marked as the agent's. Small models tend to
    /// answer such a note instead of the person's request.
    Message,
}

impl Settings {
    /// Reads settings from JSON (the merged `settings()` map).
    pub fn from_json(value: serde_json::Value) -> Result<Settings, String> {
        let old_cap = value.get("hard_cap_multiplier").is_some();
        serde_json::from_value(value).map_err(|e| {
            if old_cap {
                format!("{e}; {HARD_CAP_RENAMED}")
            } else {
                e.to_string()
            }
        })
    }

    /// Every detector off and a budget that never runs out: what runs when
    /// even the built-in `watchdog.rhai` cannot load (its tests rule that
    /// out), so the agent still works, visibly without a watchdog.
    pub fn disabled() -> Settings {
        Settings {
            base_budget: u32::MAX,
            hard_cap: u32::MAX,
            renew_when_left: 0,
            notice_when_left: 0,
            repeated_action: 0,
            poll_repeats: 0,
            consecutive_errors: 0,
            same_error: 0,
            stagnation: 0,
            ping_pong: 0,
            counter_args: 0,
            duplicate_calls: 0,
            repeated_text: 0,
            empty_responses: 0,
            write_tools: Vec::new(),
            wait_words: Vec::new(),
            note_placement: NotePlacement::default(),
            small_output_lines: 0,
            small_output_bytes: 0,
            start_words: Vec::new(),
            wait_window: 0,
            wait_notice: 0,
            wandering: 0,
            wandering_review: 0,
            review_words: Vec::new(),
            flailing: 0,
            runaway_generation: 0,
            generation_min_bytes: 0,
            near_duplicate_percent: 100,
            announcing: 0,
            announce_words: Vec::new(),
            counter_echo: 0,
        }
    }

    /// The hard cap (never below the base budget).
    pub fn hard_cap(&self) -> u32 {
        self.hard_cap.max(self.base_budget)
    }

    /// Whether `name` is a tool whose writes the workspace tracker hashes.
    pub fn is_write_tool(&self, name: &str) -> bool {
        self.write_tools.iter().any(|t| t == name)
    }
}

/// What a `watchdog.rhai` written before issue 16 is told.
pub const HARD_CAP_RENAMED: &str = "hard_cap_multiplier is gone: set hard_cap, the most model turns per user message (250 by default)";

/// Whether a threshold is switched on.
pub fn on(threshold: u32) -> bool {
    threshold > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_multiplier_is_named_with_its_replacement() {
        let mut map = serde_json::to_value(Settings::disabled()).unwrap();
        map["hard_cap_multiplier"] = serde_json::json!(4);
        let err = Settings::from_json(map).unwrap_err();
        assert!(err.contains(HARD_CAP_RENAMED), "{err}");
        let typo = serde_json::json!({"base_budjet": 3});
        assert!(
            !Settings::from_json(typo)
                .unwrap_err()
                .contains(HARD_CAP_RENAMED)
        );
    }
}

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
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// Every detector off and a budget that never runs out: what runs when
    /// even the built-in `watchdog.rhai` cannot load (its tests rule that
    /// out), so the agent still works, visibly without a watchdog.
    pub fn disabled() -> Settings {
        Settings {
            base_budget: u32::MAX,
            hard_cap_multiplier: 1,
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
        }
    }

    pub fn hard_cap(&self) -> u32 {
        self.base_budget
            .saturating_mul(self.hard_cap_multiplier.max(1))
    }

    /// Whether `name` is a tool whose writes the workspace tracker hashes.
    pub fn is_write_tool(&self, name: &str) -> bool {
        self.write_tools.iter().any(|t| t == name)
    }
}

/// Whether a threshold is switched on.
pub fn on(threshold: u32) -> bool {
    threshold > 0
}

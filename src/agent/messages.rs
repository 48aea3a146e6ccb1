//! The turn loop's model-facing texts and notices, in one place.

/// Text shown when the model's answer hit the token limit.
pub const LENGTH_NOTICE: &str = "the model's answer was cut off at its output token limit (finish_reason: length); the answer may be incomplete";

/// The answer to a tool call made in the tool-less summary turn.
pub const TOOLS_OFF: &str = "Not run: tools are off for this last answer; answer the person's request from what you have instead.";

/// How the summary is introduced in the history. It is marked as the
/// agent's, so it is never mistaken for the person's words.
pub const SUMMARY_HEADER: &str = "[agent: a summary of the earlier conversation, written by the agent to save space — not a message from the user]";

/// The compaction instructions when the agent was built without
/// `summary_prompt()` from prompt.rhai (embedding, tests).
pub const PLAIN_SUMMARY_PROMPT: &str = "Summarise the conversation so far for the agent that continues it: the goal, what was done, the current state and what is left.";

/// The answer to a call that repeats an earlier call of the same response.
pub fn duplicate_call(first_id: &str) -> String {
    format!(
        "Not run: this call is identical to call {first_id} in the same response, which ran once; its result is the answer to {first_id}. Do not repeat identical calls."
    )
}

/// The notice when the watchdog was lost (its thread panicked).
pub const JUDGE_LOST: &str =
    "the watchdog failed and is off for the rest of this session; restart the agent to get it back";

/// The notice when calls were recovered from the model's text.
pub fn recovered_calls(names: &[&str]) -> String {
    let n = names.len();
    let calls = if n == 1 { "a tool call" } else { "tool calls" };
    format!(
        "the model wrote {calls} as text instead of a native call; recovered and run as native: {} (tool_calls in the profile, models.rhai)",
        names.join(", ")
    )
}

/// The notice when a final answer looks like a tool call that was not run.
pub fn unexecuted_call(
    mode: crate::tools::text_calls::ToolCallMode,
    reason: Option<&str>,
) -> String {
    let why = match (mode.recovers(), reason) {
        (false, _) => "this profile takes only native calls (tool_calls: \"native\"; \"auto\" in models.rhai recovers calls written as text)".to_string(),
        (true, Some(reason)) => format!("it could not be recovered: {reason}"),
        (true, None) => "no call in a known format was found at its end".to_string(),
    };
    format!(
        "the model's answer looks like a tool call written as text, and nothing was run: {why}. The task may not be done."
    )
}

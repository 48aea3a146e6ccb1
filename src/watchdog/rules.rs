//! The hooks the watchdog consults: whether a call made progress and what
//! the repair prompt says. `script::watchdog` implements them with
//! `watchdog.rhai`; [`FallbackRules`] needs no script.

use super::{CallFacts, StopInfo};
use crate::protocol::ToolStatus;

/// The hooks the watchdog consults; `watchdog.rhai` in the live agent.
pub trait Rules: Send {
    fn is_progress(&mut self, facts: &CallFacts<'_>) -> bool;
    fn repair_prompt(&mut self, stop: &StopInfo) -> String;
}

/// Rules that need no script: the same logic as the built-in
/// `watchdog.rhai`, for when a script hook fails and for tests.
pub struct FallbackRules;

impl Rules for FallbackRules {
    fn is_progress(&mut self, f: &CallFacts<'_>) -> bool {
        f.call.status == ToolStatus::Ok
            && if f.is_write || f.workspace_changed {
                f.workspace_changed && !f.workspace_seen
            } else {
                !f.counter_echo
                    && !f.output_empty
                    && (f.output_changed || (f.raw_changed && f.output_small))
            }
    }

    fn repair_prompt(&mut self, stop: &StopInfo) -> String {
        let returned = if stop.last_result.is_empty() {
            String::new()
        } else {
            format!(
                "\nYour calls already returned: {}\nIf that answers the request, answer it now without tools.",
                stop.last_result
            )
        };
        format!(
            "{}\nRule fired: {}: {}\nEvidence: {}\nThe person asked: {}{returned}\nOtherwise do not repeat the same call; take a different approach. If you cannot continue without help, ask the user one specific question.",
            super::messages::AGENT_NOTE,
            stop.rule,
            stop.message,
            stop.evidence,
            stop.request
        )
    }
}

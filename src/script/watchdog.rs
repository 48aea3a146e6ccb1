//! watchdog.rhai for the watchdog: `settings()` (merged over the built-in
//! script's, so every default lives in the `.rhai` file), and
//! `is_progress(record)` / `repair_prompt(stop)` as the watchdog's
//! [`Rules`]. When the person's hook fails at run time, the built-in
//! script answers instead and the failure is reported once, so a broken
//! rule never stops the agent.

use std::sync::Arc;

use rhai::Dynamic;

use super::{Origin, Script, WATCHDOG, compile_default, merged_settings};
use crate::watchdog::rules::FallbackRules;
use crate::watchdog::{CallFacts, Rules, Settings, StopInfo, Watchdog};

/// The watchdog's settings from `script` (fields it leaves out come from
/// the built-in watchdog.rhai). Errors name the field.
pub fn settings(script: &Script) -> Result<Settings, String> {
    Settings::from_json(merged_settings(script)?).map_err(|e| format!("settings(): {e}"))
}

/// The watchdog with the built-in `watchdog.rhai`; one that never
/// intervenes (and says so) if even that cannot load.
pub fn default_watchdog() -> (Watchdog, Vec<String>) {
    match compile_default(WATCHDOG) {
        Ok(script) => from_script(Arc::new(script)),
        Err(e) => (
            Watchdog::disabled(),
            vec![format!(
                "the built-in watchdog.rhai failed ({}); running without the watchdog",
                e.summary
            )],
        ),
    }
}

/// A watchdog from a loaded `watchdog.rhai`, with any warnings. Settings
/// that fail fall back to the built-in script's.
pub fn from_script(script: Arc<Script>) -> (Watchdog, Vec<String>) {
    let mut rules = ScriptRules::new(script.clone());
    let settings = match settings(&script) {
        Ok(s) => s,
        Err(e) => {
            rules.warn(e);
            match compile_default(WATCHDOG)
                .map_err(|e| e.summary)
                .and_then(|d| settings(&d))
            {
                Ok(s) => s,
                Err(e) => {
                    rules.warnings.push(format!(
                        "the built-in watchdog.rhai failed ({e}); running without the watchdog"
                    ));
                    return (Watchdog::disabled(), std::mem::take(&mut rules.warnings));
                }
            }
        }
    };
    let warnings = std::mem::take(&mut rules.warnings);
    (Watchdog::new(settings, Box::new(rules)), warnings)
}

/// The watchdog's rules backed by a loaded `watchdog.rhai`.
pub struct ScriptRules {
    script: Arc<Script>,
    fallback: Option<Arc<Script>>,
    /// Hook failures not yet reported to the person.
    pub warnings: Vec<String>,
    warned: bool,
}

impl ScriptRules {
    /// Rules from `script`, with the built-in default behind it.
    pub fn new(script: Arc<Script>) -> Self {
        let fallback = if script.origin == Origin::Default {
            None
        } else {
            compile_default(WATCHDOG).ok().map(Arc::new)
        };
        ScriptRules {
            script,
            fallback,
            warnings: Vec::new(),
            warned: false,
        }
    }

    fn warn(&mut self, message: String) {
        if !self.warned {
            self.warned = true;
            self.warnings.push(format!(
                "watchdog.rhai: {message}; using the built-in rule instead"
            ));
        }
    }

    fn call(&mut self, hook: &str, arg: Dynamic) -> Option<Dynamic> {
        match self.script.call_hook(hook, vec![arg.clone()]) {
            Ok(v) => Some(v),
            Err(e) => {
                self.warn(e.summary);
                self.fallback
                    .as_ref()
                    .and_then(|f| f.call_hook(hook, vec![arg]).ok())
            }
        }
    }
}

impl Rules for ScriptRules {
    fn is_progress(&mut self, facts: &CallFacts<'_>) -> bool {
        match self.call("is_progress", facts_map(facts)) {
            Some(v) => v.as_bool().unwrap_or_else(|_| {
                self.warn(format!(
                    "is_progress returned {}, not a bool",
                    v.type_name()
                ));
                false
            }),
            None => FallbackRules.is_progress(facts),
        }
    }

    fn repair_prompt(&mut self, stop: &StopInfo) -> String {
        match self.call("repair_prompt", stop_map(stop)) {
            Some(v) if v.is_string() => v.to_string(),
            _ => FallbackRules.repair_prompt(stop),
        }
    }
}

/// The `record` map `is_progress(record)` receives: the call's fields and
/// the facts the watchdog computed.
pub fn facts_map(f: &CallFacts<'_>) -> Dynamic {
    #[derive(serde::Serialize)]
    struct Record<'a> {
        name: &'a str,
        input: &'a serde_json::Value,
        status: crate::protocol::ToolStatus,
        output: &'a str,
        exit_code: Option<i32>,
        error_kind: Option<crate::protocol::ErrorKind>,
        command: &'a str,
        first_time: bool,
        output_changed: bool,
        output_empty: bool,
        is_write: bool,
        workspace_changed: bool,
        workspace_seen: bool,
        raw_changed: bool,
        output_small: bool,
        waiting: bool,
        counter_echo: bool,
        same_failure_after_edits: u32,
        near_duplicates: u32,
        quiet_turns: u32,
    }
    rhai::serde::to_dynamic(Record {
        name: &f.call.name,
        input: &f.call.input,
        status: f.call.status,
        output: &f.call.output,
        exit_code: f.call.exit_code,
        error_kind: f.call.error_kind,
        command: f.command,
        first_time: f.first_time,
        output_changed: f.output_changed,
        output_empty: f.output_empty,
        is_write: f.is_write,
        workspace_changed: f.workspace_changed,
        workspace_seen: f.workspace_seen,
        raw_changed: f.raw_changed,
        output_small: f.output_small,
        waiting: f.waiting,
        counter_echo: f.counter_echo,
        same_failure_after_edits: f.same_failure_after_edits,
        near_duplicates: f.near_duplicates,
        quiet_turns: f.quiet_turns,
    })
    .unwrap_or(Dynamic::UNIT)
}

/// The `stop` map `repair_prompt(stop)` receives.
pub fn stop_map(s: &StopInfo) -> Dynamic {
    rhai::serde::to_dynamic(s).unwrap_or(Dynamic::UNIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchdog::{sample_call, sample_facts, sample_stop};

    #[test]
    fn maps_carry_every_field_the_script_documents() {
        let call = sample_call();
        let map = facts_map(&sample_facts(&call)).cast::<rhai::Map>();
        for key in [
            "name",
            "input",
            "status",
            "output",
            "exit_code",
            "error_kind",
            "command",
            "first_time",
            "output_changed",
            "output_empty",
            "is_write",
            "workspace_changed",
            "workspace_seen",
            "raw_changed",
            "output_small",
            "waiting",
            "counter_echo",
            "same_failure_after_edits",
            "near_duplicates",
            "quiet_turns",
        ] {
            assert!(map.contains_key(key), "{key}");
        }
        assert_eq!(map["status"].to_string(), "ok");
        assert_eq!(map["exit_code"].as_int().unwrap(), 0);
        assert!(map["error_kind"].is_unit());
        let stop = stop_map(&sample_stop()).cast::<rhai::Map>();
        assert_eq!(stop["rule"].to_string(), "repeated_action");
        assert_eq!(stop["hard_cap"].as_int().unwrap(), 250);
    }

    #[test]
    fn a_user_file_may_leave_settings_out() {
        let script = super::super::compile(
            WATCHDOG,
            "fn settings() { #{ base_budget: 30 } }\nfn is_progress(r) { true }\nfn repair_prompt(s) { \"x\" }".into(),
            Origin::User("watchdog.rhai".into()),
        )
        .unwrap();
        let s = settings(&script).unwrap();
        assert_eq!(s.base_budget, 30);
        let (default, warnings) = default_watchdog();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(s.repeated_action, default.settings().repeated_action);
        let typo = super::super::compile(
            WATCHDOG,
            "fn settings() { #{ base_budjet: 30 } }\nfn is_progress(r) { true }\nfn repair_prompt(s) { \"x\" }".into(),
            Origin::User("watchdog.rhai".into()),
        )
        .unwrap();
        let err = settings(&typo).unwrap_err();
        assert!(err.contains("base_budjet"), "{err}");
        let (_, warnings) = from_script(Arc::new(typo));
        assert!(warnings[0].contains("base_budjet"), "{warnings:?}");
    }
}

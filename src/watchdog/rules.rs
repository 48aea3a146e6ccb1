//! The watchdog's rules from `watchdog.rhai`: `is_progress(record)` and
//! `repair_prompt(stop)`. When the person's hook fails at run time, the
//! built-in default script answers instead and the failure is reported
//! once, so a broken rule never stops the agent.

use std::sync::Arc;

use rhai::{Dynamic, Map};

use super::{CallFacts, Rules, Settings, StopInfo};
use crate::script::{Origin, Script, WATCHDOG};

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
            crate::script::compile_default(WATCHDOG).ok().map(Arc::new)
        };
        ScriptRules {
            script,
            fallback,
            warnings: Vec::new(),
            warned: false,
        }
    }

    /// The settings the script returns (the defaults if it fails).
    pub fn settings(&mut self) -> Settings {
        match self
            .script
            .call_hook("settings", vec![])
            .map_err(|e| e.summary)
            .and_then(|v| Settings::from_script(&v).map_err(|e| format!("settings(): {e}")))
        {
            Ok(s) => s,
            Err(e) => {
                self.warn(e);
                Settings::default()
            }
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

/// The `call` map `is_progress(record)` receives.
pub fn facts_map(f: &CallFacts<'_>) -> Dynamic {
    let mut m = Map::new();
    m.insert("name".into(), f.call.name.clone().into());
    m.insert(
        "input".into(),
        rhai::serde::to_dynamic(&f.call.input).unwrap_or(Dynamic::UNIT),
    );
    m.insert("status".into(), f.call.status.as_str().into());
    m.insert("output".into(), f.call.output.clone().into());
    m.insert(
        "exit_code".into(),
        f.call
            .exit_code
            .map(|c| Dynamic::from_int(c.into()))
            .unwrap_or(Dynamic::UNIT),
    );
    m.insert(
        "error_kind".into(),
        f.call
            .error_kind
            .map(|k| Dynamic::from(k.as_str().to_string()))
            .unwrap_or(Dynamic::UNIT),
    );
    m.insert("command".into(), f.command.to_string().into());
    m.insert("first_time".into(), f.first_time.into());
    m.insert("output_changed".into(), f.output_changed.into());
    m.insert("output_empty".into(), f.output_empty.into());
    m.insert("is_write".into(), f.is_write.into());
    m.insert("workspace_changed".into(), f.workspace_changed.into());
    m.insert("workspace_seen".into(), f.workspace_seen.into());
    Dynamic::from_map(m)
}

/// The `stop` map `repair_prompt(stop)` receives.
pub fn stop_map(s: &StopInfo) -> Dynamic {
    let mut m = Map::new();
    m.insert("rule".into(), s.rule.into());
    m.insert("message".into(), s.message.clone().into());
    m.insert("evidence".into(), s.evidence.clone().into());
    m.insert("turns_used".into(), Dynamic::from_int(s.turns_used.into()));
    m.insert("budget".into(), Dynamic::from_int(s.budget.into()));
    m.insert("hard_cap".into(), Dynamic::from_int(s.hard_cap.into()));
    Dynamic::from_map(m)
}

/// Rules that need no script: used only if even the built-in
/// `watchdog.rhai` cannot load, which its tests rule out.
pub struct FallbackRules;

impl Rules for FallbackRules {
    fn is_progress(&mut self, f: &CallFacts<'_>) -> bool {
        f.call.status == crate::protocol::ToolStatus::Ok
            && if f.is_write || f.workspace_changed {
                f.workspace_changed && !f.workspace_seen
            } else {
                f.output_changed && !f.output_empty
            }
    }

    fn repair_prompt(&mut self, stop: &StopInfo) -> String {
        format!(
            "[agent watchdog — this note is from the agent, not from the user]\nRule fired: {}: {}\nEvidence: {}\nDo not repeat the same call. Change your approach, or ask the user a specific question.",
            stop.rule, stop.message, stop.evidence
        )
    }
}

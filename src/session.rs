//! Wiring the scripts into an agent: the tool registry (built-ins plus the
//! tools of `tools.rhai`), the system prompt from `prompt.rhai`, and the
//! watchdog from `watchdog.rhai`. Used at startup and on every reload, so
//! both paths build exactly the same thing.

use std::path::Path;
use std::sync::Arc;

use crate::agent::watchdog_from_script;
use crate::prompt::PromptContext;
use crate::script::tools::ScriptTool;
use crate::script::{Origin, ScriptHost, TOOLS, WATCHDOG};
use crate::tools::Registry;
use crate::watchdog::Watchdog;

/// What the scripts produce, plus notes for the person.
pub struct Setup {
    pub registry: Arc<Registry>,
    pub system_prompt: String,
    pub watchdog: Option<Watchdog>,
    /// Warnings and facts to show at startup or after a reload.
    pub notes: Vec<String>,
}

/// Builds the registry, the prompt and the watchdog from loaded scripts.
pub fn assemble(host: &ScriptHost, workspace: &Path, model: &str) -> Setup {
    let mut notes = Vec::new();
    let mut registry = Registry::with_builtins();
    if let Some(script) = host.get(TOOLS) {
        match ScriptTool::all(script) {
            Ok(tools) => {
                for tool in tools {
                    let name = tool.spec().name.clone();
                    if registry.register(tool).is_some() {
                        notes.push(format!(
                            "{}: the tool `{name}` replaces the built-in `{name}`",
                            script.display_path()
                        ));
                    }
                }
            }
            Err(e) => notes.push(format!(
                "{}: {e}; its tools are not available",
                script.display_path()
            )),
        }
    }
    let ctx = PromptContext::new(workspace, model, registry.names());
    let system_prompt = match host.system_prompt(&ctx) {
        Ok(prompt) => prompt,
        Err(e) => {
            notes.push(format!(
                "{}   = note: using the built-in prompt instead",
                e.rendered
            ));
            builtin_prompt(&ctx)
        }
    };
    let watchdog = host.get(WATCHDOG).map(|script| {
        let (watchdog, warnings) = watchdog_from_script(script.clone());
        notes.extend(warnings);
        watchdog
    });
    Setup {
        registry: Arc::new(registry),
        system_prompt,
        watchdog,
        notes,
    }
}

/// The prompt of the embedded `prompt.rhai`, for when the person's
/// `system_prompt(ctx)` fails at run time.
fn builtin_prompt(ctx: &PromptContext) -> String {
    let source = crate::script::DEFAULTS
        .iter()
        .find(|(n, _)| *n == crate::script::PROMPT)
        .map(|(_, s)| s.to_string())
        .unwrap_or_default();
    crate::script::compile(crate::script::PROMPT, source, Origin::Default)
        .and_then(|script| {
            script.call_hook(
                "system_prompt",
                vec![crate::script::prompt_context_map(ctx)],
            )
        })
        .map(|v| v.to_string())
        .unwrap_or_else(|_| format!("You are a coding agent working in {}.", ctx.cwd))
}

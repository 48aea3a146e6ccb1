//! prompt.rhai: `system_prompt(ctx)` builds the system prompt from the
//! facts of [`PromptContext`]; `summary_prompt()` (optional) instructs
//! compaction. When the person's hook fails at run time, the built-in
//! prompt.rhai answers and the failure becomes a note.

use rhai::Dynamic;

use super::{PROMPT, ScriptError, ScriptHost, compile_default};
use crate::prompt::PromptContext;

/// The `ctx` map `system_prompt(ctx)` receives.
pub fn context_map(ctx: &PromptContext) -> Dynamic {
    #[derive(serde::Serialize)]
    struct Ctx<'a> {
        cwd: &'a str,
        os: &'a str,
        date: &'a str,
        model: &'a str,
        tools: &'a [String],
        project_instructions: &'a str,
        lean: bool,
        tool_calls: &'a str,
        tool_descriptions: &'a str,
    }
    rhai::serde::to_dynamic(Ctx {
        cwd: &ctx.cwd,
        os: &ctx.os,
        date: &ctx.date,
        model: &ctx.model,
        tools: &ctx.tools,
        project_instructions: ctx.project_instructions.as_deref().unwrap_or(""),
        lean: ctx.lean,
        tool_calls: &ctx.tool_calls,
        tool_descriptions: &ctx.tool_descriptions,
    })
    .unwrap_or(Dynamic::UNIT)
}

fn missing(name: &str) -> ScriptError {
    ScriptError {
        rendered: format!("error: {name} is not loaded\n"),
        summary: format!("{name} is not loaded"),
    }
}

/// Builds the system prompt with the loaded `prompt.rhai`.
pub fn system_prompt(host: &ScriptHost, ctx: &PromptContext) -> Result<String, ScriptError> {
    let script = host.get(PROMPT).ok_or_else(|| missing(PROMPT))?;
    let value = script.call_hook("system_prompt", vec![context_map(ctx)])?;
    Ok(value.to_string())
}

/// The compaction instructions of the loaded `prompt.rhai`; `None` when it
/// defines no `summary_prompt()`.
pub fn summary_prompt(host: &ScriptHost) -> Result<Option<String>, ScriptError> {
    let script = host.get(PROMPT).ok_or_else(|| missing(PROMPT))?;
    if !script.has_fn("summary_prompt", 0) {
        return Ok(None);
    }
    Ok(Some(
        script.call_hook("summary_prompt", vec![])?.to_string(),
    ))
}

/// When to compact and what to keep: `compaction()` of `prompt.rhai`,
/// fields it leaves out (or a file without the hook) from the built-in
/// file. `Err` names what is wrong.
pub fn compaction(host: &ScriptHost) -> Result<crate::agent::context::CompactionRule, String> {
    let read = |script: &super::Script| -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
        if !script.has_fn("compaction", 0) {
            return Ok(None);
        }
        let value = script
            .call_hook("compaction", vec![])
            .map_err(|e| e.summary)?;
        match super::api::to_json(&value).map_err(|e| format!("compaction(): {e}"))? {
            serde_json::Value::Object(map) => Ok(Some(map)),
            other => Err(format!("compaction() must return a map, not {other}")),
        }
    };
    let mut map = match host.get(PROMPT) {
        Some(script) => read(script)?.unwrap_or_default(),
        None => serde_json::Map::new(),
    };
    if let Ok(default) = compile_default(PROMPT)
        && let Ok(Some(base)) = read(&default)
    {
        for (k, v) in base {
            map.entry(k).or_insert(v);
        }
    }
    let share = |name: &str| -> Result<f64, String> {
        let v = map
            .get(name)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| format!("compaction(): `{name}` must be a number"))?;
        if (0.05..=0.95).contains(&v) {
            Ok(v)
        } else {
            Err(format!(
                "compaction(): `{name}` must be between 0.05 and 0.95, not {v}"
            ))
        }
    };
    for key in map.keys() {
        if !["compact_at", "keep_recent"].contains(&key.as_str()) {
            return Err(format!(
                "compaction(): unknown field `{key}` (expected compact_at, keep_recent)"
            ));
        }
    }
    Ok(crate::agent::context::CompactionRule {
        compact_at: share("compact_at")?,
        keep_recent: share("keep_recent")?,
    })
}

/// The summary prompt of the built-in `prompt.rhai`.
pub fn builtin_summary_prompt() -> Result<String, ScriptError> {
    compile_default(PROMPT)
        .and_then(|script| script.call_hook("summary_prompt", vec![]))
        .map(|v| v.to_string())
}

/// The system prompt of the built-in `prompt.rhai`, for when the person's
/// `system_prompt(ctx)` fails at run time.
pub fn builtin_system_prompt(ctx: &PromptContext) -> Result<String, ScriptError> {
    compile_default(PROMPT)
        .and_then(|script| script.call_hook("system_prompt", vec![context_map(ctx)]))
        .map(|v| v.to_string())
}

/// Both prompts from the loaded scripts, falling back to the built-in ones,
/// with a note for every fallback.
pub fn prompts(host: &ScriptHost, ctx: &PromptContext) -> (String, String, Vec<String>) {
    let mut notes = Vec::new();
    let mut fallback = |e: ScriptError, what: &str| {
        notes.push(format!(
            "{}   = note: using the built-in {what} instead",
            e.rendered
        ));
    };
    let system = match system_prompt(host, ctx) {
        Ok(p) => p,
        Err(e) => {
            fallback(e, "prompt");
            builtin_system_prompt(ctx)
                .unwrap_or_else(|_| format!("You are a coding agent working in {}.", ctx.cwd))
        }
    };
    let summary = match summary_prompt(host) {
        Ok(Some(p)) => Some(p),
        Ok(None) => None,
        Err(e) => {
            fallback(e, "summary prompt");
            None
        }
    };
    let summary = summary
        .or_else(|| builtin_summary_prompt().ok())
        .unwrap_or_else(|| crate::agent::messages::PLAIN_SUMMARY_PROMPT.to_string());
    (system, summary, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compaction_floor_agrees_with_the_built_in_prompt() {
        // The loop's floor (used only when no script can be read) must be
        // the built-in prompt.rhai's compaction().
        let empty = tempfile::tempdir().unwrap();
        let (host, _) = ScriptHost::load(empty.path());
        assert_eq!(
            compaction(&host).unwrap(),
            crate::agent::context::CompactionRule::default()
        );
    }
}

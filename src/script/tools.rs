//! Tools defined in `tools.rhai`, as entries of the one tool registry.
//!
//! The script's top level evaluates to an array of maps, each with `name`,
//! `description`, `parameters` (a JSON Schema written as a Rhai map) and
//! `handler` (a closure or `Fn("name")`). A handler runs on a blocking
//! thread under the script budget; it receives the arguments as a map and
//! returns a string, or a map or array that is sent as JSON. `throw`
//! becomes a failed tool result.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use rhai::{Dynamic, FnPtr, Map};
use serde_json::Value;

use super::engine::{CallGuard, SCRIPT_CALL_BUDGET, engine, termination_kind};
use super::{Script, api, error};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::tools::{Tool, ToolContext, ToolOrigin, ToolSpec};

/// One tool as the script defines it.
#[derive(Clone, Debug)]
pub struct ToolDef {
    pub spec: ToolSpec,
    pub handler: FnPtr,
    /// `mutating: false` in the entry declares a tool that only reads;
    /// anything else (or nothing) counts as one that may change files.
    pub mutating: bool,
}

/// Reads the tool list from a loaded `tools.rhai`. Every problem names the
/// entry it is in.
pub fn definitions(script: &Script) -> Result<Vec<ToolDef>, String> {
    let value = script.value.flatten_clone();
    let Some(entries) = value.clone().try_cast::<rhai::Array>() else {
        return Err(format!(
            "{} must end with a list of tools, like [ #{{ name: ..., description: ..., parameters: ..., handler: ... }} ], but it ends with {}",
            script.name,
            value.type_name()
        ));
    };
    let mut defs: Vec<ToolDef> = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let entry = entry.flatten();
        let at = format!("{} entry {}", script.name, i + 1);
        let Some(map) = entry.try_cast::<Map>() else {
            return Err(format!(
                "{at}: each tool must be a map #{{ name, description, parameters, handler }}"
            ));
        };
        let text = |key: &str| -> Result<String, String> {
            match map.get(key) {
                Some(v) if v.is_string() => Ok(v.to_string()),
                Some(v) => Err(format!(
                    "{at}: `{key}` must be a string, not {}",
                    v.type_name()
                )),
                None => Err(format!("{at}: `{key}` is missing")),
            }
        };
        let name = text("name")?;
        let at = format!("{at} (`{name}`)");
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "{at}: the name must be 1-64 letters, digits, `_` or `-`"
            ));
        }
        if defs.iter().any(|d| d.spec.name == name) {
            return Err(format!(
                "{at}: another tool in this file is already named `{name}`"
            ));
        }
        let description = text("description")
            .map_err(|e| e.replace(&format!("{} entry {}", script.name, i + 1), &at))?;
        let parameters = match map.get("parameters") {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(p) => api::to_json(p).map_err(|e| {
                format!("{at}: `parameters` is not plain data (JSON Schema as a map): {e}")
            })?,
        };
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!(
                "{at}: `parameters` must be a JSON Schema with type: \"object\""
            ));
        }
        let handler = match map.get("handler").map(|h| h.flatten_clone()) {
            Some(h) if h.is_fnptr() => h.cast::<FnPtr>(),
            Some(h) if h.is_string() => {
                FnPtr::new(h.to_string()).map_err(|e| format!("{at}: `handler`: {e}"))?
            }
            Some(h) => {
                return Err(format!(
                    "{at}: `handler` must be a closure like |args| ..., not {}",
                    h.type_name()
                ));
            }
            None => return Err(format!("{at}: `handler` is missing")),
        };
        let mutating = match map.get("mutating") {
            None => true,
            Some(v) => v
                .as_bool()
                .map_err(|t| format!("{at}: `mutating` must be true or false, not {t}"))?,
        };
        defs.push(ToolDef {
            spec: ToolSpec {
                name,
                description,
                parameters,
            },
            handler,
            mutating,
        });
    }
    Ok(defs)
}

/// A script tool in the registry.
pub struct ScriptTool {
    /// Shared with the blocking thread of each call, so a call does not
    /// copy the name, description and schema.
    def: Arc<ToolDef>,
    script: Arc<Script>,
}

impl ScriptTool {
    /// The tool `def` of the loaded `script` it came from.
    pub fn new(def: ToolDef, script: Arc<Script>) -> Self {
        ScriptTool {
            def: Arc::new(def),
            script,
        }
    }

    /// Every tool of a loaded `tools.rhai`.
    pub fn all(script: &Arc<Script>) -> Result<Vec<Arc<dyn Tool>>, String> {
        Ok(definitions(script)?
            .into_iter()
            .map(|def| Arc::new(ScriptTool::new(def, script.clone())) as Arc<dyn Tool>)
            .collect())
    }

    /// Runs the handler on the current (blocking) thread.
    pub fn call_blocking(
        &self,
        args: serde_json::Map<String, Value>,
        ctx: ToolContext,
        handle: tokio::runtime::Handle,
    ) -> ToolOutput {
        let name = &self.def.spec.name;
        let _guard = CallGuard::enter(
            SCRIPT_CALL_BUDGET,
            ctx.cancel.clone(),
            Some(ctx.runtime.clone()),
            Some(handle),
        );
        let args = match rhai::serde::to_dynamic(Value::Object(args)) {
            Ok(a) => a,
            Err(e) => {
                return ToolOutput::failed(
                    ErrorKind::InvalidArgs,
                    format!("Error: cannot pass the arguments to `{name}`: {e}"),
                );
            }
        };
        match self
            .def
            .handler
            .call::<Dynamic>(engine(), &self.script.ast, (args,))
        {
            Ok(value) => match result_text(value) {
                Ok(text) => ToolOutput::ok(cap_result(text, ctx.runtime.limits.output_cap)),
                Err(e) => ToolOutput::failed(
                    ErrorKind::Failed,
                    format!(
                        "Error: the tool `{name}` returned something that is not text or JSON data: {e}"
                    ),
                ),
            },
            Err(err) => {
                let rendered =
                    error::runtime_error(&self.script.display_path(), &self.script.source, &err);
                let kind = match termination_kind(&err) {
                    Some("timeout") => ErrorKind::Timeout,
                    Some(_) => ErrorKind::Cancelled,
                    None => ErrorKind::Failed,
                };
                ToolOutput::failed(
                    kind,
                    format!("Error: the tool `{name}` failed: {}", rendered.summary),
                )
            }
        }
    }
}

/// The line that replaces the middle of a script tool's result longer
/// than the output cap, like a shell command's.
pub fn result_cut_marker(omitted: usize, total: usize) -> String {
    format!(
        "\n[... {omitted} bytes omitted: the tool's result was {total} bytes, more than the output cap ...]\n"
    )
}

/// Keeps a script tool's result within `cap` bytes, as the built-in tools'
/// outputs are: the first quarter and the last three quarters of the cap,
/// with [`result_cut_marker`] between (cut on character boundaries).
pub fn cap_result(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let head = crate::text::prefix(&text, cap / 4);
    let tail = crate::text::suffix(&text, cap - cap / 4);
    let omitted = text.len() - head.len() - tail.len();
    [head, &result_cut_marker(omitted, text.len()), tail].concat()
}

/// A handler's value as tool text: strings as they are, `()` as nothing,
/// anything else as JSON.
fn result_text(value: Dynamic) -> Result<String, String> {
    let value = value.flatten();
    if value.is_unit() {
        return Ok(String::new());
    }
    if value.is_string() {
        return Ok(value.to_string());
    }
    api::to_json(&value)
        .map(|v| v.to_string())
        .map_err(|e| e.to_string())
}

impl Tool for ScriptTool {
    fn spec(&self) -> &ToolSpec {
        &self.def.spec
    }

    fn origin(&self) -> ToolOrigin {
        ToolOrigin::Script
    }

    fn is_mutating(&self) -> bool {
        self.def.mutating
    }

    fn call(
        &self,
        args: serde_json::Map<String, Value>,
        ctx: ToolContext,
    ) -> BoxFuture<'static, ToolOutput> {
        let tool = ScriptTool {
            def: self.def.clone(),
            script: self.script.clone(),
        };
        Box::pin(async move {
            let handle = tokio::runtime::Handle::current();
            let def = tool.def.clone();
            tokio::task::spawn_blocking(move || tool.call_blocking(args, ctx, handle))
                .await
                .unwrap_or_else(|e| {
                    ToolOutput::failed(
                        ErrorKind::Failed,
                        format!("Error: the tool `{}` crashed: {e}", def.spec.name),
                    )
                })
        })
    }
}

#[cfg(test)]
mod cap_tests {
    use super::*;

    #[test]
    fn long_results_keep_head_and_tail_with_a_marker() {
        assert_eq!(cap_result("short".into(), 1000), "short");
        let text = format!("{}{}", "h".repeat(5000), "t".repeat(5000));
        let capped = cap_result(text, 4000);
        assert!(capped.starts_with(&"h".repeat(1000)));
        assert!(capped.ends_with(&"t".repeat(3000)));
        assert!(
            capped.contains(&result_cut_marker(6000, 10_000)),
            "{}",
            capped.get(990..1100).unwrap_or("")
        );
        // Character boundaries are respected.
        let wide = "é".repeat(3000);
        let capped = cap_result(wide, 1001);
        assert!(capped.contains("bytes omitted"));
    }
}

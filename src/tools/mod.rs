//! The tool registry and the dispatcher.
//!
//! Built-in tools and script tools implement the same [`Tool`] trait and live
//! in one [`Registry`]: the model sees one list and the dispatcher calls
//! every tool the same way. [`Registry::dispatch`] turns every failure
//! (unknown tool, arguments that are not JSON or miss a required field, a
//! failing handler) into a [`ToolOutput`] the model can read; it never
//! returns an error and never panics on model input.

pub mod builtin;
pub mod diff;
pub mod mcp;
pub mod messages;
pub mod text_calls;

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::protocol::{ErrorKind, ToolCall, ToolOutput};
use crate::runtime::Runtime;

/// What the model is told about a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema object describing the arguments.
    pub parameters: Value,
}

/// A tool ready to run with its checked arguments (see [`Registry::prepare`]).
pub type Prepared = (Arc<dyn Tool>, Map<String, Value>);

/// Where a tool comes from; shown by `/tools` and at startup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolOrigin {
    Builtin,
    Script,
    /// A tool of an MCP server (`mcp.rhai`).
    Mcp,
}

/// Everything a running tool may use.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub runtime: Arc<Runtime>,
    /// Cancelled when the person interrupts the turn.
    pub cancel: CancellationToken,
    /// The id of the call being answered (used to name spill files).
    pub call_id: String,
    /// Where the tool puts the last line it printed, while it runs.
    pub live: crate::protocol::LiveLine,
}

impl ToolContext {
    /// A context for answering `call_id`, with a live line nobody watches.
    pub fn new(runtime: Arc<Runtime>, cancel: CancellationToken, call_id: &str) -> Self {
        ToolContext {
            runtime,
            cancel,
            call_id: call_id.to_string(),
            live: crate::protocol::LiveLine::default(),
        }
    }
}

/// A tool the model can call.
pub trait Tool: Send + Sync {
    fn spec(&self) -> &ToolSpec;

    fn origin(&self) -> ToolOrigin {
        ToolOrigin::Builtin
    }

    /// Whether a call may change files or other state. The watchdog looks
    /// at the workspace after mutating calls only, so this is `true`
    /// unless the tool is sure it only reads.
    fn is_mutating(&self) -> bool {
        true
    }

    /// Runs the tool. `args` has already been checked against the schema's
    /// `required` list and top-level types. Failures are returned as a
    /// failed [`ToolOutput`], never as a panic.
    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput>;
}

/// All tools of one agent, in the order the model sees them.
#[derive(Clone)]
pub struct Registry {
    tools: Vec<Arc<dyn Tool>>,
    index: HashMap<String, usize>,
    /// The `tools` array every request carries, built when a tool is
    /// registered rather than once per request.
    openai_json: Value,
    /// The same with compact descriptions (profiles with `lean_prompt`).
    compact_json: Value,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            tools: Vec::new(),
            index: HashMap::new(),
            openai_json: Value::Array(Vec::new()),
            compact_json: Value::Array(Vec::new()),
        }
    }
}

impl Registry {
    /// A registry holding the built-in tools.
    pub fn with_builtins() -> Self {
        let mut registry = Registry::default();
        for tool in builtin::all() {
            registry.register(tool);
        }
        registry
    }

    /// Adds a tool. A tool with the name of one already registered replaces
    /// it in place, and the replaced tool is returned so the caller can say so.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Option<Arc<dyn Tool>> {
        let name = tool.spec().name.clone();
        let replaced = match self.index.get(&name) {
            Some(&i) => Some(std::mem::replace(&mut self.tools[i], tool)),
            None => {
                self.index.insert(name, self.tools.len());
                self.tools.push(tool);
                None
            }
        };
        self.openai_json =
            Value::Array(self.tools.iter().map(|t| openai_entry(t.spec())).collect());
        self.compact_json = Value::Array(
            self.tools
                .iter()
                .map(|t| openai_entry(&compact_spec(t.spec())))
                .collect(),
        );
        replaced
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.spec().name.clone()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The `tools` array of a Chat Completions request.
    pub fn to_openai_json(&self) -> &Value {
        &self.openai_json
    }

    /// The `tools` array with compact descriptions ([`compact_spec`]).
    pub fn to_openai_json_compact(&self) -> &Value {
        &self.compact_json
    }

    /// The tools as compact text for a system prompt (`tool_calls:
    /// "text"`): one line per tool, its parameters and which are required.
    pub fn describe_compact(&self) -> String {
        self.tools
            .iter()
            .map(|t| {
                let spec = compact_spec(t.spec());
                let required: Vec<&str> = spec
                    .parameters
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let params: Vec<String> = spec
                    .parameters
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|props| {
                        props
                            .iter()
                            .map(|(name, p)| {
                                let ty = p.get("type").and_then(Value::as_str).unwrap_or("any");
                                let opt = if required.contains(&name.as_str()) {
                                    ""
                                } else {
                                    "?"
                                };
                                format!("{name}{opt}: {ty}")
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                format!(
                    "- {}({}): {}",
                    spec.name,
                    params.join(", "),
                    spec.description
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Parses and checks a call's arguments. On success returns the tool and
    /// the argument map; on failure, the output the model should see.
    pub fn prepare(&self, call: &ToolCall) -> Result<Prepared, ToolOutput> {
        let Some(tool) = self.get(&call.name) else {
            return Err(ToolOutput::failed(
                ErrorKind::UnknownTool,
                messages::unknown_tool(&call.name, &self.names()),
            ));
        };
        let args = parse_arguments(&call.arguments)
            .map_err(|e| ToolOutput::failed(ErrorKind::InvalidArgs, e))?;
        check_arguments(&tool.spec().parameters, &args).map_err(|e| {
            ToolOutput::failed(
                ErrorKind::InvalidArgs,
                messages::invalid_arguments(&call.name, &e),
            )
        })?;
        Ok((tool.clone(), args))
    }

    /// Runs one call and always returns an output for it.
    pub async fn dispatch(&self, call: &ToolCall, ctx: ToolContext) -> ToolOutput {
        match self.prepare(call) {
            Ok((tool, args)) => tool.call(args, ctx).await,
            Err(output) => output,
        }
    }
}

/// One entry of a request's `tools` array.
fn openai_entry(spec: &ToolSpec) -> Value {
    serde_json::json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        }
    })
}

/// A spec with its description cut to the first sentence and no
/// parameter descriptions (no examples, no caveats; the names and types
/// stay): what a small local model needs, in half the bytes.
pub fn compact_spec(spec: &ToolSpec) -> ToolSpec {
    let mut parameters = spec.parameters.clone();
    if let Some(props) = parameters
        .get_mut("properties")
        .and_then(Value::as_object_mut)
    {
        for p in props.values_mut() {
            if let Some(p) = p.as_object_mut() {
                p.remove("description");
            }
        }
    }
    ToolSpec {
        name: spec.name.clone(),
        description: first_sentence(&spec.description),
        parameters,
    }
}

/// The first sentence of a description: up to the first `. ` (or `.` and
/// a new line) after a few words.
pub fn first_sentence(text: &str) -> String {
    const MIN: usize = 12;
    let bytes = text.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'.'
            && i >= MIN
            && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace())
            && let Some(head) = text.get(..=i)
            && !head.ends_with("e.g.")
            && !head.ends_with("i.e.")
        {
            return head.to_string();
        }
    }
    text.trim().to_string()
}

/// Parses the raw `arguments` text. An empty string means no arguments
/// (some servers send that for tools without parameters).
pub fn parse_arguments(raw: &str) -> Result<Map<String, Value>, String> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(messages::arguments_not_object(json_type_name(&other))),
        Err(e) => Err(messages::arguments_not_json(&e.to_string(), raw)),
    }
}

/// Checks the arguments against the schema's `required` list and the
/// declared `type` of each top-level property. Deeper validation is the
/// tool's own business.
pub fn check_arguments(schema: &Value, args: &Map<String, Value>) -> Result<(), String> {
    let mut problems = Vec::new();
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if args.get(name).is_none_or(Value::is_null) {
                problems.push(format!("missing required field `{name}`"));
            }
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, value) in args {
            let Some(expected) = props.get(name).and_then(|p| p.get("type")) else {
                continue;
            };
            if value.is_null() {
                continue;
            }
            let ok = match expected {
                Value::String(t) => type_matches(t, value),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .any(|t| type_matches(t, value)),
                _ => true,
            };
            if !ok {
                problems.push(format!(
                    "field `{name}` should be {}, got {}",
                    describe_type(expected),
                    json_type_name(value)
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Whether `value` has the schema type `expected`. Numbers and booleans
/// written as strings (`"5"`, `"true"`) are accepted: small models often
/// quote them, and the tools read them leniently (see [`arg_u64`]).
fn type_matches(expected: &str, value: &Value) -> bool {
    let text = value.as_str().map(str::trim);
    match expected {
        "string" => value.is_string(),
        "integer" => {
            value.is_i64()
                || value.is_u64()
                || value.as_f64().is_some_and(|f| f.fract() == 0.0)
                || text.is_some_and(|t| t.parse::<i64>().is_ok())
        }
        "number" => value.is_number() || text.is_some_and(|t| t.parse::<f64>().is_ok()),
        "boolean" => value.is_boolean() || text.is_some_and(|t| t == "true" || t == "false"),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn describe_type(expected: &Value) -> String {
    match expected {
        Value::String(t) if t.starts_with(['a', 'e', 'i', 'o', 'u']) => format!("an {t}"),
        Value::String(t) => format!("a {t}"),
        Value::Array(ts) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            format!("one of {}", names.join(", "))
        }
        other => other.to_string(),
    }
}

/// The JSON type of a value, as a schema would name it.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads an optional integer argument, accepting `5`, `5.0` and `"5"` (small
/// models often quote numbers).
pub fn arg_u64(args: &Map<String, Value>, name: &str) -> Option<u64> {
    match args.get(name)? {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Reads a string argument ("" when absent; the dispatcher has already
/// checked required fields).
pub fn arg_str<'a>(args: &'a Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or("")
}

/// Reads an optional boolean argument, accepting `true` and `"true"`.
pub fn arg_bool(args: &Map<String, Value>, name: &str) -> bool {
    match args.get(name) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"]
        })
    }

    #[test]
    fn compact_descriptions_keep_the_first_sentence() {
        assert_eq!(
            first_sentence("Runs a command (e.g. `ls`). Each call starts a fresh shell."),
            "Runs a command (e.g. `ls`)."
        );
        assert_eq!(first_sentence("No period here"), "No period here");
        let registry = Registry::with_builtins();
        let full = registry.to_openai_json().to_string().len();
        let compact = registry.to_openai_json_compact().to_string().len();
        assert!(compact * 2 < full, "{compact} of {full} bytes");
        let text = registry.describe_compact();
        assert!(
            text.contains("- read_file(") && text.contains("path: string"),
            "{text}"
        );
        assert!(text.contains("limit?: integer"), "{text}");
    }

    #[test]
    fn empty_arguments_mean_no_arguments() {
        assert_eq!(parse_arguments("  "), Ok(Map::new()));
    }

    #[test]
    fn bad_json_is_reported_with_the_parser_message() {
        let err = parse_arguments("{\"path\": ").unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn non_object_arguments_are_refused() {
        let err = parse_arguments("[1,2]").unwrap_err();
        assert!(err.contains("an array"), "{err}");
    }

    #[test]
    fn missing_required_and_wrong_types_are_listed() {
        let args = parse_arguments(r#"{"limit": "ten"}"#).unwrap();
        assert_eq!(
            check_arguments(
                &schema(),
                &parse_arguments(r#"{"path": "a", "limit": "5"}"#).unwrap()
            ),
            Ok(())
        );
        let err = check_arguments(&schema(), &args).unwrap_err();
        assert!(err.contains("missing required field `path`"), "{err}");
        assert!(
            err.contains("field `limit` should be an integer, got a string"),
            "{err}"
        );
    }

    #[test]
    fn integral_floats_count_as_integers() {
        let args = parse_arguments(r#"{"path": "a", "limit": 5.0}"#).unwrap();
        assert_eq!(check_arguments(&schema(), &args), Ok(()));
        assert_eq!(arg_u64(&args, "limit"), Some(5));
    }
}

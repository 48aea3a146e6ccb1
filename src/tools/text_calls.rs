//! Tool calls a model wrote as text instead of sending them as native
//! `tool_calls` deltas, and whether a final answer looks like one.
//!
//! Small local models often answer with a call in their own markup when the
//! server's chat template does not turn it into a native call. With
//! `tool_calls: "auto"` or `"text"` in a profile (`models.rhai`), the agent
//! recovers such calls and runs them like native ones. [`parse`] is the
//! built-in reader (`default_tool_calls(text, tools)` in scripts); it knows:
//!
//! - fenced JSON: ```` ```json {"name": ..., "arguments": {...}} ``` ````,
//!   one object or a list (also unfenced, when it is the whole answer);
//! - `<tool_call>{...}</tool_call>` (Qwen, Hermes);
//! - `[TOOL_CALLS] [{...}]` and `[TOOL_CALLS]name[ARGS]{...}` (Mistral);
//! - `<|python_tag|>{"name": ..., "parameters": {...}}` (Llama 3.x);
//! - `<function=NAME>{...}</function>` (Llama 3.1, Functionary).
//!
//! Prose that merely shows JSON is not a call: the calls must end the
//! answer (only blank text after them), each object may hold only `name`,
//! `arguments` (or `parameters`), `type` and `id`, and [`accept`] keeps a
//! call only when its tool is registered and its arguments pass the
//! dispatcher's checks with no unknown field. A rejected answer stays an
//! answer; [`looks_like_call`] lets the loop tell the person about it.

use serde_json::{Map, Value};

use super::Registry;
use crate::protocol::ToolCall;

/// How a profile's model makes tool calls (`tool_calls` in `models.rhai`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolCallMode {
    /// Only native `tool_calls` deltas count (hosted APIs).
    #[default]
    Native,
    /// Native calls, and calls recovered from the text when a response has
    /// none (local servers).
    Auto,
    /// Like `auto`, and the tools are described in the system prompt
    /// instead of the request's `tools` array (servers without tools).
    Text,
}

impl ToolCallMode {
    /// Reads a profile's value.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "native" => Ok(ToolCallMode::Native),
            "auto" => Ok(ToolCallMode::Auto),
            "text" => Ok(ToolCallMode::Text),
            other => Err(format!(
                "`tool_calls` must be \"native\", \"auto\" or \"text\", not {other:?}"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallMode::Native => "native",
            ToolCallMode::Auto => "auto",
            ToolCallMode::Text => "text",
        }
    }

    /// Whether calls are recovered from the text.
    pub fn recovers(self) -> bool {
        self != ToolCallMode::Native
    }
}

/// A call found in text, before it is checked against the registry.
#[derive(Clone, Debug, PartialEq)]
pub struct TextCall {
    pub name: String,
    pub arguments: Value,
}

/// Reads tool calls from text: a person's `parse_tool_calls(text, tools)`
/// in `models.rhai`, or the built-in [`parse`].
pub trait CallReader: Send + Sync {
    fn read(&self, text: &str, registry: &Registry) -> Result<Vec<TextCall>, String>;
}

/// The built-in reader.
pub struct BuiltinReader;

impl CallReader for BuiltinReader {
    fn read(&self, text: &str, _registry: &Registry) -> Result<Vec<TextCall>, String> {
        Ok(parse(text))
    }
}

/// Tokens some templates leave at the end of a turn; they count as blank.
const END_TOKENS: [&str; 5] = ["<|eot_id|>", "<|eom_id|>", "<|im_end|>", "</s>", "<|end|>"];

/// Where each construct begins.
const MARKERS: [&str; 5] = [
    "```",
    "<tool_call>",
    "<function=",
    "[TOOL_CALLS]",
    "<|python_tag|>",
];

/// One construct found in the text: where it is, and the calls it holds
/// (`None`: it is not a call, e.g. a code example).
struct Segment {
    start: usize,
    end: usize,
    calls: Option<Vec<TextCall>>,
}

/// Every call `text` holds in a known format, or none. The calls must be
/// the last thing in the text, one after another with only blank text
/// between them; prose may come before them.
pub fn parse(text: &str) -> Vec<TextCall> {
    let segments = segments(text);
    let Some(last) = segments.last() else {
        return bare(text).unwrap_or_default();
    };
    if last.calls.is_none() || !is_blank(sub(text, last.end..)) {
        return Vec::new();
    }
    let mut run: Vec<&Segment> = vec![last];
    for seg in segments.iter().rev().skip(1) {
        let next = run[run.len() - 1];
        if seg.calls.is_none() || !is_blank(sub(text, seg.end..next.start)) {
            break;
        }
        run.push(seg);
    }
    run.iter()
        .rev()
        .flat_map(|s| s.calls.clone().unwrap_or_default())
        .collect()
}

/// The text before the calls [`parse`] finds, trimmed: what the history
/// keeps as the answer's prose once the calls are recorded natively.
pub fn leading_prose(text: &str) -> String {
    let segments = segments(text);
    let start = match segments.last() {
        Some(last) if last.calls.is_some() => {
            let mut start = last.start;
            for pair in segments.windows(2).rev() {
                if pair[0].calls.is_some() && is_blank(sub(text, pair[0].end..pair[1].start)) {
                    start = pair[0].start;
                } else {
                    break;
                }
            }
            start
        }
        Some(_) => text.len(),
        None if bare(text).is_some() => 0,
        None => text.len(),
    };
    sub(text, ..start).trim().to_string()
}

/// Whether an answer holds something shaped like a call written as text,
/// wherever it stands: a fenced or bare JSON object of a call's shape, or
/// call markup at the start of a line (markup named inside a sentence is
/// prose). For the notice when such an answer was not run.
pub fn looks_like_call(text: &str) -> bool {
    if bare(text).is_some() {
        return true;
    }
    segments(text).iter().any(|seg| {
        let line_start = sub(text, ..seg.start)
            .rsplit('\n')
            .next()
            .is_none_or(|before| before.trim().is_empty());
        seg.calls.is_some() || (line_start && !sub(text, seg.start..).starts_with("```"))
    })
}

/// Checks recovered calls against the registry and gives each an id. Every
/// call must name a registered tool and have arguments the dispatcher
/// accepts, with no field the tool does not declare; otherwise the reason.
pub fn accept(calls: Vec<TextCall>, registry: &Registry) -> Result<Vec<ToolCall>, String> {
    static BATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let batch = BATCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut accepted = Vec::with_capacity(calls.len());
    for (i, call) in calls.into_iter().enumerate() {
        let Some(tool) = registry.get(&call.name) else {
            return Err(format!("there is no tool named `{}`", call.name));
        };
        let Value::Object(args) = &call.arguments else {
            return Err(format!(
                "the arguments of `{}` are not an object",
                call.name
            ));
        };
        if let Some(props) = tool
            .spec()
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            && let Some(unknown) = args.keys().find(|k| !props.contains_key(*k))
        {
            return Err(format!("`{}` has no parameter `{unknown}`", call.name));
        }
        let call = ToolCall {
            id: format!("call_text_{batch}_{i}"),
            name: call.name,
            arguments: Value::Object(args.clone()).to_string(),
        };
        if let Err(output) = registry.prepare(&call) {
            return Err(output.text);
        }
        accepted.push(call);
    }
    Ok(accepted)
}

/// `text[range]`; the ranges here always fall on character boundaries
/// (they come from finding ASCII markers), so "" is never the answer.
fn sub<R: std::slice::SliceIndex<str, Output = str>>(text: &str, range: R) -> &str {
    text.get(range).unwrap_or("")
}

fn is_blank(text: &str) -> bool {
    let mut rest = text.trim();
    while let Some(token) = END_TOKENS.iter().find(|t| rest.starts_with(**t)) {
        rest = sub(rest, token.len()..).trim_start();
    }
    rest.is_empty()
}

/// The constructs of `text`, in order.
fn segments(text: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut at = 0;
    // Each marker's next position, searched again only once passed, so a
    // hostile answer of many fences costs linear time, not quadratic.
    let mut next: [Option<usize>; MARKERS.len()] = MARKERS.map(|m| text.find(m));
    loop {
        for (slot, marker) in next.iter_mut().zip(MARKERS) {
            if slot.is_some_and(|i| i < at) {
                *slot = sub(text, at..).find(marker).map(|i| at + i);
            }
        }
        let Some((start, marker)) = next
            .iter()
            .zip(MARKERS)
            .filter_map(|(slot, m)| slot.map(|i| (i, m)))
            .min_by_key(|(i, _)| *i)
        else {
            break;
        };
        let body_start = start + marker.len();
        let (end, calls) = match marker {
            "```" => fenced(text, body_start),
            "<tool_call>" => {
                let (body, end) = until(text, body_start, "</tool_call>");
                (end, one_or_list(body))
            }
            "<function=" => function_tag(text, body_start),
            "[TOOL_CALLS]" => (text.len(), mistral(sub(text, body_start..))),
            _ => (text.len(), python_tag(sub(text, body_start..))),
        };
        out.push(Segment { start, end, calls });
        at = end.max(body_start);
    }
    out
}

/// The text from `from` to `close` (or the end), and where the construct
/// ends (after `close`).
fn until<'a>(text: &'a str, from: usize, close: &str) -> (&'a str, usize) {
    match sub(text, from..).find(close) {
        Some(i) => (sub(text, from..from + i), from + i + close.len()),
        None => (sub(text, from..), text.len()),
    }
}

/// A fenced block starting after its opening backticks: its info string
/// must be empty or name JSON or a call, and its body a call (or calls).
fn fenced(text: &str, from: usize) -> (usize, Option<Vec<TextCall>>) {
    let line_end = sub(text, from..)
        .find('\n')
        .map_or(text.len(), |i| from + i);
    let info = sub(text, from..line_end).trim();
    // An unclosed fence runs to the end (a cut answer).
    let (body, end) = until(text, line_end, "```");
    let is_call_fence = matches!(
        info.to_ascii_lowercase().as_str(),
        "" | "json" | "tool_call" | "tool_calls" | "tool_code" | "function_call"
    );
    if !is_call_fence {
        return (end, None);
    }
    let inner = body.trim();
    let calls = if let Some(rest) = inner.strip_prefix("<tool_call>") {
        one_or_list(until(rest, 0, "</tool_call>").0)
    } else {
        one_or_list(inner)
    };
    (end, calls)
}

/// `<function=NAME>{args}</function>`, starting after `<function=`.
fn function_tag(text: &str, from: usize) -> (usize, Option<Vec<TextCall>>) {
    let Some(close) = sub(text, from..).find('>') else {
        return (text.len(), None);
    };
    let name = sub(text, from..from + close).trim();
    let (body, end) = until(text, from + close + 1, "</function>");
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    let calls = match single_json(body.trim()) {
        Some(args @ Value::Object(_)) if valid_name => Some(vec![TextCall {
            name: name.to_string(),
            arguments: args,
        }]),
        _ => None,
    };
    (end, calls)
}

/// Mistral's `[TOOL_CALLS]`: a JSON list of calls, or `name[ARGS]{...}`
/// pairs (newer templates).
fn mistral(rest: &str) -> Option<Vec<TextCall>> {
    let rest = trim_end_tokens(rest);
    if rest.starts_with('[') || rest.starts_with('{') {
        return one_or_list(rest);
    }
    let mut calls = Vec::new();
    for part in rest.split("[TOOL_CALLS]") {
        let (name, args) = part.split_once("[ARGS]")?;
        let args = single_json(args.trim())?;
        calls.push(call_from(name.trim(), args)?);
    }
    Some(calls)
}

/// Llama 3.x's `<|python_tag|>`: one or more JSON calls, separated by `;`
/// or new lines.
fn python_tag(rest: &str) -> Option<Vec<TextCall>> {
    let mut rest = trim_end_tokens(rest);
    let mut calls = Vec::new();
    while !rest.is_empty() {
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let value = stream.next()?.ok()?;
        calls.push(call_of(&value)?);
        rest = sub(rest, stream.byte_offset()..).trim_start();
        rest = rest.strip_prefix(';').unwrap_or(rest).trim_start();
    }
    (!calls.is_empty()).then_some(calls)
}

fn trim_end_tokens(text: &str) -> &str {
    let mut rest = text.trim();
    while let Some(token) = END_TOKENS.iter().find(|t| rest.ends_with(**t)) {
        rest = sub(rest, ..rest.len() - token.len()).trim_end();
    }
    rest
}

/// The whole answer as unfenced JSON calls.
fn bare(text: &str) -> Option<Vec<TextCall>> {
    let text = trim_end_tokens(text);
    if !(text.starts_with('{') || text.starts_with('[')) {
        return None;
    }
    one_or_list(text)
}

/// Exactly one JSON value in `text` (nothing but blanks around it).
fn single_json(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok()
}

/// A call object, or a non-empty list of them.
fn one_or_list(text: &str) -> Option<Vec<TextCall>> {
    match single_json(text.trim())? {
        Value::Array(items) if !items.is_empty() => items.iter().map(call_of).collect(),
        value @ Value::Object(_) => call_of(&value).map(|c| vec![c]),
        _ => None,
    }
}

/// Keys a call object may hold besides its name and arguments.
const ALLOWED_KEYS: [&str; 5] = ["name", "arguments", "parameters", "type", "id"];

/// One call object: `{"name", "arguments" | "parameters"}`, or OpenAI's
/// `{"type": "function", "function": {...}}`. Anything else is not a call.
fn call_of(value: &Value) -> Option<TextCall> {
    let map = value.as_object()?;
    if let Some(function) = map.get("function").and_then(Value::as_object) {
        if map
            .keys()
            .any(|k| k != "function" && k != "type" && k != "id")
        {
            return None;
        }
        return call_of(&Value::Object(function.clone()));
    }
    if map.keys().any(|k| !ALLOWED_KEYS.contains(&k.as_str())) {
        return None;
    }
    if map.get("type").is_some_and(|t| t != "function") {
        return None;
    }
    let name = map.get("name")?.as_str()?;
    let args = map.get("arguments").or_else(|| map.get("parameters"))?;
    call_from(name, args.clone())
}

fn call_from(name: &str, args: Value) -> Option<TextCall> {
    // OpenAI's form carries the arguments as a JSON string.
    let arguments = match args {
        Value::String(s) => match serde_json::from_str::<Value>(&s).ok()? {
            v @ Value::Object(_) => v,
            _ => return None,
        },
        v @ Value::Object(_) => v,
        Value::Null => Value::Object(Map::new()),
        _ => return None,
    };
    (!name.trim().is_empty()).then(|| TextCall {
        name: name.trim().to_string(),
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(text: &str) -> Vec<(String, Value)> {
        parse(text)
            .into_iter()
            .map(|c| (c.name, c.arguments))
            .collect()
    }

    fn registry() -> Registry {
        Registry::with_builtins()
    }

    fn recovered(text: &str) -> Vec<ToolCall> {
        accept(parse(text), &registry()).unwrap_or_default()
    }

    #[test]
    fn fenced_json_as_qwen_writes_it() {
        let text = "```json\n{\n  \"name\": \"run_shell\",\n  \"arguments\": {\n    \"command\": \"echo hello\",\n    \"timeout\": 60\n  }\n}\n```";
        assert_eq!(
            names(text),
            [(
                "run_shell".into(),
                json!({"command": "echo hello", "timeout": 60})
            )]
        );
        let calls = recovered(text);
        assert_eq!(calls.len(), 1);
        assert!(calls[0].id.starts_with("call_text_"));
        // A list in one fence, with prose before it and padding after.
        let text = "I will list it, then read it.\n```\n[{\"name\": \"list_dir\", \"arguments\": {\"path\": \".\"}}, {\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}]\n```\n\n\n\n";
        assert_eq!(recovered(text).len(), 2);
        assert_eq!(leading_prose(text), "I will list it, then read it.");
        // Unfenced, when it is the whole answer.
        assert_eq!(
            recovered("{\"name\": \"list_dir\", \"arguments\": {\"path\": \".\"}}").len(),
            1
        );
    }

    #[test]
    fn hermes_mistral_llama_and_function_tags() {
        let hermes = "<tool_call>\n{\"name\": \"list_dir\", \"arguments\": {\"path\": \"src\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>";
        let calls = recovered(hermes);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].name, "read_file");
        let mistral =
            "[TOOL_CALLS] [{\"name\": \"run_shell\", \"arguments\": {\"command\": \"ls\"}}]</s>";
        assert_eq!(recovered(mistral)[0].name, "run_shell");
        let mistral_new = "[TOOL_CALLS]run_shell[ARGS]{\"command\": \"ls\"}";
        assert_eq!(
            names(mistral_new),
            [("run_shell".into(), json!({"command": "ls"}))]
        );
        let llama = "<|python_tag|>{\"name\": \"run_shell\", \"parameters\": {\"command\": \"ls\"}}<|eom_id|>";
        assert_eq!(recovered(llama)[0].arguments, "{\"command\":\"ls\"}");
        let llama_two = "<|python_tag|>{\"name\": \"list_dir\", \"parameters\": {\"path\": \".\"}}; {\"name\": \"run_shell\", \"parameters\": {\"command\": \"ls\"}}";
        assert_eq!(recovered(llama_two).len(), 2);
        let function = "Let me look.\n<function=read_file>{\"path\": \"README.md\"}</function>";
        let calls = recovered(function);
        assert_eq!(calls[0].name, "read_file");
        assert_eq!(leading_prose(function), "Let me look.");
        // OpenAI's shape with the arguments as a string.
        let openai = "```json\n{\"type\": \"function\", \"function\": {\"name\": \"list_dir\", \"arguments\": \"{\\\"path\\\": \\\".\\\"}\"}}\n```";
        assert_eq!(recovered(openai)[0].name, "list_dir");
        // A call in a fence around Hermes markup.
        let both = "```\n<tool_call>{\"name\": \"list_dir\", \"arguments\": {\"path\": \".\"}}</tool_call>\n```";
        assert_eq!(recovered(both).len(), 1);
    }

    /// Answers that show JSON (or call markup) without being a call.
    const PROSE: [&str; 12] = [
        // A package.json snippet: "name" is not a tool, and no arguments.
        "Your package.json should look like this:\n```json\n{\"name\": \"my-app\", \"version\": \"1.0.0\"}\n```",
        // A tool definition, not a call.
        "A script tool is declared like this:\n```json\n{\"name\": \"run_shell\", \"description\": \"Runs a command\", \"parameters\": {\"type\": \"object\"}}\n```",
        // Python code holding a dict shaped like a call.
        "```python\ncall = {\"name\": \"run_shell\", \"arguments\": {\"command\": \"ls\"}}\nprint(call)\n```",
        // An example call followed by more explanation.
        "The model would send:\n```json\n{\"name\": \"run_shell\", \"arguments\": {\"command\": \"ls\"}}\n```\nand the agent runs it and returns the output.",
        // A call the tool cannot take: its required field is missing.
        "```json\n{\"name\": \"run_shell\", \"arguments\": {\"cmd\": \"ls\"}}\n```",
        // A tool that does not exist.
        "```json\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"a@b.c\"}}\n```",
        // An API response example.
        "The server answers:\n```json\n{\"id\": \"chatcmpl-1\", \"choices\": [{\"message\": {\"content\": \"hi\"}}]}\n```",
        // A list of records.
        "```json\n[{\"name\": \"alice\", \"age\": 30}, {\"name\": \"bob\", \"age\": 25}]\n```",
        // A record of a call with its output.
        "I ran this:\n```json\n{\"name\": \"run_shell\", \"arguments\": {\"command\": \"echo hi\"}, \"output\": \"hi\"}\n```",
        // Markup named in prose.
        "Qwen writes its calls between `<tool_call>` and `</tool_call>` tags; Llama uses `<|python_tag|>`.",
        // Inline JSON in a sentence.
        "The config {\"name\": \"list_dir\", \"arguments\": {\"path\": \".\"}} is what the log shows for that step, and it worked.",
        // JSON in a shell fence.
        "```bash\ncurl -d '{\"name\": \"run_shell\", \"arguments\": {\"command\": \"ls\"}}' localhost\n```",
    ];

    #[test]
    fn prose_that_shows_json_is_not_a_call() {
        for text in PROSE {
            assert!(recovered(text).is_empty(), "recovered a call from: {text}");
        }
    }

    #[test]
    fn rejections_say_why() {
        let err = accept(parse(PROSE[4]), &registry()).unwrap_err();
        assert!(err.contains("`run_shell` has no parameter `cmd`"), "{err}");
        let err = accept(parse(PROSE[5]), &registry()).unwrap_err();
        assert!(err.contains("no tool named `send_email`"), "{err}");
        let missing = "```json\n{\"name\": \"read_file\", \"arguments\": {}}\n```";
        let err = accept(parse(missing), &registry()).unwrap_err();
        assert!(err.contains("missing required field `path`"), "{err}");
    }

    #[test]
    fn a_hostile_answer_of_many_fences_is_read_in_one_pass() {
        // 4 MB of empty fences (the most one answer holds): scanning the
        // rest of the text again for every fence would take hours here.
        let text = "```\n```\n".repeat(500_000);
        assert!(parse(&text).is_empty());
        assert!(!looks_like_call(&text));
        assert_eq!(leading_prose(&text).len(), text.trim().len());
    }

    #[test]
    fn what_looks_like_a_call() {
        assert!(looks_like_call(PROSE[4]));
        assert!(
            looks_like_call(PROSE[3]),
            "an example call still looks like one"
        );
        assert!(looks_like_call("<tool_call>{oops</tool_call>"));
        assert!(looks_like_call("Sure.\n<function=run_shell>{oops"));
        assert!(!looks_like_call("The answer is 42."));
        // Prose that shows JSON of another shape, or names the markup.
        for text in [PROSE[0], PROSE[6], PROSE[7], PROSE[9]] {
            assert!(!looks_like_call(text), "{text}");
        }
    }

    #[test]
    fn modes_read_and_print() {
        for m in ["native", "auto", "text"] {
            assert_eq!(ToolCallMode::parse(m).unwrap().as_str(), m);
        }
        assert!(
            ToolCallMode::parse("sometimes")
                .unwrap_err()
                .contains("\"auto\"")
        );
        assert!(!ToolCallMode::Native.recovers() && ToolCallMode::Auto.recovers());
    }
}

//! Assembling streamed Chat Completions chunks into one model response.
//!
//! Servers disagree on how tool calls stream, and all of these work here:
//! - OpenAI sends `id` and `name` only in a call's first delta, then
//!   argument fragments keyed by `index`.
//! - llama.cpp's server repeats `id` and `name` in every delta; the name is
//!   kept once, never concatenated.
//! - Some servers omit `index`: a new `id` (or a new `name` after arguments
//!   have started) opens a new call, anything else continues the last one.
//! - Several calls may arrive in one response, and text may come with them.
//! - A server that ignores `stream: true` and answers with one whole
//!   `message` is handled by the same code.
//!
//! Reasoning text (`reasoning_content`, or OpenRouter's `reasoning`) is kept
//! apart from the answer and never mixed into it.

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::{ToolCall, Usage};

/// A piece of streamed text, for display while the response arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Reasoning(String),
}

/// A complete model response.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelResponse {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    /// `stop`, `tool_calls`, `length`, ... or `None` when the server never
    /// said (a stream that ended early).
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
}

/// Why a chunk could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The data line was not JSON, or not shaped like a chunk.
    #[error("the server sent a chunk that is not valid JSON ({reason}): {snippet}")]
    Malformed { reason: String, snippet: String },
    /// The server reported an error inside the stream.
    #[error("the server reported an error mid-stream: {0}")]
    Server(String),
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    /// Non-streaming answers carry `message` instead of `delta`.
    #[serde(default)]
    message: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    /// Usually a string fragment; a few servers send a whole object.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

#[derive(Debug, Default)]
struct Slot {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// Accumulates chunks. Feed each SSE `data` payload to [`Assembler::push`].
#[derive(Debug, Default)]
pub struct Assembler {
    content: String,
    reasoning: String,
    slots: Vec<Slot>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the server has said the response is finished.
    pub fn finished(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Takes one chunk's JSON text and returns the text pieces it adds.
    pub fn push(&mut self, data: &str) -> Result<Vec<Piece>, ChunkError> {
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| ChunkError::Malformed {
            reason: e.to_string(),
            snippet: data.chars().take(200).collect(),
        })?;
        if let Some(error) = chunk.error {
            return Err(ChunkError::Server(error_message(&error)));
        }
        if let Some(u) = chunk.usage {
            let prompt = u.prompt_tokens.unwrap_or(0);
            let completion = u.completion_tokens.unwrap_or(0);
            self.usage = Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: u.total_tokens.unwrap_or(prompt + completion),
            });
        }
        let mut pieces = Vec::new();
        // Only the first choice matters: the agent never asks for `n > 1`.
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(delta) = choice.delta.or(choice.message) {
                self.apply(delta, &mut pieces);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(pieces)
    }

    fn apply(&mut self, delta: Delta, pieces: &mut Vec<Piece>) {
        if let Some(r) = delta
            .reasoning_content
            .or(delta.reasoning)
            .filter(|r| !r.is_empty())
        {
            self.reasoning.push_str(&r);
            pieces.push(Piece::Reasoning(r));
        }
        if let Some(t) = delta.content.filter(|t| !t.is_empty()) {
            self.content.push_str(&t);
            pieces.push(Piece::Text(t));
        }
        for call in delta.tool_calls.unwrap_or_default() {
            self.apply_call(call);
        }
    }

    fn apply_call(&mut self, call: ToolCallDelta) {
        let id = call.id.filter(|s| !s.is_empty());
        let (name, arguments) = match call.function {
            Some(f) => (f.name.filter(|s| !s.is_empty()), f.arguments),
            None => (None, None),
        };
        let slot = self.slot_for(call.index, id.as_deref(), name.as_deref());
        if let Some(id) = id
            && slot.id.is_empty()
        {
            slot.id = id;
        }
        if let Some(name) = name {
            // llama.cpp repeats the whole name in every delta: keep it once.
            if slot.name.is_empty() {
                slot.name = name;
            } else if slot.name != name {
                slot.name.push_str(&name);
            }
        }
        match arguments {
            Some(Value::String(fragment)) => slot.arguments.push_str(&fragment),
            Some(Value::Null) | None => {}
            Some(whole) => slot.arguments = whole.to_string(),
        }
    }

    fn slot_for(&mut self, index: Option<u64>, id: Option<&str>, name: Option<&str>) -> &mut Slot {
        let found = match index {
            Some(index) => self.slots.iter().position(|s| s.index == Some(index)),
            None => match (id, self.slots.last()) {
                (Some(id), _) => self.slots.iter().position(|s| s.id == id),
                // No index and no id: a name after arguments have begun
                // starts the next call; anything else continues the last.
                (None, Some(last))
                    if name.is_some() && !last.name.is_empty() && !last.arguments.is_empty() =>
                {
                    None
                }
                (None, Some(_)) => Some(self.slots.len() - 1),
                (None, None) => None,
            },
        };
        let i = match found {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    index,
                    ..Slot::default()
                });
                self.slots.len() - 1
            }
        };
        &mut self.slots[i]
    }

    /// The assembled response. Calls without an id get a generated one,
    /// unique in this process, so that every call can still be answered.
    pub fn finish(self) -> ModelResponse {
        static GENERATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let batch = GENERATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tool_calls = self
            .slots
            .into_iter()
            .enumerate()
            .filter(|(_, s)| !(s.name.is_empty() && s.arguments.is_empty()))
            .map(|(i, s)| ToolCall {
                id: if s.id.is_empty() {
                    format!("call_{batch}_{i}")
                } else {
                    s.id
                },
                name: s.name,
                arguments: s.arguments,
            })
            .collect();
        ModelResponse {
            content: self.content,
            reasoning: self.reasoning,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
        }
    }
}

/// The human-readable message of an OpenAI-style error object.
pub fn error_message(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        Value::Object(map) => match map.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => error.to_string(),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(chunks: &[Value]) -> ModelResponse {
        let mut a = Assembler::new();
        for c in chunks {
            a.push(&c.to_string()).unwrap();
        }
        a.finish()
    }

    fn delta(d: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": d}]})
    }

    fn call(index: Option<u64>, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
        let mut c = json!({"type": "function", "function": {"arguments": args}});
        if let Some(i) = index {
            c["index"] = json!(i);
        }
        if let Some(id) = id {
            c["id"] = json!(id);
        }
        if let Some(n) = name {
            c["function"]["name"] = json!(n);
        }
        delta(json!({"tool_calls": [c]}))
    }

    fn calls(r: &ModelResponse) -> Vec<(&str, &str, &str)> {
        r.tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect()
    }

    #[test]
    fn openai_shape_id_and_name_first_only() {
        let r = run(&[
            call(Some(0), Some("call_a"), Some("run_shell"), ""),
            call(Some(0), None, None, "{\"comm"),
            call(Some(0), None, None, "and\":\"ls\"}"),
            call(Some(1), Some("call_b"), Some("read_file"), "{}"),
        ]);
        assert_eq!(
            calls(&r),
            [
                ("call_a", "run_shell", "{\"command\":\"ls\"}"),
                ("call_b", "read_file", "{}")
            ]
        );
    }

    #[test]
    fn llama_cpp_shape_repeats_id_and_name() {
        let r = run(&[
            call(Some(0), Some("abc"), Some("run_shell"), "{\"command\":"),
            call(Some(0), Some("abc"), Some("run_shell"), "\"echo hello\"}"),
        ]);
        assert_eq!(
            calls(&r),
            [("abc", "run_shell", "{\"command\":\"echo hello\"}")]
        );
    }

    #[test]
    fn no_index_shape_uses_ids_to_split_calls() {
        let r = run(&[
            call(None, Some("c1"), Some("a"), "{\"x\":"),
            call(None, None, None, "1}"),
            call(None, Some("c2"), Some("b"), "{}"),
        ]);
        assert_eq!(calls(&r), [("c1", "a", "{\"x\":1}"), ("c2", "b", "{}")]);
    }

    #[test]
    fn no_index_no_id_splits_on_a_new_name() {
        let r = run(&[
            call(None, None, Some("a"), "{}"),
            call(None, None, Some("b"), "{}"),
        ]);
        let got = calls(&r);
        assert_eq!((got[0].1, got[1].1), ("a", "b"));
        assert!(
            got[0].0.starts_with("call_") && got[0].0.ends_with("_0"),
            "{got:?}"
        );
        assert_ne!(got[0].0, got[1].0);
        let again = run(&[call(None, None, Some("a"), "{}")]);
        assert_ne!(
            again.tool_calls[0].id, got[0].0,
            "generated ids are unique across responses"
        );
    }

    #[test]
    fn text_and_tool_calls_together_and_reasoning_apart() {
        let mut a = Assembler::new();
        let p = a
            .push(
                &delta(json!({"reasoning_content": "think", "content": "Let me look."}))
                    .to_string(),
            )
            .unwrap();
        assert_eq!(
            p,
            [
                Piece::Reasoning("think".into()),
                Piece::Text("Let me look.".into())
            ]
        );
        a.push(&call(Some(0), Some("x"), Some("list_dir"), "{}").to_string())
            .unwrap();
        a.push(&json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}).to_string())
            .unwrap();
        a.push(
            &json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
                .to_string(),
        )
        .unwrap();
        let r = a.finish();
        assert_eq!(r.content, "Let me look.");
        assert_eq!(r.reasoning, "think");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.usage.map(|u| u.total_tokens), Some(15));
    }

    #[test]
    fn whole_message_answer() {
        let r = run(&[
            json!({"choices": [{"message": {"content": "hi", "tool_calls": [
            {"id": "q", "type": "function", "function": {"name": "a", "arguments": "{\"k\":1}"}},
            {"id": "r", "type": "function", "function": {"name": "b", "arguments": {"k": 2}}}
        ]}, "finish_reason": "tool_calls"}]}),
        ]);
        assert_eq!(r.content, "hi");
        assert_eq!(
            calls(&r),
            [("q", "a", "{\"k\":1}"), ("r", "b", "{\"k\":2}")]
        );
    }

    #[test]
    fn malformed_and_error_chunks() {
        let mut a = Assembler::new();
        assert!(matches!(
            a.push("{not json"),
            Err(ChunkError::Malformed { .. })
        ));
        let e = a
            .push(r#"{"error": {"message": "overloaded"}}"#)
            .unwrap_err();
        assert_eq!(e, ChunkError::Server("overloaded".into()));
    }
}

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
//!
//! The assembler holds the response to its [`Limits`]: past
//! `max_response_bytes` it keeps nothing more and reports [`Assembler::cut`];
//! a call whose arguments pass `max_tool_argument_bytes` keeps counting but
//! stops storing them, and leaves the response with a short placeholder in
//! their place and an entry in [`ModelResponse::oversized`].

use serde::Deserialize;
use serde_json::Value;

use super::bounds::{CALL_COST, Limits, OversizedCall, omitted_arguments};
use super::repetition::{Cut, RepeatWatch};
use crate::protocol::{ToolCall, Usage};

/// A piece of streamed text, for display while the response arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Reasoning(String),
    /// What was shown of this answer is discarded: the request is retried
    /// from the start (the notice says why).
    Restart,
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
    /// Calls whose arguments were over the cap: their `arguments` in
    /// `tool_calls` are a placeholder, and each must be answered with
    /// [`super::bounds::argument_too_large`] instead of running.
    pub oversized: Vec<OversizedCall>,
    /// Set when the answer was cut because it had become only whitespace
    /// or one repeated line ([`super::repetition`]): what it had become.
    /// `content` holds the text before that stretch.
    pub repetition: Option<String>,
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
    /// Empty once `argument_bytes` passed the cap.
    arguments: String,
    /// The size of the arguments sent so far, kept or not.
    argument_bytes: usize,
}

/// Accumulates chunks. Feed each SSE `data` payload to [`Assembler::push`].
#[derive(Debug, Default)]
pub struct Assembler {
    content: String,
    reasoning: String,
    slots: Vec<Slot>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    limits: Limits,
    /// What the response has cost against `max_response_bytes`: text,
    /// reasoning, names, ids and arguments (also those not kept), plus
    /// [`CALL_COST`] per call.
    bytes: usize,
    /// The response passed `max_response_bytes`; later chunks are ignored.
    cut: bool,
    /// Watches the text for padding and chanting.
    watch: Option<RepeatWatch>,
    /// The answer was cut by the watch; later chunks are ignored.
    repetition: Option<Cut>,
}

impl Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// An assembler held to `limits`.
    pub fn with_limits(limits: Limits) -> Self {
        Assembler {
            limits,
            // Both checks off: no watch at all.
            watch: (limits.max_blank_run > 0 || limits.max_repeated_run > 0)
                .then(|| RepeatWatch::new(limits.max_blank_run, limits.max_repeated_run)),
            ..Self::default()
        }
    }

    /// Whether the server has said the response is finished.
    pub fn finished(&self) -> bool {
        self.finish_reason.is_some() || self.repetition.is_some()
    }

    /// Whether the answer was cut because it stopped saying anything.
    pub fn repetition_cut(&self) -> bool {
        self.repetition.is_some()
    }

    /// The caps this assembler holds the response to.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether the response passed `max_response_bytes` and was cut there.
    /// What was kept (and returned as pieces) stays; nothing after it is.
    pub fn cut(&self) -> bool {
        self.cut
    }

    /// Grows whenever the response does (text, reasoning, a call, its
    /// arguments, the finish reason): the idle timer counts only this, so
    /// empty chunks and keep-alives are not progress.
    pub fn progress(&self) -> usize {
        self.bytes + usize::from(self.finish_reason.is_some())
    }

    /// Takes one chunk's JSON text and returns the text pieces it adds.
    pub fn push(&mut self, data: &str) -> Result<Vec<Piece>, ChunkError> {
        if self.cut || self.repetition.is_some() {
            return Ok(Vec::new());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| ChunkError::Malformed {
            reason: e.to_string(),
            snippet: crate::text::first_chars(data, 200).to_string(),
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
            let r = self.admit(r);
            if !r.is_empty() {
                self.reasoning.push_str(&r);
                pieces.push(Piece::Reasoning(r));
            }
        }
        if let Some(t) = delta.content.filter(|t| !t.is_empty() && !self.cut) {
            let t = self.admit(t);
            if !t.is_empty() {
                self.content.push_str(&t);
                let cut = self.watch.as_mut().and_then(|w| w.push(&self.content));
                pieces.push(Piece::Text(t));
                if let Some(cut) = cut {
                    self.content.truncate(cut.keep);
                    self.repetition = Some(cut);
                    return;
                }
            }
        }
        for call in delta.tool_calls.unwrap_or_default() {
            if self.cut {
                break;
            }
            self.apply_call(call);
        }
    }

    /// The part of `text` that fits under the response cap (all of it,
    /// unless this is where the response is cut), counted.
    fn admit(&mut self, mut text: String) -> String {
        let room = self.limits.max_response_bytes.saturating_sub(self.bytes);
        if text.len() > room {
            let keep = crate::text::prefix(&text, room).len();
            text.truncate(keep);
            // The text came from a line up to the line cap: keep only
            // what is kept.
            text.shrink_to_fit();
            self.cut = true;
        }
        self.bytes += text.len();
        text
    }

    fn apply_call(&mut self, call: ToolCallDelta) {
        let id = call.id.filter(|s| !s.is_empty());
        let (name, arguments) = match call.function {
            Some(f) => (f.name.filter(|s| !s.is_empty()), f.arguments),
            None => (None, None),
        };
        let max_arguments = self.limits.max_tool_argument_bytes;
        let (i, opened) = self.slot_for(call.index, id.as_deref(), name.as_deref());
        let slot = &mut self.slots[i];
        let mut added = if opened { CALL_COST } else { 0 };
        if let Some(id) = id
            && slot.id.is_empty()
        {
            added += id.len();
            slot.id = id;
        }
        if let Some(name) = name {
            // llama.cpp repeats the whole name in every delta: keep it once.
            if slot.name.is_empty() {
                added += name.len();
                slot.name = name;
            } else if slot.name != name {
                added += name.len();
                slot.name.push_str(&name);
            }
        }
        match arguments {
            Some(Value::String(fragment)) => {
                added += fragment.len();
                slot.argument_bytes += fragment.len();
                if slot.argument_bytes <= max_arguments {
                    slot.arguments.push_str(&fragment);
                } else if slot.arguments.capacity() > 0 {
                    // Over the cap: what was kept goes; only the count stays.
                    slot.arguments = String::new();
                }
            }
            Some(Value::Null) | None => {}
            Some(whole) => {
                let text = whole.to_string();
                added += text.len();
                slot.argument_bytes = text.len();
                slot.arguments = if text.len() <= max_arguments {
                    text
                } else {
                    String::new()
                };
            }
        }
        // Checked after the fact: one delta may overshoot the cap, which
        // holds memory to the cap plus one chunk (itself under the line cap).
        self.bytes = self.bytes.saturating_add(added);
        if self.bytes > self.limits.max_response_bytes {
            self.cut = true;
        }
    }

    /// The slot a delta belongs to, and whether it was opened for it.
    fn slot_for(
        &mut self,
        index: Option<u64>,
        id: Option<&str>,
        name: Option<&str>,
    ) -> (usize, bool) {
        let found = match index {
            Some(index) => self.slots.iter().position(|s| s.index == Some(index)),
            None => match (id, self.slots.last()) {
                (Some(id), _) => self.slots.iter().position(|s| s.id == id),
                // No index and no id: a name after arguments have begun
                // starts the next call; anything else continues the last.
                (None, Some(last))
                    if name.is_some() && !last.name.is_empty() && last.argument_bytes > 0 =>
                {
                    None
                }
                (None, Some(_)) => Some(self.slots.len() - 1),
                (None, None) => None,
            },
        };
        match found {
            Some(i) => (i, false),
            None => {
                self.slots.push(Slot {
                    index,
                    ..Slot::default()
                });
                (self.slots.len() - 1, true)
            }
        }
    }

    /// The assembled response. Calls without an id get a generated one,
    /// unique in this process, so that every call can still be answered.
    /// Calls over the argument cap carry a placeholder and are listed in
    /// [`ModelResponse::oversized`].
    pub fn finish(self) -> ModelResponse {
        static GENERATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let batch = GENERATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cap = self.limits.max_tool_argument_bytes;
        let mut oversized = Vec::new();
        let tool_calls = self
            .slots
            .into_iter()
            .enumerate()
            .filter(|(_, s)| !(s.name.is_empty() && s.argument_bytes == 0))
            .map(|(i, s)| {
                let id = if s.id.is_empty() {
                    format!("call_{batch}_{i}")
                } else {
                    s.id
                };
                let arguments = if s.argument_bytes > cap {
                    oversized.push(OversizedCall {
                        id: id.clone(),
                        name: s.name.clone(),
                        bytes: s.argument_bytes,
                        cap,
                    });
                    omitted_arguments(s.argument_bytes, cap)
                } else {
                    s.arguments
                };
                ToolCall {
                    id,
                    name: s.name,
                    arguments,
                }
            })
            .collect();
        ModelResponse {
            content: self.content,
            reasoning: self.reasoning,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            oversized,
            repetition: self.repetition.map(|c| c.what),
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
    fn limited(max_response_bytes: usize, max_tool_argument_bytes: usize) -> Assembler {
        Assembler::with_limits(Limits {
            max_response_bytes,
            max_tool_argument_bytes,
            ..Limits::default()
        })
    }

    #[test]
    fn text_past_the_response_cap_is_cut_on_a_character_boundary() {
        let mut a = limited(10, 100);
        let p = a
            .push(&delta(json!({"content": "héllo"})).to_string())
            .unwrap();
        assert_eq!(p, [Piece::Text("héllo".into())]);
        assert!(!a.cut());
        // 6 bytes used, 4 left: "wör" is 4 bytes.
        let p = a
            .push(&delta(json!({"content": "wörld"})).to_string())
            .unwrap();
        assert_eq!(p, [Piece::Text("wör".into())]);
        assert!(a.cut());
        let mut b = limited(8, 100);
        // 8 bytes: "hé" (3) + "ll" (2) + 3 left, where "öö" (4) splits.
        b.push(&delta(json!({"content": "héll"})).to_string())
            .unwrap();
        let p = b
            .push(&delta(json!({"content": "xöö"})).to_string())
            .unwrap();
        assert_eq!(p, [Piece::Text("xö".into())]);
        assert!(a.cut());
        assert!(
            a.push(&delta(json!({"content": "more"})).to_string())
                .unwrap()
                .is_empty(),
            "nothing is kept after the cut"
        );
        assert_eq!(a.finish().content, "héllowör", "what was shown is kept");
    }

    #[test]
    fn reasoning_and_tool_arguments_count_against_the_response_cap() {
        let mut a = limited(30, 1000);
        a.push(&delta(json!({"reasoning_content": "0123456789"})).to_string())
            .unwrap();
        assert!(!a.cut());
        a.push(&call(Some(0), Some("c"), Some("t"), "{\"k\":\"0123456789\"}").to_string())
            .unwrap();
        assert!(a.cut(), "10 + a call's cost and arguments pass 30 bytes");
    }

    #[test]
    fn a_stream_of_empty_calls_still_reaches_the_cap() {
        let mut a = limited(100 * CALL_COST, 1000);
        let mut n = 0;
        while !a.cut() {
            a.push(&json!({"choices": [{"delta": {"tool_calls": [{"index": n}]}}]}).to_string())
                .unwrap();
            n += 1;
        }
        assert!(n <= 101, "{n} calls");
    }

    #[test]
    fn oversized_arguments_are_replaced_and_reported() {
        let mut a = limited(1 << 20, 100);
        a.push(&call(Some(0), Some("big"), Some("write_file"), "{\"content\":\"").to_string())
            .unwrap();
        for _ in 0..10 {
            a.push(&call(Some(0), None, None, &"x".repeat(50)).to_string())
                .unwrap();
        }
        a.push(&call(Some(0), None, None, "\"}").to_string())
            .unwrap();
        a.push(&call(Some(1), Some("small"), Some("read_file"), "{}").to_string())
            .unwrap();
        assert!(
            a.slots[0].arguments.is_empty(),
            "nothing past the cap is held"
        );
        let r = a.finish();
        let bytes = r#"{"content":""#.len() + 500 + 2;
        assert_eq!(
            r.oversized,
            [OversizedCall {
                id: "big".into(),
                name: "write_file".into(),
                bytes,
                cap: 100,
            }]
        );
        assert_eq!(r.tool_calls[0].arguments, omitted_arguments(bytes, 100));
        assert_eq!(r.tool_calls[1].arguments, "{}");
    }

    #[test]
    fn oversized_whole_object_arguments_are_replaced() {
        let big = "y".repeat(200);
        let r = {
            let mut a = limited(1 << 20, 100);
            a.push(
                &json!({"choices": [{"message": {"tool_calls": [
                {"id": "q", "type": "function", "function": {"name": "a", "arguments": {"k": big}}}
            ]}, "finish_reason": "tool_calls"}]})
                .to_string(),
            )
            .unwrap();
            a.finish()
        };
        assert_eq!(r.oversized.len(), 1);
        assert_eq!(r.oversized[0].id, "q");
        assert!(r.tool_calls[0].arguments.len() < 100);
    }

    #[test]
    fn a_name_after_an_oversized_call_still_starts_the_next_call() {
        let mut a = limited(1 << 20, 10);
        a.push(&call(None, None, Some("a"), &"z".repeat(50)).to_string())
            .unwrap();
        a.push(&call(None, None, Some("b"), "{}").to_string())
            .unwrap();
        let r = a.finish();
        let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(r.oversized.len(), 1);
    }

    #[test]
    fn only_growth_is_progress() {
        let mut a = Assembler::new();
        for empty in [
            json!({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"delta": {}}]}),
            json!({"choices": []}),
        ] {
            a.push(&empty.to_string()).unwrap();
            assert_eq!(a.progress(), 0, "{empty}");
        }
        a.push(&delta(json!({"content": "hi"})).to_string())
            .unwrap();
        let after_text = a.progress();
        assert!(after_text > 0);
        let finish = json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}).to_string();
        a.push(&finish).unwrap();
        let after_finish = a.progress();
        assert!(after_finish > after_text);
        a.push(&finish).unwrap();
        assert_eq!(a.progress(), after_finish, "a repeated finish is not news");
    }
}

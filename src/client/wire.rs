//! The request body of a Chat Completions call, built from the history.
//!
//! What the server must not see is dropped here: reasoning text (DeepSeek
//! rejects it in input), tool statuses, and argument text that is not valid
//! JSON (several servers re-parse the history's arguments through a chat
//! template and fail the whole request on bad JSON; the model already read
//! what it sent in the tool result).
//!
//! The body is written straight from the history by [`Request`]'s
//! `Serialize`, without building a JSON tree first: a long session sends
//! hundreds of kilobytes per request, and copying them into a tree of
//! small allocations took as long as writing them out. A [`WireCache`]
//! keeps each message's wire form between requests, so a request writes
//! out only the messages added since the last one.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::protocol::{Message, ToolCall};

/// Arguments sent in place of text that is not a JSON object.
const EMPTY_ARGUMENTS: &str = "{}";

/// One request body: the model, the history, the tools and extra fields.
/// It serialises to the JSON object the API expects, keys in sorted order
/// as a `serde_json::Map` would hold them; `extra` fields (temperature,
/// max_tokens...) are merged last, so they win over the fixed ones.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub model: &'a str,
    pub messages: &'a [Message],
    /// The registry's `tools` array; omitted when empty.
    pub tools: &'a Value,
    pub extra: &'a Map<String, Value>,
    /// The wire form of every message, when a [`WireCache`] has it.
    pub wired: Option<&'a [Box<RawValue>]>,
}

/// The whole request body. `tools` is the registry's `tools` array (omitted
/// when empty); `extra` fields (temperature, max_tokens...) are merged last.
pub fn request_body<'a>(
    model: &'a str,
    messages: &'a [Message],
    tools: &'a Value,
    extra: &'a Map<String, Value>,
) -> Request<'a> {
    Request {
        model,
        messages,
        tools,
        extra,
        wired: None,
    }
}

impl<'a> Request<'a> {
    /// The same request, copying the messages' wire form from `wired` (one
    /// entry per message, from [`WireCache::update`]) instead of writing it.
    pub fn with_wire(self, wired: Option<&'a [Box<RawValue>]>) -> Self {
        Request {
            wired: wired.filter(|w| w.len() == self.messages.len()),
            ..self
        }
    }

    /// Whether the body carries a `tools` field.
    pub fn has_tools(&self) -> bool {
        self.extra.contains_key("tools") || self.tools.as_array().is_some_and(|t| !t.is_empty())
    }

    /// The body as a JSON tree, for tests and inspection.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A top-level field of the body.
enum Field<'a> {
    Model,
    Messages,
    Tools,
    Stream,
    StreamOptions,
    Extra(&'a Value),
}

impl Serialize for Request<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Sorted by key, extra fields replacing fixed ones of the same name.
        let mut fields: Vec<(&str, Field)> = vec![
            ("messages", Field::Messages),
            ("model", Field::Model),
            ("stream", Field::Stream),
            ("stream_options", Field::StreamOptions),
        ];
        if self.tools.as_array().is_some_and(|t| !t.is_empty()) {
            fields.push(("tools", Field::Tools));
        }
        for (key, value) in self.extra {
            match fields.binary_search_by(|(k, _)| (*k).cmp(key.as_str())) {
                Ok(i) => fields[i].1 = Field::Extra(value),
                Err(i) => fields.insert(i, (key.as_str(), Field::Extra(value))),
            }
        }
        let mut map = serializer.serialize_map(Some(fields.len()))?;
        for (key, field) in fields {
            match field {
                Field::Model => map.serialize_entry(key, self.model)?,
                Field::Messages => match self.wired {
                    Some(wired) => map.serialize_entry(key, wired)?,
                    None => map.serialize_entry(key, &Messages(self.messages))?,
                },
                Field::Tools => map.serialize_entry(key, self.tools)?,
                Field::Stream => map.serialize_entry(key, &true)?,
                Field::StreamOptions => map.serialize_entry(key, &IncludeUsage)?,
                Field::Extra(value) => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

/// Each message's wire form, kept between the requests of a session. The
/// history only grows at the end, except where the agent changes or drops
/// messages; it says so with [`WireCache::forget_from`]. Debug builds check
/// every kept entry against a freshly written one, so a change the cache
/// was not told about fails the tests instead of reaching a server.
#[derive(Debug, Default)]
pub struct WireCache {
    entries: Vec<Box<RawValue>>,
}

impl WireCache {
    /// Forgets the entries of the messages from `index` on: they changed
    /// or are gone.
    pub fn forget_from(&mut self, index: usize) {
        self.entries.truncate(index);
    }

    /// Writes the entries of the messages it does not have yet (those past
    /// the ones it kept) and returns one entry per message; `None` if a
    /// message could not be written, and the caller writes them all.
    pub fn update(&mut self, messages: &[Message]) -> Option<&[Box<RawValue>]> {
        self.entries.truncate(messages.len());
        for message in &messages[self.entries.len()..] {
            match serde_json::value::to_raw_value(&WireMessage(message)) {
                Ok(raw) => self.entries.push(raw),
                Err(_) => {
                    self.entries.clear();
                    return None;
                }
            }
        }
        debug_assert!(
            self.entries.iter().zip(messages).all(|(kept, message)| {
                serde_json::value::to_raw_value(&WireMessage(message))
                    .is_ok_and(|fresh| fresh.get() == kept.get())
            }),
            "a history message changed without WireCache::forget_from"
        );
        Some(&self.entries)
    }
}

/// `{"include_usage": true}`: the last chunk carries the token counts.
struct IncludeUsage;

impl Serialize for IncludeUsage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("include_usage", &true)?;
        map.end()
    }
}

struct Messages<'a>(&'a [Message]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for message in self.0 {
            seq.serialize_element(&WireMessage(message))?;
        }
        seq.end()
    }
}

/// One history message in its wire form (keys sorted).
struct WireMessage<'a>(&'a Message);

impl Serialize for WireMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Message::System { content } => {
                let mut m = serializer.serialize_map(Some(2))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", "system")?;
                m.end()
            }
            Message::User { content, .. } => {
                let mut m = serializer.serialize_map(Some(2))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", "user")?;
                m.end()
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let with_calls = !tool_calls.is_empty();
                let mut m = serializer.serialize_map(Some(2 + usize::from(with_calls)))?;
                m.serialize_entry("content", content.as_deref().unwrap_or(""))?;
                m.serialize_entry("role", "assistant")?;
                if with_calls {
                    m.serialize_entry("tool_calls", &WireCalls(tool_calls))?;
                }
                m.end()
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                let mut m = serializer.serialize_map(Some(3))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", "tool")?;
                m.serialize_entry("tool_call_id", tool_call_id)?;
                m.end()
            }
        }
    }
}

struct WireCalls<'a>(&'a [ToolCall]);

impl Serialize for WireCalls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for call in self.0 {
            seq.serialize_element(&WireCall(call))?;
        }
        seq.end()
    }
}

/// `{"function": {"arguments", "name"}, "id", "type": "function"}`.
struct WireCall<'a>(&'a ToolCall);

impl Serialize for WireCall<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(Some(3))?;
        m.serialize_entry("function", &WireFunction(self.0))?;
        m.serialize_entry("id", &self.0.id)?;
        m.serialize_entry("type", "function")?;
        m.end()
    }
}

struct WireFunction<'a>(&'a ToolCall);

impl Serialize for WireFunction<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let arguments = if is_json_object(&self.0.arguments) {
            self.0.arguments.as_str()
        } else {
            EMPTY_ARGUMENTS
        };
        let mut m = serializer.serialize_map(Some(2))?;
        m.serialize_entry("arguments", arguments)?;
        m.serialize_entry("name", &self.0.name)?;
        m.end()
    }
}

/// Whether `text` parses as a JSON object, decided exactly as parsing it
/// into a `serde_json::Value` would (the same parser, so the same errors
/// and nesting limit) without building the value.
pub fn is_json_object(text: &str) -> bool {
    // After JSON whitespace an object starts with `{`; anything else is
    // not an object even when it parses.
    let first = text
        .bytes()
        .find(|b| !matches!(b, b' ' | b'\n' | b'\t' | b'\r'));
    first == Some(b'{') && serde_json::from_str::<AnyJson>(text).is_ok()
}

/// Any JSON value, parsed and dropped as it is read.
struct AnyJson;

impl<'de> Deserialize<'de> for AnyJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // `deserialize_any`, as `Value` does: numbers are converted (and
        // may be out of range), strings unescaped and checked.
        deserializer.deserialize_any(AnyJsonVisitor)
    }
}

struct AnyJsonVisitor;

impl<'de> Visitor<'de> for AnyJsonVisitor {
    type Value = AnyJson;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_unit<E: de::Error>(self) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_none<E: de::Error>(self) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<AnyJson, D::Error> {
        AnyJson::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyJson, A::Error> {
        while seq.next_element::<AnyJson>()?.is_some() {}
        Ok(AnyJson)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyJson, A::Error> {
        while map.next_entry::<AnyJson, AnyJson>()?.is_some() {}
        Ok(AnyJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ToolStatus, UserSource};
    use serde_json::json;

    #[test]
    fn reasoning_and_status_stay_home_and_bad_arguments_are_replaced() {
        let history = vec![
            Message::System {
                content: "sys".into(),
            },
            Message::user("hi"),
            Message::Assistant {
                content: None,
                tool_calls: vec![
                    ToolCall {
                        id: "a".into(),
                        name: "x".into(),
                        arguments: "{\"k\":1}".into(),
                    },
                    ToolCall {
                        id: "b".into(),
                        name: "y".into(),
                        arguments: "{broken".into(),
                    },
                ],
                reasoning: Some("secret thoughts".into()),
            },
            Message::Tool {
                tool_call_id: "a".into(),
                name: "x".into(),
                content: "out".into(),
                status: ToolStatus::Failed,
                exit_code: Some(1),
            },
        ];
        let body = request_body("m", &history, &json!([]), &Map::new()).to_value();
        let text = body.to_string();
        assert!(!text.contains("secret thoughts"));
        assert!(!text.contains("failed"));
        assert!(body.get("tools").is_none());
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"k\":1}"
        );
        assert_eq!(
            body["messages"][2]["tool_calls"][1]["function"]["arguments"],
            "{}"
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "tool_call_id": "a", "content": "out"})
        );
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    /// The body as it was built before `Request` (a JSON tree, then
    /// `to_vec`): the reference the direct serialisation must match byte
    /// for byte.
    fn tree_body(
        model: &str,
        messages: &[Message],
        tools: &Value,
        extra: &Map<String, Value>,
    ) -> Vec<u8> {
        let wire = |message: &Message| match message {
            Message::System { content } => json!({"role": "system", "content": content}),
            Message::User { content, .. } => json!({"role": "user", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut m = Map::new();
                m.insert("role".into(), json!("assistant"));
                m.insert("content".into(), json!(content.as_deref().unwrap_or("")));
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| {
                            let arguments = if serde_json::from_str::<Value>(&c.arguments)
                                .is_ok_and(|v| v.is_object())
                            {
                                c.arguments.clone()
                            } else {
                                "{}".to_string()
                            };
                            json!({"id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": arguments}})
                        })
                        .collect();
                    m.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(m)
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
        };
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert(
            "messages".into(),
            Value::Array(messages.iter().map(wire).collect()),
        );
        if tools.as_array().is_some_and(|t| !t.is_empty()) {
            body.insert("tools".into(), tools.clone());
        }
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
        serde_json::to_vec(&Value::Object(body)).unwrap()
    }

    fn call(id: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "run_shell".into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn the_body_is_byte_for_byte_the_json_tree_it_replaced() {
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        let arguments = [
            r#"{"command":"echo hi"}"#,
            "  {\"k\": [1, 2.5, -3e2, true, null, {\"x\": \"y\"}]}\n",
            "{broken",
            "[1, 2]",
            "\"text\"",
            "",
            "{} trailing",
            r#"{"big": 1e400}"#,
            r#"{"lone": "\ud800"}"#,
            r#"{"pair": "\ud83d\ude00", "esc": "\n\t\"\\\/"}"#,
            r#"{"dup": 1, "dup": 2}"#,
            "\u{feff}{}",
            &deep,
        ];
        let mut history = vec![
            Message::System {
                content: "sys \"quoted\" \u{1}\u{7f} é 世界 😀".into(),
            },
            Message::user("task\nwith\tcontrol </script>"),
            Message::Assistant {
                content: Some("thinking aloud".into()),
                tool_calls: arguments
                    .iter()
                    .enumerate()
                    .map(|(i, a)| call(&format!("c{i}"), a))
                    .collect(),
                reasoning: Some("hidden".into()),
            },
        ];
        for i in 0..arguments.len() {
            history.push(Message::Tool {
                tool_call_id: format!("c{i}"),
                name: "run_shell".into(),
                content: format!("output {i}\n\u{0}\u{1b}[31m"),
                status: ToolStatus::Failed,
                exit_code: Some(2),
            });
        }
        history.push(Message::User {
            content: "a note".into(),
            source: UserSource::Watchdog,
        });
        history.push(Message::Assistant {
            content: None,
            tool_calls: Vec::new(),
            reasoning: None,
        });
        let tools = json!([{"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}}]);
        let mut extra = Map::new();
        extra.insert("temperature".into(), json!(0.2));
        extra.insert("stream".into(), json!(false));
        extra.insert("a_first".into(), json!({"nested": [1, "two"]}));
        extra.insert("zz_last".into(), Value::Null);
        let empty = json!([]);
        for (tools, extra) in [
            (&tools, &extra),
            (&empty, &extra),
            (&tools, &Map::new()),
            (&empty, &Map::new()),
            (&Value::Null, &Map::new()),
        ] {
            let body = request_body("m\"odel", &history, tools, extra);
            assert_eq!(
                String::from_utf8(serde_json::to_vec(&body).unwrap()).unwrap(),
                String::from_utf8(tree_body("m\"odel", &history, tools, extra)).unwrap()
            );
        }
        let mut tools_in_extra = Map::new();
        tools_in_extra.insert("tools".into(), tools.clone());
        let body = request_body("m", &history, &empty, &tools_in_extra);
        assert!(body.has_tools());
        assert_eq!(
            serde_json::to_vec(&body).unwrap(),
            tree_body("m", &history, &empty, &tools_in_extra)
        );
        assert!(!request_body("m", &history, &empty, &Map::new()).has_tools());
    }

    #[test]
    fn a_cached_wire_form_gives_the_same_body() {
        let mut history = vec![
            Message::System {
                content: "sys".into(),
            },
            Message::user("task"),
            Message::Assistant {
                content: None,
                tool_calls: vec![call("c1", r#"{"command":"ls"}"#), call("c2", "{bad")],
                reasoning: None,
            },
        ];
        let (tools, extra) = (json!([]), Map::new());
        let mut cache = WireCache::default();
        for round in 0..3 {
            history.push(Message::Tool {
                tool_call_id: "c1".into(),
                name: "run_shell".into(),
                content: format!("round {round} \u{1b}[0m \"é\""),
                status: ToolStatus::Ok,
                exit_code: Some(0),
            });
            let plain = serde_json::to_vec(&request_body("m", &history, &tools, &extra)).unwrap();
            let wired = cache.update(&history);
            assert_eq!(wired.map(<[_]>::len), Some(history.len()));
            let cached = request_body("m", &history, &tools, &extra).with_wire(wired);
            assert!(cached.wired.is_some());
            assert_eq!(serde_json::to_vec(&cached).unwrap(), plain);
        }
        // A changed message is written again once the cache is told.
        if let Some(Message::Tool { content, .. }) = history.last_mut() {
            content.push_str(" and a note");
        }
        cache.forget_from(history.len() - 1);
        let wired = cache.update(&history);
        let body = request_body("m", &history, &tools, &extra).with_wire(wired);
        assert!(
            String::from_utf8(serde_json::to_vec(&body).unwrap())
                .unwrap()
                .contains("and a note")
        );
        // A cache of another length is not used.
        let short = request_body("m", &history[..2], &tools, &extra).with_wire(wired);
        assert!(short.wired.is_none());
    }

    #[test]
    fn is_json_object_agrees_with_parsing_a_value() {
        for text in [
            "{}",
            " \t\r\n{\"a\": 1} ",
            "{\"a\": 1e400}",
            "{\"a\": 1e308}",
            "{\"a\": -0}",
            "{\"a\": 18446744073709551616}",
            "{\"a\": \"\\ud800\"}",
            "{\"a\": \"\\udc00\\ud800\"}",
            "{\"a\": \"\\x\"}",
            "{\"a\": \"\u{1}\"}",
            "{\"a\": [1,]}",
            "{\"a\" 1}",
            "{1: 2}",
            "[]",
            "null",
            "\u{a0}{}",
            "{}{}",
        ] {
            assert_eq!(
                is_json_object(text),
                serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()),
                "{text:?}"
            );
        }
    }
}

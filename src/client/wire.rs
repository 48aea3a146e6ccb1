//! The request body of a Chat Completions call, built from the history.
//!
//! What the server must not see is dropped here: reasoning text (DeepSeek
//! rejects it in input), tool statuses, and argument text that is not valid
//! JSON (several servers re-parse the history's arguments through a chat
//! template and fail the whole request on bad JSON; the model already read
//! what it sent in the tool result).

use serde_json::{Map, Value, json};

use crate::protocol::Message;

/// Converts one history message to its wire form.
pub fn message_to_wire(message: &Message) -> Value {
    match message {
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
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": arguments},
                        })
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
    }
}

/// The whole request body. `tools` is the registry's `tools` array (omitted
/// when empty); `extra` fields (temperature, max_tokens...) are merged last.
pub fn request_body(
    model: &str,
    messages: &[Message],
    tools: &Value,
    extra: &Map<String, Value>,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(messages.iter().map(message_to_wire).collect()),
    );
    if tools.as_array().is_some_and(|t| !t.is_empty()) {
        body.insert("tools".into(), tools.clone());
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    for (k, v) in extra {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ToolCall, ToolStatus};

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
        let body = request_body("m", &history, &json!([]), &Map::new());
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
}

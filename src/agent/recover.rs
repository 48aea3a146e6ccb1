//! Tool calls the model wrote as text: recovered into native calls when the
//! profile says so (`tool_calls: "auto"` / `"text"`), and a notice to the
//! person when a final answer looks like a call that did not run.
//!
//! A recovered call is recorded in the history as a native call (the
//! assistant message keeps the prose before it and carries `tool_calls`;
//! the result follows as a `tool` message), the form OpenAI-compatible
//! servers accept on the next request, so it goes through the loop, the
//! policy and the watchdog like any other call. With `tool_calls: "text"`
//! the server may know nothing of tools, so requests carry the history as
//! text instead ([`as_text_history`]): each call as the fenced JSON the
//! model was asked to write, each result as a message marked as the
//! agent's.

use super::Agent;
use super::messages::{recovered_calls, unexecuted_call};
use crate::client::ModelResponse;
use crate::protocol::{Event, EventSink, Message, UserSource};
use crate::tools::text_calls::{self, ToolCallMode};

impl Agent {
    /// Recovers calls from an answer without native ones, or tells the
    /// person when its text looks like a call that will not run. Called
    /// before the answer enters the history, so the history (and the
    /// transcript) only ever hold the recorded form.
    pub(super) async fn recover_calls(
        &mut self,
        mut response: ModelResponse,
        sink: &dyn EventSink,
    ) -> ModelResponse {
        if !response.tool_calls.is_empty() || response.content.trim().is_empty() {
            return response;
        }
        let reason = if self.tool_calls.recovers() {
            let reader = self.call_reader.clone();
            let registry = self.registry.clone();
            let text = response.content.clone();
            let read = tokio::task::spawn_blocking(move || {
                reader
                    .read(&text, &registry)
                    .and_then(|calls| text_calls::accept(calls, &registry))
            })
            .await
            .unwrap_or_else(|e| Err(format!("the reader failed: {e}")));
            match read {
                Ok(calls) if !calls.is_empty() => {
                    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
                    sink.emit(Event::Notice(recovered_calls(&names)));
                    response.content = text_calls::leading_prose(&response.content);
                    response.tool_calls = calls;
                    return response;
                }
                Ok(_) => None,
                Err(reason) => Some(reason),
            }
        } else {
            None
        };
        if text_calls::looks_like_call(&response.content) {
            sink.emit(Event::Notice(unexecuted_call(
                self.tool_calls,
                reason.as_deref(),
            )));
        }
        response
    }

    /// How the model makes tool calls, and what reads calls from text.
    pub fn set_tool_calls(
        &mut self,
        mode: ToolCallMode,
        reader: std::sync::Arc<dyn text_calls::CallReader>,
    ) {
        self.tool_calls = mode;
        self.call_reader = reader;
    }
}

/// How a tool result starts when the history is sent as text.
pub const TEXT_RESULT_HEAD: &str = "[agent: the result of your";

/// The history as a server without tool support reads it: calls become
/// fenced JSON in the assistant's text, results become messages marked as
/// the agent's (the results of one response in one message).
pub fn as_text_history(history: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    for m in history {
        match m {
            Message::Assistant {
                content,
                tool_calls,
                ..
            } if !tool_calls.is_empty() => {
                let mut text = content.clone().unwrap_or_default();
                for call in tool_calls {
                    let arguments = serde_json::from_str::<serde_json::Value>(&call.arguments)
                        .unwrap_or(serde_json::Value::Null);
                    let json = serde_json::json!({"name": call.name, "arguments": arguments});
                    text.push_str(&format!("\n```json\n{json}\n```"));
                }
                out.push(Message::Assistant {
                    content: Some(text.trim_start().to_string()),
                    tool_calls: Vec::new(),
                    reasoning: None,
                });
            }
            Message::Tool { name, content, .. } => {
                let note = format!(
                    "{TEXT_RESULT_HEAD} {name} call — not a message from the user]\n{content}"
                );
                match out.last_mut() {
                    Some(Message::User {
                        content: previous,
                        source: UserSource::Watchdog,
                    }) if previous.starts_with(TEXT_RESULT_HEAD) => {
                        previous.push_str("\n\n");
                        previous.push_str(&note);
                    }
                    _ => out.push(Message::User {
                        content: note,
                        source: UserSource::Watchdog,
                    }),
                }
            }
            other => out.push(other.clone()),
        }
    }
    out
}

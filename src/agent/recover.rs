//! Tool calls the model wrote as text: recovered into native calls when the
//! profile says so (`tool_calls: "auto"` / `"text"`), and a notice to the
//! person when a final answer looks like a call that did not run.
//!
//! A recovered call is recorded in the history as a native call (the
//! assistant message keeps the prose before it and carries `tool_calls`;
//! the result follows as a `tool` message), the form OpenAI-compatible
//! servers accept on the next request, so it goes through the loop, the
//! policy and the watchdog like any other call.

use super::Agent;
use super::messages::{recovered_calls, unexecuted_call};
use crate::client::ModelResponse;
use crate::protocol::{Event, EventSink};
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

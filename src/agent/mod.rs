//! The turn loop: the model decides when a turn ends.
//!
//! One turn starts with the person's message. The loop asks the model; if
//! the answer carries tool calls, it runs them in order, appends exactly one
//! `tool` message per call (also when the call fails or the turn is
//! interrupted), and asks again. An answer without tool calls ends the turn.
//! The loop talks to the UI only through [`Event`]s.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::client::{ApiError, ChatClient, Piece, wire};
use crate::protocol::{ErrorKind, Event, EventSink, Message, ToolOutput, Usage};
use crate::runtime::Runtime;
use crate::tools::{Registry, ToolContext, messages};

/// How a turn ended, when it did not fail.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnOutcome {
    /// The model answered without asking for tools.
    Done {
        text: String,
        /// `length` when the answer was cut off at the token limit.
        finish_reason: Option<String>,
    },
    /// The watchdog stopped the turn and handed control back.
    Stopped { reason: String },
    /// The person interrupted the turn.
    Cancelled,
}

/// A turn that could not finish.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The model API failed (after any retries).
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Text shown when the model's answer hit the token limit.
pub const LENGTH_NOTICE: &str = "the model's answer was cut off at its output token limit (finish_reason: length); the answer may be incomplete";

/// How long an interrupted tool may take to wind down (kill its process
/// group, collect partial output) before the loop answers for it.
pub const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// The agent: a client, tools, a runtime, and the conversation so far.
pub struct Agent {
    client: ChatClient,
    registry: Arc<Registry>,
    runtime: Arc<Runtime>,
    history: Vec<Message>,
    /// Extra request fields merged into every request body.
    extra_body: Map<String, Value>,
    usage: Usage,
}

impl Agent {
    pub fn new(
        client: ChatClient,
        registry: Arc<Registry>,
        runtime: Arc<Runtime>,
        system_prompt: String,
    ) -> Self {
        Agent {
            client,
            registry,
            runtime,
            history: vec![Message::System {
                content: system_prompt,
            }],
            extra_body: Map::new(),
            usage: Usage::default(),
        }
    }

    pub fn history(&self) -> &[Message] {
        &self.history
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Token usage summed over every response so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Runs one turn for `input` until the model stops asking for tools,
    /// the watchdog stops it, or `cancel` fires.
    pub async fn run_turn(
        &mut self,
        input: &str,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        self.history.push(Message::user(input));
        loop {
            if cancel.is_cancelled() {
                return Ok(TurnOutcome::Cancelled);
            }
            let body = wire::request_body(
                &self.client.config().model,
                &self.history,
                &self.registry.to_openai_json(),
                &self.extra_body,
            );
            let mut partial = String::new();
            let result = {
                let mut on_piece = |piece: Piece| match piece {
                    Piece::Text(t) => {
                        partial.push_str(&t);
                        sink.emit(Event::TextDelta(t));
                    }
                    Piece::Reasoning(r) => sink.emit(Event::ReasoningDelta(r)),
                };
                let mut on_notice = |n: String| sink.emit(Event::Notice(n));
                self.client
                    .complete(&body, &mut on_piece, &mut on_notice, cancel)
                    .await
            };
            let response = match result {
                Ok(response) => response,
                Err(ApiError::Cancelled) => {
                    // Keep what was already shown, so nothing is lost.
                    if !partial.is_empty() {
                        self.history.push(Message::Assistant {
                            content: Some(partial),
                            tool_calls: Vec::new(),
                            reasoning: None,
                        });
                    }
                    return Ok(TurnOutcome::Cancelled);
                }
                Err(e) => return Err(e.into()),
            };
            if let Some(usage) = response.usage {
                self.usage.add(usage);
                sink.emit(Event::Usage(usage));
            }
            let has_tool_calls = !response.tool_calls.is_empty();
            sink.emit(Event::AssistantMessage {
                text: response.content.clone(),
                has_tool_calls,
            });
            if response.finish_reason.as_deref() == Some("length") {
                sink.emit(Event::Notice(LENGTH_NOTICE.to_string()));
            }
            self.history.push(Message::Assistant {
                content: (!response.content.is_empty()).then(|| response.content.clone()),
                tool_calls: response.tool_calls.clone(),
                reasoning: (!response.reasoning.is_empty()).then(|| response.reasoning.clone()),
            });
            if !has_tool_calls {
                return Ok(TurnOutcome::Done {
                    text: response.content,
                    finish_reason: response.finish_reason,
                });
            }
            for call in &response.tool_calls {
                let output = if cancel.is_cancelled() {
                    ToolOutput::failed(ErrorKind::Cancelled, messages::CANCELLED)
                } else {
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                    sink.emit(Event::ToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        input,
                    });
                    let ctx = ToolContext {
                        runtime: self.runtime.clone(),
                        cancel: cancel.clone(),
                        call_id: call.id.clone(),
                    };
                    let dispatch = self.registry.dispatch(call, ctx);
                    tokio::pin!(dispatch);
                    tokio::select! {
                        biased;
                        output = &mut dispatch => output,
                        () = cancel.cancelled() => {
                            // The tool sees the same token; give it a moment to
                            // stop on its own and return its partial output.
                            tokio::time::timeout(CANCEL_GRACE, &mut dispatch)
                                .await
                                .unwrap_or_else(|_| ToolOutput::failed(ErrorKind::Cancelled, messages::CANCELLED))
                        }
                    }
                };
                sink.emit(Event::ToolResult {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    output: output.clone(),
                });
                self.history.push(Message::Tool {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: output.text,
                    status: output.status,
                    exit_code: output.exit_code,
                });
            }
            if cancel.is_cancelled() {
                return Ok(TurnOutcome::Cancelled);
            }
        }
    }
}

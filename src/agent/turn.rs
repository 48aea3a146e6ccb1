//! A user turn: ask the model, run its calls, let the judge rule, repeat
//! until the model answers without tools, the judge stops the turn, or the
//! person interrupts. Also the one request (`request`), compaction before
//! it when the context is full, and the tool-less summary turn.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::messages::{LENGTH_NOTICE, TOOLS_OFF};
use super::{Agent, TurnError, TurnOutcome, context};
use crate::client::{ApiError, ModelResponse, Piece, RequestCtx, wire};
use crate::protocol::{Event, EventSink, Message, ToolStatus, UserSource};
use crate::tools::text_calls::ToolCallMode;
use crate::watchdog::settings::NotePlacement;
use crate::watchdog::{NOTE_REQUEST_CHARS, NOTE_RESULT_CHARS, Verdict, summary_turn_prompt};

impl Agent {
    /// Runs one turn for `input` until the model stops asking for tools,
    /// the watchdog stops it, or `cancel` fires.
    pub async fn run_turn(
        &mut self,
        input: &str,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        let mark = self.mark_next_message();
        self.push(Message::user(input));
        self.requests_this_turn = 0;
        let user = input.to_string();
        self.on_judge(move |j| {
            j.begin_user_turn(&user);
            if let Some(cp) = j.checkpoints_mut() {
                cp.mark_message(mark);
            }
        })
        .await;
        let outcome = self.drive(sink, cancel).await;
        self.flush_notices(sink);
        self.sync_transcript();
        outcome
    }

    /// Continues after the watchdog stopped a turn, with a fresh budget.
    pub async fn continue_turn(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        if let Some(j) = self.judge.as_mut() {
            j.resume();
        }
        let outcome = self.drive(sink, cancel).await;
        self.flush_notices(sink);
        self.sync_transcript();
        outcome
    }

    pub(super) fn flush_notices(&mut self, sink: &dyn EventSink) {
        for n in self.notices.drain(..) {
            sink.emit(Event::Notice(n));
        }
    }

    /// Makes the transcript durable; called at the end of every turn.
    fn sync_transcript(&mut self) {
        if let Some(t) = &self.transcript {
            let _ = t.sync();
        }
    }

    async fn drive(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        loop {
            if cancel.is_cancelled() {
                return Ok(TurnOutcome::Cancelled);
            }
            let Some(response) = self.ask(sink, cancel, true).await? else {
                return Ok(TurnOutcome::Cancelled);
            };
            let calls = response.tool_calls.clone();
            let records = if calls.is_empty() {
                Vec::new()
            } else {
                self.run_calls(&calls, &response.oversized, sink, cancel)
                    .await
            };
            if cancel.is_cancelled() {
                return Ok(TurnOutcome::Cancelled);
            }
            let text = response.content.clone();
            let runtime = self.runtime.clone();
            let verdict = self
                .on_judge(move |j| j.end_turn(&text, records, &|line| runtime.redact(line)))
                .await;
            // A text-only turn is the answer, unless the watchdog caught it
            // announcing: then the repair (or the stop) goes on the loop.
            let caught = matches!(verdict, Some(Verdict::Repair { .. } | Verdict::Stop { .. }));
            if calls.is_empty() && !response.content.trim().is_empty() && !caught {
                return Ok(TurnOutcome::Done {
                    text: response.content,
                    finish_reason: response.finish_reason,
                });
            }
            // Tool calls, or an empty answer (which ends nothing: the
            // watchdog decides).
            let Some(verdict) = verdict else {
                // Without a judge nothing can rule on an empty answer.
                if calls.is_empty() {
                    return Ok(TurnOutcome::Done {
                        text: response.content,
                        finish_reason: response.finish_reason,
                    });
                }
                continue;
            };
            if let Some(outcome) = self.apply_verdict(&verdict, sink) {
                if let (TurnOutcome::Stopped { reason, .. }, Verdict::Stop { summarise, .. }) =
                    (&outcome, &verdict)
                    && *summarise
                {
                    let summary = self.summarise(sink, cancel).await?;
                    return Ok(TurnOutcome::Stopped {
                        reason: reason.clone(),
                        summary,
                    });
                }
                return Ok(outcome);
            }
        }
    }

    /// Acts on a verdict. Returns an outcome when the turn must end.
    fn apply_verdict(&mut self, verdict: &Verdict, sink: &dyn EventSink) -> Option<TurnOutcome> {
        let budget = verdict.budget();
        sink.emit(Event::Budget {
            used: budget.used,
            limit: budget.limit,
        });
        let announce = |kind: &str| {
            sink.emit(Event::Watchdog {
                verdict: kind.into(),
                reason: verdict.reason().to_string(),
            })
        };
        match verdict {
            Verdict::Continue { .. } => None,
            Verdict::Notice { text, .. } => {
                self.deliver_note(text, false);
                announce("notice");
                None
            }
            Verdict::Repair { text, .. } => {
                announce("repair");
                self.deliver_note(text, true);
                None
            }
            Verdict::Stop { reason, .. } => {
                announce("stop");
                Some(TurnOutcome::Stopped {
                    reason: reason.clone(),
                    summary: None,
                })
            }
        }
    }

    /// A note from the watchdog, where `note_placement` in watchdog.rhai
    /// puts it: appended to the last tool result (the model reads it with
    /// that output, and it never poses as the person), or as a message of
    /// its own marked as the agent's, also when there is no tool result.
    /// Under `"auto"`, a budget notice goes with the tool result and a
    /// repair (`repair`) is a message of its own for native tool calls, as
    /// before the setting existed; both go with the tool result for models
    /// whose calls are read from text.
    fn deliver_note(&mut self, text: &str, repair: bool) {
        let placement = self
            .judge
            .as_ref()
            .map(|j| j.settings().note_placement)
            .unwrap_or_default();
        let placement = match placement {
            NotePlacement::Auto if repair && self.tool_calls == ToolCallMode::Native => {
                NotePlacement::Message
            }
            NotePlacement::Auto => NotePlacement::ToolResult,
            chosen => chosen,
        };
        if placement == NotePlacement::ToolResult
            && let Some(Message::Tool { content, .. }) = self.history.last_mut()
        {
            content.push_str("\n\n");
            content.push_str(text);
            self.wire.forget_from(self.history.len() - 1);
            return;
        }
        self.push(Message::User {
            content: text.to_string(),
            source: UserSource::Watchdog,
        });
    }

    /// The person's last request and the last successful call's result,
    /// for the summary turn to restate.
    fn request_and_last_result(&self) -> (String, String) {
        let request =
            crate::text::shorten(self.last_request().unwrap_or_default(), NOTE_REQUEST_CHARS);
        let last = self
            .history
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Tool {
                    name,
                    content,
                    status: ToolStatus::Ok,
                    ..
                } => Some(format!(
                    "{name}: {}",
                    crate::text::shorten(content.trim(), NOTE_RESULT_CHARS)
                )),
                _ => None,
            })
            .unwrap_or_default();
        (request, last)
    }

    /// The last, tool-less turn when the budget ran out.
    async fn summarise(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, TurnError> {
        let (request, last) = self.request_and_last_result();
        self.push(Message::User {
            content: summary_turn_prompt(&request, &last),
            source: UserSource::Watchdog,
        });
        let response = self.ask(sink, cancel, false).await?;
        // A model that asks for tools anyway gets each call answered.
        if let Some(r) = &response {
            for call in &r.tool_calls {
                self.push(Message::Tool {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: TOOLS_OFF.into(),
                    status: ToolStatus::Failed,
                    exit_code: None,
                });
            }
        }
        Ok(response.map(|r| r.content).filter(|t| !t.trim().is_empty()))
    }

    /// One request; returns `None` when cancelled. Partial text already
    /// shown is kept in the history, so nothing is lost.
    async fn ask(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
        with_tools: bool,
    ) -> Result<Option<ModelResponse>, TurnError> {
        // Compact before a request that would pass the threshold.
        if let Some(window) = self.context_window
            && self.context_tokens() as f64 > window as f64 * self.compaction.compact_at
        {
            self.compact_and_report(sink, cancel).await?;
        }
        let mut compacted_for_overflow = false;
        loop {
            match self.request(sink, cancel, with_tools).await {
                // A server's "context too long" gets one compaction and a retry.
                Err(TurnError::Api(ApiError::Status { status, message }))
                    if !compacted_for_overflow
                        && (status == 400 || status == 413)
                        && context::is_context_overflow(&message) =>
                {
                    compacted_for_overflow = true;
                    sink.emit(Event::Notice(format!(
                        "the server says the conversation is too long for the model ({message}); compacting and retrying"
                    )));
                    if self.compact_and_report(sink, cancel).await?.is_none() {
                        return Err(TurnError::Api(ApiError::Status { status, message }));
                    }
                }
                other => return other,
            }
        }
    }

    /// The profile's extra request fields for the next request.
    async fn request_options(&mut self, sink: &dyn EventSink) -> serde_json::Map<String, Value> {
        let Some(options) = self.options.clone() else {
            return serde_json::Map::new();
        };
        if let Some(fixed) = options.fixed() {
            return fixed.clone();
        }
        let ctx = RequestCtx {
            turn: self.requests_this_turn,
            after_tool: matches!(self.history.last(), Some(Message::Tool { .. })),
        };
        match tokio::task::spawn_blocking(move || options.options(&ctx)).await {
            Ok(Ok(map)) => map,
            Ok(Err(e)) => {
                sink.emit(Event::Warning(format!(
                    "models.rhai options failed: {e}; sending the request without them"
                )));
                serde_json::Map::new()
            }
            Err(e) => {
                sink.emit(Event::Warning(format!("models.rhai options failed: {e}")));
                serde_json::Map::new()
            }
        }
    }

    async fn request(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
        with_tools: bool,
    ) -> Result<Option<ModelResponse>, TurnError> {
        // The registry keeps the tools array built; this request borrows it.
        let registry = self.registry.clone();
        let no_tools = Value::Array(Vec::new());
        // With `tool_calls: "text"` the system prompt describes the tools.
        let tools = if !with_tools || self.tool_calls == ToolCallMode::Text {
            &no_tools
        } else if self.lean_tools {
            registry.to_openai_json_compact()
        } else {
            registry.to_openai_json()
        };
        self.flush_notices(sink);
        self.requests_this_turn += 1;
        let extra = self.request_options(sink).await;
        // A server without tools reads calls and results as text.
        let as_text;
        let (messages, wired) = if self.tool_calls == ToolCallMode::Text {
            as_text = super::recover::as_text_history(&self.history);
            (&as_text[..], None)
        } else {
            (&self.history[..], self.wire.update(&self.history))
        };
        let body = wire::request_body(self.model.name(), messages, tools, &extra).with_wire(wired);
        let sent_len = self.history.len();
        sink.emit(Event::RequestStarted);
        let mut partial = String::new();
        let result = {
            let mut on_piece = |piece: Piece| match piece {
                Piece::Text(t) => {
                    partial.push_str(&t);
                    sink.emit(Event::TextDelta(t));
                }
                Piece::Reasoning(r) => sink.emit(Event::ReasoningDelta(r)),
                // A retry starts the answer over: what was shown of the
                // failed attempt is not part of it.
                Piece::Restart => partial.clear(),
            };
            let mut on_notice = |n: String| sink.emit(Event::Notice(n));
            self.model
                .respond(&body, &mut on_piece, &mut on_notice, cancel)
                .await
        };
        let mut response = match result {
            Ok(response) => response,
            Err(ApiError::Cancelled) => {
                if !partial.is_empty() {
                    self.push(Message::Assistant {
                        content: Some(partial),
                        tool_calls: Vec::new(),
                        reasoning: None,
                    });
                }
                return Ok(None);
            }
            Err(e) => {
                // An answer cut by a client bound keeps what was shown, marked
                // as cut, so the model learns of it (client::cut_note).
                if let Some(note) = crate::client::cut_note(&e) {
                    self.push(Message::Assistant {
                        content: Some(partial + note.as_str()),
                        tool_calls: Vec::new(),
                        reasoning: None,
                    });
                }
                return Err(e.into());
            }
        };
        if let Some(usage) = response.usage {
            self.usage.add(usage);
            if usage.prompt_tokens > 0 {
                self.measured_prompt(usage.prompt_tokens, sent_len);
            }
            sink.emit(Event::Usage(usage));
        }
        if response.finish_reason.as_deref() == Some("length") {
            sink.emit(Event::Notice(LENGTH_NOTICE.to_string()));
        }
        // A final answer's trailing whitespace (a model's padding) goes.
        if response.tool_calls.is_empty() {
            let kept = response.content.trim_end().len();
            response.content.truncate(kept);
        }
        if with_tools {
            response = self.recover_calls(response, sink).await;
        }
        let mut content = response.content.clone();
        if let Some(what) = &response.repetition {
            sink.emit(Event::Notice(crate::client::repetition_notice(what)));
            if response.tool_calls.is_empty() {
                content.push_str(&crate::client::repetition_note(what));
            }
        }
        sink.emit(Event::AssistantMessage {
            text: response.content.clone(),
            has_tool_calls: !response.tool_calls.is_empty(),
        });
        self.push(Message::Assistant {
            content: (!content.is_empty()).then_some(content),
            tool_calls: response.tool_calls.clone(),
            reasoning: (!response.reasoning.is_empty()).then(|| response.reasoning.clone()),
        });
        Ok(Some(response))
    }
}

//! The turn loop: the model decides when a turn ends.
//!
//! One turn starts with the person's message. The loop asks the model; if
//! the answer carries tool calls, it runs them in order, appends exactly one
//! `tool` message per call (also when the call fails, is a duplicate, or
//! the turn is interrupted), and asks again. An answer without tool calls
//! ends the turn.
//!
//! After each model turn the [`Watchdog`] judges what happened: continue,
//! tell the model how much budget is left, inject the repair prompt (once
//! per user turn), or stop and hand control back with the reason. When the
//! budget runs out the model gets one tool-less turn to summarise first.
//! Every model turn is also appended to the run log, in the format
//! `agent replay` reads. The loop talks to the UI only through [`Event`]s.

pub mod context;
pub mod transcript;
pub mod workspace;

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::client::{ApiError, ChatClient, Model, ModelResponse, Piece, wire};
use crate::protocol::{
    ErrorKind, Event, EventSink, Message, ToolCall, ToolOutput, ToolStatus, Usage, UserSource,
};
use crate::runtime::Runtime;
use crate::tools::{Registry, ToolContext, messages};
use crate::watchdog::mask::action_key;
use crate::watchdog::replay::RunLog;
use crate::watchdog::{
    CallRecord, SUMMARISE_PROMPT, Settings, TurnRecord, Verdict, VerdictKind, Watchdog,
};
use workspace::WorkspaceTracker;

/// How a turn ended, when it did not fail.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnOutcome {
    /// The model answered without asking for tools.
    Done {
        text: String,
        /// `length` when the answer was cut off at the token limit.
        finish_reason: Option<String>,
    },
    /// The watchdog stopped the turn and handed control back. `summary` is
    /// the model's last, tool-less answer when the budget ran out.
    Stopped {
        reason: String,
        summary: Option<String>,
    },
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

/// The answer to a tool call made in the tool-less summary turn.
pub const TOOLS_OFF: &str = "Not run: tools are off for this last answer; summarise instead.";

/// The answer to a call that repeats an earlier call of the same response.
pub fn duplicate_call(first_id: &str) -> String {
    format!(
        "Not run: this call is identical to call {first_id} in the same response, which ran once; its result is the answer to {first_id}. Do not repeat identical calls."
    )
}

/// What a profile's request options may depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestCtx {
    /// The request number within the current user turn, from 1.
    pub turn: u32,
    /// Whether the last message is a tool result.
    pub after_tool: bool,
}

/// Extra request-body fields, per request (a profile's `options`).
pub trait RequestOptions: Send + Sync {
    fn options(&self, ctx: &RequestCtx) -> Result<Map<String, Value>, String>;

    /// The options when they are the same for every request (a map, not a
    /// script function): then no script call and no blocking thread.
    fn fixed(&self) -> Option<&Map<String, Value>> {
        None
    }
}

/// How long an interrupted tool may take to wind down (kill its process
/// group, collect partial output) before the loop answers for it.
pub const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// The agent: a client, tools, a runtime, a watchdog and the conversation.
pub struct Agent {
    model: Arc<dyn Model>,
    registry: Arc<Registry>,
    runtime: Arc<Runtime>,
    history: Vec<Message>,
    /// The wire form of `history`, kept between requests; told about every
    /// change to a message already in the history.
    wire: wire::WireCache,
    /// Extra request fields merged into every request body.
    extra_body: Map<String, Value>,
    usage: Usage,
    /// `None` only while it is lent to a blocking thread.
    watchdog: Option<Watchdog>,
    workspace: Option<WorkspaceTracker>,
    run_log: Option<RunLog>,
    /// The person's message, until the first model turn is logged.
    pending_user: Option<String>,
    options: Option<Arc<dyn RequestOptions>>,
    /// Requests sent in the current user turn.
    requests_this_turn: u32,
    /// Notices raised where no sink is at hand, shown at the next request
    /// or at the end of the turn.
    notices: Vec<String>,
    transcript: Option<transcript::Transcript>,
    /// The model's context window in tokens, when known.
    context_window: Option<u64>,
    /// The server's prompt-token count for the last request, and the
    /// history length it covered.
    last_prompt: Option<(u64, usize)>,
    /// The instructions for summarising old turns (from prompt.rhai).
    summary_prompt: Option<String>,
}

/// What a compaction did, for the person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compaction {
    pub messages_summarised: usize,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// How the summary is introduced in the history. It is marked as the
/// agent's, so it is never mistaken for the person's words.
pub const SUMMARY_HEADER: &str = "[agent: a summary of the earlier conversation, written by the agent to save space — not a message from the user]";

impl Agent {
    pub fn new(
        client: ChatClient,
        registry: Arc<Registry>,
        runtime: Arc<Runtime>,
        system_prompt: String,
    ) -> Self {
        Self::with_model(Arc::new(client), registry, runtime, system_prompt)
    }

    /// An agent answering through any [`Model`] (the demo's scripted one).
    pub fn with_model(
        model: Arc<dyn Model>,
        registry: Arc<Registry>,
        runtime: Arc<Runtime>,
        system_prompt: String,
    ) -> Self {
        let workspace = WorkspaceTracker::new(runtime.workspace.clone());
        Agent {
            model,
            registry,
            runtime,
            history: vec![Message::System {
                content: system_prompt,
            }],
            wire: wire::WireCache::default(),
            extra_body: Map::new(),
            usage: Usage::default(),
            watchdog: Some(default_watchdog()),
            workspace: Some(workspace),
            run_log: None,
            pending_user: None,
            options: None,
            requests_this_turn: 0,
            notices: Vec::new(),
            transcript: None,
            context_window: None,
            last_prompt: None,
            summary_prompt: None,
        }
    }

    /// Replaces the watchdog (e.g. one built from the person's script).
    pub fn with_watchdog(mut self, watchdog: Watchdog) -> Self {
        self.watchdog = Some(watchdog);
        self
    }

    /// Merges a profile's options into every request body.
    pub fn set_request_options(&mut self, options: Option<Arc<dyn RequestOptions>>) {
        self.options = options;
    }

    /// Swaps the model (a new profile).
    pub fn set_model(&mut self, model: Arc<dyn Model>) {
        self.model = model;
    }

    /// The model id requests are sent to.
    pub fn model_name(&self) -> &str {
        self.model.name()
    }

    /// Swaps the watchdog (after a script reload); the current user turn's
    /// counters start over.
    pub fn set_watchdog(&mut self, watchdog: Watchdog) {
        self.watchdog = Some(watchdog);
    }

    /// Appends every model turn to `log`, in the replay format.
    pub fn with_run_log(mut self, log: RunLog) -> Self {
        self.run_log = Some(log);
        self
    }

    pub fn history(&self) -> &[Message] {
        &self.history
    }

    /// Appends a message to the history and to the transcript.
    fn push(&mut self, message: Message) {
        if let Some(t) = self.transcript.as_mut()
            && let Err(e) = t.append(&message, &|line| self.runtime.redact(line))
        {
            // Reported once; the conversation goes on without a transcript.
            self.notices.push(format!(
                "cannot write the transcript {}: {e}; this conversation is no longer saved",
                t.path().display()
            ));
            self.transcript = None;
        }
        self.history.push(message);
    }

    /// Records every message to `transcript` from now on.
    pub fn with_transcript(mut self, transcript: transcript::Transcript) -> Self {
        self.transcript = Some(transcript);
        self
    }

    /// Replaces the transcript (after `/clear`).
    pub fn set_transcript(&mut self, transcript: Option<transcript::Transcript>) {
        self.transcript = transcript;
    }

    /// The transcript's path, if one is kept.
    pub fn transcript_path(&self) -> Option<&std::path::Path> {
        self.transcript.as_ref().map(|t| t.path())
    }

    /// The model's context window, for compaction.
    pub fn set_context_window(&mut self, window: Option<u64>) {
        self.context_window = window;
    }

    /// The instructions used to summarise old turns.
    pub fn set_summary_prompt(&mut self, prompt: Option<String>) {
        self.summary_prompt = prompt;
    }

    /// Forgets the conversation (the system prompt stays).
    pub fn clear(&mut self) {
        self.history.truncate(1);
        self.wire.forget_from(1);
        self.last_prompt = None;
    }

    /// Continues a saved conversation: `messages` (without system prompt)
    /// follow the current system prompt. The transcript is not rewritten.
    pub fn restore(&mut self, messages: Vec<Message>) {
        self.history.truncate(1);
        self.wire.forget_from(1);
        self.history.extend(
            messages
                .into_iter()
                .filter(|m| !matches!(m, Message::System { .. })),
        );
        self.last_prompt = None;
    }

    /// Tokens the history holds: the server's count for the last request
    /// plus an estimate for what came after.
    pub fn context_tokens(&self) -> u64 {
        // The larger of the server's count and the estimate: compacting a
        // little early is cheap, overflowing the window is not.
        let estimate = context::estimate_all(&self.history);
        match self.last_prompt {
            Some((tokens, len)) if len <= self.history.len() => {
                (tokens + context::estimate_all(&self.history[len..])).max(estimate)
            }
            _ => estimate,
        }
    }

    /// The context window, when known.
    pub fn context_window(&self) -> Option<u64> {
        self.context_window
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The runtime the tools use.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Swaps the runtime (after `policy.rhai` changed).
    pub fn set_runtime(&mut self, runtime: Arc<Runtime>) {
        self.runtime = runtime;
    }

    /// Swaps the tool set (after a script reload).
    pub fn set_registry(&mut self, registry: Arc<Registry>) {
        self.registry = registry;
    }

    /// Replaces the system prompt (after a script reload).
    pub fn set_system_prompt(&mut self, prompt: String) {
        if let Some(Message::System { content }) = self.history.first_mut() {
            *content = prompt;
            self.wire.forget_from(0);
        }
    }

    /// Token usage summed over every response so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Turns used and the limit of the current user turn.
    pub fn budget(&self) -> (u32, u32) {
        self.watchdog
            .as_ref()
            .map(Watchdog::budget)
            .unwrap_or((0, 0))
    }

    /// Runs one turn for `input` until the model stops asking for tools,
    /// the watchdog stops it, or `cancel` fires.
    pub async fn run_turn(
        &mut self,
        input: &str,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        self.push(Message::user(input));
        self.pending_user = Some(input.to_string());
        self.requests_this_turn = 0;
        let workspace = self.workspace_id(None).await;
        if let Some(w) = self.watchdog.as_mut() {
            w.begin_user_turn(workspace);
        }
        let outcome = self.drive(sink, cancel).await;
        self.flush_notices(sink);
        self.sync_transcript();
        outcome
    }

    fn flush_notices(&mut self, sink: &dyn EventSink) {
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

    /// Continues after the watchdog stopped a turn, with a fresh budget.
    pub async fn continue_turn(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        if let Some(w) = self.watchdog.as_mut() {
            w.resume();
        }
        let outcome = self.drive(sink, cancel).await;
        self.flush_notices(sink);
        self.sync_transcript();
        outcome
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
            let response = match self.ask(sink, cancel, true).await? {
                Some(response) => response,
                None => return Ok(TurnOutcome::Cancelled),
            };
            let calls = response.tool_calls.clone();
            if calls.is_empty() {
                let record = TurnRecord {
                    user: self.pending_user.take(),
                    text: response.content.clone(),
                    calls: Vec::new(),
                };
                let verdict = self.judge(record).await;
                if response.content.trim().is_empty() {
                    // An empty answer ends nothing: the watchdog decides.
                    match self.apply_verdict(&verdict, sink) {
                        Some(outcome) => return Ok(outcome),
                        None => continue,
                    }
                }
                return Ok(TurnOutcome::Done {
                    text: response.content,
                    finish_reason: response.finish_reason,
                });
            }
            let records = self.run_calls(&calls, sink, cancel).await;
            if cancel.is_cancelled() {
                return Ok(TurnOutcome::Cancelled);
            }
            let record = TurnRecord {
                user: self.pending_user.take(),
                text: response.content.clone(),
                calls: records,
            };
            let verdict = self.judge(record).await;
            if let Some(outcome) = self.apply_verdict(&verdict, sink) {
                if let TurnOutcome::Stopped { reason, .. } = &outcome
                    && verdict.summarise
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
            && self.context_tokens() as f64 > window as f64 * context::COMPACT_AT
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

    async fn request(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
        with_tools: bool,
    ) -> Result<Option<ModelResponse>, TurnError> {
        // The registry keeps the tools array built; this request borrows it.
        let registry = self.registry.clone();
        let no_tools = Value::Array(Vec::new());
        let tools = if with_tools {
            registry.to_openai_json()
        } else {
            &no_tools
        };
        self.flush_notices(sink);
        self.requests_this_turn += 1;
        let mut extra = self.extra_body.clone();
        if let Some(fixed) = self.options.as_ref().and_then(|o| o.fixed()) {
            extra.extend(fixed.clone());
        } else if let Some(options) = self.options.clone() {
            let ctx = RequestCtx {
                turn: self.requests_this_turn,
                after_tool: matches!(self.history.last(), Some(Message::Tool { .. })),
            };
            match tokio::task::spawn_blocking(move || options.options(&ctx)).await {
                Ok(Ok(map)) => extra.extend(map),
                Ok(Err(e)) => sink.emit(Event::Notice(format!(
                    "models.rhai options failed: {e}; sending the request without them"
                ))),
                Err(e) => sink.emit(Event::Notice(format!("models.rhai options failed: {e}"))),
            }
        }
        let wired = self.wire.update(&self.history);
        let body =
            wire::request_body(self.model.name(), &self.history, tools, &extra).with_wire(wired);
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
            };
            let mut on_notice = |n: String| sink.emit(Event::Notice(n));
            self.model
                .respond(&body, &mut on_piece, &mut on_notice, cancel)
                .await
        };
        let response = match result {
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
            Err(e) => return Err(e.into()),
        };
        if let Some(usage) = response.usage {
            self.usage.add(usage);
            if usage.prompt_tokens > 0 {
                self.last_prompt = Some((usage.prompt_tokens, sent_len));
            }
            sink.emit(Event::Usage(usage));
        }
        sink.emit(Event::AssistantMessage {
            text: response.content.clone(),
            has_tool_calls: !response.tool_calls.is_empty(),
        });
        if response.finish_reason.as_deref() == Some("length") {
            sink.emit(Event::Notice(LENGTH_NOTICE.to_string()));
        }
        self.push(Message::Assistant {
            content: (!response.content.is_empty()).then(|| response.content.clone()),
            tool_calls: response.tool_calls.clone(),
            reasoning: (!response.reasoning.is_empty()).then(|| response.reasoning.clone()),
        });
        Ok(Some(response))
    }

    async fn compact_and_report(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<Option<Compaction>, TurnError> {
        let report = self.compact(cancel).await?;
        if let Some(r) = &report {
            sink.emit(Event::Notice(format!(
                "context compacted: {} older messages summarised (about {} → {} tokens)",
                r.messages_summarised, r.tokens_before, r.tokens_after
            )));
        }
        Ok(report)
    }

    /// Summarises the older turns with the model and keeps the recent ones
    /// and the task. Returns `None` when there is nothing old enough to
    /// summarise.
    pub async fn compact(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Compaction>, TurnError> {
        let window = self
            .context_window
            .unwrap_or_else(|| self.context_tokens().max(1));
        let budget = (window as f64 * context::KEEP_RECENT) as u64;
        let Some(cut) = context::cut_point(&self.history, budget) else {
            return Ok(None);
        };
        if cut <= 1 {
            return Ok(None);
        }
        let tokens_before = self.context_tokens();
        let older = &self.history[1..cut];
        let task = self
            .history
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User {
                    content,
                    source: UserSource::Person,
                } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let instructions = match &self.summary_prompt {
            Some(p) => p.clone(),
            None => crate::session::builtin_summary_prompt(),
        };
        let messages = [
            Message::System {
                content: instructions,
            },
            Message::user(format!(
                "The conversation so far:\n{}\nThe user's current request: {task}",
                context::render(older)
            )),
        ];
        let (no_tools, no_extra) = (Value::Array(Vec::new()), Map::new());
        let request = wire::request_body(self.model.name(), &messages, &no_tools, &no_extra);
        let mut ignore_piece = |_: Piece| {};
        let mut ignore_notice = |_: String| {};
        let summary = self
            .model
            .respond(&request, &mut ignore_piece, &mut ignore_notice, cancel)
            .await?;
        if let Some(usage) = summary.usage {
            self.usage.add(usage);
        }
        let summarised = cut - 1;
        let recent = self.history.split_off(cut);
        self.history.truncate(1);
        self.wire.forget_from(1);
        let note = Message::User {
            content: format!(
                "{SUMMARY_HEADER}\n{}\n\nThe user's current request: {task}",
                summary.content.trim()
            ),
            source: UserSource::Summary,
        };
        self.history.push(note);
        self.history.extend(recent);
        if let Some(t) = self.transcript.as_mut()
            && t.compaction(&self.history[1..], &|line| self.runtime.redact(line))
                .is_err()
        {
            self.transcript = None;
        }
        self.last_prompt = None;
        Ok(Some(Compaction {
            messages_summarised: summarised,
            tokens_before,
            tokens_after: self.context_tokens(),
        }))
    }

    /// Runs the calls of one response in order; identical repeats inside
    /// the response are answered without running. Every call gets exactly
    /// one `tool` message.
    async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Vec<CallRecord> {
        let mut records = Vec::with_capacity(calls.len());
        let mut first_ids: Vec<(String, String, ToolOutput)> = Vec::new();
        for call in calls {
            let input = serde_json::from_str::<Value>(&call.arguments)
                .unwrap_or_else(|_| Value::String(call.arguments.clone()));
            let key = action_key(&call.name, &input);
            let duplicate = first_ids.iter().find(|(k, ..)| *k == key).cloned();
            let output = if cancel.is_cancelled() {
                ToolOutput::failed(ErrorKind::Cancelled, messages::CANCELLED)
            } else if let Some((_, first_id, first)) = &duplicate {
                ToolOutput {
                    text: duplicate_call(first_id),
                    ..first.clone()
                }
            } else {
                sink.emit(Event::ToolCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    input: input.clone(),
                });
                if let Some(path) = self.write_path(&call.name, &input) {
                    self.before_write(path).await;
                }
                dispatch(self.registry.clone(), self.runtime.clone(), call, cancel).await
            };
            if duplicate.is_none() && output.error_kind != Some(ErrorKind::Cancelled) {
                first_ids.push((key, call.id.clone(), output.clone()));
            }
            sink.emit(Event::ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                output: output.clone(),
            });
            let is_write = self.is_write_tool(&call.name);
            let changes_files = is_write
                || call.name == "run_shell"
                || self
                    .registry
                    .get(&call.name)
                    .is_some_and(|t| t.origin() == crate::tools::ToolOrigin::Script);
            let workspace = if changes_files && duplicate.is_none() {
                let path = is_write
                    .then(|| {
                        input
                            .get("path")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .flatten();
                self.workspace_id(path).await
            } else {
                self.workspace.as_mut().map(|w| w.current())
            };
            records.push(CallRecord {
                name: call.name.clone(),
                input,
                status: output.status,
                output: output.text.clone(),
                exit_code: output.exit_code,
                error_kind: output.error_kind,
                workspace,
            });
            self.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: output.text,
                status: output.status,
                exit_code: output.exit_code,
            });
        }
        records
    }

    /// Whether the watchdog counts `name` as a tool that writes files.
    fn is_write_tool(&self, name: &str) -> bool {
        self.watchdog
            .as_ref()
            .is_some_and(|w| w.settings().write_tools.iter().any(|t| t == name))
    }

    /// The file a write tool is about to change.
    fn write_path(&self, name: &str, input: &Value) -> Option<String> {
        self.is_write_tool(name)
            .then(|| {
                input
                    .get("path")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .flatten()
    }

    async fn before_write(&mut self, path: String) {
        let Some(mut tracker) = self.workspace.take() else {
            return;
        };
        let back = tokio::task::spawn_blocking(move || {
            tracker.before_write(&path);
            tracker
        })
        .await;
        self.workspace = back.ok();
    }

    /// The workspace identifier after a call (on a blocking thread: it may
    /// hash files and run git).
    async fn workspace_id(&mut self, path: Option<String>) -> Option<String> {
        let mut tracker = self.workspace.take()?;
        if path.is_none() && !tracker.may_read_disk() {
            // Nothing to hash and no git to ask: the identifier comes from
            // memory, and a blocking thread would cost more than the work.
            let id = tracker.after_call(None);
            self.workspace = Some(tracker);
            return Some(id);
        }
        let result = tokio::task::spawn_blocking(move || {
            let id = tracker.after_call(path.as_deref());
            (tracker, id)
        })
        .await;
        match result {
            Ok((tracker, id)) => {
                self.workspace = Some(tracker);
                Some(id)
            }
            Err(_) => None,
        }
    }

    /// Logs a turn and asks the watchdog (on a blocking thread: its rules
    /// are script calls).
    async fn judge(&mut self, record: TurnRecord) -> Verdict {
        if let Some(log) = self.run_log.as_mut()
            && let Err(e) = log.append(&record, &|line| self.runtime.redact(line))
        {
            let path = log.path().display().to_string();
            self.run_log = None;
            // Reported once; the run goes on without a log.
            self.notices.push(format!(
                "cannot write the run log {path}: {e}; the run goes on without it"
            ));
        }
        let mut watchdog = self.watchdog.take().unwrap_or_else(default_watchdog);
        let (watchdog, verdict) = match tokio::task::spawn_blocking(move || {
            let v = watchdog.observe(&record);
            (watchdog, v)
        })
        .await
        {
            Ok(pair) => pair,
            Err(_) => (default_watchdog(), continue_verdict()),
        };
        self.watchdog = Some(watchdog);
        verdict
    }

    /// Acts on a verdict. Returns an outcome when the turn must end.
    fn apply_verdict(&mut self, verdict: &Verdict, sink: &dyn EventSink) -> Option<TurnOutcome> {
        sink.emit(Event::Budget {
            used: verdict.used,
            limit: verdict.limit,
        });
        match verdict.kind {
            VerdictKind::Continue => None,
            VerdictKind::Notice => {
                // Appended to the last tool result: the model reads it with
                // that output, and it never poses as the person.
                if let Some(Message::Tool { content, .. }) = self.history.last_mut() {
                    content.push_str("\n\n");
                    content.push_str(&verdict.reason);
                    self.wire.forget_from(self.history.len() - 1);
                }
                sink.emit(Event::Watchdog {
                    verdict: "notice".into(),
                    reason: verdict.reason.clone(),
                });
                None
            }
            VerdictKind::Repair => {
                sink.emit(Event::Watchdog {
                    verdict: "repair".into(),
                    reason: verdict.reason.clone(),
                });
                self.push(Message::User {
                    content: verdict.repair_text.clone().unwrap_or_default(),
                    source: UserSource::Watchdog,
                });
                None
            }
            VerdictKind::Stop => {
                sink.emit(Event::Watchdog {
                    verdict: "stop".into(),
                    reason: verdict.reason.clone(),
                });
                Some(TurnOutcome::Stopped {
                    reason: verdict.reason.clone(),
                    summary: None,
                })
            }
        }
    }

    /// The last, tool-less turn when the budget ran out.
    async fn summarise(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, TurnError> {
        self.push(Message::User {
            content: SUMMARISE_PROMPT.to_string(),
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
}

/// Runs one call, answering for it if the turn is cancelled and the tool
/// does not stop within [`CANCEL_GRACE`]. A free function holding its own
/// `Arc`s, not a method: the turn may run on any worker thread, and a
/// future that held `&Agent` across this await would need the agent to be
/// `Sync`.
async fn dispatch(
    registry: Arc<Registry>,
    runtime: Arc<Runtime>,
    call: &ToolCall,
    cancel: &CancellationToken,
) -> ToolOutput {
    let ctx = ToolContext {
        runtime: runtime.clone(),
        cancel: cancel.clone(),
        call_id: call.id.clone(),
    };
    let dispatch = registry.dispatch(call, ctx);
    tokio::pin!(dispatch);
    let mut output = tokio::select! {
        biased;
        output = &mut dispatch => output,
        () = cancel.cancelled() => {
            // The tool sees the same token; give it a moment to stop on
            // its own and return its partial output.
            tokio::time::timeout(CANCEL_GRACE, &mut dispatch)
                .await
                .unwrap_or_else(|_| ToolOutput::failed(ErrorKind::Cancelled, messages::CANCELLED))
        }
    };
    // Whatever the tool, secret values never reach the model or the logs.
    output.text = runtime.redact(output.text);
    output
}

/// The watchdog with the built-in `watchdog.rhai`.
pub fn default_watchdog() -> Watchdog {
    match crate::script::compile_default(crate::script::WATCHDOG) {
        Ok(script) => watchdog_from_script(Arc::new(script)).0,
        Err(_) => Watchdog::new(
            Settings::default(),
            Box::new(crate::watchdog::rules::FallbackRules),
        ),
    }
}

/// A watchdog from a loaded `watchdog.rhai`, with any warnings.
pub fn watchdog_from_script(script: Arc<crate::script::Script>) -> (Watchdog, Vec<String>) {
    let mut rules = crate::watchdog::rules::ScriptRules::new(script);
    let settings = rules.settings();
    let warnings = std::mem::take(&mut rules.warnings);
    (Watchdog::new(settings, Box::new(rules)), warnings)
}

fn continue_verdict() -> Verdict {
    Verdict {
        kind: VerdictKind::Continue,
        reason: String::new(),
        used: 0,
        limit: 0,
        stop: None,
        repair_text: None,
        summarise: false,
    }
}

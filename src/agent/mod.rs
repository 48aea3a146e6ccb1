//! The turn loop: the model decides when a turn ends.
//!
//! One turn starts with the person's message. The loop asks the model; if
//! the answer carries tool calls, it runs them in order, appends exactly one
//! `tool` message per call (also when the call fails, is a duplicate, or
//! the turn is interrupted), and asks again. An answer without tool calls
//! ends the turn.
//!
//! After each model turn the watchdog's [`Judge`] rules on what happened:
//! continue, tell the model how much budget is left, inject the repair
//! prompt (once per user turn), or stop and hand control back with the
//! reason. The loop talks to the UI only through [`Event`]s, including the
//! policy's approval questions, which it forwards while a tool waits.
//!
//! | file | owns |
//! |---|---|
//! | `turn` | a user turn: ask, judge, repeat; the tool-less summary turn |
//! | `calls` | running one response's calls, each answered exactly once |
//! | `recover` | tool calls written as text, and the notice for unexecuted ones |
//! | `compact` | summarising old turns to free the context window |
//! | `context` | token estimates and where history may be cut (pure) |
//! | `transcript` | saved conversations (JSON lines) |
//! | `messages` | the loop's model-facing texts |
//!
//! [`Event`]: crate::protocol::Event

mod calls;
mod compact;
pub mod context;
pub mod messages;
mod recover;
pub mod transcript;
mod turn;

use std::sync::Arc;

use crate::client::{ApiError, Model, RequestOptions, wire};
use crate::protocol::{Message, Usage};
use crate::runtime::Runtime;
use crate::runtime::policy::AskQueue;
use crate::tools::Registry;
use crate::tools::text_calls::{BuiltinReader, CallReader, ToolCallMode};
use crate::watchdog::{Budget, Judge};

pub use compact::Compaction;

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

/// How long an interrupted tool may take to wind down (kill its process
/// group, collect partial output) before the loop answers for it.
pub const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// The agent: a model, tools, a runtime, a judge and the conversation.
pub struct Agent {
    model: Arc<dyn Model>,
    registry: Arc<Registry>,
    runtime: Arc<Runtime>,
    history: Vec<Message>,
    /// The wire form of `history`, kept between requests; told about every
    /// change to a message already in the history.
    wire: wire::WireCache,
    usage: Usage,
    /// `None` only while it is lent to a blocking thread, or after it was
    /// lost to a panic there.
    judge: Option<Judge>,
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
    /// What the server counts beyond the estimate of the history (tool
    /// schemas, the chat template), measured at the last request; kept
    /// across compaction so its figures match the next request.
    prompt_overhead: u64,
    /// The instructions for summarising old turns (from prompt.rhai).
    summary_prompt: String,
    /// When to compact and how much to keep (from prompt.rhai).
    compaction: context::CompactionRule,
    /// The policy's approval questions, forwarded to the UI while a tool
    /// waits for the answer.
    asks: Option<AskQueue>,
    /// How the model makes tool calls (the profile's `tool_calls`).
    tool_calls: ToolCallMode,
    /// Reads calls written as text (`parse_tool_calls` of models.rhai).
    call_reader: Arc<dyn CallReader>,
    /// Requests carry compact tool descriptions (`lean_prompt`).
    lean_tools: bool,
    /// The person's messages of this conversation that `/rewind --chat`
    /// can go back to: each one's mark and its index in `history`.
    /// Forgotten when the history is rewritten (compaction, clear, resume).
    chat_marks: Vec<(u64, usize)>,
}

impl Agent {
    /// An agent answering through `model` (the HTTP client, or the demo's
    /// scripted model), judged by `judge`.
    pub fn new(
        model: Arc<dyn Model>,
        registry: Arc<Registry>,
        runtime: Arc<Runtime>,
        system_prompt: String,
        judge: Judge,
    ) -> Self {
        Agent {
            model,
            registry,
            runtime,
            history: vec![Message::System {
                content: system_prompt,
            }],
            wire: wire::WireCache::default(),
            usage: Usage::default(),
            judge: Some(judge),
            options: None,
            requests_this_turn: 0,
            notices: Vec::new(),
            transcript: None,
            context_window: None,
            last_prompt: None,
            prompt_overhead: 0,
            summary_prompt: messages::PLAIN_SUMMARY_PROMPT.to_string(),
            compaction: context::CompactionRule::default(),
            asks: None,
            tool_calls: ToolCallMode::Native,
            call_reader: Arc::new(BuiltinReader),
            lean_tools: false,
            chat_marks: Vec::new(),
        }
    }

    /// Forwards the policy's approval questions from `asks` to the UI.
    pub fn set_asks(&mut self, asks: AskQueue) {
        self.asks = Some(asks);
    }

    /// Merges a profile's options into every request body.
    pub fn set_request_options(&mut self, options: Option<Arc<dyn RequestOptions>>) {
        self.options = options;
    }

    /// Whether requests carry compact tool descriptions.
    pub fn set_lean_tools(&mut self, lean: bool) {
        self.lean_tools = lean;
    }

    /// Swaps the model (a new profile).
    pub fn set_model(&mut self, model: Arc<dyn Model>) {
        self.model = model;
    }

    /// The model id requests are sent to.
    pub fn model_name(&self) -> &str {
        self.model.name()
    }

    /// Swaps the watchdog (after a script reload); the workspace history,
    /// the run log and the current user turn's place stay with the judge.
    pub fn set_watchdog(&mut self, watchdog: crate::watchdog::Watchdog) {
        if let Some(judge) = self.judge.as_mut() {
            judge.set_watchdog(watchdog);
        }
    }

    /// The session's undo checkpoints (kept by the judge).
    pub fn checkpoints_mut(&mut self) -> Option<&mut crate::runtime::checkpoint::Checkpoints> {
        self.judge.as_mut()?.checkpoints_mut()
    }

    /// Starts a new undo store (a new session).
    pub fn set_checkpoints(&mut self, checkpoints: crate::runtime::checkpoint::Checkpoints) {
        if let Some(judge) = self.judge.as_mut() {
            judge.set_checkpoints(checkpoints);
        }
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

    /// Records every message to `transcript` from now on (`None` stops).
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
    pub fn set_summary_prompt(&mut self, prompt: String) {
        self.summary_prompt = prompt;
    }

    /// When to compact and how much of the recent history to keep.
    pub fn set_compaction(&mut self, compaction: context::CompactionRule) {
        self.compaction = compaction;
    }

    /// The instructions compaction uses now.
    pub fn summary_prompt(&self) -> &str {
        &self.summary_prompt
    }

    /// Forgets the conversation (the system prompt stays).
    pub fn clear(&mut self) {
        self.history.truncate(1);
        self.wire.forget_from(1);
        self.last_prompt = None;
        self.chat_marks.clear();
    }

    /// A mark for the person's next message, unique across sessions (the
    /// clock's nanoseconds, never below the last one given).
    fn mark_next_message(&mut self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mark = self
            .chat_marks
            .last()
            .map_or(now, |(last, _)| now.max(last + 1));
        self.chat_marks.push((mark, self.history.len()));
        mark
    }

    /// Takes the conversation back to just before the person's message
    /// `mark` (`/rewind N --chat`) and records that in the transcript.
    /// Returns that message, to be sent again or changed; `None` when the
    /// conversation no longer holds it (compacted, cleared or resumed
    /// since).
    pub fn rewind_conversation(&mut self, mark: u64) -> Option<String> {
        let at = self
            .chat_marks
            .iter()
            .find(|(m, _)| *m == mark)
            .map(|(_, at)| *at)?;
        let text = match self.history.get(at)? {
            Message::User { content, .. } => content.clone(),
            _ => return None,
        };
        self.history.truncate(at);
        self.wire.forget_from(at);
        self.last_prompt = None;
        self.chat_marks.retain(|(_, i)| *i < at);
        let runtime = self.runtime.clone();
        if let Some(t) = self.transcript.as_mut()
            && t.compaction(&self.history[1..], &|line| runtime.redact(line))
                .is_err()
        {
            self.transcript = None;
        }
        Some(text)
    }

    /// Continues a saved conversation: `messages` (without system prompt)
    /// follow the current system prompt. The transcript is not rewritten.
    pub fn restore(&mut self, messages: Vec<Message>) {
        self.history.truncate(1);
        self.wire.forget_from(1);
        self.chat_marks.clear();
        self.history.extend(
            messages
                .into_iter()
                .filter(|m| !matches!(m, Message::System { .. })),
        );
        self.last_prompt = None;
    }

    /// The person's last message (not the agent's notes or summaries).
    fn last_request(&self) -> Option<&str> {
        self.history.iter().rev().find_map(|m| match m {
            Message::User {
                content,
                source: crate::protocol::UserSource::Person,
            } => Some(content.as_str()),
            _ => None,
        })
    }

    /// Tokens the history holds: the server's count for the last request
    /// plus an estimate for what came after.
    pub fn context_tokens(&self) -> u64 {
        // The larger of the server's count and the estimate: compacting a
        // little early is cheap, overflowing the window is not.
        let estimate = context::estimate_all(&self.history) + self.prompt_overhead;
        match self.last_prompt {
            Some((tokens, len)) if len <= self.history.len() => {
                (tokens + context::estimate_all(&self.history[len..])).max(estimate)
            }
            _ => estimate,
        }
    }

    /// Records the server's prompt count for a request that carried the
    /// first `sent_len` messages of the history.
    pub(super) fn measured_prompt(&mut self, tokens: u64, sent_len: usize) {
        let sent = context::estimate_all(&self.history[..sent_len.min(self.history.len())]);
        self.prompt_overhead = tokens.saturating_sub(sent);
        self.last_prompt = Some((tokens, sent_len));
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

    /// Raises the watchdog's hard cap by `extra` turns for the next (or
    /// continued) user turn; returns that cap (`/budget +N`).
    pub fn raise_cap(&mut self, extra: u32) -> Option<u32> {
        self.judge.as_mut().map(|j| j.raise_cap(extra))
    }

    /// The hard cap of the current user turn, when there is a watchdog.
    pub fn hard_cap(&self) -> Option<u32> {
        self.judge.as_ref().map(Judge::hard_cap)
    }

    /// Turns used and the limit of the current user turn.
    pub fn budget(&self) -> Budget {
        self.judge.as_ref().map(Judge::budget).unwrap_or_default()
    }

    /// Runs `work` on the judge on a blocking thread (it may hash files or
    /// call scripts). `None` when the judge is lost.
    async fn on_judge<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut Judge) -> T + Send + 'static,
    ) -> Option<T> {
        let mut judge = self.judge.take()?;
        match tokio::task::spawn_blocking(move || {
            let out = work(&mut judge);
            (judge, out)
        })
        .await
        {
            Ok((mut judge, out)) => {
                self.notices.extend(judge.take_notices());
                self.judge = Some(judge);
                Some(out)
            }
            Err(_) => {
                self.notices.push(messages::JUDGE_LOST.to_string());
                None
            }
        }
    }
}

//! The vocabulary every layer shares: messages in the history, tool calls and
//! their results, token usage, and the [`Event`]s the agent loop emits.
//!
//! Data flows one way: the loop consumes [`Message`]s and tool outputs and
//! reports what happens as [`Event`]s. The UI (REPL, one-shot printer, JSON
//! printer) is the only consumer of events, so nothing below the loop prints.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One entry of the conversation history, as stored in transcripts.
///
/// The wire form sent to the server is built from this by the client
/// (`client::wire`), which drops what the server must not see (reasoning
/// text, tool status).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Instructions for the model; always first.
    System { content: String },
    /// Something the person typed, or a note the agent itself injected
    /// (see [`UserSource`]).
    User {
        content: String,
        #[serde(default, skip_serializing_if = "UserSource::is_person")]
        source: UserSource,
    },
    /// One model response: text, tool calls, or both.
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Reasoning text (DeepSeek's `reasoning_content`). Kept for the
        /// transcript, never sent back and never mixed into `content`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    /// The answer to exactly one tool call.
    Tool {
        tool_call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        status: ToolStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
}

impl Message {
    /// A message the person typed.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
            source: UserSource::Person,
        }
    }
}

/// Who wrote a `user` message. Notes injected by the agent (the watchdog's
/// repair prompt) are marked so they are never mistaken for the person.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UserSource {
    #[default]
    Person,
    Watchdog,
    /// The summary that replaced older turns after a compaction.
    Summary,
}

impl UserSource {
    fn is_person(&self) -> bool {
        *self == UserSource::Person
    }
}

/// A tool call as the model sent it. `arguments` is the raw JSON text: it is
/// parsed by the dispatcher, so bad JSON becomes a tool result, not a crash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Whether a tool call did what was asked. Decided by the tool itself,
/// never by sniffing the text of its output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    #[default]
    Ok,
    Failed,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Ok => "ok",
            ToolStatus::Failed => "failed",
        }
    }
}

/// Why a tool call failed, when the failure has a kind the watchdog or the
/// UI cares about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No tool of that name is registered.
    UnknownTool,
    /// The arguments were not valid JSON or did not match the schema.
    InvalidArgs,
    /// The tool ran and reported a failure (non-zero exit, missing file...).
    Failed,
    /// The tool ran past its time limit and was killed.
    Timeout,
    /// A policy or the person refused the call.
    Denied,
    /// The turn was interrupted before or while the tool ran.
    Cancelled,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::InvalidArgs => "invalid_args",
            ErrorKind::Failed => "failed",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Denied => "denied",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

/// What a tool returns: the text the model reads plus a structured status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub status: ToolStatus,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// For the person only, never sent to the model: the unified diff of
    /// what a file tool changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            status: ToolStatus::Ok,
            text: text.into(),
            exit_code: None,
            error_kind: None,
            diff: None,
        }
    }

    pub fn failed(kind: ErrorKind, text: impl Into<String>) -> Self {
        ToolOutput {
            status: ToolStatus::Failed,
            text: text.into(),
            exit_code: None,
            error_kind: Some(kind),
            diff: None,
        }
    }

    /// The same output with the person's diff of the change.
    pub fn with_diff(mut self, diff: Option<String>) -> Self {
        self.diff = diff;
        self
    }

    pub fn with_exit_code(mut self, code: Option<i32>) -> Self {
        self.exit_code = code;
        self
    }
}

/// Token counts for one model response, as the server reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// Longest live line kept, in characters.
pub const MAX_LIVE_LINE: usize = 200;

/// The last line a running tool printed: written by the runtime as output
/// arrives (already blanked of secrets and stripped of escapes), read by
/// the UI while the tool runs. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct LiveLine(std::sync::Arc<std::sync::Mutex<String>>);

impl LiveLine {
    /// Replaces the line (cut to [`MAX_LIVE_LINE`] characters).
    pub fn set(&self, line: &str) {
        if let Ok(mut shown) = self.0.lock() {
            shown.clear();
            shown.extend(line.chars().take(MAX_LIVE_LINE));
        }
    }

    /// The line now (empty before the tool printed anything).
    pub fn get(&self) -> String {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl PartialEq for LiveLine {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Everything the loop reports, in the order it happens. The UI decides how
/// (and whether) to show each one.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A request went to the model; nothing has come back yet.
    RequestStarted,
    /// A piece of answer text, as it streams in.
    TextDelta(String),
    /// A piece of reasoning text; shown dimmed or hidden, never as answer.
    ReasoningDelta(String),
    /// A model response finished; `text` is its whole answer text (may be
    /// empty) and `has_tool_calls` says whether tools follow.
    AssistantMessage { text: String, has_tool_calls: bool },
    /// A tool is about to run.
    ToolCall {
        id: String,
        name: String,
        input: Value,
    },
    /// The tool of the last [`Event::ToolCall`] started; `live` holds the
    /// last line it printed, for the UI to show while it runs.
    ToolRunning { id: String, live: LiveLine },
    /// A tool finished (or failed, or was refused).
    ToolResult {
        id: String,
        name: String,
        output: ToolOutput,
    },
    /// Token usage of one model response.
    Usage(Usage),
    /// Something the person should know that is not an error: a retry, an
    /// answer cut off at the token limit, a script warning.
    Notice(String),
    /// The watchdog intervened (repair prompt injected, or the turn stopped).
    Watchdog { verdict: String, reason: String },
    /// The watchdog's budget after a model turn: turns used and the limit.
    Budget { used: u32, limit: u32 },
    /// Something is wrong but the agent goes on: a script that failed and
    /// was replaced by its default, a transcript that cannot be written.
    Warning(String),
    /// A line a script printed (`print`, `debug`).
    ScriptOutput(String),
    /// Something a script showed with `emit(kind, data)`: `plan` is the
    /// model's checklist (`#{items: [#{step, status}]}`), any other kind
    /// one line of data.
    ScriptEvent { kind: String, data: Value },
    /// The policy asks the person before a tool may act. The tool waits
    /// until the UI answers through [`ApprovalAsk::reply`].
    Approval(ApprovalAsk),
}

/// The person's answer to an approval question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    /// Yes, and do not ask again for this command in this session.
    Always,
    /// Nobody is there to answer (one-shot mode without `--yes`).
    Unattended,
}

/// An approval question: what a tool wants to do, why the policy asks,
/// and the channel the answer goes back on.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalAsk {
    /// Unique within the session.
    pub id: u64,
    /// One line for the person: `run \`cargo publish\``, `write /etc/x`.
    pub action: String,
    /// The whole shell command, when the action is one.
    pub command: Option<String>,
    /// The file to be written, when the action is a write.
    pub path: Option<String>,
    /// The programs the command runs, as the policy's parser sees them.
    pub programs: Vec<String>,
    /// What answering "always" covers for the rest of the session.
    pub scope: String,
    /// What the action would change, shown before the question (a write's
    /// unified diff).
    pub preview: Option<String>,
    /// Why the policy asks.
    pub reason: String,
    pub reply: Reply,
}

/// Where the answer to one [`ApprovalAsk`] goes. Answering twice, or
/// after the asker gave up, does nothing.
#[derive(Clone)]
pub struct Reply(std::sync::Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Answer>>>>);

impl Reply {
    /// A reply handle and the receiver its answer arrives on.
    pub fn channel() -> (Reply, tokio::sync::oneshot::Receiver<Answer>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Reply(std::sync::Arc::new(std::sync::Mutex::new(Some(tx)))),
            rx,
        )
    }

    /// Sends the answer; `false` when it was already answered or nobody
    /// waits any more.
    pub fn send(&self, answer: Answer) -> bool {
        let sender = self.0.lock().ok().and_then(|mut slot| slot.take());
        sender.is_some_and(|tx| tx.send(answer).is_ok())
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reply")
    }
}

impl PartialEq for Reply {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Receives events from the loop. Implemented by every UI.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: Event);
}

/// A sink that drops everything; useful for embedding and tests.
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) {}
}

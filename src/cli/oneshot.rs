//! `agent -p TASK`: one turn, then exit with a code that says how it went.
//! The final answer goes to stdout; with `--json`, every event is a JSON
//! line.

use std::io::IsTerminal;
use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::exit;
use crate::agent::{Agent, TurnError, TurnOutcome};
use crate::client::ApiError;
use crate::protocol::{Answer, EventSink};
use crate::setup::Note;
use crate::ui::{Approver, JsonSink, Style, TextSink, report};

/// How one-shot mode shows the turn.
pub struct OneShot {
    pub json: bool,
    pub style: Style,
    pub show_reasoning: bool,
    /// `--yes`: approve what the policy would ask about.
    pub yes: bool,
    /// The MCP servers as the turn starts (one `mcp` event each with
    /// `--json`).
    pub mcp: Vec<crate::tools::mcp::ServerStatus>,
}

/// Runs `task` and returns the exit code. `notes` from the setup are
/// shown first.
pub async fn run(agent: &mut Agent, task: &str, how: OneShot, notes: &[Note]) -> u8 {
    let answer = if how.yes {
        Answer::Yes
    } else {
        Answer::Unattended
    };
    // In a terminal the answer streams as in the REPL, with the spinner on
    // stderr; piped, stdout gets the final answer only, plain.
    let live = std::io::stdout().is_terminal() && !how.json;
    let text_sink = Arc::new(TextSink::new(
        how.style,
        live,
        how.show_reasoning && std::io::stderr().is_terminal(),
        Approver::Fixed(answer),
    ));
    let json_sink = Arc::new(JsonSink::new(answer));
    let sink: Arc<dyn EventSink> = if how.json {
        json_sink.clone()
    } else {
        text_sink.clone()
    };
    super::route_script_output(sink.clone());
    if how.json
        && let Some(sandbox) = &agent.runtime().sandbox
    {
        // Which sandbox layers hold, for a program reading the events.
        json_sink.line(sandbox.json_event());
    }
    if how.json {
        for server in &how.mcp {
            json_sink.line(json!({
                "type": "mcp",
                "server": server.name,
                "state": server.state.describe(),
                "running": server.state == crate::tools::mcp::State::Running,
                "tools": server.tools,
            }));
        }
    }
    super::emit_notes(sink.as_ref(), notes);
    let sink = sink.as_ref();
    let cancel = CancellationToken::new();
    let watcher = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        })
    };
    let outcome = agent.run_turn(task, sink, &cancel).await;
    watcher.abort();
    let usage = agent.usage();
    let (code, final_text, error) = match outcome {
        Ok(TurnOutcome::Done { text, .. }) => (exit::OK, Some(text), None),
        Ok(TurnOutcome::Stopped { reason, summary }) => (
            exit::WATCHDOG,
            summary,
            Some(format!("stopped by the watchdog: {reason}")),
        ),
        Ok(TurnOutcome::Cancelled) | Err(TurnError::Api(ApiError::Cancelled)) => {
            (exit::INTERRUPTED, None, Some("interrupted".to_string()))
        }
        Err(TurnError::Api(e)) => (exit::API, None, Some(e.to_string())),
    };
    if how.json {
        if let Some(text) = &final_text {
            json_sink.line(json!({
                "type": "final",
                "text": text,
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                },
            }));
        }
        if let Some(message) = &error {
            json_sink.line(json!({"type": "error", "message": message, "exit_code": code}));
        }
    } else {
        if let Some(text) = &final_text
            && !live
        {
            // A terminal sees the answer with its control characters
            // visible; a pipe gets it as the model wrote it.
            if std::io::stdout().is_terminal() {
                report::out(crate::ui::sanitize::visible(text.trim_end()).as_ref());
            } else {
                report::out(text.trim_end());
            }
        }
        if let Some(message) = &error {
            text_sink.error(message);
        }
        if std::io::stderr().is_terminal() {
            text_sink.usage_line(usage);
        }
    }
    code
}

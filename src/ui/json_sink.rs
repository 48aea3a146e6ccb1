//! One JSON object per line on stdout, for programs (`agent -p --json`).

use std::io::Write;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::text_sink::Approver;
use crate::protocol::{Answer, Event, EventSink};

pub struct JsonSink {
    lock: Mutex<()>,
    approver: Approver,
}

impl JsonSink {
    /// Approval questions are answered by `answer` and reported.
    pub fn new(answer: Answer) -> Self {
        JsonSink {
            lock: Mutex::new(()),
            approver: Approver::Fixed(answer),
        }
    }

    /// Writes one line. Public so the caller can add `final` and `error`.
    pub fn line(&self, value: Value) {
        let _guard = self.lock.lock();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }
}

impl EventSink for JsonSink {
    fn emit(&self, event: Event) {
        let value = match event {
            Event::TextDelta(_)
            | Event::ReasoningDelta(_)
            | Event::Budget { .. }
            | Event::ToolRunning { .. }
            | Event::RequestStarted => return,
            Event::AssistantMessage { text, .. } => {
                if text.is_empty() {
                    return;
                }
                json!({"type": "assistant", "text": text})
            }
            Event::ToolCall { id, name, input } => {
                json!({"type": "tool_call", "id": id, "name": name, "input": input})
            }
            Event::ToolResult { id, name, output } => {
                let mut v = json!({
                    "type": "tool_result",
                    "id": id,
                    "name": name,
                    "status": output.status.as_str(),
                    "output": output.text,
                });
                if let Some(code) = output.exit_code {
                    v["exit_code"] = json!(code);
                }
                if let Some(kind) = output.error_kind {
                    v["error_kind"] = json!(kind.as_str());
                }
                v
            }
            Event::Usage(u) => json!({
                "type": "usage",
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "total_tokens": u.total_tokens,
            }),
            Event::Notice(n) => json!({"type": "notice", "message": n}),
            Event::Warning(w) => json!({"type": "warning", "message": w}),
            Event::ScriptOutput(line) => json!({"type": "script_output", "line": line}),
            Event::ScriptEvent { kind, data } => {
                json!({"type": "script_event", "kind": kind, "data": data})
            }
            Event::Watchdog { verdict, reason } => {
                json!({"type": "watchdog", "verdict": verdict, "reason": reason})
            }
            Event::Approval(ask) => {
                let answer = match self.approver {
                    Approver::Fixed(Answer::Yes | Answer::Always) => "yes",
                    _ => "no",
                };
                let line = json!({
                    "type": "approval",
                    "id": ask.id,
                    "action": ask.action,
                    "reason": ask.reason,
                    "answer": answer,
                });
                self.approver.answer(crate::ui::Style { color: false }, ask);
                line
            }
        };
        self.line(value);
    }
}

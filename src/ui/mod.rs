//! Rendering events for a person or a program. This is the only layer that
//! prints.
//!
//! - [`TextSink`]: human output. In one-shot mode the final answer goes to
//!   stdout and everything else (tool activity, intermediate text,
//!   diagnostics) to stderr; in the REPL answer text streams to stdout as it
//!   arrives.
//! - [`JsonSink`]: one JSON object per line on stdout, for programs.

pub mod repl;
pub mod sanitize;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::protocol::{Event, EventSink, ToolStatus, Usage};

/// Terminal styling; every helper is a no-op when colour is off.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Colour when stderr is a terminal and `NO_COLOR` is unset.
    pub fn detect(no_color: bool) -> Self {
        Style {
            color: !no_color && std::io::stderr().is_terminal(),
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }
    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }
    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }
    pub fn cyan(self, text: &str) -> String {
        self.paint("36", text)
    }
}

/// A one-line summary of a tool call's input, for display: the command,
/// the path, or the compact JSON.
pub fn summarize_input(input: &Value) -> String {
    const MAX: usize = 160;
    let text = match input {
        Value::Object(map) => ["command", "path", "pattern", "query"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))
            .map(str::to_string)
            .unwrap_or_else(|| input.to_string()),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let one_line = text.replace('\n', "⏎");
    if one_line.chars().count() > MAX {
        format!("{}…", one_line.chars().take(MAX).collect::<String>())
    } else {
        one_line
    }
}

/// The first line of a tool's output, shortened, for a failure summary.
fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if line.chars().count() > 160 {
        format!("{}…", line.chars().take(160).collect::<String>())
    } else {
        line.to_string()
    }
}

/// The spinner shown while waiting for the model's first token.
struct Spinner {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// Time between spinner frames.
const SPINNER_FRAME: std::time::Duration = std::time::Duration::from_millis(100);

impl Spinner {
    fn start() -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
            let started = std::time::Instant::now();
            let mut i = 0;
            while !flag.load(Ordering::Relaxed) {
                {
                    let mut e = std::io::stderr().lock();
                    let _ = write!(
                        e,
                        "\r{} waiting for the model… {}s",
                        FRAMES[i % FRAMES.len()],
                        started.elapsed().as_secs()
                    );
                    let _ = e.flush();
                }
                i += 1;
                std::thread::sleep(SPINNER_FRAME);
            }
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
        });
        Spinner { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

#[derive(Default)]
struct TextState {
    /// Answer text streamed to stdout on the current line (REPL mode).
    streamed: bool,
    reasoning_open: bool,
    spinner: Option<Spinner>,
}

/// Human-readable output.
pub struct TextSink {
    style: Style,
    /// Stream answer text to stdout as it arrives (REPL) instead of leaving
    /// the final answer to the caller (one-shot).
    live: bool,
    show_reasoning: bool,
    state: Mutex<TextState>,
}

impl TextSink {
    pub fn new(style: Style, live: bool, show_reasoning: bool) -> Self {
        TextSink {
            style,
            live,
            show_reasoning,
            state: Mutex::new(TextState::default()),
        }
    }

    fn err(&self, line: &str) {
        let mut e = std::io::stderr().lock();
        let _ = writeln!(e, "{line}");
    }

    /// Ends a streamed stdout line before something else is printed.
    fn close_stream(&self, state: &mut TextState) {
        if state.reasoning_open {
            state.reasoning_open = false;
            let _ = writeln!(std::io::stderr());
        }
        if state.streamed {
            state.streamed = false;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out);
            let _ = out.flush();
        }
    }

    /// Prints the usage summary line for a finished turn.
    pub fn usage_line(&self, usage: Usage) {
        if usage.total_tokens > 0 {
            self.err(&self.style.dim(&format!(
                "tokens: {} in, {} out",
                usage.prompt_tokens, usage.completion_tokens
            )));
        }
    }

    pub fn style(&self) -> Style {
        self.style
    }

    /// The line after a REPL turn: tokens used, and the context filled.
    pub fn turn_summary(&self, usage: Usage, context: u64, window: Option<u64>) {
        self.quiet();
        let mut line = String::new();
        if usage.total_tokens > 0 {
            line = format!(
                "tokens: {} in, {} out",
                usage.prompt_tokens, usage.completion_tokens
            );
        }
        if let Some(w) = window.filter(|w| *w > 0) {
            let pct = (context as f64 / w as f64 * 100.0).round();
            line.push_str(&format!(
                "{}context {pct}% of {w}",
                if line.is_empty() { "" } else { " · " }
            ));
        }
        if !line.is_empty() {
            self.err(&self.style.dim(&line));
        }
    }

    /// Stops the spinner, if one runs (the turn ended).
    pub fn quiet(&self) {
        if let Ok(mut state) = self.state.lock()
            && let Some(spinner) = state.spinner.take()
        {
            spinner.stop();
        }
    }

    /// Prints a message on stderr, marked as an error.
    pub fn error(&self, message: &str) {
        self.quiet();
        self.err(&format!("{} {message}", self.style.red("error:")));
    }
}

impl EventSink for TextSink {
    fn emit(&self, event: Event) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if let Some(spinner) = state.spinner.take() {
            spinner.stop();
        }
        match event {
            Event::RequestStarted => {
                if self.live && std::io::stderr().is_terminal() {
                    state.spinner = Some(Spinner::start());
                }
            }
            Event::TextDelta(t) => {
                if self.live {
                    if state.reasoning_open {
                        state.reasoning_open = false;
                        let _ = writeln!(std::io::stderr());
                    }
                    let mut out = std::io::stdout().lock();
                    let _ = write!(out, "{t}");
                    let _ = out.flush();
                    state.streamed = true;
                }
            }
            Event::ReasoningDelta(r) => {
                if self.show_reasoning {
                    let mut e = std::io::stderr().lock();
                    let _ = write!(e, "{}", self.style.dim(&r));
                    state.reasoning_open = true;
                }
            }
            Event::AssistantMessage {
                text,
                has_tool_calls,
            } => {
                if self.live {
                    self.close_stream(&mut state);
                } else {
                    if state.reasoning_open {
                        state.reasoning_open = false;
                        self.err("");
                    }
                    // Text that came with tool calls is narration, not the
                    // answer: it goes to stderr in one-shot mode.
                    if has_tool_calls && !text.trim().is_empty() {
                        self.err(text.trim_end());
                    }
                }
            }
            Event::ToolCall { name, input, .. } => {
                self.close_stream(&mut state);
                self.err(&format!(
                    "{} {} {}",
                    self.style.cyan("→"),
                    self.style.cyan(&name),
                    summarize_input(&input)
                ));
            }
            Event::ToolResult { output, .. } => {
                let detail = match (output.status, output.exit_code) {
                    (ToolStatus::Ok, _) => self.style.green("  ✓ ok"),
                    (ToolStatus::Failed, Some(code)) => self
                        .style
                        .red(&format!("  ✗ exit {code}: {}", first_line(&output.text))),
                    (ToolStatus::Failed, None) => {
                        let kind = output.error_kind.map(|k| k.as_str()).unwrap_or("failed");
                        self.style
                            .red(&format!("  ✗ {kind}: {}", first_line(&output.text)))
                    }
                };
                self.err(&detail);
            }
            Event::Usage(_) | Event::Budget { .. } => {}
            Event::Notice(n) => {
                self.close_stream(&mut state);
                self.err(&self.style.yellow(&format!("note: {n}")));
            }
            Event::Watchdog { verdict, reason } => {
                self.close_stream(&mut state);
                self.err(
                    &self
                        .style
                        .yellow(&format!("watchdog ({verdict}): {reason}")),
                );
            }
        }
    }
}

/// One JSON object per line on stdout.
pub struct JsonSink {
    lock: Mutex<()>,
}

impl Default for JsonSink {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonSink {
    pub fn new() -> Self {
        JsonSink {
            lock: Mutex::new(()),
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
            Event::Watchdog { verdict, reason } => {
                json!({"type": "watchdog", "verdict": verdict, "reason": reason})
            }
        };
        self.line(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_prefer_the_command_or_path() {
        assert_eq!(summarize_input(&json!({"command": "ls\n-la"})), "ls⏎-la");
        assert_eq!(
            summarize_input(&json!({"path": "a.rs", "offset": 3})),
            "a.rs"
        );
        assert_eq!(summarize_input(&json!({"x": 1})), "{\"x\":1}");
        assert!(summarize_input(&json!({"command": "x".repeat(500)})).ends_with('…'));
    }
}

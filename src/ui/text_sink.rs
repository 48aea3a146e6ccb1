//! Human output. In one-shot mode the final answer goes to stdout and
//! everything else (tool activity, intermediate text, diagnostics) to
//! stderr; in the REPL answer text streams to stdout as it arrives.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use super::markdown::Markdown;
use super::spinner::Spinner;
use super::{Style, render};
use crate::protocol::{Answer, ApprovalAsk, Event, EventSink, Usage};

/// How approval questions are answered.
#[derive(Clone, Copy, Debug)]
pub enum Approver {
    /// Ask the person at the terminal (the REPL).
    Terminal,
    /// Nobody to ask: answer this (one-shot mode: `Yes` with `--yes`,
    /// otherwise `Unattended`).
    Fixed(Answer),
}

impl Approver {
    /// Answers `ask`, now or from a thread that asks the person.
    pub fn answer(self, style: Style, ask: ApprovalAsk) {
        match self {
            Approver::Fixed(answer) => {
                ask.reply.send(answer);
            }
            Approver::Terminal => super::repl::asker::ask_in_background(style, ask),
        }
    }
}

#[derive(Default)]
struct TextState {
    /// Answer text on stdout's current line, not yet ended by a newline.
    mid_line: bool,
    /// The answer being streamed, rendered line by line.
    markdown: Markdown,
    reasoning_open: bool,
    spinner: Option<Spinner>,
    /// The last tool's name and whole output, for `/last`.
    last_output: Option<(String, String)>,
    /// The tool announced and about to run, until it starts.
    running: Option<String>,
    /// The model's plan as last emitted, for `/plan`.
    plan: Option<serde_json::Value>,
}

pub struct TextSink {
    style: Style,
    /// Stream answer text to stdout as it arrives (REPL) instead of leaving
    /// the final answer to the caller (one-shot).
    live: bool,
    show_reasoning: bool,
    approver: Approver,
    state: Mutex<TextState>,
}

impl TextSink {
    pub fn new(style: Style, live: bool, show_reasoning: bool, approver: Approver) -> Self {
        let sink = TextSink {
            style,
            live,
            show_reasoning,
            approver,
            state: Mutex::new(TextState::default()),
        };
        if let Ok(mut state) = sink.state.lock() {
            state.markdown = sink.markdown();
        }
        sink
    }

    fn err(&self, line: &str) {
        let mut e = std::io::stderr().lock();
        let _ = writeln!(e, "{line}");
    }

    /// A renderer for the next answer: styled on a colour terminal.
    fn markdown(&self) -> Markdown {
        if self.style.color && std::io::stdout().is_terminal() {
            Markdown::styled()
        } else {
            Markdown::plain()
        }
    }

    /// Ends a streamed answer before something else is printed: its last
    /// line rendered, and a newline unless it ended with one.
    fn close_stream(&self, state: &mut TextState) {
        if let Some(spinner) = state.spinner.take() {
            spinner.stop();
        }
        if state.reasoning_open {
            state.reasoning_open = false;
            let _ = writeln!(std::io::stderr());
        }
        let rest = state.markdown.finish();
        if !rest.is_empty() {
            state.mid_line = true;
        }
        if state.mid_line {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{rest}");
            let _ = out.flush();
            state.mid_line = false;
        }
        state.markdown = self.markdown();
    }

    /// Stops the spinner and ends a streamed line (the turn ended).
    pub fn quiet(&self) {
        if let Ok(mut state) = self.state.lock() {
            self.close_stream(&mut state);
        }
    }

    /// Prints the usage summary line for a finished one-shot task.
    pub fn usage_line(&self, usage: Usage) {
        if let Some(line) = render::turn_summary(usage, 0, None) {
            self.err(&self.style.dim(&line));
        }
    }

    pub fn style(&self) -> Style {
        self.style
    }

    /// The line after a REPL turn: tokens used, and the context filled.
    pub fn turn_summary(&self, usage: Usage, context: u64, window: Option<u64>) {
        self.quiet();
        if let Some(line) = render::turn_summary(usage, context, window) {
            self.err(&self.style.dim(&line));
        }
    }

    /// Forgets the plan (a new conversation).
    pub fn forget_plan(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.plan = None;
        }
    }

    /// The model's plan as last shown (for `/plan`).
    pub fn plan(&self) -> Option<serde_json::Value> {
        self.state.lock().ok().and_then(|s| s.plan.clone())
    }

    /// Prints a line on stderr as it is, on its own line.
    pub fn line(&self, text: &str) {
        self.quiet();
        self.err(text);
    }

    /// Prints a message on stderr, marked as an error, on its own line
    /// (control characters from a server's or tool's text made visible).
    pub fn error(&self, message: &str) {
        self.quiet();
        self.err(&render::error(
            self.style,
            &super::sanitize::visible(message),
        ));
    }

    /// Prints a warning on stderr, on its own line.
    pub fn warning(&self, message: &str) {
        self.quiet();
        self.err(&render::warning(
            self.style,
            &super::sanitize::visible(message),
        ));
    }

    /// The last tool's name and whole output (for `/last`).
    pub fn last_output(&self) -> Option<(String, String)> {
        self.state.lock().ok().and_then(|s| s.last_output.clone())
    }

    /// Prints a dim informational line on stderr.
    pub fn info(&self, message: &str) {
        self.quiet();
        self.err(&self.style.dim(message));
    }
}

impl EventSink for TextSink {
    fn emit(&self, event: Event) {
        // Nothing from the model, a tool or the server reaches the
        // terminal with its control characters live.
        let event = super::sanitize::visible_event(event);
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if let Some(spinner) = state.spinner.take() {
            spinner.stop();
        }
        match event {
            Event::RequestStarted => {
                if self.live && std::io::stderr().is_terminal() {
                    state.spinner = Some(Spinner::start("waiting for the model".into()));
                }
            }
            Event::TextDelta(t) => {
                if self.live {
                    if state.reasoning_open {
                        state.reasoning_open = false;
                        let _ = writeln!(std::io::stderr());
                    }
                    let shown = state.markdown.push(&t);
                    let mut out = std::io::stdout().lock();
                    let _ = write!(out, "{shown}");
                    let _ = out.flush();
                    if !shown.is_empty() {
                        state.mid_line = !shown.ends_with('\n');
                    }
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
                    render::summarize_input(&input)
                ));
                state.running = Some(name);
            }
            Event::ToolRunning { live, .. } => {
                if let Some(name) = state.running.take()
                    && self.live
                    && std::io::stderr().is_terminal()
                {
                    state.spinner = Some(Spinner::watching(
                        format!("running {name}"),
                        Some(live),
                        self.style,
                    ));
                }
            }
            Event::ToolResult { name, output, .. } => {
                self.err(&render::tool_result(self.style, &output));
                if let Some(diff) = &output.diff {
                    // What a file tool changed, in both modes.
                    for line in render::diff(self.style, diff) {
                        self.err(&line);
                    }
                } else if self.live {
                    for line in render::preview(&output) {
                        self.err(&self.style.dim(&line));
                    }
                }
                state.last_output = Some((name, output.text));
            }
            Event::Usage(_) | Event::Budget { .. } => {}
            Event::Notice(n) => {
                self.close_stream(&mut state);
                self.err(&self.style.yellow(&format!("note: {n}")));
            }
            Event::Warning(w) => {
                self.close_stream(&mut state);
                self.err(&render::warning(self.style, &w));
            }
            Event::ScriptOutput(line) => {
                self.close_stream(&mut state);
                self.err(&self.style.dim(&format!("[script] {line}")));
            }
            Event::ScriptEvent { kind, data } => {
                self.close_stream(&mut state);
                if kind == "plan" {
                    for line in render::plan(self.style, &data) {
                        self.err(&line);
                    }
                    state.plan = Some(data);
                } else {
                    self.err(&self.style.dim(&render::script_event(&kind, &data)));
                }
            }
            // A stop is reported once, by whoever ends the turn.
            Event::Watchdog { verdict, .. } if verdict == "stop" => {}
            Event::Watchdog { verdict, reason } => {
                self.close_stream(&mut state);
                self.err(
                    &self
                        .style
                        .yellow(&format!("watchdog ({verdict}): {reason}")),
                );
            }
            Event::Approval(ask) => {
                self.close_stream(&mut state);
                drop(state);
                self.approver.answer(self.style, ask);
            }
        }
    }
}

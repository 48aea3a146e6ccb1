//! The renderer of `agent demo`: one line per turn, the watchdog's
//! interventions and budget renewals highlighted.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

use super::Style;
use crate::protocol::{Event, EventSink, ToolStatus};

/// Prints what happens, turn by turn.
pub struct DemoSink {
    style: Style,
    verbose_turns: bool,
    turn: AtomicU32,
    last_limit: AtomicU32,
}

impl DemoSink {
    /// `verbose_turns`: show every turn (else only the first two).
    pub fn new(style: Style, verbose_turns: bool) -> Self {
        DemoSink {
            style,
            verbose_turns,
            turn: AtomicU32::new(0),
            last_limit: AtomicU32::new(0),
        }
    }

    fn line(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
    }
}

impl EventSink for DemoSink {
    fn emit(&self, event: Event) {
        match event {
            Event::ToolCall { name, input, .. } => {
                let n = self.turn.fetch_add(1, Ordering::Relaxed) + 1;
                if self.verbose_turns || n <= 2 {
                    self.line(&format!(
                        "  turn {n:>2}: {name} {}",
                        super::summarize_input(&input)
                    ));
                }
            }
            Event::ToolResult { output, .. }
                if output.status == ToolStatus::Failed && self.verbose_turns =>
            {
                self.line(&self.style.dim(&format!(
                    "           failed: {}",
                    crate::watchdog::snippet(&output.text)
                )));
            }
            Event::Budget { used, limit } => {
                let before = self.last_limit.swap(limit, Ordering::Relaxed);
                if before != 0 && before != limit {
                    self.line(&self.style.green(&format!(
                        "  turn {used:>2}: progress — budget renewed {before} → {limit}"
                    )));
                }
            }
            Event::Watchdog { verdict, reason } => {
                let n = self.turn.load(Ordering::Relaxed);
                let text = format!("  turn {n:>2}: watchdog {verdict}: {reason}");
                let painted = match verdict.as_str() {
                    "stop" => self.style.red(&text),
                    _ => self.style.yellow(&text),
                };
                self.line(&painted);
            }
            _ => {}
        }
    }
}

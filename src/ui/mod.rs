//! The only layer that prints. It renders [`Event`]s for people and
//! programs, answers the policy's approval questions, and runs the REPL.
//!
//! | file | owns |
//! |---|---|
//! | `render` | pure functions from events and outputs to the lines shown |
//! | `text_sink` | [`TextSink`]: human output on a terminal or a pipe |
//! | `json_sink` | [`JsonSink`]: one JSON object per line, for programs |
//! | `spinner` | the spinner while the model thinks |
//! | `report` | lines for the person from commands that are not a turn |
//! | `demo` | the renderer of `agent demo` |
//! | `undo` | `/undo`, `/rewind` and `agent undo`: lists, restores, conflicts |
//! | `repl` | the REPL: the editor loop, the command table, the approval question |
//!
//! [`Event`]: crate::protocol::Event

pub mod demo;
pub mod json_sink;
pub mod markdown;
pub mod render;
pub mod repl;
pub mod report;
pub mod sanitize;
mod spinner;
pub mod text_sink;
pub mod undo;

use std::io::IsTerminal;

pub use json_sink::JsonSink;
pub use render::summarize_input;
pub use text_sink::{Approver, TextSink};

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

/// Columns of the terminal on stderr (80 when it is not a terminal).
pub fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stderr())
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|w| *w > 0)
        .unwrap_or(80)
}

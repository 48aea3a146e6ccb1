//! The spinner shown on stderr while waiting for the model's first token,
//! and while a tool runs: a frame, what it waits for, the seconds so far
//! and, for a tool, the last line it printed.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Style;
use crate::protocol::LiveLine;

/// Time between spinner frames.
const FRAME: std::time::Duration = std::time::Duration::from_millis(100);

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Columns between the elapsed time and a tool's last line.
const GAP: &str = "  ";

pub struct Spinner {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Spinner {
    /// Starts spinning with `label` ("waiting for the model").
    pub fn start(label: String) -> Spinner {
        Spinner::watching(label, None, Style { color: false })
    }

    /// Starts spinning with `label` and, after the time, the line `live`
    /// holds (a running tool's last output line, dimmed by `style`).
    pub fn watching(label: String, live: Option<LiveLine>, style: Style) -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let mut i = 0;
            while !flag.load(Ordering::Relaxed) {
                let last = live.as_ref().map(LiveLine::get).unwrap_or_default();
                let (head, tail) = frame_parts(
                    FRAMES[i % FRAMES.len()],
                    &label,
                    started.elapsed().as_secs(),
                    &last,
                    super::terminal_width(),
                );
                let shown = match tail {
                    Some(tail) => format!("{head}{GAP}{}", style.dim(&tail)),
                    None => head,
                };
                {
                    let mut e = std::io::stderr().lock();
                    let _ = write!(e, "\r\x1b[2K{shown}");
                    let _ = e.flush();
                }
                i += 1;
                std::thread::sleep(FRAME);
            }
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
        });
        Spinner { stop, thread }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// One frame, plain: `⠋ running run_shell… 3s  compiling foo`, the last
/// line made visible (no control characters) and the whole cut to fit in
/// `width` columns so it never wraps (a wrapped line would not be cleared
/// by the next frame). Pure.
#[cfg(test)]
fn frame_line(frame: &str, label: &str, secs: u64, last: &str, width: usize) -> String {
    match frame_parts(frame, label, secs, last, width) {
        (head, Some(tail)) => format!("{head}{GAP}{tail}"),
        (head, None) => head,
    }
}

/// [`frame_line`] as the spinner's words and the tool's output, so the
/// output can be dimmed.
fn frame_parts(
    frame: &str,
    label: &str,
    secs: u64,
    last: &str,
    width: usize,
) -> (String, Option<String>) {
    let head = format!("{frame} {label}… {secs}s");
    let last = super::sanitize::visible_line(last.trim());
    let room = width
        .saturating_sub(1)
        .saturating_sub(head.chars().count() + GAP.len());
    if last.is_empty() || room < 8 {
        return (
            crate::text::shorten(&head, width.saturating_sub(2).max(1)),
            None,
        );
    }
    (head, Some(crate::text::shorten(&last, room - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_shows_the_time_and_the_last_line() {
        assert_eq!(
            frame_line("⠋", "running run_shell", 3, "  Compiling foo v0.1  ", 80),
            "⠋ running run_shell… 3s  Compiling foo v0.1"
        );
        assert_eq!(
            frame_line("⠋", "waiting for the model", 0, "", 80),
            "⠋ waiting for the model… 0s"
        );
    }

    #[test]
    fn a_frame_never_wraps_and_shows_no_control_characters() {
        let long = "x".repeat(300);
        let line = frame_line("⠋", "running run_shell", 12, &long, 60);
        assert!(line.chars().count() < 60, "{line}");
        assert!(line.ends_with('…'), "{line}");
        let line = frame_line("⠋", "running run_shell", 1, "a\u{1b}[2Jb\u{7}", 80);
        assert!(
            !line.contains('\u{1b}') && !line.contains('\u{7}'),
            "{line:?}"
        );
        // Too narrow for the output: the time alone, still within the width.
        let line = frame_line("⠋", "running run_shell", 1, "output", 30);
        assert!(
            !line.contains("output") && line.chars().count() < 30,
            "{line}"
        );
    }
}

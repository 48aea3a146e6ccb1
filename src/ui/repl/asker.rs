//! The approval question at the terminal, while a turn runs: yes, no, or
//! always (for this command, for the rest of the session). It runs on a
//! thread of its own so the turn keeps streaming events; it gives up on
//! Ctrl+C so it never swallows the next line typed at the prompt.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::protocol::{Answer, ApprovalAsk};
use crate::ui::Style;

/// Ctrl+C presses seen while a turn ran; an open approval question gives
/// up when this changes.
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);

/// How often a waiting approval question checks for an interrupt.
const ASK_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Counts a Ctrl+C during a turn (the REPL's interrupt watcher calls it).
pub fn interrupted() {
    INTERRUPTS.fetch_add(1, Ordering::Relaxed);
}

/// Reads the answer to an approval question: `y`, `a` (always); anything
/// else is no.
pub fn parse_answer(line: &str) -> Answer {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Yes,
        "a" | "always" => Answer::Always,
        _ => Answer::No,
    }
}

/// The question as shown: the whole command with its control characters
/// made visible, wrapped to the terminal, then the choices.
pub fn question(style: Style, ask: &ApprovalAsk) -> String {
    let width = crate::ui::terminal_width();
    // A write shows what it would change first.
    let preview: String = ask
        .preview
        .as_deref()
        .map(|d| {
            crate::ui::render::diff(style, d)
                .into_iter()
                .map(|l| l + "\n")
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{preview}{} {}  Allow? [y]es / [N]o / [a]lways for this command: ",
        style.yellow("approval:"),
        crate::ui::sanitize::approval_question(ask, width),
    )
}

/// Asks on a thread of its own and sends the answer on `ask.reply`.
pub fn ask_in_background(style: Style, ask: ApprovalAsk) {
    let question = question(style, &ask);
    let asked_at = INTERRUPTS.load(Ordering::Relaxed);
    std::thread::spawn(move || {
        let answer = read_answer(&question, asked_at);
        ask.reply.send(answer);
    });
}

fn read_answer(question: &str, asked_at: u64) -> Answer {
    use std::io::{BufRead, Write};
    use std::os::fd::AsFd;
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{question}");
    let _ = err.flush();
    drop(err);
    let stdin = std::io::stdin();
    loop {
        if INTERRUPTS.load(Ordering::Relaxed) != asked_at {
            return Answer::No;
        }
        let mut fds = [nix::poll::PollFd::new(
            stdin.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let timeout =
            nix::poll::PollTimeout::try_from(ASK_POLL).unwrap_or(nix::poll::PollTimeout::NONE);
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => {
                let mut line = String::new();
                return match stdin.lock().read_line(&mut line) {
                    Ok(0) | Err(_) => Answer::No,
                    Ok(_) => parse_answer(&line),
                };
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Answer::No,
        }
    }
}

//! What the person typed while a turn ran. The terminal is in its usual
//! line mode then, so a line ended with Enter waits complete in the
//! terminal's buffer. Left there, the line editor would read that Enter
//! as Ctrl-J (the terminal turns Enter into a newline in line mode), which
//! inserts a newline instead of sending, and the request would sit
//! unsent. Read here instead, it is sent as if typed at the prompt. A line
//! not yet ended stays for the editor, which shows it for editing.

use std::io::BufRead;
use std::os::fd::AsFd;

use super::commands::Input;

/// Most lines read at once (a paste of a long file while a turn ran).
const MAX_LINES: usize = 10_000;

/// The lines typed ahead and ended with Enter, read without waiting;
/// none when the input is not a terminal in line mode.
pub fn drain() -> Vec<String> {
    let stdin = std::io::stdin();
    let line_mode = rustix::termios::tcgetattr(stdin.as_fd())
        .is_ok_and(|t| t.local_modes.contains(rustix::termios::LocalModes::ICANON));
    if !line_mode {
        return Vec::new();
    }
    let mut lines = Vec::new();
    while lines.len() < MAX_LINES && pending(&stdin) {
        let mut line = String::new();
        // In line mode one read returns at most one line, so nothing
        // past it is taken from the editor.
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => lines.push(clean(line.trim_end_matches(['\n', '\r']))),
        }
    }
    lines
}

/// A line without what keys other than text leave in it in line mode:
/// escape sequences (an arrow key is `ESC [ A` there) and other control
/// characters; tabs stay.
pub fn clean(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: parameters and intermediates, then one final byte.
            if chars.next_if_eq(&'[').is_some() || chars.next_if_eq(&'O').is_some() {
                while chars
                    .next_if(|c| matches!(c, '0'..='?' | ' '..='/'))
                    .is_some()
                {}
            }
            chars.next();
        } else if c == '\t' || !c.is_control() {
            out.push(c);
        }
    }
    out
}

/// Whether a complete line can be read now.
fn pending(stdin: &std::io::Stdin) -> bool {
    let mut fds = [nix::poll::PollFd::new(
        stdin.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO), Ok(n) if n > 0)
}

/// The inputs the typed-ahead lines make, in order: a line that is a
/// slash command is one input on its own; the lines between commands are
/// one message (a paste of several lines stays one request; a pasted
/// `/etc/hosts` is text), blank lines at its ends dropped.
pub fn inputs(lines: Vec<String>) -> Vec<String> {
    let mut inputs = Vec::new();
    let mut message: Vec<String> = Vec::new();
    let flush = |message: &mut Vec<String>, inputs: &mut Vec<String>| {
        let text = message.join("\n");
        let text = text.trim_matches('\n');
        if !text.trim().is_empty() {
            inputs.push(text.to_string());
        }
        message.clear();
    };
    for line in lines {
        let command = !matches!(
            super::commands::parse(&line),
            Input::Message(_) | Input::Unknown(_) | Input::Empty
        );
        if command {
            flush(&mut message, &mut inputs);
            inputs.push(line.trim().to_string());
        } else {
            message.push(line);
        }
    }
    flush(&mut message, &mut inputs);
    inputs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn lines_between_commands_are_one_message() {
        assert_eq!(inputs(lines(&["fix the test"])), ["fix the test"]);
        assert_eq!(
            inputs(lines(&["", "first line", "", "second line", ""])),
            ["first line\n\nsecond line"]
        );
        assert_eq!(
            inputs(lines(&["/undo", "then this", "and this", "/tools"])),
            ["/undo", "then this\nand this", "/tools"]
        );
        // A slash inside a message (a path pasted on its own line) is
        // part of the message.
        assert_eq!(
            inputs(lines(&["look at", "/etc/hosts"])),
            ["look at\n/etc/hosts"]
        );
        assert!(inputs(lines(&["", "  "])).is_empty());
        assert!(inputs(Vec::new()).is_empty());
    }

    #[test]
    fn keys_other_than_text_leave_nothing() {
        assert_eq!(clean("fix\x1b[A the\x1b[1;5C test"), "fix the test");
        assert_eq!(clean("a\x1bOb\x07c\td"), "ac\td");
        assert_eq!(clean("日本\x1b"), "日本");
        assert_eq!(clean("plain"), "plain");
    }
}

//! What the person typed while a turn ran. The terminal is in its usual
//! line mode then, so a line ended with Enter waits complete in the
//! terminal's buffer. Left there, the line editor would read that Enter
//! as Ctrl-J (the terminal turns Enter into a newline in line mode), which
//! inserts a newline instead of sending, and the request would sit
//! unsent. Read here instead, it is sent as if typed at the prompt. A line
//! not yet ended stays for the editor, which shows it for editing.
//!
//! An Enter pressed after that read but before the editor takes the
//! terminal would still become Ctrl-J, so from the read until the editor
//! is done, [`hold_enter`] keeps the terminal from turning Enter into a
//! newline: such a line stays unended in line mode, and the editor, once
//! it takes the terminal, reads its Enter as Enter.

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

/// Keeps Enter a carriage return (`ICRNL` off) on the terminal at `fd`
/// until dropped, when it is restored; `None` when `fd` is not a terminal
/// in line mode translating Enter, with nothing changed.
pub fn hold_enter<Fd: AsFd>(fd: Fd) -> Option<EnterHeld<Fd>> {
    use rustix::termios::{InputModes, LocalModes, OptionalActions, tcgetattr, tcsetattr};
    let mut modes = tcgetattr(fd.as_fd()).ok()?;
    if !modes.local_modes.contains(LocalModes::ICANON)
        || !modes.input_modes.contains(InputModes::ICRNL)
    {
        return None;
    }
    modes.input_modes.remove(InputModes::ICRNL);
    tcsetattr(fd.as_fd(), OptionalActions::Now, &modes).ok()?;
    Some(EnterHeld { fd })
}

/// The terminal with Enter held as a carriage return; see [`hold_enter`].
pub struct EnterHeld<Fd: AsFd> {
    fd: Fd,
}

impl<Fd: AsFd> Drop for EnterHeld<Fd> {
    fn drop(&mut self) {
        use rustix::termios::{InputModes, OptionalActions, tcgetattr, tcsetattr};
        // The editor restored the modes it found, so only ICRNL differs.
        if let Ok(mut modes) = tcgetattr(self.fd.as_fd()) {
            modes.input_modes.insert(InputModes::ICRNL);
            let _ = tcsetattr(self.fd.as_fd(), OptionalActions::Now, &modes);
        }
    }
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

    /// What the terminal at `tty` holds for its reader, read as the line
    /// editor reads it (line mode off), waiting for `want` bytes.
    fn read_raw(tty: &std::fs::File, want: usize) -> Vec<u8> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let line_mode = tcgetattr(tty).unwrap();
        let mut raw = line_mode.clone();
        raw.local_modes
            .remove(LocalModes::ICANON | LocalModes::ECHO);
        tcsetattr(tty, OptionalActions::Now, &raw).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut got = Vec::new();
        while got.len() < want && std::time::Instant::now() < deadline {
            let mut fds = [nix::poll::PollFd::new(
                tty.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            if matches!(nix::poll::poll(&mut fds, 100u16), Ok(n) if n > 0) {
                let mut buf = [0u8; 64];
                let n = rustix::io::read(tty, &mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
        }
        tcsetattr(tty, OptionalActions::Now, &line_mode).unwrap();
        got
    }

    #[test]
    fn an_enter_pressed_while_held_reaches_the_editor_as_enter() {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        use rustix::termios::{InputModes, tcgetattr};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        // A new terminal is in line mode and turns Enter into a newline.
        rustix::io::write(&master, b"before\r").unwrap();
        assert_eq!(read_raw(&tty, 7), b"before\n");

        let held = hold_enter(&tty).expect("a terminal in line mode");
        // Typed while held: the Enter stays a carriage return, which does
        // not end a line in line mode, and the editor reads it as Enter.
        rustix::io::write(&master, b"/model nope\r").unwrap();
        assert_eq!(read_raw(&tty, 12), b"/model nope\r");
        drop(held);
        assert!(
            tcgetattr(&tty)
                .unwrap()
                .input_modes
                .contains(InputModes::ICRNL)
        );
        rustix::io::write(&master, b"after\r").unwrap();
        assert_eq!(read_raw(&tty, 6), b"after\n");
    }

    #[test]
    fn nothing_is_held_on_what_is_not_a_terminal() {
        let file = tempfile::tempfile().unwrap();
        assert!(hold_enter(&file).is_none());
    }

    #[test]
    fn keys_other_than_text_leave_nothing() {
        assert_eq!(clean("fix\x1b[A the\x1b[1;5C test"), "fix the test");
        assert_eq!(clean("a\x1bOb\x07c\td"), "ac\td");
        assert_eq!(clean("日本\x1b"), "日本");
        assert_eq!(clean("plain"), "plain");
    }
}

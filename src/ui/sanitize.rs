//! A screen that cannot lie: every string from the model or a tool is shown
//! with its control characters made visible before it reaches a terminal.
//!
//! A `\r` returns the cursor and lets later text overwrite earlier text; an
//! ESC sequence can recolour, move the cursor, hide text, set the title,
//! write the clipboard (OSC 52) or make a link; a bidi override reorders
//! what is shown; a zero-width character hides a difference. Any of these
//! lets the screen show one command while another runs. [`visible`]
//! replaces each with an escape the person can read (`\r`, `\x1b[31m`,
//! `\u{202e}`); `\n` and `\t` stay. The agent's own styling is added after
//! this, by the renderer.
//!
//! [`approval_question`] formats what the person approves: the whole
//! command, wrapped and never cut, and the programs it runs.

use std::borrow::Cow;

use crate::runtime::command;
use crate::runtime::policy::Action;

/// Whether a character would be invisible or act on the terminal.
fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        // bidi embeddings, overrides and isolates, and the marks
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}'
        // zero-width and invisible formatting characters
        | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' | '\u{180e}'
        // line and paragraph separators break lines on some terminals
        | '\u{2028}' | '\u{2029}'
    )
}

/// The text with every control, bidi and zero-width character replaced by
/// a visible escape. `\n` and `\t` are kept. Borrowed when nothing changes.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_hidden(c) {
            out.push(c);
            continue;
        }
        match c {
            '\r' => out.push_str("\\r"),
            '\u{0}'..='\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            _ => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// Like [`visible`], and `\n` and `\t` too: for one-line places (a tool
/// name, a path, a title).
pub fn visible_line(text: &str) -> String {
    visible(text).replace('\n', "\\n").replace('\t', "\\t")
}

/// Shortest width the question wraps to, whatever the terminal says.
pub const MIN_WRAP_WIDTH: usize = 20;

/// Indent of the command's lines under the question.
const INDENT: &str = "    ";

/// The approval question: the reason, the whole command (wrapped to
/// `width` columns, never cut; its own lines kept), and the programs the
/// parser found. Everything from the model is made [`visible`].
pub fn approval_question(
    action: &Action,
    reason: &str,
    programs: &[String],
    width: usize,
) -> String {
    let width = width.max(MIN_WRAP_WIDTH).saturating_sub(INDENT.len());
    let mut out = String::new();
    let (what, body) = match action {
        Action::Shell { command } => ("Run this command?", command.as_str()),
        Action::Write { path } => ("Write this file?", path.to_str().unwrap_or("")),
    };
    let body = match action {
        Action::Write { path } => visible_line(&path.display().to_string()),
        Action::Shell { .. } => visible(body).into_owned(),
    };
    out.push_str(what);
    out.push('\n');
    for line in body.split('\n') {
        for chunk in wrap(&line.replace('\t', "    "), width) {
            out.push_str(INDENT);
            out.push_str(&chunk);
            out.push('\n');
        }
    }
    if !programs.is_empty() {
        let names: Vec<String> = programs.iter().map(|p| visible_line(p)).collect();
        out.push_str(&format!("  runs: {}\n", names.join(", ")));
    }
    out.push_str(&format!("  why: {}\n", visible_line(reason)));
    out
}

/// [`approval_question`] with the programs parsed from the action.
pub fn approval_question_for(
    action: &Action,
    reason: &str,
    ctx: &command::Context,
    width: usize,
) -> String {
    let programs = match action {
        Action::Shell { command } => command::parse(command, ctx).programs(),
        Action::Write { .. } => Vec::new(),
    };
    approval_question(action, reason, &programs, width)
}

/// Splits a line into pieces of at most `width` characters, at spaces when
/// it can; every character is kept.
fn wrap(line: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = line.chars().collect();
    let mut start = 0;
    while chars.len() - start > width {
        let window = &chars[start..start + width];
        // Break after the last space in the window, if any.
        let cut = window
            .iter()
            .rposition(|c| *c == ' ')
            .filter(|p| *p > 0)
            .map(|p| p + 1)
            .unwrap_or(width);
        out.push(chars[start..start + cut].iter().collect());
        start += cut;
    }
    out.push(chars[start..].iter().collect());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_obeyed() {
        let golden = [
            ("plain text", "plain text"),
            ("tabs\tand\nnewlines", "tabs\tand\nnewlines"),
            ("ls\rrm -rf ~", "ls\\rrm -rf ~"),
            ("\x1b[2K\x1b[1Gls", "\\x1b[2K\\x1b[1Gls"),
            ("\x1b]52;c;cm0gLXJmIH4=\x07", "\\x1b]52;c;cm0gLXJmIH4=\\x07"),
            ("\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\"),
            (
                "\x1b]8;;https://evil\x1b\\ok\x1b]8;;\x1b\\",
                "\\x1b]8;;https://evil\\x1b\\ok\\x1b]8;;\\x1b\\",
            ),
            ("a\x00b\x08c\x7fd", "a\\x00b\\x08c\\x7fd"),
            ("c1 \u{9b}31m", "c1 \\u{9b}31m"),
            ("safe \u{202e}txt.exe", "safe \\u{202e}txt.exe"),
            ("\u{2066}x\u{2069}", "\\u{2066}x\\u{2069}"),
            ("r\u{200b}m", "r\\u{200b}m"),
            ("\u{feff}bom\u{2060}", "\\u{feff}bom\\u{2060}"),
            ("héllo ✓ 日本", "héllo ✓ 日本"),
        ];
        for (input, want) in golden {
            assert_eq!(visible(input), want, "{input:?}");
        }
        assert!(matches!(visible("ok"), Cow::Borrowed(_)));
        assert_eq!(visible_line("a\nb\tc\r"), "a\\nb\\tc\\r");
    }

    #[test]
    fn the_question_shows_the_whole_command_and_its_programs() {
        let long = format!("echo {} && rm -rf ~", "x".repeat(120));
        let action = Action::Shell {
            command: format!("ls\r{long}"),
        };
        let q = approval_question(&action, "it deletes ~", &["echo".into(), "rm".into()], 40);
        assert!(q.starts_with("Run this command?\n"), "{q}");
        let joined: String = q
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with(INDENT))
            .map(|l| l.trim_start_matches(INDENT))
            .collect();
        assert_eq!(joined, format!("ls\\r{long}"), "cut or changed:\n{q}");
        assert!(q.lines().all(|l| l.chars().count() <= 40), "{q}");
        assert!(
            q.contains("  runs: echo, rm\n") && q.contains("  why: it deletes ~\n"),
            "{q}"
        );
        assert!(!q.contains('\r') && !q.contains('\x1b'));
    }

    #[test]
    fn the_question_lists_parsed_programs() {
        let ctx = command::Context {
            workspace: std::path::Path::new("/w"),
            home: None,
            resolve_program: None,
        };
        let action = Action::Shell {
            command: "cat x | \\sudo /bin/r''m -rf /".into(),
        };
        let q = approval_question_for(&action, "sudo", &ctx, 80);
        assert!(q.contains("runs: cat, sudo, rm"), "{q}");
    }

    #[test]
    fn wrapping_keeps_every_character() {
        for width in 1..12 {
            let line = "abc defgh ijklmnopqrstu v wx";
            let pieces = wrap(line, width);
            assert_eq!(pieces.concat(), line);
            assert!(pieces.iter().all(|p| p.chars().count() <= width));
        }
    }
}

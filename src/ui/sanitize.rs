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

use crate::protocol::{ApprovalAsk, Event};

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

/// The event with every string from the model, a tool, a script or the
/// server made [`visible`], before any of it is printed. Tool names and
/// notices are one-line places ([`visible_line`]); a tool call's input is
/// rebuilt with its strings made visible.
pub fn visible_event(event: Event) -> Event {
    let own = |s: String| match visible(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(o) => o,
    };
    match event {
        Event::TextDelta(t) => Event::TextDelta(own(t)),
        Event::ReasoningDelta(r) => Event::ReasoningDelta(own(r)),
        Event::AssistantMessage {
            text,
            has_tool_calls,
        } => Event::AssistantMessage {
            text: own(text),
            has_tool_calls,
        },
        Event::ToolCall { id, name, input } => Event::ToolCall {
            id,
            name: visible_line(&name),
            input: visible_value(input),
        },
        Event::ToolResult {
            id,
            name,
            mut output,
        } => {
            output.text = own(output.text);
            Event::ToolResult {
                id,
                name: visible_line(&name),
                output,
            }
        }
        Event::Notice(n) => Event::Notice(own(n)),
        Event::Warning(w) => Event::Warning(own(w)),
        Event::ScriptOutput(l) => Event::ScriptOutput(visible_line(&l)),
        Event::ScriptEvent { kind, data } => Event::ScriptEvent {
            kind: visible_line(&kind),
            data: visible_value(data),
        },
        Event::Watchdog { verdict, reason } => Event::Watchdog {
            verdict: visible_line(&verdict),
            reason: own(reason),
        },
        other => other,
    }
}

/// A JSON value with every string (keys too) made [`visible`].
fn visible_value(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(visible(&s).into_owned()),
        Value::Array(items) => Value::Array(items.into_iter().map(visible_value).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (visible_line(&k), visible_value(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Shortest width the question wraps to, whatever the terminal says.
pub const MIN_WRAP_WIDTH: usize = 20;

/// Indent of the command's lines under the question.
const INDENT: &str = "    ";

/// The approval question: the whole command (wrapped to `width` columns,
/// never cut; its own lines kept) or the file to be written, the programs
/// the parser found, the reason, and what "always" would cover.
/// Everything from the model is made [`visible`].
pub fn approval_question(ask: &ApprovalAsk, width: usize) -> String {
    let width = width.max(MIN_WRAP_WIDTH).saturating_sub(INDENT.len());
    let mut out = String::new();
    let (what, body) = match (&ask.command, &ask.path) {
        (Some(command), _) => ("Run this command?", visible(command).into_owned()),
        (None, Some(path)) => ("Write this file?", visible_line(path)),
        (None, None) => ("Allow this?", visible_line(&ask.action)),
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
    if !ask.programs.is_empty() {
        let names: Vec<String> = ask.programs.iter().map(|p| visible_line(p)).collect();
        out.push_str(&format!("  runs: {}\n", names.join(", ")));
    }
    out.push_str(&format!("  why: {}\n", visible_line(&ask.reason)));
    if !ask.scope.is_empty() {
        out.push_str(&format!("  always covers: {}\n", visible_line(&ask.scope)));
    }
    out
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

    fn ask(command: Option<&str>, path: Option<&str>, programs: &[&str]) -> ApprovalAsk {
        ApprovalAsk {
            id: 1,
            action: "act".into(),
            command: command.map(String::from),
            path: path.map(String::from),
            programs: programs.iter().map(|p| p.to_string()).collect(),
            scope: "rm -rf ~ [/home/u]".into(),
            preview: None,
            reason: "it deletes ~".into(),
            reply: crate::protocol::Reply::channel().0,
        }
    }

    #[test]
    fn the_question_shows_the_whole_command_and_its_programs() {
        let long = format!("echo {} && rm -rf ~", "x".repeat(120));
        let command = format!("ls\r{long}");
        let q = approval_question(&ask(Some(&command), None, &["echo", "rm"]), 40);
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
        assert!(q.contains("  always covers: rm -rf ~ [/home/u]\n"), "{q}");
        assert!(!q.contains('\r') && !q.contains('\x1b'));
    }

    #[test]
    fn a_write_question_shows_the_path_on_one_line() {
        let q = approval_question(&ask(None, Some("/w/a\x1b[2Kb\nc"), &[]), 80);
        assert!(
            q.starts_with("Write this file?\n    /w/a\\x1b[2Kb\\nc\n"),
            "{q}"
        );
        assert!(!q.contains("runs:"), "{q}");
    }

    #[test]
    fn events_reach_the_screen_with_controls_visible() {
        let shown = visible_event(Event::ToolCall {
            id: "c1".into(),
            name: "run\x1b]0;t\x07".into(),
            input: serde_json::json!({"command": "ls\rrm -rf ~", "n": 1, "k\x1b": ["\u{202e}"]}),
        });
        let Event::ToolCall { name, input, .. } = shown else {
            panic!("not a tool call");
        };
        assert_eq!(name, "run\\x1b]0;t\\x07");
        assert_eq!(input["command"], "ls\\rrm -rf ~");
        assert_eq!(input["n"], 1);
        assert_eq!(input["k\\x1b"][0], "\\u{202e}");
        let Event::TextDelta(t) = visible_event(Event::TextDelta("a\x1b]52;c;eA==\x07b\n".into()))
        else {
            panic!("not text");
        };
        assert_eq!(t, "a\\x1b]52;c;eA==\\x07b\n");
        let Event::ToolResult { output, .. } = visible_event(Event::ToolResult {
            id: "c1".into(),
            name: "run_shell".into(),
            output: crate::protocol::ToolOutput::ok("done\r\x1b[2Kfake"),
        }) else {
            panic!("not a result");
        };
        assert_eq!(output.text, "done\\r\\x1b[2Kfake");
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

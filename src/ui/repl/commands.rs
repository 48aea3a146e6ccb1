//! The REPL's commands: what a typed line means ([`parse`], pure), the
//! table of slash commands for `/help` and completion, and the line
//! editor's helper (completion, a trailing `\\` continuing the line).

use rustyline::Helper;
use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};

/// What a line typed at the prompt means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A message for the model.
    Message(String),
    Help,
    Tools,
    /// `/mcp` lists the MCP servers, their state and tools.
    Mcp,
    Reload,
    Budget,
    /// `/budget +N`: raise the hard cap by N turns for the next (or
    /// continued) turn.
    RaiseBudget(u32),
    /// `/model` shows the model; `/model NAME` switches to a profile.
    Model(Option<String>),
    Clear,
    Compact,
    /// `/resume` continues the newest saved session; `/resume ID` a given one.
    Resume(Option<String>),
    /// `/sessions` lists the saved conversations of this workspace.
    Sessions,
    /// `/last` shows the last tool's whole output.
    Last,
    /// `/policy` lists the session's "always" approvals; `/policy revoke N`
    /// forgets one.
    Policy(Option<String>),
    /// `/undo [--force]` reverts the newest turn's file changes.
    Undo {
        force: bool,
    },
    /// `/rewind` lists the turns; `/rewind N [--force] [--chat]` reverts
    /// files to before turn N, and with `--chat` the conversation to
    /// before the person's message that turn answered.
    Rewind {
        to: Option<u32>,
        force: bool,
        chat: bool,
    },
    /// `/plan` shows the model's plan.
    Plan,
    Exit,
    /// An unknown slash command, with a hint.
    Unknown(String),
    /// Nothing to do (an empty line).
    Empty,
}

/// The slash commands and what they do, for `/help` and hints.
pub const COMMANDS: &[(&str, &str)] = &[
    ("/help", "show this help"),
    (
        "/tools",
        "list the tools the model can call (script tools marked)",
    ),
    (
        "/mcp",
        "list the MCP servers of mcp.rhai, their state and tools",
    ),
    ("/reload", "reload the scripts from the config dir"),
    (
        "/budget",
        "show the watchdog's budget; /budget +N raises the cap for the next turn",
    ),
    ("/model", "show the model, or switch profile: /model NAME"),
    (
        "/clear",
        "start a new conversation (the old one stays saved)",
    ),
    ("/compact", "summarise older turns now to free context"),
    (
        "/resume",
        "continue a saved conversation: /resume [ID|last]",
    ),
    ("/last", "show the whole output of the last tool call"),
    (
        "/sessions",
        "list the saved conversations of this workspace",
    ),
    (
        "/policy",
        "list this session's \"always\" approvals; /policy revoke N forgets one",
    ),
    (
        "/undo",
        "revert the file changes of the agent's last turn (--force over your later edits)",
    ),
    (
        "/rewind",
        "list the turns that changed files; /rewind N puts files back as before turn N, --chat the conversation too",
    ),
    ("/plan", "show the model's plan"),
    ("/exit", "leave (also Ctrl+D)"),
];

/// Parses one line of input.
pub fn parse(line: &str) -> Input {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return Input::Empty;
    }
    if !trimmed.starts_with('/') || trimmed.starts_with("//") {
        return Input::Message(trimmed.to_string());
    }
    let command = trimmed.split_whitespace().next().unwrap_or("");
    match command {
        "/help" | "/?" => Input::Help,
        "/tools" => Input::Tools,
        "/mcp" => Input::Mcp,
        "/reload" => Input::Reload,
        "/budget" => match trimmed.split_whitespace().nth(1) {
            None => Input::Budget,
            Some(arg) => parse_raise(arg),
        },
        "/model" => Input::Model(trimmed.split_whitespace().nth(1).map(str::to_string)),
        "/clear" => Input::Clear,
        "/compact" => Input::Compact,
        "/resume" => Input::Resume(trimmed.split_whitespace().nth(1).map(str::to_string)),
        "/sessions" => Input::Sessions,
        "/last" => Input::Last,
        "/policy" => Input::Policy(
            trimmed
                .split_once(char::is_whitespace)
                .map(|(_, rest)| rest.trim().to_string())
                .filter(|rest| !rest.is_empty()),
        ),
        "/undo" => {
            let (to, force, chat, bad) = undo_args(trimmed);
            let chat = chat.then(|| "--chat".to_string());
            match bad.or(to.map(|n| n.to_string())).or(chat) {
                Some(word) => Input::Unknown(format!(
                    "/undo takes only --force, not {word}; /rewind N goes further back"
                )),
                None => Input::Undo { force },
            }
        }
        "/rewind" => {
            let (to, force, chat, bad) = undo_args(trimmed);
            match bad {
                Some(word) => Input::Unknown(format!(
                    "/rewind takes a turn number, --force and --chat, not {word}; /rewind lists the turns"
                )),
                None if chat && to.is_none() => Input::Unknown(
                    "/rewind --chat needs the turn to go back to: /rewind N --chat (/rewind lists the turns)"
                        .to_string(),
                ),
                None => Input::Rewind { to, force, chat },
            }
        }
        "/plan" => Input::Plan,
        "/exit" | "/quit" => Input::Exit,
        other => {
            let close = COMMANDS
                .iter()
                .map(|(c, _)| *c)
                .find(|c| c.starts_with(crate::text::first_chars(other, 3)));
            Input::Unknown(match close {
                Some(c) => {
                    format!("unknown command {other}; did you mean {c}? Type /help for the list.")
                }
                None => format!("unknown command {other}; type /help for the list."),
            })
        }
    }
}

/// Most turns one `/budget +N` may add: a typo of extra zeros should not
/// lift the cost guard entirely.
pub const MAX_RAISE: u32 = 10_000;

/// The argument of `/budget +N`.
fn parse_raise(arg: &str) -> Input {
    match arg.strip_prefix('+').unwrap_or(arg).parse::<u32>() {
        Ok(n) if n > 0 && n <= MAX_RAISE => Input::RaiseBudget(n),
        _ => Input::Unknown(format!(
            "/budget takes +N, a number of turns from 1 to {MAX_RAISE} to add to the hard cap (for example /budget +100), not {arg:?}"
        )),
    }
}

/// The arguments of `/undo` and `/rewind`: a turn number, `--force`,
/// `--chat`, and the first word that is none of them.
fn undo_args(line: &str) -> (Option<u32>, bool, bool, Option<String>) {
    let (mut to, mut force, mut chat) = (None, false, false);
    for word in line.split_whitespace().skip(1) {
        match word {
            "--force" | "-f" | "force" => force = true,
            "--chat" | "--conversation" | "chat" => chat = true,
            n if to.is_none() && n.parse::<u32>().is_ok() => to = n.parse().ok(),
            other => return (to, force, chat, Some(other.to_string())),
        }
    }
    (to, force, chat, None)
}

/// Line-editor behaviour: slash-command completion, and a trailing `\`
/// that continues the input on the next line.
pub struct ReplHelper;

impl Completer for ReplHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        Ok((0, complete_command(line.get(..pos).unwrap_or(line))))
    }
}

/// The slash commands that complete `prefix` (empty unless it is a lone
/// word starting with `/`).
pub fn complete_command(prefix: &str) -> Vec<Pair> {
    if !prefix.starts_with('/') || prefix.contains(char::is_whitespace) {
        return Vec::new();
    }
    COMMANDS
        .iter()
        .filter(|(c, _)| c.starts_with(prefix))
        .map(|(c, _)| Pair {
            display: (*c).to_string(),
            replacement: format!("{c} "),
        })
        .collect()
}

impl Hinter for ReplHelper {
    type Hint = String;
}

impl Highlighter for ReplHelper {}

impl Validator for ReplHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        if ctx.input().ends_with('\\') {
            Ok(ValidationResult::Incomplete)
        } else {
            Ok(ValidationResult::Valid(None))
        }
    }
}

impl Helper for ReplHelper {}

/// Joins lines continued with a trailing backslash.
pub fn join_continued(input: &str) -> String {
    input.replace("\\\n", "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_and_continued_lines() {
        let names: Vec<String> = complete_command("/re")
            .into_iter()
            .map(|p| p.display)
            .collect();
        assert_eq!(names, ["/reload", "/resume", "/rewind"]);
        assert!(complete_command("fix /re").is_empty());
        assert_eq!(join_continued("first \\\nsecond"), "first \nsecond");
    }

    #[test]
    fn budget_raises_parse() {
        assert_eq!(parse("/budget"), Input::Budget);
        assert_eq!(parse("/budget +100"), Input::RaiseBudget(100));
        assert_eq!(parse("/budget 50"), Input::RaiseBudget(50));
        for bad in [
            "/budget +0",
            "/budget +x",
            "/budget -5",
            "/budget +99999999",
        ] {
            assert!(
                matches!(parse(bad), Input::Unknown(ref m) if m.contains("/budget takes +N")),
                "{bad}"
            );
        }
    }

    #[test]
    fn slash_commands_and_messages() {
        assert_eq!(parse("  "), Input::Empty);
        assert_eq!(parse("fix the bug"), Input::Message("fix the bug".into()));
        assert_eq!(parse("/reload"), Input::Reload);
        assert_eq!(parse("/quit"), Input::Exit);
        assert_eq!(parse("/model"), Input::Model(None));
        assert_eq!(parse("/resume"), Input::Resume(None));
        assert_eq!(parse("/resume abc"), Input::Resume(Some("abc".into())));
        assert_eq!(parse("/clear"), Input::Clear);
        assert_eq!(
            parse("/model  ollama "),
            Input::Model(Some("ollama".into()))
        );
        assert_eq!(
            parse("// not a command"),
            Input::Message("// not a command".into())
        );
        assert!(
            matches!(parse("/relaod"), Input::Unknown(h) if h.contains("did you mean /reload"))
        );
        assert!(matches!(parse("/xyz"), Input::Unknown(h) if h.contains("/help")));
        // Not an ASCII command word: a hint, not a panic.
        assert!(matches!(parse("/日本"), Input::Unknown(h) if h.contains("/日本")));
        assert!(matches!(parse("/é"), Input::Unknown(_)));
        assert_eq!(parse("/undo"), Input::Undo { force: false });
        assert_eq!(parse("/undo --force"), Input::Undo { force: true });
        assert!(matches!(parse("/undo 3"), Input::Unknown(h) if h.contains("/rewind")));
        assert_eq!(
            parse("/rewind"),
            Input::Rewind {
                to: None,
                force: false,
                chat: false
            }
        );
        assert_eq!(
            parse("/rewind 2 --force"),
            Input::Rewind {
                to: Some(2),
                force: true,
                chat: false
            }
        );
        assert_eq!(
            parse("/rewind 3 --chat"),
            Input::Rewind {
                to: Some(3),
                force: false,
                chat: true
            }
        );
        assert!(
            matches!(parse("/rewind --chat"), Input::Unknown(h) if h.contains("/rewind N --chat"))
        );
        assert!(matches!(parse("/undo --chat"), Input::Unknown(h) if h.contains("--chat")));
        assert!(matches!(parse("/rewind x"), Input::Unknown(_)));
        assert_eq!(parse("/plan"), Input::Plan);
        assert_eq!(parse("/policy"), Input::Policy(None));
        assert_eq!(
            parse("/policy revoke 2"),
            Input::Policy(Some("revoke 2".into()))
        );
    }
}

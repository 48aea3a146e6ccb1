//! The interactive REPL: read a line, run a turn, print as it streams.
//!
//! Slash commands are parsed by the pure [`parse`] function. Before each
//! turn, scripts changed on disk are reloaded (as `/reload` does); a script
//! whose new version fails keeps its last good version.

use std::sync::Arc;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Cmd, Config, Editor, EventHandler, Helper, KeyCode, KeyEvent, Modifiers};
use tokio_util::sync::CancellationToken;

use super::Style;
use super::TextSink;
use crate::agent::{Agent, TurnOutcome};
use crate::cli::exit;
use crate::config::{Overrides, Settings};
use crate::runtime::policy::{Action, Answer, Asker};
use crate::script::{LoadNote, ScriptHost};
use crate::session;
use crate::tools::ToolOrigin;

/// Asks the person at the terminal, while a turn runs: yes, no, or always
/// (for this reason, for the rest of the session).
pub struct TerminalAsker {
    style: Style,
}

impl TerminalAsker {
    pub fn new(style: Style) -> Self {
        TerminalAsker { style }
    }
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

/// Ctrl+C presses seen while a turn ran; an open approval question gives
/// up when this changes, so its reader never swallows the next line.
static INTERRUPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How often a waiting approval question checks for an interrupt.
const ASK_POLL: std::time::Duration = std::time::Duration::from_millis(100);

impl Asker for TerminalAsker {
    fn ask(
        &self,
        action: &Action,
        reason: &str,
    ) -> futures_util::future::BoxFuture<'static, Answer> {
        use std::sync::atomic::Ordering;
        let question = format!(
            "{} the agent wants to {}: {reason}.\n  Allow? [y]es / [N]o / [a]lways for this reason: ",
            self.style.yellow("approval:"),
            action.describe()
        );
        let asked_at = INTERRUPTS.load(Ordering::Relaxed);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                use std::io::{BufRead, Write};
                use std::os::fd::AsFd;
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "{question}");
                let _ = err.flush();
                let stdin = std::io::stdin();
                loop {
                    if INTERRUPTS.load(Ordering::Relaxed) != asked_at {
                        return Answer::No;
                    }
                    let mut fds = [nix::poll::PollFd::new(
                        stdin.as_fd(),
                        nix::poll::PollFlags::POLLIN,
                    )];
                    let timeout = nix::poll::PollTimeout::try_from(ASK_POLL)
                        .unwrap_or(nix::poll::PollTimeout::NONE);
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
            })
            .await
            .unwrap_or(Answer::No)
        })
    }
}

/// What a line typed at the prompt means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A message for the model.
    Message(String),
    Help,
    Tools,
    Reload,
    Budget,
    /// `/model` shows the model; `/model NAME` switches to a profile.
    Model(Option<String>),
    Clear,
    Compact,
    /// `/resume` continues the newest saved session; `/resume ID` a given one.
    Resume(Option<String>),
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
    ("/reload", "reload the scripts from the config dir"),
    ("/budget", "show the watchdog's budget for the current turn"),
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
        "/reload" => Input::Reload,
        "/budget" => Input::Budget,
        "/model" => Input::Model(trimmed.split_whitespace().nth(1).map(str::to_string)),
        "/clear" => Input::Clear,
        "/compact" => Input::Compact,
        "/resume" => Input::Resume(trimmed.split_whitespace().nth(1).map(str::to_string)),
        "/exit" | "/quit" => Input::Exit,
        other => {
            let close = COMMANDS
                .iter()
                .map(|(c, _)| *c)
                .find(|c| c.starts_with(&other[..other.len().min(3)]));
            Input::Unknown(match close {
                Some(c) => {
                    format!("unknown command {other}; did you mean {c}? Type /help for the list.")
                }
                None => format!("unknown command {other}; type /help for the list."),
            })
        }
    }
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
        Ok((0, complete_command(&line[..pos])))
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

/// Two Ctrl+C at the prompt within this long exit.
const DOUBLE_INTERRUPT: std::time::Duration = std::time::Duration::from_secs(2);

fn new_editor() -> rustyline::Result<Editor<ReplHelper, DefaultHistory>> {
    let config = Config::builder()
        .auto_add_history(false)
        .bracketed_paste(true)
        .max_history_size(10_000)?
        .build();
    let mut editor = Editor::with_config(config)?;
    editor.set_helper(Some(ReplHelper));
    // Alt-Enter and Ctrl-J insert a newline instead of sending.
    editor.bind_sequence(
        KeyEvent(KeyCode::Enter, Modifiers::ALT),
        EventHandler::Simple(Cmd::Newline),
    );
    editor.bind_sequence(KeyEvent::ctrl('J'), EventHandler::Simple(Cmd::Newline));
    Ok(editor)
}

/// Runs the REPL until the person exits. Returns the process exit code.
pub fn run(
    rt: &tokio::runtime::Runtime,
    agent: &mut Agent,
    mut host: ScriptHost,
    settings: &Settings,
    overrides: &Overrides,
    asker: Arc<dyn Asker>,
    sink: Arc<TextSink>,
) -> u8 {
    let mut settings = settings.clone();
    let settings = &mut settings;
    let mut editor = match new_editor() {
        Ok(e) => e,
        Err(e) => {
            sink.error(&format!("cannot start the line editor: {e}"));
            return exit::USAGE;
        }
    };
    let history = settings.data_dir.join("history.txt");
    let _ = editor.load_history(&history);
    eprintln!(
        "agent {} — type a task, /help for commands, Ctrl+D to leave.",
        env!("CARGO_PKG_VERSION")
    );
    if agent.history().len() > 1 {
        recap(agent, &sink);
    }
    let mut last_interrupt: Option<std::time::Instant> = None;
    loop {
        let line = match editor.readline("› ") {
            Ok(line) => {
                last_interrupt = None;
                join_continued(&line)
            }
            Err(ReadlineError::Interrupted) => {
                if last_interrupt.is_some_and(|t| t.elapsed() < DOUBLE_INTERRUPT) {
                    return exit::OK;
                }
                last_interrupt = Some(std::time::Instant::now());
                eprintln!("{}", sink.style().dim("(Ctrl+C again to leave, or Ctrl+D)"));
                continue;
            }
            Err(ReadlineError::Eof) => return exit::OK,
            Err(e) => {
                sink.error(&format!("cannot read input: {e}"));
                return exit::USAGE;
            }
        };
        let input = parse(&line);
        if input != Input::Empty {
            let _ = editor.add_history_entry(line.trim());
            if let Some(dir) = history.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = editor.save_history(&history);
        }
        match input {
            Input::Empty => {}
            Input::Exit => return exit::OK,
            Input::Help => {
                for (c, what) in COMMANDS {
                    eprintln!("  {c:<10} {what}");
                }
            }
            Input::Unknown(hint) => sink.error(&hint),
            Input::Tools => {
                for tool in agent.registry().tools() {
                    let mark = if tool.origin() == ToolOrigin::Script {
                        " (script)"
                    } else {
                        ""
                    };
                    let first = crate::watchdog::snippet(&tool.spec().description);
                    eprintln!("  {}{mark}: {first}", tool.spec().name);
                }
            }
            Input::Budget => {
                let (used, limit) = agent.budget();
                eprintln!("  {used} of {limit} turns used in the current turn's budget");
            }
            Input::Reload => reload(agent, &mut host, settings, &asker, true),
            Input::Clear => {
                agent.clear();
                let id = crate::cli::session_id();
                match crate::cli::new_transcript(settings, &id) {
                    Ok(t) => {
                        agent.set_transcript(Some(t));
                        eprintln!("  new conversation (the previous one stays saved)");
                    }
                    Err(e) => {
                        agent.set_transcript(None);
                        sink.error(&format!(
                            "cannot start a new transcript: {e}; this conversation is not saved"
                        ));
                    }
                }
            }
            Input::Compact => {
                let cancel = CancellationToken::new();
                let watcher = interrupt_watcher(rt, &cancel);
                match rt.block_on(agent.compact(&cancel)) {
                    Ok(Some(r)) => eprintln!(
                        "  compacted: {} older messages summarised (about {} → {} tokens)",
                        r.messages_summarised, r.tokens_before, r.tokens_after
                    ),
                    Ok(None) => eprintln!("  nothing to compact yet"),
                    Err(e) => sink.error(&format!("compaction failed: {e}")),
                }
                watcher.abort();
            }
            Input::Resume(which) => {
                match crate::cli::resume_session(settings, which.as_deref().unwrap_or("last")) {
                    Ok((path, loaded)) => {
                        let n = loaded.messages.len();
                        agent.restore(loaded.messages);
                        match crate::agent::transcript::Transcript::append_to(&path) {
                            Ok(t) => agent.set_transcript(Some(t)),
                            Err(e) => {
                                sink.error(&format!("cannot append to {}: {e}", path.display()))
                            }
                        }
                        eprintln!("  resumed {} ({n} messages)", path.display());
                        recap(agent, &sink);
                    }
                    Err(e) => sink.error(&e),
                }
            }
            Input::Model(None) => {
                eprintln!("  model {} at {}", agent.model_name(), settings.base_url)
            }
            Input::Model(Some(name)) => {
                let env = |k: &str| std::env::var(k).ok();
                match session::model_setup(&host, overrides, &env, Some(&name)) {
                    Ok(model) => {
                        agent.set_model(Arc::new(model.client));
                        agent.set_request_options(model.options);
                        *settings = model.settings;
                        eprintln!(
                            "  switched to profile {name}: model {} at {}",
                            settings.model, settings.base_url
                        );
                    }
                    Err(e) => sink.error(&e),
                }
            }
            Input::Message(text) => {
                if host.changed() {
                    reload(agent, &mut host, settings, &asker, false);
                }
                let usage_before = agent.usage();
                let cancel = CancellationToken::new();
                let watcher = interrupt_watcher(rt, &cancel);
                let mut outcome = rt.block_on(agent.run_turn(&text, sink.as_ref(), &cancel));
                watcher.abort();
                while let Ok(TurnOutcome::Stopped { reason, summary }) = &outcome {
                    if let Some(summary) = summary {
                        println!("{summary}");
                    }
                    sink.error(&format!("stopped by the watchdog: {reason}"));
                    match editor.readline("continue with a fresh budget? [y/N] ") {
                        Ok(answer) if answer.trim().eq_ignore_ascii_case("y") => {
                            let cancel = CancellationToken::new();
                            let watcher = interrupt_watcher(rt, &cancel);
                            outcome = rt.block_on(agent.continue_turn(sink.as_ref(), &cancel));
                            watcher.abort();
                        }
                        _ => break,
                    }
                }
                match outcome {
                    Ok(TurnOutcome::Done { .. }) | Ok(TurnOutcome::Stopped { .. }) => {}
                    Ok(TurnOutcome::Cancelled) => {
                        sink.error("interrupted; everything so far is kept")
                    }
                    Err(e) => sink.error(&e.to_string()),
                }
                let now = agent.usage();
                let turn = crate::protocol::Usage {
                    prompt_tokens: now.prompt_tokens - usage_before.prompt_tokens,
                    completion_tokens: now.completion_tokens - usage_before.completion_tokens,
                    total_tokens: now.total_tokens - usage_before.total_tokens,
                };
                sink.turn_summary(turn, agent.context_tokens(), agent.context_window());
            }
        }
    }
}

/// Cancels `cancel` on Ctrl+C while a turn runs.
fn interrupt_watcher(
    rt: &tokio::runtime::Runtime,
    cancel: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let cancel = cancel.clone();
    rt.spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            INTERRUPTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            cancel.cancel();
        }
    })
}

fn reload(
    agent: &mut Agent,
    host: &mut ScriptHost,
    settings: &Settings,
    asker: &Arc<dyn Asker>,
    force: bool,
) {
    let notes = host.reload(force);
    for note in &notes {
        match note {
            LoadNote::Loaded { name, .. } => eprintln!("reloaded {name}"),
            other => eprintln!("warning: {}", other.message().trim_end()),
        }
    }
    let spill_dir = agent.runtime().spill_dir.clone();
    let (runtime, _policy_sandbox, runtime_notes) = session::runtime(
        host,
        settings,
        spill_dir,
        std::env::vars().collect(),
        asker.clone(),
    );
    for note in &runtime_notes {
        eprintln!("warning: {}", note.trim_end());
    }
    let mut runtime = runtime;
    // The sandbox was probed at startup; keep it across reloads.
    runtime.sandbox = agent.runtime().sandbox.clone();
    agent.set_runtime(Arc::new(runtime));
    let setup = session::assemble(host, &settings.workspace, agent_model(settings));
    for note in &setup.notes {
        eprintln!("warning: {}", note.trim_end());
    }
    agent.set_registry(setup.registry);
    agent.set_system_prompt(setup.system_prompt);
    if let Some(w) = setup.watchdog {
        agent.set_watchdog(w);
    }
    if force && notes.is_empty() {
        eprintln!("scripts reloaded; nothing changed");
    }
}

/// Shows the last exchange of a resumed conversation.
fn recap(agent: &Agent, sink: &TextSink) {
    use crate::protocol::{Message, UserSource};
    let last_user = agent.history().iter().rev().find_map(|m| match m {
        Message::User {
            content,
            source: UserSource::Person,
        } => Some(content.clone()),
        _ => None,
    });
    let last_answer = agent.history().iter().rev().find_map(|m| match m {
        Message::Assistant {
            content: Some(c), ..
        } if !c.trim().is_empty() => Some(c.clone()),
        _ => None,
    });
    if let Some(u) = last_user {
        eprintln!(
            "{}",
            sink.style()
                .dim(&format!("  last request: {}", crate::watchdog::snippet(&u)))
        );
    }
    if let Some(a) = last_answer {
        eprintln!(
            "{}",
            sink.style()
                .dim(&format!("  last answer: {}", crate::watchdog::snippet(&a)))
        );
    }
}

fn agent_model(settings: &Settings) -> &str {
    &settings.model
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
        assert_eq!(names, ["/reload", "/resume"]);
        assert!(complete_command("fix /re").is_empty());
        assert_eq!(join_continued("first \\\nsecond"), "first \nsecond");
        assert_eq!(parse_answer(" Y "), Answer::Yes);
        assert_eq!(parse_answer("always"), Answer::Always);
        assert_eq!(parse_answer(""), Answer::No);
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
    }
}

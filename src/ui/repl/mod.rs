//! The interactive REPL: read a line, run a turn, print as it streams.
//!
//! | file | owns |
//! |---|---|
//! | `commands` | what a typed line means (pure), the command table, completion |
//! | `asker` | the approval question at the terminal |
//! | `script_watch` | whether a change to the scripts is applied, or confirmed first |
//!
//! Before each turn, scripts changed on disk are reloaded (as `/reload`
//! does) through the session, the one assembly path; a script whose new
//! version fails keeps its last good version. A change made while a turn
//! ran (maybe by the agent itself) is applied only when the person says so.

pub mod asker;
pub mod commands;
pub mod script_watch;

use std::sync::Arc;

use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{Cmd, Config, Editor, EventHandler, KeyCode, KeyEvent, Modifiers};
use tokio_util::sync::CancellationToken;

use super::TextSink;
use crate::agent::{Agent, TurnOutcome};
use crate::protocol::{Message, Usage, UserSource};
use crate::setup::{Note, Session};
use crate::tools::ToolOrigin;
use crate::ui::sanitize::visible_line;
use crate::ui::undo::Request;
use commands::{COMMANDS, Input, ReplHelper, join_continued, parse};
use script_watch::{Before, ScriptWatch};

/// How the REPL ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The person left (`/exit`, Ctrl+D, Ctrl+C twice).
    Left,
    /// The terminal could not be used; the error was shown.
    Failed,
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

/// Shows setup notes.
pub fn show_notes(sink: &TextSink, notes: &[Note]) {
    for note in notes {
        match note {
            Note::Info(text) => sink.info(text),
            Note::Warning(text) => sink.warning(text),
        }
    }
}

/// Runs the REPL until the person leaves.
pub fn run(
    rt: &tokio::runtime::Runtime,
    agent: &mut Agent,
    session: &mut Session,
    sink: Arc<TextSink>,
) -> End {
    // `/reload` and a changed script restart the MCP servers, which spawn
    // onto the runtime: without its context none would start.
    let _runtime = rt.enter();
    let mut editor = match new_editor() {
        Ok(e) => e,
        Err(e) => {
            sink.error(&format!("cannot start the line editor: {e}"));
            return End::Failed;
        }
    };
    let history = session.data.history();
    let _ = editor.load_history(&history);
    eprintln!(
        "agent {} — type a task, /help for commands, Ctrl+D to leave.",
        env!("CARGO_PKG_VERSION")
    );
    for line in super::render::banner(sink.style(), &session.facts(agent)) {
        eprintln!("{line}");
    }
    if agent.history().len() > 1 {
        recap(agent, &sink);
    }
    let mut last_interrupt: Option<std::time::Instant> = None;
    let mut watch = ScriptWatch::default();
    // A message `/rewind N --chat` took back, offered for editing.
    let mut prefill: Option<String> = None;
    loop {
        let read = match prefill.take() {
            Some(text) => editor.readline_with_initial("› ", (&text, "")),
            None => editor.readline("› "),
        };
        let line = match read {
            Ok(line) => {
                last_interrupt = None;
                join_continued(&line)
            }
            Err(ReadlineError::Interrupted) => {
                if last_interrupt.is_some_and(|t| t.elapsed() < DOUBLE_INTERRUPT) {
                    return End::Left;
                }
                last_interrupt = Some(std::time::Instant::now());
                eprintln!("{}", sink.style().dim("(Ctrl+C again to leave, or Ctrl+D)"));
                continue;
            }
            Err(ReadlineError::Eof) => return End::Left,
            Err(e) => {
                sink.error(&format!("cannot read input: {e}"));
                return End::Failed;
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
            Input::Exit => return End::Left,
            Input::Message(text) => {
                match watch.before_turn(&session.host) {
                    Before::Nothing => {}
                    Before::Reload => show_notes(&sink, &session.reload(agent, false)),
                    Before::Confirm(names) => {
                        let apply = confirm_script_change(&mut editor, &sink, &names);
                        watch.answered(&session.host, apply);
                        if apply {
                            show_notes(&sink, &session.reload(agent, false));
                        }
                    }
                }
                // The MCP servers started in the background; the turn
                // waits for any still starting, so their tools are in it.
                rt.block_on(session.mcp_started());
                show_notes(&sink, &session.refresh_mcp(agent));
                watch.turn_started(&session.host);
                turn(rt, agent, &mut editor, &sink, &text);
                // A server that crashed or was restarted during the turn
                // is said now, not at the next message.
                show_notes(&sink, &session.refresh_mcp(agent));
                watch.turn_ended(&session.host);
            }
            Input::Rewind {
                to: Some(n),
                force,
                chat: true,
            } => prefill = rewind_chat(agent, &sink, n, force),
            other => {
                if other == Input::Reload {
                    watch.reloaded();
                }
                command(rt, agent, session, &sink, other)
            }
        }
    }
}

/// Asks whether to apply scripts that changed while the agent worked.
fn confirm_script_change(
    editor: &mut Editor<ReplHelper, DefaultHistory>,
    sink: &TextSink,
    names: &[&str],
) -> bool {
    sink.warning(&format!(
        "{} changed in the config dir while the agent was working; the change may be the agent's own. Look at it before you apply it.",
        names.join(", ")
    ));
    let apply = matches!(
        editor.readline("apply the changed scripts? [y/N] "),
        Ok(answer) if answer.trim().eq_ignore_ascii_case("y")
    );
    if !apply {
        sink.info("kept the scripts in use; /reload applies the change when you want it");
    }
    apply
}

/// Runs one turn and whatever the person decides after a watchdog stop.
fn turn(
    rt: &tokio::runtime::Runtime,
    agent: &mut Agent,
    editor: &mut Editor<ReplHelper, DefaultHistory>,
    sink: &Arc<TextSink>,
    text: &str,
) {
    let usage_before = agent.usage();
    let cancel = CancellationToken::new();
    let watcher = interrupt_watcher(rt, &cancel);
    let mut outcome = rt.block_on(agent.run_turn(text, sink.as_ref(), &cancel));
    watcher.abort();
    while let Ok(TurnOutcome::Stopped { reason, summary }) = &outcome {
        sink.quiet();
        if let Some(summary) = summary {
            println!("{}", crate::ui::sanitize::visible(summary));
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
        Ok(TurnOutcome::Cancelled) => sink.error("interrupted; everything so far is kept"),
        Err(e) => sink.error(&e.to_string()),
    }
    let now = agent.usage();
    let turn = Usage {
        prompt_tokens: now.prompt_tokens - usage_before.prompt_tokens,
        completion_tokens: now.completion_tokens - usage_before.completion_tokens,
        total_tokens: now.total_tokens - usage_before.total_tokens,
    };
    sink.turn_summary(turn, agent.context_tokens(), agent.context_window());
}

/// `/undo` and `/rewind`.
fn undo(agent: &mut Agent, sink: &Arc<TextSink>, request: Request, force: bool) {
    let Some(checkpoints) = agent.checkpoints_mut() else {
        sink.error("undo is not available in this session");
        return;
    };
    match crate::ui::undo::undo(checkpoints, request, force) {
        Ok(lines) => lines.iter().for_each(|l| eprintln!("{l}")),
        Err(lines) => show_not_restored(sink, &lines),
    }
}

/// Why nothing was restored: the first line as an error, then the rest
/// (the conflicts).
fn show_not_restored(sink: &Arc<TextSink>, lines: &[String]) {
    let mut lines = lines.iter();
    if let Some(first) = lines.next() {
        sink.error(first.trim_start());
    }
    lines.for_each(|l| eprintln!("{l}"));
}

/// `/rewind N --chat`: the files as before turn N, then the conversation
/// as before the person's message that turn answered (and the turns of
/// that message before N, so files and conversation agree). Returns that
/// message when it fits on the prompt line, to be edited or sent again.
fn rewind_chat(agent: &mut Agent, sink: &Arc<TextSink>, n: u32, force: bool) -> Option<String> {
    let Some(checkpoints) = agent.checkpoints_mut() else {
        sink.error("undo is not available in this session");
        return None;
    };
    let turns = checkpoints.turns();
    let Some(turn) = turns.iter().find(|t| t.n == n) else {
        sink.error(&format!(
            "no turn {n} changed files in this session; /rewind lists the turns"
        ));
        return None;
    };
    let Some(mark) = turn.chat else {
        sink.error(&format!(
            "turn {n} is from an earlier run of this session: the conversation cannot go back to it; /rewind {n} puts the files back"
        ));
        return None;
    };
    let first = turns
        .iter()
        .filter(|t| t.chat == Some(mark))
        .map(|t| t.n)
        .min()
        .unwrap_or(n);
    let open = turns.iter().any(|t| t.n >= first && !t.undone);
    if open {
        match crate::ui::undo::undo(checkpoints, Request::To(first), force) {
            Ok(lines) => lines.iter().for_each(|l| eprintln!("{l}")),
            Err(lines) => {
                show_not_restored(sink, &lines);
                eprintln!("  the conversation was left as it is");
                return None;
            }
        }
    } else {
        eprintln!("  the files are already as before turn {first}");
    }
    match agent.rewind_conversation(mark) {
        Some(text) => {
            let shown = crate::text::shorten(crate::text::first_line(&text), 80);
            eprintln!(
                "  conversation taken back to before your message: {}",
                crate::ui::sanitize::visible_line(&shown)
            );
            (!text.contains('\n')).then_some(text)
        }
        None => {
            sink.error(
                "the conversation no longer holds that message (compacted, cleared or resumed since): only the files went back",
            );
            None
        }
    }
}

/// A slash command.
fn command(
    rt: &tokio::runtime::Runtime,
    agent: &mut Agent,
    session: &mut Session,
    sink: &Arc<TextSink>,
    input: Input,
) {
    match input {
        Input::Help => {
            for (c, what) in COMMANDS {
                eprintln!("  {c:<10} {what}");
            }
        }
        Input::Unknown(hint) => sink.error(&hint),
        Input::Mcp => {
            show_notes(sink, &session.refresh_mcp(agent));
            for line in super::render::mcp_servers(sink.style(), &session.mcp.status()) {
                eprintln!("{line}");
            }
        }
        Input::Tools => {
            for tool in agent.registry().tools() {
                let mark = match tool.origin() {
                    ToolOrigin::Script => " (script)",
                    ToolOrigin::Mcp => " (mcp)",
                    ToolOrigin::Builtin => "",
                };
                let first = crate::watchdog::snippet(&tool.spec().description);
                eprintln!("  {}{mark}: {first}", tool.spec().name);
            }
        }
        Input::RaiseBudget(extra) => match agent.raise_cap(extra) {
            Some(cap) => eprintln!("  the next turn may use up to {cap} model turns"),
            None => sink.error("there is no watchdog to raise the cap of"),
        },
        Input::Budget => {
            let budget = agent.budget();
            let cap = agent
                .hard_cap()
                .map(|c| format!(" (hard cap {c}; /budget +N raises it for the next turn)"))
                .unwrap_or_default();
            eprintln!(
                "  {} of {} turns used in the current turn's budget{cap}",
                budget.used, budget.limit
            );
        }
        Input::Policy(arg) => policy(session, sink, arg.as_deref()),
        Input::Undo { force } => undo(agent, sink, Request::Last, force),
        Input::Rewind { to, force, .. } => {
            undo(agent, sink, to.map_or(Request::List, Request::To), force)
        }
        Input::Plan => sink.show_plan(),
        Input::Last => match sink.last_output() {
            Some((name, text)) => {
                eprintln!("{}", sink.style().cyan(&format!("── {name} ──")));
                eprintln!("{}", text.trim_end());
            }
            None => eprintln!("  no tool has run yet in this session"),
        },
        Input::Sessions => {
            let sessions = crate::agent::transcript::list(
                &session.data.sessions(),
                &session.settings.workspace,
            );
            for line in super::render::sessions(&sessions, Some(&session.id)) {
                eprintln!("{line}");
            }
        }
        Input::Reload => {
            let notes = session.reload(agent, true);
            if notes.is_empty() {
                eprintln!("scripts reloaded; nothing changed");
            }
            show_notes(sink, &notes);
        }
        Input::Clear => {
            let notes = session.new_conversation(agent);
            sink.forget_plan();
            if notes.is_empty() {
                eprintln!("  new conversation (the previous one stays saved)");
            }
            show_notes(sink, &notes);
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
        Input::Resume(which) => match session.resume(agent, which.as_deref().unwrap_or("last")) {
            Ok(notes) => {
                show_notes(sink, &notes);
                recap(agent, sink);
            }
            Err(e) => sink.error(&e),
        },
        Input::Model(None) => {
            let window = agent
                .context_window()
                .map(|w| format!(", context window {w} tokens"))
                .unwrap_or_default();
            let profile = session
                .profile
                .as_deref()
                .map(|p| format!(" (profile {p})"))
                .unwrap_or_default();
            eprintln!(
                "  model {} at {}{profile}{window}",
                agent.model_name(),
                session.settings.base_url
            )
        }
        Input::Model(Some(name)) => match session.switch_profile(agent, &name) {
            Ok(()) => {
                let window = agent
                    .context_window()
                    .map(|w| format!(", context window {w} tokens"))
                    .unwrap_or_default();
                eprintln!(
                    "  switched to profile {name}: model {} at {}{window}",
                    session.settings.model, session.settings.base_url
                );
            }
            Err(e) => sink.error(&e),
        },
        Input::Empty | Input::Exit | Input::Message(_) => {}
    }
}

/// `/policy`: the session's "always" approvals, and revoking one.
fn policy(session: &Session, sink: &TextSink, arg: Option<&str>) {
    let approvals = session.approvals();
    let list = approvals.list();
    match arg.map(|a| a.split_whitespace().collect::<Vec<_>>()) {
        None => {
            if list.is_empty() {
                eprintln!("  no \"always\" approvals in this session");
            }
            for (i, key) in list.iter().enumerate() {
                eprintln!("  {}. {}", i + 1, visible_line(key));
            }
        }
        Some(words) => match words.as_slice() {
            ["revoke", "all"] => {
                let n = approvals.revoke_all();
                eprintln!("  revoked {n} approval(s)");
            }
            ["revoke", n] => match n
                .parse::<usize>()
                .ok()
                .and_then(|n| list.get(n.wrapping_sub(1)))
            {
                Some(key) => {
                    approvals.revoke(key);
                    eprintln!("  revoked: {}", visible_line(key));
                }
                None => sink.error(&format!(
                    "there is no approval {n}; /policy lists them with their numbers"
                )),
            },
            _ => sink.error(
                "use /policy to list the approvals, /policy revoke N to forget one, /policy revoke all to forget them all",
            ),
        },
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
            asker::interrupted();
            cancel.cancel();
        }
    })
}

/// Shows the last exchange of a resumed conversation.
fn recap(agent: &Agent, sink: &TextSink) {
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
        sink.info(&format!("  last request: {}", crate::watchdog::snippet(&u)));
    }
    if let Some(a) = last_answer {
        sink.info(&format!("  last answer: {}", crate::watchdog::snippet(&a)));
    }
}

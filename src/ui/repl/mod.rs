//! The interactive REPL: read a line, run a turn, print as it streams.
//!
//! | file | owns |
//! |---|---|
//! | `commands` | what a typed line means (pure), the command table, completion |
//! | `handlers` | what each slash command does, as reply lines (prints nothing) |
//! | `asker` | the approval question at the terminal |
//! | `script_watch` | whether a change to the scripts is applied, or confirmed first |
//! | `type_ahead` | the lines typed while a turn ran, sent as if typed at the prompt |
//!
//! Before each turn, scripts changed on disk are reloaded (as `/reload`
//! does) through the session, the one assembly path; a script whose new
//! version fails keeps its last good version. A change made while a turn
//! ran (maybe by the agent itself) is applied only when the person says so.

pub mod asker;
pub mod commands;
pub mod handlers;
pub mod script_watch;
pub mod type_ahead;

use std::sync::Arc;

use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{Cmd, Config, Editor, EventHandler, KeyCode, KeyEvent, Modifiers};
use tokio_util::sync::CancellationToken;

use super::TextSink;
use crate::agent::{Agent, TurnOutcome};
use crate::protocol::{EventSink, Usage};
use crate::setup::{Note, Session};
use commands::{Input, ReplHelper, join_continued, parse};
use handlers::{Ctx, Reply, handle, show};
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

/// Shows setup notes, as the events every front end shows them as.
fn show_notes(sink: &TextSink, notes: &[Note]) {
    notes.iter().for_each(|n| sink.emit(n.event()));
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
        let mut reply = Reply::default();
        handlers::recap(agent, &mut reply);
        show(&sink, &reply);
    }
    let mut last_interrupt: Option<std::time::Instant> = None;
    let mut watch = ScriptWatch::default();
    // A message `/rewind N --chat` took back, offered for editing.
    let mut prefill: Option<String> = None;
    // Requests typed ahead while a turn ran, sent one by one.
    let mut queued = std::collections::VecDeque::new();
    loop {
        // Held until the editor is done: an Enter pressed after the drain
        // reaches the editor as Enter (type_ahead's doc says why).
        let held = type_ahead::hold_enter(std::io::stdin());
        if queued.is_empty() {
            queued.extend(type_ahead::inputs(type_ahead::drain()));
        }
        let read = match queued.pop_front() {
            Some(text) => {
                show_typed_ahead(&text);
                Ok(text)
            }
            None => match prefill.take() {
                Some(text) => editor.readline_with_initial("› ", (&text, "")),
                None => editor.readline("› "),
            },
        };
        drop(held);
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
            other => {
                if other == Input::Reload {
                    watch.reloaded();
                }
                let mut ctx = Ctx {
                    rt,
                    agent,
                    session,
                    sink: &sink,
                };
                let reply = handle(&mut ctx, other);
                show(&sink, &reply);
                prefill = reply.prefill;
            }
        }
    }
}

/// A request typed while the last turn ran, shown as the prompt would
/// have shown it.
fn show_typed_ahead(text: &str) {
    for (i, line) in text.lines().enumerate() {
        eprintln!("{} {line}", if i == 0 { "›" } else { " " });
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

/// Cancels `cancel` on Ctrl+C while a turn runs.
pub(super) fn interrupt_watcher(
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

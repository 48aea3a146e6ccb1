//! What each slash command does: [`handle`] runs one parsed command
//! against the agent and the session and returns what to show as
//! [`Reply`] lines, printing nothing itself. The editor loop (`mod.rs`)
//! prints a reply in one place, [`show`]; tests call [`handle`] and read
//! the lines.

use tokio_util::sync::CancellationToken;

use super::Input;
use crate::agent::Agent;
use crate::protocol::EventSink;
use crate::setup::{Note, Session};
use crate::tools::ToolOrigin;
use crate::ui::TextSink;
use crate::ui::sanitize::visible_line;
use crate::ui::undo::Request;

/// One line of a command's reply, by how it is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// Output of the command, as it is.
    Out(String),
    /// A dim aside.
    Info(String),
    /// Marked as an error.
    Error(String),
    /// A note of the assembly (a reload, a resumed session), shown as the
    /// event every front end shows it as.
    Note(Note),
}

/// What a command shows, and a message to offer on the prompt line
/// (`/rewind N --chat` gives back the message it took back).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub lines: Vec<Line>,
    pub prefill: Option<String>,
}

impl Reply {
    fn out(&mut self, line: impl Into<String>) {
        self.lines.push(Line::Out(line.into()));
    }

    fn info(&mut self, line: impl Into<String>) {
        self.lines.push(Line::Info(line.into()));
    }

    fn error(&mut self, line: impl Into<String>) {
        self.lines.push(Line::Error(line.into()));
    }

    fn notes(&mut self, notes: Vec<Note>) {
        self.lines.extend(notes.into_iter().map(Line::Note));
    }

    /// Every line as text, for tests and logs.
    pub fn text(&self) -> String {
        self.lines
            .iter()
            .map(|l| match l {
                Line::Out(t) | Line::Info(t) | Line::Error(t) => t.clone(),
                Line::Note(Note::Info(t) | Note::Warning(t)) => t.clone(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Shows a reply: the one place the REPL's commands reach the terminal.
pub fn show(sink: &TextSink, reply: &Reply) {
    for line in &reply.lines {
        match line {
            Line::Out(text) => sink.line(text),
            Line::Info(text) => sink.info(text),
            Line::Error(text) => sink.error(text),
            Line::Note(note) => sink.emit(note.event()),
        }
    }
}

/// What a command works on.
pub struct Ctx<'a> {
    pub rt: &'a tokio::runtime::Runtime,
    pub agent: &'a mut Agent,
    pub session: &'a mut Session,
    /// The front end's memory of the session: the plan and the last
    /// tool output, read (and the plan forgotten by `/clear`).
    pub sink: &'a TextSink,
}

/// Runs one slash command. `Message`, `Empty` and `Exit` are the editor
/// loop's and reply nothing.
pub fn handle(ctx: &mut Ctx<'_>, input: Input) -> Reply {
    let mut r = Reply::default();
    match input {
        Input::Help => {
            for (c, what) in super::commands::COMMANDS {
                r.out(format!("  {c:<10} {what}"));
            }
        }
        Input::Unknown(hint) => r.error(hint),
        Input::Mcp => {
            r.notes(ctx.session.refresh_mcp(ctx.agent));
            let style = ctx.sink.style();
            for line in crate::ui::render::mcp_servers(style, &ctx.session.mcp.status()) {
                r.out(line);
            }
        }
        Input::Tools => {
            for tool in ctx.agent.registry().tools() {
                let mark = match tool.origin() {
                    ToolOrigin::Script => " (script)",
                    ToolOrigin::Mcp => " (mcp)",
                    ToolOrigin::Builtin => "",
                };
                let first = crate::watchdog::snippet(&tool.spec().description);
                r.out(format!("  {}{mark}: {first}", tool.spec().name));
            }
        }
        Input::RaiseBudget(extra) => match ctx.agent.raise_cap(extra) {
            Some(cap) => r.out(format!("  the next turn may use up to {cap} model turns")),
            None => r.error("there is no watchdog to raise the cap of"),
        },
        Input::Budget => {
            let budget = ctx.agent.budget();
            let cap = ctx
                .agent
                .hard_cap()
                .map(|c| format!(" (hard cap {c}; /budget +N raises it for the next turn)"))
                .unwrap_or_default();
            r.out(format!(
                "  {} of {} turns used in the current turn's budget{cap}",
                budget.used, budget.limit
            ));
        }
        Input::Policy(arg) => policy(ctx.session, &mut r, arg.as_deref()),
        Input::Undo { force } => undo(ctx.agent, &mut r, Request::Last, force),
        Input::Rewind {
            to: Some(n),
            force,
            chat: true,
        } => r.prefill = rewind_chat(ctx.agent, &mut r, n, force),
        Input::Rewind { to, force, .. } => undo(
            ctx.agent,
            &mut r,
            to.map_or(Request::List, Request::To),
            force,
        ),
        Input::Plan => match ctx.sink.plan() {
            Some(data) => crate::ui::render::plan(ctx.sink.style(), &data)
                .into_iter()
                .for_each(|l| r.out(l)),
            None => r.out("  no plan yet: the model has not made one in this session"),
        },
        Input::Last => match ctx.sink.last_output() {
            Some((name, text)) => {
                r.out(ctx.sink.style().cyan(&format!("── {name} ──")));
                r.out(text.trim_end());
            }
            None => r.out("  no tool has run yet in this session"),
        },
        Input::Sessions => {
            let sessions = crate::agent::transcript::list(
                &ctx.session.data.sessions(),
                &ctx.session.settings.workspace,
            );
            for line in crate::ui::render::sessions(&sessions, Some(&ctx.session.id)) {
                r.out(line);
            }
        }
        Input::Reload => {
            let notes = ctx.session.reload(ctx.agent, true);
            if notes.is_empty() {
                r.out("scripts reloaded; nothing changed");
            }
            r.notes(notes);
        }
        Input::Clear => {
            let notes = ctx.session.new_conversation(ctx.agent);
            ctx.sink.forget_plan();
            if notes.is_empty() {
                r.out("  new conversation (the previous one stays saved)");
            }
            r.notes(notes);
        }
        Input::Compact => {
            let cancel = CancellationToken::new();
            let watcher = super::interrupt_watcher(ctx.rt, &cancel);
            match ctx.rt.block_on(ctx.agent.compact(&cancel)) {
                Ok(Some(c)) => r.out(format!(
                    "  compacted: {} older messages summarised (about {} → {} tokens)",
                    c.messages_summarised, c.tokens_before, c.tokens_after
                )),
                Ok(None) => r.out("  nothing to compact yet"),
                Err(e) => r.error(format!("compaction failed: {e}")),
            }
            watcher.abort();
        }
        Input::Resume(which) => {
            match ctx
                .session
                .resume(ctx.agent, which.as_deref().unwrap_or("last"))
            {
                Ok(notes) => {
                    r.notes(notes);
                    recap(ctx.agent, &mut r);
                }
                Err(e) => r.error(e),
            }
        }
        Input::Model(None) => {
            let profile = ctx
                .session
                .profile
                .as_deref()
                .map(|p| format!(" (profile {p})"))
                .unwrap_or_default();
            r.out(format!(
                "  model {} at {}{profile}{}",
                ctx.agent.model_name(),
                ctx.session.settings.base_url,
                window(ctx.agent)
            ));
        }
        Input::Model(Some(name)) => match ctx.session.switch_profile(ctx.agent, &name) {
            Ok(()) => r.out(format!(
                "  switched to profile {name}: model {} at {}{}",
                ctx.session.settings.model,
                ctx.session.settings.base_url,
                window(ctx.agent)
            )),
            Err(e) => r.error(e),
        },
        Input::Empty | Input::Exit | Input::Message(_) => {}
    }
    r
}

/// `, context window N tokens`, or nothing when the window is unknown.
fn window(agent: &Agent) -> String {
    agent
        .context_window()
        .map(|w| format!(", context window {w} tokens"))
        .unwrap_or_default()
}

/// `/policy`: the session's "always" approvals, and revoking one.
fn policy(session: &Session, r: &mut Reply, arg: Option<&str>) {
    let approvals = session.approvals();
    let list = approvals.list();
    match arg.map(|a| a.split_whitespace().collect::<Vec<_>>()) {
        None => {
            if list.is_empty() {
                r.out("  no \"always\" approvals in this session");
            }
            for (i, key) in list.iter().enumerate() {
                r.out(format!("  {}. {}", i + 1, visible_line(key)));
            }
        }
        Some(words) => match words.as_slice() {
            ["revoke", "all"] => {
                let n = approvals.revoke_all();
                r.out(format!("  revoked {n} approval(s)"));
            }
            ["revoke", n] => match n
                .parse::<usize>()
                .ok()
                .and_then(|n| list.get(n.wrapping_sub(1)))
            {
                Some(key) => {
                    approvals.revoke(key);
                    r.out(format!("  revoked: {}", visible_line(key)));
                }
                None => r.error(format!(
                    "there is no approval {n}; /policy lists them with their numbers"
                )),
            },
            _ => r.error(
                "use /policy to list the approvals, /policy revoke N to forget one, /policy revoke all to forget them all",
            ),
        },
    }
}

/// `/undo` and `/rewind` of files.
fn undo(agent: &mut Agent, r: &mut Reply, request: Request, force: bool) {
    let Some(checkpoints) = agent.checkpoints_mut() else {
        r.error("undo is not available in this session");
        return;
    };
    match crate::ui::undo::undo(checkpoints, request, force) {
        Ok(lines) => lines.into_iter().for_each(|l| r.out(l)),
        Err(lines) => not_restored(r, lines),
    }
}

/// Why nothing was restored: the first line as an error, then the rest
/// (the conflicts).
fn not_restored(r: &mut Reply, lines: Vec<String>) {
    let mut lines = lines.into_iter();
    if let Some(first) = lines.next() {
        r.error(first.trim_start());
    }
    lines.for_each(|l| r.out(l));
}

/// `/rewind N --chat`: the files as before turn N, then the conversation
/// as before the person's message that turn answered (and the turns of
/// that message before N, so files and conversation agree). Returns that
/// message when it fits on the prompt line, to be edited or sent again.
fn rewind_chat(agent: &mut Agent, r: &mut Reply, n: u32, force: bool) -> Option<String> {
    let Some(checkpoints) = agent.checkpoints_mut() else {
        r.error("undo is not available in this session");
        return None;
    };
    let turns = checkpoints.turns();
    let Some(turn) = turns.iter().find(|t| t.n == n) else {
        r.error(format!(
            "no turn {n} changed files in this session; /rewind lists the turns"
        ));
        return None;
    };
    let Some(mark) = turn.chat else {
        r.error(format!(
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
            Ok(lines) => lines.into_iter().for_each(|l| r.out(l)),
            Err(lines) => {
                not_restored(r, lines);
                r.out("  the conversation was left as it is");
                return None;
            }
        }
    } else {
        r.out(format!("  the files are already as before turn {first}"));
    }
    match agent.rewind_conversation(mark) {
        Some(text) => {
            let shown = crate::text::shorten(crate::text::first_line(&text), 80);
            r.out(format!(
                "  conversation taken back to before your message: {}",
                visible_line(&shown)
            ));
            (!text.contains('\n')).then_some(text)
        }
        None => {
            r.error(
                "the conversation no longer holds that message (compacted, cleared or resumed since): only the files went back",
            );
            None
        }
    }
}

/// The last exchange of a resumed conversation.
pub fn recap(agent: &Agent, r: &mut Reply) {
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
        r.info(format!("  last request: {}", crate::watchdog::snippet(&u)));
    }
    if let Some(a) = last_answer {
        r.info(format!("  last answer: {}", crate::watchdog::snippet(&a)));
    }
}

//! Command-line entry: flags, subcommands and exit codes. It parses the
//! command line, starts a [`Session`] (the one assembly path), and hands
//! the agent to the REPL or to one-shot mode; what the person sees is
//! printed by `ui`.
//!
//! | file | owns |
//! |---|---|
//! | `oneshot` | `agent -p TASK` |
//! | `commands` | `agent init`, `check`, `replay` |
//! | `demo` | `agent demo`: the watchdog on four scripted runs |
//! | `exit` | the exit codes |

mod commands;
pub mod demo;
pub mod exit;
mod oneshot;

use std::ffi::OsString;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use serde_json::json;

use crate::config::{Overrides, Settings};
use crate::protocol::{Event, EventSink};
use crate::runtime::sandbox;
use crate::setup::{Note, Session, Start};
use crate::ui::{Approver, JsonSink, Style, TextSink, report};

/// A terminal coding agent whose behaviour is scripted in Rhai.
#[derive(Debug, Parser)]
#[command(name = "agent", version, about, long_about = None)]
pub struct Cli {
    /// Run one task and exit; `-` reads the task from stdin.
    #[arg(short = 'p', long = "prompt", value_name = "PROMPT")]
    pub prompt: Option<String>,

    /// With -p: print one JSON object per line on stdout.
    #[arg(long)]
    pub json: bool,

    /// API base URL (overrides AGENT_BASE_URL), e.g. http://localhost:11434/v1
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,

    /// Model id (overrides AGENT_MODEL).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,

    /// A model profile from models.rhai (default: the one it names).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Continue a saved conversation: `last` (the newest in this
    /// directory, the default) or a session id.
    #[arg(long, value_name = "ID|last", num_args = 0..=1, default_missing_value = "last")]
    pub resume: Option<String>,

    /// Show the model's reasoning text (dimmed, on stderr).
    #[arg(long)]
    pub show_reasoning: bool,

    /// With -p: answer yes when the policy asks about a command or a write
    /// (without it, one-shot mode refuses what the policy would ask about).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Run shell commands in the Landlock sandbox: writes only in the
    /// workspace and the temp dirs (also AGENT_SANDBOX=1).
    #[arg(long)]
    pub sandbox: bool,

    /// The workspace (default: the git work tree holding the current
    /// directory, else the current directory).
    #[arg(short = 'C', value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write the default scripts to the config dir (never over your edits
    /// without --force).
    Init {
        /// Overwrite existing scripts with the defaults.
        #[arg(long)]
        force: bool,
    },
    /// Compile every script and call each hook once with sample data.
    Check,
    /// Run the watchdog over a recorded run (JSON lines) and print one
    /// verdict per model turn.
    Replay {
        /// The recorded run; every live run writes one to <data dir>/runs/.
        file: PathBuf,
    },
    /// Show the watchdog on four scripted runs; no key or network needed.
    Demo,
    /// List the saved conversations of this workspace (newest first), for
    /// `--resume ID`.
    Sessions,
    /// Revert the file changes of this workspace's newest session: its
    /// last turn, or every turn from --to N on. Exit 1 when nothing was
    /// restored (a conflict with your later edits, or nothing to undo).
    Undo {
        /// List the turns that changed files instead.
        #[arg(long)]
        list: bool,
        /// Put the files back as they were before turn N.
        #[arg(long, value_name = "N")]
        to: Option<u32>,
        /// Restore even over changes made after the agent's.
        #[arg(long)]
        force: bool,
    },
    /// Try the approval policy (`agent policy test FILE`).
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// `agent policy ...`.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Print the decision and reason of your policy.rhai for each command
    /// in FILE (one a line; `#` starts a comment). Nothing is run.
    Test {
        /// A file with one shell command per line.
        file: PathBuf,
    },
}

/// Runs the sandbox's hidden subcommands (`sandbox-exec`, `sandbox-init`,
/// `sandbox-probe`) when the process is one; call before anything else.
pub fn hidden() -> Option<u8> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let hidden = sandbox::hidden_main(&args)?;
    if let Some(line) = &hidden.out {
        report::out(line);
    }
    if let Some(line) = &hidden.err {
        report::err(line);
    }
    Some(hidden.code)
}

/// Runs the CLI with the process's arguments and environment.
pub fn main() -> u8 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            report::clap(&e);
            return if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
        }
    };
    run(cli, Arc::new(|name: &str| std::env::var(name).ok()))
}

/// Runs a parsed command line, reading the environment through `env`.
pub fn run(cli: Cli, env: crate::setup::Env) -> u8 {
    let style = Style::detect(env("NO_COLOR").is_some_and(|v| !v.is_empty()));
    let json_mode = cli.json;
    let fail = |message: &str| {
        if json_mode {
            JsonSink::new(crate::protocol::Answer::Unattended)
                .line(json!({"type": "error", "message": message}));
        }
        report::error(style, message);
        exit::USAGE
    };
    let overrides = Overrides {
        base_url: cli.base_url.clone(),
        model: cli.model.clone(),
        sandbox: cli.sandbox,
        workspace: cli.workspace.clone(),
    };
    let settings = match Settings::resolve(&overrides, &*env) {
        Ok(s) => s,
        Err(e) => return fail(&e.to_string()),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };

    match cli.command {
        Some(Command::Init { force }) => return commands::init(&settings, style, force),
        Some(Command::Check) => {
            let (host, _) = crate::script::ScriptHost::load(&settings.config_dir);
            let endpoint =
                crate::setup::describe_endpoint(&host, &overrides, &*env, cli.profile.as_deref());
            let mcp = rt.block_on(crate::setup::check_mcp(
                &host,
                &settings.workspace,
                env.clone(),
            ));
            return commands::check(&settings, style, endpoint, mcp);
        }
        Some(Command::Replay { file }) => return commands::replay_file(&settings, style, &file),
        Some(Command::Policy {
            command: PolicyCommand::Test { file },
        }) => return commands::policy_test(&settings, style, &file),
        Some(Command::Demo) => return rt.block_on(demo::run(&settings, style)),
        Some(Command::Undo { list, to, force }) => {
            return commands::undo(&settings, style, list, to, force);
        }
        Some(Command::Sessions) => {
            let data = crate::data_dir::DataDir::new(settings.data_dir.clone());
            let list = crate::agent::transcript::list(&data.sessions(), &settings.workspace);
            for line in crate::ui::render::sessions(&list, None) {
                report::out(&line);
            }
            return exit::OK;
        }
        None => {}
    }

    if cli.json && cli.prompt.is_none() {
        return fail("--json needs a task: use it with -p \"PROMPT\"");
    }
    let prompt = match cli.prompt.as_deref() {
        Some("-") => {
            let mut text = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut text) {
                return fail(&format!("cannot read the task from stdin: {e}"));
            }
            Some(text)
        }
        other => other.map(str::to_string),
    };
    if prompt.as_deref().is_some_and(|p| p.trim().is_empty()) {
        return fail("the task is empty: pass it with -p \"PROMPT\"");
    }
    if prompt.is_none() && !std::io::stdin().is_terminal() {
        return fail(
            "no task given and stdin is not a terminal: use -p \"PROMPT\" (or -p - to read it from stdin)",
        );
    }

    // MCP servers start on this runtime, in the background.
    let entered = rt.enter();
    let started = Session::start(Start {
        settings: &settings,
        overrides: &overrides,
        env: env.clone(),
        profile: cli.profile.as_deref(),
        resume: cli.resume.as_deref(),
        launcher: None,
    });
    drop(entered);
    let (mut session, mut agent, mut notes) = match started {
        Ok(started) => started,
        Err(message) => return fail(&message),
    };
    let code = match prompt {
        Some(task) => {
            // Nobody waits at a prompt here: the servers' tools are in
            // the first request.
            rt.block_on(session.mcp_started());
            notes.extend(session.refresh_mcp(&mut agent));
            let how = oneshot::OneShot {
                json: cli.json,
                style,
                show_reasoning: cli.show_reasoning,
                yes: cli.yes,
                mcp: session.mcp.status(),
            };
            on_worker(&rt, async move {
                oneshot::run(&mut agent, &task, how, &notes).await
            })
            .unwrap_or(exit::INTERRUPTED)
        }
        None => {
            let sink = Arc::new(TextSink::new(
                style,
                true,
                cli.show_reasoning,
                Approver::Terminal,
            ));
            route_script_output(sink.clone());
            emit_notes(sink.as_ref(), &notes);
            match crate::ui::repl::run(&rt, &mut agent, &mut session, sink) {
                crate::ui::repl::End::Left => exit::OK,
                crate::ui::repl::End::Failed => exit::USAGE,
            }
        }
    };
    // The servers are stopped and the prune is waited for; then nothing
    // left on the runtime (a blocking task still reading, say) may keep
    // the agent from exiting.
    drop(session);
    rt.shutdown_timeout(EXIT_GRACE);
    code
}

/// How long leaving waits for the runtime's last tasks.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Setup notes, as events.
pub(crate) fn emit_notes(sink: &dyn EventSink, notes: &[Note]) {
    for note in notes {
        sink.emit(note.event());
    }
}

/// Script `print` and `debug` lines, and `emit` calls, become events for
/// `sink`.
pub(crate) fn route_script_output(sink: Arc<dyn EventSink>) {
    let emits = sink.clone();
    crate::script::engine::set_printer(Arc::new(move |line: &str| {
        sink.emit(Event::ScriptOutput(line.to_string()))
    }));
    crate::script::engine::set_emitter(Arc::new(move |kind: &str, data| {
        emits.emit(Event::ScriptEvent {
            kind: kind.to_string(),
            data,
        })
    }));
}

/// Runs `work` to the end as a task on one of the runtime's worker
/// threads, not on this thread as `block_on` would. The HTTP connection,
/// the child processes' pipes and the timers are driven on the workers, so
/// a turn polled there is woken where the event arrived; polled on this
/// thread, every streamed chunk and every pipe event cost a wake-up of
/// another thread (about a quarter of a millisecond per step on 2 cores;
/// see BENCHMARKS.md). A panic in `work` is resumed here, as `block_on`
/// would have let it through. `None` only if the task was cancelled, which
/// nothing does.
fn on_worker<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    work: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    match rt.block_on(rt.spawn(work)) {
        Ok(value) => Some(value),
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => None,
        },
    }
}

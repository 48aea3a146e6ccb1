//! Command-line entry: parse flags, build the agent, run the REPL, a
//! one-shot task or a subcommand, and map the result to an exit code.

use std::ffi::OsString;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, TurnError, TurnOutcome, transcript, watchdog_from_script};
use crate::client::ApiError;
use crate::config::{Overrides, Settings};
use crate::protocol::EventSink;
use crate::runtime::policy::{Answer, Asker, FixedAnswer};
use crate::runtime::sandbox;
use crate::script::{self, ScriptHost};
use crate::session;
use crate::ui::{JsonSink, Style, TextSink};
use crate::watchdog::replay::{self, RunLog};

/// Process exit codes, documented in the README.
pub mod exit {
    /// The task finished.
    pub const OK: u8 = 0;
    /// Bad usage or configuration (including scripts `agent check` rejects).
    pub const USAGE: u8 = 2;
    /// The model API failed.
    pub const API: u8 = 3;
    /// The watchdog stopped the run.
    pub const WATCHDOG: u8 = 4;
    /// The person interrupted the run (128 + SIGINT).
    pub const INTERRUPTED: u8 = 130;
}

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
    /// Try the approval policy (`agent policy test FILE`).
    Policy {
        #[command(subcommand)]
        command: crate::script::policy_test::PolicyCommand,
    },
    /// Internal: the sandbox launcher. Confines its own writes to the
    /// given dirs (and /dev) with Landlock, then becomes PROGRAM.
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec {
        /// A directory beneath which PROGRAM may write; repeatable.
        #[arg(long = "write", value_name = "DIR")]
        write: Vec<PathBuf>,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "PROGRAM")]
        program: Vec<OsString>,
    },
    /// Internal: confine this process and print whether Landlock enforced it.
    #[command(name = "sandbox-probe", hide = true)]
    SandboxProbe,
}

/// Runs the CLI with the process's arguments and environment.
pub fn main() -> u8 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
        }
    };
    let env = |name: &str| std::env::var(name).ok();
    run(cli, &env)
}

/// Runs a parsed command line.
pub fn run(cli: Cli, env: &dyn Fn(&str) -> Option<String>) -> u8 {
    // The sandbox's own subcommands come first: they must not depend on the
    // agent's settings, and must confine themselves before any thread starts.
    match &cli.command {
        Some(Command::SandboxExec { write, program }) => {
            let error = sandbox::launch(write, program);
            eprintln!("{error}");
            return error.exit_code();
        }
        Some(Command::SandboxProbe) => {
            let answer = sandbox::probe_here();
            println!("{}", answer.line());
            return answer.exit_code();
        }
        _ => {}
    }
    let style = Style::detect(env("NO_COLOR").is_some_and(|v| !v.is_empty()));
    let json_mode = cli.json;
    let report = |message: &str| {
        if json_mode {
            JsonSink::new().line(json!({"type": "error", "message": message}));
        }
        eprintln!("{} {message}", style.red("error:"));
    };
    let overrides = Overrides {
        base_url: cli.base_url.clone(),
        model: cli.model.clone(),
        sandbox: cli.sandbox,
    };
    let settings = match Settings::resolve(&overrides, env) {
        Ok(s) => s,
        Err(e) => {
            report(&e.to_string());
            return exit::USAGE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report(&format!("cannot start the async runtime: {e}"));
            return exit::USAGE;
        }
    };

    match cli.command {
        Some(Command::Init { force }) => return init(&settings, force),
        Some(Command::Check) => return check(&settings, style),
        Some(Command::Policy { command }) => {
            return crate::script::policy_test::main(&settings, &command);
        }
        Some(Command::Replay { file }) => return replay_file(&settings, &file),
        // Handled (and returned from) at the top.
        Some(Command::SandboxExec { .. } | Command::SandboxProbe) => return exit::OK,
        Some(Command::Demo) => {
            let (host, notes) = ScriptHost::load(&settings.config_dir);
            print_notes(
                &notes
                    .iter()
                    .map(script::LoadNote::message)
                    .collect::<Vec<_>>(),
                style,
            );
            let make = || match host.get(script::WATCHDOG) {
                Some(s) => watchdog_from_script(s.clone()).0,
                None => crate::agent::default_watchdog(),
            };
            return rt.block_on(crate::demo::run(make, style));
        }
        None => {}
    }

    if cli.json && cli.prompt.is_none() {
        report("--json needs a task: use it with -p \"PROMPT\"");
        return exit::USAGE;
    }
    let prompt = match cli.prompt.as_deref() {
        Some("-") => {
            let mut text = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut text) {
                report(&format!("cannot read the task from stdin: {e}"));
                return exit::USAGE;
            }
            Some(text)
        }
        other => other.map(str::to_string),
    };
    if prompt.as_deref().is_some_and(|p| p.trim().is_empty()) {
        report("the task is empty: pass it with -p \"PROMPT\"");
        return exit::USAGE;
    }
    if prompt.is_none() && !std::io::stdin().is_terminal() {
        report(
            "no task given and stdin is not a terminal: use -p \"PROMPT\" (or -p - to read it from stdin)",
        );
        return exit::USAGE;
    }

    let asker: Arc<dyn Asker> = match (&prompt, cli.yes) {
        (Some(_), true) => Arc::new(FixedAnswer(Answer::Yes)),
        (Some(_), false) => Arc::new(FixedAnswer(Answer::No)),
        (None, _) => Arc::new(crate::ui::repl::TerminalAsker::new(style)),
    };
    let Built {
        mut agent,
        settings,
        host,
        warnings: notes,
        info,
    } = match build_agent(
        &settings,
        &overrides,
        env,
        cli.profile.as_deref(),
        cli.resume.as_deref(),
        asker.clone(),
    ) {
        Ok(built) => built,
        Err(message) => {
            report(&message);
            return exit::USAGE;
        }
    };
    print_notes(&notes, style);
    for line in &info {
        eprintln!("{}", style.dim(line));
    }

    match prompt {
        Some(task) => {
            let (json, show_reasoning) = (cli.json, cli.show_reasoning);
            on_worker(&rt, async move {
                one_shot(&mut agent, &task, json, style, show_reasoning).await
            })
            .unwrap_or(exit::INTERRUPTED)
        }
        None => {
            let sink = Arc::new(TextSink::new(style, true, cli.show_reasoning));
            crate::ui::repl::run(&rt, &mut agent, host, &settings, &overrides, asker, sink)
        }
    }
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

fn print_notes(notes: &[String], style: Style) {
    for note in notes {
        // A rendered script error already starts with its own label.
        let note = note.strip_prefix("error: ").unwrap_or(note);
        eprintln!("{} {}", style.yellow("warning:"), note.trim_end());
    }
}

/// Builds the agent from the person's scripts, the chosen profile, the
/// environment and flags. Returns the agent, the resolved settings, the
/// script host (for reloads) and the startup notes.
pub fn build_agent(
    settings: &Settings,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
    profile: Option<&str>,
    resume: Option<&str>,
    asker: Arc<dyn Asker>,
) -> Result<Built, String> {
    let session_id = session_id();
    let mut notes_info: Vec<String> = Vec::new();
    let (host, load_notes) = ScriptHost::load(&settings.config_dir);
    let mut notes: Vec<String> = load_notes
        .iter()
        .filter(|n| !matches!(n, script::LoadNote::Loaded { .. }))
        .map(script::LoadNote::message)
        .collect();
    let model = session::model_setup(&host, overrides, env, profile)?;
    let settings = model.settings;
    let spill_dir: PathBuf = settings.data_dir.join("outputs").join(&session_id);
    let (mut runtime, policy_sandbox, runtime_notes) = session::runtime(
        &host,
        &settings,
        spill_dir,
        std::env::vars().collect(),
        asker,
    );
    notes.extend(runtime_notes);
    if settings.sandbox || policy_sandbox {
        match sandbox_launcher(std::env::current_exe()) {
            Ok(launcher) => runtime = runtime.with_sandbox(launcher),
            Err(note) => notes.push(note),
        }
    }
    let setup = session::assemble(&host, &settings.workspace, &settings.model);
    notes.extend(setup.notes);
    let mut agent = Agent::new(
        model.client,
        setup.registry,
        Arc::new(runtime),
        setup.system_prompt,
    )
    .with_run_log(RunLog::new(&settings.data_dir, &session_id));
    agent.set_request_options(model.options);
    agent.set_context_window(model.context_window);
    agent.set_summary_prompt(Some(setup.summary_prompt));
    if let Some(watchdog) = setup.watchdog {
        agent = agent.with_watchdog(watchdog);
    }
    match resume {
        Some(which) => {
            let (path, loaded) = resume_session(&settings, which)?;
            notes_info.push(format!(
                "resumed {} ({} messages{})",
                path.display(),
                loaded.messages.len(),
                if loaded.skipped > 0 {
                    format!("; {} unreadable line(s) skipped", loaded.skipped)
                } else {
                    String::new()
                }
            ));
            agent.restore(loaded.messages);
            match transcript::Transcript::append_to(&path) {
                Ok(t) => agent.set_transcript(Some(t)),
                Err(e) => notes.push(format!(
                    "cannot append to {}: {e}; this session is not saved",
                    path.display()
                )),
            }
        }
        None => match new_transcript(&settings, &session_id) {
            Ok(t) => agent.set_transcript(Some(t)),
            Err(e) => notes.push(format!(
                "cannot save the transcript in {}: {e}; this session is not saved",
                settings.data_dir.display()
            )),
        },
    }
    Ok(Built {
        agent,
        settings,
        host,
        warnings: notes,
        info: notes_info,
    })
}

/// An agent ready to run, with what the person should be told.
pub struct Built {
    pub agent: Agent,
    /// The settings after the profile was applied.
    pub settings: Settings,
    /// The scripts, kept for reloads.
    pub host: ScriptHost,
    pub warnings: Vec<String>,
    pub info: Vec<String>,
}

/// Where transcripts live.
pub fn sessions_dir(settings: &Settings) -> PathBuf {
    settings.data_dir.join("sessions")
}

/// A fresh transcript for a new session.
pub fn new_transcript(
    settings: &Settings,
    session_id: &str,
) -> std::io::Result<transcript::Transcript> {
    transcript::Transcript::create(
        &sessions_dir(settings),
        &transcript::Header {
            kind: "session".into(),
            id: session_id.to_string(),
            workspace: settings.workspace.clone(),
            model: settings.model.clone(),
            started: chrono::Local::now().to_rfc3339(),
        },
    )
}

/// Finds and loads a saved session: `last` (the newest for this
/// workspace), an id, or a path.
pub fn resume_session(
    settings: &Settings,
    which: &str,
) -> Result<(PathBuf, transcript::Loaded), String> {
    let dir = sessions_dir(settings);
    let path = if which == "last" {
        transcript::latest(&dir, &settings.workspace).ok_or_else(|| {
            format!(
                "there is no saved session for {} in {}; start one without --resume",
                settings.workspace.display(),
                dir.display()
            )
        })?
    } else if std::path::Path::new(which).is_file() {
        PathBuf::from(which)
    } else {
        let p = dir.join(format!("{}.jsonl", which.trim_end_matches(".jsonl")));
        if !p.is_file() {
            return Err(format!(
                "there is no saved session {which:?} in {}; use --resume last, or an id from that directory",
                dir.display()
            ));
        }
        p
    };
    let loaded =
        transcript::load(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok((path, loaded))
}

/// The launcher for sandboxed commands (`exe`: this very binary), once the
/// kernel has shown it enforces the sandbox; otherwise the one warning line
/// to show.
pub fn sandbox_launcher(exe: std::io::Result<PathBuf>) -> Result<PathBuf, String> {
    let unconfined = "shell commands run without the sandbox, under the approval policy only";
    let launcher = exe.map_err(|e| {
        format!("cannot find the agent's own executable to launch sandboxed commands ({e}); {unconfined}")
    })?;
    match sandbox::probe(&launcher) {
        Ok(_abi) => Ok(launcher),
        Err(e) => Err(format!("{} ({e})", sandbox::NO_LANDLOCK_WARNING)),
    }
}

/// A sortable, unique-enough id for this run: local time plus pid.
pub fn session_id() -> String {
    format!(
        "{}-{}",
        chrono::Local::now().format("%Y%m%d-%H%M%S"),
        std::process::id()
    )
}

fn init(settings: &Settings, force: bool) -> u8 {
    match script::init(&settings.config_dir, force) {
        Ok(files) => {
            for (path, written) in &files {
                if *written {
                    println!("wrote   {}", path.display());
                } else {
                    println!(
                        "kept    {} (already there; --force overwrites it)",
                        path.display()
                    );
                }
            }
            println!("Edit these files to change the agent; `agent check` tries them.");
            exit::OK
        }
        Err(e) => {
            eprintln!(
                "error: cannot write the scripts to {}: {e}. Set AGENT_CONFIG_DIR to a directory you can write.",
                settings.config_dir.display()
            );
            exit::USAGE
        }
    }
}

fn check(settings: &Settings, style: Style) -> u8 {
    let mut failed = 0;
    for result in script::check(&settings.config_dir) {
        match &result.result {
            Ok(summary) => println!("{}  {}: {summary}", style.green("ok"), result.path),
            Err(rendered) => {
                failed += 1;
                println!("{}  {}", style.red("FAILED"), result.path);
                println!("{}", rendered.trim_end());
            }
        }
    }
    if failed == 0 {
        println!("All scripts are fine.");
        exit::OK
    } else {
        println!(
            "{failed} script(s) have errors; until they are fixed the agent uses the built-in default for each."
        );
        exit::USAGE
    }
}

fn replay_file(settings: &Settings, file: &std::path::Path) -> u8 {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            return exit::USAGE;
        }
    };
    let turns = match replay::parse(&text) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return exit::USAGE;
        }
    };
    let (host, notes) = ScriptHost::load(&settings.config_dir);
    for note in notes
        .iter()
        .filter(|n| !matches!(n, script::LoadNote::Loaded { .. }))
    {
        eprintln!("warning: {}", note.message().trim_end());
    }
    let (mut watchdog, warnings) = match host.get(script::WATCHDOG) {
        Some(s) => watchdog_from_script(s.clone()),
        None => (crate::agent::default_watchdog(), Vec::new()),
    };
    for w in warnings {
        eprintln!("warning: {w}");
    }
    let mut out = std::io::stdout().lock();
    for (turn, verdict) in replay::run(&mut watchdog, &turns) {
        let _ = writeln!(out, "{}", replay::verdict_json(turn, &verdict));
    }
    exit::OK
}

async fn one_shot(
    agent: &mut Agent,
    task: &str,
    json_mode: bool,
    style: Style,
    show_reasoning: bool,
) -> u8 {
    let text_sink = TextSink::new(
        style,
        false,
        show_reasoning && std::io::stderr().is_terminal(),
    );
    let json_sink = JsonSink::new();
    let sink: &dyn EventSink = if json_mode { &json_sink } else { &text_sink };
    let cancel = CancellationToken::new();
    let watcher = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        })
    };
    let outcome = agent.run_turn(task, sink, &cancel).await;
    watcher.abort();
    let usage = agent.usage();
    let (code, final_text, error) = match outcome {
        Ok(TurnOutcome::Done { text, .. }) => (exit::OK, Some(text), None),
        Ok(TurnOutcome::Stopped { reason, summary }) => (
            exit::WATCHDOG,
            summary,
            Some(format!("stopped by the watchdog: {reason}")),
        ),
        Ok(TurnOutcome::Cancelled) | Err(TurnError::Api(ApiError::Cancelled)) => {
            (exit::INTERRUPTED, None, Some("interrupted".to_string()))
        }
        Err(TurnError::Api(e)) => (exit::API, None, Some(e.to_string())),
    };
    if json_mode {
        if let Some(text) = &final_text {
            json_sink.line(json!({
                "type": "final",
                "text": text,
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                },
            }));
        }
        if let Some(message) = &error {
            json_sink.line(json!({"type": "error", "message": message, "exit_code": code}));
        }
    } else {
        if let Some(text) = &final_text {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", text.trim_end());
            let _ = out.flush();
        }
        if let Some(message) = &error {
            text_sink.error(message);
        }
        if std::io::stderr().is_terminal() {
            text_sink.usage_line(usage);
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_sandbox_is_one_warning_line() {
        // A launcher that cannot answer stands in for a kernel without
        // Landlock: either way the sandbox is off and the agent says so once.
        let note = sandbox_launcher(Ok(PathBuf::from("/nonexistent/agent"))).unwrap_err();
        assert!(note.starts_with(sandbox::NO_LANDLOCK_WARNING), "{note}");
        assert!(note.contains("/nonexistent/agent"), "{note}");
        assert!(!note.contains('\n'), "{note}");

        let note = sandbox_launcher(Err(std::io::Error::other("gone"))).unwrap_err();
        assert!(note.contains("gone") && !note.contains('\n'), "{note}");
        assert!(note.ends_with("under the approval policy only"), "{note}");
    }
}

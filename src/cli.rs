//! Command-line entry: parse flags, build the agent, run the REPL or a
//! one-shot task, and map the result to an exit code.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, TurnError, TurnOutcome};
use crate::client::{ApiError, ChatClient, ClientConfig};
use crate::config::{Overrides, Settings};
use crate::prompt::{PromptContext, default_system_prompt};
use crate::protocol::EventSink;
use crate::runtime::Runtime;
use crate::tools::Registry;
use crate::ui::{JsonSink, Style, TextSink};

/// Process exit codes, documented in the README.
pub mod exit {
    /// The task finished.
    pub const OK: u8 = 0;
    /// Bad usage or configuration.
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

    /// Show the model's reasoning text (dimmed, on stderr).
    #[arg(long)]
    pub show_reasoning: bool,
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
    let style = Style::detect(env("NO_COLOR").is_some_and(|v| !v.is_empty()));
    let report = |message: &str| {
        if cli.json {
            JsonSink::new().line(json!({"type": "error", "message": message}));
        }
        eprintln!("{} {message}", style.red("error:"));
    };
    if cli.json && cli.prompt.is_none() {
        report("--json needs a task: use it with -p \"PROMPT\"");
        return exit::USAGE;
    }
    let overrides = Overrides {
        base_url: cli.base_url.clone(),
        model: cli.model.clone(),
    };
    let settings = match Settings::resolve(&overrides, env) {
        Ok(s) => s,
        Err(e) => {
            report(&e.to_string());
            return exit::USAGE;
        }
    };
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
    let mut agent = match build_agent(&settings) {
        Ok(agent) => agent,
        Err(message) => {
            report(&message);
            return exit::USAGE;
        }
    };

    match prompt {
        Some(task) => rt.block_on(one_shot(
            &mut agent,
            &task,
            cli.json,
            style,
            cli.show_reasoning,
        )),
        None => {
            if !std::io::stdin().is_terminal() {
                report(
                    "no task given and stdin is not a terminal: use -p \"PROMPT\" (or -p - to read it from stdin)",
                );
                return exit::USAGE;
            }
            let sink = Arc::new(TextSink::new(style, true, cli.show_reasoning));
            crate::ui::repl::run(&rt, &mut agent, sink)
        }
    }
}

fn build_agent(settings: &Settings) -> Result<Agent, String> {
    let session = session_id();
    let spill_dir: PathBuf = settings.data_dir.join("outputs").join(&session);
    let runtime = Arc::new(Runtime::new(
        settings.workspace.clone(),
        spill_dir,
        std::env::vars(),
    ));
    let registry = Arc::new(Registry::with_builtins());
    let ctx = PromptContext::new(&settings.workspace, &settings.model, registry.names());
    let system = default_system_prompt(&ctx);
    let client = ChatClient::new(ClientConfig::new(
        settings.base_url.clone(),
        settings.model.clone(),
        settings.api_key.clone(),
    ))
    .map_err(|e| e.to_string())?;
    Ok(Agent::new(client, registry, runtime, system))
}

/// A sortable, unique-enough id for this run: local time plus pid.
pub fn session_id() -> String {
    format!(
        "{}-{}",
        chrono::Local::now().format("%Y%m%d-%H%M%S"),
        std::process::id()
    )
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
        Ok(TurnOutcome::Stopped { reason, .. }) => (
            exit::WATCHDOG,
            None,
            Some(format!("stopped by the watchdog: {reason}")),
        ),
        Ok(TurnOutcome::Cancelled) => (exit::INTERRUPTED, None, Some("interrupted".to_string())),
        Err(TurnError::Api(ApiError::Cancelled)) => {
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
            use std::io::Write;
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

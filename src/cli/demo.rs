//! `agent demo`: the seed's four cases through the real loop, the real
//! tools and the person's own watchdog, driven by a built-in scripted
//! model. It needs no key and no network, runs in a temporary workspace,
//! and finishes in seconds.
//!
//! 1. A repeater runs `ls` forever.
//! 2. An error storm runs a missing test script with a new retry count
//!    each time.
//! 3. Stagnation: different read-only commands that all show the same file.
//! 4. A diligent agent edits a file every turn: its budget is renewed up to
//!    the hard cap, where it gets one tool-less turn to summarise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, TurnOutcome};
use crate::client::{ApiError, Model, ModelResponse, NoticeFn, Piece, Request};
use crate::config::Settings;
use crate::protocol::ToolCall;
use crate::runtime::Runtime;
use crate::script::{self, ScriptHost};
use crate::tools::Registry;
use crate::ui::demo::DemoSink;
use crate::ui::{Style, report};
use crate::watchdog::{Judge, Watchdog};

#[derive(Clone, Copy, Debug)]
enum Case {
    Repeater,
    ErrorStorm,
    Stagnation,
    Diligent,
}

impl Case {
    fn title(self) -> &'static str {
        match self {
            Case::Repeater => "1. A repeater: the same `ls`, forever",
            Case::ErrorStorm => "2. An error storm: a failing command, retried with new arguments",
            Case::Stagnation => "3. Stagnation: busy reading, learning nothing new",
            Case::Diligent => "4. A diligent agent: real edits every turn",
        }
    }

    /// The call the scripted model makes on turn `n` (from 1).
    fn call(self, n: u32) -> (&'static str, Value) {
        const READS: [&str; 6] = [
            "cat notes.txt",
            "head -n 50 notes.txt",
            "tail -n 50 notes.txt",
            "sed -n p notes.txt",
            "awk 1 notes.txt",
            "grep -h . notes.txt",
        ];
        match self {
            Case::Repeater => ("run_shell", json!({"command": "ls"})),
            Case::ErrorStorm => (
                "run_shell",
                json!({"command": format!("./run-tests --retry={n}")}),
            ),
            Case::Stagnation => (
                "run_shell",
                json!({"command": READS[(n as usize - 1) % READS.len()]}),
            ),
            Case::Diligent => (
                "edit_file",
                json!({"path": "counter.txt", "old_string": format!("step {}", n - 1), "new_string": format!("step {n}")}),
            ),
        }
    }
}

/// A model that plays one case: a tool call per turn, and a short summary
/// when the request carries no tools.
struct ScriptedModel {
    case: Case,
    turn: AtomicU32,
}

impl Model for ScriptedModel {
    fn name(&self) -> &str {
        "demo-scripted-model"
    }

    fn respond<'a>(
        &'a self,
        body: &'a Request<'a>,
        on_piece: &'a mut (dyn FnMut(Piece) + Send),
        _on_notice: NoticeFn<'a>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ApiError>> {
        Box::pin(async move {
            let n = self.turn.fetch_add(1, Ordering::Relaxed) + 1;
            if !body.has_tools() {
                let text = format!(
                    "Summary: I made {} edits; the counter is at step {}.",
                    n - 1,
                    n - 1
                );
                on_piece(Piece::Text(text.clone()));
                return Ok(ModelResponse {
                    content: text,
                    finish_reason: Some("stop".into()),
                    ..ModelResponse::default()
                });
            }
            let (name, args) = self.case.call(n);
            Ok(ModelResponse {
                tool_calls: vec![ToolCall {
                    id: format!("call_{n}"),
                    name: name.into(),
                    arguments: args.to_string(),
                }],
                finish_reason: Some("tool_calls".into()),
                ..ModelResponse::default()
            })
        })
    }
}

/// The person's watchdog (or the built-in one), fresh for each case.
fn watchdog(host: &ScriptHost) -> Watchdog {
    match host.get(script::WATCHDOG) {
        Some(s) => script::watchdog::from_script(s.clone()).0,
        None => script::watchdog::default_watchdog().0,
    }
}

/// Runs the four cases. Returns the process exit code.
pub async fn run(settings: &Settings, style: Style) -> u8 {
    let (host, notes) = ScriptHost::load(&settings.config_dir);
    for note in notes
        .iter()
        .filter(|n| !matches!(n, script::LoadNote::Loaded { .. }))
    {
        report::warning(style, &note.message());
    }
    let workspace = match tempfile_dir() {
        Ok(dir) => dir,
        Err(e) => {
            report::error(style, &format!("cannot create a temporary workspace: {e}"));
            return crate::cli::exit::USAGE;
        }
    };
    let root = workspace.path().to_path_buf();
    let prepared = std::fs::write(
        root.join("notes.txt"),
        "TODO: fix the parser\nTODO: write tests\n",
    )
    .and_then(|_| std::fs::write(root.join("counter.txt"), "step 0\n"));
    if let Err(e) = prepared {
        report::error(style, &format!("cannot prepare the demo workspace: {e}"));
        return crate::cli::exit::USAGE;
    }
    report::out(&format!(
        "agent demo: a scripted model in a temporary workspace ({})",
        root.display()
    ));
    report::out("The watchdog uses your watchdog.rhai (or the built-in one).");
    for case in [
        Case::Repeater,
        Case::ErrorStorm,
        Case::Stagnation,
        Case::Diligent,
    ] {
        report::out(&format!(
            "\n{}",
            style.cyan(&format!("━━━ {} ━━━", case.title()))
        ));
        let runtime = Arc::new(Runtime::new(
            root.clone(),
            root.join(".outputs"),
            std::env::vars().filter(|(k, _)| k == "PATH" || k == "HOME"),
        ));
        let model = Arc::new(ScriptedModel {
            case,
            turn: AtomicU32::new(0),
        });
        let mut agent = Agent::new(
            model,
            Arc::new(Registry::with_builtins()),
            runtime,
            "demo".into(),
            Judge::new(watchdog(&host), root.clone()),
        );
        let sink = DemoSink::new(style, !matches!(case, Case::Diligent));
        let outcome = agent
            .run_turn("Do the task.", &sink, &CancellationToken::new())
            .await;
        let budget = agent.budget();
        let (used, limit) = (budget.used, budget.limit);
        match outcome {
            Ok(TurnOutcome::Stopped { summary, .. }) => {
                if let Some(summary) = summary {
                    report::out(&format!("  last, tool-less turn: {summary}"));
                }
                report::out(&format!(
                    "  → stopped after {used} turns (budget {used}/{limit})"
                ));
            }
            Ok(other) => report::out(&format!("  → ended without a stop: {other:?}")),
            Err(e) => report::out(&format!("  → failed: {e}")),
        }
    }
    report::out(
        "\nThe runaways were repaired once and then stopped long before the budget ran out;\nthe diligent agent kept its budget renewed until the hard cap.",
    );
    crate::cli::exit::OK
}

fn tempfile_dir() -> std::io::Result<TempDir> {
    let base = std::env::temp_dir().join(format!("agent-demo-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    Ok(TempDir(base))
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

//! The interactive REPL (minimal: read a line, run a turn, print).

use std::sync::Arc;

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use tokio_util::sync::CancellationToken;

use super::TextSink;
use crate::agent::{Agent, TurnOutcome};

/// Runs the REPL until the person exits. Returns the process exit code.
pub fn run(rt: &tokio::runtime::Runtime, agent: &mut Agent, sink: Arc<TextSink>) -> u8 {
    let mut editor = match DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            sink.error(&format!("cannot start the line editor: {e}"));
            return crate::cli::exit::USAGE;
        }
    };
    loop {
        let line = match editor.readline("› ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => return crate::cli::exit::OK,
            Err(e) => {
                sink.error(&format!("cannot read input: {e}"));
                return crate::cli::exit::USAGE;
            }
        };
        let input = line.trim();
        if input.is_empty() {
            continue;
        }
        if input == "/exit" || input == "/quit" {
            return crate::cli::exit::OK;
        }
        let _ = editor.add_history_entry(input);
        let cancel = CancellationToken::new();
        let outcome = rt.block_on(async {
            let watcher = {
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        cancel.cancel();
                    }
                })
            };
            let outcome = agent.run_turn(input, sink.as_ref(), &cancel).await;
            watcher.abort();
            outcome
        });
        match outcome {
            Ok(TurnOutcome::Done { .. }) => {}
            Ok(TurnOutcome::Stopped { reason, .. }) => sink.error(&format!("stopped: {reason}")),
            Ok(TurnOutcome::Cancelled) => sink.error("interrupted"),
            Err(e) => sink.error(&e.to_string()),
        }
    }
}

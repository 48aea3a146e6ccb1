//! `agent replay FILE`: the watchdog over a recorded run, one JSON verdict
//! per model turn, so people can test their rules before trusting them.
//!
//! Input is JSON lines, one [`TurnRecord`] per model turn. Every live run
//! appends its turns in the same format to `<data dir>/runs/`, so any real
//! session can be replayed.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{TurnRecord, Verdict, VerdictKind, Watchdog};

/// One verdict line of the output.
pub fn verdict_json(turn: usize, v: &Verdict) -> Value {
    let budget = v.budget();
    let mut line = json!({
        "turn": turn,
        "verdict": v.kind().as_str(),
        "reason": v.reason(),
        "budget": {"used": budget.used, "limit": budget.limit},
    });
    // Which detector fired, and why: its message and the evidence.
    if let Some(stop) = v.stop() {
        line["rule"] = json!(stop.rule);
        line["message"] = json!(stop.message);
        line["evidence"] = json!(stop.evidence);
    }
    line
}

/// A line of the input that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ReplayError {
    pub line: usize,
    pub message: String,
}

/// What `agent replay` says about a saved conversation given instead of
/// a run log.
pub const NOT_A_RUN_LOG: &str = "this is a saved conversation (a transcript from <data dir>/sessions/), not a run log; replay the file with the same name in <data dir>/runs/";

/// Parses a replay file's text.
pub fn parse(text: &str) -> Result<Vec<TurnRecord>, ReplayError> {
    let first = text.lines().enumerate().find(|(_, l)| !l.trim().is_empty());
    if let Some((i, line)) = first
        && let Ok(Value::Object(map)) = serde_json::from_str::<Value>(line)
        && (map.get("type").and_then(Value::as_str) == Some("session") || map.contains_key("role"))
    {
        return Err(ReplayError {
            line: i + 1,
            message: NOT_A_RUN_LOG.to_string(),
        });
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<TurnRecord>(l).map_err(|e| ReplayError {
                line: i + 1,
                message: format!(
                    "{e}. Each line must be a JSON object like {{\"user\": \"...\", \"text\": \"...\", \"calls\": [{{\"name\": \"run_shell\", \"input\": {{...}}, \"status\": \"completed\", \"output\": \"...\"}}]}}"
                ),
            })
        })
        .collect()
}

/// Runs the watchdog over `turns`. Returns `(turn number, verdict)` for
/// every turn judged; after a stop, turns are skipped until the next `user`.
pub fn run(watchdog: &mut Watchdog, turns: &[TurnRecord]) -> Vec<(usize, Verdict)> {
    let mut out = Vec::new();
    for (i, turn) in turns.iter().enumerate() {
        if watchdog.stopped() && turn.user.is_none() {
            continue;
        }
        out.push((i + 1, watchdog.observe(turn)));
    }
    out
}

/// Appends each live turn to a run log in the replay format.
#[derive(Debug)]
pub struct RunLog {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl RunLog {
    /// A log at `path` (see `DataDir::run_log`), created on first write.
    pub fn new(path: PathBuf) -> Self {
        RunLog { path, file: None }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one turn and flushes. `redact` blanks secret values out of
    /// the line. Failures are returned for the caller to report; the run
    /// goes on either way.
    pub fn append(
        &mut self,
        turn: &TurnRecord,
        redact: &dyn Fn(String) -> String,
    ) -> std::io::Result<()> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            self.file = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        if let Some(f) = self.file.as_mut() {
            // One write per line: a line is never split by a crash between
            // its text and its newline, and a turn costs one system call.
            let mut line = redact(serde_json::to_string(turn).map_err(std::io::Error::other)?);
            line.push('\n');
            f.write_all(line.as_bytes())?;
            f.flush()?;
        }
        Ok(())
    }
}

/// Whether a verdict ends the turn.
pub fn is_stop(v: &Verdict) -> bool {
    v.kind() == VerdictKind::Stop
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_is_not_a_run_log() {
        let transcript = "{\"type\":\"session\",\"id\":\"x\",\"workspace\":\"/w\",\"model\":\"m\",\"started\":\"t\"}\n{\"role\":\"user\",\"content\":\"hi\"}\n";
        let err = parse(transcript).unwrap_err();
        assert!(err.message.contains("not a run log"), "{err}");
        let messages_only = "{\"role\":\"user\",\"content\":\"hi\"}\n";
        assert!(parse(messages_only).is_err());
        let junk = "{\"colour\":\"blue\"}\n";
        let err = parse(junk).unwrap_err();
        assert!(err.message.contains("colour"), "{err}");
        let log = "{\"user\":\"go\",\"calls\":[]}\n";
        assert_eq!(parse(log).unwrap().len(), 1);
    }
}

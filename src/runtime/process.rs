//! Running one shell command. (Interface stub; implementation in progress.)

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// What to run and under which limits.
#[derive(Clone, Debug)]
pub struct CommandSpec {
    /// A shell command line, run with `bash -c` (or `sh -c` without bash).
    pub command: String,
    pub cwd: PathBuf,
    /// Environment for the child; nothing else is inherited.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub inactivity_timeout: Duration,
    pub kill_grace: Duration,
    /// Bytes of each stream kept for the model (head and tail).
    pub output_cap: usize,
    /// Directory where a stream larger than `output_cap` is saved whole.
    pub spill_dir: PathBuf,
    /// A file-name-safe label for spill files (e.g. the tool call id).
    pub label: String,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited by itself (possibly killed by a signal it raised).
    Exited,
    /// It ran past its wall-clock limit and its group was killed.
    TimedOut,
    /// It printed nothing for the inactivity limit and its group was killed.
    Inactive,
    /// The turn was cancelled and its group was killed.
    Cancelled,
}

/// One captured stream, ready for the model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// What the model sees: the whole stream when it fits the cap, otherwise
    /// head + marker + tail. Invalid UTF-8 replaced, ANSI escapes stripped.
    pub text: String,
    /// Bytes the stream produced in all.
    pub total_bytes: u64,
    /// The file holding the whole stream, when it overflowed the cap.
    pub spilled: Option<PathBuf>,
}

/// The result of [`run`].
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The exit code, when the process exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    pub ended: Ended,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
}

/// Runs `spec.command` to completion, timeout or cancellation.
pub async fn run(spec: CommandSpec, cancel: CancellationToken) -> std::io::Result<Outcome> {
    let _ = (spec, cancel);
    Err(std::io::Error::other(
        "runtime::process::run is not implemented yet",
    ))
}

//! `run_shell`: one shell command in the workspace, through
//! `runtime::process`.
//!
//! The tool only builds the [`CommandSpec`] from the runtime's limits and
//! turns the [`Outcome`] into text; timeouts, process groups, output caps
//! and spilling belong to the runtime. The formatting is the pure
//! [`format_outcome`], tested on hand-built outcomes.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::{ToolContext, cancelled, messages};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::runtime::process::{Captured, Ended, Outcome};
use crate::runtime::{Confinement, How, RunError};
use crate::runtime::{DEFAULT_INACTIVITY_TIMEOUT, DEFAULT_SHELL_TIMEOUT, MAX_SHELL_TIMEOUT};
use crate::tools::{Tool, ToolSpec, arg_str, arg_u64};

/// The tool description. The numbers are the runtime defaults; a runtime
/// configured otherwise still enforces its own limits.
fn description() -> String {
    format!(
        "Runs a shell command with bash in the workspace directory and returns its stdout, stderr and exit code. \
stdin is closed, so commands that prompt fail: pass non-interactive flags (e.g. `-y`). \
Each call starts a fresh shell; `cd` and variables do not carry over, so chain steps with `&&`. \
Timeout: {default} s by default, at most {max} s (`timeout`); a command that prints nothing for {idle} s is killed. \
Long output is cut in the middle and saved whole to a file whose path is given. \
Servers, watchers and other long-running processes never finish: start them in the background with output redirected (`cmd > log 2>&1 &`) and read the log. \
Prefer read_file, write_file, edit_file and list_dir for file work, and grep and glob over `grep -r`, `rg` and `find`.",
        default = DEFAULT_SHELL_TIMEOUT.as_secs(),
        max = MAX_SHELL_TIMEOUT.as_secs(),
        idle = DEFAULT_INACTIVITY_TIMEOUT.as_secs(),
    )
}

/// The `run_shell` tool.
pub struct RunShell {
    spec: ToolSpec,
}

impl RunShell {
    pub fn new() -> Self {
        RunShell {
            spec: ToolSpec {
                name: "run_shell".to_string(),
                description: description(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "command": {
                            "type": "string",
                            "description": "The command line to run, as passed to `bash -c`."
                        },
                        "timeout": {
                            "type": "integer",
                            "description": format!(
                                "Timeout in seconds. Default {}, max {}.",
                                DEFAULT_SHELL_TIMEOUT.as_secs(),
                                MAX_SHELL_TIMEOUT.as_secs()
                            )
                        },
                        "sandbox": {
                            "type": "boolean",
                            "description": "Default true. false runs this one command outside the sandbox (network, writes outside the workspace); the user is asked first. Use it only after a command failed because of the sandbox."
                        }
                    },
                    "required": ["command"]
                }),
            },
        }
    }
}

impl Default for RunShell {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for RunShell {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            if ctx.cancel.is_cancelled() {
                return cancelled();
            }
            let command = arg_str(&args, "command");
            if command.trim().is_empty() {
                return ToolOutput::failed(ErrorKind::InvalidArgs, messages::SHELL_EMPTY_COMMAND);
            }
            let asked = arg_u64(&args, "timeout")
                .filter(|&s| s > 0)
                .map(Duration::from_secs);
            let runtime = &ctx.runtime;
            let timeout = runtime.shell_timeout(asked);
            let inactivity = runtime.limits.inactivity_timeout;
            let max = runtime.limits.max_shell_timeout;
            // Only an explicit `false` (or "false") leaves the sandbox.
            let leave = match args.get("sandbox") {
                Some(Value::Bool(b)) => !*b,
                Some(Value::String(s)) => s.eq_ignore_ascii_case("false"),
                _ => false,
            };
            let confinement = if leave {
                Confinement::Unsandboxed
            } else {
                Confinement::Sandboxed
            };
            match runtime
                .run_command_in(
                    command,
                    asked,
                    &ctx.call_id,
                    &ctx.cancel,
                    How {
                        confinement,
                        live: Some(ctx.live.clone()),
                    },
                )
                .await
            {
                Ok(outcome) => format_outcome(&outcome, timeout, inactivity, max),
                Err(RunError::Denied(text)) => ToolOutput::failed(ErrorKind::Denied, text),
                Err(RunError::Io(e)) => {
                    ToolOutput::failed(ErrorKind::Failed, messages::shell_spawn_failed(&e))
                }
            }
        })
    }
}

/// Turns an outcome into what the model reads: stdout, a `[stderr]`
/// section when stderr is not empty (or `(no output)` when both are), then
/// one status line. `timeout` and `inactivity` are the limits the command
/// ran under; `max_timeout` is what the model may ask for next time.
pub fn format_outcome(
    outcome: &Outcome,
    timeout: Duration,
    inactivity: Duration,
    max_timeout: Duration,
) -> ToolOutput {
    let mut text = String::new();
    push_stream(&mut text, "stdout", &outcome.stdout);
    if !outcome.stderr.text.is_empty() {
        push_line(&mut text, messages::SHELL_STDERR_HEADER);
        push_stream(&mut text, "stderr", &outcome.stderr);
    }
    if text.is_empty() {
        text.push_str(messages::SHELL_NO_OUTPUT);
    }

    let (status_line, output) = match outcome.ended {
        Ended::Exited => match (outcome.exit_code, outcome.signal) {
            (Some(0), _) => (messages::shell_exit_code(0), ToolOutput::ok("")),
            (Some(code), _) => (
                messages::shell_exit_code(code),
                ToolOutput::failed(ErrorKind::Failed, ""),
            ),
            (None, Some(signal)) => (
                messages::shell_signal(signal, signal_name(signal)),
                ToolOutput::failed(ErrorKind::Failed, ""),
            ),
            (None, None) => (
                messages::SHELL_NO_STATUS.to_string(),
                ToolOutput::failed(ErrorKind::Failed, ""),
            ),
        },
        Ended::TimedOut => (
            messages::shell_timed_out(timeout.as_secs(), max_timeout.as_secs()),
            ToolOutput::failed(ErrorKind::Timeout, ""),
        ),
        Ended::Inactive => (
            messages::shell_inactive(inactivity.as_secs()),
            ToolOutput::failed(ErrorKind::Timeout, ""),
        ),
        Ended::Cancelled => (
            messages::SHELL_CANCELLED.to_string(),
            ToolOutput::failed(ErrorKind::Cancelled, ""),
        ),
    };
    push_line(&mut text, &status_line);
    ToolOutput {
        text,
        ..output.with_exit_code(outcome.exit_code)
    }
}

/// Appends one captured stream, and a note when it was spilled to a file.
fn push_stream(text: &mut String, name: &str, stream: &Captured) {
    if stream.text.is_empty() {
        return;
    }
    push_line(text, stream.text.strip_suffix('\n').unwrap_or(&stream.text));
    if let Some(file) = &stream.spilled {
        let file = file.display().to_string();
        let note = if stream.spill_dropped > 0 {
            messages::shell_spilled_capped(name, stream.total_bytes, &file, stream.spill_dropped)
        } else {
            messages::shell_spilled(name, stream.total_bytes, &file)
        };
        push_line(text, &note);
    }
}

/// Appends `line` on a line of its own.
fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(line);
}

/// The conventional name of a signal number, e.g. `SIGKILL`.
fn signal_name(signal: i32) -> Option<&'static str> {
    nix::sys::signal::Signal::try_from(signal)
        .ok()
        .map(|s| s.as_str())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::protocol::ToolStatus;
    use crate::tools::builtin::test_support::call;

    const TIMEOUT: Duration = Duration::from_secs(120);
    const IDLE: Duration = Duration::from_secs(180);
    const MAX: Duration = Duration::from_secs(600);

    fn captured(text: &str) -> Captured {
        Captured {
            text: text.to_string(),
            total_bytes: text.len() as u64,
            spilled: None,
            spill_dropped: 0,
        }
    }

    fn outcome(
        stdout: &str,
        stderr: &str,
        ended: Ended,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> Outcome {
        Outcome {
            exit_code: code,
            signal,
            ended,
            stdout: captured(stdout),
            stderr: captured(stderr),
            duration: Duration::from_millis(5),
        }
    }

    fn format(o: &Outcome) -> ToolOutput {
        format_outcome(o, TIMEOUT, IDLE, MAX)
    }

    #[test]
    fn success_shows_stdout_and_exit_code() {
        let out = format(&outcome("hello\n", "", Ended::Exited, Some(0), None));
        assert_eq!(
            out,
            ToolOutput::ok("hello\n[exit code: 0]").with_exit_code(Some(0))
        );
    }

    #[test]
    fn no_output_is_said_explicitly() {
        let out = format(&outcome("", "", Ended::Exited, Some(0), None));
        assert_eq!(out.text, "(no output)\n[exit code: 0]");
    }

    #[test]
    fn stderr_gets_its_own_section_and_failures_keep_the_code() {
        let out = format(&outcome("partial", "boom\n", Ended::Exited, Some(2), None));
        assert_eq!(out.text, "partial\n[stderr]\nboom\n[exit code: 2]");
        assert_eq!(out.status, ToolStatus::Failed);
        assert_eq!(out.error_kind, Some(ErrorKind::Failed));
        assert_eq!(out.exit_code, Some(2));

        let out = format(&outcome("", "only err\n", Ended::Exited, Some(1), None));
        assert_eq!(out.text, "[stderr]\nonly err\n[exit code: 1]");
    }

    #[test]
    fn signals_are_named() {
        let out = format(&outcome("", "", Ended::Exited, None, Some(9)));
        assert_eq!(out.text, "(no output)\n[killed by signal 9 (SIGKILL)]");
        assert_eq!((out.status, out.exit_code), (ToolStatus::Failed, None));
    }

    #[test]
    fn timeouts_explain_what_to_do() {
        let out = format(&outcome("step 1\n", "", Ended::TimedOut, None, Some(9)));
        assert_eq!(out.error_kind, Some(ErrorKind::Timeout));
        assert_eq!(
            out.text,
            "step 1\n[timed out after 120 s: the command and its process group were killed; the output above is partial. \
Re-run with a larger timeout (max 600) or run it in the background with output redirected to a file]"
        );
        let out = format_outcome(
            &outcome("", "", Ended::TimedOut, None, None),
            MAX,
            IDLE,
            MAX,
        );
        assert!(
            out.text.contains("It already had the maximum timeout"),
            "{}",
            out.text
        );

        let out = format(&outcome("", "", Ended::Inactive, None, Some(15)));
        assert_eq!(out.error_kind, Some(ErrorKind::Timeout));
        assert!(
            out.text.contains("[killed after 180 s without output"),
            "{}",
            out.text
        );
        assert!(out.text.contains("stdin is closed"), "{}", out.text);
    }

    #[test]
    fn cancellation_is_its_own_kind() {
        let out = format(&outcome("", "", Ended::Cancelled, None, Some(15)));
        assert_eq!(out.error_kind, Some(ErrorKind::Cancelled));
        assert_eq!(out.text, "(no output)\n[cancelled by the person]");
    }

    #[test]
    fn spilled_streams_name_their_file() {
        let mut o = outcome("head\n…cut…\ntail\n", "", Ended::Exited, Some(0), None);
        o.stdout.total_bytes = 5 * 1024 * 1024;
        o.stdout.spilled = Some(PathBuf::from("/data/outputs/s1/call_1.stdout"));
        let out = format(&o);
        assert_eq!(
            out.text,
            "head\n…cut…\ntail\n[stdout was 5.0 MB and was cut in the middle; the whole of it is saved in /data/outputs/s1/call_1.stdout: \
read parts with read_file (offset/limit) or search it with grep]\n[exit code: 0]"
        );
    }

    #[tokio::test]
    async fn schema_checks_run_before_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), "run_shell", json!({"timeout": 5})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(
            out.text.contains("missing required field `command`"),
            "{}",
            out.text
        );
        let out = call(dir.path(), "run_shell", json!({"command": "  "})).await;
        assert_eq!(out.text, messages::SHELL_EMPTY_COMMAND);
    }
}

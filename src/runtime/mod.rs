//! The safe shell/file layer. Every built-in tool and every script tool
//! reaches the machine through this module, so each safety rule (timeouts,
//! output caps, confinement, secret scrubbing) is written once and applies
//! to both.
//!
//! - [`process`]: run one shell command in its own process group, with a
//!   wall-clock and an inactivity timeout, bounded capture and lossless spill.
//! - [`fs`]: path resolution against the workspace and atomic writes.
//! - [`sandbox`]: Landlock confinement of shell commands' writes, through
//!   the agent's own binary as a launcher.

pub mod fs;
pub mod process;
pub mod sandbox;

use std::path::PathBuf;
use std::time::Duration;

/// Default wall-clock limit for one shell command. Two minutes covers a test
/// suite or a build step; the model may ask for more, up to
/// [`MAX_SHELL_TIMEOUT`].
pub const DEFAULT_SHELL_TIMEOUT: Duration = Duration::from_secs(120);

/// The most a model may ask for with `run_shell`'s `timeout` argument.
pub const MAX_SHELL_TIMEOUT: Duration = Duration::from_secs(600);

/// A command that prints nothing for this long is presumed hung and killed.
/// Long enough for a silent link step; shorter than the largest wall clock,
/// so a hung command with a generous timeout is still caught.
pub const DEFAULT_INACTIVITY_TIMEOUT: Duration = Duration::from_secs(180);

/// How long a process group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// Bytes of one output stream (stdout or stderr) the model sees before the
/// middle is cut out and the whole stream is spilled to a file. About 8k
/// tokens: large enough for a compiler error, small enough for any context.
pub const DEFAULT_OUTPUT_CAP: usize = 30_000;

/// Knobs of the runtime. Defaults are the named constants above.
#[derive(Clone, Debug)]
pub struct Limits {
    pub shell_timeout: Duration,
    pub max_shell_timeout: Duration,
    pub inactivity_timeout: Duration,
    pub kill_grace: Duration,
    pub output_cap: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            shell_timeout: DEFAULT_SHELL_TIMEOUT,
            max_shell_timeout: MAX_SHELL_TIMEOUT,
            inactivity_timeout: DEFAULT_INACTIVITY_TIMEOUT,
            kill_grace: KILL_GRACE,
            output_cap: DEFAULT_OUTPUT_CAP,
        }
    }
}

/// The runtime shared by all tools of one agent.
#[derive(Clone, Debug)]
pub struct Runtime {
    /// The workspace root: the directory the agent was started in. Shell
    /// commands run here and relative paths resolve against it.
    pub workspace: PathBuf,
    /// Where overflowing outputs are saved (`<data dir>/outputs/<session>`).
    pub spill_dir: PathBuf,
    pub limits: Limits,
    /// The environment child processes get, already scrubbed of secrets.
    pub child_env: Vec<(String, String)>,
    /// When set, shell commands run confined by Landlock; `None` (the
    /// default) runs them unconfined.
    pub sandbox: Option<sandbox::Sandbox>,
}

impl Runtime {
    /// A runtime rooted at `workspace`, spilling to `spill_dir`, with the
    /// given environment scrubbed by [`is_secret_var`].
    pub fn new(
        workspace: PathBuf,
        spill_dir: PathBuf,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        Runtime {
            workspace,
            spill_dir,
            limits: Limits::default(),
            child_env: env.into_iter().filter(|(k, _)| !is_secret_var(k)).collect(),
            sandbox: None,
        }
    }

    /// The same runtime with shell commands confined by the sandbox, run
    /// through `launcher` (the agent binary). Writable: the workspace, the
    /// spill dir and the temp dirs. Call [`sandbox::probe`] first: where the
    /// kernel has no Landlock, commands would run unconfined.
    pub fn with_sandbox(mut self, launcher: PathBuf) -> Self {
        self.sandbox = Some(sandbox::Sandbox::for_workspace(
            launcher,
            &self.workspace,
            &self.spill_dir,
        ));
        self
    }
}

impl Runtime {
    /// The spec for running `command` in the workspace under this runtime's
    /// limits. `timeout` is what the caller asked for; it is clamped to
    /// [`Limits::max_shell_timeout`] and defaults to
    /// [`Limits::shell_timeout`].
    pub fn command_spec(
        &self,
        command: &str,
        timeout: Option<Duration>,
        label: &str,
    ) -> process::CommandSpec {
        let timeout = self.shell_timeout(timeout);
        process::CommandSpec {
            command: command.to_string(),
            cwd: self.workspace.clone(),
            env: self.child_env.clone(),
            timeout,
            inactivity_timeout: self.limits.inactivity_timeout,
            kill_grace: self.limits.kill_grace,
            output_cap: self.limits.output_cap,
            spill_dir: self.spill_dir.clone(),
            label: sanitize_label(label),
            sandbox: self.sandbox.clone(),
        }
    }

    /// The wall-clock limit for a command that asked for `asked`: capped at
    /// the maximum, the default when nothing was asked.
    pub fn shell_timeout(&self, asked: Option<Duration>) -> Duration {
        asked
            .unwrap_or(self.limits.shell_timeout)
            .min(self.limits.max_shell_timeout)
    }

    /// Runs a shell command: the one entry point for the `run_shell` tool
    /// and the script API's `shell()`, so both obey the same rules.
    pub async fn run_command(
        &self,
        command: &str,
        timeout: Option<Duration>,
        label: &str,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> std::io::Result<process::Outcome> {
        process::run(self.command_spec(command, timeout, label), cancel.clone()).await
    }
}

/// Longest spill-file label; ids are short in practice, and a file name
/// must stay well under the 255-byte limit.
const MAX_LABEL_LEN: usize = 64;

/// Makes a label (a tool call id) safe for a file name: ASCII letters,
/// digits, `-` and `_` kept, anything else replaced by `_`, length capped.
pub fn sanitize_label(label: &str) -> String {
    let clean: String = label
        .chars()
        .take(MAX_LABEL_LEN)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.chars().all(|c| c == '_') {
        "call".to_string()
    } else {
        clean
    }
}

/// Whether an environment variable looks like a secret and must not reach
/// child processes: names containing KEY, TOKEN, SECRET or PASSWORD (any
/// case), which covers `AGENT_API_KEY` itself.
pub fn is_secret_var(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|needle| upper.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_clamped_and_labels_sanitized() {
        let rt = Runtime::new(PathBuf::from("/w"), PathBuf::from("/s"), Vec::new());
        assert_eq!(rt.shell_timeout(None), DEFAULT_SHELL_TIMEOUT);
        assert_eq!(
            rt.shell_timeout(Some(Duration::from_secs(30))),
            Duration::from_secs(30)
        );
        assert_eq!(
            rt.shell_timeout(Some(Duration::from_secs(10_000))),
            MAX_SHELL_TIMEOUT
        );
        assert_eq!(sanitize_label("call_ab-12"), "call_ab-12");
        assert_eq!(sanitize_label("../../etc/x"), "______etc_x");
        assert_eq!(sanitize_label("///"), "call");
        assert_eq!(sanitize_label(&"a".repeat(500)).len(), MAX_LABEL_LEN);
    }

    #[test]
    fn secrets_are_scrubbed_from_the_child_environment() {
        let env = [
            ("PATH", "/bin"),
            ("AGENT_API_KEY", "k"),
            ("GITHUB_TOKEN", "t"),
            ("db_password", "p"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("HOME", "/h"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let rt = Runtime::new(PathBuf::from("/w"), PathBuf::from("/s"), env);
        let names: Vec<&str> = rt.child_env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "HOME"]);
    }
}

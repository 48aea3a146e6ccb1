//! The safe shell/file layer. Every built-in tool and every script tool
//! reaches the machine through this module, so each safety rule (timeouts,
//! output caps, confinement, secret scrubbing) is written once and applies
//! to both.
//!
//! - [`process`]: run one shell command in its own process group, with a
//!   wall-clock and an inactivity timeout, bounded capture and lossless spill.
//! - [`fs`]: path resolution and confinement to the workspace, atomic writes.
//! - [`policy`]: the approval policy (allow, ask, deny) for commands and writes.
//! - [`sandbox`]: Landlock confinement of shell commands' writes, through
//!   the agent's own binary as a launcher.

pub mod fs;
pub mod policy;
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
    /// Canonical directories file tools may use: the workspace, the spill
    /// dir (so the model can read saved outputs), and any extra roots.
    roots: Vec<PathBuf>,
    /// The approval policy for commands and writes.
    pub policy: policy::Policy,
    /// Secret values (the API key, scrubbed variables) removed from every
    /// tool output.
    redactions: Vec<String>,
    /// When set, shell commands run confined by Landlock; `None` (the
    /// default) runs them unconfined.
    pub sandbox: Option<sandbox::Sandbox>,
    /// The agent's data dir (transcripts, run logs, spilled outputs): the
    /// search tools never walk into it, even when it lies in the workspace.
    pub data_dir: Option<PathBuf>,
}

/// Secret values shorter than this are not redacted from outputs: they
/// would match ordinary text.
const MIN_REDACTED_LEN: usize = 8;

/// Why a command did not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The policy or the person refused it; the text is for the model.
    #[error("{0}")]
    Denied(String),
    /// It could not be started.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Runtime {
    /// A runtime rooted at `workspace`, spilling to `spill_dir`, with the
    /// given environment scrubbed by [`is_secret_var`] and a policy that
    /// allows everything.
    pub fn new(
        workspace: PathBuf,
        spill_dir: PathBuf,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        Self::with_secret_rule(workspace, spill_dir, env, &is_secret_var)
    }

    /// Like [`Runtime::new`], with the script's rule for secret names.
    pub fn with_secret_rule(
        workspace: PathBuf,
        spill_dir: PathBuf,
        env: impl IntoIterator<Item = (String, String)>,
        is_secret: &dyn Fn(&str) -> bool,
    ) -> Self {
        let (secret, child_env): (Vec<_>, Vec<_>) =
            env.into_iter().partition(|(k, _)| is_secret(k));
        let mut runtime = Runtime {
            workspace,
            spill_dir,
            limits: Limits::default(),
            child_env,
            roots: Vec::new(),
            sandbox: None,
            data_dir: None,
            policy: policy::Policy::default(),
            redactions: secret
                .into_iter()
                .map(|(_, v)| v)
                .filter(|v| v.len() >= MIN_REDACTED_LEN)
                .collect(),
        };
        runtime.set_extra_roots(&[]);
        runtime
    }

    /// Sets the directories file tools may use besides the workspace and
    /// the spill dir.
    pub fn set_extra_roots(&mut self, extra: &[PathBuf]) {
        let canonical = |p: &PathBuf| p.canonicalize().unwrap_or_else(|_| p.clone());
        self.roots = [&self.workspace, &self.spill_dir]
            .into_iter()
            .chain(extra.iter())
            .map(canonical)
            .collect();
    }

    /// Adds a secret value to remove from every tool output.
    pub fn add_redaction(&mut self, value: &str) {
        if value.len() >= MIN_REDACTED_LEN && !self.redactions.iter().any(|r| r == value) {
            self.redactions.push(value.to_string());
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

    /// Removes secret values from a tool's output.
    pub fn redact(&self, text: String) -> String {
        if !self.redactions.iter().any(|r| text.contains(r.as_str())) {
            return text;
        }
        self.redactions
            .iter()
            .fold(text, |t, r| t.replace(r.as_str(), "[redacted]"))
    }

    /// Resolves a path a tool was given: relative to the workspace, and
    /// confined to the allowed roots. `Err` is a reason for the model.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let joined = fs::resolve(&self.workspace, path)?;
        fs::confine(&self.roots, &joined)
    }

    /// Asks the policy whether `path` may be written.
    pub async fn check_write(&self, path: &std::path::Path) -> Result<(), String> {
        self.policy
            .check(&policy::Action::Write {
                path: path.to_path_buf(),
            })
            .await
    }

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
    /// and the script API's `shell()`, so both obey the same rules (the
    /// approval policy first, then the limits).
    pub async fn run_command(
        &self,
        command: &str,
        timeout: Option<Duration>,
        label: &str,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<process::Outcome, RunError> {
        self.policy
            .check(&policy::Action::Shell {
                command: command.to_string(),
            })
            .await
            .map_err(RunError::Denied)?;
        let mut outcome =
            process::run(self.command_spec(command, timeout, label), cancel.clone()).await?;
        outcome.stdout.text = self.redact(std::mem::take(&mut outcome.stdout.text));
        outcome.stderr.text = self.redact(std::mem::take(&mut outcome.stderr.text));
        Ok(outcome)
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

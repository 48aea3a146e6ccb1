//! The safe shell/file layer. Every built-in tool and every script tool
//! reaches the machine through this module, so each safety rule (timeouts,
//! output caps, confinement, secret scrubbing) is written once and applies
//! to both.
//!
//! - [`process`]: run one shell command in its own process group, with a
//!   wall-clock and an inactivity timeout, bounded capture and lossless spill.
//! - [`beneath`]: race-free file access beneath the workspace and the other
//!   allowed roots (`openat2` with `RESOLVE_BENEATH`), regular files only.
//! - [`checkpoint`]: what the tools changed per model turn, kept in the
//!   data dir, and restoring it (undo) without overwriting the person's edits;
//!   [`undo_pack`]: its objects, one append-only file per session.
//! - [`fs`]: joining a path the model gave to the workspace, sizes, atomic
//!   writes of the agent's own files.
//! - [`command`] and [`effects`]: a shell command parsed for the policy:
//!   what runs, what it writes, deletes or changes, and what is opaque.
//! - [`policy`]: the approval policy (allow, ask, deny) for commands and writes.
//! - [`spill`]: spill files, created new in the agent's own 0700 dir and
//!   capped on disk.
//! - [`sandbox`]: containment (session, PID namespace, limits) and
//!   confinement (mounts, Landlock, seccomp, no network) of every shell
//!   command, through the agent's own binary as a launcher.
//! - [`secrets`]: the child environment's allow-list, the secret rule, and
//!   blanking secret values out of everything the agent writes.

pub mod beneath;
pub mod checkpoint;
pub mod command;
pub mod effects;
pub mod fs;
pub mod policy;
pub mod process;
pub mod sandbox;
pub mod secrets;
pub mod spill;
pub mod undo_pack;

use std::path::{Path, PathBuf};
use std::sync::Arc;
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
    /// Most bytes of one spill file on disk ([`spill::DEFAULT_SPILL_CAP`]).
    pub spill_cap: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            shell_timeout: DEFAULT_SHELL_TIMEOUT,
            max_shell_timeout: MAX_SHELL_TIMEOUT,
            inactivity_timeout: DEFAULT_INACTIVITY_TIMEOUT,
            kill_grace: KILL_GRACE,
            output_cap: DEFAULT_OUTPUT_CAP,
            spill_cap: spill::DEFAULT_SPILL_CAP,
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
    /// The environment child processes get: the allow-list's variables,
    /// none a secret (see [`secrets`]). The script API's `env()` reads it.
    pub child_env: Vec<(String, String)>,
    /// Directories file tools may use, held open: the workspace, the spill
    /// dir (so the model can read saved outputs), and any extra roots.
    roots: Vec<beneath::Root>,
    /// The agent's own directories (the spill dir, and the data and config
    /// dirs once [`Runtime::protect`] names them): file tools may read
    /// beneath them but never write.
    protected: Arc<[PathBuf]>,
    /// The approval policy for commands and writes.
    pub policy: policy::Policy,
    /// Blanks secret values (the API key, secret variables) out of tool
    /// outputs, spill files, transcripts and run logs.
    redactor: Arc<secrets::Redactor>,
    /// When set, shell commands start through the sandbox launcher
    /// (contained, and confined as it says); `None` (library default, the
    /// unit tests) runs `bash -c` directly in its own process group.
    pub sandbox: Option<sandbox::Sandbox>,
    /// The agent's data dir (transcripts, run logs, spilled outputs): the
    /// search tools never walk into it, even when it lies in the workspace.
    pub data_dir: Option<PathBuf>,
}

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
    /// default allow-list and secret rule applied to `env` (see
    /// [`secrets`]) and a policy that allows everything.
    pub fn new(
        workspace: PathBuf,
        spill_dir: PathBuf,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        Self::with_env_rules(workspace, spill_dir, env, &[], &secrets::is_secret_env)
    }

    /// Like [`Runtime::new`], with `env_allow` from the script added to the
    /// allow-list and the script's rule for secrets (name, value).
    pub fn with_env_rules(
        workspace: PathBuf,
        spill_dir: PathBuf,
        env: impl IntoIterator<Item = (String, String)>,
        env_allow: &[String],
        is_secret: &dyn Fn(&str, &str) -> bool,
    ) -> Self {
        let (child_env, secret) =
            secrets::split_env(env, &secrets::allow_list(env_allow), is_secret);
        let mut runtime = Runtime {
            workspace,
            spill_dir,
            limits: Limits::default(),
            child_env,
            roots: Vec::new(),
            protected: Arc::from(Vec::new()),
            sandbox: None,
            data_dir: None,
            policy: policy::Policy::default(),
            redactor: Arc::new(secrets::Redactor::new(secret)),
        };
        runtime.set_extra_roots(&[]);
        runtime.protect(&[]);
        runtime
    }

    /// Sets the directories file tools may use besides the workspace and
    /// the spill dir.
    pub fn set_extra_roots(&mut self, extra: &[PathBuf]) {
        self.roots = [&self.workspace, &self.spill_dir]
            .into_iter()
            .chain(extra.iter())
            .map(|p| beneath::Root::new(p.as_path()))
            .collect();
    }

    /// Names the agent's own directories (data dir, config dir) that file
    /// tools must not write beneath; the spill dir always is one.
    pub fn protect(&mut self, dirs: &[PathBuf]) {
        let mut all = vec![self.spill_dir.clone()];
        all.extend(dirs.iter().cloned());
        self.protected = Arc::from(all);
    }

    /// Adds a secret value to blank out of every output (from
    /// [`secrets::MIN_REDACTED_LEN`] characters).
    pub fn add_redaction(&mut self, value: &str) {
        Arc::make_mut(&mut self.redactor).extend([value.to_string()]);
    }

    /// The same runtime with every shell command started through the
    /// sandbox launcher `sandbox` describes (see
    /// [`sandbox::Sandbox::for_session`]).
    pub fn with_sandbox(mut self, sandbox: sandbox::Sandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// Blanks secret values, and their reversed, base64 and hex forms, out
    /// of a text (a tool output, a transcript or run-log line).
    pub fn redact(&self, text: String) -> String {
        self.redactor.redact_str(text)
    }

    /// The redactor, for streams (spill files) and logs.
    pub fn redactor(&self) -> &Arc<secrets::Redactor> {
        &self.redactor
    }

    /// Places a path a tool was given beneath one of the allowed roots:
    /// relative paths join the workspace. The result is a handle whose
    /// every access stays beneath that root ([`beneath::Located`]). `Err`
    /// is a reason for the model.
    pub fn locate(&self, path: &str) -> Result<beneath::Located, String> {
        let joined = beneath::lexical(&fs::resolve(&self.workspace, path)?);
        let place = |p: &Path| {
            self.roots.iter().find_map(|root| {
                root.strip(p)
                    .map(|rel| beneath::Located::new(root.clone(), rel, self.protected.clone()))
            })
        };
        if let Some(found) = place(&joined) {
            return Ok(found);
        }
        // Spelled through a symlink outside the roots (say, a link to the
        // workspace): its real location decides the root. Only the choice
        // of root depends on this; every access stays beneath it.
        let real = fs::resolve_existing(&joined);
        place(&real).ok_or_else(|| {
            beneath::AccessError::Outside {
                resolved: real,
                root: self.workspace.clone(),
            }
            .to_string()
        })
    }

    /// Asks the policy whether `path` may be written.
    pub async fn check_write(&self, path: &std::path::Path) -> Result<(), String> {
        self.check_write_showing(path, None).await
    }

    /// [`Runtime::check_write`], with the diff of the write for the person
    /// to see before they answer.
    pub async fn check_write_showing(
        &self,
        path: &std::path::Path,
        diff: Option<String>,
    ) -> Result<(), String> {
        self.policy
            .check_with_preview(
                &policy::Action::Write {
                    path: path.to_path_buf(),
                },
                diff.map(|d| self.redact(d)),
            )
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
        let mut env = self.child_env.clone();
        if let Some(dir) = self.sandbox.as_ref().and_then(|s| s.temp_dir.as_ref()) {
            env.retain(|(k, _)| k != "TMPDIR");
            env.push(("TMPDIR".into(), dir.display().to_string()));
        }
        process::CommandSpec {
            command: command.to_string(),
            cwd: self.workspace.clone(),
            env,
            timeout,
            inactivity_timeout: self.limits.inactivity_timeout,
            kill_grace: self.limits.kill_grace,
            output_cap: self.limits.output_cap,
            spill_dir: self.spill_dir.clone(),
            label: sanitize_label(label),
            spill_cap: self.limits.spill_cap,
            sandbox: self.sandbox.clone(),
            redactor: (!self.redactor.is_empty()).then(|| Arc::clone(&self.redactor)),
            live: None,
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
        let how = How {
            confinement: Confinement::Sandboxed,
            live: None,
        };
        self.run_command_in(command, timeout, label, cancel, how)
            .await
    }

    /// [`Runtime::run_command`], with the sandbox left for this one command
    /// when `how.confinement` is [`Confinement::Unsandboxed`] (a decision
    /// the approval policy made for this call; the command is still
    /// contained: its own session and PID namespace, the limits, its tree
    /// dies with it), and its last line shown on `how.live` as it runs.
    pub async fn run_command_in(
        &self,
        command: &str,
        timeout: Option<Duration>,
        label: &str,
        cancel: &tokio_util::sync::CancellationToken,
        how: How,
    ) -> Result<process::Outcome, RunError> {
        let confinement = how.confinement;
        // Leaving a sandbox that confines is the policy's decision, per call.
        let leaves = confinement == Confinement::Unsandboxed
            && self.sandbox.as_ref().is_some_and(|s| s.options.confine);
        let action = if leaves {
            policy::Action::Unsandboxed {
                command: command.to_string(),
            }
        } else {
            policy::Action::Shell {
                command: command.to_string(),
            }
        };
        self.policy.check(&action).await.map_err(RunError::Denied)?;
        let mut spec = self.command_spec(command, timeout, label);
        spec.live = how.live;
        if let Some(sandbox) = spec.sandbox.as_mut() {
            if confinement == Confinement::Unsandboxed {
                *sandbox = sandbox.unconfined();
                spec.env.retain(|(k, _)| k != "TMPDIR");
                spec.env.extend(
                    self.child_env
                        .iter()
                        .filter(|(k, _)| k == "TMPDIR")
                        .cloned(),
                );
            } else if let Some(refusal) = &sandbox.refusal {
                return Err(RunError::Denied(refusal.clone()));
            }
        }
        let mut outcome = process::run(spec, cancel.clone()).await?;
        outcome.stdout.text = self.redact(std::mem::take(&mut outcome.stdout.text));
        outcome.stderr.text = self.redact(std::mem::take(&mut outcome.stderr.text));
        Ok(outcome)
    }
}

/// How one command runs: in or out of the sandbox, and where its last line
/// goes while it runs.
#[derive(Clone, Debug)]
pub struct How {
    pub confinement: Confinement,
    pub live: Option<crate::protocol::LiveLine>,
}

/// Whether one command runs in the sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// As the session's sandbox says (the default).
    Sandboxed,
    /// Out of the sandbox for this call, still contained.
    Unsandboxed,
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

pub use secrets::is_secret_var;

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
            ("FOO", "not allowed"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let rt = Runtime::new(PathBuf::from("/w"), PathBuf::from("/s"), env);
        let names: Vec<&str> = rt.child_env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "HOME"]);
        // Values of 4 characters and more are blanked; shorter ones can't be.
        let mut rt = rt;
        rt.add_redaction("k7%Qz");
        assert_eq!(
            rt.redact("db_password=p key=k7%Qz".into()),
            "db_password=p key=[redacted]"
        );
    }
}

//! The safe shell/file layer. Every built-in tool and every script tool
//! reaches the machine through this module, so each safety rule (timeouts,
//! output caps, confinement, secret scrubbing) is written once and applies
//! to both.
//!
//! - [`process`]: run one shell command in its own process group, with a
//!   wall-clock and an inactivity timeout, bounded capture and lossless spill.
//! - [`fs`]: path resolution against the workspace and atomic writes.

pub mod fs;
pub mod process;

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
        }
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

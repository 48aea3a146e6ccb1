//! The shell sandbox and process containment: every command the agent runs
//! starts through its own binary as a launcher (`agent sandbox-exec`),
//! which gives it a new session (no controlling terminal), a PID namespace
//! whose init dies with the agent (so the whole tree dies on timeout,
//! cancel, or the agent's death by any signal, `kill -9` included), and a
//! process and memory limit. Under `sandbox: "auto"` (the default) or
//! `"require"` it is also confined:
//!
//! - writes only beneath the workspace and a private per-session temp dir
//!   (Landlock, and a read-only mount view that also refuses chmod, chown
//!   and utime); `.git/hooks`, `.git/config` and the agent's own config and
//!   data dirs read-only even inside the workspace;
//! - no network unless `network: true`: a network namespace (TCP, UDP),
//!   Landlock TCP rules, and a seccomp filter refusing Unix sockets, which
//!   cross network namespaces by path;
//! - a fresh `/proc` and a nested user namespace: no view of the agent's
//!   process (its environment, its memory), no capability over the mounts;
//!   signals only within the sandbox (PID namespace, Landlock scopes).
//!
//! There is no unsafe code and no `pre_exec` hook: each step runs in a
//! process of its own ([`contain`]), built from the safe APIs in
//! [`layers`]. What this kernel supports is probed once per session
//! ([`report::probe`]) and shown layer by layer; under `"require"` a
//! missing layer refuses every command with a message that names it.

pub mod cgroup;
mod contain;
pub mod layers;
pub mod report;
pub mod spawner;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use landlock::RulesetError;
use serde::{Deserialize, Deserializer};

pub use contain::{PROCESS_LIMIT_EXIT, process_limit_message};
pub use report::{PROBE_TIMEOUT, ProbeHandle, SandboxReport, probe};

/// The hidden subcommand that contains (and confines) a command.
pub const EXEC_SUBCOMMAND: &str = "sandbox-exec";

/// The hidden subcommand run as PID 1 of the command's namespace.
pub const INIT_SUBCOMMAND: &str = "sandbox-init";

/// The hidden subcommand that reports what the kernel supports.
pub const PROBE_SUBCOMMAND: &str = "sandbox-probe";

/// Default process limit per command: room for `make -j` and a test
/// runner's workers, far below what would hurt the machine.
pub const DEFAULT_MAX_PROCESSES: u64 = 512;

/// Default memory limit per process of a command, in MB (`RLIMIT_DATA`):
/// above any compiler or linker run, below what would swap a laptop.
pub const DEFAULT_MAX_MEMORY_MB: u64 = 8192;

/// The launcher's exit code when the sandbox cannot be set up or the
/// program cannot be started (as in shells: "cannot execute").
pub const LAUNCH_FAILED: u8 = 126;

/// The launcher's exit code when the program does not exist (as in shells).
pub const PROGRAM_NOT_FOUND: u8 = 127;

/// `sandbox` in policy.rhai.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// Confine where the kernel supports it; say which layers are missing.
    #[default]
    Auto,
    /// Refuse every command when a layer is missing.
    Require,
    /// No confinement; commands are still contained (their trees die).
    Off,
}

impl SandboxMode {
    /// The word used in policy.rhai.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Require => "require",
            SandboxMode::Off => "off",
        }
    }
}

impl<'de> Deserialize<'de> for SandboxMode {
    /// `"auto"`, `"require"`, `"off"`, or the old `true`/`false` (read as
    /// `"auto"`/`"off"`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(SandboxMode::Auto),
            Raw::Bool(false) => Ok(SandboxMode::Off),
            Raw::Word(w) => match w.as_str() {
                "auto" => Ok(SandboxMode::Auto),
                "require" => Ok(SandboxMode::Require),
                "off" => Ok(SandboxMode::Off),
                other => Err(serde::de::Error::custom(format!(
                    "sandbox must be \"auto\", \"require\" or \"off\", not {other:?}"
                ))),
            },
        }
    }
}

impl serde::Serialize for SandboxMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What the launcher is told, on its command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Confine (mounts, Landlock, seccomp, network); without it, contain
    /// only.
    pub confine: bool,
    /// Leave the network on.
    pub network: bool,
    /// Directories beneath which the command may write.
    pub writable: Vec<PathBuf>,
    /// Paths inside writable dirs that stay read-only.
    pub read_only: Vec<PathBuf>,
    /// Process limit (0: none).
    pub max_processes: u64,
    /// Memory limit per process in MB (0: none).
    pub max_memory_mb: u64,
    /// Set by the launcher for the init: the ids to map in the command's
    /// nested user namespace.
    pub nest: Option<(u32, u32)>,
    /// The launcher was born in the agent's spawner cgroup, whose limit
    /// the agent set ([`spawner`]): it makes no cgroup of its own.
    pub held_cgroup: bool,
    /// The program and its arguments.
    pub program: Vec<OsString>,
}

impl LaunchOptions {
    /// The command line after the subcommand: flags, `--`, the program.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if self.confine {
            args.push("--confine".into());
        }
        if self.network {
            args.push("--network".into());
        }
        for dir in &self.writable {
            args.push("--write".into());
            args.push(dir.into());
        }
        for path in &self.read_only {
            args.push("--read-only".into());
            args.push(path.into());
        }
        args.push("--max-processes".into());
        args.push(self.max_processes.to_string().into());
        args.push("--max-memory-mb".into());
        args.push(self.max_memory_mb.to_string().into());
        if let Some((uid, gid)) = self.nest {
            args.push("--nest".into());
            args.push(format!("{uid}:{gid}").into());
        }
        if self.held_cgroup {
            args.push("--held-cgroup".into());
        }
        args.push("--".into());
        args.extend(self.program.iter().cloned());
        args
    }

    /// Parses what [`LaunchOptions::to_args`] wrote.
    ///
    /// # Errors
    ///
    /// On an unknown flag or a missing or bad value.
    pub fn parse(args: &[OsString]) -> Result<Self, LaunchError> {
        let mut opts = LaunchOptions::default();
        let mut it = args.iter();
        let bad = |what: &str| LaunchError::Usage(what.to_string());
        while let Some(arg) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| bad(&format!("{arg:?} needs a value")))
            };
            let number = |v: &OsString| -> Result<u64, LaunchError> {
                v.to_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad(&format!("{arg:?} needs a number, not {v:?}")))
            };
            match arg.to_str() {
                Some("--confine") => opts.confine = true,
                Some("--network") => opts.network = true,
                Some("--held-cgroup") => opts.held_cgroup = true,
                Some("--write") => opts.writable.push(value()?.into()),
                Some("--read-only") => opts.read_only.push(value()?.into()),
                Some("--max-processes") => opts.max_processes = number(value()?)?,
                Some("--max-memory-mb") => opts.max_memory_mb = number(value()?)?,
                Some("--nest") => {
                    let v = value()?;
                    let pair = v
                        .to_str()
                        .and_then(|s| s.split_once(':'))
                        .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
                    opts.nest = Some(pair.ok_or_else(|| bad("--nest needs UID:GID"))?);
                }
                Some("--") => {
                    opts.program = it.cloned().collect();
                    break;
                }
                _ => return Err(bad(&format!("unknown argument {arg:?}"))),
            }
        }
        if opts.program.is_empty() {
            return Err(LaunchError::NoProgram);
        }
        Ok(opts)
    }
}

/// How a hidden subcommand ended: its exit code and what the caller
/// prints (the runtime prints nothing itself).
#[derive(Debug, PartialEq, Eq)]
pub struct Hidden {
    pub code: u8,
    /// A line for stdout (the probe's report).
    pub out: Option<String>,
    /// A line for stderr (why the launcher failed).
    pub err: Option<String>,
}

/// Runs the hidden subcommands. Call first thing in `main`, before any
/// thread starts (unsharing a user namespace needs a single thread);
/// `None` when `args` is not one of them.
pub fn hidden_main(args: &[OsString]) -> Option<Hidden> {
    let sub = args.get(1)?.to_str()?;
    let rest = args.get(2..).unwrap_or_default();
    let run = |f: fn(&LaunchOptions) -> Result<u8, LaunchError>| match LaunchOptions::parse(rest)
        .and_then(|opts| f(&opts))
    {
        Ok(code) => Hidden {
            code,
            out: None,
            err: None,
        },
        Err(e) => Hidden {
            code: e.exit_code(),
            out: None,
            err: Some(e.to_string()),
        },
    };
    match sub {
        EXEC_SUBCOMMAND => Some(run(contain::launcher)),
        INIT_SUBCOMMAND => Some(run(contain::init)),
        PROBE_SUBCOMMAND => {
            let report = report::probe_here();
            Some(Hidden {
                code: 0,
                out: Some(serde_json::to_string(&report).unwrap_or_default()),
                err: None,
            })
        }
        _ => None,
    }
}

/// Why the launcher could not run the program.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No program was given after `--`.
    #[error(
        "agent {EXEC_SUBCOMMAND}: no program given; use: agent {EXEC_SUBCOMMAND} [--confine] [--write DIR]... -- PROGRAM [ARGS...]"
    )]
    NoProgram,
    /// The command line was malformed.
    #[error("agent {EXEC_SUBCOMMAND}: {0}")]
    Usage(String),
    /// The kernel has Landlock but refused the ruleset.
    #[error(
        "agent sandbox: cannot confine the command: {0}; set sandbox: \"off\" in policy.rhai to run commands unconfined"
    )]
    Confine(#[from] RulesetError),
    /// A namespace, mount, limit or filter could not be set up.
    #[error("agent sandbox: {0}; the command did not run")]
    Setup(String),
    /// `exec` failed: the program is missing or not executable.
    #[error("agent sandbox: cannot run {program}: {source}")]
    Exec {
        program: String,
        #[source]
        source: io::Error,
    },
}

impl LaunchError {
    /// The exit code the launcher ends with, following shell conventions.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::Exec { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                PROGRAM_NOT_FOUND
            }
            _ => LAUNCH_FAILED,
        }
    }
}

/// The sandbox settings of policy.rhai.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxSettings {
    pub mode: SandboxMode,
    /// Commands may use the network.
    pub network: bool,
    /// Process limit per command (0: none).
    pub max_processes: u64,
    /// Memory limit per process in MB (0: none).
    pub max_memory_mb: u64,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            mode: SandboxMode::Auto,
            network: false,
            max_processes: DEFAULT_MAX_PROCESSES,
            max_memory_mb: DEFAULT_MAX_MEMORY_MB,
        }
    }
}

/// How commands are launched: which binary is the launcher, and what it
/// applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// The agent binary that understands [`EXEC_SUBCOMMAND`]: the running
    /// executable in the CLI, the freshly built one in tests.
    pub launcher: PathBuf,
    /// The mode the policy asked for.
    pub mode: SandboxMode,
    /// What the launcher applies to each command.
    pub options: LaunchOptions,
    /// The private temp dir commands get as `TMPDIR` (writable).
    pub temp_dir: Option<PathBuf>,
    /// Under `"require"` with a layer missing: why commands are refused.
    pub refusal: Option<String>,
    /// What the kernel supports, as probed for this session.
    pub report: SandboxReport,
    /// Removes the session's private temp dir when the last copy of this
    /// sandbox is dropped.
    pub cleanup: Option<std::sync::Arc<TempDirGuard>>,
}

/// Removes a directory tree when dropped (without following symlinks in
/// it). Every guard equals every other: it is bookkeeping, not state.
#[derive(Debug)]
pub struct TempDirGuard(pub PathBuf);

impl Drop for TempDirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl PartialEq for TempDirGuard {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TempDirGuard {}

impl Sandbox {
    /// Confinement to exactly these writable dirs, network off, default
    /// limits.
    pub fn new(launcher: PathBuf, writable: Vec<PathBuf>) -> Self {
        Sandbox {
            launcher,
            mode: SandboxMode::Auto,
            options: LaunchOptions {
                confine: true,
                writable,
                max_processes: DEFAULT_MAX_PROCESSES,
                max_memory_mb: DEFAULT_MAX_MEMORY_MB,
                ..LaunchOptions::default()
            },
            temp_dir: None,
            refusal: None,
            report: SandboxReport::default(),
            cleanup: None,
        }
    }

    /// The sandbox of a session: the workspace and `temp_dir` writable;
    /// the repository's hooks and config (its submodules' too, see
    /// [`git_read_only`]) and `protected` (the agent's config and data
    /// dirs) read-only; confinement as `settings` and `report` allow.
    pub fn for_session(
        launcher: PathBuf,
        settings: &SandboxSettings,
        report: &SandboxReport,
        workspace: &Path,
        temp_dir: &Path,
        protected: &[PathBuf],
    ) -> Self {
        let writable = vec![workspace.to_path_buf(), temp_dir.to_path_buf()];
        let mut read_only = git_read_only(&workspace.join(".git"));
        read_only.extend(protected.iter().cloned());
        let confine = settings.mode != SandboxMode::Off;
        let refusal = match settings.mode {
            SandboxMode::Require => report.refusal(settings.network),
            _ => None,
        };
        Sandbox {
            launcher,
            mode: settings.mode,
            options: LaunchOptions {
                confine,
                network: settings.network,
                writable,
                read_only,
                max_processes: settings.max_processes,
                max_memory_mb: settings.max_memory_mb,
                nest: None,
                held_cgroup: false,
                program: Vec::new(),
            },
            temp_dir: confine.then(|| temp_dir.to_path_buf()),
            refusal,
            report: report.clone(),
            cleanup: None,
        }
    }

    /// The same launcher without confinement, for one command the policy
    /// let out of the sandbox: still in its own session and PID namespace,
    /// still limited.
    pub fn unconfined(&self) -> Self {
        let mut copy = self.clone();
        copy.options.confine = false;
        copy.temp_dir = None;
        copy.refusal = None;
        copy
    }

    /// Whether commands run confined (the policy's `action.sandboxed`):
    /// confinement asked for, Landlock's write rules enforced, and not
    /// refused outright.
    pub fn confines(&self) -> bool {
        self.options.confine && self.report.landlock_fs.is_none() && self.refusal.is_none()
    }

    /// The one-line summary for the banner and `agent check`.
    pub fn describe(&self) -> String {
        self.report.describe(
            self.mode,
            self.options.network,
            (self.options.max_processes, self.options.max_memory_mb),
        )
    }

    /// The `--json` event: `{"type": "sandbox", "mode", "summary",
    /// "refused", "layers": {name: "on" | "missing: why"}}`.
    pub fn json_event(&self) -> serde_json::Value {
        let layers: serde_json::Map<String, serde_json::Value> = self
            .report
            .layers()
            .into_iter()
            .map(|(name, m)| {
                let state = match m {
                    None => "on".to_string(),
                    Some(why) => format!("missing: {why}"),
                };
                (name.to_string(), state.into())
            })
            .collect();
        serde_json::json!({
            "type": "sandbox",
            "mode": self.mode.as_str(),
            "network": self.options.network,
            "summary": self.describe(),
            "refused": self.refusal,
            "layers": layers,
        })
    }

    /// The launcher's arguments for running `shell -c command`; `held`
    /// when the spawner's cgroup holds the launcher ([`spawner`]).
    pub fn launcher_args(&self, shell: &Path, command: &str, held: bool) -> Vec<OsString> {
        let mut opts = self.options.clone();
        opts.held_cgroup = held;
        opts.program = vec![shell.into(), "-c".into(), command.into()];
        let mut args = vec![OsString::from(EXEC_SUBCOMMAND)];
        args.extend(opts.to_args());
        args
    }
}

/// The sandbox of one agent session, with what to tell the person.
#[derive(Clone, Debug)]
pub struct SessionSandbox {
    /// How every command is launched.
    pub sandbox: Sandbox,
    /// What this kernel supports, layer by layer.
    pub report: SandboxReport,
    /// The one-line summary for the banner and `agent check`.
    pub line: String,
    /// Whether a layer is missing (the line is then a warning).
    pub degraded: bool,
}

impl SessionSandbox {
    /// The same session's sandbox (launcher, report, temp dir) under
    /// `settings`, as a reload of policy.rhai may have changed them.
    pub fn with_settings(
        self,
        settings: &SandboxSettings,
        workspace: &Path,
        protected: &[PathBuf],
    ) -> SessionSandbox {
        let temp_dir = self
            .sandbox
            .cleanup
            .as_ref()
            .map(|g| g.0.clone())
            .unwrap_or_else(|| workspace.to_path_buf());
        let mut sandbox = Sandbox::for_session(
            self.sandbox.launcher.clone(),
            settings,
            &self.report,
            workspace,
            &temp_dir,
            protected,
        );
        sandbox.cleanup = self.sandbox.cleanup.clone();
        let line = sandbox.describe();
        SessionSandbox {
            degraded: line.contains("missing") || line.contains("REFUSED"),
            line,
            report: self.report,
            sandbox,
        }
    }
}

/// The probe of a session, started as early as possible (it runs while
/// the scripts load) and read by [`for_agent`].
#[derive(Debug)]
pub struct SessionProbe {
    launcher: PathBuf,
    handle: Result<ProbeHandle, String>,
    /// Where the report is kept between runs, and the key it is valid for.
    cache: Option<(PathBuf, String)>,
}

/// What a cached probe report is valid for: this binary (path, size,
/// mtime), this boot, this user, this kernel and its user-namespace
/// switches. Anything that could change what the kernel allows changes
/// the key, and the probe runs again.
fn probe_key(exe: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(exe).ok()?;
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    Some(format!(
        "{}|{}|{}.{}|{}|{}|{}|{}|{}|{}",
        exe.display(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        read("/proc/sys/kernel/random/boot_id"),
        nix::unistd::getuid(),
        read("/proc/sys/kernel/osrelease"),
        read("/proc/sys/user/max_user_namespaces"),
        read("/proc/sys/kernel/unprivileged_userns_clone"),
        read("/proc/self/cgroup").replace('\n', ";"),
    ))
}

/// The cached report, when its key matches.
fn cached_report(file: &Path, key: &str) -> Option<SandboxReport> {
    let text = std::fs::read_to_string(file).ok()?;
    let (first, rest) = text.split_once('\n')?;
    (first == key)
        .then(|| serde_json::from_str(rest).ok())
        .flatten()
}

impl SessionProbe {
    /// Starts probing with `exe`, the agent's own binary.
    pub fn start(exe: io::Result<PathBuf>) -> Self {
        Self::start_cached(exe, None)
    }

    /// Like [`SessionProbe::start`], keeping the report in `cache_dir`
    /// (the agent's data dir, which commands cannot write): a later run on
    /// the same binary, boot, user and kernel settings reads it instead of
    /// starting a probe process (about 6 ms of startup).
    pub fn start_cached(exe: io::Result<PathBuf>, cache_dir: Option<&Path>) -> Self {
        match exe {
            Ok(exe) => {
                let cache = cache_dir
                    .zip(probe_key(&exe))
                    .map(|(dir, key)| (dir.join(PROBE_CACHE), key));
                if let Some((file, key)) = &cache
                    && let Some(report) = cached_report(file, key)
                {
                    return SessionProbe {
                        handle: Err(String::new()),
                        launcher: exe,
                        cache: Some((file.clone(), key.clone())),
                    }
                    .with_report(report);
                }
                SessionProbe {
                    handle: Ok(ProbeHandle::start(&exe)),
                    launcher: exe,
                    cache,
                }
            }
            Err(e) => SessionProbe {
                launcher: PathBuf::new(),
                handle: Err(format!("cannot find the agent's own executable: {e}")),
                cache: None,
            },
        }
    }

    fn with_report(mut self, report: SandboxReport) -> Self {
        self.handle = Ok(ProbeHandle::done(report));
        self.cache = None;
        self
    }

    fn finish(self) -> (PathBuf, SandboxReport) {
        let report = match self.handle {
            Ok(handle) => {
                let fresh = !handle.is_done();
                let report = handle.finish();
                if fresh
                    && let Some((file, key)) = &self.cache
                    && !report.probe_failed()
                    && let Ok(json) = serde_json::to_string(&report)
                {
                    let _ =
                        crate::runtime::fs::write_atomic(file, format!("{key}\n{json}").as_bytes());
                }
                report
            }
            Err(why) => SandboxReport::unavailable(&why),
        };
        (self.launcher, report)
    }
}

/// The file in the data dir that keeps the probe's report.
pub const PROBE_CACHE: &str = "sandbox-probe.json";

/// Builds the session's sandbox from a started probe: `protected` are the
/// agent's config and data dirs. Never fails open: without a launcher
/// every layer is reported missing, and under `"require"` commands are
/// refused.
pub fn for_agent(
    probe: SessionProbe,
    settings: &SandboxSettings,
    workspace: &Path,
    session_id: &str,
    protected: &[PathBuf],
) -> SessionSandbox {
    let (launcher, report) = probe.finish();
    cgroup::sweep();
    // Moves into its cgroup now, off the first command's path.
    spawner::start();
    let mut notes = Vec::new();
    let mut cleanup = None;
    let temp_dir = match create_temp_dir(session_id) {
        Ok(dir) => {
            cleanup = Some(std::sync::Arc::new(TempDirGuard(dir.clone())));
            dir
        }
        Err(e) => {
            notes.push(format!(
                "cannot create a private temp dir ({e}); commands may write only the workspace"
            ));
            workspace.to_path_buf()
        }
    };
    let mut sandbox =
        Sandbox::for_session(launcher, settings, &report, workspace, &temp_dir, protected);
    sandbox.cleanup = cleanup;
    let mut line = sandbox.describe();
    let degraded = line.contains("missing") || !notes.is_empty();
    for note in notes {
        line.push_str("; ");
        line.push_str(&note);
    }
    SessionSandbox {
        sandbox,
        report,
        line,
        degraded,
    }
}

/// What `agent check` shows: the summary and one line per layer, probed
/// with `exe` under `settings`.
pub fn check_lines(exe: io::Result<PathBuf>, settings: &SandboxSettings) -> Vec<String> {
    let report = match exe {
        Ok(exe) => probe(&exe),
        Err(e) => {
            SandboxReport::unavailable(&format!("cannot find the agent's own executable: {e}"))
        }
    };
    let mut lines = vec![report.describe(
        settings.mode,
        settings.network,
        (settings.max_processes, settings.max_memory_mb),
    )];
    lines.extend(report.lines().into_iter().map(|l| format!("  {l}")));
    lines
}

/// Creates the private temp dir of a session, `<system temp>/agent-<id>`,
/// mode 0700, refusing one that already exists (another user's planted
/// directory or symlink).
///
/// # Errors
///
/// When it cannot be created.
pub fn create_temp_dir(session_id: &str) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("{TEMP_PREFIX}{session_id}"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// The private temp dirs' name: `agent-<session id>`, the id ending in
/// the pid that made it (`20261203-171045-4242`, `...-4242-1`).
const TEMP_PREFIX: &str = "agent-";

/// The pid in a private temp dir's name, if it is one. Pure.
pub fn temp_dir_owner(name: &str) -> Option<i32> {
    let id = name.strip_prefix(TEMP_PREFIX)?;
    let mut parts = id.split('-');
    let (date, time, pid) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(date, 8) || !digits(time, 6) || parts.count() > 1 {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Removes the private temp dirs of sessions whose process is gone (killed
/// by a signal, or a terminal closed under it, so its own cleanup never
/// ran). Only real directories of this user, never through a link.
pub fn sweep_stale_temp_dirs() {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let me = nix::unistd::getuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_dir_owner) else {
            continue;
        };
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        // Signal 0 tests for the process; EPERM means it exists (as
        // another user), so only "no such process" counts as gone.
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if meta.is_dir() && meta.uid() == me && gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Most git directories [`git_read_only`] looks at: a bound on the walk
/// of `.git/modules`, far above any real repository's submodules.
const MAX_GIT_DIRS: usize = 4096;

/// What a command must not change in the repository at `git` (the
/// workspace's `.git`), since git runs it outside the sandbox: the
/// hooks, `config` and `config.worktree` of the repository and of every
/// submodule's git directory under `.git/modules` (names with slashes
/// nest: `modules/libs/json`). Paths that do not exist are skipped when
/// the mounts are made.
pub fn git_read_only(git: &Path) -> Vec<PathBuf> {
    const FILES: [&str; 3] = ["hooks", "config", "config.worktree"];
    let mut out = Vec::new();
    let mut gitdirs = vec![git.to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = gitdirs.pop() {
        out.extend(FILES.iter().map(|f| dir.join(f)));
        // Below `modules`: a directory with a HEAD is a submodule's git
        // directory; any other is a level of a name with slashes.
        let mut levels = vec![dir.join("modules")];
        while let Some(level) = levels.pop() {
            let Ok(entries) = std::fs::read_dir(&level) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > MAX_GIT_DIRS {
                    return out;
                }
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let path = entry.path();
                if path.join("HEAD").is_file() {
                    gitdirs.push(path);
                } else {
                    levels.push(path);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_private_temp_dirs_name_an_owner() {
        assert_eq!(temp_dir_owner("agent-20261203-171045-4242"), Some(4242));
        assert_eq!(temp_dir_owner("agent-20261203-171045-4242-3"), Some(4242));
        for other in [
            "agent-",
            "agent-notes",
            "agent-2026-171045-4242",
            "agent-20261203-171045-0",
            "agent-20261203-171045-x",
            "agent-20261203-171045-1-2-3",
            "cargo-20261203-171045-4242",
        ] {
            assert_eq!(temp_dir_owner(other), None, "{other}");
        }
    }

    #[test]
    fn launch_options_round_trip() {
        let opts = LaunchOptions {
            confine: true,
            network: false,
            writable: vec!["/work space".into(), "/tmp/agent-1".into()],
            read_only: vec!["/work space/.git/hooks".into()],
            max_processes: 512,
            max_memory_mb: 100,
            nest: Some((1000, 100)),
            held_cgroup: true,
            program: os(&["/bin/bash", "-c", "echo hi > out; rm -- -x"]),
        };
        let args = opts.to_args();
        assert_eq!(LaunchOptions::parse(&args).expect("parse"), opts);
        // Flags after `--` belong to the program.
        let parsed = LaunchOptions::parse(&os(&["--", "sh", "--confine"])).expect("parse");
        assert!(!parsed.confine);
        assert_eq!(parsed.program, os(&["sh", "--confine"]));
    }

    #[test]
    fn bad_launch_options_say_what_is_wrong() {
        assert!(matches!(
            LaunchOptions::parse(&os(&["--confine"])),
            Err(LaunchError::NoProgram)
        ));
        let err = LaunchOptions::parse(&os(&["--max-processes", "x", "--", "sh"])).unwrap_err();
        assert!(err.to_string().contains("needs a number"), "{err}");
        let err = LaunchOptions::parse(&os(&["--bogus", "--", "sh"])).unwrap_err();
        assert!(err.to_string().contains("--bogus"), "{err}");
        assert_eq!(err.exit_code(), LAUNCH_FAILED);
    }

    #[test]
    fn sandbox_mode_reads_words_and_old_booleans() {
        let read = |v: serde_json::Value| serde_json::from_value::<SandboxMode>(v);
        assert_eq!(
            read(serde_json::json!("auto")).expect("auto"),
            SandboxMode::Auto
        );
        assert_eq!(
            read(serde_json::json!("require")).expect("req"),
            SandboxMode::Require
        );
        assert_eq!(
            read(serde_json::json!("off")).expect("off"),
            SandboxMode::Off
        );
        assert_eq!(
            read(serde_json::json!(true)).expect("true"),
            SandboxMode::Auto
        );
        assert_eq!(
            read(serde_json::json!(false)).expect("false"),
            SandboxMode::Off
        );
        let err = read(serde_json::json!("maybe")).unwrap_err();
        assert!(
            err.to_string().contains("\"auto\", \"require\" or \"off\""),
            "{err}"
        );
    }

    #[test]
    fn a_session_sandbox_protects_git_and_the_agent_dirs() {
        let report = SandboxReport::default();
        let settings = SandboxSettings::default();
        let sandbox = Sandbox::for_session(
            "agent".into(),
            &settings,
            &report,
            Path::new("/w"),
            Path::new("/tmp/agent-1"),
            &["/home/u/.config/agent".into()],
        );
        assert!(sandbox.options.confine);
        assert_eq!(
            sandbox.options.writable,
            [Path::new("/w"), Path::new("/tmp/agent-1")]
        );
        assert!(
            sandbox
                .options
                .read_only
                .contains(&PathBuf::from("/w/.git/hooks"))
        );
        assert!(
            sandbox
                .options
                .read_only
                .contains(&PathBuf::from("/w/.git/config"))
        );
        assert!(
            sandbox
                .options
                .read_only
                .contains(&PathBuf::from("/home/u/.config/agent"))
        );
        assert_eq!(sandbox.refusal, None);
        assert!(!sandbox.unconfined().options.confine);
        let args = sandbox.launcher_args(Path::new("/bin/bash"), "--help", false);
        assert_eq!(args[0], EXEC_SUBCOMMAND);
        assert_eq!(
            &args[args.len() - 3..],
            os(&["/bin/bash", "-c", "--help"]).as_slice()
        );
    }

    #[test]
    fn require_on_a_kernel_without_landlock_refuses() {
        let report = SandboxReport {
            landlock_fs: Some("this kernel has no Landlock".into()),
            ..SandboxReport::default()
        };
        let settings = SandboxSettings {
            mode: SandboxMode::Require,
            ..SandboxSettings::default()
        };
        let sandbox = Sandbox::for_session(
            "agent".into(),
            &settings,
            &report,
            Path::new("/w"),
            Path::new("/t"),
            &[],
        );
        let refusal = sandbox.refusal.expect("refused");
        assert!(refusal.contains("landlock fs"), "{refusal}");
        let auto = Sandbox::for_session(
            "agent".into(),
            &SandboxSettings::default(),
            &report,
            Path::new("/w"),
            Path::new("/t"),
            &[],
        );
        assert_eq!(auto.refusal, None);
    }

    #[test]
    fn launch_errors_use_shell_exit_codes() {
        let missing = LaunchError::Exec {
            program: "nope".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert_eq!(missing.exit_code(), PROGRAM_NOT_FOUND);
        assert_eq!(LaunchError::NoProgram.exit_code(), LAUNCH_FAILED);
    }

    #[test]
    fn hidden_main_ignores_other_subcommands() {
        assert_eq!(hidden_main(&os(&["agent", "check"])), None);
        assert_eq!(hidden_main(&os(&["agent"])), None);
    }
}

//! The shell sandbox: on Linux with Landlock, shell commands run with their
//! writes confined to the workspace and the temp dirs.
//!
//! There is no unsafe code and no `pre_exec` hook. Instead,
//! [`process::run`](super::process::run) starts the agent's own binary as a
//! launcher, `agent sandbox-exec --write DIR ... -- bash -c CMD`. The
//! launcher restricts itself with a Landlock ruleset ([`confine`]) and then
//! `exec`s the shell, which keeps the restriction, as does everything the
//! shell starts. The agent process itself is never restricted.
//!
//! The ruleset handles write rights only, so reading and executing stay
//! allowed everywhere, while writing, truncating, creating, removing,
//! renaming and linking are allowed only beneath the writable dirs and
//! `/dev` (for `/dev/null` and `/dev/tty`).
//!
//! Whether this kernel can enforce the ruleset is found out once, in a child
//! process ([`probe`]), before the sandbox is switched on. Where Landlock is
//! missing the caller warns once and runs commands unconfined; the launcher
//! itself never prints anything into a command's output.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use landlock::{
    ABI, AccessFs, LandlockStatus, PathBeneath, PathFd, RestrictionStatus, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus,
};

/// The hidden subcommand that confines itself and runs a program.
pub const EXEC_SUBCOMMAND: &str = "sandbox-exec";

/// The hidden subcommand that reports whether the kernel enforces the
/// ruleset (it restricts only its own short-lived process).
pub const PROBE_SUBCOMMAND: &str = "sandbox-probe";

/// The launcher's flag naming one writable directory.
pub const WRITE_FLAG: &str = "--write";

/// The Landlock ABI whose write rights the ruleset handles. ABI 3 (Linux
/// 6.2) is the first that covers every way to change a file: ABI 1 cannot
/// allow cross-directory renames at all, ABI 2 cannot stop `truncate`.
/// Later ABIs add ioctls on devices and connecting to Unix sockets, which
/// are not writes; they are left to a later policy.
const WRITE_ABI: ABI = ABI::V3;

/// Writable for every command: `/dev/null`, `/dev/tty` and friends are
/// where harmless output goes.
const ALWAYS_WRITABLE: &[&str] = &["/dev"];

/// The system temp dir, writable even when `TMPDIR` points elsewhere,
/// because many tools ignore `TMPDIR`.
const SYSTEM_TEMP: &str = "/tmp";

/// How long the probe child may take. It only creates a ruleset and tries
/// one write, which takes milliseconds; a stuck probe means no sandbox.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the agent checks whether the probe child has exited.
const PROBE_POLL: Duration = Duration::from_millis(5);

/// The launcher's exit code when the ruleset cannot be applied or the
/// program cannot be started (as in shells: "cannot execute").
pub const LAUNCH_FAILED: u8 = 126;

/// The launcher's exit code when the program does not exist (as in shells).
pub const PROGRAM_NOT_FOUND: u8 = 127;

/// What the agent says, once, when the sandbox was asked for and the kernel
/// cannot enforce it.
pub const NO_LANDLOCK_WARNING: &str = "the kernel has no Landlock; shell commands run without the sandbox, under the approval policy only";

/// How to launch shell commands confined: which binary is the launcher and
/// which directories stay writable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// The agent binary that understands [`EXEC_SUBCOMMAND`]: the running
    /// executable in the CLI, the freshly built one in tests.
    pub launcher: PathBuf,
    /// Directories beneath which commands may write (besides `/dev`).
    pub writable: Vec<PathBuf>,
}

impl Sandbox {
    /// A sandbox launched by `launcher` with exactly these writable dirs.
    pub fn new(launcher: PathBuf, writable: Vec<PathBuf>) -> Self {
        Sandbox { launcher, writable }
    }

    /// The sandbox for an agent: the workspace and the temp dirs (`$TMPDIR`
    /// and `/tmp`) are writable. The spill dir is not: the agent writes
    /// spill files there, and a command must not plant or change them.
    pub fn for_workspace(launcher: PathBuf, workspace: &Path) -> Self {
        Sandbox::new(launcher, writable_dirs(workspace, &std::env::temp_dir()))
    }

    /// The launcher's arguments for running `shell -c command`:
    /// `sandbox-exec --write DIR ... -- SHELL -c COMMAND`.
    pub fn launcher_args(&self, shell: &Path, command: &str) -> Vec<OsString> {
        let mut args = vec![OsString::from(EXEC_SUBCOMMAND)];
        for dir in &self.writable {
            args.push(WRITE_FLAG.into());
            args.push(dir.into());
        }
        args.extend(["--".into(), shell.into(), "-c".into(), command.into()]);
        args
    }
}

/// The writable dirs of an agent, in order and without duplicates: the
/// workspace, `temp_dir` and `/tmp`.
pub fn writable_dirs(workspace: &Path, temp_dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in [workspace, temp_dir, Path::new(SYSTEM_TEMP)] {
        if !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// How far the kernel enforced the ruleset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// Every write right is confined; `abi` is the kernel's Landlock ABI.
    Full { abi: String },
    /// Landlock is there but too old for some write rights (ABI < 3).
    Partial { abi: String },
    /// The kernel has Landlock built in but not enabled at boot.
    NotEnabled,
    /// The kernel has no Landlock at all.
    NotImplemented,
    /// Nothing was enforced, for a reason the kernel did not tell.
    NotEnforced,
}

impl Enforcement {
    fn from_status(status: &RestrictionStatus) -> Self {
        let abi = match status.landlock {
            LandlockStatus::NotEnabled => return Enforcement::NotEnabled,
            LandlockStatus::NotImplemented => return Enforcement::NotImplemented,
            LandlockStatus::Available { effective_abi, .. } => effective_abi.to_string(),
        };
        match status.ruleset {
            RulesetStatus::FullyEnforced => Enforcement::Full { abi },
            RulesetStatus::PartiallyEnforced => Enforcement::Partial { abi },
            RulesetStatus::NotEnforced => Enforcement::NotEnforced,
        }
    }
}

/// Restricts the calling process (and everything it later `exec`s or
/// starts): writes only beneath `writable` and `/dev`. Irreversible; only
/// the launcher and the probe call it, never the agent.
///
/// Directories that do not exist are skipped: nothing can be written
/// beneath them anyway. On a kernel without Landlock this succeeds with
/// [`Enforcement::NotImplemented`] or [`Enforcement::NotEnabled`].
///
/// # Errors
///
/// When the kernel has Landlock but refuses the ruleset.
pub fn confine(writable: &[PathBuf]) -> Result<Enforcement, RulesetError> {
    let access = AccessFs::from_write(WRITE_ABI);
    let mut ruleset = Ruleset::default().handle_access(access)?.create()?;
    let always = ALWAYS_WRITABLE.iter().map(Path::new);
    for dir in writable.iter().map(PathBuf::as_path).chain(always) {
        if !dir.is_dir() {
            continue;
        }
        // A directory that cannot be opened stays read-only: failing closed.
        let Ok(fd) = PathFd::new(dir) else {
            continue;
        };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
    }
    let status = ruleset.restrict_self()?;
    Ok(Enforcement::from_status(&status))
}

/// Why the launcher could not run the program.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No program was given after `--`.
    #[error(
        "agent {EXEC_SUBCOMMAND}: no program given; use: agent {EXEC_SUBCOMMAND} --write DIR -- PROGRAM [ARGS...]"
    )]
    NoProgram,
    /// The kernel has Landlock but refused the ruleset.
    #[error(
        "agent sandbox: cannot confine the command: {0}; run the agent without --sandbox (and without AGENT_SANDBOX) to run commands unconfined"
    )]
    Confine(#[from] RulesetError),
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

/// The launcher: confines this process to `writable` and replaces it with
/// `program`. Returns only on failure.
///
/// When the kernel enforces nothing (or only part), the program still runs,
/// and nothing is printed: its streams belong to the command. The agent
/// knows beforehand from [`probe`] and only asks for the sandbox where it
/// works.
pub fn launch(writable: &[PathBuf], program: &[OsString]) -> LaunchError {
    let Some((first, rest)) = program.split_first() else {
        return LaunchError::NoProgram;
    };
    if let Err(e) = confine(writable) {
        return LaunchError::Confine(e);
    }
    let source = std::process::Command::new(first).args(rest).exec();
    LaunchError::Exec {
        program: first.to_string_lossy().into_owned(),
        source,
    }
}

/// What the probe child prints on its one line of stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// The ruleset was applied; see [`Enforcement`].
    Applied(Enforcement),
    /// Something failed; the text says what.
    Failed(String),
}

impl ProbeAnswer {
    /// The one-line wire form, parsed back by [`ProbeAnswer::parse`].
    pub fn line(&self) -> String {
        match self {
            ProbeAnswer::Applied(Enforcement::Full { abi }) => format!("enforced {abi}"),
            ProbeAnswer::Applied(Enforcement::Partial { abi }) => format!("partial {abi}"),
            ProbeAnswer::Applied(Enforcement::NotEnabled) => "not-enabled".into(),
            ProbeAnswer::Applied(Enforcement::NotImplemented) => "not-implemented".into(),
            ProbeAnswer::Applied(Enforcement::NotEnforced) => "not-enforced".into(),
            ProbeAnswer::Failed(why) => format!("failed {}", why.replace('\n', " ")),
        }
    }

    /// Reads a line written by [`ProbeAnswer::line`]; `None` for anything
    /// else.
    pub fn parse(line: &str) -> Option<ProbeAnswer> {
        let line = line.trim();
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let answer = match (word, rest) {
            ("enforced", abi) if !abi.is_empty() => {
                ProbeAnswer::Applied(Enforcement::Full { abi: abi.into() })
            }
            ("partial", abi) if !abi.is_empty() => {
                ProbeAnswer::Applied(Enforcement::Partial { abi: abi.into() })
            }
            ("not-enabled", "") => ProbeAnswer::Applied(Enforcement::NotEnabled),
            ("not-implemented", "") => ProbeAnswer::Applied(Enforcement::NotImplemented),
            ("not-enforced", "") => ProbeAnswer::Applied(Enforcement::NotEnforced),
            ("failed", why) => ProbeAnswer::Failed(why.into()),
            _ => return None,
        };
        Some(answer)
    }

    /// The probe process's exit code: 0 only when fully enforced.
    pub fn exit_code(&self) -> u8 {
        match self {
            ProbeAnswer::Applied(Enforcement::Full { .. }) => 0,
            _ => 1,
        }
    }

    /// What the agent makes of the answer: the kernel's ABI when the
    /// sandbox works, why not otherwise.
    pub fn into_result(self) -> Result<String, ProbeError> {
        match self {
            ProbeAnswer::Applied(Enforcement::Full { abi }) => Ok(abi),
            ProbeAnswer::Applied(Enforcement::Partial { abi }) => Err(ProbeError::TooOld { abi }),
            ProbeAnswer::Applied(Enforcement::NotEnabled) => Err(ProbeError::NotEnabled),
            ProbeAnswer::Applied(Enforcement::NotImplemented) => Err(ProbeError::NotImplemented),
            ProbeAnswer::Applied(Enforcement::NotEnforced) => Err(ProbeError::NotEnforced),
            ProbeAnswer::Failed(why) => Err(ProbeError::Failed(why)),
        }
    }
}

/// The probe's own side, run in a throwaway child: confines itself with no
/// writable dirs (only `/dev`), then checks that a write to the temp dir
/// is really refused.
pub fn probe_here() -> ProbeAnswer {
    let enforcement = match confine(&[]) {
        Ok(e) => e,
        Err(e) => return ProbeAnswer::Failed(format!("the ruleset was refused: {e}")),
    };
    if !matches!(enforcement, Enforcement::Full { .. }) {
        return ProbeAnswer::Applied(enforcement);
    }
    let target = std::env::temp_dir().join(format!(".agent-sandbox-probe-{}", std::process::id()));
    match std::fs::create_dir(&target) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => ProbeAnswer::Applied(enforcement),
        Err(e) => ProbeAnswer::Failed(format!(
            "creating {} failed with \"{e}\" instead of being refused by Landlock",
            target.display()
        )),
        Ok(()) => {
            let _ = std::fs::remove_dir(&target);
            ProbeAnswer::Failed(format!(
                "Landlock reported the ruleset enforced, yet {} could be created",
                target.display()
            ))
        }
    }
}

/// Why the sandbox cannot be used on this machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The kernel was built without Landlock.
    #[error(
        "Landlock is not built into this kernel (Linux 6.2 or newer with CONFIG_SECURITY_LANDLOCK is needed)"
    )]
    NotImplemented,
    /// Landlock is built in but switched off.
    #[error(
        "Landlock is built into this kernel but not enabled; add landlock to the lsm= boot parameter"
    )]
    NotEnabled,
    /// Landlock is too old to confine every kind of write.
    #[error(
        "this kernel's Landlock ABI {abi} cannot confine truncation; ABI 3 (Linux 6.2) or newer is needed"
    )]
    TooOld { abi: String },
    /// The kernel enforced nothing and did not say why.
    #[error("the kernel did not enforce the Landlock ruleset")]
    NotEnforced,
    /// The launcher could not be run, or it answered something unexpected.
    #[error("the sandbox check failed: {0}")]
    Failed(String),
}

/// Finds out whether `launcher` can confine commands on this kernel, by
/// running `launcher sandbox-probe` in a child with an empty environment.
/// The calling process is not restricted. Returns the kernel's Landlock ABI.
///
/// # Errors
///
/// When the kernel cannot enforce the ruleset, or the probe could not run;
/// the error says which and what would fix it.
pub fn probe(launcher: &Path) -> Result<String, ProbeError> {
    let failed = |what: String| ProbeError::Failed(what);
    let mut child = std::process::Command::new(launcher)
        .arg(PROBE_SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", launcher.display())))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(PROBE_POLL),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "{} {PROBE_SUBCOMMAND} did not answer within {} s",
                    launcher.display(),
                    PROBE_TIMEOUT.as_secs()
                )));
            }
            Err(e) => return Err(failed(format!("cannot wait for the probe: {e}"))),
        }
    }
    // The child has exited, so its one short line is all in the pipe.
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout
            .read_to_string(&mut out)
            .map_err(|e| failed(format!("cannot read the probe's answer: {e}")))?;
    }
    ProbeAnswer::parse(&out)
        .ok_or_else(|| {
            failed(format!(
                "{} {PROBE_SUBCOMMAND} answered {:?}; is it an agent binary of this version?",
                launcher.display(),
                out.trim()
            ))
        })?
        .into_result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_args_wrap_the_shell_command() {
        let sandbox = Sandbox::new(
            PathBuf::from("/usr/bin/agent"),
            vec![PathBuf::from("/work space"), PathBuf::from("/tmp")],
        );
        let args = sandbox.launcher_args(Path::new("/bin/bash"), "echo hi > out; rm -- -x");
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "sandbox-exec",
                "--write",
                "/work space",
                "--write",
                "/tmp",
                "--",
                "/bin/bash",
                "-c",
                "echo hi > out; rm -- -x",
            ]
        );
    }

    #[test]
    fn no_writable_dirs_still_separates_the_program() {
        let sandbox = Sandbox::new(PathBuf::from("agent"), Vec::new());
        let args = sandbox.launcher_args(Path::new("/bin/sh"), "--help");
        assert_eq!(args, ["sandbox-exec", "--", "/bin/sh", "-c", "--help"]);
    }

    #[test]
    fn writable_dirs_are_workspace_and_temp_without_duplicates() {
        let dirs = writable_dirs(Path::new("/w"), Path::new("/tmp"));
        assert_eq!(dirs, [Path::new("/w"), Path::new("/tmp")]);
        let dirs = writable_dirs(Path::new("/w"), Path::new("/var/tmp"));
        assert_eq!(
            dirs,
            [Path::new("/w"), Path::new("/var/tmp"), Path::new("/tmp")]
        );
    }

    #[test]
    fn for_workspace_includes_the_process_temp_dir() {
        let sandbox = Sandbox::for_workspace(PathBuf::from("agent"), Path::new("/w"));
        assert!(sandbox.writable.contains(&std::env::temp_dir()));
        assert!(sandbox.writable.contains(&PathBuf::from(SYSTEM_TEMP)));
        assert_eq!(sandbox.writable[0], Path::new("/w"));
    }

    #[test]
    fn probe_answers_round_trip() {
        let answers = [
            ProbeAnswer::Applied(Enforcement::Full { abi: "7".into() }),
            ProbeAnswer::Applied(Enforcement::Partial { abi: "2".into() }),
            ProbeAnswer::Applied(Enforcement::NotEnabled),
            ProbeAnswer::Applied(Enforcement::NotImplemented),
            ProbeAnswer::Applied(Enforcement::NotEnforced),
            ProbeAnswer::Failed("creating /tmp/x failed".into()),
        ];
        for answer in answers {
            let line = answer.line();
            assert_eq!(
                ProbeAnswer::parse(&format!("{line}\n")),
                Some(answer),
                "{line}"
            );
        }
        assert_eq!(
            ProbeAnswer::Failed("two\nlines".into()).line(),
            "failed two lines"
        );
        for junk in ["", "enforced", "partial ", "hello", "not-enabled 3"] {
            assert_eq!(ProbeAnswer::parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn only_full_enforcement_turns_the_sandbox_on() {
        let full = ProbeAnswer::Applied(Enforcement::Full { abi: "7".into() });
        assert_eq!(full.exit_code(), 0);
        assert_eq!(full.into_result(), Ok("7".to_string()));
        let partial = ProbeAnswer::Applied(Enforcement::Partial { abi: "2".into() });
        assert_eq!(partial.exit_code(), 1);
        let err = partial.into_result().unwrap_err();
        assert!(err.to_string().contains("ABI 2"), "{err}");
        assert_eq!(
            ProbeAnswer::Applied(Enforcement::NotEnabled).into_result(),
            Err(ProbeError::NotEnabled)
        );
        assert!(
            ProbeError::NotEnabled.to_string().contains("lsm="),
            "the message says what to do"
        );
    }

    #[test]
    fn launch_errors_use_shell_exit_codes() {
        let missing = LaunchError::Exec {
            program: "nope".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert_eq!(missing.exit_code(), PROGRAM_NOT_FOUND);
        let denied = LaunchError::Exec {
            program: "x".into(),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        assert_eq!(denied.exit_code(), LAUNCH_FAILED);
        assert_eq!(LaunchError::NoProgram.exit_code(), LAUNCH_FAILED);
    }

    #[test]
    fn launch_without_a_program_fails_before_confining() {
        // Safe to call in the test process: it returns before `confine`.
        assert!(matches!(launch(&[], &[]), LaunchError::NoProgram));
    }

    #[test]
    fn probe_reports_a_missing_launcher() {
        let err = probe(Path::new("/nonexistent/agent")).unwrap_err();
        assert!(
            matches!(&err, ProbeError::Failed(m) if m.contains("/nonexistent/agent")),
            "{err}"
        );
    }
}

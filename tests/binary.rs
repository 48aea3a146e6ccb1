//! The built `agent` binary end to end against the mock server.

use serde_json::Value;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, agent_command, output, stderr, stdout};

const TASK: &str = "Run echo hello and tell me what it printed";

async fn echo_hello(shape: Shape) {
    let server = MockServer::start(vec![
        Reply::tools(
            shape,
            &[("call_9", "run_shell", r#"{"command":"echo hello"}"#)],
        ),
        Reply::text("The command printed: hello"),
    ])
    .await;
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", TASK]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "The command printed: hello\n");
    assert!(
        stderr(&out).contains("run_shell echo hello"),
        "{}",
        stderr(&out)
    );
    let sent = server.requests()[1].tool_result("call_9").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sent.starts_with("hello\n"), "{sent}");
    server.assert_protocol();
}

#[tokio::test]
async fn one_shot_runs_the_tool_and_prints_the_answer() {
    echo_hello(Shape::OpenAi).await;
}

#[tokio::test]
async fn one_shot_works_with_llama_cpp_deltas() {
    echo_hello(Shape::LlamaCpp).await;
}

#[tokio::test]
async fn one_shot_works_without_delta_indexes() {
    echo_hello(Shape::NoIndex).await;
}

#[tokio::test]
async fn json_mode_prints_one_object_per_line() {
    let server = MockServer::start(vec![
        Reply::text_and_tools(
            "Checking.",
            Shape::OpenAi,
            &[("c1", "run_shell", r#"{"command":"echo hello"}"#)],
        ),
        Reply::text("hello it was"),
    ])
    .await;
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", TASK, "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "sandbox",
            "usage",
            "assistant",
            "tool_call",
            "tool_result",
            "usage",
            "assistant",
            "final"
        ]
    );
    assert_eq!(lines[3]["name"], "run_shell");
    assert_eq!(lines[3]["input"]["command"], "echo hello");
    assert_eq!(lines[4]["id"], "c1");
    assert_eq!(lines[4]["status"], "ok");
    assert_eq!(lines[4]["exit_code"], 0);
    assert!(lines[4]["output"].as_str().unwrap().starts_with("hello"));
    assert_eq!(lines[7]["text"], "hello it was");
    assert_eq!(lines[7]["usage"]["total_tokens"], 36);
    assert_eq!(lines[0]["mode"], "auto");
    assert!(
        lines[0]["layers"]["landlock fs"].is_string(),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn api_failure_exits_3_without_leaking_the_key() {
    let server = MockServer::start(vec![Reply::status(
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-very-secret"}}"#,
    )])
    .await;
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("AGENT_API_KEY", "sk-very-secret")
        .args(["-p", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("401") && err.contains("AGENT_API_KEY"),
        "{err}"
    );
    assert!(!err.contains("sk-very-secret") && !stdout(&out).contains("sk-very-secret"));
}

#[tokio::test]
async fn usage_errors_exit_2_with_a_clear_message() {
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("--no-such-flag");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--no-such-flag"));

    let mut cmd = agent_command(&dirs, "localhost:8080");
    cmd.args(["-p", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("AGENT_BASE_URL"), "{}", stderr(&out));

    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.args(["-p", "  "]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the task is empty"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn version_prints_and_exits_0() {
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("--version");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).starts_with("agent "));
}

#[tokio::test]
async fn interrupt_exits_130_and_kills_the_running_command() {
    let dirs = Dirs::new();
    let marker = dirs.workspace.join("started");
    let command = format!("touch {}; sleep 30", marker.display());
    let args = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![Reply::tools(
        Shape::OpenAi,
        &[("c", "run_shell", &args)],
    )])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "sleep"]);
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    let deadline = std::time::Instant::now() + crate::common::STEP_TIMEOUT;
    while !marker.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let started = std::time::Instant::now();
    let out = tokio::time::timeout(crate::common::STEP_TIMEOUT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(130), "stderr: {}", stderr(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test]
async fn a_permanent_server_error_exits_3_after_the_configured_tries() {
    let dirs = Dirs::new();
    let models =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/models.rhai"))
            .unwrap()
            .replace("max_attempts: 4,", "max_attempts: 2,");
    std::fs::write(dirs.config.join("models.rhai"), models).unwrap();
    let server = MockServer::start_with_fallback(
        vec![],
        Some(Reply::status(
            503,
            r#"{"error":{"message":"upstream down"}}"#,
        )),
    )
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("server error 503; retrying in") && err.contains("(2/2)"),
        "a notice per retry: {err}"
    );
    assert!(
        err.contains("error: the model API answered 503: upstream down"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn started_below_the_root_the_work_tree_is_the_workspace() {
    let dirs = Dirs::new();
    std::fs::create_dir_all(dirs.workspace.join(".git")).unwrap();
    dirs.write("AGENTS.md", "Always run the linter first.");
    dirs.write("src/AGENTS.md", "In src, keep functions short.");
    dirs.write("src/lib.rs", "// code");
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("p", "run_shell", r#"{"command":"pwd"}"#)]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.current_dir(dirs.workspace.join("src"))
        .args(["-p", "where am I?"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.requests();
    let system = requests[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let root = dirs.workspace.canonicalize().unwrap();
    assert!(system.contains(&root.display().to_string()), "{system}");
    assert!(system.contains("Always run the linter first."), "{system}");
    // The start directory's AGENTS.md comes after the root's.
    let root_at = system.find("Always run the linter first.").unwrap();
    let src_at = system
        .find("In src, keep functions short.")
        .expect("src/AGENTS.md reached the prompt");
    assert!(root_at < src_at, "{system}");
    let pwd = requests[1].tool_result("p").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pwd.starts_with(&root.display().to_string()), "{pwd}");
    assert!(
        !pwd.trim_end().ends_with("/src"),
        "commands run at the root: {pwd}"
    );

    // `-C` chooses another workspace, and a bad one is a clear error.
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-C", "no-such-dir", "-p", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("-C no-such-dir"), "{}", stderr(&out));
}

/// Writes a stored session `id` (transcript, run log, a saved output of
/// `bytes`) last changed `days` ago.
fn stored_session(dirs: &Dirs, id: &str, days: u64, bytes: usize) -> Vec<std::path::PathBuf> {
    let when = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400);
    let paths = [
        dirs.data.join(format!("sessions/{id}.jsonl")),
        dirs.data.join(format!("runs/{id}.jsonl")),
        dirs.data.join(format!("outputs/{id}/call_1.stdout")),
    ];
    for (i, path) in paths.iter().enumerate() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let body = if i == 2 {
            "o".repeat(bytes)
        } else {
            "{}\n".into()
        };
        std::fs::write(path, body).unwrap();
        let file = std::fs::File::options().append(true).open(path).unwrap();
        file.set_modified(when).unwrap();
    }
    let dir = paths[2].parent().unwrap();
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(when)
        .unwrap();
    paths.to_vec()
}

#[tokio::test]
async fn old_sessions_are_pruned_by_the_policy_rule_at_startup() {
    let dirs = Dirs::new();
    let ancient = stored_session(&dirs, "20250101-000000-1", 40, 10);
    let big = stored_session(&dirs, "20261120-000000-2", 5, 3 << 20);
    let small = stored_session(&dirs, "20261125-000000-3", 2, 10);
    // Outside the data dir's session folders: never touched.
    let history = dirs.data.join("history.txt");
    std::fs::write(&history, "ls\n").unwrap();
    // keep_mb: 2 in the person's policy (the rest from the built-in file).
    std::fs::write(
        dirs.config.join("policy.rhai"),
        include_str!("../scripts/policy.rhai").replace("keep_mb: 2000,", "keep_mb: 2,"),
    )
    .unwrap();
    let server = MockServer::start(vec![Reply::text("hi")]).await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hello"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    for path in ancient.iter().chain(&big) {
        assert!(!path.exists(), "{} was kept", path.display());
    }
    assert!(!dirs.data.join("outputs/20250101-000000-1").exists());
    for path in &small {
        assert!(path.exists(), "{} was pruned", path.display());
    }
    assert!(history.exists());
    // This run's own session is there.
    let sessions: Vec<_> = std::fs::read_dir(dirs.data.join("sessions"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
}

#[tokio::test]
async fn private_temp_dirs_left_by_killed_sessions_are_swept() {
    // A session whose process is gone (its pid is a finished child's).
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let tmp = std::env::temp_dir();
    let stale = tmp.join(format!("agent-20200101-000000-{dead}"));
    std::fs::create_dir_all(stale.join("leftover")).unwrap();
    std::fs::write(stale.join("leftover/file"), "x").unwrap();
    // One of a live process (this test), and a name that is not a session.
    let live = tmp.join(format!("agent-20200101-000000-{}", std::process::id()));
    let other = tmp.join(format!("agent-notes-{}", std::process::id()));
    for dir in [&live, &other] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let dirs = Dirs::new();
    let server = MockServer::start(vec![Reply::text("hi")]).await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hello"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    // The sweep runs in the background of the session, which waits for it.
    assert!(!stale.exists(), "{} was left", stale.display());
    assert!(live.exists() && other.exists());
    for dir in [&live, &other] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

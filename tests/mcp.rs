//! MCP servers this project did not write — the reference servers from the
//! public registries, installed by `.ci/run` into the directory named by
//! `AGENT_TEST_MCP_SERVERS` (npm `@modelcontextprotocol/server-everything`
//! and `server-filesystem` under `npm/`, PyPI `mcp-server-time` under
//! `py/`) — driven by the built agent against the mock model: a call
//! reaches the server and its result the model; `isError` is a failed
//! call; a destructive tool asks; stdio servers get the scrubbed
//! environment; a killed server is reported and restarted; the
//! streamable-HTTP transport against a server on 127.0.0.1.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, STEP_TIMEOUT, agent_command, output, stderr, stdout};

/// Where `.ci/run` installs the servers.
const SERVERS_VAR: &str = "AGENT_TEST_MCP_SERVERS";

/// The installed servers' programs, or `None` (with the reason printed)
/// where they could not be installed.
struct Servers {
    everything: PathBuf,
    filesystem: PathBuf,
    time: PathBuf,
}

fn servers() -> Option<Servers> {
    let root = std::env::var_os(SERVERS_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-servers"));
    let bin = root.join("npm/node_modules/.bin");
    let found = Servers {
        everything: bin.join("mcp-server-everything"),
        filesystem: bin.join("mcp-server-filesystem"),
        time: root.join("py/bin/mcp-server-time"),
    };
    for path in [&found.everything, &found.filesystem, &found.time] {
        if !path.exists() {
            println!(
                "SKIPPED: the reference MCP servers are not installed ({} is missing); .ci/run installs them into {SERVERS_VAR}",
                path.display()
            );
            return None;
        }
    }
    Some(found)
}

fn write_mcp(dirs: &Dirs, servers: &str) {
    std::fs::write(
        dirs.config.join("mcp.rhai"),
        format!("#{{ servers: #{{ {servers} }} }}\n"),
    )
    .unwrap();
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

fn tool_result<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["type"] == "tool_result" && l["id"] == id)
        .unwrap_or_else(|| panic!("no tool_result for {id} in {lines:?}"))
}

/// A mock model that asks the time server for Tokyo's time (call `id`),
/// then answers `answer`.
async fn tokyo_model(id: &str, answer: &str) -> MockServer {
    MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[(id, "time__get_current_time", r#"{"timezone":"Asia/Tokyo"}"#)],
        ),
        Reply::text(answer),
    ])
    .await
}

/// What the model received as the result of call `id` (in its second request).
fn sent_result(server: &MockServer, id: &str) -> String {
    server.requests()[1].tool_result(id).unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A hub with the servers of `servers` (an `mcp.rhai` map's inside),
/// started in-process and waited for.
async fn started_hub(dirs: &Dirs, servers: &str) -> agent::tools::mcp::Hub {
    use agent::tools::mcp::{Hub, Setup};
    write_mcp(dirs, servers);
    let (host, _) = agent::script::ScriptHost::load(&dirs.config);
    let configs = agent::script::mcp::servers(host.get(agent::script::MCP).unwrap()).unwrap();
    let setup = Setup {
        child_env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
        workspace: dirs.workspace.clone(),
        lookup: Arc::new(|_: &str| None),
    };
    let hub = Hub::start(configs, setup, &tokio::runtime::Handle::current());
    tokio::time::timeout(STEP_TIMEOUT, hub.wait_started())
        .await
        .unwrap();
    hub
}

#[tokio::test]
async fn a_time_server_call_reaches_the_server_and_its_result_the_model() {
    let Some(s) = servers() else { return };
    let server = tokyo_model("t1", "It is evening in Tokyo.").await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!("time: #{{ startup_timeout: 25, command: {:?} }}", s.time),
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "What time is it in Tokyo?", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = json_lines(&stdout(&out));
    let mcp = lines
        .iter()
        .find(|l| l["type"] == "mcp")
        .expect("an mcp event");
    assert_eq!(mcp["server"], "time");
    assert_eq!(mcp["running"], true, "{mcp}");
    // The server's schema reached the model as the tool's parameters.
    let tools = &server.requests()[0].body["tools"];
    let spec = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "time__get_current_time")
        .expect("the time tool is offered");
    assert_eq!(
        spec["function"]["parameters"]["required"][0], "timezone",
        "{spec}"
    );
    let sent = sent_result(&server, "t1");
    // The real server's answer: the zone and an ISO time with +09:00.
    assert!(
        sent.contains("Asia/Tokyo") && sent.contains("+09:00"),
        "{sent}"
    );
    assert_eq!(tool_result(&lines, "t1")["status"], "ok");
    server.assert_protocol();
}

#[tokio::test]
async fn is_error_is_a_failed_call_and_a_destructive_tool_asks() {
    let Some(s) = servers() else { return };
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[
                ("r1", "files__read_text_file", r#"{"path":"/etc/hostname"}"#),
                (
                    "w1",
                    "files__write_file",
                    r#"{"path":"made.txt","content":"x"}"#,
                ),
                ("l1", "files__list_directory", r#"{"path":"."}"#),
            ],
        ),
        Reply::text("done"),
    ])
    .await;
    let dirs = Dirs::new();
    dirs.write("seen.txt", "here");
    write_mcp(
        &dirs,
        &format!(
            "files: #{{ startup_timeout: 25, command: {:?}, args: [{:?}] }}",
            s.filesystem, dirs.workspace
        ),
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "look", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = json_lines(&stdout(&out));
    // Outside its allowed directory the server answers isError: true.
    let read = tool_result(&lines, "r1");
    assert_eq!(read["status"], "failed", "{read}");
    assert!(
        read["output"].as_str().unwrap().contains("denied"),
        "{read}"
    );
    // write_file is destructiveHint: true; nobody is there to approve it.
    let write = tool_result(&lines, "w1");
    assert_eq!(write["error_kind"], "denied", "{write}");
    assert!(
        write["output"].as_str().unwrap().contains("destructive"),
        "{write}"
    );
    assert!(!dirs.workspace.join("made.txt").exists());
    // A tool without the hint runs.
    let list = tool_result(&lines, "l1");
    assert_eq!(list["status"], "ok", "{list}");
    assert!(list["output"].as_str().unwrap().contains("seen.txt"));
    server.assert_protocol();

    // --yes approves it, and the server writes the file.
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[(
                "w2",
                "files__write_file",
                r#"{"path":"made.txt","content":"x"}"#,
            )],
        ),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "write", "--yes"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("made.txt")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn a_stdio_server_gets_the_scrubbed_environment_plus_its_own() {
    let Some(s) = servers() else { return };
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("e1", "everything__get-env", "{}")]),
        Reply::text("done"),
    ])
    .await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!(
            "everything: #{{ startup_timeout: 25, command: {:?}, args: [\"stdio\"], env: #{{ MCP_TEST_SETTING: \"from-config\" }} }}",
            s.everything
        ),
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("SERVICE_API_TOKEN", "tok-must-not-leak-1234")
        .args(["-p", "env"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let sent = sent_result(&server, "e1");
    assert!(sent.contains("from-config"), "{sent}");
    assert!(sent.contains("\"PATH\""), "{sent}");
    assert!(!sent.contains("SERVICE_API_TOKEN"), "{sent}");
    assert!(!sent.contains("tok-must-not-leak"), "{sent}");
}

#[tokio::test]
async fn a_failed_server_is_reported_and_its_tools_are_absent() {
    let Some(_) = servers() else { return };
    let server = MockServer::start(vec![Reply::text("ok")]).await;
    let dirs = Dirs::new();
    write_mcp(&dirs, "gone: #{ command: \"/nonexistent/mcp-server\" }");
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hi", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = json_lines(&stdout(&out));
    let mcp = lines.iter().find(|l| l["type"] == "mcp").unwrap();
    assert_eq!(mcp["running"], false);
    assert!(
        mcp["state"].as_str().unwrap().contains("No such file"),
        "{mcp}"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "warning"
            && l["message"]
                .as_str()
                .unwrap_or("")
                .contains("`gone` failed to start")),
        "{lines:?}"
    );
}

/// Polls `done` until it holds or the step timeout passes.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < STEP_TIMEOUT,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_killed_server_is_reported_and_the_next_call_restarts_it() {
    use agent::tools::mcp::State;
    let Some(s) = servers() else { return };
    let dirs = Dirs::new();
    let hub = started_hub(
        &dirs,
        &format!("time: #{{ startup_timeout: 25, command: {:?} }}", s.time),
    )
    .await;
    let time = hub.servers()[0].clone();
    assert_eq!(time.state(), State::Running);
    let args = |zone: &str| {
        serde_json::json!({"timezone": zone})
            .as_object()
            .unwrap()
            .clone()
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let first = time.call("get_current_time", args("UTC"), &cancel).await;
    assert!(first.is_ok(), "{first:?}");

    let pgid = time.pgid().expect("a process group");
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until("the crash to be noticed", || {
        matches!(time.state(), State::Crashed(_))
    })
    .await;
    let reports = hub.take_reports();
    assert!(
        reports
            .iter()
            .any(|r| r.contains("`time` stopped") && r.contains("signal 9")),
        "{reports:?}"
    );

    let again = time
        .call("get_current_time", args("Europe/Paris"), &cancel)
        .await;
    let result = again.expect("the restarted server answers");
    let (ok, text) = agent::tools::mcp::render_result(&result);
    assert!(ok && text.contains("Europe/Paris"), "{text}");
    assert_eq!(time.state(), State::Running);
    assert_ne!(time.pgid(), Some(pgid));
    assert!(
        hub.take_reports().iter().any(|r| r.contains("restarted")),
        "the restart is reported"
    );

    // Stopping kills the process group.
    let pgid = time.pgid().unwrap();
    hub.shutdown();
    until("the process group to be gone", || {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_err() || is_zombie(pgid)
    })
    .await;
}

/// Whether `pid` has exited but is not reaped yet (its group still exists).
fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

#[tokio::test]
async fn the_http_transport_reaches_a_server_on_loopback() {
    let Some(s) = servers() else { return };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut http = tokio::process::Command::new(&s.everything);
    http.arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = http.spawn().unwrap();
    // Wait until it says it listens.
    let stderr_pipe = child.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr_pipe));
    tokio::time::timeout(STEP_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening") {
                return;
            }
        }
        panic!("the HTTP server ended before listening");
    })
    .await
    .expect("the HTTP server listens in time");

    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("h1", "web__echo", r#"{"message":"over http"}"#)],
        ),
        Reply::text("done"),
    ])
    .await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!(
            "web: #{{ startup_timeout: 25, url: \"http://127.0.0.1:{port}/mcp\", token_env: \"WEB_MCP_TOKEN\" }}"
        ),
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("WEB_MCP_TOKEN", "not-checked-by-this-server")
        .args(["-p", "echo"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let sent = sent_result(&server, "h1");
    assert!(sent.contains("Echo: over http"), "{sent}");
    let _ = child.kill().await;
}

#[tokio::test]
async fn an_interrupted_or_overlong_call_is_cancelled_and_the_server_carries_on() {
    use agent::tools::mcp::State;
    let Some(s) = servers() else { return };
    let dirs = Dirs::new();
    let hub = started_hub(
        &dirs,
        &format!(
            "everything: #{{ startup_timeout: 25, command: {:?}, args: [\"stdio\"], tool_timeout: 1 }}",
            s.everything
        ),
    )
    .await;
    let everything = hub.servers()[0].clone();
    assert_eq!(everything.state(), State::Running);
    let long = serde_json::json!({"duration": 60, "steps": 2})
        .as_object()
        .unwrap()
        .clone();

    // Ctrl+C: the token is cancelled while the call runs.
    let cancel = tokio_util::sync::CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let interrupted = everything
        .call("trigger-long-running-operation", long.clone(), &cancel)
        .await;
    assert!(
        matches!(interrupted, Err(agent::tools::mcp::CallError::Cancelled)),
        "{interrupted:?}"
    );
    assert!(started.elapsed() < STEP_TIMEOUT);

    // Past tool_timeout (1 s here) the call ends as a timeout.
    let fresh = tokio_util::sync::CancellationToken::new();
    let late = everything
        .call("trigger-long-running-operation", long, &fresh)
        .await;
    assert!(
        matches!(late, Err(agent::tools::mcp::CallError::Timeout(_))),
        "{late:?}"
    );

    // The server is still there for the next call.
    let echo = serde_json::json!({"message": "still here"})
        .as_object()
        .unwrap()
        .clone();
    let result = everything.call("echo", echo, &fresh).await.unwrap();
    assert!(
        agent::tools::mcp::render_result(&result)
            .1
            .contains("still here")
    );
    hub.shutdown();
}

#[tokio::test]
async fn the_repl_lists_the_servers_and_uses_their_tools() {
    let Some(s) = servers() else { return };
    let server = tokyo_model("t", "Tokyo time, from the server.").await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!(
            "time: #{{ startup_timeout: 25, command: {:?} }}, everything: #{{ startup_timeout: 25, command: {:?}, args: [\"stdio\"] }}",
            s.time, s.everything
        ),
    );
    let tmux = crate::common::tmux::Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for("MCP: starting everything, time in the background")
        .await;
    tmux.wait_for("›").await;
    tmux.line("/mcp");
    // Both may still be starting: ask again until both run.
    let start = Instant::now();
    loop {
        let screen = tmux.screen();
        let last = screen.rsplit("› /mcp").next().unwrap_or("").to_string();
        if last.contains("mcp-server-time): running") && last.contains(" stdio): running") {
            assert!(last.contains("time__get_current_time"), "{screen}");
            break;
        }
        assert!(start.elapsed() < STEP_TIMEOUT, "{screen}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last.contains("\n›") {
            tmux.line("/mcp");
        }
    }
    tmux.line("what time is it in Tokyo?");
    tmux.wait_for_prompt_after("Tokyo time, from the server.")
        .await;
    let sent = sent_result(&server, "t");
    assert!(sent.contains("+09:00"), "{sent}");
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
}

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

/// The installed servers' programs. Where `AGENT_TEST_MCP_SERVERS` is set
/// (`.ci/run` sets it after installing them) a missing one fails the
/// test: CI must not pass without the real servers. Unset, a developer's
/// plain `cargo test` without them gets `None`, with the reason printed.
struct Servers {
    everything: PathBuf,
    filesystem: PathBuf,
    time: PathBuf,
}

fn servers() -> Option<Servers> {
    let required = std::env::var_os(SERVERS_VAR).is_some_and(|v| !v.is_empty());
    let root = std::env::var_os(SERVERS_VAR)
        .filter(|v| !v.is_empty())
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
            assert!(
                !required,
                "{SERVERS_VAR} is set, but {} is missing: the reference MCP servers were not installed (see .ci/run)",
                path.display()
            );
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

#[tokio::test]
async fn a_server_that_never_answers_times_out_is_reported_and_is_stopped() {
    // No server of the registries needed: `sleep` starts and never speaks.
    let server = MockServer::start(vec![Reply::text("ok")]).await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        "mute: #{ startup_timeout: 1, command: \"sleep\", args: [\"977\"] }",
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hi", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = json_lines(&stdout(&out));
    let mcp = lines.iter().find(|l| l["type"] == "mcp").unwrap();
    assert_eq!(mcp["running"], false, "{mcp}");
    assert!(
        mcp["state"]
            .as_str()
            .unwrap()
            .contains("did not answer within 1 s (startup_timeout)"),
        "{mcp}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "warning"
                && l["message"].as_str().unwrap_or("").contains("`mute`")),
        "{lines:?}"
    );
    let sent = server.requests()[0].body.to_string();
    assert!(!sent.contains("mute__"), "no tool of a mute server: {sent}");
    until("the mute server to be stopped", || {
        server_pids(&dirs, "sleep 977").is_empty()
    })
    .await;
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

/// server-everything over streamable HTTP on a free loopback port,
/// waited for until it says it listens; the child (killed on drop) and
/// its port.
async fn http_everything(s: &Servers) -> (tokio::process::Child, u16) {
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
    // Keep reading its stderr so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, port)
}

#[tokio::test]
async fn the_http_transport_reaches_a_server_on_loopback() {
    let Some(s) = servers() else { return };
    let (mut child, port) = http_everything(&s).await;
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

/// A TCP proxy on 127.0.0.1 in front of `upstream` that keeps the bytes
/// the client sent on each connection: the HTTP requests as they went
/// over the wire, headers included.
struct RecordingProxy {
    port: u16,
    sent: Connections,
}

/// The bytes a client sent, one buffer per connection.
type Connections = Arc<std::sync::Mutex<Vec<Arc<std::sync::Mutex<Vec<u8>>>>>>;

impl RecordingProxy {
    async fn start(upstream: u16) -> RecordingProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent: Connections = Arc::default();
        let connections = sent.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    continue;
                };
                let log: Arc<std::sync::Mutex<Vec<u8>>> = Arc::default();
                connections.lock().unwrap().push(log.clone());
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = client_read.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        log.lock().unwrap().extend_from_slice(&buf[..n]);
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = server_write.shutdown().await;
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    let _ = client_write.shutdown().await;
                });
            }
        });
        RecordingProxy { port, sent }
    }

    /// The head (request line and headers) of every HTTP request the
    /// client sent, in the order of each connection.
    fn request_heads(&self) -> Vec<String> {
        let mut heads = Vec::new();
        for log in self.sent.lock().unwrap().iter() {
            let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
            // A head ends at the first blank line; the JSON body before
            // the next head has no line breaks.
            for chunk in text.split("\r\n\r\n") {
                let start = ["POST", "GET", "DELETE"]
                    .iter()
                    .filter_map(|m| chunk.find(&format!("{m} /mcp HTTP/1.1\r\n")))
                    .min();
                if let Some(head) = start.and_then(|i| chunk.get(i..)) {
                    heads.push(head.to_string());
                }
            }
        }
        heads
    }
}

/// Whether the head of an HTTP request has the header `name: value`
/// (names are case-insensitive).
fn has_header(head: &str, name: &str, value: &str) -> bool {
    head.lines().skip(1).any(|line| {
        line.split_once(':')
            .is_some_and(|(n, v)| n.trim().eq_ignore_ascii_case(name) && v.trim() == value)
    })
}

#[tokio::test]
async fn the_http_transport_sends_the_token_env_bearer_and_never_shows_it() {
    let Some(s) = servers() else { return };
    let (mut child, upstream) = http_everything(&s).await;
    let proxy = RecordingProxy::start(upstream).await;
    // A name the secret rule does not catch (no KEY, TOKEN, SECRET, ...):
    // the token is blanked because token_env names it.
    const VAR: &str = "WEB_MCP_BEARER";
    const TOKEN: &str = "brr-Zq7wX1-k9Lm";
    // The server echoes the token back, as a server could in an error or a
    // result; the model must read it blanked.
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[(
                "b1",
                "web__echo",
                &format!(r#"{{"message":"leak {TOKEN} now"}}"#),
            )],
        ),
        Reply::text("done"),
    ])
    .await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!(
            "web: #{{ startup_timeout: 25, url: \"http://127.0.0.1:{}/mcp\", token_env: {VAR:?} }}",
            proxy.port
        ),
    );
    let config = std::fs::read_to_string(dirs.config.join("mcp.rhai")).unwrap();
    assert!(config.contains(VAR) && !config.contains(TOKEN), "{config}");
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env(VAR, TOKEN).args(["-p", "echo", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));

    // Every request the agent sent the server carried the bearer token:
    // initialize, the tool list, the call.
    let heads = proxy.request_heads();
    assert!(heads.len() >= 3, "{heads:?}");
    for head in &heads {
        assert!(
            has_header(head, "authorization", &format!("Bearer {TOKEN}")),
            "a request without the bearer token: {head}"
        );
    }
    let calls = proxy
        .sent
        .lock()
        .unwrap()
        .iter()
        .map(|log| String::from_utf8_lossy(&log.lock().unwrap()).into_owned())
        .filter(|t| t.contains("\"tools/call\""))
        .count();
    assert!(calls >= 1, "the call went through the proxy");

    // The result reached the model with the token blanked.
    let sent = sent_result(&server, "b1");
    assert_eq!(sent, "Echo: leak [redacted] now");
    // Nothing the agent wrote itself holds the token: not the first
    // request (system prompt, tools), not any tool result, not the
    // `--json` result, not the transcript's tool lines. (The model's own
    // call arguments, which it wrote, are kept as it sent them.)
    assert!(!server.requests()[0].body.to_string().contains(TOKEN));
    for request in server.requests() {
        for m in request.messages() {
            if m["role"] == "tool" || m["role"] == "system" {
                assert!(!m.to_string().contains(TOKEN), "{m}");
            }
        }
    }
    let lines = json_lines(&stdout(&out));
    let result = tool_result(&lines, "b1");
    assert_eq!(result["status"], "ok", "{result}");
    assert!(!result.to_string().contains(TOKEN), "{result}");
    let mut transcript_tool_lines = 0;
    for entry in std::fs::read_dir(dirs.data.join("sessions")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["role"] == "tool" {
                transcript_tool_lines += 1;
                assert_eq!(v["content"], "Echo: leak [redacted] now", "{v}");
            }
        }
    }
    assert_eq!(transcript_tool_lines, 1);
    let _ = child.kill().await;
}

#[tokio::test]
async fn an_unset_token_env_is_reported_by_name_and_nothing_is_sent() {
    let Some(_) = servers() else { return };
    // A listener that is never accepted from: a connection attempt would
    // wait in its backlog.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = MockServer::start(vec![Reply::text("ok")]).await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!("web: #{{ url: \"http://127.0.0.1:{port}/mcp\", token_env: \"WEB_MCP_BEARER\" }}"),
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hi", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = json_lines(&stdout(&out));
    let mcp = lines
        .iter()
        .find(|l| l["type"] == "mcp")
        .expect("an mcp event");
    assert_eq!(mcp["server"], "web");
    assert_eq!(mcp["running"], false, "{mcp}");
    let state = mcp["state"].as_str().unwrap();
    assert!(
        state.contains("WEB_MCP_BEARER") && state.contains("not set"),
        "{state}"
    );
    let warning = lines
        .iter()
        .filter(|l| l["type"] == "warning")
        .filter_map(|l| l["message"].as_str())
        .find(|m| m.contains("`web` failed to start"))
        .unwrap_or_else(|| panic!("no warning about `web` in {lines:?}"));
    assert!(warning.contains("WEB_MCP_BEARER"), "{warning}");
    // Its tools are not offered, and no request went out without a token.
    let offered = server.requests()[0].body["tools"].to_string();
    assert!(!offered.contains("web__"), "{offered}");
    assert_eq!(
        listener.accept().map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::WouldBlock),
        "the agent connected to the server without a token"
    );
}

#[tokio::test]
async fn an_mcp_result_over_the_output_cap_is_capped_and_spilled_whole() {
    let Some(s) = servers() else { return };
    // About 100 KB, more than the 30 000-byte default output cap; each
    // line numbered, so the middle is recognisable.
    let message: String = (0..2000)
        .map(|i| format!("line {i:05} of the big echo {}\n", "x".repeat(30)))
        .collect();
    assert!(message.len() > 100_000);
    let args = serde_json::json!({ "message": message }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("big", "everything__echo", &args)]),
        Reply::text("done"),
    ])
    .await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!(
            "everything: #{{ startup_timeout: 25, command: {:?}, args: [\"stdio\"] }}",
            s.everything
        ),
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "echo a lot", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let whole = format!("Echo: {message}");
    let sent = sent_result(&server, "big");
    // The model reads the start, the end and the marker, within the cap.
    assert!(
        sent.len() < 31_000,
        "{} bytes reached the model",
        sent.len()
    );
    assert!(
        sent.starts_with("Echo: line 00000 of the big echo"),
        "{sent}"
    );
    assert!(sent.ends_with("line 01999 of the big echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"));
    assert!(!sent.contains("line 01000 "), "the middle is cut");
    let marker = sent
        .lines()
        .find(|l| l.starts_with("[... ") && l.contains("bytes omitted"))
        .unwrap_or_else(|| panic!("no spill marker in {sent}"));
    assert!(
        marker.contains(&format!("the full output ({} bytes)", whole.len())),
        "{marker}"
    );
    let path = marker
        .split_once("is saved at ")
        .and_then(|(_, rest)| rest.split_once("; "))
        .map(|(path, _)| PathBuf::from(path))
        .unwrap_or_else(|| panic!("no path in {marker}"));
    assert!(
        path.starts_with(dirs.data.join("outputs")),
        "{} is not in the data dir's outputs",
        path.display()
    );
    // The spill file holds the whole result.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
    let lines = json_lines(&stdout(&out));
    assert_eq!(tool_result(&lines, "big")["status"], "ok");
    server.assert_protocol();
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
    let listed = mcp_until(&tmux, &["mcp-server-time): running", " stdio): running"]).await;
    assert!(listed.contains("time__get_current_time"), "{listed}");
    tmux.line("what time is it in Tokyo?");
    tmux.wait_for_prompt_after("Tokyo time, from the server.")
        .await;
    let sent = sent_result(&server, "t");
    assert!(sent.contains("+09:00"), "{sent}");
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
}

/// Types `/mcp` until a complete listing (the prompt back after it)
/// contains every one of `needles` (servers may still be starting, or a
/// crash not noticed yet); returns that listing.
async fn mcp_until(tmux: &crate::common::tmux::Tmux, needles: &[&str]) -> String {
    // The scrollback is emptied before each `/mcp`, so the listings
    // counted on the screen never scroll out of it (under load a slow
    // start takes many listings, and a full scrollback once dropped the
    // oldest faster than new ones came: the count never grew).
    let ask = || {
        tmux.clear_history();
        let sent = tmux.screen().matches("› /mcp").count() + 1;
        tmux.line("/mcp");
        sent
    };
    let mut sent = ask();
    let start = Instant::now();
    loop {
        let screen = tmux.screen();
        let last = screen.rsplit("› /mcp").next().unwrap_or("").to_string();
        if screen.matches("› /mcp").count() >= sent && last.contains("\n›") {
            if needles.iter().all(|n| last.contains(n)) {
                return last;
            }
            // Not there yet: ask again, not faster than a person would.
            tokio::time::sleep(Duration::from_millis(200)).await;
            sent = ask();
        }
        assert!(
            start.elapsed() < STEP_TIMEOUT,
            "/mcp never showed {needles:?}:\n{screen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pids of the processes under the test's workspace (a stdio server's
/// working directory) whose command line contains `needle`.
fn server_pids(dirs: &Dirs, needle: &str) -> Vec<i32> {
    let workspace = dirs.workspace.canonicalize().unwrap();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let here = std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == workspace);
        if here && cmdline.contains(needle) && !is_zombie(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Waits until exactly one live process matches `needle` under the
/// workspace and returns its pid.
async fn one_server_pid(dirs: &Dirs, needle: &str) -> i32 {
    let mut found = Vec::new();
    until("one server process", || {
        found = server_pids(dirs, needle);
        found.len() == 1
    })
    .await;
    found[0]
}

#[tokio::test]
async fn in_the_repl_a_killed_server_is_reported_and_the_next_call_restarts_it() {
    let Some(s) = servers() else { return };
    let server = tokyo_model("k", "Tokyo time, after the restart.").await;
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!(
            "time: #{{ startup_timeout: 25, command: {:?} }}, everything: #{{ startup_timeout: 25, command: {:?}, args: [\"stdio\"] }}",
            s.time, s.everything
        ),
    );
    let tmux = crate::common::tmux::Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for("›").await;
    mcp_until(&tmux, &["mcp-server-time): running", " stdio): running"]).await;

    // Kill the time server's process group, as the OOM killer or a
    // person's `kill` would.
    let pid = one_server_pid(&dirs, "mcp-server-time").await;
    let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
    assert_eq!(pgid.as_raw(), pid, "the server leads its own process group");
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).unwrap();

    // `/mcp` reports the crash and that the next call restarts it; the
    // other server runs on.
    let listed = mcp_until(
        &tmux,
        &["mcp-server-time): crashed: it was killed by signal 9"],
    )
    .await;
    assert!(listed.contains("(the next call restarts it)"), "{listed}");
    assert!(listed.contains(" stdio): running"), "{listed}");
    // The crash is also said once, as a warning: with the listing that
    // first shows it (the state and the report change together), or with
    // the next one if the crash fell between the two reads.
    let next = mcp_until(&tmux, &["mcp-server-time): crashed"]).await;
    let warning = "MCP server `time` stopped: it was killed by signal 9";
    assert_eq!(
        listed.matches(warning).count() + next.matches(warning).count(),
        1,
        "{listed}\n---\n{next}"
    );

    // The model's call restarts it and gets the real server's answer.
    tmux.line("what time is it in Tokyo?");
    let screen = tmux
        .wait_for_prompt_after("Tokyo time, after the restart.")
        .await;
    let sent = sent_result(&server, "k");
    assert!(
        sent.contains("Asia/Tokyo") && sent.contains("+09:00"),
        "{sent}"
    );
    // The restart is said once the turn ends, without asking.
    let turn = screen.rsplit("what time is it in Tokyo?").next().unwrap();
    assert!(
        turn.contains("MCP server `time` restarted (2 tools)"),
        "{screen}"
    );
    let again = one_server_pid(&dirs, "mcp-server-time").await;
    assert_ne!(again, pid, "a new process");
    let listed = mcp_until(&tmux, &["mcp-server-time): running"]).await;
    assert!(listed.contains("time__get_current_time"), "{listed}");
    server.assert_protocol();
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
}

#[tokio::test]
async fn agent_check_lists_the_tools_of_both_servers() {
    let Some(s) = servers() else { return };
    let dirs = Dirs::new();
    write_mcp(
        &dirs,
        &format!(
            "time: #{{ startup_timeout: 25, command: {:?} }}, everything: #{{ startup_timeout: 25, command: {:?}, args: [\"stdio\"] }}",
            s.time, s.everything
        ),
    );
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("check");
    let out = output(cmd).await;
    let report = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{report}\n{}", stderr(&out));
    assert!(
        report.contains("mcp.rhai: 2 servers: everything, time"),
        "{report}"
    );
    for server in ["everything", "time"] {
        assert!(
            report.contains(&format!("ok  mcp server `{server}`:")),
            "{report}"
        );
    }
    let tools: Vec<&str> = report
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tools: "))
        .flat_map(|l| l.split(", "))
        .collect();
    for tool in [
        "time__get_current_time",
        "time__convert_time",
        "everything__echo",
        "everything__get-env",
        "everything__trigger-long-running-operation",
    ] {
        assert!(tools.contains(&tool), "{tool} is not in {tools:?}");
    }
    assert!(report.contains("All scripts are fine."), "{report}");
    // No server is left running after the check.
    until("the servers to be gone", || {
        server_pids(&dirs, "mcp-server").is_empty()
    })
    .await;
}

/// The JSON-RPC messages the agent sent a server, as `tee` logged them.
fn logged(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test]
async fn ctrl_c_in_the_repl_cancels_a_running_call_and_tells_the_server() {
    let Some(s) = servers() else { return };
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[(
                "long",
                "everything__trigger-long-running-operation",
                r#"{"duration":60,"steps":2}"#,
            )],
        ),
        Reply::tools(
            Shape::OpenAi,
            &[("echo", "everything__echo", r#"{"message":"still here"}"#)],
        ),
        Reply::text("The server answered again."),
    ])
    .await;
    let dirs = Dirs::new();
    // The server behind `tee`, which logs what the agent sends it.
    let log = dirs.data.join("to-server.jsonl");
    let shell = format!(
        "tee -a {} | exec {} stdio",
        log.display(),
        s.everything.display()
    );
    write_mcp(
        &dirs,
        &format!(
            "everything: #{{ startup_timeout: 25, command: \"/bin/sh\", args: [\"-c\", {shell:?}] }}"
        ),
    );
    let tmux = crate::common::tmux::Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for("›").await;
    tmux.line("run the long operation");
    let mut call_id = Value::Null;
    until("the call to reach the server", || {
        if let Some(call) = logged(&log).into_iter().find(|m| {
            m["method"] == "tools/call" && m["params"]["name"] == "trigger-long-running-operation"
        }) {
            call_id = call["id"].clone();
        }
        !call_id.is_null()
    })
    .await;
    let started = Instant::now();
    tmux.press("C-c");
    tmux.wait_for_prompt_after("interrupted; everything so far is kept")
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the interrupt was not prompt"
    );
    // The server is told, with the call's id.
    until("notifications/cancelled to reach the server", || {
        logged(&log).iter().any(|m| {
            m["method"] == "notifications/cancelled" && m["params"]["requestId"] == call_id
        })
    })
    .await;

    tmux.line("try again");
    tmux.wait_for_prompt_after("The server answered again.")
        .await;
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    // The interrupted call is answered once, as cancelled.
    let answers: Vec<&Value> = requests[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool" && m["tool_call_id"] == "long")
        .collect();
    assert_eq!(answers.len(), 1, "{:?}", requests[1].messages());
    let text = answers[0]["content"].as_str().unwrap();
    assert!(text.starts_with("Cancelled"), "{text}");
    // The same server answers the next call.
    let echo = requests[2].tool_result("echo").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(echo.contains("Echo: still here"), "{echo}");
    server.assert_protocol();
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
}

#[tokio::test]
async fn reload_starts_a_server_added_to_mcp_rhai() {
    let Some(s) = servers() else { return };
    let server = MockServer::start(vec![Reply::text("unused")]).await;
    let dirs = Dirs::new();
    let time = format!("time: #{{ startup_timeout: 25, command: {:?} }}", s.time);
    write_mcp(&dirs, &time);
    let tmux = crate::common::tmux::Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for("›").await;
    let listed = mcp_until(&tmux, &["mcp-server-time): running"]).await;
    assert!(!listed.contains("everything"), "{listed}");

    write_mcp(
        &dirs,
        &format!(
            "{time}, everything: #{{ startup_timeout: 25, command: {:?}, args: [\"stdio\"] }}",
            s.everything
        ),
    );
    tmux.line("/reload");
    tmux.wait_for("MCP: starting everything, time in the background")
        .await;
    let listed = mcp_until(&tmux, &["mcp-server-time): running", " stdio): running"]).await;
    assert!(listed.contains("everything__echo"), "{listed}");
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
    assert!(server.requests().is_empty(), "no turn was run");
}

//! One MCP server: its connection through the official SDK (`rmcp`), its
//! state, and its child process.
//!
//! A stdio server is our child in its own process group, started with the
//! session's scrubbed environment (the same variables `run_shell` gives a
//! command, no secret among them) plus the variables its config names; its
//! pipes go to the SDK. When it dies, a watcher marks it crashed and the
//! next call starts it again, once: a restart that fails leaves it failed
//! until `/reload`. Stopping a server kills its whole process group, so a
//! wrapper such as `npx` leaves nothing behind.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientNotification,
    ClientRequest, Implementation, ProtocolVersion, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

use super::{ServerConfig, ServerStatus, Transport};

/// Lines of a stdio server's stderr kept to explain a failure.
const STDERR_LINES: usize = 8;

/// The longest stderr line kept, in characters (a longer one is cut and
/// ends with `…`).
const STDERR_LINE_CHARS: usize = 200;

/// Reads a variable of the agent's own environment.
pub type Lookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What every server of a session starts from.
pub struct Setup {
    /// The scrubbed environment of commands (`Runtime::child_env`).
    pub child_env: Vec<(String, String)>,
    /// Where a stdio server starts unless its `cwd` says otherwise.
    pub workspace: std::path::PathBuf,
    /// The agent's own environment, for `token_env`.
    pub lookup: Lookup,
}

/// Where a server stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// `enabled: false` in `mcp.rhai`.
    Disabled,
    Starting,
    Running,
    /// It did not start (or a restart did not); the reason.
    Failed(String),
    /// It was running and died; the next call restarts it.
    Crashed(String),
    /// The session stopped it.
    Stopped,
}

impl State {
    /// One word and the reason, for `/mcp` and `agent check`.
    pub fn describe(&self) -> String {
        match self {
            State::Disabled => "disabled".into(),
            State::Starting => "starting".into(),
            State::Running => "running".into(),
            State::Failed(why) => format!("failed: {why}"),
            State::Crashed(why) => format!("crashed: {why} (the next call restarts it)"),
            State::Stopped => "stopped".into(),
        }
    }
}

/// Why a call got no result.
#[derive(Debug, PartialEq, Eq)]
pub enum CallError {
    /// The person interrupted the turn; the server was told.
    Cancelled,
    /// It ran past `tool_timeout`; the server was told to stop.
    Timeout(Duration),
    /// The server is not there or answered with a protocol error.
    Failed(String),
}

/// The MCP client side: who we are; no sampling, roots or elicitation.
#[derive(Clone, Default)]
struct Handler;

impl ClientHandler for Handler {
    /// We ask for 2025-11-25, the newest revision with the `initialize`
    /// handshake (rmcp's default, `ProtocolVersion::LATEST`, is 2026-07-28,
    /// which has none); a server that knows only an older one answers
    /// with it and rmcp goes on with that.
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agent", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

type Service = RunningService<RoleClient, Handler>;

struct Status {
    state: State,
    tools: Vec<rmcp::model::Tool>,
    generation: u64,
}

/// One configured server.
pub struct Server {
    pub config: ServerConfig,
    setup: Arc<Setup>,
    reports: Arc<Mutex<Vec<String>>>,
    /// The live connection; locked while (re)starting, so a call waits
    /// for a start in progress.
    service: tokio::sync::Mutex<Option<Service>>,
    status: Mutex<Status>,
    /// The process group of the running child (stdio).
    pgid: Mutex<Option<i32>>,
    /// Counts starts, so the watcher of an old child does not mark a new
    /// one crashed.
    epoch: AtomicU64,
    stopped: AtomicBool,
    /// The last lines the child wrote to stderr.
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// `true` while not starting.
    settled: tokio::sync::watch::Sender<bool>,
}

impl Server {
    pub(super) fn new(
        config: ServerConfig,
        setup: Arc<Setup>,
        reports: Arc<Mutex<Vec<String>>>,
    ) -> Server {
        let state = if config.enabled {
            State::Starting
        } else {
            State::Disabled
        };
        let settled = !config.enabled;
        Server {
            config,
            setup,
            reports,
            service: tokio::sync::Mutex::new(None),
            status: Mutex::new(Status {
                state,
                tools: Vec::new(),
                generation: 0,
            }),
            pgid: Mutex::new(None),
            epoch: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            stderr: Arc::default(),
            settled: tokio::sync::watch::Sender::new(settled),
        }
    }

    pub fn state(&self) -> State {
        self.status
            .lock()
            .map(|s| s.state.clone())
            .unwrap_or(State::Failed("internal lock poisoned".into()))
    }

    fn set_state(&self, state: State) {
        if let Ok(mut s) = self.status.lock() {
            s.state = state;
        }
    }

    fn report(&self, line: String) {
        if let Ok(mut r) = self.reports.lock() {
            r.push(line);
        }
    }

    pub(super) fn generation(&self) -> u64 {
        self.status.lock().map(|s| s.generation).unwrap_or(0)
    }

    /// The tools the model may call, once the server has listed them.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn crate::tools::Tool>> {
        let listed = self
            .status
            .lock()
            .map(|s| s.tools.clone())
            .unwrap_or_default();
        listed
            .into_iter()
            .filter(|t| self.config.offers(&t.name))
            .map(|t| Arc::new(super::McpTool::new(self.clone(), &t)) as Arc<dyn crate::tools::Tool>)
            .collect()
    }

    pub fn status(self: &Arc<Self>) -> ServerStatus {
        ServerStatus {
            name: self.config.name.clone(),
            what: self.config.describe(),
            state: self.state(),
            tools: self.tools().iter().map(|t| t.spec().name.clone()).collect(),
        }
    }

    /// Waits while the server is starting.
    pub async fn wait_started(&self) {
        let mut settled = self.settled.subscribe();
        let _ = settled.wait_for(|s| *s).await;
    }

    /// Starts the server (in the background task [`super::Hub::start`]
    /// spawns).
    pub(super) async fn start(self: Arc<Self>) {
        let mut service = self.service.lock().await;
        self.connect(&mut service, false).await;
    }

    /// Connects and lists the tools, within the startup timeout; the
    /// state says how it went.
    async fn connect(self: &Arc<Self>, slot: &mut Option<Service>, restart: bool) {
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        self.settled.send_replace(false);
        self.set_state(State::Starting);
        let limit = self.config.startup_timeout;
        let outcome = match tokio::time::timeout(limit, self.open()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!(
                "it did not answer within {} s (startup_timeout)",
                limit.as_secs_f64()
            )),
        };
        let name = &self.config.name;
        match outcome {
            Ok((service, tools)) => {
                *slot = Some(service);
                let count = tools.iter().filter(|t| self.config.offers(&t.name)).count();
                if let Ok(mut s) = self.status.lock() {
                    s.tools = tools;
                    s.generation += 1;
                    s.state = State::Running;
                }
                if restart {
                    self.report(format!("MCP server `{name}` restarted ({count} tools)"));
                }
            }
            Err(why) => {
                self.kill_group();
                let why = self.with_stderr(why);
                self.report(format!("MCP server `{name}` failed to start: {why}"));
                self.set_state(State::Failed(why));
            }
        }
        self.settled.send_replace(true);
    }

    /// The connection and the tool list.
    async fn open(self: &Arc<Self>) -> Result<(Service, Vec<rmcp::model::Tool>), String> {
        let service = match &self.config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let (stdout, stdin) = self.spawn(command, args, env, cwd.as_ref())?;
                Handler
                    .serve((stdout, stdin))
                    .await
                    .map_err(|e| format!("the MCP handshake failed: {e}"))?
            }
            Transport::Http { url, token_env } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(var) = token_env {
                    match (self.setup.lookup)(var) {
                        Some(token) if !token.is_empty() => config = config.auth_header(token),
                        _ => {
                            return Err(format!(
                                "its bearer token variable {var} (token_env in mcp.rhai) is not set or empty; set {var} to the server's token in the environment the agent starts in"
                            ));
                        }
                    }
                }
                let http = crate::client::tls::builder()
                    .and_then(|b| b.build().map_err(|e| e.to_string()))
                    .map_err(|e| format!("cannot make an HTTP client for {url}: {e}"))?;
                let transport = StreamableHttpClientTransport::with_client(http, config);
                Handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("cannot connect to {url}: {e}"))?
            }
        };
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| format!("it did not list its tools: {e}"))?;
        Ok((service, tools))
    }

    /// Starts the child in its own process group with the scrubbed
    /// environment plus the config's variables, and watches for its exit.
    fn spawn(
        self: &Arc<Self>,
        command: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: Option<&std::path::PathBuf>,
    ) -> Result<(tokio::process::ChildStdout, tokio::process::ChildStdin), String> {
        let dir = match cwd {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => self.setup.workspace.join(dir),
            None => self.setup.workspace.clone(),
        };
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args)
            .env_clear()
            .envs(self.setup.child_env.iter().map(|(k, v)| (k, v)))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run `{command}` in {}: {e}", dir.display()))?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        if let Ok(mut g) = self.pgid.lock() {
            *g = pid;
        }
        // Stopped while it was being spawned (the agent is leaving): the
        // stop found no group to kill, so kill it here.
        if self.stopped.load(Ordering::SeqCst) {
            self.kill_group();
            return Err("the session ended while it started".into());
        }
        if let Ok(mut lines) = self.stderr.lock() {
            lines.clear();
        }
        if let Some(stderr) = child.stderr.take() {
            let keep = self.stderr.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut keep) = keep.lock() {
                        if keep.len() == STDERR_LINES {
                            keep.pop_front();
                        }
                        keep.push_back(crate::text::shorten(&line, STDERR_LINE_CHARS));
                    }
                }
            });
        }
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err("its pipes could not be opened".into());
        };
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let me = self.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            me.exited(epoch, status);
        });
        Ok((stdout, stdin))
    }

    /// The watcher's news: the child of start number `epoch` ended.
    fn exited(&self, epoch: u64, status: std::io::Result<std::process::ExitStatus>) {
        if self.stopped.load(Ordering::SeqCst) || self.epoch.load(Ordering::SeqCst) != epoch {
            return;
        }
        if let Ok(mut g) = self.pgid.lock() {
            *g = None;
        }
        let how = match status {
            Ok(s) => describe_exit(s),
            Err(e) => format!("its status is unknown ({e})"),
        };
        let why = self.with_stderr(how);
        // A child that dies while starting is a failed start, said there.
        // The state changes and the report is queued under one lock, so
        // `/mcp` never shows the report beside a server still "running".
        if let Ok(mut s) = self.status.lock()
            && s.state == State::Running
        {
            s.state = State::Crashed(why.clone());
            self.report(format!(
                "MCP server `{}` stopped: {why}; its next call restarts it",
                self.config.name
            ));
        }
    }

    fn with_stderr(&self, why: String) -> String {
        let tail: Vec<String> = self
            .stderr
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default();
        match tail.last() {
            Some(_) if !tail.is_empty() => {
                format!("{why}; its stderr ended with: {}", tail.join(" | "))
            }
            _ => why,
        }
    }

    /// Calls `tool` and waits for its result, the interrupt or the tool
    /// timeout. A crashed stdio server is started again first, once.
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, CallError> {
        let peer = {
            let mut slot = self.service.lock().await;
            let closed = slot.as_ref().is_none_or(|s| s.peer().is_transport_closed());
            if closed && self.state() == State::Running {
                self.set_state(State::Crashed("the connection closed".into()));
            }
            if let State::Crashed(_) = self.state() {
                slot.take();
                self.connect(&mut slot, true).await;
            }
            match (self.state(), slot.as_ref()) {
                (State::Running, Some(service)) => service.peer().clone(),
                (state, _) => {
                    return Err(CallError::Failed(not_running(&self.config.name, &state)));
                }
            }
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_string()).with_arguments(arguments),
        ));
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| CallError::Failed(format!("the request did not reach the server: {e}")))?;
        let id = handle.id.clone();
        let limit = self.config.tool_timeout;
        let tell = |reason: &'static str| {
            let peer = peer.clone();
            let id = id.clone();
            async move {
                let note = ClientNotification::CancelledNotification(CancelledNotification::new(
                    CancelledNotificationParam::new(Some(id), Some(reason.into())),
                ));
                let _ = peer.send_notification(note).await;
            }
        };
        tokio::select! {
            biased;
            answer = handle.rx => match answer {
                Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
                Ok(Ok(_)) => Err(CallError::Failed("the server sent an answer that is not a tool result".into())),
                Ok(Err(e)) => Err(CallError::Failed(format!("the server answered with an error: {e}"))),
                Err(_) => Err(CallError::Failed("the connection closed during the call".into())),
            },
            () = cancel.cancelled() => {
                tell("the person interrupted the turn").await;
                Err(CallError::Cancelled)
            }
            () = tokio::time::sleep(limit) => {
                tell("the call ran past the client's tool_timeout").await;
                Err(CallError::Timeout(limit))
            }
        }
    }

    /// Stops the server: closes the connection and kills the process group.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Ok(mut slot) = self.service.try_lock() {
            slot.take();
        }
        self.kill_group();
        let state = self.state();
        if !matches!(state, State::Disabled | State::Failed(_)) {
            self.set_state(State::Stopped);
        }
        self.settled.send_replace(true);
    }

    /// SIGKILL to the child's process group: a wrapper (`npx`, `uvx`) and
    /// whatever it started go with it.
    fn kill_group(&self) {
        let pgid = self.pgid.lock().ok().and_then(|mut g| g.take());
        if let Some(pgid) = pgid {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// The process group of the running child, for tests and `/mcp`.
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.lock().ok().and_then(|g| *g)
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with status {code}"),
        (None, Some(signal)) => format!("it was killed by signal {signal}"),
        _ => "it exited".into(),
    }
}

/// What the model reads when a server cannot take the call.
pub fn not_running(server: &str, state: &State) -> String {
    format!(
        "Error: the MCP server `{server}` is not available ({}). Its tools cannot be used now; carry on without them or tell the user.",
        state.describe()
    )
}

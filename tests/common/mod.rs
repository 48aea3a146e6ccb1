//! Shared test harness: the mock server, temp dirs, an in-process agent and
//! the built binary, each wait bounded by a timeout.

pub mod mock;
pub mod tmux;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::agent::Agent;
use agent::client::{ChatClient, ClientConfig};
use agent::protocol::{Event, EventSink};
use agent::runtime::Runtime;
use agent::tools::Registry;

/// The longest any single test step may take before the test fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// A temp home for one test: workspace, config dir and data dir.
pub struct Dirs {
    _root: tempfile::TempDir,
    pub workspace: PathBuf,
    pub config: PathBuf,
    pub data: PathBuf,
    pub home: PathBuf,
}

impl Dirs {
    pub fn new() -> Dirs {
        let root = tempfile::tempdir().expect("tempdir");
        let make = |name: &str| {
            let p = root.path().join(name);
            std::fs::create_dir_all(&p).expect("create dir");
            p
        };
        Dirs {
            workspace: make("workspace"),
            config: make("config"),
            data: make("data"),
            home: make("home"),
            _root: root,
        }
    }

    /// Writes a file into the workspace. No test seeds files today; kept
    /// for the ones that will.
    #[allow(dead_code)]
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.workspace.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(&p, text).expect("write file");
        p
    }
}

/// Collects every event, for assertions.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<Event>>,
}

impl EventSink for Recorder {
    fn emit(&self, event: Event) {
        self.events.lock().expect("events").push(event);
    }
}

impl Recorder {
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("events").clone()
    }
}

/// A client config for the mock with fast retries.
pub fn client_config(base_url: &str) -> ClientConfig {
    let mut config = ClientConfig::new(base_url, "mock-model", None);
    config.retry_base_delay = Duration::from_millis(10);
    config
}

/// An in-process agent with the built-in tools, working in `dirs.workspace`.
pub fn agent_for(base_url: &str, dirs: &Dirs) -> Agent {
    agent_with(
        ChatClient::new(client_config(base_url)).expect("client"),
        dirs,
    )
}

/// Like [`agent_for`], with a client configured by the test.
pub fn agent_with(client: ChatClient, dirs: &Dirs) -> Agent {
    let runtime = Runtime::new(
        dirs.workspace.clone(),
        dirs.data.join("outputs"),
        vec![(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        )],
    );
    let mut agent = Agent::new(
        Arc::new(client),
        Arc::new(Registry::with_builtins()),
        Arc::new(runtime),
        "test system prompt".into(),
        judge(dirs),
    );
    agent.set_summary_prompt(
        agent::script::prompt::builtin_summary_prompt().expect("the built-in summary prompt"),
    );
    agent
}

/// The judge with the built-in watchdog.rhai, for `dirs.workspace`.
pub fn judge(dirs: &Dirs) -> agent::watchdog::Judge {
    agent::watchdog::Judge::new(
        agent::script::watchdog::default_watchdog().0,
        dirs.workspace.clone(),
    )
}

/// The built `agent` binary with a clean environment pointing at `dirs`.
pub fn agent_command(dirs: &Dirs, base_url: &str) -> tokio::process::Command {
    let cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent"));
    with_agent_env(cmd, dirs, base_url)
}

/// [`agent_command`] run by `/usr/bin/time -v`, which reports the peak
/// memory on stderr (read it with [`peak_rss_kb`]).
pub fn measured_agent_command(dirs: &Dirs, base_url: &str) -> tokio::process::Command {
    assert!(
        Path::new(TIME).exists(),
        "{TIME} is missing: install GNU time (apt-get install time)"
    );
    let mut cmd = tokio::process::Command::new(TIME);
    cmd.args(["-v", env!("CARGO_BIN_EXE_agent")]);
    with_agent_env(cmd, dirs, base_url)
}

const TIME: &str = "/usr/bin/time";

/// The peak resident memory `/usr/bin/time -v` reported, in KB.
pub fn peak_rss_kb(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak memory in the output of time -v:\n{stderr}"))
}

fn with_agent_env(
    mut cmd: tokio::process::Command,
    dirs: &Dirs,
    base_url: &str,
) -> tokio::process::Command {
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &dirs.home)
        .env("AGENT_BASE_URL", base_url)
        .env("AGENT_MODEL", "mock-model")
        .env("AGENT_CONFIG_DIR", &dirs.config)
        .env("AGENT_DATA_DIR", &dirs.data)
        .env("NO_COLOR", "1")
        .current_dir(&dirs.workspace)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Runs a command to completion within [`STEP_TIMEOUT`].
pub async fn output(mut cmd: tokio::process::Command) -> Output {
    tokio::time::timeout(STEP_TIMEOUT, cmd.output())
        .await
        .expect("the command finished in time")
        .expect("the command ran")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// The JSON lines of `--json` output.
#[allow(dead_code)]
pub fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Reads a file, for assertions.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read file")
}

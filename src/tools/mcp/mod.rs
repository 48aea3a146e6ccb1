//! MCP: the tools of Model Context Protocol servers, as entries of the one
//! tool registry, under the same policy, watchdog and output cap as every
//! other tool.
//!
//! - [`ServerConfig`] is one server of `mcp.rhai` (parsed in
//!   `script::mcp`): a child started over stdio, or a streamable-HTTP URL.
//! - [`Hub`] owns the servers of one session: it starts them all in the
//!   background (the prompt never waits), reports what became of each,
//!   and kills their process groups when the session ends.
//! - [`server`] is one connection (the official SDK, `rmcp`), restarted
//!   once on the next call after a stdio server died.
//! - [`McpTool`] is one tool of one server, named `SERVER__TOOL`
//!   ([`tool_name`]); its call asks `approve(action)` with `kind: "mcp"`
//!   first, and its result is mapped to text by [`render_result`].

mod server;
mod tool;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use server::{CallError, Server, State};
pub use tool::{McpTool, render_result};

/// How long a server may take to start and list its tools, unless its
/// `startup_timeout` says otherwise: `npx` and `uvx` may resolve a package
/// first.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one tool call may run, unless the server's `tool_timeout`
/// says otherwise.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest tool name the model APIs accept.
pub const MAX_TOOL_NAME: usize = 64;

/// How the agent reaches a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Variables set for the child on top of the scrubbed environment.
        env: Vec<(String, String)>,
        /// Where the child starts (the workspace when `None`).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        url: String,
        /// The environment variable holding the bearer token (never the
        /// token itself: the file may be shared).
        token_env: Option<String>,
    },
}

/// One server of `mcp.rhai`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub enabled: bool,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
    /// Only these tools are offered to the model (`None`: all).
    pub allow: Option<Vec<String>>,
    /// These tools never are.
    pub deny: Vec<String>,
}

impl ServerConfig {
    /// Whether the model may see the server's tool `tool`.
    pub fn offers(&self, tool: &str) -> bool {
        self.allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|a| a == tool))
            && !self.deny.iter().any(|d| d == tool)
    }

    /// What the server is, in a few words: `npx -y pkg` or the URL.
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                let mut words = vec![command.clone()];
                words.extend(args.iter().cloned());
                words.join(" ")
            }
            Transport::Http { url, .. } => url.clone(),
        }
    }
}

/// Whether `name` may name a server: letters, digits, `_` and `-`, no
/// `__` (the separator of tool names), at most 32 characters.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The registry name of `server`'s tool `tool`: `SERVER__TOOL`. The model
/// APIs accept `[A-Za-z0-9_-]{1,64}`, so any other character becomes `_`,
/// and a name that was changed that way or is longer than 64 gets the
/// first characters plus `_` and eight hex digits of a hash of the true
/// name (so two tools never share a name). The server sees the true name.
pub fn tool_name(server: &str, tool: &str) -> String {
    let full = format!("{server}__{tool}");
    let safe: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == full && safe.len() <= MAX_TOOL_NAME {
        return safe;
    }
    // FNV-1a: stable across runs and builds, unlike the std hasher.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let keep = MAX_TOOL_NAME - 9;
    let head = crate::text::first_chars(&safe, keep);
    format!("{head}_{:08x}", hash as u32)
}

/// What the person is told about a server: its name and a line of state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerStatus {
    pub name: String,
    pub what: String,
    pub state: State,
    /// The registry names of the tools it offers (when running).
    pub tools: Vec<String>,
}

/// The servers of one session.
pub struct Hub {
    servers: Vec<Arc<Server>>,
    /// State changes the person has not been told about yet (a server
    /// that failed to start or died), drained by [`Hub::take_reports`].
    reports: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("servers", &self.servers.len())
            .finish()
    }
}

impl Hub {
    /// No servers.
    pub fn empty() -> Hub {
        Hub {
            servers: Vec::new(),
            reports: Arc::default(),
        }
    }

    /// Starts every enabled server in the background on `handle` and
    /// returns at once. `child_env` is the scrubbed environment stdio
    /// servers start with; `lookup` reads the agent's own environment
    /// (for HTTP tokens); `workspace` is where a stdio server starts
    /// unless its `cwd` says otherwise.
    pub fn start(
        configs: Vec<ServerConfig>,
        setup: server::Setup,
        handle: &tokio::runtime::Handle,
    ) -> Hub {
        let reports: Arc<Mutex<Vec<String>>> = Arc::default();
        let setup = Arc::new(setup);
        let servers: Vec<Arc<Server>> = configs
            .into_iter()
            .map(|config| Arc::new(Server::new(config, setup.clone(), reports.clone())))
            .collect();
        for server in &servers {
            if server.config.enabled {
                let server = server.clone();
                handle.spawn(async move { server.start().await });
            }
        }
        Hub { servers, reports }
    }

    pub fn servers(&self) -> &[Arc<Server>] {
        &self.servers
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The configs the hub was started with (a reload with the same ones
    /// keeps the hub).
    pub fn configs(&self) -> Vec<ServerConfig> {
        self.servers.iter().map(|s| s.config.clone()).collect()
    }

    /// Waits until no server is still starting (each is bounded by its
    /// startup timeout).
    pub async fn wait_started(&self) {
        for server in &self.servers {
            server.wait_started().await;
        }
    }

    /// The tools of every running server, for the registry.
    pub fn tools(&self) -> Vec<Arc<dyn crate::tools::Tool>> {
        self.servers.iter().flat_map(|s| s.tools()).collect()
    }

    /// A number that changes whenever a server's tool list does.
    pub fn generation(&self) -> u64 {
        self.servers.iter().map(|s| s.generation()).sum()
    }

    /// Every server's state, in the order of the file.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// What happened since the last call (failures, crashes, restarts).
    pub fn take_reports(&self) -> Vec<String> {
        self.reports
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    /// Stops every server and kills its process group.
    pub fn shutdown(&self) {
        for server in &self.servers {
            server.stop();
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub use server::Setup;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_joined_with_two_underscores() {
        assert_eq!(
            tool_name("time", "get_current_time"),
            "time__get_current_time"
        );
    }

    #[test]
    fn unsafe_or_long_names_are_made_safe_and_distinct() {
        let dotted = tool_name("fs", "read.file");
        let spaced = tool_name("fs", "read file");
        assert!(dotted.starts_with("fs__read_file_"), "{dotted}");
        assert_ne!(dotted, spaced);
        let long = tool_name("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert!(
            long.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
        assert_ne!(long, tool_name("server", &"x".repeat(101)));
    }

    #[test]
    fn server_names_exclude_the_separator() {
        assert!(valid_server_name("time"));
        assert!(valid_server_name("my-fs_2"));
        assert!(!valid_server_name("a__b"));
        assert!(!valid_server_name("a b"));
        assert!(!valid_server_name(""));
    }

    #[test]
    fn allow_and_deny_lists_filter_tools() {
        let mut config = ServerConfig {
            name: "s".into(),
            transport: Transport::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                token_env: None,
            },
            enabled: true,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            allow: None,
            deny: vec!["rm".into()],
        };
        assert!(config.offers("ls"));
        assert!(!config.offers("rm"));
        config.allow = Some(vec!["cat".into()]);
        assert!(config.offers("cat"));
        assert!(!config.offers("ls"));
    }
}

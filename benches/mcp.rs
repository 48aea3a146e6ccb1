//! What configured MCP servers cost before the prompt (issue 17): the
//! time of `Session::start` — everything the agent does before it shows
//! the banner and the prompt — with no servers and with three (the
//! reference servers `.ci/run` installs: `mcp-server-time`,
//! `server-everything`, `server-filesystem`), and, for the record, how long
//! the three take to be running in the background.
//!
//! Run: `AGENT_TEST_MCP_SERVERS=target/mcp-servers cargo bench --bench mcp`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::config::{Overrides, Settings};
use agent::setup::{Env, Session, Start};

const RUNS: usize = 15;

fn servers_dir() -> Option<PathBuf> {
    let root = std::env::var_os("AGENT_TEST_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-servers"));
    root.join("py/bin/mcp-server-time").exists().then_some(root)
}

fn three_servers(root: &std::path::Path, workspace: &std::path::Path) -> String {
    let bin = root.join("npm/node_modules/.bin");
    format!(
        "#{{ servers: #{{ time: #{{ command: {:?} }}, everything: #{{ command: {:?}, args: [\"stdio\"] }}, files: #{{ command: {:?}, args: [{:?}] }} }} }}",
        root.join("py/bin/mcp-server-time"),
        bin.join("mcp-server-everything"),
        bin.join("mcp-server-filesystem"),
        workspace
    )
}

fn stats(mut v: Vec<Duration>) -> String {
    v.sort();
    let median = v[v.len() / 2];
    let p90 = v[(v.len() * 9 / 10).min(v.len() - 1)];
    format!("median {median:.2?}, p90 {p90:.2?}")
}

fn main() {
    let Some(root) = servers_dir() else {
        println!("SKIPPED: the reference MCP servers are not installed (run .ci/run first)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    for with_servers in [false, true] {
        let mut starts = Vec::new();
        let mut ready = Vec::new();
        for _ in 0..RUNS {
            let tmp = tempfile::tempdir().unwrap();
            let (config, data, workspace) = (
                tmp.path().join("config"),
                tmp.path().join("data"),
                tmp.path().join("workspace"),
            );
            for d in [&config, &data, &workspace] {
                std::fs::create_dir_all(d).unwrap();
            }
            if with_servers {
                std::fs::write(config.join("mcp.rhai"), three_servers(&root, &workspace)).unwrap();
            }
            let vars = [
                ("AGENT_BASE_URL", "http://127.0.0.1:9/v1".to_string()),
                ("AGENT_MODEL", "m".to_string()),
                ("AGENT_CONFIG_DIR", config.display().to_string()),
                ("AGENT_DATA_DIR", data.display().to_string()),
            ];
            let env: Env =
                Arc::new(move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()));
            let overrides = Overrides::default();
            let mut settings = Settings::resolve(&overrides, &*env).unwrap();
            settings.workspace = workspace.clone();
            let entered = rt.enter();
            let t0 = Instant::now();
            let (session, _agent, _notes) = Session::start(Start {
                settings: &settings,
                overrides: &overrides,
                env,
                profile: None,
                resume: None,
                launcher: Some(env!("CARGO_BIN_EXE_agent").into()),
            })
            .unwrap();
            starts.push(t0.elapsed());
            drop(entered);
            if with_servers {
                rt.block_on(session.mcp_started());
                ready.push(t0.elapsed());
                let running = session
                    .mcp
                    .status()
                    .iter()
                    .filter(|s| s.state == agent::tools::mcp::State::Running)
                    .count();
                assert_eq!(running, 3, "{:?}", session.mcp.status());
            }
            drop(session);
        }
        let label = if with_servers {
            "three servers"
        } else {
            "no servers"
        };
        println!(
            "Session::start (before the prompt), {label}: {}",
            stats(starts)
        );
        if with_servers {
            println!("  all three running (background): {}", stats(ready));
        }
    }
}

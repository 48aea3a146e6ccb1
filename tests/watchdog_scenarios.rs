//! Watchdog scenarios: runs shaped like the live loop's run log, judged by
//! the built-in `watchdog.rhai` through the same pure `replay::run` that
//! `agent replay` uses.
//!
//! Two kinds of case:
//! - *must trip*: a runaway loop is repaired by the rule that describes it
//!   no later than its turn [`LATEST_REPAIR`] (its first turn is 1), and
//!   stopped at most [`STOP_WITHIN`] turns after the repair if it goes on;
//! - *must not trip*: real work runs to its end with only `continue` and
//!   `notice` verdicts.
//!
//! Every call is stamped with the workspace state it ran in, as the live
//! loop records it: builders leave `workspace` empty for calls that change
//! nothing, and [`live`] fills in the current state.

use agent::protocol::{ErrorKind, ToolStatus};
use agent::watchdog::replay;
use agent::watchdog::{CallRecord, TurnRecord, Verdict, VerdictKind};
use serde_json::json;

/// The latest turn of a runaway loop, counting its first turn as 1, on which
/// it must be repaired: "within about three turns of the loop starting".
/// Most loops are repaired on their turn 3; cycles and wandering, which
/// take longer to tell from work, on their turn 4.
const LATEST_REPAIR: usize = 4;
/// If the loop goes on after the repair, it must be stopped within this
/// many turns.
const STOP_WITHIN: usize = 2;
/// The workspace state before the first call of every scenario.
const START_WS: &str = "ws-start";

// ---- builders ----

/// A `run_shell` call whose stdout was `stdout`, formatted as the shell tool
/// formats it: the output (or `(no output)`) and an exit-code line.
fn shell(command: &str, stdout: &str, exit: i32) -> CallRecord {
    let body = if stdout.trim().is_empty() {
        "(no output)"
    } else {
        stdout.trim_end()
    };
    CallRecord {
        name: "run_shell".into(),
        input: json!({ "command": command }),
        status: if exit == 0 {
            ToolStatus::Ok
        } else {
            ToolStatus::Failed
        },
        output: format!("{body}\n[exit code: {exit}]"),
        exit_code: Some(exit),
        error_kind: (exit != 0).then_some(ErrorKind::Failed),
        workspace: None,
    }
}

/// A `read_file` call at a line offset.
fn read(path: &str, offset: u64, output: &str) -> CallRecord {
    CallRecord {
        name: "read_file".into(),
        input: json!({ "path": path, "offset": offset }),
        output: output.into(),
        ..CallRecord::default()
    }
}

/// A `read_file` call of a whole (small) file.
fn read_all(path: &str, output: &str) -> CallRecord {
    CallRecord {
        name: "read_file".into(),
        input: json!({ "path": path }),
        output: output.into(),
        ..CallRecord::default()
    }
}

/// A `list_dir` call.
fn list(path: &str, output: &str) -> CallRecord {
    CallRecord {
        name: "list_dir".into(),
        input: json!({ "path": path }),
        output: output.into(),
        ..CallRecord::default()
    }
}

/// An `edit_file` call replacing `old` with `new`, after which the
/// workspace is in state `ws`.
fn edit(path: &str, old: &str, new: &str, ws: &str) -> CallRecord {
    CallRecord {
        name: "edit_file".into(),
        input: json!({ "path": path, "old_string": old, "new_string": new }),
        output: format!("Edited {path}: replaced 1 occurrence"),
        workspace: Some(ws.into()),
        ..CallRecord::default()
    }
}

/// A `write_file` call, after which the workspace is in state `ws`.
fn write(path: &str, content: &str, ws: &str) -> CallRecord {
    CallRecord {
        name: "write_file".into(),
        input: json!({ "path": path, "content": content }),
        output: format!(
            "Wrote {} bytes to {path} (replaced the existing file)",
            content.len()
        ),
        workspace: Some(ws.into()),
        ..CallRecord::default()
    }
}

/// `call`, after which the workspace is in state `ws` (a shell command that
/// changes files: `sed -i`, `git commit`...).
fn changes(mut call: CallRecord, ws: &str) -> CallRecord {
    call.workspace = Some(ws.into());
    call
}

/// A model turn that made `calls` and wrote no text.
fn turn(calls: Vec<CallRecord>) -> TurnRecord {
    TurnRecord {
        calls,
        ..TurnRecord::default()
    }
}

/// A model turn that wrote `text` and made `calls`.
fn said(text: &str, calls: Vec<CallRecord>) -> TurnRecord {
    TurnRecord {
        text: text.into(),
        calls,
        ..TurnRecord::default()
    }
}

/// A final answer: text and no calls.
fn answer(text: &str) -> TurnRecord {
    said(text, Vec::new())
}

/// A response with neither text nor calls.
fn empty() -> TurnRecord {
    TurnRecord::default()
}

/// `record`, as the first turn of a new user message.
fn user(message: &str, mut record: TurnRecord) -> TurnRecord {
    record.user = Some(message.into());
    record
}

/// The turns with every call stamped with the workspace state it left, as
/// the live loop records them: calls without a state of their own get the
/// current one.
fn live(turns: &[TurnRecord]) -> Vec<TurnRecord> {
    let mut ws = START_WS.to_string();
    turns
        .iter()
        .cloned()
        .map(|mut t| {
            for call in &mut t.calls {
                match &call.workspace {
                    Some(w) => ws = w.clone(),
                    None => call.workspace = Some(ws.clone()),
                }
            }
            t
        })
        .collect()
}

// ---- running and judging ----

/// The verdicts for `turns` (stamped by [`live`]) from the default
/// watchdog, as `(turn number, verdict)`.
fn verdicts(turns: &[TurnRecord]) -> Vec<(usize, Verdict)> {
    replay::run(
        &mut agent::script::watchdog::default_watchdog().0,
        &live(turns),
    )
}

/// One line per verdict, for failure messages.
fn dump(verdicts: &[(usize, Verdict)]) -> String {
    verdicts
        .iter()
        .map(|(n, v)| format!("  turn {n}: {} {}", v.kind().as_str(), v.reason()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn first(verdicts: &[(usize, Verdict)], kind: VerdictKind) -> Option<&(usize, Verdict)> {
    verdicts.iter().find(|(_, v)| v.kind() == kind)
}

/// Asserts the must-trip contract for a runaway loop whose first turn is
/// `start`: nothing fires before it; a repair by `rule` comes by the loop's
/// turn [`LATEST_REPAIR`]; a stop follows within [`STOP_WITHIN`] turns.
/// Returns the turns of the repair and the stop counted within the loop
/// (its first turn is 1).
fn trips(turns: &[TurnRecord], start: usize, rule: &str) -> (usize, usize) {
    let v = verdicts(turns);
    let log = dump(&v);
    let (repair, rv) =
        first(&v, VerdictKind::Repair).unwrap_or_else(|| panic!("no repair; verdicts:\n{log}"));
    assert!(
        *repair >= start,
        "repaired at turn {repair}, before the loop started at {start}:\n{log}"
    );
    assert!(
        *repair < start + LATEST_REPAIR,
        "repaired at turn {repair}, late for a loop that started at {start}:\n{log}"
    );
    assert!(
        rv.reason().starts_with(rule),
        "repaired by the wrong rule (expected {rule}):\n{log}"
    );
    assert!(matches!(rv, Verdict::Repair { text, .. } if text.contains(rule)));
    let (stop, sv) =
        first(&v, VerdictKind::Stop).unwrap_or_else(|| panic!("no stop; verdicts:\n{log}"));
    assert!(
        *stop > *repair && *stop <= repair + STOP_WITHIN,
        "stopped at turn {stop}, not soon after the repair at {repair}:\n{log}"
    );
    assert!(
        !sv.reason().starts_with("hard_cap") && !sv.reason().starts_with("max_steps"),
        "stopped by the budget, not by a detector:\n{log}"
    );
    assert_eq!(v.last().map(|(n, _)| *n), Some(*stop), "{log}");
    (repair - start + 1, stop - start + 1)
}

/// Asserts the must-not-trip contract: every turn is judged, and no
/// verdict is `repair` or `stop`.
fn runs_clean(turns: &[TurnRecord]) {
    let v = verdicts(turns);
    let log = dump(&v);
    assert_eq!(v.len(), turns.len(), "turns were skipped:\n{log}");
    assert!(
        v.iter()
            .all(|(_, v)| matches!(v.kind(), VerdictKind::Continue | VerdictKind::Notice)),
        "the watchdog stepped in:\n{log}"
    );
}

/// `n` copies of `record`.
fn times(n: usize, record: TurnRecord) -> Vec<TurnRecord> {
    vec![record; n]
}

/// Two turns of ordinary orientation before a loop starts.
fn orientation() -> Vec<TurnRecord> {
    vec![
        said(
            "Let me look at the project first.",
            vec![list(".", "Cargo.toml\nREADME.md\nsrc/\ntests/")],
        ),
        turn(vec![read_all(
            "README.md",
            "     1\t# invoicer\n     2\tGenerates invoices from CSV.",
        )]),
    ]
}

const CARGO_TEST_FAIL: &str = "running 4 tests\ntest parse::tests::iso_date ... FAILED\n\nfailures:\n---- parse::tests::iso_date stdout ----\nthread 'parse::tests::iso_date' panicked at src/parse.rs:88:9:\nassertion `left == right` failed\n  left: None\n right: Some(2024-03-01)\n\ntest result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.03s";

const CARGO_TEST_PASS: &str = "running 4 tests\ntest parse::tests::iso_date ... ok\n\ntest result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.02s";

// ---- must trip ----

/// The model lists the same directory again and again, hoping a file will
/// appear: the same call with the same result.
#[test]
fn same_ls_forever_must_trip() {
    let mut turns = orientation();
    turns.extend(times(
        8,
        turn(vec![shell(
            "ls -la src",
            "total 12\n-rw-r--r-- 1 me me 812 main.rs\n-rw-r--r-- 1 me me 3301 parse.rs",
            0,
        )]),
    ));
    // Repaired on the loop's turn 3 (turn 5), stopped on its turn 4.
    assert_eq!(trips(&turns, 3, "repeated_action"), (3, 4));
}

/// The seed's error storm: `npm test` re-run with a new `--retry` each time,
/// failing with the same missing module every time. `same_error` and
/// `consecutive_errors` see it on the same turn; `counter_args` names it
/// best (changing the number does not help) and is checked first.
#[test]
fn error_storm_npm_retry_must_trip() {
    let turns: Vec<TurnRecord> = (1..=8)
        .map(|n| {
            turn(vec![shell(
                &format!("npm test -- --retry={n}"),
                "Error: Cannot find module 'jest-environment-jsdom'\nRequire stack:\n- /app/node_modules/jest-config/build/index.js",
                1,
            )])
        })
        .collect();
    // Repaired on the loop's turn 3 (turn 3), stopped on its turn 4.
    assert_eq!(trips(&turns, 1, "counter_args"), (3, 4));
}

/// Every call fails, each with a different error: the network is down and
/// the model tries every package manager it knows.
#[test]
fn error_storm_with_different_errors_must_trip() {
    let mut turns = orientation();
    turns.extend([
        turn(vec![shell(
            "npm ci",
            "npm ERR! code ENOTFOUND\nnpm ERR! request to https://registry.npmjs.org/left-pad failed",
            1,
        )]),
        turn(vec![shell(
            "yarn install --frozen-lockfile",
            "error An unexpected error occurred: \"https://registry.yarnpkg.com/left-pad: getaddrinfo EAI_AGAIN\".",
            1,
        )]),
        turn(vec![shell(
            "pnpm install",
            " ERR_PNPM_META_FETCH_FAIL  GET https://registry.npmjs.org/left-pad: request failed",
            1,
        )]),
        turn(vec![shell(
            "bun install",
            "error: ConnectionRefused downloading package manifest left-pad",
            1,
        )]),
        turn(vec![shell(
            "npm install --offline",
            "npm ERR! code ENOTCACHED\nnpm ERR! request to https://registry.npmjs.org/left-pad failed: cache mode is 'only-if-cached'",
            1,
        )]),
    ]);
    // Repaired on the loop's turn 3 (turn 5), stopped on its turn 4.
    assert_eq!(trips(&turns, 3, "consecutive_errors"), (3, 4));
}

/// Read-only searches that find nothing, each a different command: the
/// model looks for a config file that does not exist.
#[test]
fn stagnation_searches_that_find_nothing_must_trip() {
    let mut turns = orientation();
    turns.extend(
        [
            "find . -name 'config.yaml'",
            "grep -rn 'load_config' src || true",
            "ls config 2>/dev/null || true",
            "find / -xdev -name '*.yaml' -path '*invoicer*' 2>/dev/null",
            "git log --all --oneline -- '*config*'",
            "grep -rln 'yaml' . --include='*.toml' || true",
            "locate invoicer.yaml || true",
        ]
        .map(|c| turn(vec![shell(c, "", 0)])),
    );
    // Repaired on the loop's turn 4 (turn 6), stopped on its turn 5.
    assert_eq!(trips(&turns, 3, "stagnation"), (4, 5));
}

/// The same from the very first turn of a run: the first empty search is
/// no more news than the later ones, and the first workspace state in the
/// log is where the run started, not a change.
#[test]
fn blind_search_from_the_first_turn_must_trip() {
    let turns: Vec<TurnRecord> = [
        "find . -name 'Dockerfile*'",
        "grep -rl 'FROM ' . || true",
        "ls docker deploy 2>/dev/null || true",
        "git ls-files '*docker*'",
        "find .. -maxdepth 2 -name 'compose*.yml'",
    ]
    .map(|c| turn(vec![shell(c, "", 0)]))
    .to_vec();
    // Repaired on the loop's turn 4 (turn 4), stopped on its turn 5.
    assert_eq!(trips(&turns, 1, "stagnation"), (4, 5));
}

/// Read-only wandering: the model re-reads files and listings it has
/// already seen, in a new order each time, learning nothing new.
#[test]
fn read_only_wandering_must_trip() {
    let main = "     1\tfn main() {\n     2\t    invoicer::run();\n     3\t}";
    let parse = "     1\tpub fn parse_date(s: &str) -> Option<Date> {\n     2\t    None\n     3\t}";
    let src = "main.rs\nparse.rs\nlib.rs";
    let lib = "     1\tpub mod parse;\n     2\tpub fn run() {}";
    let mut turns = vec![
        turn(vec![list("src", src)]),
        turn(vec![read_all("src/main.rs", main)]),
        turn(vec![read_all("src/parse.rs", parse)]),
        turn(vec![read_all("src/lib.rs", lib)]),
    ];
    // From here on, nothing the model reads is new.
    turns.extend([
        turn(vec![read_all("src/parse.rs", parse)]),
        turn(vec![list("src", src)]),
        turn(vec![read_all("src/lib.rs", lib)]),
        turn(vec![read_all("src/main.rs", main)]),
        turn(vec![read_all("src/parse.rs", parse)]),
        turn(vec![list("src", src)]),
        turn(vec![read_all("src/lib.rs", lib)]),
    ]);
    // Repaired on the loop's turn 4 (turn 8), stopped on its turn 5.
    assert_eq!(trips(&turns, 5, "stagnation"), (4, 5));
}

/// Ping-pong: `git status`, `git diff`, `git status`, `git diff`... with
/// the same answers each time.
#[test]
fn ping_pong_status_and_diff_must_trip() {
    let status = turn(vec![shell("git status --short", " M src/parse.rs", 0)]);
    let diff = turn(vec![shell(
        "git diff",
        "diff --git a/src/parse.rs b/src/parse.rs\n-    None\n+    todo!()",
        0,
    )]);
    let mut turns = orientation();
    for _ in 0..4 {
        turns.push(status.clone());
        turns.push(diff.clone());
    }
    // Repaired on the loop's turn 4 (turn 6), stopped on its turn 5.
    assert_eq!(trips(&turns, 3, "ping_pong"), (4, 5));
}

/// A three-step cycle: read, read, run the failing tests; then the same
/// three calls again, in the same order, with the same results.
#[test]
fn three_step_cycle_must_trip() {
    let parse = "     1\tpub fn parse_date(s: &str) -> Option<Date> {\n     2\t    None\n     3\t}";
    let lib = "     1\tpub mod parse;\n     2\tpub fn run() {}";
    let round = [
        turn(vec![read_all("src/parse.rs", parse)]),
        turn(vec![read_all("src/lib.rs", lib)]),
        turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]),
    ];
    let mut turns = orientation();
    for _ in 0..3 {
        turns.extend(round.clone());
    }
    // The loop starts with the second round.
    // Repaired on the loop's turn 3 (turn 8), stopped on its turn 4.
    assert_eq!(trips(&turns, 6, "ping_pong"), (3, 4));
}

/// The same error from different arguments: the model runs the tests every
/// way it can think of, and the import fails the same way each time.
#[test]
fn same_error_with_different_arguments_must_trip() {
    let error = "ImportError while loading conftest '/app/tests/conftest.py'.\nModuleNotFoundError: No module named 'app'";
    let mut turns = vec![turn(vec![read_all(
        "pyproject.toml",
        "     1\t[project]\n     2\tname = \"app\"",
    )])];
    turns.extend(
        [
            "pytest",
            "python -m pytest tests/",
            "pytest -x tests/test_api.py",
            "pytest -k api",
            "python3 -m pytest -q",
        ]
        .map(|c| turn(vec![shell(c, error, 4)])),
    );
    // Repaired on the loop's turn 3 (turn 4), stopped on its turn 4.
    assert_eq!(trips(&turns, 2, "same_error"), (3, 4));
}

/// Arguments that differ only by a counter: the model pages through an
/// API that keeps answering with an empty list.
#[test]
fn counter_arguments_must_trip() {
    let mut turns = orientation();
    turns.extend((1..=8).map(|page| {
        turn(vec![shell(
            &format!("curl -s 'localhost:3000/api/invoices?page={page}'"),
            "[]",
            0,
        )])
    }));
    // Repaired on the loop's turn 4 (turn 6), stopped on its turn 5.
    assert_eq!(trips(&turns, 3, "counter_args"), (4, 5));
}

/// Many identical calls inside one response: the model asks for the same
/// file four times at once.
#[test]
fn many_identical_calls_in_one_response_must_trip() {
    let cat = shell("cat package.json", "{\n  \"name\": \"web\"\n}", 0);
    let mut turns = orientation();
    turns.extend(times(3, turn(vec![cat; 4])));
    // Repaired on the loop's turn 1 (turn 3), stopped on its turn 2.
    assert_eq!(trips(&turns, 3, "duplicate_calls"), (1, 2));
}

/// Repeated assistant text: the model announces the same plan every turn
/// while its calls show nothing new.
#[test]
fn repeated_assistant_text_must_trip() {
    let text = "The date parser still fails. Let me check how dates are parsed.";
    let mut turns = orientation();
    turns.extend([
        said(
            text,
            vec![shell("grep -rn 'parse_date' src/ || true", "", 0)],
        ),
        said(
            text,
            vec![shell("grep -rn 'NaiveDate' src/ || true", "", 0)],
        ),
        said(
            text,
            vec![shell("grep -rn 'chrono' Cargo.toml || true", "", 0)],
        ),
        said(text, vec![shell("grep -rn 'from_str' src/ || true", "", 0)]),
        said(text, vec![shell("grep -rn 'Date' tests/ || true", "", 0)]),
    ]);
    // Repaired on the loop's turn 3 (turn 5), stopped on its turn 4.
    assert_eq!(trips(&turns, 3, "repeated_text"), (3, 4));
}

/// Empty responses: the model answers with nothing at all, again and again.
#[test]
fn empty_responses_must_trip() {
    let mut turns = orientation();
    turns.extend(times(3, empty()));
    // Repaired on the loop's turn 1 (turn 3), stopped on its turn 2.
    assert_eq!(trips(&turns, 3, "empty_response"), (1, 2));
}

/// Edit/undo flip-flop: the model applies a change, reverts it, applies it
/// again... each write returns the workspace to a state already seen.
#[test]
fn edit_undo_flip_flop_must_trip() {
    let apply = edit("src/parse.rs", "None", "Some(d)", "ws-applied");
    let undo = edit("src/parse.rs", "Some(d)", "None", START_WS);
    let mut turns = orientation();
    turns.push(turn(vec![apply.clone()]));
    for _ in 0..3 {
        turns.push(turn(vec![undo.clone()]));
        turns.push(turn(vec![apply.clone()]));
    }
    // The loop starts with the first undo.
    // Repaired on the loop's turn 3 (turn 6), stopped on its turn 4.
    assert_eq!(trips(&turns, 4, "ping_pong"), (3, 4));
}

/// Edit/undo with a test run between: apply, test, revert, test, apply,
/// test... The workspace only ever visits two states.
#[test]
fn edit_test_undo_test_flip_flop_must_trip() {
    let apply = edit("src/parse.rs", "None", "Some(d)", "ws-applied");
    let undo = edit("src/parse.rs", "Some(d)", "None", START_WS);
    let test_applied = shell(
        "cargo test",
        "error[E0425]: cannot find value `d` in this scope\n  --> src/parse.rs:2:10",
        101,
    );
    let test_undone = shell("cargo test", CARGO_TEST_FAIL, 101);
    let mut turns = orientation();
    turns.push(turn(vec![apply.clone()]));
    turns.push(turn(vec![test_applied.clone()]));
    for _ in 0..3 {
        turns.push(turn(vec![undo.clone()]));
        turns.push(turn(vec![test_undone.clone()]));
        turns.push(turn(vec![apply.clone()]));
        turns.push(turn(vec![test_applied.clone()]));
    }
    // The loop starts with the first undo; nothing after it is progress.
    // Repaired on the loop's turn 3 (turn 7), stopped on its turn 4.
    assert_eq!(trips(&turns, 5, "stagnation"), (3, 4));
}

/// Writes that leave the workspace unchanged: the model keeps "saving" a
/// file with the content it already has.
#[test]
fn writes_that_change_nothing_must_trip() {
    let config = "[server]\nport = 8080\n";
    let mut turns = orientation();
    turns.push(turn(vec![write("config.toml", config, "ws-config")]));
    turns.extend(times(
        5,
        turn(vec![write("config.toml", config, "ws-config")]),
    ));
    // Repaired on the loop's turn 2 (turn 5), stopped on its turn 3.
    assert_eq!(trips(&turns, 4, "repeated_action"), (2, 3));
}

/// The same, with the no-op write between test runs that fail the same way:
/// nothing changes between the runs.
#[test]
fn no_op_writes_between_failing_tests_must_trip() {
    let fix = "pub fn parse_date(s: &str) -> Option<Date> { None }\n";
    let mut turns = orientation();
    turns.push(turn(vec![write("src/parse.rs", fix, "ws-fix")]));
    turns.push(turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]));
    for _ in 0..4 {
        turns.push(turn(vec![write("src/parse.rs", fix, "ws-fix")]));
        turns.push(turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]));
    }
    // The loop starts with the first write that changes nothing.
    // Repaired on the loop's turn 2 (turn 6), stopped on its turn 3.
    assert_eq!(trips(&turns, 5, "ping_pong"), (2, 3));
}

/// `git commit` that says "nothing to commit", again and again, with a new
/// message each time.
#[test]
fn git_nothing_to_commit_repeatedly_must_trip() {
    let nothing = "On branch main\nnothing to commit, working tree clean";
    let mut turns = orientation();
    turns.extend(
        [
            "git commit -m 'Fix date parsing'",
            "git commit -am 'Fix date parsing'",
            "git add -A && git commit -m 'Fix ISO date parsing'",
            "git commit -m 'fix: parse ISO dates'",
        ]
        .map(|c| turn(vec![shell(c, nothing, 1)])),
    );
    // Repaired on the loop's turn 3 (turn 5), stopped on its turn 4.
    assert_eq!(trips(&turns, 3, "same_error"), (3, 4));
}

/// The same `git commit` retried verbatim.
#[test]
fn same_git_commit_nothing_to_commit_must_trip() {
    let nothing = "On branch main\nnothing to commit, working tree clean";
    let mut turns = orientation();
    turns.extend(times(
        4,
        turn(vec![shell("git commit -am 'Fix date parsing'", nothing, 1)]),
    ));
    // Repaired on the loop's turn 3 (turn 5), stopped on its turn 4.
    assert_eq!(trips(&turns, 3, "repeated_action"), (3, 4));
}

/// Test output that differs only by timestamps and durations is the same
/// outcome: re-running unchanged tests is not progress.
#[test]
fn tests_rerun_with_only_timings_changing_must_trip() {
    let mut turns = orientation();
    turns.extend([0.52, 0.48, 0.61, 0.55, 0.50].iter().enumerate().map(|(i, secs)| {
        turn(vec![shell(
            "cargo test",
            &format!(
                "2026-12-02T10:0{i}:13Z INFO starting\nrunning 4 tests\ntest result: ok. 4 passed; 0 failed; 0 ignored; finished in {secs}s"
            ),
            0,
        )])
    }));
    // Repaired on the loop's turn 3 (turn 5), stopped on its turn 4.
    assert_eq!(trips(&turns, 3, "repeated_action"), (3, 4));
}

/// Reading the same page of the same file again and again.
#[test]
fn same_page_read_again_and_again_must_trip() {
    let page = "  2001\tfn helper() {}\n  2002\t// ...\n[lines 2001-4000 of 9000 shown; call read_file with offset=4001 to read on]";
    let mut turns = orientation();
    turns.extend(times(4, turn(vec![read("src/big.rs", 2001, page)])));
    // Repaired on the loop's turn 3 (turn 5), stopped on its turn 4.
    assert_eq!(trips(&turns, 3, "repeated_action"), (3, 4));
}

/// Waiting for a service that never comes up: polling gets more room than
/// other repeats, but not forever.
#[test]
fn waiting_forever_must_trip_eventually() {
    let refused =
        "curl: (7) Failed to connect to localhost port 8080 after 0 ms: Connection refused";
    let turns = times(
        12,
        turn(vec![shell(
            "sleep 2 && curl -sf localhost:8080/health",
            refused,
            7,
        )]),
    );
    let v = verdicts(&turns);
    let (repair, rv) = first(&v, VerdictKind::Repair).expect("repaired");
    assert_eq!(*repair, 8, "{}", dump(&v));
    assert!(rv.reason().starts_with("poll_repeats"), "{}", dump(&v));
    let (stop, _) = first(&v, VerdictKind::Stop).expect("stopped");
    assert_eq!(*stop, 9, "{}", dump(&v));
}

/// After a repair the model recovers and works for a while, then loops
/// again: there is one repair per user message, so the new loop is stopped
/// at its first trigger.
#[test]
fn second_loop_after_a_repair_must_trip_with_a_stop() {
    let ls = turn(vec![shell("ls", "Cargo.toml\nsrc", 0)]);
    let mut turns = times(3, ls.clone());
    turns.extend((1..=4).map(|i| {
        turn(vec![edit(
            "src/parse.rs",
            &format!("v{i}"),
            &format!("v{}", i + 1),
            &format!("ws-{i}"),
        )])
    }));
    let cat = turn(vec![shell(
        "cat Cargo.toml",
        "[package]\nname = \"invoicer\"",
        0,
    )]);
    turns.extend(times(4, cat));
    let v = verdicts(&turns);
    let kinds: Vec<&str> = v.iter().map(|(_, v)| v.kind().as_str()).collect();
    assert_eq!(
        kinds,
        [
            "continue", "continue", "repair", "continue", "continue", "continue", "continue",
            "continue", "continue", "stop"
        ],
        "{}",
        dump(&v)
    );
    assert!(v[9].1.reason().starts_with("repeated_action"));
}

/// A diligent agent that makes progress every turn has its budget renewed
/// up to the hard cap (250 turns since issue 16; it was 4 x 12 = 48), and
/// only then is it stopped.
#[test]
fn diligent_agent_is_renewed_up_to_the_hard_cap_then_stopped() {
    let turns: Vec<TurnRecord> = (1..=260)
        .map(|i| {
            turn(vec![edit(
                "src/app.rs",
                &format!("v{i}"),
                &format!("v{}", i + 1),
                &format!("ws-{i}"),
            )])
        })
        .collect();
    let v = verdicts(&turns);
    let log = dump(&v);
    assert_eq!(v.len(), 250, "{log}");
    for (n, verdict) in &v[..249] {
        assert!(
            matches!(verdict.kind(), VerdictKind::Continue | VerdictKind::Notice),
            "turn {n}:\n{log}"
        );
    }
    // Renewed at turns 10, 22, 34... up to the cap.
    let limits: Vec<u32> = v.iter().map(|(_, v)| v.budget().limit).collect();
    assert_eq!(limits[8], 12);
    assert_eq!(limits[9], 24);
    assert_eq!(limits[21], 36);
    assert_eq!(limits[249], 250);
    let notices: Vec<usize> = v
        .iter()
        .filter(|(_, v)| v.kind() == VerdictKind::Notice)
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(notices, [248, 249], "{log}");
    assert!(v[247].1.reason().contains("2 of 250 turns left"), "{log}");
    let (n, last) = &v[249];
    assert_eq!(*n, 250);
    assert_eq!(last.kind(), VerdictKind::Stop);
    assert!(last.reason().starts_with("hard_cap"), "{log}");
    assert!(
        matches!(
            last,
            Verdict::Stop {
                summarise: true,
                ..
            }
        ),
        "the model gets a last turn to summarise"
    );
}

// ---- must not trip ----

/// Edits across many files, each leaving the workspace in a new state.
#[test]
fn edits_across_many_files_must_not_trip() {
    let turns: Vec<TurnRecord> = (1..=20)
        .map(|i| {
            turn(vec![edit(
                &format!("src/handlers/h{i}.rs"),
                "use crate::old_api;",
                "use crate::api;",
                &format!("ws-{i}"),
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// A build polled while it runs: the same command, and its output changes
/// every time ("12%", "40%", ...).
#[test]
fn build_progress_poll_must_not_trip() {
    let mut turns = vec![shell("nohup ./build.sh > build.log 2>&1 &", "", 0)];
    turns.extend(
        [
            "12%",
            "40%",
            "40% (linking)",
            "63%",
            "85%",
            "97%",
            "100% done",
        ]
        .map(|p| shell("tail -n 1 build.log", &format!("[build] {p}"), 0)),
    );
    let turns: Vec<TurnRecord> = turns.into_iter().map(|c| turn(vec![c])).collect();
    runs_clean(&turns);
}

/// Waiting for a service that refuses connections for a while: the same
/// waiting command fails six times with the same error, then succeeds. The
/// model says the same thing each time it waits.
#[test]
fn waiting_for_a_service_must_not_trip() {
    let refused =
        "curl: (7) Failed to connect to localhost port 8080 after 0 ms: Connection refused";
    let poll = "sleep 2 && curl -sf localhost:8080/health";
    let mut turns = vec![turn(vec![shell(
        "docker compose up -d api",
        "Container api-1  Started",
        0,
    )])];
    turns.extend(times(
        6,
        said(
            "The API is not up yet; waiting a little longer.",
            vec![shell(poll, refused, 7)],
        ),
    ));
    turns.push(turn(vec![shell(poll, "{\"status\":\"ok\"}", 0)]));
    turns.push(answer("The API is up and healthy."));
    runs_clean(&turns);
}

/// Waiting with a growing back-off: `sleep 1`, `sleep 2`, `sleep 4`...
/// The commands differ only by a number and fail the same way, but they
/// wait, so they get a poller's room.
#[test]
fn waiting_with_growing_sleeps_must_not_trip() {
    let refused = "curl: (7) Failed to connect to localhost port 5432: Connection refused";
    let mut turns: Vec<TurnRecord> = [1, 2, 4, 8, 16, 32]
        .map(|s| {
            turn(vec![shell(
                &format!("sleep {s} && curl -sf localhost:5432"),
                refused,
                7,
            )])
        })
        .to_vec();
    turns.push(turn(vec![shell(
        "sleep 32 && pg_isready -h localhost",
        "localhost:5432 - accepting connections",
        0,
    )]));
    runs_clean(&turns);
}

/// Paging through a large file: `read_file` at offsets 1, 2001, 4001...
/// The calls differ only by a number, but every page is new.
#[test]
fn paging_through_a_large_file_must_not_trip() {
    let turns: Vec<TurnRecord> = (0..10)
        .map(|i| {
            let first = i * 2000 + 1;
            turn(vec![read(
                "logs/server.log",
                first,
                &format!(
                    "{first:>6}\tGET /api/invoices 200\n[lines {first}-{} of 20000 shown; call read_file with offset={} to read on]",
                    first + 1999,
                    first + 2000
                ),
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// Tests re-run between edits: the second run fails exactly like the
/// first, but the workspace changed in between, so it is a fresh result.
#[test]
fn tests_rerun_between_edits_must_not_trip() {
    let mut turns = orientation();
    turns.extend([
        turn(vec![edit("src/parse.rs", "None", "parse_iso(s)", "ws-1")]),
        turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]),
        turn(vec![edit(
            "src/parse.rs",
            "fn parse_iso",
            "pub fn parse_iso",
            "ws-2",
        )]),
        turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]),
        turn(vec![edit("src/parse.rs", "'T'", "'-'", "ws-3")]),
        turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]),
        turn(vec![edit(
            "src/parse.rs",
            "split('-')",
            "splitn(3, '-')",
            "ws-4",
        )]),
        turn(vec![shell("cargo test", CARGO_TEST_PASS, 0)]),
        answer("Fixed: ISO dates now parse."),
    ]);
    runs_clean(&turns);
}

/// The same, with the edit and the test run in one response each time.
/// (Three identical failures: since issue 16, a fourth after yet another
/// edit is flailing.)
#[test]
fn edit_and_test_in_one_response_must_not_trip() {
    let mut turns: Vec<TurnRecord> = (1..=3)
        .map(|i| {
            turn(vec![
                edit(
                    "src/parse.rs",
                    &format!("v{i}"),
                    &format!("v{}", i + 1),
                    &format!("ws-{i}"),
                ),
                shell("cargo test", CARGO_TEST_FAIL, 101),
            ])
        })
        .collect();
    turns.push(turn(vec![
        edit("src/parse.rs", "v4", "v5", "ws-6"),
        shell("cargo test", CARGO_TEST_PASS, 0),
    ]));
    runs_clean(&turns);
}

/// A long final answer with repetitive code in it: a text-only turn is an
/// answer, whatever it repeats.
#[test]
fn long_final_answer_with_repetitive_code_must_not_trip() {
    let block = "```rust\nimpl From<u8> for Code { fn from(v: u8) -> Self { Code(v) } }\n```\n";
    let text = format!(
        "Here are the conversions you asked for:\n\n{}\nEach one follows the same pattern.",
        block.repeat(40)
    );
    let mut turns = orientation();
    turns.push(turn(vec![edit(
        "src/code.rs",
        "// conversions",
        "impl From<u8>",
        "ws-1",
    )]));
    turns.push(answer(&text));
    runs_clean(&turns);
}

/// Outputs that differ only by timestamps are the same outcome, but a real
/// count change is news: a CI log tailed while tests are added elsewhere.
#[test]
fn test_count_change_is_progress_must_not_trip() {
    let turns: Vec<TurnRecord> = (3..=9)
        .map(|passed| {
            turn(vec![shell(
                "tail -n 1 ci/results.log",
                &format!(
                    "2026-12-02 10:{passed:02}:00 test result: ok. {passed} passed; 0 failed; finished in 1.{passed}s"
                ),
                0,
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// A normal task of 19 turns: explore, reproduce, fix, test, lint, review.
#[test]
fn normal_task_must_not_trip() {
    let turns = vec![
        said(
            "Let me look at the project layout.",
            vec![list(".", "Cargo.toml\nsrc/\ntests/")],
        ),
        turn(vec![read_all(
            "Cargo.toml",
            "     1\t[package]\n     2\tname = \"invoicer\"\n     3\t[dependencies]\n     4\tchrono = \"0.4\"",
        )]),
        turn(vec![read_all(
            "src/parse.rs",
            "     1\tpub fn parse_date(s: &str) -> Option<NaiveDate> {\n     2\t    NaiveDate::parse_from_str(s, \"%d/%m/%Y\").ok()\n     3\t}",
        )]),
        turn(vec![shell(
            "grep -rn 'parse_date' src tests",
            "src/parse.rs:1:pub fn parse_date\nsrc/csv.rs:40:    let due = parse_date(&row[3])?;\ntests/cli.rs:12:    // dates in fixtures are ISO",
            0,
        )]),
        turn(vec![read(
            "src/csv.rs",
            30,
            "    30\tfn row(r: &[String]) -> Option<Invoice> {\n    40\t    let due = parse_date(&r[3])?;",
        )]),
        said(
            "Let me reproduce the failure.",
            vec![shell("cargo test parse", CARGO_TEST_FAIL, 101)],
        ),
        turn(vec![edit(
            "src/parse.rs",
            "NaiveDate::parse_from_str(s, \"%d/%m/%Y\").ok()",
            "NaiveDate::parse_from_str(s, \"%Y-%m-%d\").or_else(|_| NaiveDate::parse_from_str(s, \"%d/%m/%Y\")).ok()",
            "ws-1",
        )]),
        turn(vec![shell(
            "cargo test parse",
            "error[E0599]: no method named `or_else` found for enum `Result`\n  --> src/parse.rs:2:58",
            101,
        )]),
        turn(vec![edit(
            "src/parse.rs",
            ".or_else(",
            ".or_else(move ",
            "ws-2",
        )]),
        turn(vec![shell("cargo test parse", CARGO_TEST_PASS, 0)]),
        turn(vec![shell(
            "cargo test",
            "test cli::imports_fixture ... FAILED\ntest result: FAILED. 26 passed; 1 failed; finished in 1.20s",
            101,
        )]),
        turn(vec![read_all(
            "tests/cli.rs",
            "    12\t    // dates in fixtures are ISO\n    13\t    assert_eq!(out, \"01/03/2024\");",
        )]),
        turn(vec![edit(
            "tests/cli.rs",
            "\"01/03/2024\"",
            "\"2024-03-01\"",
            "ws-3",
        )]),
        turn(vec![shell(
            "cargo test",
            "test result: ok. 27 passed; 0 failed; finished in 1.31s",
            0,
        )]),
        turn(vec![shell(
            "cargo clippy --all-targets -- -D warnings",
            "error: redundant closure\n --> src/parse.rs:2:58",
            101,
        )]),
        turn(vec![edit("src/parse.rs", "move |_|", "|_|", "ws-4")]),
        turn(vec![shell(
            "cargo clippy --all-targets -- -D warnings",
            "    Finished `dev` profile [unoptimized + debuginfo] target(s) in 2.41s",
            0,
        )]),
        turn(vec![shell(
            "git diff --stat",
            " src/parse.rs | 4 +++-\n tests/cli.rs | 2 +-\n 2 files changed, 4 insertions(+), 2 deletions(-)",
            0,
        )]),
        answer("ISO dates now parse; the fixture test expects ISO output. Tests and clippy pass."),
    ];
    runs_clean(&turns);
}

/// `git commit` that creates a commit is progress, even when the tests
/// before it print the same summary every time.
#[test]
fn commits_that_create_commits_must_not_trip() {
    let mut turns = Vec::new();
    for i in 1..=4 {
        turns.push(turn(vec![edit(
            &format!("src/step{i}.rs"),
            "todo!()",
            "Ok(())",
            &format!("ws-edit-{i}"),
        )]));
        turns.push(turn(vec![shell("cargo test", CARGO_TEST_PASS, 0)]));
        turns.push(turn(vec![changes(
            shell(
                &format!("git commit -am 'Step {i}'"),
                &format!(
                    "[main {i}a2b3c{i}] Step {i}\n 1 file changed, 1 insertion(+), 1 deletion(-)"
                ),
                0,
            ),
            &format!("ws-commit-{i}"),
        )]));
    }
    runs_clean(&turns);
}

/// A refactor done with `sed -i`: shell commands with no output that each
/// change the workspace are progress.
#[test]
fn refactor_with_sed_must_not_trip() {
    let turns: Vec<TurnRecord> = (1..=10)
        .map(|i| {
            turn(vec![changes(
                shell(
                    &format!("sed -i 's/old_api::/api::/g' src/handlers/h{i}.rs"),
                    "",
                    0,
                ),
                &format!("ws-{i}"),
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// A search that misses twice before it hits: normal exploration.
#[test]
fn search_that_misses_then_hits_must_not_trip() {
    let mut turns = orientation();
    turns.extend([
        turn(vec![shell("grep -rn 'InvoiceId' src", "", 1)]),
        turn(vec![shell("grep -rn 'invoice_id' src", "", 1)]),
        turn(vec![shell(
            "grep -rni 'invoice.id' src",
            "src/model.rs:7:    pub invoice_id: u64,",
            0,
        )]),
        turn(vec![read_all(
            "src/model.rs",
            "     7\t    pub invoice_id: u64,",
        )]),
        answer("`invoice_id` is defined in src/model.rs:7."),
    ]);
    runs_clean(&turns);
}

/// Three turns without news are not yet a loop: the tests fail, the model
/// re-reads two files it read earlier (unchanged) to refresh its memory,
/// then edits. A fourth such turn would be stagnation.
#[test]
fn re_reading_before_an_edit_must_not_trip() {
    let parse = "     1\tpub fn parse_date(s: &str) -> Option<Date> {\n     2\t    None\n     3\t}";
    let lib = "     1\tpub mod parse;\n     2\tpub fn run() {}";
    let mut turns = orientation();
    turns.extend([
        turn(vec![read_all("src/parse.rs", parse)]),
        turn(vec![read_all("src/lib.rs", lib)]),
        // Three turns without news...
        turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]),
        turn(vec![read_all("src/lib.rs", lib)]),
        turn(vec![read_all("src/parse.rs", parse)]),
        // ...then the fix.
        turn(vec![edit("src/parse.rs", "None", "parse_iso(s)", "ws-1")]),
        turn(vec![shell("cargo test", CARGO_TEST_PASS, 0)]),
        answer("Fixed."),
    ]);
    runs_clean(&turns);
}

/// A loop that was stopped, then a new user message: the new message
/// starts with a fresh budget and fresh counters.
#[test]
fn new_user_message_after_a_stop_must_not_trip() {
    let ls = turn(vec![shell("ls", "Cargo.toml\nsrc", 0)]);
    let mut turns = vec![user("Find the config", ls.clone())];
    turns.extend(times(5, ls.clone()));
    turns.push(user("It is in ~/.config/invoicer; read it", ls.clone()));
    turns.push(turn(vec![shell(
        "cat ~/.config/invoicer/config.toml",
        "[server]\nport = 8080",
        0,
    )]));
    turns.push(answer("The server port is 8080."));
    let v = verdicts(&turns);
    let kinds: Vec<(usize, &str)> = v.iter().map(|(n, v)| (*n, v.kind().as_str())).collect();
    assert_eq!(
        kinds,
        [
            (1, "continue"),
            (2, "continue"),
            (3, "repair"),
            (4, "stop"),
            // Turns 5 and 6 were never run: the turn had stopped.
            (7, "continue"),
            (8, "continue"),
            (9, "continue"),
        ],
        "{}",
        dump(&v)
    );
}

// ---- the text replay format ----

/// A hand-written replay file of the `ls` loop, read by `replay::parse`.
#[test]
fn replay_text_of_an_ls_loop_must_trip() {
    let line = r#"{"text": "Let me check again.", "calls": [{"name": "run_shell", "input": {"command": "ls"}, "status": "completed", "output": "Cargo.toml\nsrc\n[exit code: 0]", "exit_code": 0}]}"#;
    let text = format!(
        "{{\"user\": \"Where is the config?\", {}\n{}",
        line.get(1..).unwrap_or(""),
        format!("{line}\n").repeat(5)
    );
    let turns = replay::parse(&text).expect("parses");
    assert_eq!(turns.len(), 6);
    let v = replay::run(&mut agent::script::watchdog::default_watchdog().0, &turns);
    let lines: Vec<serde_json::Value> =
        v.iter().map(|(n, v)| replay::verdict_json(*n, v)).collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["verdict"].as_str()).collect();
    assert_eq!(kinds, ["continue", "continue", "repair", "stop"]);
    assert!(
        lines[2]["reason"]
            .as_str()
            .unwrap()
            .starts_with("repeated_action")
    );
    assert_eq!(lines[3]["turn"], 4);
    assert_eq!(lines[3]["budget"], json!({"used": 4, "limit": 12}));
}

/// A run log as the live loop writes it (every call with its workspace
/// state): waiting for a database, then a migration. Must not trip.
#[test]
fn replay_text_of_a_wait_then_migration_must_not_trip() {
    let text = r#"
{"user": "Run the migrations", "text": "Starting the database.", "calls": [{"name": "run_shell", "input": {"command": "docker compose up -d db"}, "status": "completed", "output": "Container db-1  Started\n[exit code: 0]", "exit_code": 0, "workspace": "a1"}]}
{"calls": [{"name": "run_shell", "input": {"command": "sleep 3 && pg_isready -h localhost"}, "status": "failed", "output": "localhost:5432 - no response\n[exit code: 2]", "exit_code": 2, "error_kind": "failed", "workspace": "a1"}]}
{"calls": [{"name": "run_shell", "input": {"command": "sleep 3 && pg_isready -h localhost"}, "status": "failed", "output": "localhost:5432 - no response\n[exit code: 2]", "exit_code": 2, "error_kind": "failed", "workspace": "a1"}]}
{"calls": [{"name": "run_shell", "input": {"command": "sleep 3 && pg_isready -h localhost"}, "status": "failed", "output": "localhost:5432 - no response\n[exit code: 2]", "exit_code": 2, "error_kind": "failed", "workspace": "a1"}]}
{"calls": [{"name": "run_shell", "input": {"command": "sleep 3 && pg_isready -h localhost"}, "status": "failed", "output": "localhost:5432 - no response\n[exit code: 2]", "exit_code": 2, "error_kind": "failed", "workspace": "a1"}]}
{"calls": [{"name": "run_shell", "input": {"command": "sleep 3 && pg_isready -h localhost"}, "status": "completed", "output": "localhost:5432 - accepting connections\n[exit code: 0]", "exit_code": 0, "workspace": "a1"}]}
{"calls": [{"name": "run_shell", "input": {"command": "sqlx migrate run"}, "status": "completed", "output": "Applied 20261201_invoices.sql (12.3ms)\n[exit code: 0]", "exit_code": 0, "workspace": "a2"}]}
{"text": "The database is up and the migration is applied."}
"#;
    let turns = replay::parse(text).expect("parses");
    assert_eq!(turns.len(), 8);
    let v = replay::run(&mut agent::script::watchdog::default_watchdog().0, &turns);
    assert_eq!(v.len(), 8, "{}", dump(&v));
    assert!(
        v.iter().all(|(_, v)| v.kind() == VerdictKind::Continue),
        "{}",
        dump(&v)
    );
}

/// A replay file with a broken line: the error names the line (blank lines
/// count) and says what a line must look like.
#[test]
fn replay_text_parse_error_names_the_line() {
    let text = "{\"calls\": []}\n\n{\"calls\": [{\"name\": \"ls\"\n{\"calls\": []}\n";
    let err = replay::parse(text).expect_err("line 3 is cut short");
    assert_eq!(err.line, 3);
    let message = err.to_string();
    assert!(message.starts_with("line 3: "), "{message}");
    assert!(
        message.contains("Each line must be a JSON object"),
        "{message}"
    );

    let bad_status = "{\"calls\": [{\"name\": \"ls\", \"status\": \"done\"}]}";
    let err = replay::parse(bad_status).expect_err("status is checked");
    assert_eq!(err.line, 1);
    assert!(
        err.to_string()
            .contains("status must be \"completed\" or \"failed\", not \"done\""),
        "{err}"
    );
}

// ---- Watchdog II (issue 16): each class, must trip and must not trip ----

/// A `write_file` of generated content at `path`.
fn generate(path: &str, content: &str, ws: &str) -> CallRecord {
    let mut call = write(path, content, ws);
    call.output = format!("Wrote {} bytes to {path} (a new file)", content.len());
    call
}

/// Polling a clock: every output is a new value, though masking hides it.
#[test]
fn date_polled_fifteen_times_must_not_trip() {
    let turns: Vec<TurnRecord> = (0..15u64)
        .map(|i| {
            turn(vec![shell(
                "date +%s%N",
                &format!("{}", 1_764_672_000_123_456_789u64 + i * 1_000_003),
                0,
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// A small JSON status whose timestamp moves is news to a poll.
#[test]
fn status_poll_with_a_moving_timestamp_must_not_trip() {
    let turns: Vec<TurnRecord> = (0..10)
        .map(|i| {
            turn(vec![shell(
                "curl -s localhost:8080/status",
                &format!("{{\"ts\":{},\"state\":\"running\"}}", 1_764_672_000 + i),
                0,
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// A training log polled: the epoch counter and the numbers move.
#[test]
fn epoch_counter_poll_must_not_trip() {
    let turns: Vec<TurnRecord> = (1..=12)
        .map(|e| {
            turn(vec![shell(
                "tail -n 3 train.log",
                &format!(
                    "2026-12-02T10:{e:02}:00Z epoch {e}/12\n  loss 0.{}\n  eval accuracy {}%",
                    90 - e,
                    60 + e
                ),
                0,
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// A larger output in which only a pid and a clock move is the same
/// outcome: re-running the status script is a repeat.
#[test]
fn status_where_only_the_pid_and_clock_move_must_trip() {
    let mut turns = orientation();
    turns.extend((0..6).map(|i| {
        turn(vec![shell(
            "./status.sh",
            &format!(
                "server: stopped\nlast pid {}\nlast exit at 10:0{i}:13: code 1\nsee logs/server.log",
                4000 + i
            ),
            0,
        )])
    }));
    assert_eq!(trips(&turns, 3, "repeated_action"), (3, 4));
}

/// "Address in use" with a new port each time: masking the port shows the
/// calls all fail the same way.
#[test]
fn address_in_use_on_every_port_must_trip() {
    let mut turns = orientation();
    turns.extend((1..=6).map(|n| {
        turn(vec![shell(
            &format!("PORT=300{n} npm start"),
            &format!("Error: listen EADDRINUSE: address already in use :::300{n}"),
            1,
        )])
    }));
    assert_eq!(trips(&turns, 3, "counter_args"), (3, 4));
}

/// A server started with `&`, then a health check without any wait word
/// that is refused six times before it answers: waiting, not looping.
#[test]
fn health_check_after_a_background_start_must_not_trip() {
    let refused =
        "curl: (7) Failed to connect to localhost port 3000 after 0 ms: Connection refused";
    let mut turns = vec![turn(vec![shell(
        "npm run dev > dev.log 2>&1 &",
        "[1] 4242",
        0,
    )])];
    turns.extend(times(
        6,
        turn(vec![shell("curl -sf localhost:3000/health", refused, 7)]),
    ));
    turns.push(turn(vec![shell(
        "curl -sf localhost:3000/health",
        "{\"ok\":true}",
        0,
    )]));
    turns.push(answer("The dev server is up."));
    runs_clean(&turns);
    // The fifth identical poll gets a back-off hint.
    let v = verdicts(&turns);
    let notes: Vec<&(usize, Verdict)> = v
        .iter()
        .filter(|(_, v)| v.kind() == VerdictKind::Notice)
        .collect();
    assert_eq!(notes.len(), 1, "{}", dump(&v));
    assert!(notes[0].1.reason().contains("Back off"), "{}", dump(&v));
}

/// `docker run -d`, then `pg_isready` (no sleep) until the database is up.
#[test]
fn database_probe_after_docker_run_must_not_trip() {
    let mut turns = vec![turn(vec![shell(
        "docker run -d --name db -p 5432:5432 postgres:16",
        "3f2a9c1b7e4d5a6b0011223344556677889900aabbccddeeff00112233445566",
        0,
    )])];
    turns.extend(times(
        5,
        turn(vec![shell(
            "pg_isready -h localhost",
            "localhost:5432 - no response",
            2,
        )]),
    ));
    turns.push(turn(vec![shell(
        "pg_isready -h localhost",
        "localhost:5432 - accepting connections",
        0,
    )]));
    runs_clean(&turns);
}

/// A server that never comes up: the waiting allowance runs out, and the
/// repair says how to back off.
#[test]
fn probe_after_a_start_that_never_succeeds_must_trip_eventually() {
    let refused =
        "curl: (7) Failed to connect to localhost port 8080 after 0 ms: Connection refused";
    let mut turns = vec![turn(vec![shell(
        "nohup ./server > server.log 2>&1 &",
        "",
        0,
    )])];
    turns.extend(times(
        12,
        turn(vec![shell("curl -sf localhost:8080/health", refused, 7)]),
    ));
    let v = verdicts(&turns);
    let (repair, rv) = first(&v, VerdictKind::Repair).expect("repaired");
    assert_eq!(*repair, 9, "the eighth identical probe:\n{}", dump(&v));
    assert!(rv.reason().starts_with("poll_repeats"), "{}", dump(&v));
    assert!(
        matches!(rv, Verdict::Repair { text, .. } if text.contains("back off")),
        "{rv:?}"
    );
    let (stop, _) = first(&v, VerdictKind::Stop).expect("stopped");
    assert_eq!(*stop, 10, "{}", dump(&v));
}

/// The same probe with nothing started is an ordinary repeat.
#[test]
fn probe_with_nothing_started_must_trip() {
    let refused =
        "curl: (7) Failed to connect to localhost port 8080 after 0 ms: Connection refused";
    let mut turns = orientation();
    turns.extend(times(
        5,
        turn(vec![shell("curl -sf localhost:8080/health", refused, 7)]),
    ));
    assert_eq!(trips(&turns, 3, "repeated_action"), (3, 4));
}

/// `n` turns, each reading a file not read before.
fn distinct_reads(n: usize) -> Vec<TurnRecord> {
    (1..=n)
        .map(|i| {
            // Each file says something of its own, not only its number.
            let name: String = [i % 26, i / 26 % 26, i * 7 % 26]
                .iter()
                .map(|&c| char::from(b'a' + c as u8))
                .collect();
            turn(vec![read_all(
                &format!("src/module_{i}.rs"),
                &format!(
                    "     1\tpub fn handle_{name}() -> u32 {{\n     2\t    {}\n     3\t}}",
                    i * 7919 % 1013
                ),
            )])
        })
        .collect()
}

/// Wandering: reading file after new file, never changing anything.
#[test]
fn reading_distinct_files_forever_must_trip() {
    let turns = distinct_reads(30);
    // Repaired on its 24th quiet turn; the loop is told from work there.
    assert_eq!(trips(&turns, 21, "wandering"), (4, 5));
}

/// A review request reads a lot: forty distinct files, then the review.
#[test]
fn review_reading_forty_files_must_not_trip() {
    let mut turns = distinct_reads(40);
    turns[0].user = Some("Please review the handlers for error-handling bugs".into());
    turns.push(answer("Review: handlers 3, 17 and 31 swallow errors."));
    runs_clean(&turns);
}

/// Even a review stops reading some time.
#[test]
fn review_reading_forever_must_trip() {
    let mut turns = distinct_reads(90);
    turns[0].user = Some("Audit the codebase".into());
    assert_eq!(trips(&turns, 77, "wandering"), (4, 5));
}

/// Reading in bursts between edits is work.
#[test]
fn reads_between_edits_must_not_trip() {
    let mut turns = Vec::new();
    for (i, r) in distinct_reads(60).into_iter().enumerate() {
        turns.push(r);
        if i % 6 == 5 {
            turns.push(turn(vec![edit(
                &format!("src/module_{i}.rs"),
                "u32",
                "u64",
                &format!("ws-{i}"),
            )]));
        }
    }
    runs_clean(&turns);
}

/// Flailing: an edit and the same failing test, in one response each
/// time; the failure never moves.
#[test]
fn flailing_edit_and_test_in_one_response_must_trip() {
    let turns: Vec<TurnRecord> = (1..=6)
        .map(|i| {
            turn(vec![
                edit(
                    "src/parse.rs",
                    &format!("try{i}"),
                    &format!("try{}", i + 1),
                    &format!("ws-{i}"),
                ),
                shell("cargo test", CARGO_TEST_FAIL, 101),
            ])
        })
        .collect();
    // The loop starts with the second edit that did not move the failure.
    assert_eq!(trips(&turns, 2, "flailing"), (3, 4));
}

/// Flailing with the edit and the test in separate turns.
#[test]
fn flailing_edit_then_test_must_trip() {
    let mut turns = vec![turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)])];
    for i in 1..=5 {
        turns.push(turn(vec![edit(
            "src/parse.rs",
            &format!("try{i}"),
            &format!("try{}", i + 1),
            &format!("ws-{i}"),
        )]));
        turns.push(turn(vec![shell("cargo test", CARGO_TEST_FAIL, 101)]));
    }
    // The loop starts with the second edit (turn 4): the first one did not
    // move the failure.
    assert_eq!(trips(&turns, 4, "flailing"), (4, 6));
}

/// Edits that move the failure (fewer failures each time) are progress.
#[test]
fn edits_that_move_the_failure_must_not_trip() {
    let mut turns = Vec::new();
    for (i, failed) in [5, 4, 3, 2, 1].iter().enumerate() {
        turns.push(turn(vec![edit(
            "src/parse.rs",
            &format!("case{i}"),
            &format!("case{}", i + 1),
            &format!("ws-{i}"),
        )]));
        turns.push(turn(vec![shell(
            "cargo test",
            &format!(
                "test result: FAILED. {} passed; {failed} failed; finished in 0.04s",
                10 - failed
            ),
            101,
        )]));
    }
    turns.push(turn(vec![edit("src/parse.rs", "case5", "done", "ws-9")]));
    turns.push(turn(vec![shell("cargo test", CARGO_TEST_PASS, 0)]));
    turns.push(answer("All ten cases pass."));
    runs_clean(&turns);
}

/// A test file template, the same but for its number.
fn template(n: usize) -> String {
    format!(
        "import unittest\n\nfrom app import compute\n\n\nclass TestCase{n}(unittest.TestCase):\n    def test_value(self):\n        self.assertEqual(compute({n}), {n})\n\n\nif __name__ == '__main__':\n    unittest.main()\n"
    )
}

/// Runaway generation: file after near-identical file.
#[test]
fn near_duplicate_files_must_trip() {
    let turns: Vec<TurnRecord> = (1..=10)
        .map(|n| {
            turn(vec![generate(
                &format!("tests/test_case_{n}.py"),
                &template(n),
                &format!("ws-{n}"),
            )])
        })
        .collect();
    assert_eq!(trips(&turns, 2, "runaway_generation"), (3, 4));
}

/// Scaffolding distinct modules is work.
#[test]
fn scaffolding_distinct_modules_must_not_trip() {
    let names = [
        "parser",
        "lexer",
        "codegen",
        "optimizer",
        "linker",
        "loader",
        "printer",
        "checker",
    ];
    let turns: Vec<TurnRecord> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            turn(vec![generate(
                &format!("src/{name}.rs"),
                &format!(
                    "//! The {name}.\npub struct {name}State {{ pub depth: usize }}\npub fn run_{name}(input: &str) -> Result<(), String> {{\n    let state = {name}State {{ depth: {i} }};\n    todo!(\"{name} over {{input}} at {{}}\", state.depth)\n}}\n"
                ),
                &format!("ws-{i}"),
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// Rewriting one file with small changes (a model that prefers whole-file
/// writes) is not generation.
#[test]
fn rewriting_one_file_must_not_trip() {
    let turns: Vec<TurnRecord> = (1..=6)
        .map(|n| {
            turn(vec![generate(
                "tests/test_case.py",
                &template(n),
                &format!("ws-{n}"),
            )])
        })
        .collect();
    runs_clean(&turns);
}

/// Announcing: the same promise, no call, each time the person says go on
/// (and once more after the repair).
#[test]
fn announcing_the_same_action_without_a_call_must_trip() {
    let promise = "I'll now run the tests to see what fails.";
    let turns = vec![
        user("Fix the failing tests", answer(promise)),
        user("Go ahead", answer(promise)),
        answer(promise),
    ];
    assert_eq!(trips(&turns, 1, "announcing"), (2, 3));
}

/// The same plain answer to the same question asked twice is fine.
#[test]
fn the_same_answer_twice_must_not_trip() {
    let turns = vec![
        user(
            "Which port does the server use?",
            answer("The port is 8080."),
        ),
        user("Which port again?", answer("The port is 8080.")),
    ];
    runs_clean(&turns);
}

/// A long answer listing similar items is an answer, not a loop.
#[test]
fn long_list_answer_must_not_trip() {
    let list: String = (1..=40)
        .map(|i| format!("- handler {i}: moved to the new API and added a test.\n"))
        .collect();
    runs_clean(&[answer(&format!("Done. Summary:\n{list}"))]);
}

/// Counter echoes: each page answers with its own number and nothing else.
#[test]
fn counter_echo_pages_must_trip() {
    let mut turns = orientation();
    turns.extend((1..=8).map(|page| {
        turn(vec![shell(
            &format!("curl -s 'localhost:3000/api/invoices?page={page}'"),
            &format!("{{\"page\":{page},\"items\":[]}}"),
            0,
        )])
    }));
    assert_eq!(trips(&turns, 3, "counter_echo"), (4, 5));
}

/// A run counter echoed in a report that never changes.
#[test]
fn counter_echo_runs_must_trip() {
    let mut turns = orientation();
    turns.extend((1..=8).map(|run| {
        turn(vec![shell(
            &format!("./check.sh --run {run}"),
            &format!("run {run}: scanned invoices.csv, 0 records matched"),
            0,
        )])
    }));
    assert_eq!(trips(&turns, 3, "counter_echo"), (4, 5));
}

/// Real pages, each with its own items, are not echoes.
#[test]
fn real_pages_must_not_trip() {
    let mut turns: Vec<TurnRecord> = (1..=8)
        .map(|page| {
            turn(vec![shell(
                &format!("curl -s 'localhost:3000/api/invoices?page={page}'"),
                &format!(
                    "{{\"page\":{page},\"items\":[{},{}]}}",
                    page * 37 + 5,
                    page * 91 + 2
                ),
                0,
            )])
        })
        .collect();
    turns.push(answer("There are 16 invoices."));
    runs_clean(&turns);
}

/// A 200-step task, each step distinct and productive, then an answer:
/// finishes under the default scripts.
#[test]
fn two_hundred_productive_steps_must_not_trip() {
    let mut turns: Vec<TurnRecord> = (1..=200)
        .map(|i| {
            turn(vec![edit(
                &format!("src/handlers/h{i}.rs"),
                "old_api::call",
                "api::call",
                &format!("ws-{i}"),
            )])
        })
        .collect();
    turns.push(answer("Migrated all 200 handlers."));
    runs_clean(&turns);
}

/// `/budget +100`: the person raises the hard cap for the next turn.
#[test]
fn a_raised_cap_lets_a_long_task_go_on() {
    let mut watchdog = agent::script::watchdog::default_watchdog().0;
    assert_eq!(watchdog.raise_cap(100), 350);
    let mut turns: Vec<TurnRecord> = (1..=400)
        .map(|i| {
            turn(vec![edit(
                "src/app.rs",
                &format!("v{i}"),
                &format!("v{}", i + 1),
                &format!("ws-{i}"),
            )])
        })
        .collect();
    turns[0].user = Some("Do the big refactor".into());
    let v = replay::run(&mut watchdog, &live(&turns));
    assert_eq!(v.len(), 350, "{}", dump(&v));
    assert!(v[349].1.reason().starts_with("hard_cap"), "{}", dump(&v));
    // The raise was for one turn: the next message has the usual cap.
    assert_eq!(watchdog.hard_cap(), 350);
    watchdog.begin_user_turn(None);
    assert_eq!(watchdog.hard_cap(), 250);
}

/// `agent replay` says which detector fired and why.
#[test]
fn replay_lines_name_the_detector_and_its_evidence() {
    let turns: Vec<TurnRecord> = (1..=6)
        .map(|n| {
            turn(vec![generate(
                &format!("tests/test_case_{n}.py"),
                &template(n),
                &format!("ws-{n}"),
            )])
        })
        .collect();
    let v = verdicts(&turns);
    let lines: Vec<serde_json::Value> =
        v.iter().map(|(n, v)| replay::verdict_json(*n, v)).collect();
    let repair = lines
        .iter()
        .find(|l| l["verdict"] == "repair")
        .expect("a repair");
    assert_eq!(repair["rule"], "runaway_generation");
    let evidence = repair["evidence"].as_str().unwrap();
    assert!(evidence.contains("near-identical"), "{repair}");
    assert!(
        repair["message"]
            .as_str()
            .unwrap()
            .contains("near-identical")
    );
}

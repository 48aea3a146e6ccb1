//! Watchdog II (issue 16) live: for each runaway class, a mock model that
//! loops must be stopped by the built `agent` binary with exit 4 and the
//! rule named, and a mock model doing the look-alike real work must finish
//! with exit 0 and no repair. The same classes are judged offline in
//! `watchdog_scenarios`; here the calls really run, the workspace identity
//! is the real one and the rules are the built-in `watchdog.rhai`.

use agent::agent::TurnOutcome;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Recorded, Reply, Shape};
use crate::common::{Dirs, Recorder, STEP_TIMEOUT, agent_command, agent_for, output, stderr};

/// A reply with one call per `(tool, arguments)`.
fn calls(turn: usize, list: &[(&str, serde_json::Value)]) -> Reply {
    let ids: Vec<String> = (0..list.len()).map(|i| format!("t{turn}c{i}")).collect();
    let args: Vec<String> = list.iter().map(|(_, a)| a.to_string()).collect();
    let triples: Vec<(&str, &str, &str)> = list
        .iter()
        .enumerate()
        .map(|(i, (tool, _))| (ids[i].as_str(), *tool, args[i].as_str()))
        .collect();
    Reply::tools(Shape::OpenAi, &triples)
}

fn shell(command: &str) -> (&'static str, serde_json::Value) {
    ("run_shell", json!({ "command": command }))
}

fn write(path: &str, content: &str) -> (&'static str, serde_json::Value) {
    ("write_file", json!({ "path": path, "content": content }))
}

/// The watchdog's notes to the model that came as user messages (repairs)
/// in the last request.
fn repairs(requests: &[Recorded]) -> Vec<String> {
    requests
        .last()
        .map(|r| {
            r.messages()
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str())
                .filter(|c| c.starts_with("[agent watchdog"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `agent -p prompt` against `replies` (then `fallback` forever).
async fn run(
    dirs: &Dirs,
    prompt: &str,
    replies: Vec<Reply>,
    fallback: Option<Reply>,
) -> (std::process::Output, Vec<Recorded>) {
    let server = MockServer::start_with_fallback(replies, fallback).await;
    let mut cmd = agent_command(dirs, &server.base_url);
    cmd.args(["-p", prompt]);
    let out = output(cmd).await;
    server.assert_protocol();
    (out, server.requests())
}

/// Asserts a stop with exit 4 by `rule`, after exactly one repair naming it,
/// within `max_requests` requests.
fn assert_stopped_by(
    (out, requests): &(std::process::Output, Vec<Recorded>),
    rule: &str,
    max_requests: usize,
) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(4), "stderr: {err}");
    assert!(
        err.contains(&format!("stopped by the watchdog: {rule}")),
        "{err}"
    );
    assert!(
        requests.len() <= max_requests,
        "{} requests: {err}",
        requests.len()
    );
    let notes = repairs(requests);
    assert_eq!(notes.len(), 1, "one repair: {notes:?}");
    assert!(notes[0].contains(rule), "{}", notes[0]);
}

/// Asserts exit 0 without any repair.
fn assert_finished((out, requests): &(std::process::Output, Vec<Recorded>), expected: usize) {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(out));
    assert_eq!(requests.len(), expected, "stderr: {}", stderr(out));
    assert_eq!(repairs(requests), Vec::<String>::new());
}

#[tokio::test]
async fn flailing_edits_under_the_same_failing_check_are_stopped() {
    let dirs = Dirs::new();
    let replies = (1..=10)
        .map(|i| {
            calls(
                i,
                &[
                    write("fix.txt", &format!("attempt {i}\n")),
                    shell("grep -c fixed fix.txt"),
                ],
            )
        })
        .collect();
    let run = run(&dirs, "make the check pass", replies, None).await;
    // Repaired on the fourth identical failure, stopped on the fifth.
    assert_stopped_by(&run, "flailing", 5);
}

#[tokio::test]
async fn edits_that_move_the_failing_check_finish() {
    let dirs = Dirs::new();
    let mut replies: Vec<Reply> = (1..=6)
        .map(|i| {
            calls(
                i,
                &[
                    write("fix.txt", &"fixed\n".repeat(i)),
                    shell("n=$(grep -c fixed fix.txt); echo \"$n of 6 fixed\"; test $n -ge 6"),
                ],
            )
        })
        .collect();
    replies.push(Reply::text("All six fixed."));
    assert_finished(&run(&dirs, "fix all six", replies, None).await, 7);
}

fn test_template(n: usize) -> String {
    format!(
        "import unittest\n\nfrom app import compute\n\n\nclass TestCase{n}(unittest.TestCase):\n    def test_value(self):\n        self.assertEqual(compute({n}), {n})\n\n\nif __name__ == '__main__':\n    unittest.main()\n"
    )
}

#[tokio::test]
async fn near_identical_files_are_stopped() {
    let dirs = Dirs::new();
    let replies = (1..=10)
        .map(|n| {
            calls(
                n,
                &[write(&format!("tests/test_case_{n}.py"), &test_template(n))],
            )
        })
        .collect();
    let run = run(&dirs, "write tests", replies, None).await;
    assert_stopped_by(&run, "runaway_generation", 5);
}

#[tokio::test]
async fn distinct_modules_finish() {
    let dirs = Dirs::new();
    let names = [
        "parser",
        "lexer",
        "codegen",
        "optimizer",
        "linker",
        "loader",
    ];
    let mut replies: Vec<Reply> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let body = format!(
                "//! The {name}.\npub struct {name}State {{ pub depth: usize }}\npub fn run_{name}(input: &str) -> Result<(), String> {{\n    let state = {name}State {{ depth: {i} }};\n    todo!(\"{name} over {{input}} at {{}}\", state.depth)\n}}\n"
            );
            calls(i, &[write(&format!("src/{name}.rs"), &body)])
        })
        .collect();
    replies.push(Reply::text("Scaffolded six modules."));
    assert_finished(&run(&dirs, "scaffold the compiler", replies, None).await, 7);
}

/// Seeds `n` distinct source files and returns one read per file.
fn distinct_reads(dirs: &Dirs, n: usize) -> Vec<Reply> {
    (1..=n)
        .map(|i| {
            let path = format!("src/module_{i}.rs");
            dirs.write(
                &path,
                &format!(
                    "pub fn handle_{i}() -> u32 {{\n    {}\n}}\n",
                    i * 7919 % 1013
                ),
            );
            calls(i, &[("read_file", json!({ "path": path }))])
        })
        .collect()
}

#[tokio::test]
async fn reading_file_after_file_without_acting_is_stopped() {
    let dirs = Dirs::new();
    let replies = distinct_reads(&dirs, 40);
    let run = run(&dirs, "fix the off-by-one bug", replies, None).await;
    // The 24th quiet turn is repaired, the 25th stopped.
    assert_stopped_by(&run, "wandering", 25);
}

#[tokio::test]
async fn a_review_that_reads_forty_files_finishes() {
    let dirs = Dirs::new();
    let mut replies = distinct_reads(&dirs, 40);
    replies.push(Reply::text("Review: handlers 3 and 17 swallow errors."));
    let run = run(&dirs, "Please review the handlers", replies, None).await;
    assert_finished(&run, 41);
}

#[tokio::test]
async fn a_counter_echoed_back_is_stopped() {
    let dirs = Dirs::new();
    let replies = (1..=10)
        .map(|n| {
            calls(
                n,
                &[shell(&format!(
                    "echo 'run {n}: scanned invoices.csv, 0 records matched'"
                ))],
            )
        })
        .collect();
    let run = run(&dirs, "find the bad invoice", replies, None).await;
    assert_stopped_by(&run, "counter_echo", 5);
}

/// Pages served from elsewhere: each has its own items, though the call
/// differs only by its page number.
#[tokio::test]
async fn real_pages_finish() {
    let dirs = Dirs::new();
    let mut replies: Vec<Reply> = (1..=8)
        .map(|p| {
            dirs.write(
                &format!("pages/{p}.json"),
                &format!("{{\"page\":{p},\"items\":[{},{}]}}", p * 37 + 5, p * 91 + 2),
            );
            calls(p, &[shell(&format!("cat pages/{p}.json"))])
        })
        .collect();
    replies.push(Reply::text("There are 16 invoices."));
    assert_finished(&run(&dirs, "count the invoices", replies, None).await, 9);
}

#[tokio::test]
async fn a_probe_refused_while_a_started_service_boots_finishes() {
    let dirs = Dirs::new();
    let mut replies = vec![calls(0, &[shell("true > /dev/null 2>&1 &")])];
    replies.extend((1..=6).map(|i| calls(i, &[shell("test -f ready")])));
    replies.push(calls(7, &[shell("touch ready && test -f ready")]));
    replies.push(Reply::text("The service is up."));
    let run = run(&dirs, "start the service", replies, None).await;
    assert_finished(&run, 9);
    // The fifth identical probe brought the back-off hint with its result.
    let hinted = run.1[6]
        .tool_result("t5c0")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(hinted.contains("Back off"), "{hinted}");
}

#[tokio::test]
async fn a_probe_after_a_start_that_never_succeeds_is_stopped() {
    let dirs = Dirs::new();
    let replies = vec![calls(0, &[shell("true > /dev/null 2>&1 &")])];
    let probe = calls(1, &[shell("test -f never")]);
    let run = run(&dirs, "start the service", replies, Some(probe)).await;
    // The eighth identical probe is repaired, with back-off advice.
    assert_stopped_by(&run, "poll_repeats", 10);
    assert!(repairs(&run.1)[0].contains("back off"));
}

/// Announcing: the same promise, no call, each time the person says go on;
/// after the repair once more, and the turn is stopped.
#[tokio::test]
async fn the_same_announcement_without_a_call_is_stopped() {
    let dirs = Dirs::new();
    let promise = "I'll now run the tests to see what fails.";
    let server = MockServer::start(vec![Reply::text(promise); 3]).await;
    let mut agent = agent_for(&server.base_url, &dirs);
    let cancel = CancellationToken::new();
    let mut outcomes = Vec::new();
    for ask in ["Fix the failing tests", "Go ahead"] {
        let outcome = tokio::time::timeout(
            STEP_TIMEOUT,
            agent.run_turn(ask, &Recorder::default(), &cancel),
        )
        .await
        .unwrap()
        .unwrap();
        outcomes.push(outcome);
    }
    assert!(matches!(outcomes[0], TurnOutcome::Done { .. }));
    assert!(
        matches!(&outcomes[1], TurnOutcome::Stopped { reason, .. } if reason.starts_with("announcing")),
        "{:?}",
        outcomes[1]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let notes = repairs(&requests);
    assert_eq!(notes.len(), 1);
    assert!(notes[0].contains("announcing"), "{}", notes[0]);
}

/// The same plain answer to a question asked twice is an answer.
#[tokio::test]
async fn the_same_answer_twice_finishes() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![Reply::text("The port is 8080."); 2]).await;
    let mut agent = agent_for(&server.base_url, &dirs);
    let cancel = CancellationToken::new();
    for ask in ["Which port does the server use?", "Which port again?"] {
        let outcome = tokio::time::timeout(
            STEP_TIMEOUT,
            agent.run_turn(ask, &Recorder::default(), &cancel),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    }
    assert_eq!(server.requests().len(), 2);
}

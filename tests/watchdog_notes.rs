//! The watchdog's notes as a small model reads them: where they go
//! (`note_placement` in watchdog.rhai), that they restate the person's
//! request and the last result, and the tool-less summary turn that
//! answers the task. Driven by the streams recorded from llama-server
//! where Qwen2.5-Coder-1.5B repeated `echo hello` until the watchdog spoke.

use std::sync::Arc;

use agent::agent::{Agent, TurnOutcome};
use agent::script::{Origin, WATCHDOG, compile, watchdog};
use agent::tools::text_calls::{BuiltinReader, ToolCallMode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Recording, Reply, Shape};
use crate::common::{Dirs, Recorder, STEP_TIMEOUT, agent_for};

/// The built-in watchdog.rhai with `settings()` entries replaced.
fn with_settings(dirs: &Dirs, agent: &mut Agent, settings: &str) {
    let path = dirs.config.join("watchdog.rhai");
    let source = format!(
        "fn settings() {{ #{{ {settings} }} }}\n{}",
        rest_of_default()
    );
    let script = compile(WATCHDOG, source, Origin::User(path)).expect("the script compiles");
    let (w, warnings) = watchdog::from_script(Arc::new(script));
    assert!(warnings.is_empty(), "{warnings:?}");
    agent.set_watchdog(w);
}

/// The built-in watchdog.rhai without its `settings()` (a person's map is
/// merged over the built-in one, so a partial map is enough).
fn rest_of_default() -> String {
    include_str!("../scripts/watchdog.rhai").replace("fn settings()", "fn built_in_settings()")
}

async fn turn(agent: &mut Agent, task: &str) -> TurnOutcome {
    tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn(task, &Recorder::default(), &CancellationToken::new()),
    )
    .await
    .expect("the turn finished in time")
    .expect("the turn succeeded")
}

/// The three recorded answers that each ran `echo hello` again.
fn repeated_echo() -> Vec<Reply> {
    (1..=3)
        .map(|n| {
            let r = Recording::load(&format!("llama-server/native-calls-echo-000{n}.json"));
            Reply::recorded(&r, 0.001)
        })
        .collect()
}

fn note_in(messages: &[Value]) -> Option<(String, String)> {
    messages.iter().find_map(|m| {
        let content = m["content"].as_str()?;
        let at = content.find("[agent watchdog")?;
        Some((m["role"].as_str()?.to_string(), content[at..].to_string()))
    })
}

#[tokio::test]
async fn the_repair_note_restates_the_request_after_the_last_tool_result() {
    let mut replies = repeated_echo();
    replies.push(Reply::text("hello"));
    let server = MockServer::start(replies).await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    // A local model's profile (tool_calls "auto").
    agent.set_tool_calls(ToolCallMode::Auto, Arc::new(BuiltinReader));
    let outcome = turn(&mut agent, "Run the command: echo hello").await;
    assert!(matches!(outcome, TurnOutcome::Done { ref text, .. } if text == "hello"));
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let (role, note) = note_in(requests[3].messages()).expect("the repair note was sent");
    assert_eq!(
        role, "tool",
        "note_placement \"auto\": appended to the last tool result for a local model"
    );
    assert!(
        note.contains("The person asked: Run the command: echo hello\nYour calls already returned: run_shell: hello")
            && note.contains("answer it now without tools"),
        "{note}"
    );
    server.assert_protocol();
}

#[tokio::test]
async fn with_native_tool_calls_the_note_stays_a_message_of_its_own() {
    let mut replies = repeated_echo();
    replies.push(Reply::text("hello"));
    let server = MockServer::start(replies).await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    turn(&mut agent, "Run the command: echo hello").await;
    let requests = server.requests();
    let (role, _) = note_in(requests[3].messages()).expect("the repair note was sent");
    assert_eq!(role, "user", "the hosted path is as it was");
    // Asked for, a native model gets it in the tool result too.
    let server = MockServer::start({
        let mut r = repeated_echo();
        r.push(Reply::text("hello"));
        r
    })
    .await;
    let mut agent = agent_for(&server.base_url, &dirs);
    with_settings(&dirs, &mut agent, "note_placement: \"tool_result\"");
    turn(&mut agent, "Run the command: echo hello").await;
    let (role, _) = note_in(server.requests()[3].messages()).expect("the repair note was sent");
    assert_eq!(role, "tool");
}

#[tokio::test]
async fn note_placement_message_sends_the_note_on_its_own() {
    let mut replies = repeated_echo();
    replies.push(Reply::text("hello"));
    let server = MockServer::start(replies).await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    with_settings(&dirs, &mut agent, "note_placement: \"message\"");
    turn(&mut agent, "Run the command: echo hello").await;
    let requests = server.requests();
    let (role, note) = note_in(requests[3].messages()).expect("the repair note was sent");
    assert_eq!(role, "user");
    assert!(
        note.contains("The person asked: Run the command: echo hello"),
        "{note}"
    );
    // A misspelt placement is named.
    let script = compile(
        WATCHDOG,
        format!(
            "fn settings() {{ #{{ note_placement: \"inline\" }} }}\n{}",
            rest_of_default()
        ),
        Origin::User(dirs.config.join("watchdog.rhai")),
    )
    .unwrap();
    let (_, warnings) = watchdog::from_script(Arc::new(script));
    assert!(
        warnings.iter().any(|w| w.contains("inline")),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn the_summary_turn_answers_the_request() {
    let echo = |id: &str, word: &str| {
        Reply::tools(
            Shape::OpenAi,
            &[(id, "run_shell", &format!("{{\"command\":\"echo {word}\"}}"))],
        )
    };
    let server = MockServer::start(vec![
        echo("c1", "one"),
        echo("c2", "two"),
        Reply::text("It printed one, then two."),
    ])
    .await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    with_settings(
        &dirs,
        &mut agent,
        "base_budget: 2, hard_cap: 2, notice_when_left: 0",
    );
    let outcome = turn(&mut agent, "Print one and two").await;
    let TurnOutcome::Stopped { summary, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(summary.as_deref(), Some("It printed one, then two."));
    let last = server.requests()[2].clone();
    assert!(
        last.body
            .get("tools")
            .is_none_or(|t| t == &serde_json::json!([]))
    );
    let note = last.messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        note.contains("The person asked: Print one and two")
            && note.contains("run_shell: two")
            && note.contains("Answer the person's request now"),
        "{note}"
    );
    assert!(!note.contains("Summarise"), "{note}");
    server.assert_protocol();
}

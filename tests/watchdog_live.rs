//! The watchdog in the live loop, against the mock server.

use std::time::{Duration, Instant};

use agent::agent::TurnOutcome;
use agent::client::ChatClient;
use agent::protocol::Event;
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Reply, Shape, chunks, done_after, text_events};
use crate::common::{
    Dirs, Recorder, STEP_TIMEOUT, agent_command, agent_for, client_config, output, stderr, stdout,
};

#[tokio::test]
async fn a_model_that_runs_ls_forever_is_repaired_once_then_stopped_with_exit_4() {
    let dirs = Dirs::new();
    dirs.write("a.txt", "x");
    let ls = Reply::tools(Shape::OpenAi, &[("c", "run_shell", r#"{"command":"ls"}"#)]);
    let server = MockServer::start_with_fallback(vec![], Some(ls)).await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "list the files"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(4), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("stopped by the watchdog: repeated_action"),
        "{err}"
    );
    assert_eq!(
        err.matches("stopped by the watchdog").count(),
        1,
        "the stop is printed once: {err}"
    );
    assert!(
        err.contains("ran 4 times with the same result"),
        "says why, with evidence: {err}"
    );
    assert_eq!(stdout(&out), "");

    let requests = server.requests();
    assert_eq!(requests.len(), 4, "stopped well before the 12-turn budget");
    // By default (note_placement: "auto") a hosted model with native calls
    // gets the note as a message of its own after the last tool result;
    // it restates the request and what was returned.
    let repairs: Vec<&str> = requests[3]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter_map(|c| c.find("[agent watchdog").map(|i| &c[i..]))
        .collect();
    assert_eq!(repairs.len(), 1, "exactly one repair prompt");
    let last = requests[3].messages().last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("[agent watchdog")
    );
    let repair = repairs[0];
    assert!(
        repair.contains("repeated_action") && repair.contains("ran 3 times"),
        "{repair}"
    );
    assert!(
        repair.contains("The person asked: list the files")
            && repair.contains("Your calls already returned: run_shell: a.txt")
            && repair.contains("answer it now without tools"),
        "{repair}"
    );
    assert!(repair.contains("ask the user"), "{repair}");
    server.assert_protocol();

    // The run was logged in the replay format, and replays to the same verdicts.
    let runs: Vec<_> = std::fs::read_dir(dirs.data.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.arg("replay").arg(&runs[0]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verdicts: Vec<&str> = lines
        .iter()
        .map(|l| l["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["continue", "continue", "repair", "stop"]);
    // Which detector fired, and why.
    assert_eq!(lines[2]["rule"], "repeated_action");
    assert_eq!(
        lines[2]["message"],
        agent::watchdog::messages::REPEATED_ACTION
    );
    let evidence = lines[2]["evidence"].as_str().unwrap();
    assert!(evidence.contains("ran 3 times"), "{evidence}");

    // The session's transcript is not a run log: replaying it says so and
    // names where the run log is, instead of printing verdicts.
    let transcripts: Vec<_> = std::fs::read_dir(dirs.data.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(transcripts.len(), 1);
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.arg("replay").arg(&transcripts[0]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "no verdicts for a transcript");
    assert!(
        stderr(&out).contains(agent::watchdog::replay::NOT_A_RUN_LOG),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_hanging_command_is_killed_at_its_timeout_and_its_output_kept() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[(
                "h",
                "run_shell",
                r#"{"command":"echo started; sleep 100","timeout":1}"#,
            )],
        ),
        Reply::text("It hung."),
    ])
    .await;
    let mut agent = agent_for(&server.base_url, &dirs);
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn("go", &Recorder::default(), &CancellationToken::new()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(matches!(outcome, TurnOutcome::Done { .. }));
    assert!(started.elapsed() < Duration::from_secs(10));
    let result = server.requests()[1].tool_result("h").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(result.starts_with("started\n"), "{result}");
    assert!(result.contains("timed out after 1 s"), "{result}");
}

#[tokio::test]
async fn a_stalled_stream_is_retried_inside_a_turn() {
    let dirs = Dirs::new();
    let mut stalled = chunks(&text_events("par")[..2]);
    stalled.push(done_after(Duration::from_secs(30)));
    let server = MockServer::start(vec![Reply::Sse(stalled), Reply::text("complete")]).await;
    let mut config = client_config(&server.base_url);
    config.idle_timeout = Duration::from_millis(300);
    let mut agent = agent::agent::Agent::new(
        std::sync::Arc::new(ChatClient::new(config).unwrap()),
        agent_for(&server.base_url, &dirs).registry().clone(),
        std::sync::Arc::new(agent::runtime::Runtime::new(
            dirs.workspace.clone(),
            dirs.data.clone(),
            Vec::new(),
        )),
        "sys".into(),
        crate::common::judge(&dirs),
    );
    let recorder = Recorder::default();
    let outcome = tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn("q", &recorder, &CancellationToken::new()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        outcome,
        TurnOutcome::Done {
            text: "complete".into(),
            finish_reason: Some("stop".into())
        }
    );
    assert!(
        recorder
            .events()
            .iter()
            .any(|e| matches!(e, Event::Notice(n) if n.contains("stream stalled")))
    );
    // The history holds the completed answer only, not the stalled part.
    let answers: Vec<_> = agent
        .history()
        .iter()
        .filter(|m| matches!(m, agent::protocol::Message::Assistant { .. }))
        .collect();
    assert_eq!(answers.len(), 1);
}

#[tokio::test]
async fn identical_calls_in_one_response_run_once() {
    let dirs = Dirs::new();
    let marker = dirs.workspace.join("count");
    let cmd = format!("echo x >> {}", marker.display());
    let args = serde_json::json!({ "command": cmd }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("a", "run_shell", &args), ("b", "run_shell", &args)],
        ),
        Reply::text("ok"),
    ])
    .await;
    let mut agent = agent_for(&server.base_url, &dirs);
    tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn("go", &Recorder::default(), &CancellationToken::new()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "x\n",
        "the duplicate did not run"
    );
    let dup = server.requests()[1].tool_result("b").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(dup.contains("identical to call a"), "{dup}");
    server.assert_protocol();
}

#[tokio::test]
async fn an_empty_response_gets_one_nudge() {
    let dirs = Dirs::new();
    let empty = Reply::sse(vec![
        serde_json::json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
    ]);
    let server = MockServer::start(vec![empty, Reply::text("Here is the answer.")]).await;
    let mut agent = agent_for(&server.base_url, &dirs);
    let outcome = tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn("q", &Recorder::default(), &CancellationToken::new()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(matches!(outcome, TurnOutcome::Done { ref text, .. } if text == "Here is the answer."));
    let nudge = server.requests()[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(nudge.contains("empty_response"), "{nudge}");
}

/// A model polling `date +%s%N` 15 times (each output a new value) and
/// then answering is never stopped: exit 0.
#[tokio::test]
async fn a_model_polling_the_clock_fifteen_times_finishes_with_exit_0() {
    let dirs = Dirs::new();
    let mut replies: Vec<Reply> = (0..15)
        .map(|i| {
            Reply::tools(
                Shape::OpenAi,
                &[(&format!("d{i}"), "run_shell", r#"{"command":"date +%s%N"}"#)],
            )
        })
        .collect();
    replies.push(Reply::text("The clock moves."));
    let server = MockServer::start(replies).await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "watch the clock"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(server.requests().len(), 16);
    assert!(stdout(&out).contains("The clock moves."));
    server.assert_protocol();
}

/// A 200-step diligent run — each step writes a new file — then a final
/// answer: it finishes under the default scripts with exit 0.
#[tokio::test]
async fn a_two_hundred_step_diligent_run_finishes_with_exit_0() {
    let dirs = Dirs::new();
    let mut replies: Vec<Reply> = (0..200)
        .map(|i| {
            let args = serde_json::json!({
                "path": format!("notes/step_{i}.txt"),
                "content": format!("step {i}: {}\n", "ab".repeat(i % 7 + 1)),
            })
            .to_string();
            Reply::tools(Shape::OpenAi, &[(&format!("w{i}"), "write_file", &args)])
        })
        .collect();
    replies.push(Reply::text("All 200 steps done."));
    let server = MockServer::start(replies).await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "do the 200 steps"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(server.requests().len(), 201);
    assert!(stdout(&out).contains("All 200 steps done."));
    assert!(dirs.workspace.join("notes/step_199.txt").exists());
}

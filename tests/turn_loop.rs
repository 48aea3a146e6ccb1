//! The agent loop in-process, against the mock server.

use agent::agent::TurnOutcome;
use agent::protocol::{Event, ToolStatus};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, Recorder, STEP_TIMEOUT, agent_for};

async fn run(server: &MockServer, dirs: &Dirs, task: &str) -> (TurnOutcome, Recorder) {
    let mut agent = agent_for(&server.base_url, dirs);
    let recorder = Recorder::default();
    let outcome = tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn(task, &recorder, &CancellationToken::new()),
    )
    .await
    .expect("the turn finished in time")
    .expect("the turn succeeded");
    (outcome, recorder)
}

#[tokio::test]
async fn a_tool_result_reaches_the_model() {
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("call_1", "run_shell", r#"{"command":"echo hello"}"#)],
        ),
        Reply::text("It printed hello."),
    ])
    .await;
    let dirs = Dirs::new();
    let (outcome, _) = run(&server, &dirs, "Run echo hello").await;
    assert_eq!(
        outcome,
        TurnOutcome::Done {
            text: "It printed hello.".into(),
            finish_reason: Some("stop".into())
        }
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let result = requests[1]
        .tool_result("call_1")
        .expect("the tool result was sent");
    let content = result["content"].as_str().unwrap();
    assert!(content.starts_with("hello\n"), "{content}");
    assert!(content.contains("exit code: 0"), "{content}");
    // The request before it carried the system prompt, the task and the tools.
    assert_eq!(requests[0].messages()[0]["role"], "system");
    assert_eq!(
        requests[0].messages()[1],
        json!({"role": "user", "content": "Run echo hello"})
    );
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "run_shell",
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "grep",
            "glob"
        ]
    );
    server.assert_protocol();
}

#[tokio::test]
async fn bad_json_and_unknown_tools_reach_the_model_as_text() {
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[
                ("bad", "run_shell", r#"{"command": "echo hi"#),
                ("unknown", "launch_rockets", "{}"),
                ("missing", "read_file", "{}"),
            ],
        ),
        Reply::text("Sorry."),
    ])
    .await;
    let dirs = Dirs::new();
    let (outcome, recorder) = run(&server, &dirs, "go").await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }));
    let second = &server.requests()[1];
    let text = |id: &str| {
        second.tool_result(id).unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(text("bad").contains("not valid JSON"), "{}", text("bad"));
    assert!(
        text("unknown").contains("no tool named `launch_rockets`"),
        "{}",
        text("unknown")
    );
    assert!(
        text("unknown").contains("run_shell"),
        "lists the real tools"
    );
    assert!(
        text("missing").contains("missing required field `path`"),
        "{}",
        text("missing")
    );
    let failed = recorder
        .events()
        .iter()
        .filter(|e| matches!(e, Event::ToolResult { output, .. } if output.status == ToolStatus::Failed))
        .count();
    assert_eq!(failed, 3);
    server.assert_protocol();
}

#[tokio::test]
async fn two_calls_in_one_response_both_run_in_order() {
    let server = MockServer::start(vec![
        Reply::text_and_tools(
            "Writing then reading.",
            Shape::LlamaCpp,
            &[
                (
                    "w",
                    "write_file",
                    r#"{"path":"notes/a.txt","content":"one\ntwo\n"}"#,
                ),
                ("r", "read_file", r#"{"path":"notes/a.txt"}"#),
            ],
        ),
        Reply::text("Done."),
    ])
    .await;
    let dirs = Dirs::new();
    let (_, recorder) = run(&server, &dirs, "write and read").await;
    assert_eq!(
        crate::common::read(&dirs.workspace.join("notes/a.txt")),
        "one\ntwo\n"
    );
    let second = &server.requests()[1];
    let read = second.tool_result("r").unwrap()["content"]
        .as_str()
        .unwrap();
    assert!(read.contains("1\tone") && read.contains("2\ttwo"), "{read}");
    let calls: Vec<String> = recorder
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls, ["w", "r"]);
    // The narration that came with the calls is kept in the history.
    assert_eq!(second.messages()[2]["content"], "Writing then reading.");
    server.assert_protocol();
}

#[tokio::test]
async fn a_failing_command_is_information_not_a_crash() {
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::NoIndex,
            &[("c", "run_shell", r#"{"command":"echo oops >&2; exit 7"}"#)],
        ),
        Reply::text("It failed with 7."),
    ])
    .await;
    let dirs = Dirs::new();
    let (_, recorder) = run(&server, &dirs, "go").await;
    let result = recorder
        .events()
        .into_iter()
        .find_map(|e| match e {
            Event::ToolResult { output, .. } => Some(output),
            _ => None,
        })
        .unwrap();
    assert_eq!(result.status, ToolStatus::Failed);
    assert_eq!(result.exit_code, Some(7));
    let sent = server.requests()[1].tool_result("c").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sent.contains("oops") && sent.contains("exit code: 7"),
        "{sent}"
    );
}

#[tokio::test]
async fn reasoning_is_kept_apart_from_the_answer() {
    let events = vec![
        json!({"choices": [{"delta": {"reasoning_content": "Let me think."}}]}),
        json!({"choices": [{"delta": {"content": "Answer."}, "finish_reason": "stop"}]}),
    ];
    let server = MockServer::start(vec![Reply::sse(events), Reply::text("again")]).await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    let recorder = Recorder::default();
    let cancel = CancellationToken::new();
    let outcome = agent.run_turn("q", &recorder, &cancel).await.unwrap();
    assert_eq!(
        outcome,
        TurnOutcome::Done {
            text: "Answer.".into(),
            finish_reason: Some("stop".into())
        }
    );
    assert!(
        recorder
            .events()
            .contains(&Event::ReasoningDelta("Let me think.".into()))
    );
    agent.run_turn("again", &recorder, &cancel).await.unwrap();
    let second = server.requests()[1].body.to_string();
    assert!(
        !second.contains("Let me think."),
        "reasoning must not be sent back"
    );
}

#[tokio::test]
async fn an_answer_cut_at_the_token_limit_is_reported() {
    let events = vec![
        json!({"choices": [{"delta": {"content": "Half an ans"}, "finish_reason": "length"}]}),
    ];
    let server = MockServer::start(vec![Reply::sse(events)]).await;
    let dirs = Dirs::new();
    let (outcome, recorder) = run(&server, &dirs, "q").await;
    assert!(
        matches!(outcome, TurnOutcome::Done { finish_reason: Some(ref r), .. } if r == "length")
    );
    assert!(
        recorder
            .events()
            .iter()
            .any(|e| matches!(e, Event::Notice(n) if n.contains("finish_reason: length")))
    );
}

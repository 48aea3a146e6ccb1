//! Local models, replayed from streams recorded from `llama-server --jinja`
//! with Qwen2.5-Coder-1.5B (tests/fixtures/llama-server): tool calls
//! written as text recovered and run (`tool_calls: "auto"`), the same
//! answers left alone with a notice under `"native"`, the keep-alives of a
//! long prompt phase, the usage chunk, and the padding and chanting cut.

use std::sync::Arc;
use std::time::Duration;

use agent::agent::{Agent, TurnOutcome};
use agent::client::{ApiError, ChatClient, Piece};
use agent::protocol::Event;
use agent::tools::text_calls::{BuiltinReader, ToolCallMode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::mock::{Chunk, MockServer, Recording, Reply, content_chunk};
use crate::common::{
    Dirs, Recorder, STEP_TIMEOUT, agent_command, agent_for, client_config, json_lines, output,
    stderr,
};

/// Replayed streams run at this fraction of their recorded time.
const FAST: f64 = 0.001;

fn fixture(name: &str) -> Recording {
    Recording::load(&format!("llama-server/{name}.json"))
}

fn local_agent(server: &MockServer, dirs: &Dirs, mode: ToolCallMode) -> Agent {
    let mut agent = agent_for(&server.base_url, dirs);
    agent.set_tool_calls(mode, Arc::new(BuiltinReader));
    agent
}

async fn turn(agent: &mut Agent, task: &str) -> (TurnOutcome, Vec<Event>) {
    let recorder = Recorder::default();
    let outcome = tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn(task, &recorder, &CancellationToken::new()),
    )
    .await
    .expect("the turn finished in time")
    .expect("the turn succeeded");
    (outcome, recorder.events())
}

fn notices(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Notice(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

fn tool_calls(events: &[Event]) -> Vec<(String, Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall { name, input, .. } => Some((name.clone(), input.clone())),
            _ => None,
        })
        .collect()
}

/// The keys of a JSON object, sorted, for comparing message shapes.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

/// The recorded echo task's first answer, then `then`.
async fn echo_server(then: &str) -> (Recording, MockServer) {
    let recorded = fixture("text-calls-echo-0002");
    let server = MockServer::start(vec![Reply::recorded(&recorded, FAST), Reply::text(then)]).await;
    (recorded, server)
}

#[tokio::test]
async fn a_call_written_as_text_runs_and_hello_reaches_the_model() {
    let (_, server) = echo_server("It printed hello.").await;
    let dirs = Dirs::new();
    let mut agent = local_agent(&server, &dirs, ToolCallMode::Auto);
    let (outcome, events) = turn(&mut agent, "Run the command: echo hello").await;
    assert_eq!(
        outcome,
        TurnOutcome::Done {
            text: "It printed hello.".into(),
            finish_reason: Some("stop".into())
        }
    );
    assert_eq!(
        tool_calls(&events),
        [(
            "run_shell".to_string(),
            json!({"command": "echo hello", "timeout": 60})
        )]
    );
    let said = notices(&events);
    assert!(
        said.iter()
            .any(|n| n.contains("recovered") && n.contains("run_shell")),
        "{said:?}"
    );
    // The second request carries the call natively and its one result.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].messages();
    let call = &messages[2];
    assert_eq!(call["role"], "assistant");
    let id = call["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(call["tool_calls"][0]["function"]["name"], "run_shell");
    let answers: Vec<&Value> = messages
        .iter()
        .filter(|m| m["tool_call_id"] == id)
        .collect();
    assert_eq!(answers.len(), 1, "answered exactly once");
    assert!(
        answers[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("hello\n"),
        "{}",
        answers[0]
    );
    // The form llama-server accepted in the recorded native-call run.
    let accepted = fixture("native-calls-echo-0002").request;
    let accepted = accepted["messages"].as_array().unwrap();
    assert_eq!(keys(call), keys(&accepted[2]));
    assert_eq!(
        keys(&call["tool_calls"][0]),
        keys(&accepted[2]["tool_calls"][0])
    );
    assert_eq!(
        keys(&call["tool_calls"][0]["function"]),
        keys(&accepted[2]["tool_calls"][0]["function"])
    );
    assert_eq!(keys(answers[0]), keys(&accepted[3]));
    server.assert_protocol();
}

#[tokio::test]
async fn every_recorded_text_call_is_recovered() {
    for (name, tool) in [
        ("text-calls-hello-0005", "write_file"),
        ("text-calls-listdir-0003", "list_dir"),
        ("text-calls-fixcalc-0006", "run_shell"),
    ] {
        let server = MockServer::start(vec![
            Reply::recorded(&fixture(name), FAST),
            Reply::text("Done."),
        ])
        .await;
        let dirs = Dirs::new();
        let mut agent = local_agent(&server, &dirs, ToolCallMode::Auto);
        let (outcome, events) = turn(&mut agent, "Do the task").await;
        assert!(
            matches!(outcome, TurnOutcome::Done { ref text, .. } if text == "Done."),
            "{name}: {outcome:?}"
        );
        let calls = tool_calls(&events);
        assert_eq!(calls.len(), 1, "{name}: {calls:?}");
        assert_eq!(calls[0].0, tool, "{name}");
        assert_eq!(server.requests()[1].messages()[3]["role"], "tool", "{name}");
        server.assert_protocol();
    }
}

#[tokio::test]
async fn with_native_calls_the_answer_stays_an_answer_and_the_person_is_told() {
    let recorded = fixture("text-calls-echo-0002");
    let server = MockServer::start(vec![Reply::recorded(&recorded, FAST)]).await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    let (outcome, events) = turn(&mut agent, "Run the command: echo hello").await;
    assert_eq!(
        outcome,
        TurnOutcome::Done {
            text: recorded.content(),
            finish_reason: Some("stop".into())
        }
    );
    assert!(tool_calls(&events).is_empty());
    assert_eq!(server.requests().len(), 1);
    let said = notices(&events);
    assert!(
        said.iter()
            .any(|n| n.contains("looks like a tool call") && n.contains("\"native\"")),
        "{said:?}"
    );
    // The request is today's: the full tools array.
    let tools = server.requests()[0].body["tools"].clone();
    assert_eq!(tools, *agent.registry().to_openai_json());
}

#[tokio::test]
async fn a_call_the_tools_cannot_take_is_not_run_and_the_person_is_told_why() {
    let text = "```json\n{\"name\": \"run_shell\", \"arguments\": {\"cmd\": \"echo hello\"}}\n```";
    let server = MockServer::start(vec![Reply::text(text)]).await;
    let dirs = Dirs::new();
    let mut agent = local_agent(&server, &dirs, ToolCallMode::Auto);
    let (outcome, events) = turn(&mut agent, "Run the command: echo hello").await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    assert!(tool_calls(&events).is_empty());
    let said = notices(&events);
    assert!(
        said.iter()
            .any(|n| n.contains("looks like a tool call") && n.contains("no parameter `cmd`")),
        "{said:?}"
    );
}

#[tokio::test]
async fn text_mode_sends_no_tools_and_the_history_as_text() {
    let (_, server) = echo_server("It printed hello.").await;
    let dirs = Dirs::new();
    let mut agent = local_agent(&server, &dirs, ToolCallMode::Text);
    let (outcome, events) = turn(&mut agent, "Run the command: echo hello").await;
    assert!(matches!(outcome, TurnOutcome::Done { ref text, .. } if text == "It printed hello."));
    assert_eq!(tool_calls(&events)[0].0, "run_shell");
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.body.get("tools").is_none()));
    // No tool_calls and no `tool` role: the call as fenced JSON, its
    // result as the agent's message.
    let messages = requests[1].messages();
    assert_eq!(messages.len(), 4);
    assert!(
        messages
            .iter()
            .all(|m| m.get("tool_calls").is_none() && m["role"] != "tool")
    );
    let call = messages[2]["content"].as_str().unwrap();
    assert!(
        call.starts_with("```json\n{") && call.contains("\"echo hello\""),
        "{call}"
    );
    let result = messages[3]["content"].as_str().unwrap();
    assert_eq!(messages[3]["role"], "user");
    assert!(
        result.starts_with(
            "[agent: the result of your run_shell call — not a message from the user]\nhello\n"
        ),
        "{result}"
    );
    server.assert_protocol();
}

#[tokio::test]
async fn compact_tool_descriptions_are_smaller() {
    let server = MockServer::start(vec![Reply::text("ok")]).await;
    let dirs = Dirs::new();
    let mut agent = local_agent(&server, &dirs, ToolCallMode::Auto);
    agent.set_lean_tools(true);
    turn(&mut agent, "hi").await;
    let compact = server.requests()[0].body["tools"].to_string().len();
    let full = agent.registry().to_openai_json().to_string().len();
    assert!(compact * 2 < full, "{compact} of {full} bytes");
}

/// The recorded padding stream without its end: the fenced call, then
/// newlines for ever (what the server does without `max_tokens`).
fn endless_padding() -> Reply {
    let recorded = fixture("padding-required-echo-0008");
    let head: Vec<Chunk> = recorded
        .chunks(0.0)
        .into_iter()
        .filter(|c| {
            let text = String::from_utf8_lossy(&c.bytes);
            !text.contains("\"length\"") && !text.contains("[DONE]") && !text.contains("usage")
        })
        .collect();
    Reply::Repeat {
        head,
        chunk: content_chunk("\n"),
    }
}

#[tokio::test]
async fn endless_padding_is_cut_with_a_notice_and_the_call_before_it_runs() {
    let server = MockServer::start(vec![endless_padding(), Reply::text("hello")]).await;
    let dirs = Dirs::new();
    let mut agent = local_agent(&server, &dirs, ToolCallMode::Auto);
    let (outcome, events) = turn(&mut agent, "Run the command: echo hello").await;
    let said = notices(&events);
    assert!(
        said.iter()
            .any(|n| n.contains("was cut") && n.contains("only whitespace")),
        "{said:?}"
    );
    assert_eq!(tool_calls(&events)[0].0, "run_shell");
    let requests = server.requests();
    let result = requests[1].messages()[3]["content"].as_str().unwrap();
    assert!(result.starts_with("hello\n"), "{result}");
    assert!(matches!(outcome, TurnOutcome::Done { ref text, .. } if text == "hello"));
    server.assert_protocol();
}

#[tokio::test]
async fn with_native_calls_padding_is_cut_and_the_answer_trimmed() {
    let server = MockServer::start(vec![endless_padding()]).await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    let (outcome, events) = turn(&mut agent, "Run the command: echo hello").await;
    let TurnOutcome::Done { text, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        text.starts_with("```json") && text.ends_with("```"),
        "{text:?}"
    );
    assert!(
        notices(&events)
            .iter()
            .any(|n| n.contains("only whitespace"))
    );
    // The model is told its answer was cut.
    let history = agent.history();
    let last = format!("{:?}", history.last().unwrap());
    assert!(last.contains("cut off here"), "{last}");
}

#[tokio::test]
async fn a_chanting_answer_is_cut_after_one_copy() {
    let sentence = "I will run the command now. ";
    let server = MockServer::start(vec![Reply::Repeat {
        head: Vec::new(),
        chunk: content_chunk(sentence),
    }])
    .await;
    let dirs = Dirs::new();
    let mut agent = agent_for(&server.base_url, &dirs);
    let (outcome, events) = turn(&mut agent, "Run it").await;
    assert!(
        matches!(outcome, TurnOutcome::Done { ref text, .. } if text == sentence.trim()),
        "{outcome:?}"
    );
    let said = notices(&events);
    assert!(
        said.iter().any(|n| n.contains("the same line repeated")),
        "{said:?}"
    );
}

async fn replay_client(
    recorded: &Recording,
    scale: f64,
    first_token: Duration,
) -> Result<agent::client::ModelResponse, ApiError> {
    let server = MockServer::start(vec![Reply::recorded(recorded, scale)]).await;
    let mut config = client_config(&server.base_url);
    config.first_token_timeout = first_token;
    config.max_attempts = 1;
    let client = ChatClient::new(config).unwrap();
    let mut on_piece = |_: Piece| {};
    let mut on_notice = |_: String| {};
    tokio::time::timeout(
        STEP_TIMEOUT,
        client.complete(
            &recorded.request,
            &mut on_piece,
            &mut on_notice,
            &CancellationToken::new(),
        ),
    )
    .await
    .expect("the request finished in time")
}

#[tokio::test]
async fn keep_alives_of_a_long_prompt_phase_are_waited_through_and_usage_arrives() {
    // 114 s of prompt processing with a `:` comment every 30 s, at 1/100.
    let recorded = fixture("text-calls-echo-0002");
    assert!(recorded.pieces[..3].iter().all(|(_, b)| b == ":\n\n"));
    let response = replay_client(&recorded, 0.01, Duration::from_secs(20))
        .await
        .expect("the answer arrives");
    assert_eq!(response.content, recorded.content());
    let usage = response.usage.expect("the usage chunk");
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (1420, 38, 1458)
    );
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn keep_alives_do_not_stand_in_for_the_first_token() {
    // At 1/50 the first data comes after 2.3 s, a keep-alive after 0.6 s.
    let recorded = fixture("text-calls-echo-0002");
    let error = replay_client(&recorded, 0.02, Duration::from_secs(1))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("no first token") && text.contains("keep-alives do not count"),
        "{text}"
    );
}

#[tokio::test]
async fn the_llamacpp_preset_runs_text_calls_and_says_so_in_json() {
    let (recorded, server) = echo_server("It printed hello.\n\n\n").await;
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args([
        "--profile",
        "llamacpp",
        "-p",
        "Run the command: echo hello",
        "--json",
    ]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = json_lines(&out);
    let of = |t: &str| lines.iter().filter(|l| l["type"] == t).collect::<Vec<_>>();
    assert!(
        of("notice")
            .iter()
            .any(|n| n["message"].as_str().unwrap().contains("recovered")),
        "{lines:?}"
    );
    assert_eq!(of("tool_call")[0]["name"], "run_shell");
    assert_eq!(of("final")[0]["text"], "It printed hello.", "trimmed");
    // The preset's lean request: compact tools, no forced call, a bound.
    let first = &server.requests()[0].body;
    assert!(first.get("tool_choice").is_none(), "{first}");
    assert!(first["max_tokens"].as_u64().is_some(), "{first}");
    let recorded_size = recorded.request.to_string().len();
    let lean_size = first.to_string().len();
    // Two more tools than when it was recorded, and still 40% smaller.
    assert!(
        lean_size * 10 < recorded_size * 7,
        "{lean_size} vs {recorded_size} bytes recorded"
    );
}

#[tokio::test]
async fn an_unexecuted_call_is_a_json_notice_under_a_hosted_preset() {
    let recorded = fixture("text-calls-echo-0002");
    let server = MockServer::start(vec![Reply::recorded(&recorded, FAST)]).await;
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "Run the command: echo hello", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = json_lines(&out);
    assert!(
        lines.iter().any(|l| l["type"] == "notice"
            && l["message"]
                .as_str()
                .unwrap()
                .contains("looks like a tool call")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l["type"] == "tool_call"));
}

#[tokio::test]
async fn the_repl_says_when_an_answer_was_an_unexecuted_call() {
    let recorded = fixture("text-calls-echo-0002");
    let server = MockServer::start(vec![Reply::recorded(&recorded, FAST)]).await;
    let dirs = Dirs::new();
    let tmux = crate::common::tmux::Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("Run the command: echo hello");
    // At the start of its line, so the terminal's wrapping cannot split it.
    tmux.wait_for("note: the model's answer looks like a tool call")
        .await;
    assert_eq!(
        server.requests().len(),
        1,
        "nothing ran, nothing was sent again"
    );
}

#[tokio::test]
async fn native_calls_are_left_alone_under_auto() {
    // The changed template's run: native calls, one response with prose
    // before its calls, then the final answer.
    let replies = [
        "native-calls-hello-0019",
        "native-calls-hello-0020",
        "native-calls-hello-0021",
    ]
    .map(|name| Reply::recorded(&fixture(name), FAST))
    .to_vec();
    let server = MockServer::start(replies).await;
    let dirs = Dirs::new();
    let mut agent = local_agent(&server, &dirs, ToolCallMode::Auto);
    let (outcome, events) = turn(&mut agent, "Create hello.py that prints hi, then run it.").await;
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");
    let names: Vec<String> = tool_calls(&events).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["run_shell", "write_file", "run_shell", "read_file"]);
    assert!(
        !notices(&events)
            .iter()
            .any(|n| n.contains("recovered") || n.contains("looks like")),
        "{:?}",
        notices(&events)
    );
    // The recorded ids travel back as the server sent them.
    let third = &server.requests()[2];
    assert!(
        third
            .tool_result("n9IubHqonRlj2hjwVHB0ulJUSZUiAEq9")
            .is_some()
    );
    server.assert_protocol();
}

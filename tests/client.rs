//! The streaming client against the mock server.

use std::time::Duration;

use agent::agent::{TurnError, TurnOutcome};
use agent::client::bounds::omitted_arguments;
use agent::client::{
    ApiError, ChatClient, ClientConfig, Limits, ModelResponse, Piece, StreamDecoder,
    argument_too_large, cut_note,
};
use agent::protocol::{Event, Message};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::mock::{
    Chunk, MockServer, Reply, Shape, chunks, done_after, text_events, tool_events,
};
use crate::common::{
    Dirs, Recorder, STEP_TIMEOUT, agent_command, agent_with, client_config, measured_agent_command,
    output, peak_rss_kb, read, stderr, stdout,
};

fn body() -> Value {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "stream": true})
}

async fn complete(client: &ChatClient) -> (Result<ModelResponse, ApiError>, String, Vec<String>) {
    let mut text = String::new();
    let mut notices = Vec::new();
    let result = {
        let mut on_piece = |p: Piece| {
            if let Piece::Text(t) = p {
                text.push_str(&t);
            }
        };
        let mut on_notice = |n: String| notices.push(n);
        tokio::time::timeout(
            STEP_TIMEOUT,
            client.complete(
                &body(),
                &mut on_piece,
                &mut on_notice,
                &CancellationToken::new(),
            ),
        )
        .await
        .expect("the request finished in time")
    };
    (result, text, notices)
}

fn client_for(server: &MockServer) -> ChatClient {
    ChatClient::new(client_config(&server.base_url)).unwrap()
}

#[tokio::test]
async fn every_tool_call_shape_assembles_the_same_calls() {
    let calls = [
        ("call_1", "run_shell", r#"{"command":"echo hello"}"#),
        ("call_2", "read_file", r#"{"path":"src/main.rs"}"#),
    ];
    for shape in [Shape::OpenAi, Shape::LlamaCpp, Shape::NoIndex] {
        let server =
            MockServer::start(vec![Reply::text_and_tools("Looking.", shape, &calls)]).await;
        let (result, text, _) = complete(&client_for(&server)).await;
        let response = result.unwrap();
        assert_eq!(text, "Looking.", "{shape:?}");
        let got: Vec<(&str, &str, &str)> = response
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(got, calls, "{shape:?}");
    }
}

#[tokio::test]
async fn sends_model_stream_flag_usage_option_and_bearer_key() {
    let server = MockServer::start(vec![Reply::text("ok")]).await;
    let mut config = client_config(&server.base_url);
    config.api_key = Some("sk-test-key".into());
    let client = ChatClient::new(config).unwrap();
    let (result, text, _) = complete(&client).await;
    assert_eq!(result.unwrap().usage.map(|u| u.total_tokens), Some(18));
    assert_eq!(text, "ok");
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer sk-test-key"));
    assert_eq!(req.body["model"], "mock-model");
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_says_to_set_the_key() {
    let server = MockServer::start(vec![Reply::status(
        401,
        r#"{"error":{"message":"Invalid API key sk-test-key"}}"#,
    )])
    .await;
    let mut config = client_config(&server.base_url);
    config.api_key = Some("sk-test-key".into());
    let (result, _, _) = complete(&ChatClient::new(config).unwrap()).await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("401") && message.contains("Invalid API key"),
        "{message}"
    );
    assert!(message.contains("AGENT_API_KEY"), "{message}");
    assert!(
        !message.contains("sk-test-key"),
        "the key leaked: {message}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let server = MockServer::start(vec![
        Reply::status(500, "boom"),
        Reply::status(503, "busy"),
        Reply::text("recovered"),
    ])
    .await;
    let (result, text, notices) = complete(&client_for(&server)).await;
    assert!(result.is_ok());
    assert_eq!(text, "recovered");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices[0].contains("server error 500") && notices[0].contains("(2/4)"),
        "{notices:?}"
    );
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let server = MockServer::start(vec![
        Reply::Status {
            code: 429,
            body: "{}".into(),
            headers: vec![("retry-after".into(), "0".into())],
        },
        Reply::text("fine"),
    ])
    .await;
    let (result, _, notices) = complete(&client_for(&server)).await;
    assert!(result.is_ok());
    assert!(
        notices[0].starts_with("rate limited; retrying in 0 ms"),
        "{notices:?}"
    );
}

#[tokio::test]
async fn permanent_server_error_fails_with_the_server_message() {
    let server = MockServer::start_with_fallback(
        vec![],
        Some(Reply::status(500, r#"{"error":{"message":"kaput"}}"#)),
    )
    .await;
    let (result, _, _) = complete(&client_for(&server)).await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("500") && message.contains("kaput"),
        "{message}"
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn not_found_points_at_base_url_and_model() {
    let server = MockServer::start(vec![Reply::status(404, "no such route")]).await;
    let message = complete(&client_for(&server))
        .await
        .0
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("AGENT_BASE_URL") && message.contains("no such route"),
        "{message}"
    );
}

#[tokio::test]
async fn connection_refused_is_reported_with_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let mut config = client_config(&url);
    config.max_attempts = 2;
    let message = complete(&ChatClient::new(config).unwrap())
        .await
        .0
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("could not reach the model API") && message.contains(&url),
        "{message}"
    );
}

#[tokio::test]
async fn truncated_stream_and_garbage_chunks_are_errors() {
    let mut events = tool_events(
        Shape::OpenAi,
        None,
        &[("c", "run_shell", r#"{"command":"ls"}"#)],
    );
    events.truncate(3); // cut in the middle of the tool call, no finish, no [DONE]
    let chunks = chunks(&events);
    let server = MockServer::start(vec![
        Reply::Sse(chunks),
        Reply::Sse(vec![Chunk {
            bytes: b"data: {\"choices\": [garbage\n\n".to_vec(),
            delay: Duration::ZERO,
        }]),
    ])
    .await;
    let mut config = client_config(&server.base_url);
    config.max_attempts = 1;
    let client = ChatClient::new(config).unwrap();
    let message = complete(&client).await.0.unwrap_err().to_string();
    assert!(
        message.contains("ended before the answer was complete"),
        "{message}"
    );
    let message = complete(&client).await.0.unwrap_err().to_string();
    assert!(message.contains("not valid JSON"), "{message}");
}

#[tokio::test]
async fn a_server_that_ignores_streaming_still_works() {
    let whole = json!({"choices": [{"message": {"role": "assistant", "content": "plain"}, "finish_reason": "stop"}]});
    let server = MockServer::start(vec![Reply::Status {
        code: 200,
        body: whole.to_string(),
        headers: vec![],
    }])
    .await;
    let (result, text, _) = complete(&client_for(&server)).await;
    assert_eq!(result.unwrap().content, "plain");
    assert_eq!(text, "plain");
}

#[tokio::test]
async fn a_silent_server_stalls_out() {
    let server = MockServer::start(vec![Reply::Hang]).await;
    let mut config = client_config(&server.base_url);
    config.first_token_timeout = Duration::from_millis(300);
    config.max_attempts = 1;
    let message = complete(&ChatClient::new(config).unwrap())
        .await
        .0
        .unwrap_err()
        .to_string();
    assert!(message.contains("stalled"), "{message}");
}

#[tokio::test]
async fn a_stall_between_chunks_is_caught() {
    let mut chunks = chunks(&text_events("partial answer")[..2]);
    chunks.push(done_after(Duration::from_secs(20)));
    let server = MockServer::start(vec![Reply::Sse(chunks)]).await;
    let mut config = client_config(&server.base_url);
    config.idle_timeout = Duration::from_millis(300);
    config.max_attempts = 1;
    let (result, text, _) = complete(&ChatClient::new(config).unwrap()).await;
    let message = result.unwrap_err().to_string();
    assert!(message.contains("in the middle of the answer"), "{message}");
    assert_eq!(text, "part", "text shown before the stall is kept");
}

/// A recorded llama.cpp-style stream with CRLF line endings, keep-alive
/// comments and multi-byte characters, decoded at every split point.
#[test]
fn decoder_gives_the_same_result_at_every_split_point() {
    let mut recorded = String::from(": keep-alive\r\n\r\n");
    let mut events = text_events("héllo wörld — 你好");
    events.pop(); // usage last is fine either way; keep the stream shorter
    for e in events.into_iter().chain(tool_events(
        Shape::LlamaCpp,
        None,
        &[("c1", "run_shell", r#"{"command":"echo ✓"}"#)],
    )) {
        recorded.push_str(&format!("data: {e}\r\n\r\n"));
    }
    recorded.push_str("data: [DONE]\r\n\r\n");
    let bytes = recorded.as_bytes();

    let decode = |parts: &[&[u8]]| {
        let mut d = StreamDecoder::new();
        let mut text = String::new();
        for p in parts {
            for piece in d.feed(p).unwrap() {
                if let Piece::Text(t) = piece {
                    text.push_str(&t);
                }
            }
        }
        let (rest, response) = d.finish().unwrap();
        assert!(rest.is_empty());
        (text, response)
    };
    let (text, whole) = decode(&[bytes]);
    assert_eq!(text, "héllo wörld — 你好");
    assert_eq!(whole.tool_calls[0].name, "run_shell");
    assert_eq!(whole.tool_calls[0].arguments, r#"{"command":"echo ✓"}"#);
    for i in 0..=bytes.len() {
        assert_eq!(
            decode(&[&bytes[..i], &bytes[i..]]),
            (text.clone(), whole.clone()),
            "split at {i}"
        );
    }
}

#[tokio::test]
async fn a_finished_stream_without_done_is_accepted() {
    let chunks = chunks(&text_events("no done marker"));
    let server = MockServer::start(vec![Reply::Sse(chunks)]).await;
    let (result, text, _) = complete(&client_for(&server)).await;
    assert_eq!(result.unwrap().finish_reason.as_deref(), Some("stop"));
    assert_eq!(text, "no done marker");
}

#[tokio::test]
async fn a_stalled_stream_is_aborted_and_retried() {
    let mut chunks = chunks(&text_events("half")[..2]);
    chunks.push(done_after(Duration::from_secs(20)));
    let server = MockServer::start(vec![
        Reply::Sse(chunks),
        Reply::Hang,
        Reply::text("whole answer"),
    ])
    .await;
    let mut config = client_config(&server.base_url);
    config.idle_timeout = Duration::from_millis(300);
    config.first_token_timeout = Duration::from_millis(300);
    let (result, text, notices) = complete(&ChatClient::new(config).unwrap()).await;
    assert_eq!(result.unwrap().content, "whole answer");
    assert_eq!(server.requests().len(), 3);
    assert!(
        notices[0].starts_with("the stream stalled")
            && notices[0].ends_with("the partial answer above is discarded"),
        "{notices:?}"
    );
    assert!(
        notices[1].starts_with("the stream stalled") && notices[1].contains("(3/4)"),
        "{notices:?}"
    );
    assert_eq!(
        text, "halfwhole answer",
        "the partial text was shown, then the full answer"
    );
}

#[tokio::test]
async fn a_stream_cut_mid_tool_call_or_a_garbage_chunk_is_retried_whole() {
    let mut events = tool_events(
        Shape::OpenAi,
        None,
        &[("c", "run_shell", r#"{"command":"ls"}"#)],
    );
    events.truncate(3);
    let cut = chunks(&events);
    let garbage = vec![Chunk {
        bytes: b"data: {\"choices\": [garbage\n\n".to_vec(),
        delay: Duration::ZERO,
    }];
    let server = MockServer::start(vec![
        Reply::Sse(cut),
        Reply::Sse(garbage),
        Reply::tools(Shape::OpenAi, &[("c", "run_shell", r#"{"command":"ls"}"#)]),
    ])
    .await;
    let (result, _, notices) = complete(&client_for(&server)).await;
    let response = result.unwrap();
    assert_eq!(
        response.tool_calls.len(),
        1,
        "one whole call, nothing duplicated"
    );
    assert_eq!(response.tool_calls[0].arguments, r#"{"command":"ls"}"#);
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices.iter().all(|n| n.starts_with("the stream broke")),
        "{notices:?}"
    );
}

// Bounds on what the server sends (issue 15): every one ends within its
// budget with a message that names the setting, and nothing shown is lost.

/// A client with small bounds, so that each one is reached quickly.
fn bounded(server: &MockServer, tune: impl FnOnce(&mut ClientConfig)) -> ChatClient {
    let mut config = client_config(&server.base_url);
    config.max_attempts = 1;
    tune(&mut config);
    ChatClient::new(config).unwrap()
}

fn caps(max_response_bytes: usize, max_tool_argument_bytes: usize) -> Limits {
    Limits {
        max_response_bytes,
        max_tool_argument_bytes,
        ..Limits::default()
    }
}

#[tokio::test]
async fn an_endless_stream_is_cut_at_the_response_cap_and_not_retried() {
    let server = MockServer::start_with_fallback(vec![], Some(Reply::endless_text("xyz"))).await;
    let client = bounded(&server, |c| {
        c.max_attempts = 4;
        c.limits = caps(10_000, 1000);
    });
    let (result, text, notices) = complete(&client).await;
    let error = result.unwrap_err();
    assert!(
        matches!(error, ApiError::ResponseTooLarge { cap: 10_000 }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("max_response_bytes") && message.contains("models.rhai"),
        "{message}"
    );
    assert_eq!(text.len(), 10_000, "every byte up to the cap is shown");
    assert!(notices.is_empty(), "not retried: {notices:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_endless_tool_call_is_cut_at_the_response_cap() {
    let mut head = chunks(&tool_events(
        Shape::OpenAi,
        None,
        &[("c", "write_file", r#"{"path":"a","content":""#)],
    ));
    head.truncate(4); // the call's opening deltas, no finish
    let endless = Chunk {
        bytes: format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "x".repeat(500)}}]}}]})
        )
        .into_bytes(),
        delay: Duration::ZERO,
    };
    let server = MockServer::start(vec![Reply::Repeat {
        head,
        chunk: endless,
    }])
    .await;
    let client = bounded(&server, |c| c.limits = caps(20_000, 1000));
    let error = complete(&client).await.0.unwrap_err();
    assert!(
        matches!(error, ApiError::ResponseTooLarge { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_comments_only_stream_times_out_like_a_silent_one() {
    for keep_alive in [
        ": keep-alive\n\n",
        "\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
    ] {
        let server = MockServer::start(vec![Reply::keep_alives(
            vec![],
            keep_alive,
            Duration::from_millis(50),
        )])
        .await;
        let client = bounded(&server, |c| {
            c.first_token_timeout = Duration::from_millis(400);
        });
        let message = complete(&client).await.0.unwrap_err().to_string();
        assert!(
            message.contains("stalled")
                && message.contains("no first token")
                && message.contains("first_token_timeout"),
            "{keep_alive:?}: {message}"
        );
    }
}

#[tokio::test]
async fn keep_alives_in_the_middle_of_an_answer_do_not_reset_the_idle_timer() {
    let head = chunks(&text_events("partial answer")[..2]);
    let server = MockServer::start(vec![Reply::keep_alives(
        head,
        ": keep-alive\n\n",
        Duration::from_millis(50),
    )])
    .await;
    let client = bounded(&server, |c| c.idle_timeout = Duration::from_millis(400));
    let (result, text, _) = complete(&client).await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("in the middle of the answer") && message.contains("idle_timeout"),
        "{message}"
    );
    assert_eq!(text, "part");
}

#[tokio::test]
async fn a_finished_answer_whose_done_never_comes_is_accepted() {
    // finish_reason and usage arrive, then only keep-alives: the answer is
    // whole, so it is kept rather than discarded as stalled.
    let server = MockServer::start(vec![Reply::keep_alives(
        chunks(&text_events("complete")),
        ": keep-alive\n\n",
        Duration::from_millis(50),
    )])
    .await;
    let client = bounded(&server, |c| c.idle_timeout = Duration::from_millis(300));
    let (result, text, _) = complete(&client).await;
    let response = result.unwrap();
    assert_eq!(response.content, "complete");
    assert_eq!(response.usage.map(|u| u.total_tokens), Some(18));
    assert_eq!(text, "complete");
}

#[tokio::test]
async fn a_json_response_that_stalls_after_its_headers_times_out() {
    let server = MockServer::start(vec![
        Reply::StalledJson {
            partial: String::new(),
        },
        Reply::StalledJson {
            partial: r#"{"choices": [{"message": {"content": "hal"#.into(),
        },
    ])
    .await;
    let client = bounded(&server, |c| {
        c.first_token_timeout = Duration::from_millis(400);
        c.idle_timeout = Duration::from_millis(400);
    });
    let message = complete(&client).await.0.unwrap_err().to_string();
    assert!(
        message.contains("stalled")
            && message.contains("JSON answer did not arrive")
            && message.contains("first_token_timeout"),
        "{message}"
    );
    let message = complete(&client).await.0.unwrap_err().to_string();
    assert!(
        message.contains("JSON answer stopped arriving") && message.contains("idle_timeout"),
        "{message}"
    );
}

#[tokio::test]
async fn a_json_response_over_the_cap_is_cut_and_keeps_what_was_shown() {
    let whole =
        json!({"choices": [{"message": {"content": "y".repeat(5000)}, "finish_reason": "stop"}]});
    let server = MockServer::start(vec![Reply::Status {
        code: 200,
        body: whole.to_string(),
        headers: vec![],
    }])
    .await;
    let client = bounded(&server, |c| c.limits = caps(1000, 1000));
    let (result, text, _) = complete(&client).await;
    assert!(
        matches!(result, Err(ApiError::ResponseTooLarge { cap: 1000 })),
        "{result:?}"
    );
    assert_eq!(text.len(), 1000);
}

#[tokio::test]
async fn an_overlong_line_is_reported_and_retried_not_dropped() {
    // One data line over the 64 KB line cap (the floor, as 2 × 1000 bytes
    // is smaller), carrying a tool call: dropping it would lose the call.
    let big = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "run_shell", "arguments": format!("{{\"command\":\"echo {}\"}}", "z".repeat(70_000))}}]}}]});
    let overlong = vec![Chunk {
        bytes: format!("data: {big}\n\n").into_bytes(),
        delay: Duration::ZERO,
    }];
    let server = MockServer::start(vec![
        Reply::Sse(overlong.clone()),
        Reply::tools(Shape::OpenAi, &[("c", "run_shell", r#"{"command":"ls"}"#)]),
        Reply::Sse(overlong),
    ])
    .await;
    let client = bounded(&server, |c| {
        c.max_attempts = 2;
        c.limits = caps(1000, 1000);
    });
    let (result, _, notices) = complete(&client).await;
    let response = result.unwrap();
    assert_eq!(response.tool_calls[0].arguments, r#"{"command":"ls"}"#);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("a line over 64 KB") && notices[0].contains("(2/2)"),
        "{notices:?}"
    );
    // When it keeps happening, the error says what to do.
    let client = bounded(&server, |c| c.limits = caps(1000, 1000));
    let error = complete(&client).await.0.unwrap_err();
    assert!(
        matches!(error, ApiError::LineTooLong { cap } if cap == 64 << 10),
        "{error:?}"
    );
    assert!(error.to_string().contains("max_response_bytes"), "{error}");
}

#[tokio::test]
async fn the_request_deadline_ends_an_answer_that_keeps_trickling() {
    // A piece every 50 ms, well inside the idle timeout, forever.
    let server = MockServer::start(vec![Reply::keep_alives(
        vec![],
        &format!("data: {}\n\n", text_events("abcd")[1]),
        Duration::from_millis(50),
    )])
    .await;
    let client = bounded(&server, |c| {
        c.idle_timeout = Duration::from_secs(5);
        c.request_timeout = Duration::from_millis(500);
    });
    let (result, text, _) = complete(&client).await;
    let error = result.unwrap_err();
    assert!(matches!(error, ApiError::TimedOut { .. }), "{error:?}");
    assert!(error.to_string().contains("request_timeout"), "{error}");
    assert!(text.starts_with("abcdabcd"), "{text}");
}

#[tokio::test]
async fn an_oversized_tool_argument_is_refused_and_the_history_keeps_a_placeholder() {
    let big = json!({"path": "big.txt", "content": "b".repeat(5000)}).to_string();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[
                ("c1", "write_file", &big),
                ("c2", "write_file", r#"{"path":"small.txt","content":"ok"}"#),
            ],
        ),
        Reply::text("Split it."),
    ])
    .await;
    let dirs = Dirs::new();
    let mut config = client_config(&server.base_url);
    config.limits = caps(1 << 20, 1000);
    let mut agent = agent_with(ChatClient::new(config).unwrap(), &dirs);
    let recorder = Recorder::default();
    let outcome = tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn("write it", &recorder, &CancellationToken::new()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(matches!(outcome, TurnOutcome::Done { .. }), "{outcome:?}");

    let second = &server.requests()[1];
    let refusal = second.tool_result("c1").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(refusal, argument_too_large("write_file", big.len(), 1000));
    let assistant = second
        .messages()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        omitted_arguments(big.len(), 1000),
        "the history keeps the placeholder, not 5000 bytes"
    );
    assert!(
        !second.body.to_string().contains(&"b".repeat(1001)),
        "the big argument is never re-sent"
    );
    assert!(!dirs.workspace.join("big.txt").exists(), "not run");
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("small.txt")).unwrap(),
        "ok",
        "the other call of the response still runs"
    );
    server.assert_protocol();
}

#[tokio::test]
async fn an_answer_cut_at_the_cap_is_kept_and_the_model_is_told() {
    let server = MockServer::start(vec![
        Reply::endless_text("abc"),
        Reply::text("Shorter now."),
    ])
    .await;
    let dirs = Dirs::new();
    let mut config = client_config(&server.base_url);
    config.limits = caps(3000, 1000);
    let mut agent = agent_with(ChatClient::new(config).unwrap(), &dirs);
    let recorder = Recorder::default();
    let cancel = CancellationToken::new();
    let result = tokio::time::timeout(STEP_TIMEOUT, agent.run_turn("go", &recorder, &cancel))
        .await
        .unwrap();
    assert!(
        matches!(
            result,
            Err(TurnError::Api(ApiError::ResponseTooLarge { cap: 3000 }))
        ),
        "{result:?}"
    );
    let shown: String = recorder
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::TextDelta(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(shown.len(), 3000);
    let note = cut_note(&ApiError::ResponseTooLarge { cap: 3000 }).unwrap();
    match agent.history().last() {
        Some(Message::Assistant {
            content: Some(kept),
            tool_calls,
            ..
        }) => {
            assert_eq!(*kept, format!("{shown}{note}"));
            assert!(tool_calls.is_empty());
        }
        other => panic!("the cut answer is not in the history: {other:?}"),
    }
    // The next request carries it, so the model knows.
    tokio::time::timeout(STEP_TIMEOUT, agent.run_turn("again", &recorder, &cancel))
        .await
        .unwrap()
        .unwrap();
    let sent = server.requests()[1].body.to_string();
    assert!(sent.contains("this answer was cut off here"), "{sent:.300}");
    server.assert_protocol();
}

/// The default models.rhai with its `client` map replaced by `client`.
fn models_with_client(dirs: &Dirs, client: &str) {
    let default =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/models.rhai"))
            .unwrap();
    let start = default.find("    client: #{").unwrap();
    let end = start + default[start..].find("\n    },\n").unwrap() + "\n    },\n".len();
    let script = format!(
        "{}    client: #{{ {client} }},\n{}",
        &default[..start],
        &default[end..]
    );
    std::fs::write(dirs.config.join("models.rhai"), script).unwrap();
}

#[tokio::test]
async fn one_shot_an_endless_stream_exits_3_within_the_default_cap_and_under_100_mb() {
    // The default 4 MB cap, in chunks of 1 KB of text.
    let server = MockServer::start(vec![Reply::endless_text(&"w".repeat(1024))]).await;
    let dirs = Dirs::new();
    let mut cmd = measured_agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "write forever"]);
    let out = output(cmd).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("passed 4 MB") && err.contains("max_response_bytes"),
        "{err}"
    );
    let peak = peak_rss_kb(&err);
    eprintln!("peak RSS of agent -p on an endless text stream: {peak} KB");
    assert!(peak < 100 * 1024, "peak RSS {peak} KB");
    // The cut answer is in the transcript, marked, and nothing was lost.
    let sessions = dirs.data.join("sessions");
    let transcript = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| read(&e.unwrap().path()))
        .collect::<String>();
    assert!(transcript.contains("this answer was cut off here"));
    assert!(transcript.contains(&"w".repeat(4096)));
}

#[tokio::test]
async fn one_shot_an_endless_tool_argument_exits_3_under_100_mb() {
    // The arguments of one call never end: past 1 MB they are no longer
    // kept, and at 4 MB the response is cut.
    let opening = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\":\"a\",\"content\":\""}}]}}]});
    let more = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "v".repeat(1024)}}]}}]});
    let server = MockServer::start(vec![Reply::Repeat {
        head: chunks(&[opening]),
        chunk: chunks(&[more]).remove(0),
    }])
    .await;
    let dirs = Dirs::new();
    let mut cmd = measured_agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "write a big file"]);
    let out = output(cmd).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("passed 4 MB"), "{err}");
    let peak = peak_rss_kb(&err);
    eprintln!("peak RSS of agent -p on an endless tool argument: {peak} KB");
    assert!(peak < 100 * 1024, "peak RSS {peak} KB");
    assert!(!dirs.workspace.join("a").exists(), "nothing ran");
}

#[tokio::test]
async fn one_shot_one_line_at_the_line_cap_stays_under_100_mb() {
    // The most one line may hold at the default caps (8 MB), all of it
    // text: the costliest single event there is.
    let n = (8 << 20) - 200;
    let line = json!({"choices": [{"index": 0, "delta": {"content": "x".repeat(n)}}]});
    let server = MockServer::start(vec![Reply::Sse(vec![Chunk {
        bytes: format!("data: {line}\n\n").into_bytes(),
        delay: Duration::ZERO,
    }])])
    .await;
    let dirs = Dirs::new();
    let mut cmd = measured_agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hello"]);
    let out = output(cmd).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("passed 4 MB"), "{err}");
    let peak = peak_rss_kb(&err);
    eprintln!("peak RSS of agent -p on one 8 MB line: {peak} KB");
    assert!(peak < 100 * 1024, "peak RSS {peak} KB");
}

#[tokio::test]
async fn one_shot_a_stalled_json_response_exits_3() {
    let server = MockServer::start(vec![Reply::StalledJson {
        partial: "{\"choices\": [".into(),
    }])
    .await;
    let dirs = Dirs::new();
    models_with_client(
        &dirs,
        "max_attempts: 1, first_token_timeout: 1, idle_timeout: 1",
    );
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hello"]);
    let out = output(cmd).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("stalled") && err.contains("JSON answer stopped arriving"),
        "{err}"
    );
}

#[tokio::test]
async fn one_shot_a_comments_only_stream_exits_3_after_its_retries() {
    let server = MockServer::start_with_fallback(
        vec![],
        Some(Reply::keep_alives(
            vec![],
            ": keep-alive\n\n",
            Duration::from_millis(100),
        )),
    )
    .await;
    let dirs = Dirs::new();
    models_with_client(&dirs, "max_attempts: 2, first_token_timeout: 1");
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "hello", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "notice" && l["message"].as_str().unwrap().contains("(2/2)")),
        "{lines:?}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["exit_code"], 3);
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("no first token within 1 s"),
        "{last}"
    );
    assert_eq!(server.requests().len(), 2);
}

//! The streaming client against the mock server.

use std::time::Duration;

use agent::client::{ApiError, ChatClient, ModelResponse, Piece, StreamDecoder};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::mock::{
    Chunk, MockServer, Reply, Shape, chunks, done_after, text_events, tool_events,
};
use crate::common::{STEP_TIMEOUT, client_config};

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

//! A scripted OpenAI-compatible server on 127.0.0.1, port 0.
//!
//! It serves scripted replies in order (then a fallback, if one is set),
//! records every request body, can hold chunks back with delays, and checks
//! the tool-call protocol of every request it receives: each tool call in
//! the history must be answered by exactly one `tool` message.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One piece of a streamed body, sent after `delay`.
#[derive(Clone, Debug)]
pub struct Chunk {
    pub bytes: Vec<u8>,
    pub delay: Duration,
}

/// What the server answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// `200 text/event-stream` with these chunks, then the connection closes.
    Sse(Vec<Chunk>),
    /// Any status with a body and extra headers.
    Status {
        code: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// Accept the request and never answer (until the test ends).
    Hang,
    /// `200 text/event-stream`: `head`, then `chunk` again and again (each
    /// after its delay) until the client hangs up. An endless answer, or
    /// endless keep-alives.
    Repeat { head: Vec<Chunk>, chunk: Chunk },
    /// `200 application/json` headers promising a body, then `partial` of
    /// it, then silence (until the test ends).
    StalledJson { partial: String },
}

impl Reply {
    /// A stream made of these SSE `data` payloads, one chunk each, ending
    /// with `[DONE]`.
    pub fn sse(events: Vec<Value>) -> Reply {
        let mut chunks = chunks(&events);
        chunks.push(done_after(Duration::ZERO));
        Reply::Sse(chunks)
    }

    /// A plain-text answer streamed in small pieces.
    pub fn text(text: &str) -> Reply {
        Reply::sse(text_events(text))
    }

    /// A response asking for tool calls, in the given server shape.
    pub fn tools(shape: Shape, calls: &[(&str, &str, &str)]) -> Reply {
        Reply::sse(tool_events(shape, None, calls))
    }

    /// Text and tool calls in one response.
    pub fn text_and_tools(text: &str, shape: Shape, calls: &[(&str, &str, &str)]) -> Reply {
        Reply::sse(tool_events(shape, Some(text), calls))
    }

    /// An answer that never ends: `text` in every chunk, without delay.
    pub fn endless_text(text: &str) -> Reply {
        Reply::Repeat {
            head: chunks(&[delta(json!({"role": "assistant", "content": ""}))]),
            chunk: chunks(&[delta(json!({"content": text}))]).remove(0),
        }
    }

    /// After `head`, only `keep_alive` (a comment, an empty chunk...) every
    /// `every`, forever.
    pub fn keep_alives(head: Vec<Chunk>, keep_alive: &str, every: Duration) -> Reply {
        Reply::Repeat {
            head,
            chunk: Chunk {
                bytes: keep_alive.as_bytes().to_vec(),
                delay: every,
            },
        }
    }

    /// A stream recorded from a real server (`tests/fixtures/...`), piece
    /// by piece with its timing multiplied by `scale` (0.01: a 100 s prompt
    /// phase takes one second).
    pub fn recorded(fixture: &Recording, scale: f64) -> Reply {
        Reply::Sse(fixture.chunks(scale))
    }

    pub fn status(code: u16, body: &str) -> Reply {
        Reply::Status {
            code,
            body: body.to_string(),
            headers: Vec::new(),
        }
    }
}

/// A request and its response recorded from a real server through a
/// logging proxy (see tests/fixtures/llama-server/README.md).
#[derive(Clone, Debug)]
pub struct Recording {
    /// What the agent sent.
    pub request: Value,
    /// Seconds since the request was sent, and the bytes that arrived.
    pub pieces: Vec<(f64, String)>,
}

impl Recording {
    /// Loads `tests/fixtures/NAME`.
    pub fn load(name: &str) -> Recording {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let v: Value = serde_json::from_str(&text).expect("a recording is JSON");
        let pieces = v["response_pieces"]
            .as_array()
            .expect("response_pieces")
            .iter()
            .map(|p| {
                (
                    p[0].as_f64().expect("seconds"),
                    p[1].as_str().expect("bytes").to_string(),
                )
            })
            .collect();
        Recording {
            request: v["request_body"].clone(),
            pieces,
        }
    }

    /// The pieces as chunks, each after its recorded gap times `scale`.
    pub fn chunks(&self, scale: f64) -> Vec<Chunk> {
        let mut last = 0.0;
        self.pieces
            .iter()
            .map(|(at, bytes)| {
                let gap = ((at - last) * scale).max(0.0);
                last = *at;
                Chunk {
                    bytes: bytes.as_bytes().to_vec(),
                    delay: Duration::from_secs_f64(gap),
                }
            })
            .collect()
    }

    /// The answer text the stream carries.
    pub fn content(&self) -> String {
        let all: String = self.pieces.iter().map(|(_, b)| b.as_str()).collect();
        all.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect()
    }
}

/// A content delta as the mock sends it, for hand-made streams.
pub fn content_chunk(text: &str) -> Chunk {
    chunks(&[delta(json!({"content": text}))]).remove(0)
}

/// SSE `data` payloads as chunks sent at once, without `[DONE]`: for
/// streams a test cuts short, stalls or finishes by hand.
pub fn chunks(events: &[Value]) -> Vec<Chunk> {
    events
        .iter()
        .map(|e| Chunk {
            bytes: format!("data: {e}\n\n").into_bytes(),
            delay: Duration::ZERO,
        })
        .collect()
}

/// The `[DONE]` line, sent after `delay` (a long delay makes a stall).
pub fn done_after(delay: Duration) -> Chunk {
    Chunk {
        bytes: b"data: [DONE]\n\n".to_vec(),
        delay,
    }
}

/// How a server streams tool-call deltas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `id` and `name` only in the first delta of each call.
    OpenAi,
    /// `id` and `name` repeated in every delta.
    LlamaCpp,
    /// Like OpenAI, without `index`.
    NoIndex,
}

fn delta(d: Value) -> Value {
    json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"id": "chatcmpl-mock", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn usage() -> Value {
    json!({"id": "chatcmpl-mock", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
}

/// The events of a streamed text answer.
pub fn text_events(text: &str) -> Vec<Value> {
    let mut events = vec![delta(json!({"role": "assistant", "content": ""}))];
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(4) {
        events.push(delta(json!({"content": piece.iter().collect::<String>()})));
    }
    events.push(finish("stop"));
    events.push(usage());
    events
}

/// The events of a tool-call response.
pub fn tool_events(shape: Shape, text: Option<&str>, calls: &[(&str, &str, &str)]) -> Vec<Value> {
    let mut events = vec![delta(json!({"role": "assistant"}))];
    if let Some(text) = text {
        events.push(delta(json!({"content": text})));
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let fragments = split_in_three(args);
        for (n, fragment) in fragments.iter().enumerate() {
            let mut call = json!({"function": {"arguments": fragment}});
            if shape != Shape::NoIndex {
                call["index"] = json!(i);
            }
            if n == 0 || shape == Shape::LlamaCpp {
                call["id"] = json!(id);
                call["type"] = json!("function");
                call["function"]["name"] = json!(name);
            }
            events.push(delta(json!({"tool_calls": [call]})));
        }
    }
    events.push(finish("tool_calls"));
    events.push(usage());
    events
}

fn split_in_three(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let third = chars.len().div_ceil(3).max(1);
    let mut parts: Vec<String> = chars.chunks(third).map(|c| c.iter().collect()).collect();
    if parts.is_empty() {
        parts.push(String::new());
    }
    parts
}

/// One recorded request.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn messages(&self) -> &[Value] {
        self.body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The `tool` message answering `id`, if any.
    pub fn tool_result(&self, id: &str) -> Option<&Value> {
        self.messages()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    fallback: Option<Reply>,
    requests: Vec<Recorded>,
    violations: Vec<String>,
}

/// The running server. Dropped at the end of the test.
pub struct MockServer {
    pub base_url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// Starts a server that answers with `replies` in order.
    pub async fn start(replies: Vec<Reply>) -> MockServer {
        Self::start_with_fallback(replies, None).await
    }

    /// Like [`MockServer::start`], answering `fallback` once the scripted
    /// replies run out (for models that loop forever).
    pub async fn start_with_fallback(replies: Vec<Reply>, fallback: Option<Reply>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State {
            replies: replies.into(),
            fallback,
            ..State::default()
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    break;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, state).await;
                });
            }
        });
        MockServer {
            base_url: format!("http://{addr}/v1"),
            state,
            task,
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().expect("mock state").requests.clone()
    }

    /// Panics if any request broke the tool-call protocol.
    pub fn assert_protocol(&self) {
        let violations = self.state.lock().expect("mock state").violations.clone();
        assert!(
            violations.is_empty(),
            "protocol violations: {violations:#?}"
        );
    }
}

async fn serve(mut socket: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let header_end = loop {
        let n = socket.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = socket.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body: Value = serde_json::from_slice(&buf[header_end..]).unwrap_or(Value::Null);
    let reply = {
        let mut state = state.lock().expect("mock state");
        if let Err(v) = check_tool_protocol(&body) {
            let n = state.requests.len() + 1;
            state.violations.push(format!("request {n}: {v}"));
        }
        state.requests.push(Recorded {
            path,
            headers,
            body,
        });
        state.replies.pop_front().or_else(|| state.fallback.clone())
    };
    match reply {
        Some(Reply::Sse(chunks)) => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n")
                .await?;
            for chunk in chunks {
                if !chunk.delay.is_zero() {
                    tokio::time::sleep(chunk.delay).await;
                }
                socket.write_all(&chunk.bytes).await?;
                socket.flush().await?;
            }
        }
        Some(Reply::Status {
            code,
            body,
            headers,
        }) => {
            let mut head = format!(
                "HTTP/1.1 {code} Mock\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
        }
        Some(Reply::Hang) => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Some(Reply::Repeat { head, chunk }) => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n")
                .await?;
            for c in head {
                socket.write_all(&c.bytes).await?;
            }
            // Ends when the client hangs up and the write fails.
            loop {
                if !chunk.delay.is_zero() {
                    tokio::time::sleep(chunk.delay).await;
                }
                socket.write_all(&chunk.bytes).await?;
            }
        }
        Some(Reply::StalledJson { partial }) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                partial.len() + 1000
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(partial.as_bytes()).await?;
            socket.flush().await?;
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        None => {
            let body = r#"{"error":{"message":"mock: no scripted reply left"}}"#;
            let head = format!(
                "HTTP/1.1 500 Mock\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
        }
    }
    socket.shutdown().await?;
    Ok(())
}

/// Every assistant tool call is answered by exactly one later `tool`
/// message, and every `tool` message answers an earlier call.
pub fn check_tool_protocol(body: &Value) -> Result<(), String> {
    let Some(messages) = body["messages"].as_array() else {
        return Err("request has no messages array".into());
    };
    let mut open: Vec<String> = Vec::new();
    let mut answered: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("assistant") => {
                if !open.is_empty() {
                    return Err(format!(
                        "message {i}: assistant message while calls {open:?} are unanswered"
                    ));
                }
                // Ids need only be unique within one response.
                answered.clear();
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    let id = call["id"].as_str().unwrap_or("").to_string();
                    if id.is_empty() {
                        return Err(format!("message {i}: tool call without id"));
                    }
                    open.push(id);
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("").to_string();
                if answered.contains(&id) {
                    return Err(format!("message {i}: tool call {id} answered twice"));
                }
                let Some(pos) = open.iter().position(|o| *o == id) else {
                    return Err(format!("message {i}: tool message for unknown call {id:?}"));
                };
                open.remove(pos);
                answered.push(id);
            }
            Some("user") | Some("system") => {
                if !open.is_empty() {
                    return Err(format!(
                        "message {i}: {} message while calls {open:?} are unanswered",
                        m["role"]
                    ));
                }
            }
            other => return Err(format!("message {i}: unexpected role {other:?}")),
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "calls {open:?} are unanswered at the end of the request"
        ))
    }
}

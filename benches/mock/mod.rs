//! A zero-latency scripted OpenAI-compatible server for the end-to-end
//! benchmarks, on 127.0.0.1 port 0.
//!
//! The tests have a richer mock (`tests/common/mock.rs`), but bench targets
//! cannot import test code, and this one has a different job: answer as
//! fast as the loopback allows and note when each request arrives. It runs
//! on plain threads (no async runtime to share the two cores with the
//! agent), keeps connections alive like a real API, sends each scripted
//! reply in one write (a chunked `text/event-stream`, one HTTP chunk per
//! SSE event), and parses nothing in the timed path: request bodies are
//! kept as bytes and checked after the run.
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds ([`now_ns`]), the clock every
//! process on the machine shares, so they compare with the launch time the
//! bench's launcher process records.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{Value, json};

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// When the request's first bytes were read.
    pub first_byte_ns: u64,
    /// When its whole body had been read: the request has reached the server.
    pub arrived_ns: u64,
    /// When the reply had been written to the socket.
    pub replied_ns: u64,
    pub body: Vec<u8>,
}

#[derive(Default)]
struct State {
    /// The reply to request `i` is `replies[i]`.
    replies: Vec<Vec<u8>>,
    arrivals: Vec<Arrival>,
}

/// The running server. Its threads stop with the process.
pub struct Mock {
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

impl Mock {
    pub fn start() -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let state = shared.clone();
                thread::spawn(move || {
                    let _ = serve(stream, &state);
                });
            }
        });
        Mock {
            base_url: format!("http://{addr}/v1"),
            state,
        }
    }

    /// Scripts the replies of the next run (SSE bodies from [`tool_call`]
    /// and [`answer`]) and forgets the last run's requests.
    pub fn script(&self, replies: Vec<Vec<u8>>) {
        let mut state = self.state.lock().expect("mock state");
        state.replies = replies;
        state.arrivals.clear();
    }

    /// The requests of this run so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state.lock().expect("mock state").arrivals.clone()
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::with_capacity(1 << 16, stream.try_clone()?);
    let mut writer = stream;
    let mut line = String::new();
    loop {
        // Request line; a closed connection ends the thread.
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let first_byte_ns = now_ns();
        let mut length = 0usize;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let arrived_ns = now_ns();
        let reply = {
            let state = state.lock().expect("mock state");
            state.replies.get(state.arrivals.len()).cloned()
        };
        let response = match reply {
            Some(sse) => sse_response(&sse),
            None => {
                // Unscripted: a 400, which the client does not retry, so a
                // bench that asks too much fails at once.
                let text = r#"{"error":{"message":"bench mock: no scripted reply left"}}"#;
                format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                    text.len()
                )
                .into_bytes()
            }
        };
        writer.write_all(&response)?;
        let replied_ns = now_ns();
        state.lock().expect("mock state").arrivals.push(Arrival {
            first_byte_ns,
            arrived_ns,
            replied_ns,
            body,
        });
    }
}

/// A whole HTTP response carrying `events` (SSE frames, each
/// `data: ...\n\n`), one HTTP chunk per frame, as streaming servers send.
fn sse_response(events: &[u8]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    let mut rest = events;
    while !rest.is_empty() {
        let end = memchr::memmem::find(rest, b"\n\n").map_or(rest.len(), |i| i + 2);
        out.extend_from_slice(format!("{end:x}\r\n").as_bytes());
        out.extend_from_slice(&rest[..end]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[end..];
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

fn frame(out: &mut Vec<u8>, chunk: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(chunk.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

fn delta(out: &mut Vec<u8>, delta: Value, finish: Option<&str>) {
    frame(
        out,
        &json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1764670000,
            "model": "mock-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    );
}

fn end(out: &mut Vec<u8>) {
    frame(
        out,
        &json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1764670000,
            "model": "mock-model", "choices": [],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}),
    );
    out.extend_from_slice(b"data: [DONE]\n\n");
}

/// The SSE body of a response asking for one call of `tool` with
/// `arguments` (a JSON object), the arguments streamed in three fragments
/// as OpenAI does.
pub fn tool_call(id: &str, tool: &str, arguments: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    delta(
        &mut out,
        json!({"role": "assistant", "content": null}),
        None,
    );
    let arguments = arguments.to_string();
    let third = arguments.len().div_ceil(3);
    for (i, fragment) in arguments.as_bytes().chunks(third).enumerate() {
        let fragment = std::str::from_utf8(fragment).expect("ASCII arguments");
        let mut call = json!({"index": 0, "function": {"arguments": fragment}});
        if i == 0 {
            call["id"] = json!(id);
            call["type"] = json!("function");
            call["function"]["name"] = json!(tool);
        }
        delta(&mut out, json!({ "tool_calls": [call] }), None);
    }
    delta(&mut out, json!({}), Some("tool_calls"));
    end(&mut out);
    out
}

/// The SSE body of a final text answer, a few words per chunk.
pub fn answer(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    delta(&mut out, json!({"role": "assistant", "content": ""}), None);
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    for piece in words.chunks(2) {
        delta(&mut out, json!({ "content": piece.concat() }), None);
    }
    delta(&mut out, json!({}), Some("stop"));
    end(&mut out);
    out
}

/// Checks a request body the agent sent: valid JSON whose every tool call
/// is answered by one `tool` message. Returns its message count.
pub fn check_request(body: &[u8]) -> Result<usize, String> {
    let body: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let messages = body["messages"]
        .as_array()
        .ok_or("the request has no messages")?;
    let mut open: Vec<&str> = Vec::new();
    for m in messages {
        match m["role"].as_str() {
            Some("assistant") => {
                if !open.is_empty() {
                    return Err(format!(
                        "calls {open:?} unanswered before an assistant message"
                    ));
                }
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    open.push(call["id"].as_str().unwrap_or(""));
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                let i = open
                    .iter()
                    .position(|o| *o == id)
                    .ok_or_else(|| format!("a tool message answers unknown call {id:?}"))?;
                open.remove(i);
            }
            _ => {}
        }
    }
    if open.is_empty() {
        Ok(messages.len())
    } else {
        Err(format!("calls {open:?} unanswered"))
    }
}

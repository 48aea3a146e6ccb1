//! What the Rust core costs per model call: decoding the streamed answer
//! (SSE framing + chunk assembly), building the next request body, and the
//! watchdog's workspace identity after a shell call (a walk of the tree, no
//! git). Run
//! with `cargo bench --bench core` (or `bench/run.sh`); the numbers and the
//! machine are in `BENCHMARKS.md`.
//!
//! The stream is synthetic but shaped like a recorded DeepSeek/OpenAI
//! stream: every chunk carries the usual `id`, `object`, `created`, `model`
//! and `system_fingerprint` fields; text arrives a word or two per chunk;
//! tool-call arguments arrive in fragments of a few characters.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark reports its numbers on stdout.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod common;

use std::hint::black_box;
use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use agent::client::sse::SseParser;
use agent::client::wire;
use agent::client::{Limits, StreamDecoder};
use agent::protocol::{Message, ToolCall, ToolStatus};
use agent::script::ScriptHost;
use agent::setup;
use common::{Bench, Target};
use serde_json::{Map, Value, json};

/// Total size of the recorded stream.
const STREAM_BYTES: usize = 32 << 20;
/// Network read size fed to the decoder.
const SLICE: usize = 16 << 10;
/// Messages in the request-body history.
const HISTORY_MESSAGES: usize = 500;

fn main() {
    let mut b = Bench::new("core: streaming and requests");
    sse(&mut b);
    request(&mut b);
    workspace(&mut b);
    b.finish();
}

/// A small deterministic generator, so every run decodes the same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Tokens as models stream them: leading spaces, punctuation, code,
/// newlines, quotes and some non-ASCII text.
const TOKENS: &[&str] = &[
    " the",
    " function",
    " returns",
    " a",
    " `Result`",
    ",",
    " and",
    " we",
    " need",
    " to",
    " handle",
    " the",
    " error",
    ".\n\n",
    " Let",
    " me",
    " check",
    " `src/lib.rs`",
    " first",
    ":\n```rust\n",
    "fn",
    " main",
    "()",
    " {",
    "\n    ",
    "println!(\"",
    "hello",
    "\");",
    "\n}\n```",
    " — ",
    " héllo",
    " 世界",
    " test",
    "s",
    " pass",
];

const CHUNK_HEAD: &str = r#"{"id":"chatcmpl-8f2c1a9e-4b7d-4e1a-9c3f-2d6b5a7e8c10","object":"chat.completion.chunk","created":1764670000,"model":"deepseek-chat","system_fingerprint":"fp_3a5770e1b4_prod0820_fp8_kvcache","choices":[{"index":0,"delta":"#;

fn chunk(out: &mut Vec<u8>, delta: &Value, finish: Option<&str>) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(CHUNK_HEAD.as_bytes());
    out.extend_from_slice(delta.to_string().as_bytes());
    out.extend_from_slice(br#","logprobs":null,"finish_reason":"#);
    out.extend_from_slice(json!(finish).to_string().as_bytes());
    out.extend_from_slice(b"}]}\n\n");
}

/// Counts of what a stream holds, for the report.
#[derive(Default)]
struct Mix {
    responses: usize,
    text_chunks: usize,
    call_chunks: usize,
    other_chunks: usize,
}

/// Appends one response: text, then three tool calls streamed in
/// fragments, the finish chunk, a usage chunk and `[DONE]`.
fn response(out: &mut Vec<u8>, rng: &mut Rng, mix: &mut Mix, r: usize) {
    chunk(out, &json!({"role": "assistant", "content": ""}), None);
    for _ in 0..1200 {
        let mut text = String::from(TOKENS[rng.below(TOKENS.len())]);
        if rng.below(3) == 0 {
            text.push_str(TOKENS[rng.below(TOKENS.len())]);
        }
        chunk(out, &json!({ "content": text }), None);
        mix.text_chunks += 1;
    }
    for c in 0..3 {
        let first = json!({"tool_calls": [{"index": c, "id": format!("call_{r}_{c}"), "type": "function",
            "function": {"name": "write_file", "arguments": ""}}]});
        chunk(out, &first, None);
        let content: String = (0..300).map(|_| TOKENS[rng.below(TOKENS.len())]).collect();
        let arguments =
            json!({"path": format!("src/generated/file_{r}_{c}.rs"), "content": content})
                .to_string();
        let chars: Vec<char> = arguments.chars().collect();
        let mut at = 0;
        while at < chars.len() {
            let end = (at + 3 + rng.below(8)).min(chars.len());
            let fragment: String = chars[at..end].iter().collect();
            chunk(
                out,
                &json!({"tool_calls": [{"index": c, "function": {"arguments": fragment}}]}),
                None,
            );
            mix.call_chunks += 1;
            at = end;
        }
    }
    chunk(out, &json!({}), Some("tool_calls"));
    out.extend_from_slice(br#"data: {"id":"chatcmpl-8f2c1a9e-4b7d-4e1a-9c3f-2d6b5a7e8c10","object":"chat.completion.chunk","created":1764670000,"model":"deepseek-chat","choices":[],"usage":{"prompt_tokens":18211,"completion_tokens":2710,"total_tokens":20921,"prompt_cache_hit_tokens":17920}}"#);
    out.extend_from_slice(b"\n\ndata: [DONE]\n\n");
    mix.other_chunks += 6;
    mix.responses += 1;
}

/// The whole recording and where each response starts and ends.
fn recording() -> (Vec<u8>, Vec<Range<usize>>, Mix) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::with_capacity(STREAM_BYTES + (1 << 20));
    let mut ranges = Vec::new();
    let mut mix = Mix::default();
    while out.len() < STREAM_BYTES {
        let start = out.len();
        response(&mut out, &mut rng, &mut mix, ranges.len());
        ranges.push(start..out.len());
    }
    (out, ranges, mix)
}

/// Decodes every response as the client does: a fresh decoder per
/// response, fed in network-sized slices. Returns the tool calls seen.
fn decode_all(stream: &[u8], ranges: &[Range<usize>], limits: Limits) -> usize {
    let mut calls = 0;
    for range in ranges {
        let mut decoder = StreamDecoder::with_limits(limits);
        for slice in stream[range.clone()].chunks(SLICE) {
            black_box(decoder.feed(slice).unwrap());
            if decoder.done() {
                break;
            }
        }
        let (pieces, response) = decoder.finish().unwrap();
        black_box(pieces);
        calls += response.tool_calls.len();
    }
    calls
}

fn sse(b: &mut Bench) {
    let (stream, ranges, mix) = recording();
    println!(
        "(stream: {:.1} MB, {} responses; {} text chunks, {} tool-call chunks, {} others; fed in {} KB slices)",
        stream.len() as f64 / 1e6,
        mix.responses,
        mix.text_chunks,
        mix.call_chunks,
        mix.other_chunks,
        SLICE >> 10
    );
    assert_eq!(
        decode_all(&stream, &ranges, Limits::default()),
        3 * ranges.len()
    );
    b.throughput(
        "sse: StreamDecoder::feed + finish (framing + assembly)",
        Some(Target::AboveMbps(200.0)),
        stream.len(),
        (1, 7),
        || decode_all(&stream, &ranges, Limits::default()),
    );
    // The padding and chanting watch (client::repetition) switched off.
    let unwatched = Limits {
        max_blank_run: 0,
        max_repeated_run: 0,
        ..Limits::default()
    };
    b.throughput(
        "sse:   the same without the repetition watch",
        None,
        stream.len(),
        (1, 7),
        || decode_all(&stream, &ranges, unwatched),
    );
    b.throughput(
        "sse:   of which SseParser::feed (framing only)",
        None,
        stream.len(),
        (1, 7),
        || {
            let mut events = Vec::new();
            let mut n = 0;
            for range in &ranges {
                let mut parser = SseParser::new();
                for slice in stream[range.clone()].chunks(SLICE) {
                    parser.feed(slice, &mut events);
                    n += events.len();
                    events.clear();
                }
            }
            n
        },
    );
}

/// A 500-message session: the system prompt, the task, then turns of an
/// assistant message with one tool call and the tool's result. Results
/// are file contents, test output and short confirmations (2 KB on
/// average); some calls write whole files.
fn history(rng: &mut Rng, system: String) -> Vec<Message> {
    let mut history = vec![
        Message::System { content: system },
        Message::user(
            "The integration tests fail since the last refactor. Find out why and fix it; keep the public API as it is.",
        ),
    ];
    let mut i = 0;
    while history.len() < HISTORY_MESSAGES {
        let code: String = (0..40 + rng.below(80))
            .map(|l| format!("    let value_{l} = compute({i}, {l}).context(\"step {l}\")?;\n"))
            .collect();
        let (name, arguments, output) = match i % 4 {
            0 => (
                "read_file",
                json!({"path": format!("src/module_{i}.rs")}),
                code,
            ),
            1 => (
                "run_shell",
                json!({"command": "cargo test --all-targets"}),
                format!(
                    "running 42 tests\n{}test result: FAILED. 41 passed; 1 failed; finished in 2.31s\n",
                    "test module::case ... ok\n".repeat(20 + rng.below(20))
                ),
            ),
            2 => (
                "write_file",
                json!({"path": format!("src/module_{i}.rs"), "content": code}),
                format!("Wrote {} bytes to src/module_{i}.rs", code.len()),
            ),
            _ => (
                "edit_file",
                json!({"path": format!("src/module_{}.rs", i - 1), "old_string": "compute(", "new_string": "compute_checked("}),
                "Edited: replaced 1 occurrence".to_string(),
            ),
        };
        let id = format!("call_{i:04}_{:08x}", rng.next() as u32);
        history.push(Message::Assistant {
            content: Some(format!(
                "Step {i}: next I use {name} to look at the failing part."
            )),
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: name.into(),
                arguments: arguments.to_string(),
            }],
            reasoning: None,
        });
        history.push(Message::Tool {
            tool_call_id: id,
            name: name.into(),
            content: output,
            status: ToolStatus::Ok,
            exit_code: None,
        });
        i += 1;
    }
    history
}

fn request(b: &mut Bench) {
    // The prompt and the tools array of a default startup.
    let config = tempfile::tempdir().unwrap();
    let (host, _) = ScriptHost::load(config.path());
    let setup = setup::assemble(&host, Path::new("/home/user/project"), "deepseek-chat");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let history = history(&mut rng, setup.system_prompt);
    let tools = setup.registry.to_openai_json();
    let mut extra = Map::new();
    extra.insert("temperature".into(), json!(0.2));
    let body = wire::request_body("deepseek-chat", &history, tools, &extra);
    let bytes = serde_json::to_vec(&body).unwrap();
    println!(
        "(history: {} messages; body {:.2} MB)",
        history.len(),
        bytes.len() as f64 / 1e6
    );
    b.batched("request: request_body + to_vec, 500 messages", None, || {
        serde_json::to_vec(&wire::request_body(
            "deepseek-chat",
            &history,
            tools,
            &extra,
        ))
    });
    // The agent keeps each message's wire form between requests, so a
    // request writes the new messages and copies the rest.
    let mut cache = wire::WireCache::default();
    let cached = cache.update(&history);
    b.batched(
        "request: the same, every message in a WireCache",
        None,
        || serde_json::to_vec(&body.with_wire(cached)),
    );
    // For comparison: going through a JSON tree, as the agent did before
    // `wire::Request` serialised straight from the history.
    let tree = body.to_value();
    b.batched(
        "request:   before: build a JSON tree (to_value)",
        None,
        || body.to_value(),
    );
    b.batched(
        "request:   before: then serialise the tree (to_vec)",
        None,
        || serde_json::to_vec(&tree),
    );
}

/// Files of the source-like tree the workspace identity walks.
const TREE_FILES: usize = 10_000;
/// Files of the ignored `target/` beside it, which must cost nothing.
const IGNORED_FILES: usize = 20_000;
/// Untracked big files of the second tree (issue 16: 2.6 s per call with
/// `git status`).
const BIG_FILES: usize = 400;
const BIG_FILE_BYTES: u64 = 4 << 20;

/// `WorkspaceTracker::after_call(None)` (what follows every shell call)
/// on a 10,000-file tree with a large ignored `target/`, unchanged and
/// after one file changed; and on 400 untracked 4 MB files.
fn workspace(b: &mut Bench) {
    use agent::watchdog::workspace::WorkspaceTracker;
    let names = ["workspace id", "workspace id 400", "checkpoint"];
    if !names.iter().any(|n| b.wants(n)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    for i in 0..TREE_FILES {
        let sub = root.join(format!("src/m{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(
            sub.join(format!("f{i}.rs")),
            format!("fn f{i}() {{}}\n").repeat(40),
        )
        .unwrap();
    }
    for i in 0..IGNORED_FILES {
        let sub = root.join(format!("target/debug/d{:03}", i / 200));
        if i % 200 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(sub.join(format!("o{i}")), "obj").unwrap();
    }
    let mut ws = WorkspaceTracker::new(root.clone());
    let first = Instant::now();
    ws.current();
    let first = first.elapsed();
    println!(
        "{:<58} {:>12}",
        "workspace id: first walk (hashes everything)",
        format!("{:.1} ms", first.as_secs_f64() * 1e3)
    );
    b.batched(
        "workspace id: 10,000 files, nothing changed",
        Some(Target::Under(Duration::from_millis(5))),
        || ws.after_call(None),
    );
    let changed = root.join("src/m050/f5000.rs");
    let mut n = 0u64;
    b.each(
        "workspace id: 10,000 files, one file changed",
        Some(Target::Under(Duration::from_millis(5))),
        50,
        || {
            n += 1;
            std::fs::write(&changed, format!("changed {n}\n")).unwrap();
        },
        |()| ws.after_call(None),
    );

    // The first mutating call of a session keeps every file for undo.
    let data = tempfile::tempdir().unwrap();
    let files = ws.files();
    let started = Instant::now();
    let mut cp = agent::runtime::checkpoint::Checkpoints::new(
        data.path().join("cp"),
        &root,
        agent::runtime::checkpoint::Caps::default(),
    );
    cp.begin_user_turn("bench");
    cp.before_call(Some(&files), None);
    println!(
        "{:<58} {:>12}",
        "checkpoint: first call keeps 10,000 files (4 MB)",
        format!("{:.1} ms", started.elapsed().as_secs_f64() * 1e3)
    );
    b.batched(
        "checkpoint: a later call, 10,000 files unchanged",
        Some(Target::Under(Duration::from_millis(5))),
        || cp.before_call(Some(&files), None),
    );

    // Under the watch threshold the tracker stats the whole tree instead.
    let small = dir.path().join("small");
    let small_files = agent::watchdog::workspace::WATCH_MIN_FILES - 1;
    for i in 0..small_files {
        let sub = small.join(format!("d{:02}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(sub.join(format!("f{i}.rs")), "fn f() {}\n").unwrap();
    }
    let mut ws = WorkspaceTracker::new(small);
    ws.current();
    ws.after_call(None);
    b.batched(
        "workspace id: 1,999 files (stat'ed, not watched), nothing changed",
        Some(Target::Under(Duration::from_millis(5))),
        || ws.after_call(None),
    );

    let big = dir.path().join("big");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..BIG_FILES {
        // Sparse: the bench needs the sizes, not 1.6 GB of disk.
        let f = std::fs::File::create(big.join(format!("blob{i}.bin"))).unwrap();
        f.set_len(BIG_FILE_BYTES).unwrap();
    }
    let mut ws = WorkspaceTracker::new(big);
    ws.current();
    b.batched(
        "workspace id 400: untracked 4 MB files, nothing changed",
        Some(Target::Under(Duration::from_millis(5))),
        || ws.after_call(None),
    );
}

//! Property tests: whatever bytes a server sends, the SSE reader, the
//! chunk assembler and the stream decoder never panic, the assembler never
//! keeps more than its caps, and a valid stream decodes the same however it
//! is cut.

use agent::client::assemble::Assembler;
use agent::client::sse::SseParser;
use agent::client::{Limits, StreamDecoder};
use proptest::prelude::*;
use serde_json::json;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Bytes that look a little like SSE, so the parser's paths get exercised.
fn sse_like() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            Just(b"data: ".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b": ping\n".to_vec()),
            Just(b"data: [DONE]\n\n".to_vec()),
            Just(b"{\"choices\":[{\"delta\":{\"content\":\"h\xc3\xa9\"}}]}".to_vec()),
            Just(b"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\"}}]}}]}".to_vec()),
            prop::collection::vec(any::<u8>(), 0..16),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_sse_parser_never_panics(bytes in sse_like(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        let mut rest: &[u8] = &bytes;
        for cut in cuts {
            let at = if rest.is_empty() { 0 } else { cut % rest.len() };
            parser.feed(&rest[..at], &mut out);
            rest = &rest[at..];
        }
        parser.feed(rest, &mut out);
        parser.finish(&mut out);
    }

    #[test]
    fn the_decoder_never_panics(bytes in sse_like()) {
        let mut d = StreamDecoder::new();
        let _ = d.feed(&bytes);
        let _ = d.finish();
    }

    #[test]
    fn the_assembler_never_panics(chunks in prop::collection::vec(chunk(), 0..20)) {
        let mut a = Assembler::new();
        for c in chunks {
            let _ = a.push(&c);
        }
        let r = a.finish();
        prop_assert!(r.tool_calls.iter().all(|c| !c.id.is_empty()), "every call can be answered");
    }

    #[test]
    fn the_assembler_never_keeps_more_than_its_caps(
        chunks in prop::collection::vec(chunk(), 0..20),
        max_response_bytes in 0usize..64,
        max_tool_argument_bytes in 0usize..16,
    ) {
        let mut a = Assembler::with_limits(Limits { max_response_bytes, max_tool_argument_bytes, ..Limits::default() });
        let mut shown = 0;
        for c in chunks {
            if let Ok(pieces) = a.push(&c) {
                shown += pieces.iter().map(|p| match p {
                    agent::client::Piece::Text(t) | agent::client::Piece::Reasoning(t) => t.len(),
                    agent::client::Piece::Restart => 0,
                }).sum::<usize>();
            }
        }
        prop_assert!(shown <= max_response_bytes, "{} shown over a cap of {}", shown, max_response_bytes);
        let r = a.finish();
        prop_assert!(r.content.len() + r.reasoning.len() <= max_response_bytes);
        for call in &r.tool_calls {
            let oversized = r.oversized.iter().any(|o| o.id == call.id);
            prop_assert!(oversized || call.arguments.len() <= max_tool_argument_bytes);
        }
        prop_assert!(r.tool_calls.iter().all(|c| !c.id.is_empty()), "every call can be answered");
    }

    #[test]
    fn arbitrary_text_is_never_a_panic(text in ".{0,200}") {
        let _ = Assembler::new().push(&text);
    }

    #[test]
    fn a_valid_stream_decodes_the_same_however_it_is_cut(cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let stream = recorded();
        let whole = decode(&[stream.as_slice()]);
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut rest: &[u8] = &stream;
        for cut in cuts {
            let at = if rest.is_empty() { 0 } else { cut % rest.len() };
            parts.push(&rest[..at]);
            rest = &rest[at..];
        }
        parts.push(rest);
        prop_assert_eq!(decode(&parts), whole);
    }
}

/// A chunk: valid, half-valid or garbage.
fn chunk() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just(json!(null)),
        Just(json!(0)),
        Just(json!("x")),
        Just(json!({})),
        Just(json!([])),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,8}".prop_map(|s| json!(s)),
    ];
    (field.clone(), field.clone(), field.clone(), field, any::<bool>()).prop_map(|(index, id, name, args, garbage)| {
        if garbage {
            return format!("{{\"choices\": [{}", name);
        }
        json!({"choices": [{"delta": {
            "content": name,
            "tool_calls": [{"index": index, "id": id, "function": {"name": name, "arguments": args}}]
        }, "finish_reason": id}], "usage": {"prompt_tokens": index}})
        .to_string()
    })
}

fn recorded() -> Vec<u8> {
    let mut s = String::from(": hi\r\n\r\n");
    for piece in ["Hé", "llo ", "wörld"] {
        s.push_str(&format!(
            "data: {}\r\n\r\n",
            json!({"choices": [{"delta": {"content": piece}}]})
        ));
    }
    s.push_str(&format!(
        "data: {}\n\n",
        json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "run_shell", "arguments": "{\"command\":\"ls\"}"}}]}, "finish_reason": "tool_calls"}]})
    ));
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn decode(parts: &[&[u8]]) -> (String, Vec<(String, String, String)>) {
    let mut d = StreamDecoder::new();
    let mut text = String::new();
    for p in parts {
        for piece in d.feed(p).unwrap() {
            if let agent::client::Piece::Text(t) = piece {
                text.push_str(&t);
            }
        }
    }
    let (rest, response) = d.finish().unwrap();
    for piece in rest {
        if let agent::client::Piece::Text(t) = piece {
            text.push_str(&t);
        }
    }
    (
        text,
        response
            .tool_calls
            .into_iter()
            .map(|c| (c.id, c.name, c.arguments))
            .collect(),
    )
}

//! Server-sent-events framing, as a pure incremental parser.
//!
//! Bytes go in as they arrive from the network, in chunks cut anywhere:
//! inside a line, inside a `\r\n` pair, inside a multi-byte UTF-8 character.
//! Lines are split on the raw bytes and only decoded once whole, so a split
//! character is never damaged. Comment lines (`: keep-alive`) and fields
//! other than `data` and `event` are ignored; a blank line ends an event;
//! [`SseParser::finish`] flushes an event left open by a stream that ended
//! without its final blank line. A line longer than the parser's cap is
//! never buffered whole: it is dropped and [`SseParser::overflowed`] says
//! so, which the client treats as a broken stream (reported and retried).

use std::borrow::Cow;

/// One dispatched event: its `event:` name (if any) and its `data:` lines
/// joined with `\n`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// The most bytes one line may hold before the parser gives up on it, for
/// [`SseParser::new`]. A real chunk is a few KB; this only stops a garbage
/// stream from growing the buffer without bound. The client sets its own
/// cap from the response cap (see [`super::bounds::Limits::line_cap`]).
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// The largest line buffer kept between lines; a bigger one (after a huge
/// line) is freed rather than held for the rest of the stream.
const KEEP_LINE_BUFFER: usize = 64 << 10;

/// Incremental SSE parser. Feed it bytes; it returns whole events.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    /// The longest line kept, in bytes.
    max_line: usize,
    /// The current line passed `max_line`: its bytes are dropped until it
    /// ends.
    skipping: bool,
    /// The previous byte was a `\r`, so a following `\n` belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    overflowed: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_max_line(MAX_LINE_BYTES)
    }
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that drops lines longer than `max_line` bytes.
    pub fn with_max_line(max_line: usize) -> Self {
        SseParser {
            line: Vec::new(),
            max_line,
            skipping: false,
            after_cr: false,
            event: None,
            data: String::new(),
            has_data: false,
            overflowed: false,
        }
    }

    /// Feeds a chunk and appends every event it completes to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match memchr::memchr2(b'\n', b'\r', rest) {
                Some(i) => {
                    self.after_cr = rest[i] == b'\r';
                    if self.skipping {
                        // The end of a line already dropped as too long.
                        self.skipping = false;
                    } else if self.line.is_empty() {
                        // The whole line is in this chunk: read it in place.
                        if i > self.max_line {
                            self.overflow();
                        } else {
                            self.end_line(&rest[..i], out);
                        }
                    } else {
                        self.push_bytes(&rest[..i]);
                        if self.skipping {
                            self.skipping = false;
                        } else {
                            self.end_buffered_line(out);
                        }
                    }
                    rest = &rest[i + 1..];
                }
                None => {
                    if !self.skipping {
                        self.push_bytes(rest);
                    }
                    rest = &[];
                }
            }
        }
    }

    /// Ends the stream: a pending line and a pending event are flushed.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            self.end_buffered_line(out);
        }
        self.dispatch(out);
    }

    /// Whether a line was dropped for exceeding the cap.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        if self.line.len() + bytes.len() > self.max_line {
            // Free the buffer and skip the rest of the line as it arrives.
            self.line = Vec::new();
            self.skipping = true;
            self.overflow();
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    /// Drops the current line and the event it belongs to.
    fn overflow(&mut self) {
        self.overflowed = true;
        self.event = None;
        self.data = String::new();
        self.has_data = false;
    }

    /// Ends the line gathered in `self.line` over several chunks, keeping
    /// a modest buffer for the next one.
    fn end_buffered_line(&mut self, out: &mut Vec<SseEvent>) {
        let mut line = std::mem::take(&mut self.line);
        self.end_line(&line, out);
        if line.capacity() <= KEEP_LINE_BUFFER {
            line.clear();
            self.line = line;
        }
    }

    fn end_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        // `from_utf8` is the fast check; the lossy decoding only runs on
        // lines that need it.
        let text = match std::str::from_utf8(line) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(line),
        };
        let (field, value) = match text.split_once(':') {
            Some(("", _)) => return, // a comment, such as `: keep-alive`
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "data" => {
                // Many `data:` lines make one event; together they are held
                // to the same cap as one line.
                if self.data.len() + 1 + value.len() > self.max_line {
                    self.overflow();
                    return;
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {} // `id`, `retry` and unknown fields do not matter here
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out);
        }
        parser.finish(&mut out);
        out
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    const STREAM: &str = ": keep-alive\r\n\r\ndata: {\"a\":\"héllo 世界\"}\r\n\r\nevent: ping\ndata: x\ndata: y\n\ndata: [DONE]\n\n";

    #[test]
    fn parses_events_comments_and_crlf() {
        let events = parse_all(&[STREAM.as_bytes()]);
        assert_eq!(data(&events), ["{\"a\":\"héllo 世界\"}", "x\ny", "[DONE]"]);
        assert_eq!(events[1].event.as_deref(), Some("ping"));
    }

    #[test]
    fn same_result_at_every_split_point() {
        let whole = parse_all(&[STREAM.as_bytes()]);
        let bytes = STREAM.as_bytes();
        for i in 0..=bytes.len() {
            assert_eq!(
                parse_all(&[&bytes[..i], &bytes[i..]]),
                whole,
                "split at {i}"
            );
        }
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let got = parse_all(&[&bytes[..i], &bytes[i..j], &bytes[j..]]);
                assert_eq!(got, whole, "split at {i} and {j}");
            }
        }
    }

    #[test]
    fn byte_at_a_time() {
        let chunks: Vec<&[u8]> = STREAM.as_bytes().chunks(1).collect();
        assert_eq!(parse_all(&chunks), parse_all(&[STREAM.as_bytes()]));
    }

    #[test]
    fn stream_without_final_blank_line_is_flushed() {
        assert_eq!(data(&parse_all(&[b"data: last"])), ["last"]);
        assert_eq!(data(&parse_all(&[b"data: last\n"])), ["last"]);
    }

    #[test]
    fn lone_cr_ends_a_line() {
        assert_eq!(data(&parse_all(&[b"data: a\r\rdata: b\r\r"])), ["a", "b"]);
    }

    #[test]
    fn data_without_space_and_field_without_colon() {
        assert_eq!(data(&parse_all(&[b"data:x\n\ndata\n\n"])), ["x", ""]);
    }

    #[test]
    fn an_overlong_line_is_dropped_whole_or_in_pieces() {
        let mut stream = b"data: a\n\ndata: ".to_vec();
        stream.resize(stream.len() + MAX_LINE_BYTES + 10, b'x');
        stream.extend_from_slice(b"\n\ndata: b\n\n");
        for size in [stream.len(), 1 << 20, 4099] {
            let mut parser = SseParser::new();
            let mut out = Vec::new();
            for chunk in stream.chunks(size) {
                parser.feed(chunk, &mut out);
            }
            parser.finish(&mut out);
            assert_eq!(data(&out), ["a", "b"], "chunks of {size}");
            assert!(parser.overflowed(), "chunks of {size}");
        }
    }

    #[test]
    fn the_tail_of_an_overlong_line_is_never_read_as_a_line() {
        // Cut anywhere, the line's end (which looks like an event) is
        // skipped with the rest of it, and the events around it survive.
        let stream = b"data: a\n\ndata: 0123456789abcdefdata: evil\n\ndata: b\n\n";
        for i in 0..=stream.len() {
            let mut parser = SseParser::with_max_line(16);
            let mut out = Vec::new();
            parser.feed(&stream[..i], &mut out);
            parser.feed(&stream[i..], &mut out);
            parser.finish(&mut out);
            assert_eq!(data(&out), ["a", "b"], "split at {i}");
            assert!(parser.overflowed(), "split at {i}");
        }
    }

    #[test]
    fn many_data_lines_are_held_to_the_line_cap_together() {
        let mut parser = SseParser::with_max_line(64);
        let mut out = Vec::new();
        for _ in 0..100 {
            parser.feed(b"data: 0123456789\n", &mut out);
        }
        parser.feed(b"\ndata: after\n\n", &mut out);
        assert!(parser.overflowed());
        assert!(parser.data.len() <= 64, "the event buffer stays bounded");
        assert_eq!(data(&out).last(), Some(&"after"));
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let events = parse_all(&[b"data: \xff\xfe ok\n\n"]);
        assert!(events[0].data.ends_with(" ok"));
    }
}

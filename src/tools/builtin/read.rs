//! `read_file`: a window of a text file, as numbered lines.
//!
//! The file is streamed line by line, keeping only the lines inside the
//! window (and only a bounded prefix of each), while counting every line so
//! the model learns the total and where to read on. A multi-gigabyte file
//! or a single enormous line therefore costs bounded memory.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::messages::{self, BinaryReason};
use super::{Access, ToolContext, access_failed, blocking, failed, target};
use crate::protocol::ToolOutput;
use crate::runtime::beneath::{AccessError, Located};
use crate::tools::{Tool, ToolSpec, arg_str, arg_u64};

/// Lines shown when the model gives no `limit`: enough for most source
/// files in one call, about 20k tokens at typical line lengths.
pub const DEFAULT_LIMIT: u64 = 2000;

/// Characters of one line shown before it is cut. Minified files and data
/// dumps have lines of megabytes that would flood the context.
pub const MAX_LINE_CHARS: usize = 2000;

/// Bytes of one line kept while streaming: enough for [`MAX_LINE_CHARS`]
/// characters of up to four bytes each.
const MAX_LINE_BYTES_KEPT: usize = MAX_LINE_CHARS * 4;

/// Total bytes of numbered lines in one result. About 25k tokens, so even
/// 2000 long lines cannot fill the context; the model reads on with offset.
pub const OUTPUT_BYTE_CAP: usize = 100 * 1024;

/// Bytes sniffed at the start of the file to tell text from binary (the
/// same amount git and grep look at).
const SNIFF_BYTES: usize = 8 * 1024;

/// Share of invalid UTF-8 bytes in the sniffed prefix above which a file is
/// treated as binary. Latin-1 text stays well below it (accented letters are
/// a few percent of the bytes); compressed or encoded data is far above.
const BINARY_INVALID_SHARE: f64 = 0.3;

/// Read buffer size; large reads make counting the lines of a big file fast.
const READ_BUFFER_BYTES: usize = 64 * 1024;

const DESCRIPTION: &str = "Reads a text file and returns its lines numbered like `cat -n` (line number, tab, text). \
By default it reads up to 2000 lines from the start; for a longer file the result ends with a note saying which offset to read on from. \
Lines longer than 2000 characters are cut. Binary files are refused; for a directory use list_dir. \
When you later call edit_file, copy text from here without the line-number prefix.";

/// The `read_file` tool.
pub struct ReadFile {
    spec: ToolSpec,
}

impl ReadFile {
    pub fn new() -> Self {
        ReadFile {
            spec: ToolSpec {
                name: "read_file".to_string(),
                description: DESCRIPTION.to_string(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Path of the file, absolute or relative to the workspace root."
                        },
                        "offset": {
                            "type": "integer",
                            "description": "1-based line number to start reading at. Default 1."
                        },
                        "limit": {
                            "type": "integer",
                            "description": "Maximum number of lines to read. Default 2000."
                        }
                    },
                    "required": ["path"]
                }),
            },
        }
    }
}

impl Default for ReadFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for ReadFile {
    fn is_mutating(&self) -> bool {
        false
    }

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let shown = arg_str(&args, "path").to_string();
            let place = match target(&ctx, &shown, Access::Read).await {
                Ok(place) => place,
                Err(output) => return output,
            };
            // 0 is read as "not given": models send it for "from the start"
            // and "no particular limit".
            let offset = arg_u64(&args, "offset").filter(|&n| n > 0).unwrap_or(1);
            let asked = arg_u64(&args, "limit").filter(|&n| n > 0);
            let limit = asked.unwrap_or(DEFAULT_LIMIT);
            let window = Request {
                offset,
                limit,
                limited: asked.is_some(),
            };
            blocking(move || read_window(&place, &shown, window)).await
        })
    }
}

/// Opens the file for reading, or the output that says why not.
pub(super) fn open_for_read(place: &Located, shown: &str) -> Result<(File, u64), ToolOutput> {
    match place.open_read() {
        Ok((file, meta)) => Ok((file, meta.len)),
        Err(AccessError::NotFound) => Err(failed(messages::read_not_found(shown))),
        Err(AccessError::IsDir) => Err(failed(messages::read_is_dir(shown))),
        Err(e) => Err(access_failed("read", shown, &e)
            .unwrap_or_else(|| failed(messages::io_failed("read", shown, &io::Error::other(e))))),
    }
}

/// Which lines a call asked for.
#[derive(Clone, Copy, Debug)]
struct Request {
    /// 1-based first line.
    offset: u64,
    limit: u64,
    /// The model gave `limit` itself (then the hint names no next call).
    limited: bool,
}

/// Reads lines `offset..offset + limit` (1-based) of the file; `shown` is
/// the path as the model wrote it.
fn read_window(place: &Located, shown: &str, request: Request) -> ToolOutput {
    let (file, len) = match open_for_read(place, shown) {
        Ok(opened) => opened,
        Err(output) => return output,
    };
    read_opened(file, len, shown, request)
}

fn read_opened(mut file: File, len: u64, shown: &str, request: Request) -> ToolOutput {
    let Request {
        offset,
        limit,
        limited,
    } = request;
    let mut sample = Vec::with_capacity(SNIFF_BYTES);
    if let Err(e) = (&mut file)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut sample)
    {
        return failed(messages::io_failed("read", shown, &e));
    }
    if let Some(reason) = binary_reason(&sample) {
        return failed(messages::read_binary(shown, len, reason));
    }
    let reader = BufReader::with_capacity(READ_BUFFER_BYTES, Cursor::new(sample).chain(file));
    match scan(reader, offset, limit) {
        Ok(window) => window.into_output(shown, offset, limited),
        Err(e) => failed(messages::io_failed("read", shown, &e)),
    }
}

/// Whether a file's first bytes look binary, and why.
fn binary_reason(sample: &[u8]) -> Option<BinaryReason> {
    if sample.contains(&0) {
        return Some(BinaryReason::NulBytes);
    }
    if sample.is_empty() {
        return None;
    }
    let share = invalid_utf8_bytes(sample) as f64 / sample.len() as f64;
    (share > BINARY_INVALID_SHARE).then_some(BinaryReason::NotUtf8)
}

/// Counts the bytes that are not part of valid UTF-8. A character cut off
/// at the end of the sample is not counted: the sample boundary split it.
fn invalid_utf8_bytes(mut bytes: &[u8]) -> usize {
    let mut invalid = 0;
    while let Err(e) = std::str::from_utf8(bytes) {
        let Some(len) = e.error_len() else { break };
        invalid += len;
        bytes = &bytes[e.valid_up_to() + len..];
    }
    invalid
}

/// The lines read so far and what is known about the rest.
#[derive(Default)]
struct Window {
    /// Numbered lines, joined by `\n`.
    text: String,
    /// Lines in `text`.
    shown: u64,
    /// Lines in the file (counted to the end).
    total: u64,
    /// Whether [`OUTPUT_BYTE_CAP`] stopped the window early.
    capped: bool,
}

impl Window {
    fn into_output(self, shown_path: &str, offset: u64, limited: bool) -> ToolOutput {
        if self.total == 0 {
            return ToolOutput::ok(messages::READ_EMPTY_FILE);
        }
        if offset > self.total {
            return failed(messages::read_offset_past_end(
                shown_path, offset, self.total,
            ));
        }
        let last = (offset + self.shown).saturating_sub(1);
        let mut text = self.text;
        if last < self.total {
            let cap = self.capped.then_some(OUTPUT_BYTE_CAP);
            text.push('\n');
            let suggest = !limited || self.capped;
            text.push_str(&messages::read_more_remains(
                offset, last, self.total, cap, suggest,
            ));
        }
        ToolOutput::ok(text)
    }

    fn push(&mut self, number: u64, line: &str) {
        let entry = number_line_text(number, line);
        let separator = usize::from(!self.text.is_empty());
        if self.shown > 0 && self.text.len() + separator + entry.len() > OUTPUT_BYTE_CAP {
            self.capped = true;
            return;
        }
        if separator == 1 {
            self.text.push('\n');
        }
        self.text.push_str(&entry);
        self.shown += 1;
    }
}

/// The line being streamed, as far as it is kept.
#[derive(Default)]
struct PartialLine {
    /// Whether any byte of it has been read (so a last line without a
    /// trailing newline still counts).
    started: bool,
    /// Its first [`MAX_LINE_BYTES_KEPT`] bytes.
    kept: Vec<u8>,
    /// Characters beyond `kept`, counted without keeping them.
    more_chars: usize,
    /// Whether its last byte so far is `\r`.
    ends_cr: bool,
}

impl PartialLine {
    fn push(&mut self, part: &[u8]) {
        let room = MAX_LINE_BYTES_KEPT.saturating_sub(self.kept.len());
        let (keep, rest) = part.split_at(room.min(part.len()));
        self.kept.extend_from_slice(keep);
        // A UTF-8 character starts at every byte that is not a continuation
        // byte (0b10xx_xxxx).
        self.more_chars += rest.iter().filter(|&&b| b & 0xC0 != 0x80).count();
        if let Some(&last) = part.last() {
            self.ends_cr = last == b'\r';
        }
    }

    /// The line as text, with its `\r` line ending removed and cut to
    /// [`MAX_LINE_CHARS`].
    fn render(&self) -> String {
        let mut bytes = self.kept.as_slice();
        let mut more = self.more_chars;
        if self.ends_cr {
            if more > 0 {
                more -= 1;
            } else if let Some(stripped) = bytes.strip_suffix(b"\r") {
                bytes = stripped;
            }
        }
        let text = String::from_utf8_lossy(bytes);
        let total_chars = text.chars().count() + more;
        cut_line(&text, total_chars).into_owned()
    }
}

/// Streams `reader`, keeping lines `offset..offset + limit` and counting all.
fn scan(mut reader: impl BufRead, offset: u64, limit: u64) -> io::Result<Window> {
    let end = offset.saturating_add(limit);
    let mut window = Window::default();
    let mut line = PartialLine::default();
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            if line.started {
                finish_line(&mut window, &line, offset, end);
            }
            return Ok(window);
        }
        let number = window.total + 1;
        let past_window = window.capped || number >= end;
        if past_window {
            // Only the count matters now: take the whole buffer at once.
            window.total += buf.iter().filter(|&&b| b == b'\n').count() as u64;
            line.started = buf.last() != Some(&b'\n');
            let used = buf.len();
            reader.consume(used);
            continue;
        }
        let (part, newline) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        line.started = true;
        if number >= offset {
            line.push(part);
        }
        let used = part.len() + usize::from(newline);
        reader.consume(used);
        if newline {
            finish_line(&mut window, &line, offset, end);
            line = PartialLine::default();
        }
    }
}

fn finish_line(window: &mut Window, line: &PartialLine, offset: u64, end: u64) {
    window.total += 1;
    let number = window.total;
    if !window.capped && number >= offset && number < end {
        window.push(number, &line.render());
    }
}

/// Cuts `text` (which has `total_chars` characters in the file) to
/// [`MAX_LINE_CHARS`], marking how much was left out.
fn cut_line(text: &str, total_chars: usize) -> Cow<'_, str> {
    if total_chars <= MAX_LINE_CHARS {
        return Cow::Borrowed(text);
    }
    let head = crate::text::first_chars(text, MAX_LINE_CHARS);
    Cow::Owned(format!(
        "{head}{}",
        messages::line_truncated(total_chars - MAX_LINE_CHARS)
    ))
}

/// `{n:>6}\t{line}` for a line already cut and stripped of `\r`.
fn number_line_text(number: u64, line: &str) -> String {
    format!("{number:>6}\t{line}")
}

/// One line of a file shown the way `read_file` shows it: numbered, without
/// a `\r` line ending, long lines cut. Used for edit snippets.
pub(super) fn number_line(number: u64, line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    number_line_text(number, &cut_line(line, line.chars().count()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ErrorKind, ToolStatus};
    use crate::tools::builtin::test_support::call;

    use std::path::Path;

    /// A read as a model asks for it: `limit` given unless it is the default.
    fn read(dir: &Path, name: &str, offset: u64, limit: u64) -> ToolOutput {
        let runtime = crate::runtime::Runtime::new(dir.to_path_buf(), dir.join(".spill"), []);
        let request = Request {
            offset,
            limit,
            limited: limit != DEFAULT_LIMIT,
        };
        read_window(&runtime.locate(name).unwrap(), name, request)
    }

    fn numbered_lines(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[tokio::test]
    async fn numbers_lines_through_the_registry() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\nbeta\n\tgamma").unwrap();
        let out = call(dir.path(), "read_file", json!({"path": "a.txt"})).await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(out.text, "     1\talpha\n     2\tbeta\n     3\t\tgamma");
    }

    #[tokio::test]
    async fn missing_path_is_an_argument_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), "read_file", json!({"offset": 3})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(
            out.text.contains("missing required field `path`"),
            "{}",
            out.text
        );
    }

    #[tokio::test]
    async fn offset_and_limit_select_a_window_and_say_where_to_read_on() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), numbered_lines(10)).unwrap();
        let out = call(
            dir.path(),
            "read_file",
            json!({"path": "a.txt", "offset": 3, "limit": 2}),
        )
        .await;
        assert_eq!(
            out.text,
            "     3\tline 3\n     4\tline 4\n[lines 3-4 of 10 shown; 6 more lines, 5–10]"
        );
        // Without a limit of its own, the model is told where to read on.
        let out = call(
            dir.path(),
            "read_file",
            json!({"path": "a.txt", "offset": 9}),
        )
        .await;
        assert_eq!(out.text, "     9\tline 9\n    10\tline 10");
        // A window reaching the end needs no hint.
        let out = read(dir.path(), "a.txt", 9, 5);
        assert_eq!(out.text, "     9\tline 9\n    10\tline 10");
    }

    #[test]
    fn counts_a_last_line_without_newline_past_the_window() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a\nb\nc").unwrap();
        let out = read(dir.path(), "a.txt", 1, 1);
        assert_eq!(
            out.text,
            "     1\ta\n[lines 1-1 of 3 shown; 2 more lines, 2–3]"
        );
        // The hint that lured a small model past the end of this file
        // describes what is left and suggests nothing.
        assert!(!out.text.contains("offset="), "{}", out.text);
        assert_eq!(
            read(dir.path(), "a.txt", 1, 2).text,
            "     1\ta\n     2\tb\n[lines 1-2 of 3 shown; 1 more line, 3]"
        );
        assert_eq!(read(dir.path(), "a.txt", 3, 1).text, "     3\tc");
    }

    #[test]
    fn default_limit_is_2000_lines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), numbered_lines(2500)).unwrap();
        let out = read(dir.path(), "a.txt", 1, DEFAULT_LIMIT);
        assert_eq!(out.text.lines().count(), 2001);
        assert!(
            out.text
                .ends_with("  2000\tline 2000\n[lines 1-2000 of 2500 shown; 500 more lines, 2001–2500; call read_file with offset=2001 to read on]"),
            "{}",
            crate::text::suffix(&out.text, 200)
        );
    }

    #[test]
    fn byte_cap_stops_early_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!("{}\n", "x".repeat(1000));
        std::fs::write(dir.path().join("a.txt"), long.repeat(500)).unwrap();
        let out = read(dir.path(), "a.txt", 1, DEFAULT_LIMIT);
        assert_eq!(out.status, ToolStatus::Ok);
        let hint = out.text.lines().last().unwrap();
        assert!(
            hint.starts_with("[lines 1-101 of 500 shown (output limit of 100.0 KB reached)"),
            "{hint}"
        );
        assert!(hint.ends_with("offset=102 to read on]"), "{hint}");
        assert!(out.text.len() < OUTPUT_BYTE_CAP + 200);
    }

    #[test]
    fn long_lines_are_cut_with_a_count_of_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let content = format!("{}\r\nshort\n{}", "x".repeat(12_345), "é".repeat(3000));
        std::fs::write(dir.path().join("a.txt"), content).unwrap();
        let out = read(dir.path(), "a.txt", 1, 10);
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "     1\t{}… [line truncated: 10345 more characters]",
                "x".repeat(2000)
            )
        );
        assert_eq!(lines[1], "     2\tshort");
        assert_eq!(
            lines[2],
            format!(
                "     3\t{}… [line truncated: 1000 more characters]",
                "é".repeat(2000)
            )
        );
    }

    #[test]
    fn crlf_endings_are_not_shown_and_bad_utf8_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), b"one\r\ntw\xffo\r\n").unwrap();
        let out = read(dir.path(), "a.txt", 1, 10);
        assert_eq!(out.text, "     1\tone\n     2\ttw\u{FFFD}o");
    }

    #[test]
    fn empty_file_and_offset_past_the_end() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty"), "").unwrap();
        let out = read(dir.path(), "empty", 1, 10);
        assert_eq!(
            (out.status, out.text.as_str()),
            (ToolStatus::Ok, "(empty file)")
        );

        std::fs::write(dir.path().join("a.txt"), numbered_lines(3)).unwrap();
        let out = read(dir.path(), "a.txt", 7, 10);
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text
                .contains("offset 7 is past the end of a.txt, which has 3 lines"),
            "{}",
            out.text
        );
    }

    #[test]
    fn binary_files_are_refused_with_advice() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nul.bin"), b"ELF\0\x01\x02").unwrap();
        let out = read(dir.path(), "nul.bin", 1, 10);
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text
                .contains("nul.bin looks like a binary file (6 B; it contains NUL bytes)"),
            "{}",
            out.text
        );
        assert!(out.text.contains("`file nul.bin`") && out.text.contains("`xxd nul.bin | head`"));

        std::fs::write(dir.path().join("noise.bin"), [0xFFu8; 3000]).unwrap();
        let out = read(dir.path(), "noise.bin", 1, 10);
        assert!(
            out.text.contains("(2.9 KB; most of it is not valid UTF-8)"),
            "{}",
            out.text
        );
    }

    #[test]
    fn directories_and_missing_files_point_to_list_dir() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let out = read(dir.path(), "src", 1, 10);
        assert_eq!(
            out.text,
            "Error: src is a directory; use list_dir to see its entries."
        );
        let out = read(dir.path(), "nope.rs", 1, 10);
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text.contains("nope.rs does not exist. Use list_dir"),
            "{}",
            out.text
        );
    }

    #[test]
    fn sniffing_tells_text_from_binary() {
        assert_eq!(binary_reason(b""), None);
        assert_eq!(binary_reason("café au lait".as_bytes()), None);
        // Latin-1 text: a few invalid bytes among many valid ones.
        assert_eq!(
            binary_reason(b"caf\xe9 au lait, cr\xe8me br\xfbl\xe9e"),
            None
        );
        // A multi-byte character cut by the sample boundary is not invalid.
        assert_eq!(invalid_utf8_bytes(&"é".as_bytes()[..1]), 0);
        assert_eq!(
            binary_reason(b"\xff\xfe\xfd\xfc"),
            Some(BinaryReason::NotUtf8)
        );
    }

    #[test]
    fn number_line_cuts_and_strips_cr() {
        assert_eq!(number_line(12, "abc\r"), "    12\tabc");
        let long = "y".repeat(MAX_LINE_CHARS + 5);
        assert!(number_line(1, &long).ends_with("[line truncated: 5 more characters]"));
    }
}

//! Saved sessions: every message is appended, as it happens, to a JSON-lines
//! transcript in `<data dir>/sessions/`, and flushed. The first line is a
//! header naming the workspace and the model; every other line is one
//! [`Message`]. Loading tolerates a last line cut off by a crash, and
//! answers any tool call left unanswered, so a resumed history is valid.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::{Message, ToolStatus};

/// The first line of a transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `"session"`; tells a header from a message.
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub workspace: PathBuf,
    pub model: String,
    pub started: String,
}

/// The `type` of the line that marks a compaction.
const COMPACTION: &str = "compaction";

/// The answer given to a tool call a crash left unanswered.
pub const INTERRUPTED_CALL: &str =
    "Interrupted: the session ended before this tool call finished. Do not assume it ran.";

/// An open transcript, appended to as messages happen.
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    file: File,
}

impl Transcript {
    /// Creates `<dir>/<id>.jsonl` with its header.
    pub fn create(dir: &Path, header: &Header) -> std::io::Result<Transcript> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}.jsonl", header.id));
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        let line = serde_json::to_string(header).map_err(std::io::Error::other)?;
        writeln!(file, "{line}")?;
        file.flush()?;
        Ok(Transcript { path, file })
    }

    /// Opens an existing transcript to append to (after a resume).
    pub fn append_to(path: &Path) -> std::io::Result<Transcript> {
        let mut file = OpenOptions::new().append(true).open(path)?;
        // A line cut off by a crash must not glue onto the next message.
        if std::fs::read(path).is_ok_and(|b| !b.is_empty() && !b.ends_with(b"\n")) {
            writeln!(file)?;
        }
        Ok(Transcript {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one message and flushes it to the OS. `redact` blanks out
    /// secret values (the API key) wherever they appear.
    pub fn append(
        &mut self,
        message: &Message,
        redact: &dyn Fn(String) -> String,
    ) -> std::io::Result<()> {
        // One write per message: no crash can separate a line from its
        // newline, and a message costs one system call.
        let mut line = redact(serde_json::to_string(message).map_err(std::io::Error::other)?);
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.flush()
    }

    /// Records a compaction: the history from here on is `kept` (the summary
    /// and the recent messages); a loader drops everything before it.
    /// `redact` blanks secret values, as in [`Transcript::append`].
    pub fn compaction(
        &mut self,
        kept: &[Message],
        redact: &dyn Fn(String) -> String,
    ) -> std::io::Result<()> {
        writeln!(self.file, "{}", serde_json::json!({"type": COMPACTION}))?;
        for m in kept {
            let line = redact(serde_json::to_string(m).map_err(std::io::Error::other)?);
            writeln!(self.file, "{line}")?;
        }
        self.file.flush()
    }

    /// Makes the transcript durable (at the end of a turn).
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

/// A loaded transcript.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub header: Option<Header>,
    /// The conversation without system messages, tool calls all answered.
    pub messages: Vec<Message>,
    /// Lines that could not be read (a cut-off last line, say).
    pub skipped: usize,
}

/// Reads a transcript. Unreadable lines are skipped and counted.
pub fn load(path: &Path) -> std::io::Result<Loaded> {
    let reader = BufReader::new(File::open(path)?);
    let mut header = None;
    let mut messages = Vec::new();
    let mut skipped = 0;
    for line in reader.split(b'\n') {
        let line = line?;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if let Ok(h) = serde_json::from_str::<Header>(text)
            && h.kind == "session"
        {
            header = Some(h);
            continue;
        }
        if serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v["type"] == COMPACTION) {
            messages.clear();
            continue;
        }
        match serde_json::from_str::<Message>(text) {
            Ok(Message::System { .. }) => {}
            Ok(m) => messages.push(m),
            Err(_) => skipped += 1,
        }
    }
    Ok(Loaded {
        header,
        messages: repair(messages),
        skipped,
    })
}

/// Answers every tool call that has no answer, right after its turn's
/// other answers, so the history is valid for the next request.
pub fn repair(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut open: Vec<(String, String)> = Vec::new();
    let close = |out: &mut Vec<Message>, open: &mut Vec<(String, String)>| {
        for (id, name) in open.drain(..) {
            out.push(Message::Tool {
                tool_call_id: id,
                name,
                content: INTERRUPTED_CALL.into(),
                status: ToolStatus::Failed,
                exit_code: None,
            });
        }
    };
    for m in messages {
        match &m {
            Message::Tool { tool_call_id, .. } => {
                let Some(i) = open.iter().position(|(id, _)| id == tool_call_id) else {
                    continue; // an answer to nothing: drop it
                };
                open.remove(i);
                out.push(m);
            }
            Message::Assistant { tool_calls, .. } => {
                close(&mut out, &mut open);
                open = tool_calls
                    .iter()
                    .map(|c| (c.id.clone(), c.name.clone()))
                    .collect();
                out.push(m);
            }
            _ => {
                close(&mut out, &mut open);
                out.push(m);
            }
        }
    }
    close(&mut out, &mut open);
    out
}

/// The newest transcript in `dir` for `workspace` (by modification time).
pub fn latest(dir: &Path, workspace: &Path) -> Option<PathBuf> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        let first = File::open(&path)
            .ok()
            .and_then(|f| BufReader::new(f).lines().next())
            .and_then(Result::ok)
            .and_then(|l| serde_json::from_str::<Header>(&l).ok());
        if first.is_none_or(|h| h.workspace != workspace) {
            continue;
        }
        if best.as_ref().is_none_or(|(t, _)| modified > *t) {
            best = Some((modified, path));
        }
    }
    best.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolCall;

    fn call(id: &str) -> Message {
        Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "run_shell".into(),
                arguments: "{}".into(),
            }],
            reasoning: None,
        }
    }

    #[test]
    fn a_cut_off_last_line_still_loads_and_open_calls_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        let header = Header {
            kind: "session".into(),
            id: "s1".into(),
            workspace: "/w".into(),
            model: "m".into(),
            started: "now".into(),
        };
        let mut t = Transcript::create(dir.path(), &header).unwrap();
        t.append(
            &Message::System {
                content: "sys".into(),
            },
            &|l| l,
        )
        .unwrap();
        t.append(&Message::user("hello"), &|l| l).unwrap();
        t.append(&call("c1"), &|l| l).unwrap();
        drop(t);
        let mut bytes = std::fs::read(dir.path().join("s1.jsonl")).unwrap();
        bytes.extend_from_slice(br#"{"role":"tool","tool_call_id":"c1","na"#); // the crash
        std::fs::write(dir.path().join("s1.jsonl"), &bytes).unwrap();

        let loaded = load(&dir.path().join("s1.jsonl")).unwrap();
        assert_eq!(loaded.header, Some(header));
        assert_eq!(loaded.skipped, 1);
        assert_eq!(loaded.messages.len(), 3);
        assert!(
            matches!(&loaded.messages[2], Message::Tool { content, .. } if content == INTERRUPTED_CALL)
        );

        // Appending after the cut starts on a fresh line.
        let mut t = Transcript::append_to(&dir.path().join("s1.jsonl")).unwrap();
        t.append(&Message::user("again"), &|l| l).unwrap();
        let reloaded = load(&dir.path().join("s1.jsonl")).unwrap();
        assert_eq!(reloaded.messages.last(), Some(&Message::user("again")));
        assert_eq!(
            latest(dir.path(), Path::new("/w")),
            Some(dir.path().join("s1.jsonl"))
        );
        assert_eq!(latest(dir.path(), Path::new("/elsewhere")), None);
    }
}

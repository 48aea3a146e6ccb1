//! Saved sessions: every message is appended, as it happens, to a JSON-lines
//! transcript in `<data dir>/sessions/`, and flushed. The first line is a
//! header naming the workspace and the model; every other line is one
//! [`Message`]. Loading tolerates a last line cut off by a crash, and
//! answers any tool call left unanswered, so a resumed history is valid.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::data_dir::DataDir;
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

/// A saved conversation, as `/sessions` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    pub path: PathBuf,
    /// When it started (the header's RFC 3339 time).
    pub started: String,
    /// The person's first request, if any.
    pub first_request: Option<String>,
    /// Messages after the header.
    pub messages: usize,
    modified: std::time::SystemTime,
}

/// The saved conversations of `workspace` in `dir`, newest first.
/// Conversations without a message (a `/clear` nobody typed after) are
/// left out.
pub fn list(dir: &Path, workspace: &Path) -> Vec<SessionInfo> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<SessionInfo> = entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                return None;
            }
            let modified = entry.metadata().and_then(|m| m.modified()).ok()?;
            let mut lines = BufReader::new(File::open(&path).ok()?).lines();
            let header: Header = serde_json::from_str(&lines.next()?.ok()?).ok()?;
            if header.kind != "session" || header.workspace != workspace {
                return None;
            }
            let mut messages = 0;
            let mut first_request = None;
            for line in lines.map_while(Result::ok) {
                if let Ok(m) = serde_json::from_str::<Message>(&line) {
                    messages += 1;
                    if let (None, Message::User { content, source }) = (&first_request, &m)
                        && *source == crate::protocol::UserSource::Person
                    {
                        first_request = Some(content.clone());
                    }
                }
            }
            (messages > 0).then_some(SessionInfo {
                id: header.id,
                path,
                started: header.started,
                first_request,
                messages,
                modified,
            })
        })
        .collect();
    found.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| b.id.cmp(&a.id)));
    found
}

/// The newest conversation in `dir` for `workspace` that has a message.
pub fn latest(dir: &Path, workspace: &Path) -> Option<PathBuf> {
    list(dir, workspace).into_iter().next().map(|s| s.path)
}

/// A fresh transcript for a new session `id` in `data`.
pub fn new_session(
    data: &DataDir,
    id: &str,
    workspace: &Path,
    model: &str,
) -> std::io::Result<Transcript> {
    Transcript::create(
        &data.sessions(),
        &Header {
            kind: "session".into(),
            id: id.to_string(),
            workspace: workspace.to_path_buf(),
            model: model.to_string(),
            started: chrono::Local::now().to_rfc3339(),
        },
    )
}

/// Finds and loads a saved session: `last` (the newest for `workspace`),
/// an id, or a path. The error says where it looked and what to do.
pub fn find(data: &DataDir, workspace: &Path, which: &str) -> Result<(PathBuf, Loaded), String> {
    let dir = data.sessions();
    let path = if which == "last" {
        latest(&dir, workspace).ok_or_else(|| {
            format!(
                "there is no saved session for {} in {}; start one without --resume",
                workspace.display(),
                dir.display()
            )
        })?
    } else if Path::new(which).is_file() {
        PathBuf::from(which)
    } else {
        let p = data.session(which.trim_end_matches(".jsonl"));
        if !p.is_file() {
            return Err(format!(
                "there is no saved session {which:?} in {}; use --resume last, or an id from that directory",
                dir.display()
            ));
        }
        p
    };
    let loaded = load(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok((path, loaded))
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

    #[test]
    fn a_compaction_is_redacted_like_every_other_line() {
        let dir = tempfile::tempdir().unwrap();
        let header = Header {
            kind: "session".into(),
            id: "s2".into(),
            workspace: "/w".into(),
            model: "m".into(),
            started: "now".into(),
        };
        let mut t = Transcript::create(dir.path(), &header).unwrap();
        let redact = |line: String| line.replace("sk-secret-value", "[redacted]");
        t.append(&Message::user("my key is sk-secret-value"), &redact)
            .unwrap();
        t.compaction(&[Message::user("summary: key sk-secret-value")], &redact)
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join("s2.jsonl")).unwrap();
        assert!(!text.contains("sk-secret-value"), "{text}");
        let loaded = load(&dir.path().join("s2.jsonl")).unwrap();
        assert_eq!(loaded.messages, [Message::user("summary: key [redacted]")]);
    }

    #[test]
    fn an_empty_new_conversation_is_not_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::new(dir.path());
        let mut old = new_session(&data, "20260101-000000-1", Path::new("/w"), "m").unwrap();
        old.append(&Message::user("fix the parser"), &|l| l)
            .unwrap();
        old.append(&Message::user("and the tests"), &|l| l).unwrap();
        drop(old);
        // `/clear`: a new transcript with nothing in it yet.
        let _empty = new_session(&data, "20260101-000001-1", Path::new("/w"), "m").unwrap();
        let list = list(&data.sessions(), Path::new("/w"));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].id, "20260101-000000-1");
        assert_eq!(list[0].messages, 2);
        assert_eq!(list[0].first_request.as_deref(), Some("fix the parser"));
        assert_eq!(
            latest(&data.sessions(), Path::new("/w")),
            Some(list[0].path.clone())
        );
        assert!(super::list(&data.sessions(), Path::new("/other")).is_empty());
    }
}

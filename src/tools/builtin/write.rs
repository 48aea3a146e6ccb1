//! `write_file`: create or replace a whole file, atomically.
//!
//! Parent directories are created as needed; the bytes are written through
//! `runtime::beneath` (a temporary file renamed over the name, relative to
//! one directory descriptor), so a crash never leaves a half-written file,
//! a replaced file keeps its permissions, and no symlink swapped in by a
//! command can redirect the write outside the workspace.

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::{Access, ToolContext, access_failed, blocking, failed, messages, target};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::runtime::beneath::{AccessError, Located};
use crate::tools::{Tool, ToolSpec, arg_str};

const DESCRIPTION: &str = "Writes a file with the given content, replacing it if it exists and creating missing parent directories. \
The write is atomic, and a replaced file keeps its permissions. \
To change part of an existing file prefer edit_file; read a file before replacing it so nothing is lost.";

/// The `write_file` tool.
pub struct WriteFile {
    spec: ToolSpec,
}

impl WriteFile {
    pub fn new() -> Self {
        WriteFile {
            spec: ToolSpec {
                name: "write_file".to_string(),
                description: DESCRIPTION.to_string(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Path of the file to write, absolute or relative to the workspace root."
                        },
                        "content": {
                            "type": "string",
                            "description": "The complete new content of the file."
                        }
                    },
                    "required": ["path", "content"]
                }),
            },
        }
    }
}

impl Default for WriteFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for WriteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let shown = arg_str(&args, "path").to_string();
            // Placed first, asked about with the diff of the write.
            let place = match target(&ctx, &shown, Access::Read).await {
                Ok(place) => place,
                Err(output) => return output,
            };
            let content = arg_str(&args, "content").to_string();
            let (p, s, c) = (place.clone(), shown.clone(), content.clone());
            let diff = tokio::task::spawn_blocking(move || diff_of(&p, &s, &c))
                .await
                .ok()
                .flatten();
            if let Err(text) = ctx
                .runtime
                .check_write_showing(&place.path, diff.clone())
                .await
            {
                return ToolOutput::failed(ErrorKind::Denied, text);
            }
            blocking(move || write_file(&place, &shown, content.as_bytes()).with_diff(diff)).await
        })
    }
}

/// The diff a write would make: against the file's text when it is a
/// readable text file, against nothing when there is none; `None` when
/// the old content is not text or is too large to diff.
fn diff_of(place: &Located, shown: &str, content: &str) -> Option<String> {
    use std::io::Read;
    let old = match place.open_read() {
        Ok((file, _)) => {
            let mut bytes = Vec::new();
            let limit = crate::tools::diff::MAX_DIFF_INPUT as u64 + 1;
            file.take(limit).read_to_end(&mut bytes).ok()?;
            Some(String::from_utf8(bytes).ok()?)
        }
        Err(AccessError::NotFound) => None,
        Err(_) => return None,
    };
    crate::tools::diff::unified(shown, old.as_deref(), content)
}

fn write_file(place: &Located, shown: &str, content: &[u8]) -> ToolOutput {
    match place.write(content) {
        Ok(existed) => ToolOutput::ok(messages::write_done(shown, content.len(), existed)),
        Err(e) => write_failed(shown, &e),
    }
}

/// The output for a write that was refused or failed.
pub(super) fn write_failed(shown: &str, err: &AccessError) -> ToolOutput {
    match err {
        AccessError::IsDir => failed(messages::write_is_dir(shown)),
        AccessError::NotFound => failed(messages::access_failed(
            "write",
            shown,
            "a directory on the way does not exist and could not be created",
        )),
        other => access_failed("write", shown, other)
            .unwrap_or_else(|| failed(messages::access_failed("write", shown, &other.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::protocol::{ErrorKind, ToolStatus};
    use crate::tools::builtin::test_support::call;

    #[tokio::test]
    async fn creates_parent_directories() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(
            dir.path(),
            "write_file",
            json!({"path": "a/b/c.txt", "content": "hello\n"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Ok, "{}", out.text);
        assert_eq!(out.text, "Wrote 6 bytes to a/b/c.txt (new file)");
        let written = std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap();
        assert_eq!(written, "hello\n");
    }

    #[tokio::test]
    async fn replacing_keeps_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sh");
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = call(
            dir.path(),
            "write_file",
            json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
        )
        .await;
        assert_eq!(
            out.text,
            "Wrote 18 bytes to run.sh (replaced the existing file)"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#!/bin/sh\necho hi\n"
        );
    }

    #[tokio::test]
    async fn refuses_a_directory_and_requires_content() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let out = call(
            dir.path(),
            "write_file",
            json!({"path": "src", "content": "x"}),
        )
        .await;
        assert_eq!(out.status, ToolStatus::Failed);
        assert!(
            out.text.starts_with("Error: src is a directory"),
            "{}",
            out.text
        );

        let out = call(dir.path(), "write_file", json!({"path": "a.txt"})).await;
        assert_eq!(out.error_kind, Some(ErrorKind::InvalidArgs));
        assert!(
            out.text.contains("missing required field `content`"),
            "{}",
            out.text
        );
    }

    #[tokio::test]
    async fn empty_content_writes_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(
            dir.path(),
            "write_file",
            json!({"path": "e", "content": ""}),
        )
        .await;
        assert_eq!(out.text, "Wrote 0 bytes to e (new file)");
        assert_eq!(std::fs::read(dir.path().join("e")).unwrap(), b"");
    }
}

//! The context the system prompt is built from, and project instructions.
//! The prompt text itself lives in `scripts/prompt.rhai`.

use std::io::Read;
use std::path::Path;

/// Largest `AGENTS.md` read into the prompt; a bigger file is cut with a
/// note, so one huge file cannot eat the context window.
pub const MAX_PROJECT_INSTRUCTIONS: usize = 32 * 1024;

/// Facts about the session that the system prompt may use.
#[derive(Clone, Debug, Default)]
pub struct PromptContext {
    pub cwd: String,
    pub os: String,
    pub date: String,
    pub model: String,
    pub tools: Vec<String>,
    /// The workspace's `AGENTS.md`, when there is one. Read as text only.
    pub project_instructions: Option<String>,
}

impl PromptContext {
    pub fn new(workspace: &Path, model: &str, tools: Vec<String>) -> Self {
        PromptContext {
            cwd: workspace.display().to_string(),
            os: std::env::consts::OS.to_string(),
            date: chrono::Local::now().format("%Y-%m-%d").to_string(),
            model: model.to_string(),
            tools,
            project_instructions: read_project_instructions(workspace),
        }
    }
}

/// Reads `AGENTS.md` from the workspace root, capped at
/// [`MAX_PROJECT_INSTRUCTIONS`] bytes. It is never executed, and it is
/// opened like any file tool opens a file (`runtime::beneath`): a symlink
/// that leads out of the workspace, a FIFO, a device or a hard-linked file
/// is not read, and at most the cap plus one byte is ever read, so a
/// cloned repository cannot hang startup, fill memory or pull a file from
/// elsewhere into the prompt.
pub fn read_project_instructions(workspace: &Path) -> Option<String> {
    let root = crate::runtime::beneath::Root::new(workspace);
    let (file, _) = root.open_read(Path::new(PROJECT_INSTRUCTIONS_FILE)).ok()?;
    let mut bytes = Vec::with_capacity(MAX_PROJECT_INSTRUCTIONS + 1);
    file.take(MAX_PROJECT_INSTRUCTIONS as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() <= MAX_PROJECT_INSTRUCTIONS {
        return Some(String::from_utf8_lossy(&bytes).into_owned());
    }
    bytes.truncate(MAX_PROJECT_INSTRUCTIONS);
    // A character cut at the cap is dropped rather than shown as U+FFFD.
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text.to_string(),
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    };
    Some(format!(
        "{text}\n[AGENTS.md cut at {MAX_PROJECT_INSTRUCTIONS} bytes]"
    ))
}

/// The project instructions' file name, in the workspace root.
pub const PROJECT_INSTRUCTIONS_FILE: &str = "AGENTS.md";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_md_is_read_capped_and_only_from_a_regular_file_inside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("AGENTS.md"), "be nice").unwrap();
        assert_eq!(read_project_instructions(&ws).as_deref(), Some("be nice"));

        std::fs::write(ws.join("AGENTS.md"), "é".repeat(MAX_PROJECT_INSTRUCTIONS)).unwrap();
        let text = read_project_instructions(&ws).unwrap();
        assert!(
            text.ends_with("[AGENTS.md cut at 32768 bytes]"),
            "{}",
            crate::text::suffix(&text, 40)
        );
        assert!(!text.contains('\u{FFFD}'));

        std::fs::write(dir.path().join("secret"), "aws key").unwrap();
        std::fs::remove_file(ws.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.join("AGENTS.md")).unwrap();
        assert_eq!(read_project_instructions(&ws), None);
    }
}

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
    /// The workspace's `AGENTS.md`, and those of the directories down to
    /// where the agent started, when there are any. Read as text only.
    pub project_instructions: Option<String>,
    /// The profile asks for a short prompt (`lean_prompt` in models.rhai).
    pub lean: bool,
    /// The profile's `tool_calls`: `native`, `auto` or `text`.
    pub tool_calls: String,
    /// One line per tool, for prompts that describe the tools themselves
    /// (`tool_calls: "text"`).
    pub tool_descriptions: String,
}

impl PromptContext {
    /// `cwd` is where the agent started: the workspace or a directory in
    /// it, whose `AGENTS.md` files are read after the root's.
    pub fn new(workspace: &Path, cwd: &Path, model: &str, tools: Vec<String>) -> Self {
        PromptContext {
            cwd: workspace.display().to_string(),
            os: std::env::consts::OS.to_string(),
            date: chrono::Local::now().format("%Y-%m-%d").to_string(),
            model: model.to_string(),
            tools,
            project_instructions: read_all_project_instructions(workspace, cwd),
            lean: false,
            tool_calls: "native".to_string(),
            tool_descriptions: String::new(),
        }
    }
}

/// The directories whose `AGENTS.md` is read, as paths relative to the
/// workspace: the root first, then each directory down to `cwd`, nearest
/// last. A `cwd` outside the workspace adds nothing. Pure: paths in, list
/// out.
pub fn instruction_dirs(workspace: &Path, cwd: &Path) -> Vec<std::path::PathBuf> {
    let mut dirs = vec![std::path::PathBuf::new()];
    if let Ok(rel) = cwd.strip_prefix(workspace) {
        let mut at = std::path::PathBuf::new();
        for part in rel.components() {
            if let std::path::Component::Normal(name) = part {
                at.push(name);
                dirs.push(at.clone());
            }
        }
    }
    dirs
}

/// Every `AGENTS.md` from the workspace root down to `cwd` (nearest last),
/// each read as [`read_project_instructions`] reads the root's, headed by
/// its path when there are several; at most [`MAX_PROJECT_INSTRUCTIONS`]
/// bytes in all.
pub fn read_all_project_instructions(workspace: &Path, cwd: &Path) -> Option<String> {
    let found: Vec<(String, String)> = instruction_dirs(workspace, cwd)
        .into_iter()
        .filter_map(|dir| {
            let text = read_instructions_in(workspace, &dir)?;
            let shown = dir.join(PROJECT_INSTRUCTIONS_FILE).display().to_string();
            Some((shown, text))
        })
        .collect();
    match found.len() {
        0 => None,
        1 => found.into_iter().next().map(|(_, text)| text),
        _ => {
            let joined: Vec<String> = found
                .into_iter()
                .map(|(path, text)| format!("From {path}:\n{text}"))
                .collect();
            let all = joined.join("\n\n");
            Some(if all.len() > MAX_PROJECT_INSTRUCTIONS {
                format!(
                    "{}\n[AGENTS.md files cut at {MAX_PROJECT_INSTRUCTIONS} bytes]",
                    crate::text::prefix(&all, MAX_PROJECT_INSTRUCTIONS)
                )
            } else {
                all
            })
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
    read_instructions_in(workspace, Path::new(""))
}

/// The `AGENTS.md` in `dir` (relative to the workspace), read beneath the
/// workspace with the same rules and cap.
fn read_instructions_in(workspace: &Path, dir: &Path) -> Option<String> {
    let root = crate::runtime::beneath::Root::new(workspace);
    let (file, _) = root.open_read(&dir.join(PROJECT_INSTRUCTIONS_FILE)).ok()?;
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
    #[test]
    fn instructions_are_read_from_the_root_down_to_the_start_directory() {
        let w = Path::new("/w");
        assert_eq!(instruction_dirs(w, w), [std::path::PathBuf::new()]);
        assert_eq!(
            instruction_dirs(w, Path::new("/w/src/net")),
            [
                std::path::PathBuf::new(),
                "src".into(),
                std::path::PathBuf::from("src/net")
            ]
        );
        assert_eq!(instruction_dirs(w, Path::new("/elsewhere")).len(), 1);
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join("src/net")).unwrap();
        std::fs::write(ws.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(ws.join("src/net/AGENTS.md"), "net rules").unwrap();
        let text = read_all_project_instructions(ws, &ws.join("src/net")).unwrap();
        assert_eq!(
            text,
            "From AGENTS.md:\nroot rules\n\nFrom src/net/AGENTS.md:\nnet rules"
        );
        // Started at the root: only the root's file, as it was.
        assert_eq!(
            read_all_project_instructions(ws, ws).as_deref(),
            Some("root rules")
        );
    }

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

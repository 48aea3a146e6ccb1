//! The context the system prompt is built from, and project instructions.
//! The prompt text itself lives in `scripts/prompt.rhai`.

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
/// [`MAX_PROJECT_INSTRUCTIONS`] bytes. It is never executed.
pub fn read_project_instructions(workspace: &Path) -> Option<String> {
    let text = std::fs::read_to_string(workspace.join("AGENTS.md")).ok()?;
    if text.len() <= MAX_PROJECT_INSTRUCTIONS {
        return Some(text);
    }
    Some(format!(
        "{}\n[AGENTS.md cut at {MAX_PROJECT_INSTRUCTIONS} bytes]",
        crate::text::prefix(&text, MAX_PROJECT_INSTRUCTIONS)
    ))
}

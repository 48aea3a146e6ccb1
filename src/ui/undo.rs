//! Undo for people: what `/undo`, `/rewind` and `agent undo` share. The
//! lines of a checkpoint list, of a restore and of its conflicts are pure
//! functions; [`undo`] runs one request against the session's
//! [`Checkpoints`] and returns the lines and whether it restored.

use crate::runtime::checkpoint::{Checkpoints, Conflict, Restored, Turn, UndoError};
use crate::text;

/// Files named per turn in a listing; the rest are counted.
const LISTED_FILES: usize = 4;

/// What the person asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// List the turns that changed files.
    List,
    /// Revert the newest turn not yet reverted.
    Last,
    /// Revert every turn from this one on.
    To(u32),
}

/// Runs `request`; `Ok` lines when it listed or restored, `Err` lines when
/// nothing was restored (conflicts, nothing to undo, a store error).
pub fn undo(
    checkpoints: &mut Checkpoints,
    request: Request,
    force: bool,
) -> Result<Vec<String>, Vec<String>> {
    let from = match request {
        Request::List => return Ok(list(checkpoints.turns())),
        Request::To(n) => n,
        Request::Last => match checkpoints.last_open() {
            Some(n) => n,
            None => {
                return Err(vec![
                    "nothing to undo: no turn of this session changed files (or all were undone)"
                        .to_string(),
                ]);
            }
        },
    };
    match checkpoints.restore(from, force) {
        Ok(done) => Ok(restored(&done)),
        Err(UndoError::Conflicts(c)) => Err(conflicts(&c)),
        Err(e) => Err(vec![e.to_string()]),
    }
}

/// One line per turn that changed files, oldest first.
pub fn list(turns: &[Turn]) -> Vec<String> {
    if turns.is_empty() {
        return vec!["  no turn of this session has changed files yet".to_string()];
    }
    let mut lines: Vec<String> = turns
        .iter()
        .map(|t| {
            let mut names: Vec<String> = t
                .changes
                .iter()
                .take(LISTED_FILES)
                .map(|c| c.path.display().to_string())
                .collect();
            if t.changes.len() > LISTED_FILES {
                names.push(format!("{} more", t.changes.len() - LISTED_FILES));
            }
            let undone = if t.undone { "  (undone)" } else { "" };
            format!(
                "  {:>3}  {}  \"{}\"  {} file(s): {}{undone}",
                t.n,
                t.time,
                text::one_line(&t.prompt),
                t.changes.len(),
                names.join(", ")
            )
        })
        .collect();
    lines.push(
        "  /rewind N (or agent undo --to N) puts the files back as they were before turn N".into(),
    );
    lines
}

/// What a restore did.
pub fn restored(done: &Restored) -> Vec<String> {
    let turns: Vec<String> = done.turns.iter().map(u32::to_string).collect();
    let mut lines = vec![format!(
        "  undid turn(s) {}: {} file(s) restored",
        turns.join(", "),
        done.files.len()
    )];
    lines.extend(
        done.files
            .iter()
            .map(|f| format!("    restored {}", f.display())),
    );
    lines.extend(
        done.skipped
            .iter()
            .map(|(f, why)| format!("    not restored {}: {why}", f.display())),
    );
    lines
}

/// The conflicts, each with what differs, and how to go ahead anyway.
pub fn conflicts(conflicts: &[Conflict]) -> Vec<String> {
    let mut lines = vec![format!(
        "  not undone: {} file(s) changed after the agent's edit; nothing was restored",
        conflicts.len()
    )];
    for c in conflicts {
        lines.push(format!("  conflict: {}", c.path.display()));
        lines.extend(c.detail.lines().map(|l| format!("    {l}")));
    }
    lines.push(
        "  to restore anyway and lose those changes: /undo --force (/rewind N --force, agent undo --force)"
            .into(),
    );
    lines
}

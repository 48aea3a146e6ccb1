//! `agent policy test FILE`: the decision and reason of the person's
//! `policy.rhai` for each command in FILE (one a line; blank lines and
//! lines starting with `#` are skipped), so a rule can be tried before it
//! is trusted. Nothing runs: only `approve(action)` is called.

use std::path::Path;
use std::sync::Arc;

use super::policy::{PolicySettings, ScriptApprove};
use super::{LoadNote, POLICY, ScriptHost};
use crate::runtime::policy::{Action, Approve, Decision};

/// One command of the file and its decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// 1-based line number in the file.
    pub line: usize,
    pub command: String,
    pub decision: Decision,
}

/// What a run found: the verdicts, and notes about how the policy loaded
/// (a broken file falls back to the default, which the person must know).
#[derive(Debug)]
pub struct Report {
    pub policy: String,
    pub notes: Vec<String>,
    pub verdicts: Vec<Verdict>,
}

/// The commands of a file: its non-blank lines that are not `#` comments.
pub fn commands_of(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| (i, l.to_string()))
        .collect()
}

/// Decides each command of `file` under the policy in `config_dir`.
pub fn run(
    config_dir: &Path,
    workspace: &Path,
    home: &str,
    sandboxed: bool,
    file: &Path,
) -> Result<Report, String> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        format!(
            "cannot read {}: {e}. Give a file with one shell command per line.",
            file.display()
        )
    })?;
    let (host, load_notes) = ScriptHost::load(config_dir);
    let notes: Vec<String> = load_notes
        .iter()
        .filter(|n| !matches!(n, LoadNote::Loaded { .. }))
        .map(|n| n.message().trim_end().to_string())
        .collect();
    let script = host
        .get(POLICY)
        .cloned()
        .ok_or_else(|| "policy.rhai is not loaded".to_string())?;
    let sandboxed = sandboxed
        || PolicySettings::from_script(&script)
            .map(|s| s.sandbox != crate::runtime::sandbox::SandboxMode::Off)
            .unwrap_or(true);
    let policy = script.display_path();
    let approve = ScriptApprove {
        script: Arc::clone(&script),
        workspace: workspace.to_path_buf(),
        home: home.to_string(),
        config_dir: config_dir.to_path_buf(),
        sandboxed,
    };
    let verdicts = commands_of(&text)
        .into_iter()
        .map(|(line, command)| {
            let decision = approve.approve(&Action::Shell {
                command: command.clone(),
            });
            Verdict {
                line,
                command,
                decision,
            }
        })
        .collect();
    Ok(Report {
        policy,
        notes,
        verdicts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_blank_lines_are_skipped() {
        let cmds = commands_of("# a comment\n\ncargo test\n  rm -rf ~  \n");
        assert_eq!(cmds, vec![(3, "cargo test".into()), (4, "rm -rf ~".into())]);
    }

    #[test]
    fn a_missing_file_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.txt");
        let err = run(dir.path(), dir.path(), "", false, &missing).unwrap_err();
        assert!(
            err.contains("nope.txt") && err.contains("one shell command per line"),
            "{err}"
        );
    }

    #[test]
    fn decisions_come_from_the_default_policy() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cmds.txt");
        std::fs::write(&file, "cargo test\nsudo ls\n").unwrap();
        let report = run(&dir.path().join("cfg"), dir.path(), "/home/u", false, &file).unwrap();
        assert_eq!(report.verdicts[0].decision, Decision::Allow);
        assert!(matches!(&report.verdicts[1].decision, Decision::Ask(r) if r.contains("sudo")));
    }
}

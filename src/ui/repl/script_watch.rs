//! Who changed the scripts: a change made while a turn ran may be the
//! agent's own doing (a command the person approved, or one that got
//! around a rule), so it is not applied silently. The person confirms it
//! before the next turn; a change made between turns (the person editing
//! in another window) is applied as before.

use crate::script::ScriptHost;

/// The REPL's memory of script changes across turns.
#[derive(Debug, Default)]
pub struct ScriptWatch {
    /// The fingerprint when the running turn started.
    at_turn_start: Option<Vec<Option<u64>>>,
    /// A turn ended with the files changed: confirm before applying.
    changed_during_turn: bool,
    /// The files as they were when the person declined a change: not
    /// asked about again, and not applied, until they change again.
    declined: Option<Vec<Option<u64>>>,
}

/// What to do before the next turn.
#[derive(Debug, PartialEq, Eq)]
pub enum Before {
    /// Nothing changed (or the person declined this very change).
    Nothing,
    /// Changed between turns: apply it, as `/reload` would.
    Reload,
    /// Changed while the agent worked: ask first, naming these files.
    Confirm(Vec<&'static str>),
}

impl ScriptWatch {
    /// Decides what happens to changed scripts before a turn.
    pub fn before_turn(&mut self, host: &ScriptHost) -> Before {
        if !host.changed() {
            self.changed_during_turn = false;
            return Before::Nothing;
        }
        let now = host.fingerprint();
        if self.declined.as_ref() == Some(&now) {
            return Before::Nothing;
        }
        if std::mem::take(&mut self.changed_during_turn) {
            return Before::Confirm(host.changed_names());
        }
        Before::Reload
    }

    /// The person's answer to [`Before::Confirm`].
    pub fn answered(&mut self, host: &ScriptHost, apply: bool) {
        self.declined = (!apply).then(|| host.fingerprint());
    }

    /// Call when a turn starts (after any reload).
    pub fn turn_started(&mut self, host: &ScriptHost) {
        self.at_turn_start = Some(host.fingerprint());
    }

    /// Call when a turn ended (also after a stop or an error).
    pub fn turn_ended(&mut self, host: &ScriptHost) {
        if let Some(start) = self.at_turn_start.take()
            && start != host.fingerprint()
        {
            self.changed_during_turn = true;
        }
    }

    /// The person ran `/reload`: whatever is on disk is theirs now.
    pub fn reloaded(&mut self) {
        self.changed_during_turn = false;
        self.declined = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &std::path::Path, text: &str) {
        std::fs::write(dir.join("policy.rhai"), text).unwrap();
    }

    /// Makes the host see the file as changed whatever the mtime tick.
    fn bump(dir: &std::path::Path) {
        let f = std::fs::File::options()
            .write(true)
            .open(dir.join("policy.rhai"))
            .unwrap();
        f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
            .unwrap();
    }

    /// A valid policy: the default one.
    fn policy() -> String {
        let (_, source) = crate::script::DEFAULTS
            .iter()
            .find(|(n, _)| *n == crate::script::POLICY)
            .unwrap();
        source.to_string()
    }

    #[test]
    fn a_change_between_turns_reloads_one_during_a_turn_asks() {
        let dir = tempfile::tempdir().unwrap();
        let (mut host, _) = ScriptHost::load(dir.path());
        let mut watch = ScriptWatch::default();
        assert_eq!(watch.before_turn(&host), Before::Nothing);

        // The person edits between turns: applied.
        write(dir.path(), &policy());
        assert_eq!(watch.before_turn(&host), Before::Reload);
        host.reload(false);
        assert_eq!(watch.before_turn(&host), Before::Nothing);

        // The file changes while a turn runs: asked about, naming it.
        watch.turn_started(&host);
        write(dir.path(), &format!("{}// the agent was here\n", policy()));
        bump(dir.path());
        watch.turn_ended(&host);
        assert_eq!(
            watch.before_turn(&host),
            Before::Confirm(vec!["policy.rhai"])
        );

        // Declined: not applied and not asked again for the same content.
        watch.answered(&host, false);
        assert_eq!(watch.before_turn(&host), Before::Nothing);
        watch.turn_started(&host);
        watch.turn_ended(&host);
        assert_eq!(watch.before_turn(&host), Before::Nothing);

        // Changed again during a turn: asked again.
        watch.turn_started(&host);
        write(dir.path(), &format!("{}// again\n", policy()));
        watch.turn_ended(&host);
        assert!(matches!(watch.before_turn(&host), Before::Confirm(_)));
        watch.answered(&host, true);
    }
}

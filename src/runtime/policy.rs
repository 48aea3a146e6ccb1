//! The approval policy: whether a shell command or a file write may run.
//!
//! `approve(action)` in `policy.rhai` answers allow, ask or deny, with a
//! reason. *Ask* goes to an [`Asker`]: the REPL shows the action and takes
//! yes, no, or always (for this reason, for the rest of the session); in
//! one-shot mode *ask* means deny unless `--yes` was given. A denial comes
//! back to the model as a tool result that says who refused and why.
//!
//! The check lives in the runtime, so built-in tools and script tools
//! (their `shell()` and `write_file()`) are held to the same rules.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

/// Something a tool is about to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run a shell command in the workspace.
    Shell { command: String },
    /// Write (create, replace or edit) a file.
    Write { path: PathBuf },
}

impl Action {
    /// A one-line description for the person.
    pub fn describe(&self) -> String {
        match self {
            Action::Shell { command } => format!("run `{command}`"),
            Action::Write { path } => format!("write {}", path.display()),
        }
    }
}

/// The policy's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Ask(String),
    Deny(String),
}

/// The person's answer to an *ask*.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    /// Yes, and do not ask again for this reason in this session.
    Always,
}

/// Decides allow/ask/deny (the `approve` hook of `policy.rhai`).
pub trait Approve: Send + Sync {
    fn approve(&self, action: &Action) -> Decision;
}

/// Asks the person.
pub trait Asker: Send + Sync {
    fn ask(&self, action: &Action, reason: &str) -> BoxFuture<'static, Answer>;

    /// Who refused, in a denial the model reads.
    fn refuser(&self) -> &'static str {
        "the person"
    }
}

/// One-shot mode: *ask* is yes with `--yes`, no otherwise.
pub struct FixedAnswer(pub Answer);

impl Asker for FixedAnswer {
    fn ask(&self, _action: &Action, _reason: &str) -> BoxFuture<'static, Answer> {
        let answer = self.0;
        Box::pin(async move { answer })
    }

    fn refuser(&self) -> &'static str {
        "one-shot mode (nobody is there to approve it; the person can rerun with --yes)"
    }
}

/// Allows everything: for embedding and tests that do not care.
pub struct AllowAll;

impl Approve for AllowAll {
    fn approve(&self, _action: &Action) -> Decision {
        Decision::Allow
    }
}

/// The model-facing text when the policy or the person refused.
pub fn denied_text(action: &Action, who: &str, reason: &str) -> String {
    format!(
        "Denied: {who} refused to {} ({reason}). Do not retry it in another form; choose another way, or ask the user.",
        action.describe()
    )
}

/// The approval policy of one session.
#[derive(Clone)]
pub struct Policy {
    approve: Arc<dyn Approve>,
    asker: Arc<dyn Asker>,
    always: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy").finish_non_exhaustive()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new(Arc::new(AllowAll), Arc::new(FixedAnswer(Answer::No)))
    }
}

impl Policy {
    pub fn new(approve: Arc<dyn Approve>, asker: Arc<dyn Asker>) -> Self {
        Policy {
            approve,
            asker,
            always: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Replaces the asker (the REPL installs one that prompts).
    pub fn with_asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = asker;
        self
    }

    /// Checks an action. `Err` is the text for the model.
    pub async fn check(&self, action: &Action) -> Result<(), String> {
        let approve = self.approve.clone();
        let owned = action.clone();
        // The hook is a script call: keep it off the async workers.
        let decision = match tokio::runtime::Handle::try_current() {
            Ok(_) => tokio::task::spawn_blocking(move || approve.approve(&owned))
                .await
                .unwrap_or_else(|e| Decision::Deny(format!("the policy check failed: {e}"))),
            Err(_) => approve.approve(&owned),
        };
        match decision {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => Err(denied_text(action, "the policy", &reason)),
            Decision::Ask(reason) => {
                if self.always.lock().is_ok_and(|a| a.contains(&reason)) {
                    return Ok(());
                }
                match self.asker.ask(action, &reason).await {
                    Answer::Yes => Ok(()),
                    Answer::Always => {
                        if let Ok(mut always) = self.always.lock() {
                            always.insert(reason);
                        }
                        Ok(())
                    }
                    Answer::No => Err(denied_text(action, self.asker.refuser(), &reason)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct AskAboutRm;
    impl Approve for AskAboutRm {
        fn approve(&self, action: &Action) -> Decision {
            match action {
                Action::Shell { command } if command.starts_with("rm") => {
                    Decision::Ask("deletes files".into())
                }
                Action::Shell { command } if command.starts_with("sudo") => {
                    Decision::Deny("runs as root".into())
                }
                _ => Decision::Allow,
            }
        }
    }

    struct Counting(Mutex<u32>, Answer);
    impl Asker for Counting {
        fn ask(&self, _: &Action, _: &str) -> BoxFuture<'static, Answer> {
            if let Ok(mut n) = self.0.lock() {
                *n += 1;
            }
            let a = self.1;
            Box::pin(async move { a })
        }
    }

    fn shell(c: &str) -> Action {
        Action::Shell { command: c.into() }
    }

    #[tokio::test]
    async fn allow_deny_and_ask() {
        let policy = Policy::new(Arc::new(AskAboutRm), Arc::new(FixedAnswer(Answer::No)));
        assert_eq!(policy.check(&shell("ls")).await, Ok(()));
        let denied = policy.check(&shell("sudo ls")).await.unwrap_err();
        assert!(
            denied.contains("the policy refused") && denied.contains("runs as root"),
            "{denied}"
        );
        let refused = policy.check(&shell("rm -rf x")).await.unwrap_err();
        assert!(
            refused.contains("one-shot mode") && refused.contains("deletes files"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn always_is_remembered_for_the_reason() {
        let asker = Arc::new(Counting(Mutex::new(0), Answer::Always));
        let policy = Policy::new(Arc::new(AskAboutRm), asker.clone());
        assert_eq!(policy.check(&shell("rm a")).await, Ok(()));
        assert_eq!(policy.check(&shell("rm b")).await, Ok(()));
        assert_eq!(*asker.0.lock().unwrap(), 1);
    }
}

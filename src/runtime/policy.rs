//! The approval policy: whether a shell command or a file write may run.
//!
//! `approve(action)` in `policy.rhai` answers allow, ask or deny, with a
//! reason. *Ask* goes to an [`Asker`]: the REPL shows the action and takes
//! yes, no, or always (for this command, for the rest of the session: see
//! [`scope_key`]); in
//! one-shot mode *ask* means deny unless `--yes` was given. A denial comes
//! back to the model as a tool result that says who refused and why.
//!
//! The check lives in the runtime, so built-in tools and script tools
//! (their `shell()` and `write_file()`) are held to the same rules.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::command::{self, Context};

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
    /// Yes, and do not ask again for this command (its [`scope_key`]) in
    /// this session.
    Always,
}

/// Decides allow/ask/deny (the `approve` hook of `policy.rhai`).
pub trait Approve: Send + Sync {
    fn approve(&self, action: &Action) -> Decision;

    /// What an "always" answer to this action covers ([`scope_key`]). The
    /// default resolves relative paths against `/`; a policy that knows
    /// the workspace resolves them there.
    fn scope(&self, action: &Action) -> String {
        scope_key(
            action,
            &Context {
                workspace: Path::new("/"),
                home: None,
                resolve_program: None,
            },
        )
    }
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
    /// Scope keys the person answered "always" to; never saved.
    always: Arc<Mutex<BTreeSet<String>>>,
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
            always: Arc::new(Mutex::new(BTreeSet::new())),
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
                let scope = self.scope_of(action);
                if self.always.lock().is_ok_and(|a| a.contains(&scope)) {
                    return Ok(());
                }
                match self.asker.ask(action, &reason).await {
                    Answer::Yes => Ok(()),
                    Answer::Always => {
                        if let Ok(mut always) = self.always.lock() {
                            always.insert(scope);
                        }
                        Ok(())
                    }
                    Answer::No => Err(denied_text(action, self.asker.refuser(), &reason)),
                }
            }
        }
    }
}

impl Policy {
    /// What "always" would cover for this action (shown before asking).
    pub fn scope_of(&self, action: &Action) -> String {
        self.approve.scope(action)
    }

    /// The session's "always" entries, sorted (for `/policy`).
    pub fn always_entries(&self) -> Vec<String> {
        self.always
            .lock()
            .map(|a| a.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets one "always" entry; false when there was none.
    pub fn revoke(&self, scope: &str) -> bool {
        self.always.lock().is_ok_and(|mut a| a.remove(scope))
    }

    /// Forgets every "always" entry; returns how many there were.
    pub fn revoke_all(&self) -> usize {
        self.always
            .lock()
            .map(|mut a| {
                let n = a.len();
                a.clear();
                n
            })
            .unwrap_or(0)
    }
}

/// What one "always" answer covers: the same programs, with the same
/// subcommand, and, for a command that does something the policy weighs
/// (writes, deletes, permission changes, privileges, history, the system),
/// exactly the same words and resolved paths. So an "always" for `cargo
/// test` covers `cargo test --release`, one for `rm -rf cache` covers only
/// `rm -rf cache` in the same directory, and one for an opaque command
/// covers only that exact text. Pure: text in, key out.
pub fn scope_key(action: &Action, ctx: &Context) -> String {
    match action {
        Action::Write { path } => format!("write {}", path.display()),
        Action::Shell { command } => {
            let parsed = command::parse(command, ctx);
            if parsed.opaque {
                return format!("exactly `{command}`");
            }
            let mut parts: Vec<String> = parsed.commands.iter().map(command_scope).collect();
            for r in &parsed.redirects {
                parts.push(format!("{} {}", if r.append { ">>" } else { ">" }, r.path));
            }
            parts.join(" ; ")
        }
    }
}

fn command_scope(c: &command::SimpleCommand) -> String {
    let e = &c.effects;
    let weighty = !e.writes.is_empty()
        || !e.deletes.is_empty()
        || !e.perms.is_empty()
        || e.privilege
        || e.history.is_some()
        || e.system.is_some()
        || !c.redirects.is_empty()
        || !c.wrappers.is_empty();
    let mut words: Vec<String> = c.wrappers.clone();
    words.push(c.program.clone());
    if weighty {
        words.extend(c.args.iter().map(|a| a.text.clone()));
        let paths: Vec<&String> = e.writes.iter().chain(&e.deletes).chain(&e.perms).collect();
        if !paths.is_empty() {
            let list: Vec<&str> = paths.iter().map(|p| p.as_str()).collect();
            words.push(format!("[{}]", list.join(" ")));
        }
    } else if let Some(sub) = c.args.iter().find(|a| !a.text.starts_with('-')) {
        let looks_like_subcommand = sub.is_static
            && sub
                .text
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' || ch == ':');
        if looks_like_subcommand {
            words.push(sub.text.clone());
        }
    }
    words.join(" ")
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
    async fn always_covers_this_command_not_this_reason() {
        let asker = Arc::new(Counting(Mutex::new(0), Answer::Always));
        let policy = Policy::new(Arc::new(AskAboutRm), asker.clone());
        assert_eq!(policy.check(&shell("rm -rf cache")).await, Ok(()));
        assert_eq!(policy.check(&shell("rm -rf cache")).await, Ok(()));
        assert_eq!(
            *asker.0.lock().unwrap(),
            1,
            "asked again for the same command"
        );
        // Same program, same flags, same reason: another path asks again.
        assert_eq!(policy.check(&shell("rm -rf ~")).await, Ok(()));
        assert_eq!(*asker.0.lock().unwrap(), 2, "`always` for cache approved ~");
        assert_eq!(policy.always_entries().len(), 2);
        assert!(policy.revoke(&policy.scope_of(&shell("rm -rf cache"))));
        assert!(!policy.revoke("no such entry"));
        assert_eq!(policy.check(&shell("rm -rf cache")).await, Ok(()));
        assert_eq!(*asker.0.lock().unwrap(), 3, "a revoked entry still applied");
        assert_eq!(policy.revoke_all(), 2);
        assert!(policy.always_entries().is_empty());
    }

    #[test]
    fn scope_keys() {
        let ctx = Context {
            workspace: Path::new("/w"),
            home: Some(Path::new("/home/u")),
            resolve_program: None,
        };
        let key = |c: &str| scope_key(&shell(c), &ctx);
        assert_eq!(key("cargo test"), key("cargo test --release -- foo"));
        assert_ne!(key("cargo test"), key("cargo build"));
        assert_eq!(key("rm -rf target"), "rm -rf target [/w/target]");
        assert_ne!(key("rm -rf cache"), key("rm -rf ~"));
        assert_ne!(key("rm -rf cache"), key("cd / && rm -rf cache"));
        assert_ne!(key("git push origin main"), key("git push -f origin main"));
        assert_eq!(key("git push origin main"), key("git push origin other"));
        assert_eq!(key("eval x"), "exactly `eval x`");
        assert_ne!(key("sudo ls"), key("ls"));
        assert_eq!(
            scope_key(
                &Action::Write {
                    path: "/w/a".into()
                },
                &ctx
            ),
            "write /w/a"
        );
    }
}

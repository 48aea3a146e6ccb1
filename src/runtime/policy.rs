//! The approval policy: whether a shell command or a file write may run.
//!
//! `approve(action)` in `policy.rhai` answers allow, ask or deny, with a
//! reason. *Ask* becomes an [`ApprovalRequest`] on the session's channel;
//! the turn loop shows it to the UI as an event and the UI answers on the
//! request's reply (the REPL asks yes / no / always — always for this
//! command, see [`scope_key`] — and one-shot mode answers "unattended"
//! unless `--yes` was given). A denial comes back to the model as a tool
//! result that says who refused and why.
//!
//! The check lives in the runtime, so built-in tools and script tools
//! (their `shell()` and `write_file()`) are held to the same rules.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::command::{self, Context};

/// Something a tool is about to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run a shell command in the workspace.
    Shell { command: String },
    /// Run a shell command outside the sandbox (still contained): the
    /// model asked for it for this one call.
    Unsandboxed { command: String },
    /// Write (create, replace or edit) a file.
    Write { path: PathBuf },
    /// Call a tool of an MCP server. `arguments` is the call's JSON
    /// object; `destructive` and `read_only` are the server's own hints
    /// (`destructiveHint`, `readOnlyHint`), which only a trusted server's
    /// word makes true.
    Mcp {
        server: String,
        tool: String,
        arguments: String,
        destructive: bool,
        read_only: bool,
    },
}

impl Action {
    /// A one-line description for the person.
    pub fn describe(&self) -> String {
        match self {
            Action::Shell { command } => format!("run `{command}`"),
            Action::Unsandboxed { command } => {
                format!("run `{command}` outside the sandbox")
            }
            Action::Write { path } => format!("write {}", path.display()),
            Action::Mcp { server, tool, .. } => {
                format!("call the tool `{tool}` of the MCP server `{server}`")
            }
        }
    }

    /// The shell command, for both kinds of shell action.
    pub fn command(&self) -> Option<&str> {
        match self {
            Action::Shell { command } | Action::Unsandboxed { command } => Some(command),
            Action::Write { .. } | Action::Mcp { .. } => None,
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

pub use crate::protocol::Answer;

/// Decides allow/ask/deny (the `approve` hook of `policy.rhai`).
pub trait Approve: Send + Sync {
    fn approve(&self, action: &Action) -> Decision;

    /// What an "always" answer to this action covers ([`scope_key`]). The
    /// default resolves relative paths against `/`; a policy that knows
    /// the workspace resolves them there.
    fn scope(&self, action: &Action) -> String {
        scope_key(action, &root_context())
    }

    /// The programs a shell action runs, as the parser sees them (shown in
    /// the approval question).
    fn programs(&self, action: &Action) -> Vec<String> {
        programs_of(action, &root_context())
    }
}

/// The parser's context for a policy that does not know the workspace.
fn root_context() -> Context<'static> {
    Context {
        workspace: Path::new("/"),
        home: None,
        resolve_program: None,
    }
}

/// Every program and wrapper a shell action runs; none for a write.
pub fn programs_of(action: &Action, ctx: &Context) -> Vec<String> {
    match action {
        Action::Shell { command } | Action::Unsandboxed { command } => {
            command::parse(command, ctx).programs()
        }
        Action::Write { .. } | Action::Mcp { .. } => Vec::new(),
    }
}

/// Allows everything: for embedding and tests that do not care.
pub struct AllowAll;

impl Approve for AllowAll {
    fn approve(&self, _action: &Action) -> Decision {
        Decision::Allow
    }
}

/// Who refused, in the denial the model reads, when nobody was there to
/// answer.
pub const UNATTENDED: &str =
    "one-shot mode (nobody is there to approve it; the person can rerun with --yes)";

/// The model-facing text when the policy or the person refused.
pub fn denied_text(action: &Action, who: &str, reason: &str) -> String {
    format!(
        "Denied: {who} refused to {} ({reason}). Do not retry it in another form; choose another way, or ask the user.",
        action.describe()
    )
}

/// A question for the person, on its way to the UI: the turn loop turns it
/// into an [`crate::protocol::Event::Approval`] and the answer comes back
/// on `reply`.
#[derive(Debug)]
pub struct ApprovalRequest {
    pub id: u64,
    pub action: Action,
    pub reason: String,
    /// The programs the command runs, parsed.
    pub programs: Vec<String>,
    /// What an "always" answer would cover ([`scope_key`]).
    pub scope: String,
    /// What the action would change (a write's diff), shown first.
    pub preview: Option<String>,
    pub reply: crate::protocol::Reply,
}

/// The sending end of a session's approval questions.
pub type Asks = tokio::sync::mpsc::UnboundedSender<ApprovalRequest>;

/// The receiving end, held by the turn loop.
pub type AskQueue = tokio::sync::mpsc::UnboundedReceiver<ApprovalRequest>;

/// A new channel for one session's approval questions.
pub fn ask_channel() -> (Asks, AskQueue) {
    tokio::sync::mpsc::unbounded_channel()
}

/// The "always" answers of one session. Shared by every policy built for
/// the session, so a script reload keeps them; never saved to disk.
#[derive(Clone, Debug, Default)]
pub struct Approvals(Arc<Mutex<BTreeSet<String>>>);

impl Approvals {
    pub fn contains(&self, key: &str) -> bool {
        self.0.lock().is_ok_and(|a| a.contains(key))
    }

    pub fn insert(&self, key: String) {
        if let Ok(mut a) = self.0.lock() {
            a.insert(key);
        }
    }

    /// Every "always" of the session, sorted.
    pub fn list(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|a| a.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets one "always"; returns whether it was there.
    pub fn revoke(&self, key: &str) -> bool {
        self.0.lock().is_ok_and(|mut a| a.remove(key))
    }

    /// Forgets every "always"; returns how many there were.
    pub fn revoke_all(&self) -> usize {
        self.0
            .lock()
            .map(|mut a| {
                let n = a.len();
                a.clear();
                n
            })
            .unwrap_or(0)
    }
}

/// The approval policy of one session.
#[derive(Clone)]
pub struct Policy {
    approve: Arc<dyn Approve>,
    asks: Option<Asks>,
    always: Approvals,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy").finish_non_exhaustive()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new(Arc::new(AllowAll), None, Approvals::default())
    }
}

/// Numbers approval questions within the process.
static NEXT_ASK: AtomicU64 = AtomicU64::new(1);

impl Policy {
    /// A policy deciding with `approve`, asking through `asks` (`None`:
    /// nobody can be asked, so *ask* is a refusal), remembering "always"
    /// answers in `always`.
    pub fn new(approve: Arc<dyn Approve>, asks: Option<Asks>, always: Approvals) -> Self {
        Policy {
            approve,
            asks,
            always,
        }
    }

    /// The session's "always" answers.
    pub fn approvals(&self) -> &Approvals {
        &self.always
    }

    /// Checks an action. `Err` is the text for the model.
    pub async fn check(&self, action: &Action) -> Result<(), String> {
        self.check_with_preview(action, None).await
    }

    /// [`Policy::check`], with what the action would change (a write's
    /// diff) for the person to see before they answer.
    pub async fn check_with_preview(
        &self,
        action: &Action,
        preview: Option<String>,
    ) -> Result<(), String> {
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
                let key = self.scope_of(action);
                if self.always.contains(&key) {
                    return Ok(());
                }
                match self.ask(action, &reason, preview).await {
                    Answer::Yes => Ok(()),
                    Answer::Always => {
                        self.always.insert(key);
                        Ok(())
                    }
                    Answer::No => Err(denied_text(action, "the person", &reason)),
                    Answer::Unattended => Err(denied_text(action, UNATTENDED, &reason)),
                }
            }
        }
    }

    /// Sends the question to the UI and waits for the answer.
    async fn ask(&self, action: &Action, reason: &str, preview: Option<String>) -> Answer {
        let Some(asks) = &self.asks else {
            return Answer::Unattended;
        };
        let (reply, answer) = crate::protocol::Reply::channel();
        let request = ApprovalRequest {
            id: NEXT_ASK.fetch_add(1, Ordering::Relaxed),
            action: action.clone(),
            reason: reason.to_string(),
            programs: self.approve.programs(action),
            scope: self.scope_of(action),
            preview,
            reply,
        };
        if asks.send(request).is_err() {
            return Answer::Unattended;
        }
        // A dropped reply (the turn ended, the UI went away) is no answer.
        answer.await.unwrap_or(Answer::Unattended)
    }
}

impl Policy {
    /// What "always" would cover for this action (shown before asking).
    pub fn scope_of(&self, action: &Action) -> String {
        self.approve.scope(action)
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
        // "Always" covers the tool, whatever its arguments.
        Action::Mcp { server, tool, .. } => format!("mcp {server} {tool}"),
        Action::Unsandboxed { command } => format!(
            "outside the sandbox: {}",
            scope_key(
                &Action::Shell {
                    command: command.clone()
                },
                ctx
            )
        ),
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

    fn shell(c: &str) -> Action {
        Action::Shell { command: c.into() }
    }

    /// Answers every question with `answer`, counting them.
    fn answering(answer: Answer) -> (Asks, Arc<AtomicU64>) {
        let (asks, mut queue) = ask_channel();
        let count = Arc::new(AtomicU64::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Some(request) = queue.recv().await {
                seen.fetch_add(1, Ordering::Relaxed);
                request.reply.send(answer);
            }
        });
        (asks, count)
    }

    #[tokio::test]
    async fn allow_deny_and_ask() {
        let policy = Policy::new(Arc::new(AskAboutRm), None, Approvals::default());
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
        let (asks, _) = answering(Answer::No);
        let policy = Policy::new(Arc::new(AskAboutRm), Some(asks), Approvals::default());
        let refused = policy.check(&shell("rm -rf x")).await.unwrap_err();
        assert!(refused.contains("the person refused"), "{refused}");
    }

    #[tokio::test]
    async fn always_is_remembered_and_outlives_the_policy() {
        let (asks, count) = answering(Answer::Always);
        let approvals = Approvals::default();
        let policy = Policy::new(Arc::new(AskAboutRm), Some(asks.clone()), approvals.clone());
        assert_eq!(policy.check(&shell("rm a")).await, Ok(()));
        assert_eq!(policy.check(&shell("rm a")).await, Ok(()));
        assert_eq!(count.load(Ordering::Relaxed), 1);
        // A rebuilt policy (a script reload) keeps the session's answers.
        let rebuilt = Policy::new(Arc::new(AskAboutRm), Some(asks), approvals.clone());
        assert_eq!(rebuilt.check(&shell("rm a")).await, Ok(()));
        assert_eq!(count.load(Ordering::Relaxed), 1);
        assert_eq!(approvals.list().len(), 1);
        assert!(approvals.revoke(&approvals.list()[0]));
        assert!(approvals.list().is_empty());
    }

    #[tokio::test]
    async fn always_covers_this_command_not_this_reason() {
        let (asks, count) = answering(Answer::Always);
        let policy = Policy::new(Arc::new(AskAboutRm), Some(asks), Approvals::default());
        let asked = || count.load(Ordering::Relaxed);
        assert_eq!(policy.check(&shell("rm -rf cache")).await, Ok(()));
        assert_eq!(policy.check(&shell("rm -rf cache")).await, Ok(()));
        assert_eq!(asked(), 1, "asked again for the same command");
        // Same program, same flags, same reason: another path asks again.
        assert_eq!(policy.check(&shell("rm -rf ~")).await, Ok(()));
        assert_eq!(asked(), 2, "`always` for cache approved ~");
        let approvals = policy.approvals();
        assert_eq!(approvals.list().len(), 2);
        assert!(approvals.revoke(&policy.scope_of(&shell("rm -rf cache"))));
        assert!(!approvals.revoke("no such entry"));
        assert_eq!(policy.check(&shell("rm -rf cache")).await, Ok(()));
        assert_eq!(asked(), 3, "a revoked entry still applied");
        assert_eq!(approvals.revoke_all(), 2);
        assert!(approvals.list().is_empty());
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

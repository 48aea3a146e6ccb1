//! The one assembly path (`setup::Session`) as startup, `/reload` and
//! `/model` use it: what a reload or a profile switch changes, and what
//! the session keeps across them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use agent::config::{Overrides, Settings};
use agent::protocol::{Answer, Event, EventSink};
use agent::setup::{Session, Start};
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, STEP_TIMEOUT};

/// Answers every approval question with `answer`, counting them.
pub(crate) struct Answering {
    answer: Answer,
    pub(crate) asked: AtomicU32,
    events: Mutex<Vec<Event>>,
}

impl Answering {
    pub(crate) fn new(answer: Answer) -> Self {
        Answering {
            answer,
            asked: AtomicU32::new(0),
            events: Mutex::new(Vec::new()),
        }
    }
}

impl EventSink for Answering {
    fn emit(&self, event: Event) {
        if let Event::Approval(ask) = &event {
            self.asked.fetch_add(1, Ordering::Relaxed);
            ask.reply.send(self.answer);
        }
        self.events.lock().unwrap().push(event);
    }
}

pub(crate) fn start(dirs: &Dirs, base_url: &str) -> (Session, agent::agent::Agent) {
    let (session, agent, notes) = start_noting(dirs, base_url);
    assert!(notes.is_empty(), "{notes:?}");
    (session, agent)
}

/// Starts a session and returns what startup noted for the person.
fn start_noting(
    dirs: &Dirs,
    base_url: &str,
) -> (Session, agent::agent::Agent, Vec<agent::setup::Note>) {
    let vars = [
        ("AGENT_BASE_URL", base_url.to_string()),
        ("AGENT_MODEL", "mock-model".to_string()),
        ("AGENT_CONFIG_DIR", dirs.config.display().to_string()),
        ("AGENT_DATA_DIR", dirs.data.display().to_string()),
    ];
    let env: agent::setup::Env = std::sync::Arc::new(move |k: &str| {
        vars.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
    });
    // The workspace as `-C` gives it: the session resolves its settings
    // from the overrides (at start and at every `/model`).
    let overrides = Overrides {
        workspace: Some(dirs.workspace.clone()),
        ..Overrides::default()
    };
    let settings = Settings::resolve(&overrides, &*env).unwrap();
    let (session, agent, notes) = Session::start(Start {
        settings: &settings,
        overrides: &overrides,
        env,
        profile: None,
        resume: None,
        launcher: Some(env!("CARGO_BIN_EXE_agent").into()),
    })
    .unwrap();
    assert_eq!(session.settings.workspace, dirs.workspace);
    (session, agent, notes)
}

pub(crate) async fn turn(agent: &mut agent::agent::Agent, sink: &dyn EventSink, task: &str) {
    tokio::time::timeout(
        STEP_TIMEOUT,
        agent.run_turn(task, sink, &CancellationToken::new()),
    )
    .await
    .unwrap()
    .unwrap();
}

#[tokio::test]
async fn a_reload_applies_an_edited_summary_prompt_to_the_next_compaction() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::text(&format!("first {}", "x".repeat(3000))),
        Reply::text(&format!("second {}", "y".repeat(3000))),
        Reply::text("SUMMARY"),
    ])
    .await;
    let (mut session, mut agent) = start(&dirs, &server.base_url);
    let sink = Answering::new(Answer::No);
    turn(&mut agent, &sink, "one").await;
    turn(&mut agent, &sink, "two").await;
    let source = agent::script::DEFAULTS
        .iter()
        .find(|(n, _)| *n == agent::script::PROMPT)
        .unwrap()
        .1
        .replace(
            "You summarise a coding session",
            "MY EDITED SUMMARY RULES. You summarise a coding session",
        );
    std::fs::write(dirs.config.join("prompt.rhai"), source).unwrap();
    let notes = session.reload(&mut agent, false);
    assert!(
        notes
            .iter()
            .any(|n| format!("{n:?}").contains("reloaded prompt.rhai")),
        "{notes:?}"
    );
    agent.set_context_window(Some(1000));
    let done = agent.compact(&CancellationToken::new()).await.unwrap();
    assert!(done.is_some());
    let request = &server.requests()[2];
    let instructions = request.messages()[0]["content"].as_str().unwrap();
    assert!(
        instructions.starts_with("MY EDITED SUMMARY RULES."),
        "{instructions}"
    );
}

/// Ten turns with answers of about 250 tokens each, then a compaction in
/// a large window; returns what it reported and the requests the server saw.
async fn ten_turns_then_compact(
    prompt_rhai: Option<String>,
) -> (
    Option<agent::agent::Compaction>,
    Vec<agent::setup::Note>,
    Vec<crate::common::mock::Recorded>,
) {
    let dirs = Dirs::new();
    if let Some(source) = prompt_rhai {
        std::fs::write(dirs.config.join("prompt.rhai"), source).unwrap();
    }
    let mut replies: Vec<Reply> = (0..10)
        .map(|i| Reply::text(&format!("answer {i} {}", "z".repeat(1000))))
        .collect();
    replies.push(Reply::text("SUMMARY OF THE EARLY TURNS"));
    replies.push(Reply::text("eleventh answer"));
    let server = MockServer::start(replies).await;
    let (_session, mut agent, notes) = start_noting(&dirs, &server.base_url);
    let sink = Answering::new(Answer::No);
    for i in 0..10 {
        turn(&mut agent, &sink, &format!("request number {i}")).await;
    }
    agent.set_context_window(Some(128_000));
    let done = agent.compact(&CancellationToken::new()).await.unwrap();
    turn(&mut agent, &sink, "request number 10").await;
    (done, notes, server.requests())
}

fn default_prompt_rhai() -> String {
    agent::script::DEFAULTS
        .iter()
        .find(|(n, _)| *n == agent::script::PROMPT)
        .unwrap()
        .1
        .to_string()
}

#[tokio::test]
async fn compaction_frees_most_of_a_short_conversation_and_keeps_the_latest_request() {
    let (done, notes, requests) = ten_turns_then_compact(None).await;
    assert!(notes.is_empty(), "{notes:?}");
    let done = done.expect("a ten-turn conversation has something to compact");
    // 20 messages after the system prompt; the default keeps about a
    // quarter of the context, so most are summarised (not just one).
    assert!(done.messages_summarised >= 14, "{done:?}");
    assert!(done.tokens_after * 2 < done.tokens_before, "{done:?}");
    let next = requests.last().unwrap().messages().to_vec();
    let summary = next[1]["content"].as_str().unwrap();
    assert!(
        summary.contains("SUMMARY OF THE EARLY TURNS")
            && summary.contains("The user's current request: request number 9"),
        "{summary}"
    );
    assert_eq!(next.last().unwrap()["content"], "request number 10");
    assert!(
        next.iter().any(|m| m["content"] == "request number 9"),
        "the latest request before the compaction is kept verbatim"
    );
    assert!(
        !requests
            .last()
            .unwrap()
            .body
            .to_string()
            .contains("answer 0 zzz")
    );
}

#[tokio::test]
async fn the_compaction_rule_in_prompt_rhai_sets_how_much_stays_verbatim() {
    let source = default_prompt_rhai().replace(
        "#{ compact_at: 0.8, keep_recent: 0.25 }",
        "#{ keep_recent: 0.9 }",
    );
    assert!(
        source.contains("keep_recent: 0.9"),
        "the default file changed"
    );
    let (done, notes, _) = ten_turns_then_compact(Some(source)).await;
    assert!(notes.is_empty(), "{notes:?}");
    let done = done.expect("still something to summarise");
    assert!(done.messages_summarised <= 4, "{done:?}");
}

#[tokio::test]
async fn a_bad_compaction_rule_is_named_and_the_built_in_rule_applies() {
    let source = default_prompt_rhai().replace(
        "#{ compact_at: 0.8, keep_recent: 0.25 }",
        "#{ compact_at: 0.8, keep_recent: 2 }",
    );
    let (done, notes, _) = ten_turns_then_compact(Some(source)).await;
    let text = format!("{notes:?}");
    assert!(
        text.contains("`keep_recent` must be between 0.05 and 0.95")
            && text.contains("built-in rule"),
        "{text}"
    );
    assert!(done.unwrap().messages_summarised >= 14);
}

#[tokio::test]
async fn an_always_approval_survives_a_reload() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.config.join("policy.rhai"),
        "fn settings() { #{} }\nfn is_secret(n) { false }\nfn approve(a) { if a.kind == \"shell\" && a.command.starts_with(\"echo\") { #{ decision: \"ask\", reason: \"it echoes\" } } else { #{ decision: \"allow\" } } }\n",
    )
    .unwrap();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("a", "run_shell", r#"{"command":"echo one"}"#)],
        ),
        Reply::text("ok"),
        Reply::tools(
            Shape::OpenAi,
            &[("b", "run_shell", r#"{"command":"echo one"}"#)],
        ),
        Reply::text("ok again"),
    ])
    .await;
    let (mut session, mut agent) = start(&dirs, &server.base_url);
    let sink = Answering::new(Answer::Always);
    turn(&mut agent, &sink, "first").await;
    assert_eq!(sink.asked.load(Ordering::Relaxed), 1);
    let notes = session.reload(&mut agent, true);
    assert!(
        notes
            .iter()
            .any(|n| format!("{n:?}").contains("reloaded policy.rhai")),
        "{notes:?}"
    );
    turn(&mut agent, &sink, "second").await;
    assert_eq!(
        sink.asked.load(Ordering::Relaxed),
        1,
        "the \"always\" of the first turn still holds after the reload"
    );
    let result = server.requests()[3].tool_result("b").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(result.contains("one"), "{result}");
    assert_eq!(session.approvals().list().len(), 1);
}

#[tokio::test]
async fn a_profile_switch_brings_its_context_window() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![]).await;
    let (mut session, mut agent) = start(&dirs, &server.base_url);
    assert_eq!(
        agent.context_window(),
        Some(128_000),
        "the deepseek default"
    );
    session.switch_profile(&mut agent, "ollama").unwrap();
    assert_eq!(agent.context_window(), Some(32_768));
    assert_eq!(session.profile.as_deref(), Some("ollama"));
    let err = session.switch_profile(&mut agent, "nope").unwrap_err();
    assert!(err.contains("known profiles"), "{err}");
    assert_eq!(
        agent.context_window(),
        Some(32_768),
        "a failed switch changes nothing"
    );
}

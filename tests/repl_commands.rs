//! The REPL's slash commands through their handler (`ui::repl::handlers`),
//! in process and without a terminal: what each command replies, as the
//! lines the editor loop would print.

use agent::protocol::Answer;
use agent::ui::repl::commands::{COMMANDS, parse};
use agent::ui::repl::handlers::{Ctx, Line, Reply, handle};
use agent::ui::{Approver, Style, TextSink};

use crate::common::Dirs;
use crate::common::mock::{MockServer, Reply as Answer_, Shape};
use crate::setup::{Answering, start, turn};

/// A session against `replies`, and a way to type commands at it.
struct Repl {
    rt: tokio::runtime::Runtime,
    agent: agent::agent::Agent,
    session: agent::setup::Session,
    sink: TextSink,
    server: MockServer,
    _dirs: Dirs,
}

impl Repl {
    fn new(dirs: Dirs, replies: Vec<Answer_>) -> Repl {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let server = rt.block_on(MockServer::start(replies));
        let (session, agent) = {
            let _in = rt.enter();
            start(&dirs, &server.base_url)
        };
        let sink = TextSink::new(
            Style { color: false },
            false,
            false,
            Approver::Fixed(Answer::No),
        );
        Repl {
            rt,
            agent,
            session,
            sink,
            server,
            _dirs: dirs,
        }
    }

    fn type_(&mut self, line: &str) -> Reply {
        let _in = self.rt.enter();
        let mut ctx = Ctx {
            rt: &self.rt,
            agent: &mut self.agent,
            session: &mut self.session,
            sink: &self.sink,
        };
        handle(&mut ctx, parse(line))
    }

    fn turn(&mut self, task: &str, sink: &Answering) {
        self.rt.block_on(turn(&mut self.agent, sink, task));
    }
}

fn errors(reply: &Reply) -> Vec<&str> {
    reply
        .lines
        .iter()
        .filter_map(|l| match l {
            Line::Error(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn each_command_replies_in_lines_and_mistakes_are_errors_that_say_what_to_do() {
    let mut repl = Repl::new(Dirs::new(), vec![]);
    let help = repl.type_("/help");
    assert_eq!(help.lines.len(), COMMANDS.len(), "{help:?}");
    assert!(help.text().contains("/rewind"), "{}", help.text());

    let tools = repl.type_("/tools").text();
    for name in ["read_file", "edit_file", "run_shell", "grep"] {
        assert!(tools.contains(&format!("  {name}: ")), "{tools}");
    }
    assert!(tools.contains("(script)"), "{tools}");

    assert!(
        repl.type_("/last")
            .text()
            .contains("no tool has run yet in this session")
    );
    assert!(repl.type_("/plan").text().contains("no plan yet"));
    assert!(
        repl.type_("/policy")
            .text()
            .contains("no \"always\" approvals in this session")
    );
    let bad = repl.type_("/policy revoke 3");
    assert_eq!(
        errors(&bad),
        ["there is no approval 3; /policy lists them with their numbers"]
    );
    let bad = repl.type_("/policy forget");
    assert!(errors(&bad)[0].contains("/policy revoke N"), "{bad:?}");

    let unknown = repl.type_("/日本");
    assert_eq!(unknown.lines.len(), 1);
    assert!(errors(&unknown)[0].contains("/help"), "{unknown:?}");

    let budget = repl.type_("/budget +10").text();
    assert!(budget.contains("may use up to"), "{budget}");
    assert!(repl.type_("/budget").text().contains("hard cap"));

    assert!(
        repl.type_("/model")
            .text()
            .contains("context window 128000 tokens")
    );
    let switched = repl.type_("/model ollama").text();
    assert!(
        switched.contains("switched to profile ollama")
            && switched.contains("context window 32768 tokens"),
        "{switched}"
    );
    assert!(repl.type_("/model").text().contains("(profile ollama)"));
    let bad = repl.type_("/model nope");
    assert!(errors(&bad)[0].contains("known profiles"), "{bad:?}");

    assert_eq!(
        repl.type_("/reload").text(),
        "scripts reloaded; nothing changed"
    );
    assert!(
        repl.type_("/compact")
            .text()
            .contains("nothing to compact yet")
    );
    assert!(
        repl.type_("/undo")
            .lines
            .iter()
            .any(|l| matches!(l, Line::Error(_) | Line::Out(_))),
        "undo with nothing done replies something"
    );
    assert!(
        repl.server.requests().is_empty(),
        "no command asked the model"
    );
}

#[test]
fn an_always_approval_is_listed_and_revoked_by_its_number() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.config.join("policy.rhai"),
        "fn settings() { #{} }\nfn is_secret(n) { false }\nfn approve(a) { if a.kind == \"shell\" { #{ decision: \"ask\", reason: \"a command\" } } else { #{ decision: \"allow\" } } }\n",
    )
    .unwrap();
    let mut repl = Repl::new(
        dirs,
        vec![
            Answer_::tools(
                Shape::OpenAi,
                &[("a", "run_shell", r#"{"command":"echo one"}"#)],
            ),
            Answer_::text("ok"),
        ],
    );
    let sink = Answering::new(Answer::Always);
    repl.turn("first", &sink);
    let listed = repl.type_("/policy").text();
    assert!(
        listed.starts_with("  1. ") && listed.contains("echo"),
        "{listed}"
    );
    let revoked = repl.type_("/policy revoke 1").text();
    assert!(revoked.starts_with("  revoked: "), "{revoked}");
    assert!(repl.session.approvals().list().is_empty());
}

#[test]
fn clear_then_resume_brings_back_the_conversation_with_a_recap() {
    let mut repl = Repl::new(Dirs::new(), vec![Answer_::text("the answer is 42")]);
    let sink = Answering::new(Answer::No);
    repl.turn("what is the answer", &sink);
    let cleared = repl.type_("/clear").text();
    assert!(cleared.contains("new conversation"), "{cleared}");
    assert_eq!(repl.agent.history().len(), 1, "only the system prompt");
    let resumed = repl.type_("/resume");
    let text = resumed.text();
    assert!(text.contains("last request: what is the answer"), "{text}");
    assert!(text.contains("last answer: the answer is 42"), "{text}");
    assert!(
        resumed.lines.iter().any(|l| matches!(l, Line::Note(_))),
        "{resumed:?}"
    );
    assert!(repl.agent.history().len() > 1);
}

#[test]
fn rewind_with_chat_puts_the_file_back_and_offers_the_message_again() {
    let dirs = Dirs::new();
    let file = dirs.workspace.join("notes.txt");
    let mut repl = Repl::new(
        dirs,
        vec![
            Answer_::tools(
                Shape::OpenAi,
                &[(
                    "w",
                    "write_file",
                    r#"{"path":"notes.txt","content":"hello\n"}"#,
                )],
            ),
            Answer_::text("written"),
        ],
    );
    let sink = Answering::new(Answer::Yes);
    repl.turn("write the notes", &sink);
    let result = repl.server.requests()[1].tool_result("w").unwrap().clone();
    assert_eq!(
        std::fs::read_to_string(&file).ok().as_deref(),
        Some("hello\n"),
        "{result}"
    );
    let listed = repl.type_("/rewind").text();
    assert!(listed.contains('1'), "{listed}");
    let back = repl.type_("/rewind 1 --chat");
    assert!(errors(&back).is_empty(), "{back:?}");
    assert!(!file.exists(), "the write is undone: {back:?}");
    assert_eq!(back.prefill.as_deref(), Some("write the notes"));
    assert!(
        back.text()
            .contains("conversation taken back to before your message: write the notes"),
        "{}",
        back.text()
    );
    let again = repl.type_("/rewind 1 --chat");
    assert!(
        !errors(&again).is_empty(),
        "nothing left to take back: {again:?}"
    );
}

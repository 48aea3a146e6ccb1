//! The REPL in a real terminal (tmux), and saved sessions.

use std::sync::Arc;

use agent::agent::TurnOutcome;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::tmux::Tmux;
use crate::common::{Dirs, Recorder, STEP_TIMEOUT, agent_command, agent_for, output, stderr};

/// Writes the default policy with the sandbox off into the config dir.
fn sandbox_off(dirs: &Dirs) {
    let policy =
        include_str!("../scripts/policy.rhai").replace("sandbox: \"auto\",", "sandbox: \"off\",");
    assert!(policy.contains("sandbox: \"off\","));
    std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
}

fn contents(server: &MockServer, request: usize) -> Vec<String> {
    server.requests()[request]
        .messages()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn a_prompt_is_answered_with_streamed_text() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![Reply::text(
        "Hello from the mock model, streamed in pieces.",
    )])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    // The banner names the model and says a local server needs no key.
    let banner = tmux.wait_for("no key needed").await;
    assert!(
        banner.contains("mock-model at http://127.0.0.1:"),
        "{banner}"
    );
    tmux.line("say hello");
    tmux.wait_for("Hello from the mock model, streamed in pieces.")
        .await;
    // The usage line follows the answer once the turn is over.
    tmux.wait_for("tokens: 11 in, 7 out").await;
    tmux.wait_for_n("›", 2).await;
    // Tab completes a slash command.
    tmux.type_text("/hel");
    tmux.press("Tab");
    tmux.press("Enter");
    tmux.wait_for_prompt_after("continue a saved conversation")
        .await;
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
    assert_eq!(contents(&server, 0).last().unwrap(), "say hello");
}

#[tokio::test]
async fn ctrl_c_during_a_hanging_tool_returns_to_the_prompt_and_the_next_request_works() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("h", "run_shell", r#"{"command":"sleep 100"}"#)],
        ),
        Reply::text("Second answer."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("start something slow");
    tmux.wait_for("run_shell sleep 100").await;
    tmux.press("C-c");
    tmux.wait_for("interrupted; everything so far is kept")
        .await;
    tmux.line("try again");
    tmux.wait_for("Second answer.").await;
    let second = &server.requests()[1];
    let cancelled = second
        .tool_result("h")
        .expect("the cancelled call was answered");
    let text = cancelled["content"].as_str().unwrap();
    assert!(
        text.contains("cancelled") || text.contains("Cancelled"),
        "{text}"
    );
    server.assert_protocol();
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ps.stdout)
            .lines()
            .any(|l| l.trim() == "sleep 100"),
        "the tool was killed"
    );
}

#[tokio::test]
async fn history_persists_across_runs_and_multi_line_input_works() {
    let dirs = Dirs::new();
    let server = MockServer::start_with_fallback(vec![], Some(Reply::text("all good"))).await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.type_text("first line \\");
    tmux.press("Enter");
    tmux.line("second line");
    tmux.wait_for("all good").await;
    tmux.wait_for_n("›", 2).await;
    // Alt-Enter and Ctrl-J insert a newline too.
    tmux.type_text("alpha");
    tmux.press("M-Enter");
    tmux.type_text("beta");
    tmux.press("C-j");
    tmux.line("gamma");
    tmux.wait_for_n("all good", 2).await;
    tmux.wait_for_n("›", 3).await;
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
    assert_eq!(
        contents(&server, 0).last().unwrap(),
        "first line \nsecond line"
    );
    assert_eq!(contents(&server, 1).last().unwrap(), "alpha\nbeta\ngamma");
    drop(tmux);

    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.press("Up");
    tmux.wait_for("gamma").await;
    // Up moves through the lines of a multi-line entry before the history.
    for _ in 0..3 {
        tmux.press("Up");
    }
    let screen = tmux.wait_for("second line").await;
    assert!(screen.contains("first line"), "{screen}");
    tmux.press("C-c");
    // The second Ctrl+C reaches the line editor only once it reads again.
    tmux.wait_for("(Ctrl+C again to leave").await;
    tmux.wait_for_n("›", 2).await;
    tmux.press("C-c");
    tmux.wait_for("__EXITED__0").await;
}

#[tokio::test]
async fn resume_last_continues_a_conversation() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("c", "run_shell", r#"{"command":"echo remembered"}"#)],
        ),
        Reply::text("The first answer."),
        Reply::text("The second answer."),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "first task"]);
    assert_eq!(output(cmd).await.status.code(), Some(0));

    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["--resume", "-p", "and now?"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("resumed"), "{}", stderr(&out));
    let third = contents(&server, 2);
    assert_eq!(third[1], "first task");
    assert!(
        third.iter().any(|c| c.starts_with("remembered")),
        "{third:?}"
    );
    assert!(third.contains(&"The first answer.".to_string()));
    assert_eq!(third.last().unwrap(), "and now?");
    server.assert_protocol();

    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["--resume", "no-such-session", "-p", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no saved session \"no-such-session\""),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn reload_after_editing_tools_rhai_and_resume_in_the_repl() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::text("before"),
        Reply::tools(Shape::OpenAi, &[("n", "shout", r#"{"text":"hi"}"#)]),
        Reply::text("after"),
        Reply::text("resumed fine"),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("one");
    tmux.wait_for("before").await;
    std::fs::write(
        dirs.config.join("tools.rhai"),
        "[ #{ name: \"shout\", description: \"Upper-cases text.\", parameters: #{ type: \"object\", properties: #{ text: #{ type: \"string\" } } }, handler: |args| args.text.to_upper() } ]",
    )
    .unwrap();
    tmux.line("/reload");
    tmux.wait_for("reloaded tools.rhai").await;
    tmux.line("/tools");
    tmux.wait_for("shout (script): Upper-cases text.").await;
    // AGENT_MODEL and AGENT_BASE_URL (set for the mock) beat the profile.
    tmux.line("/model ollama");
    tmux.wait_for("switched to profile ollama: model mock-model")
        .await;
    tmux.line("/model nope");
    tmux.wait_for("known profiles: deepseek, llamacpp, ollama")
        .await;
    tmux.line("two");
    tmux.wait_for("after").await;
    assert_eq!(
        server.requests()[2].tool_result("n").unwrap()["content"],
        "HI"
    );
    // The new profile's window is the one shown (/model switched it), and
    // its lean prompt is small.
    tmux.wait_for("context 0% of 32768").await;
    // Ctrl+D reaches the line editor only once it is reading again.
    tmux.wait_for_n("›", 7).await;
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
    drop(tmux);

    let tmux = Tmux::start(&dirs, &server.base_url, &["--resume", "last"], &[]);
    tmux.wait_for("last answer: after").await;
    tmux.line("three");
    tmux.wait_for("resumed fine").await;
    let last = contents(&server, 3);
    assert!(
        last.contains(&"one".to_string()) && last.contains(&"two".to_string()),
        "{last:?}"
    );
    tmux.press("C-d");
}

#[tokio::test]
async fn an_approval_question_is_answered_at_the_terminal() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("s", "run_shell", r#"{"command":"sudo -n true"}"#)],
        ),
        Reply::text("Understood."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("do it");
    tmux.wait_for("Allow? [y]es / [N]o / [a]lways").await;
    tmux.line("n");
    tmux.wait_for("Understood.").await;
    let text = server.requests()[1].tool_result("s").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.starts_with("Denied: the person refused to run `sudo -n true`"),
        "{text}"
    );
}

#[tokio::test]
async fn a_small_window_triggers_compaction_with_the_model() {
    let dirs = Dirs::new();
    let big = "x".repeat(4000);
    let server = MockServer::start(vec![
        Reply::text(&format!("first answer {big}")),
        Reply::text(&format!("second answer {big}")),
        // The summarisation request, then the real one.
        Reply::text("SUMMARY: the user asked two things; both answered."),
        Reply::text("third answer"),
    ])
    .await;
    let mut agent = agent_for(&server.base_url, &dirs);
    agent.set_context_window(Some(2000));
    let recorder = Recorder::default();
    let cancel = CancellationToken::new();
    for task in ["one", "two", "three"] {
        let outcome = tokio::time::timeout(STEP_TIMEOUT, agent.run_turn(task, &recorder, &cancel))
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(outcome, TurnOutcome::Done { .. }));
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let summarise = &requests[2];
    assert!(summarise.body.get("tools").is_none());
    let instructions = summarise.messages()[0]["content"].as_str().unwrap();
    assert!(
        instructions.contains("summarise a coding session"),
        "{instructions}"
    );
    assert!(
        summarise.messages()[1]["content"]
            .as_str()
            .unwrap()
            .contains("first answer")
    );
    let after: Vec<Value> = requests[3].messages().to_vec();
    let summary = after[1]["content"].as_str().unwrap();
    assert!(
        summary.contains("SUMMARY: the user asked two things")
            && summary.contains("not a message from the user"),
        "{summary}"
    );
    assert_eq!(after.last().unwrap()["content"], "three");
    assert!(
        !requests[3].body.to_string().contains("first answer xxx"),
        "the old turn was replaced"
    );
    assert!(recorder.events().iter().any(
        |e| matches!(e, agent::protocol::Event::Notice(n) if n.starts_with("context compacted"))
    ));
    let _ = Arc::new(());
}

#[tokio::test]
async fn a_context_too_long_error_compacts_and_retries() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::text("first"),
        Reply::status(
            400,
            r#"{"error":{"message":"This model's maximum context length is 4096 tokens"}}"#,
        ),
        Reply::text("SUMMARY"),
        Reply::text("fits now"),
    ])
    .await;
    let mut agent = agent_for(&server.base_url, &dirs);
    let recorder = Recorder::default();
    let cancel = CancellationToken::new();
    agent.run_turn("one", &recorder, &cancel).await.unwrap();
    let outcome = agent.run_turn("two", &recorder, &cancel).await.unwrap();
    assert_eq!(
        outcome,
        TurnOutcome::Done {
            text: "fits now".into(),
            finish_reason: Some("stop".into())
        }
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn ctrl_c_on_an_open_approval_question_keeps_the_next_line() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("s", "run_shell", r#"{"command":"sudo -n true"}"#)],
        ),
        Reply::text("Heard you."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("do it");
    tmux.wait_for("Allow? [y]es / [N]o / [a]lways").await;
    tmux.press("C-c");
    tmux.wait_for("interrupted; everything so far is kept")
        .await;
    tmux.line("next message");
    tmux.wait_for("Heard you.").await;
    assert_eq!(contents(&server, 1).last().unwrap(), "next message");
    server.assert_protocol();
}

#[tokio::test]
async fn one_shot_in_a_terminal_streams_the_answer() {
    use crate::common::mock::{chunks, done_after, text_events};
    let dirs = Dirs::new();
    let events = text_events("Streaming first. Then the rest.");
    // Everything up to "Streaming first." at once, the rest much later.
    let (head, tail) = events.split_at(5);
    let mut stream = chunks(head);
    let mut later = chunks(tail);
    later[0].delay = std::time::Duration::from_secs(4);
    stream.extend(later);
    stream.push(done_after(std::time::Duration::ZERO));
    let server = MockServer::start(vec![Reply::Sse(stream)]).await;
    let tmux = Tmux::start(&dirs, &server.base_url, &["-p", "stream please"], &[]);
    // The first part is on the screen while the rest is still held back,
    // so it was streamed, not printed at the end.
    let screen = tmux.wait_for("Streaming first.").await;
    assert!(!screen.contains("Then the rest."), "{screen}");
    tmux.wait_for("Then the rest.").await;
    let screen = tmux.wait_for("__EXITED__0").await;
    assert_eq!(
        screen.matches("Then the rest.").count(),
        1,
        "printed once: {screen}"
    );
}

#[tokio::test]
async fn a_running_tool_shows_its_time_and_then_its_output() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("s", "run_shell", r#"{"command":"sleep 3; echo all-done"}"#)],
        ),
        Reply::tools(
            Shape::OpenAi,
            &[("f", "run_shell", r#"{"command":"ls /no/such/dir"}"#)],
        ),
        Reply::text("Finished."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("run it");
    // While it runs: what runs and for how long.
    tmux.wait_for("running run_shell…").await;
    // When it ends: a preview of what it printed.
    tmux.wait_for("    all-done").await;
    // A failure shows its first error line, not a section marker.
    let screen = tmux.wait_for("✗ exit 2: ls: cannot access").await;
    assert!(!screen.contains("✗ exit 2: [stderr]"), "{screen}");
    tmux.wait_for("Finished.").await;
    tmux.wait_for_n("›", 2).await;
    tmux.line("/last");
    tmux.wait_for("── run_shell ──").await;
}

#[tokio::test]
async fn an_answer_is_rendered_in_colour_and_plain_under_no_color() {
    let answer = "# Plan\n- first **bold** item\n```rust\nfn main() {}\n```\nDone.";
    for (no_color, rendered) in [("", true), ("1", false)] {
        let dirs = Dirs::new();
        let server = MockServer::start(vec![Reply::text(answer)]).await;
        let tmux = Tmux::start(&dirs, &server.base_url, &[], &[("NO_COLOR", no_color)]);
        tmux.wait_for_prompt_after("type a task").await;
        tmux.line("plan it");
        let screen = tmux.wait_for("Done.").await;
        if rendered {
            assert!(screen.contains("• first bold item"), "{screen}");
            assert!(!screen.contains("**bold**"), "{screen}");
            assert!(!screen.contains("# Plan"), "{screen}");
            assert!(screen.contains("  fn main() {}"), "{screen}");
        } else {
            assert!(screen.contains("- first **bold** item"), "{screen}");
            assert!(screen.contains("# Plan"), "{screen}");
        }
    }
}

/// A hostile model hides what runs behind `\r` and an erase-line sequence,
/// and puts a clipboard-write sequence in its answer: the screen shows the
/// escapes, and what the person approves is exactly what runs.
#[tokio::test]
async fn a_command_hidden_behind_escapes_is_shown_as_it_is() {
    let dirs = Dirs::new();
    // The sandbox would refuse the write outside the workspace; this test
    // is about what the screen shows and what the person approves.
    sandbox_off(&dirs);
    let command = "touch \"$HOME/pwned\" # \r\x1b[2Kecho harmless";
    let args = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("s", "run_shell", &args)]),
        Reply::text("All done.\x1b]52;c;cm0gLXJmIH4=\x07 Really."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("tidy up");
    let screen = tmux.wait_for("Allow? [y]es / [N]o / [a]lways").await;
    assert!(
        screen.contains(r#"touch "$HOME/pwned" # \r\x1b[2Kecho harmless"#),
        "the hidden part is not shown:\n{screen}"
    );
    assert!(screen.contains("runs: touch"), "{screen}");
    assert!(screen.contains("outside the workspace"), "{screen}");
    tmux.line("y");
    let screen = tmux.wait_for("Really.").await;
    assert!(
        screen.contains(r"All done.\x1b]52;c;cm0gLXJmIH4=\x07 Really."),
        "{screen}"
    );
    // What was approved is what ran: the file outside the workspace.
    assert!(
        dirs.home.join("pwned").exists(),
        "the approved command did not run"
    );
}

/// The model changes the agent's own policy (the person approved the
/// command without reading it): the change is not applied silently; the
/// person declines it and the old policy still asks.
#[tokio::test]
async fn a_policy_the_agent_wrote_is_applied_only_when_the_person_confirms() {
    let dirs = Dirs::new();
    // The sandbox keeps the config dir read-only to commands; this test is
    // about the layer behind it, for a person who turned the sandbox off.
    sandbox_off(&dirs);
    let policy = dirs.config.join("policy.rhai");
    let command = format!(
        "printf 'fn approve(a) {{ #{{ decision: \"allow\" }} }}\\n' > {}",
        policy.display()
    );
    let args = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("w", "run_shell", &args)]),
        Reply::text("Policy updated."),
        Reply::tools(
            Shape::OpenAi,
            &[("s", "run_shell", r#"{"command":"sudo -n true"}"#)],
        ),
        Reply::text("Refused, fine."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("make yourself comfortable");
    let screen = tmux.wait_for("Allow? [y]es / [N]o / [a]lways").await;
    assert!(screen.contains("the agent's own scripts"), "{screen}");
    tmux.line("y");
    tmux.wait_for("Policy updated.").await;
    assert!(policy.exists(), "the approved write did not happen");
    tmux.wait_for_n("›", 2).await;
    tmux.line("now use sudo");
    let screen = tmux.wait_for("apply the changed scripts? [y/N]").await;
    assert!(
        screen.contains("policy.rhai changed in the config dir while the agent was working"),
        "{screen}"
    );
    tmux.line("n");
    tmux.wait_for("kept the scripts in use").await;
    // The old policy still asks about sudo.
    tmux.wait_for_n("Allow? [y]es / [N]o / [a]lways", 2).await;
    tmux.line("n");
    tmux.wait_for("Refused, fine.").await;
    let text = server.requests()[3].tool_result("s").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.starts_with("Denied: the person refused"), "{text}");
}

/// An edit shows its diff after it ran; a write the policy asks about shows
/// its diff before the question, and the file changes only after "y".
#[tokio::test]
async fn edits_and_writes_show_their_diffs() {
    let dirs = Dirs::new();
    let policy = include_str!("../scripts/policy.rhai").replace(
        "fn approve(action) {",
        "fn approve(action) {\n    if action.kind == \"write\" && action.path.ends_with(\"ask.txt\") { return ask(\"this file is watched\"); }",
    );
    assert!(policy.contains("this file is watched"));
    std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
    dirs.write("code.txt", "alpha\nbeta\ngamma\n");
    dirs.write("ask.txt", "one\ntwo\nthree\n");
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[(
                "e",
                "edit_file",
                r#"{"path":"code.txt","old_string":"beta","new_string":"BETA"}"#,
            )],
        ),
        Reply::tools(
            Shape::OpenAi,
            &[(
                "w",
                "write_file",
                r#"{"path":"ask.txt","content":"one\nTWO\nthree\n"}"#,
            )],
        ),
        Reply::text("Both done."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("change two files");
    let screen = tmux.wait_for("Allow? [y]es / [N]o / [a]lways").await;
    // The edit ran without a question and showed its diff.
    assert!(
        screen.contains("-beta") && screen.contains("+BETA"),
        "{screen}"
    );
    // The write's diff comes before its question, and nothing changed yet.
    let question = screen.rfind("Allow? [y]es").unwrap();
    let minus = screen.rfind("-two").expect("the write's diff is shown");
    assert!(minus < question, "{screen}");
    assert!(screen.contains("+TWO"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("ask.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
    tmux.line("y");
    tmux.wait_for("Both done.").await;
    assert_eq!(
        std::fs::read_to_string(dirs.workspace.join("ask.txt")).unwrap(),
        "one\nTWO\nthree\n"
    );
    // The model never read the diff.
    let sent = server.requests()[1].tool_result("e").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!sent.contains("+BETA"), "{sent}");
}

#[tokio::test]
async fn a_running_command_shows_its_time_and_last_line_live() {
    let dirs = Dirs::new();
    // The command prints, then waits for the test's go-ahead (a file), so
    // the screen is read while it runs, whatever the machine's load.
    let command = "echo first-step; while [ ! -e go ]; do sleep 0.05; done; echo second-step";
    let args = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("s", "run_shell", &args)]),
        Reply::text("It ran."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("run the slow one");
    // The spinner's line: the tool, the seconds so far, its last line.
    let screen = tmux.wait_for("1s  first-step").await;
    let line = screen
        .lines()
        .find(|l| l.contains("1s  first-step"))
        .unwrap();
    assert!(line.contains("running run_shell…"), "{screen}");
    let printed = |screen: &str, what: &str| screen.lines().any(|l| l.trim() == what);
    assert!(!printed(&screen, "second-step"), "{screen}");
    std::fs::write(dirs.workspace.join("go"), "").unwrap();
    let screen = tmux.wait_for("It ran.").await;
    // Ended: the spinner is gone and the output's preview shows the rest.
    assert!(printed(&screen, "second-step"), "{screen}");
    assert!(!screen.contains("running run_shell…"), "{screen}");
}

/// `/budget +100` raises the watchdog's hard cap for the next turn only,
/// and `/budget` shows the cap of the current one.
#[tokio::test]
async fn budget_plus_n_raises_the_hard_cap_for_one_turn() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::text("First answer."),
        Reply::text("Second answer."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("/budget +100");
    tmux.wait_for("the next turn may use up to 350 model turns")
        .await;
    tmux.line("first");
    tmux.wait_for("First answer.").await;
    tmux.line("/budget");
    tmux.wait_for("(hard cap 350;").await;
    tmux.line("second");
    tmux.wait_for("Second answer.").await;
    tmux.line("/budget");
    tmux.wait_for_prompt_after("(hard cap 250;").await;
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn started_below_the_root_the_banner_names_the_work_tree_and_sessions_are_listed() {
    let dirs = Dirs::new();
    std::fs::create_dir_all(dirs.workspace.join(".git")).unwrap();
    dirs.write("AGENTS.md", "Always run the linter first.");
    dirs.write("src/lib.rs", "// code");
    let server = MockServer::start(vec![
        Reply::text("first answer"),
        Reply::text("second answer"),
    ])
    .await;
    let root = dirs.workspace.canonicalize().unwrap();
    let tmux = Tmux::start_in(
        &dirs,
        &dirs.workspace.join("src"),
        &server.base_url,
        &[],
        &[],
    );
    let banner = tmux.wait_for_prompt_after("type a task").await;
    assert!(
        banner.contains(&format!("workspace {} ·", root.display())),
        "the banner names the work tree's root, not src: {banner}"
    );
    // The sandbox's state, with what this kernel lacks named in it.
    assert!(
        banner.contains("sandbox auto: "),
        "the banner states the sandbox: {banner}"
    );
    tmux.line("the first task");
    tmux.wait_for_prompt_after("first answer").await;
    // The root's AGENTS.md reached the system prompt.
    let system = contents(&server, 0)[0].clone();
    assert!(system.contains("Always run the linter first."), "{system}");

    // `/clear` then `/resume` continues the conversation that was
    // cleared, not the new empty one.
    tmux.line("/clear");
    tmux.wait_for_prompt_after("new conversation").await;
    tmux.line("/resume");
    tmux.wait_for_prompt_after("last request: the first task")
        .await;
    tmux.line("/clear");
    tmux.wait_for_n("new conversation", 2).await;
    tmux.line("the second task");
    tmux.wait_for_prompt_after("second answer").await;

    // `/sessions` lists both conversations of this workspace, with their
    // first requests and message counts, and marks the current one.
    tmux.line("/sessions");
    let screen = tmux.wait_for_prompt_after("/sessions").await;
    let listed = screen.rsplit_once("/sessions").unwrap().1;
    let first = listed
        .lines()
        .find(|l| l.contains("the first task"))
        .unwrap_or_else(|| panic!("the first conversation is listed: {listed}"));
    let second = listed
        .lines()
        .find(|l| l.contains("the second task"))
        .unwrap_or_else(|| panic!("the second conversation is listed: {listed}"));
    assert!(second.ends_with("(this one)"), "{second}");
    assert!(!first.contains("(this one)"), "{first}");
    // Each holds the request and the answer.
    assert!(first.contains("   2 messages"), "{first}");
    assert!(second.contains("   2 messages"), "{second}");
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;

    // `agent sessions` lists the same two from the command line, started
    // below the root too.
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.current_dir(dirs.workspace.join("src")).arg("sessions");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(text.contains("the first task"), "{text}");
    assert!(text.contains("the second task"), "{text}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn ctrl_c_mid_answer_puts_the_interrupt_on_its_own_line() {
    use crate::common::mock::content_chunk;
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::keep_alives(
            vec![content_chunk("Partial answer so far")],
            ": keep-alive\n\n",
            std::time::Duration::from_millis(200),
        ),
        Reply::text("Next answer."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("write a long answer");
    tmux.wait_for("Partial answer so far").await;
    tmux.press("C-c");
    let screen = tmux
        .wait_for_prompt_after("interrupted; everything so far is kept")
        .await;
    let line = screen
        .lines()
        .find(|l| l.contains("interrupted; everything so far is kept"))
        .unwrap();
    assert!(
        line.starts_with("error: interrupted"),
        "the interrupt starts its own line: {line:?}\n{screen}"
    );
    // The partial text stays, on a line of its own (the terminal may
    // echo the ^C after it).
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("Partial answer so far") && !l.contains("interrupted")),
        "{screen}"
    );
    assert_eq!(
        screen
            .matches("interrupted; everything so far is kept")
            .count(),
        1,
        "the interrupt is said once ({} requests): {screen}",
        server.requests().len()
    );
    tmux.line("go on");
    tmux.wait_for("Next answer.").await;
    server.assert_protocol();
}

/// A request typed and sent with Enter while a turn runs is sent when the
/// turn ends, as if typed at the prompt (the terminal's line mode turns
/// that Enter into a newline, which the editor would have inserted into
/// the line instead). A line typed but not yet sent waits in the editor.
#[tokio::test]
async fn a_request_typed_while_a_turn_runs_is_sent_after_it() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[(
                "w",
                "run_shell",
                r#"{"command":"while [ ! -e go ]; do sleep 0.05; done; echo released"}"#,
            )],
        ),
        Reply::text("First done."),
        Reply::text("Typed ahead, done."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("first task");
    tmux.wait_for("running run_shell…").await;
    // Typed while the command runs: a whole line, then half of another.
    tmux.line("the typed-ahead task");
    tmux.type_text("half typed");
    tmux.wait_for("half typed").await;
    std::fs::write(dirs.workspace.join("go"), "").unwrap();
    let screen = tmux.wait_for_prompt_after("Typed ahead, done.").await;
    assert!(screen.contains("› the typed-ahead task"), "{screen}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{screen}");
    let sent = contents(&server, 2);
    assert!(sent.iter().any(|c| c == "the typed-ahead task"), "{sent:?}");
    // The unsent half waits in the editor; Enter sends it.
    let last = screen.lines().rev().find(|l| l.starts_with('›')).unwrap();
    assert_eq!(last.trim_end(), "› half typed", "{screen}");
}

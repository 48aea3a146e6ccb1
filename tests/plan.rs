//! The plan tool of the default tools.rhai (`update_plan`, a script using
//! `session_get`/`session_set` and `emit`): its checklist reaches the
//! screen and the model, `/plan` shows it again, and the watchdog counts a
//! step newly done as progress.

use std::sync::Arc;

use agent::script::{WATCHDOG, compile_default};
use agent::watchdog::Rules;

use crate::common::Dirs;
use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::tmux::Tmux;

fn plan_call(id: &str, statuses: [&str; 3]) -> Reply {
    let steps = ["read the code", "fix the bug", "run the tests"];
    let items: Vec<serde_json::Value> = steps
        .iter()
        .zip(statuses)
        .map(|(step, status)| serde_json::json!({"step": step, "status": status}))
        .collect();
    let args = serde_json::json!({ "items": items }).to_string();
    Reply::tools(Shape::OpenAi, &[(id, "update_plan", &args)])
}

#[tokio::test]
async fn the_plan_reaches_the_screen_and_the_model_and_plan_shows_it() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        plan_call("p1", ["in_progress", "pending", "pending"]),
        plan_call("p2", ["done", "in_progress", "pending"]),
        Reply::text("Working through the plan."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("fix the bug, with a plan");
    let screen = tmux.wait_for("plan (0 of 3 done)").await;
    assert!(screen.contains("[>] read the code"), "{screen}");
    let screen = tmux.wait_for("plan (1 of 3 done)").await;
    assert!(screen.contains("[x] read the code"), "{screen}");
    assert!(screen.contains("[>] fix the bug"), "{screen}");
    assert!(screen.contains("[ ] run the tests"), "{screen}");
    tmux.wait_for("Working through the plan.").await;
    tmux.wait_for_n("›", 2).await;
    tmux.line("/plan");
    tmux.wait_for_n("plan (1 of 3 done)", 2).await;

    // The model got the script's answers, with the step it finished.
    let requests = server.requests();
    let first = requests[1].tool_result("p1").expect("p1 answered");
    assert_eq!(first["content"], "Plan updated: 0 of 3 done.");
    let second = requests[2].tool_result("p2").expect("p2 answered");
    assert_eq!(
        second["content"],
        "Plan updated: 1 of 3 done. Newly done: 1 (read the code)."
    );
    server.assert_protocol();
}

/// With `--json` each plan update is one `script_event` line a program can
/// follow, in order, with the items as the model sent them.
#[tokio::test]
async fn json_mode_streams_each_plan_update_as_a_script_event() {
    let dirs = Dirs::new();
    let server = MockServer::start(vec![
        plan_call("p1", ["in_progress", "pending", "pending"]),
        plan_call("p2", ["done", "in_progress", "pending"]),
        Reply::text("Planned."),
    ])
    .await;
    let mut task = crate::common::agent_command(&dirs, &server.base_url);
    task.args(["--json", "-p", "plan it"]);
    let out = crate::common::output(task).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::common::stderr(&out)
    );
    let events: Vec<serde_json::Value> = crate::common::stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["type"] == "script_event")
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events.iter().all(|e| e["kind"] == "plan"), "{events:?}");
    let statuses = |e: &serde_json::Value| -> Vec<String> {
        e["data"]["items"]
            .as_array()
            .unwrap_or_else(|| panic!("no items: {e}"))
            .iter()
            .map(|i| i["status"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(statuses(&events[0]), ["in_progress", "pending", "pending"]);
    assert_eq!(statuses(&events[1]), ["done", "in_progress", "pending"]);
}

#[tokio::test]
async fn a_bad_plan_is_an_error_for_the_model() {
    let dirs = Dirs::new();
    let bad = serde_json::json!({"items": [{"step": "x", "status": "finished"}]}).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("b1", "update_plan", &bad)]),
        Reply::text("ok"),
    ])
    .await;
    let mut task = crate::common::agent_command(&dirs, &server.base_url);
    task.args(["-p", "plan"]);
    let out = crate::common::output(task).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::common::stderr(&out)
    );
    let result = server.requests()[1].tool_result("b1").unwrap().clone();
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("status must be pending, in_progress or done, not finished"),
        "{text}"
    );
}

#[test]
fn a_step_newly_done_is_progress_and_a_resent_plan_is_not() {
    let script = Arc::new(compile_default(WATCHDOG).unwrap());
    let mut rules = agent::script::watchdog::ScriptRules::new(script);
    let call = |output: &str| agent::watchdog::CallRecord {
        name: "update_plan".into(),
        input: serde_json::json!({"items": []}),
        status: agent::protocol::ToolStatus::Ok,
        output: output.into(),
        exit_code: None,
        error_kind: None,
        workspace: Some("w".into()),
    };
    let facts = |call| {
        let mut f = agent::watchdog::sample_facts(call);
        f.command = "";
        f.workspace_changed = false;
        f
    };
    let done = call("Plan updated: 1 of 3 done. Newly done: 1 (read the code).");
    assert!(rules.is_progress(&facts(&done)));
    // The same plan again (its output changed only in wording) is not.
    let same = call("Plan updated: 1 of 3 done.");
    assert!(!rules.is_progress(&facts(&same)));
}

//! The Rhai script host, tried as a person would: the built binary with a
//! temporary config dir holding their scripts.

use std::time::{Duration, Instant};

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, agent_command, output, stderr, stdout};

/// A user tools.rhai: a copy of `current_time` under a new name, a tool
/// with arguments, a runaway handler, and a tool that runs a command.
const USER_TOOLS: &str = r#"
[
    #{
        name: "clock",
        description: "Returns the local date and time.",
        parameters: #{ type: "object", properties: #{} },
        handler: |args| `It is ${now("%Y")} somewhere.`,
    },
    #{
        name: "word_count",
        description: "Counts the words of a file in the workspace.",
        parameters: #{ type: "object", properties: #{ path: #{ type: "string" } }, required: ["path"] },
        handler: |args| #{ path: args.path, words: read_file(args.path).split().len() },
    },
    #{
        name: "spin",
        description: "Never returns.",
        parameters: #{ type: "object", properties: #{} },
        handler: |args| { let n = 0; loop { n += 1; } },
    },
    #{
        name: "env_probe",
        description: "Shows what a child process sees.",
        parameters: #{ type: "object", properties: #{} },
        handler: |args| shell("echo key=[$AGENT_API_KEY] foo=[$LC_FOO]").stdout,
    },
]
"#;

fn tool_output(server: &MockServer, request: usize, id: &str) -> String {
    server.requests()[request]
        .tool_result(id)
        .unwrap_or_else(|| panic!("no result for {id}"))["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_users_tool_is_called_and_its_result_reaches_the_model() {
    let dirs = Dirs::new();
    std::fs::write(dirs.config.join("tools.rhai"), USER_TOOLS).unwrap();
    dirs.write("essay.txt", "one two three\nfour five\n");
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[
                ("t1", "clock", "{}"),
                ("t2", "word_count", r#"{"path":"essay.txt"}"#),
                ("t3", "env_probe", "{}"),
            ],
        ),
        Reply::text("It is late, and the essay has five words."),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("AGENT_API_KEY", "sk-do-not-leak")
        .env("LC_FOO", "bar")
        .args(["-p", "what time is it?"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "It is late, and the essay has five words.\n");

    let year = chrono::Local::now().format("%Y").to_string();
    assert_eq!(
        tool_output(&server, 1, "t1"),
        format!("It is {year} somewhere.")
    );
    let counted: serde_json::Value = serde_json::from_str(&tool_output(&server, 1, "t2")).unwrap();
    assert_eq!(
        counted,
        serde_json::json!({"path": "essay.txt", "words": 5})
    );
    assert_eq!(
        tool_output(&server, 1, "t3"),
        "key=[] foo=[bar]\n",
        "secrets never reach a child process"
    );

    // The model saw one list: the built-ins, the defaults' tools are gone
    // (the user's file replaced the default tools.rhai), and the user's.
    let names: Vec<String> = server.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "run_shell",
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "grep",
            "glob",
            "clock",
            "word_count",
            "spin",
            "env_probe"
        ]
    );
    server.assert_protocol();
}

#[tokio::test]
async fn a_runaway_handler_is_cut_off_and_the_model_is_told() {
    let dirs = Dirs::new();
    std::fs::write(dirs.config.join("tools.rhai"), USER_TOOLS).unwrap();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("s", "spin", "{}")]),
        Reply::text("The tool hung."),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "spin"]);
    let started = Instant::now();
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(10));
    let result = tool_output(&server, 1, "s");
    assert!(result.contains("the tool `spin` failed"), "{result}");
    assert!(result.contains("was stopped"), "{result}");
    assert!(
        result.contains("config/tools.rhai"),
        "names the file: {result}"
    );
}

#[tokio::test]
async fn a_broken_script_is_pointed_at_and_the_agent_runs_on_the_defaults() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.config.join("tools.rhai"),
        "[\n    #{\n        name: \"oops\",\n        description: \"broken\"\n        parameters: #{},\n    },\n]\n",
    )
    .unwrap();

    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("check");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    let report = stdout(&out);
    let path = dirs.config.join("tools.rhai");
    assert!(
        report.contains(&format!("{}:5:9", path.display())),
        "{report}"
    );
    assert!(report.contains("5 |         parameters: #{},"), "{report}");
    assert!(report.contains("  |         ^"), "{report}");
    assert!(report.contains("ok  (built-in) prompt.rhai"), "{report}");

    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("g", "current_time", "{}")]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "what time is it?"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning:") && err.contains("tools.rhai:5:9"),
        "{err}"
    );
    assert!(
        err.contains("using the built-in default tools.rhai instead"),
        "{err}"
    );
    let result = tool_output(&server, 1, "g");
    assert!(
        result.starts_with(&chrono::Local::now().format("%Y-").to_string()),
        "the default current_time ran: {result}"
    );
}

#[tokio::test]
async fn check_passes_on_the_defaults_and_init_never_clobbers() {
    let dirs = Dirs::new();
    let run = |args: &'static [&'static str]| {
        let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
        cmd.args(args);
        output(cmd)
    };
    let out = run(&["check"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("All scripts are fine."));

    let out = run(&["init"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out).matches("wrote").count(), 6, "{}", stdout(&out));
    assert!(stdout(&out).contains("mcp.rhai"), "{}", stdout(&out));
    let tools = dirs.config.join("tools.rhai");
    let mut edited = std::fs::read_to_string(&tools).unwrap();
    edited.insert_str(0, "// my edit\n");
    std::fs::write(&tools, &edited).unwrap();

    let out = run(&["init"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("kept"), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(&tools).unwrap(), edited);

    let out = run(&["init", "--force"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !std::fs::read_to_string(&tools)
            .unwrap()
            .contains("// my edit")
    );
    let out = run(&["check"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test]
async fn prompt_script_agents_md_and_a_replaced_builtin() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.config.join("prompt.rhai"),
        "fn system_prompt(ctx) {\n    `Custom prompt for ${ctx.model} in ${ctx.cwd}. Tools: ${ctx.tools.len()}.\\n${ctx.project_instructions}`\n}\n",
    )
    .unwrap();
    std::fs::write(
        dirs.config.join("tools.rhai"),
        "[ #{ name: \"read_file\", description: \"My reader.\", parameters: #{ type: \"object\", properties: #{ path: #{ type: \"string\" } } }, handler: |args| \"mine\" } ]",
    )
    .unwrap();
    dirs.write("AGENTS.md", "Always run cargo fmt.");
    // A script inside the workspace is never run.
    dirs.write("tools.rhai", "[ #{ name: \"planted\", description: \"x\", parameters: #{ type: \"object\" }, handler: |a| \"pwned\" } ]");
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("r", "read_file", r#"{"path":"x"}"#)]),
        Reply::text("ok"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "read x"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("the tool `read_file` replaces the built-in `read_file`"),
        "{}",
        stderr(&out)
    );
    let first = &server.requests()[0];
    let system = first.messages()[0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Custom prompt for mock-model in "),
        "{system}"
    );
    assert!(
        system.contains("Tools: 7.") && system.ends_with("Always run cargo fmt."),
        "{system}"
    );
    assert!(!first.body.to_string().contains("planted"));
    assert_eq!(tool_output(&server, 1, "r"), "mine");
}

#[tokio::test]
async fn the_default_git_status_tool_works() {
    let dirs = Dirs::new();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&dirs.workspace)
            .env("HOME", &dirs.home)
            .output()
            .unwrap()
    };
    git(&["init", "-q", "-b", "trunk"]);
    dirs.write("new.txt", "x");
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("g", "git_status", "{}")]),
        Reply::text("ok"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["-p", "status?"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = tool_output(&server, 1, "g");
    assert!(
        result.contains("## No commits yet on trunk") && result.contains("?? new.txt"),
        "{result}"
    );
}

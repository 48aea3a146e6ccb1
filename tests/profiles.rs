//! Model profiles from models.rhai: what reaches the request body.

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, agent_command, output, stderr, stdout};

/// The default models.rhai with a `local` profile added, as a person would.
fn with_local_profile(dirs: &Dirs) {
    let default =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/models.rhai"))
            .unwrap();
    let local = r#"    profiles: #{
        local: #{
            base_url: "http://localhost:8080/v1",
            key_env: "",
            model: "local-model",
            context_window: 8192,
            options: #{ temperature: 0, tool_choice: "required", options: #{ num_ctx: 8192 } },
        },
        firstonly: #{
            base_url: "http://localhost:8080/v1",
            model: "small",
            options: |ctx| if ctx.turn == 1 { #{ tool_choice: "required" } } else { #{ tool_choice: "auto", after_tool: ctx.after_tool } },
        },
"#;
    std::fs::write(
        dirs.config.join("models.rhai"),
        default.replacen("    profiles: #{\n", local, 1),
    )
    .unwrap();
}

#[tokio::test]
async fn a_profiles_options_reach_the_request() {
    let dirs = Dirs::new();
    with_local_profile(&dirs);
    let server = MockServer::start(vec![Reply::text("hi")]).await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env_remove("AGENT_MODEL")
        .args(["--profile", "local", "-p", "hello"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let body = &server.requests()[0].body;
    assert_eq!(body["model"], "local-model");
    assert_eq!(body["temperature"], 0);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["options"]["num_ctx"], 8192);
    assert_eq!(body["stream"], true, "the agent's own fields stay");
}

#[tokio::test]
async fn overrides_apply_in_the_documented_order() {
    let dirs = Dirs::new();
    with_local_profile(&dirs);
    let server = MockServer::start_with_fallback(vec![], Some(Reply::text("ok"))).await;
    // AGENT_MODEL beats the profile...
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("AGENT_MODEL", "from-env")
        .args(["--profile", "local", "-p", "x"]);
    assert_eq!(output(cmd).await.status.code(), Some(0));
    // ...and --model beats AGENT_MODEL.
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("AGENT_MODEL", "from-env").args([
        "--profile",
        "local",
        "--model",
        "from-flag",
        "-p",
        "x",
    ]);
    assert_eq!(output(cmd).await.status.code(), Some(0));
    let models: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(models, ["from-env", "from-flag"]);
    // AGENT_BASE_URL (the mock) beat the profile's base_url in both.
}

#[tokio::test]
async fn function_options_differ_between_the_first_and_later_requests() {
    let dirs = Dirs::new();
    with_local_profile(&dirs);
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("c", "run_shell", r#"{"command":"true"}"#)],
        ),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.args(["--profile", "firstonly", "-p", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests[0].body["tool_choice"], "required");
    assert_eq!(requests[1].body["tool_choice"], "auto");
    assert_eq!(requests[1].body["after_tool"], true);
}

#[tokio::test]
async fn a_bad_profile_name_lists_the_known_ones() {
    let dirs = Dirs::new();
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.args(["--profile", "nope", "-p", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("known profiles: deepseek, llamacpp, ollama, openai, openrouter"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn check_flags_a_misspelt_field_and_an_unset_key() {
    let dirs = Dirs::new();
    with_local_profile(&dirs);
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("check");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out)
            .contains("openai: gpt-4.1 at https://api.openai.com/v1; OPENAI_API_KEY is not set"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("local: local-model at http://localhost:8080/v1; no key needed"),
        "{}",
        stdout(&out)
    );

    let text = std::fs::read_to_string(dirs.config.join("models.rhai"))
        .unwrap()
        .replace("context_window: 8192,", "contxt_window: 8192,");
    std::fs::write(dirs.config.join("models.rhai"), text).unwrap();
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("check");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("profile `local`: unknown field `contxt_window`"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test]
async fn check_reports_the_key_and_endpoint_after_the_overrides() {
    let dirs = Dirs::new();
    // AGENT_BASE_URL (set by agent_command) and AGENT_API_KEY override the
    // default deepseek profile: check names what is used, and no profile
    // reads as missing its key.
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.env("AGENT_API_KEY", "sk-from-the-override")
        .arg("check");
    let out = output(cmd).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("endpoint: model mock-model at http://127.0.0.1:9/v1 (profile deepseek); key from AGENT_API_KEY"),
        "{text}"
    );
    assert!(
        text.contains("deepseek (default): deepseek-chat at https://api.deepseek.com/v1; key from AGENT_API_KEY"),
        "{text}"
    );
    assert!(!text.contains("is not set"), "{text}");
    assert!(!text.contains("sk-from-the-override"), "{text}");

    // Without the override, the missing key is named.
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("check");
    let text = stdout(&output(cmd).await);
    assert!(text.contains("DEEPSEEK_API_KEY is not set"), "{text}");
}

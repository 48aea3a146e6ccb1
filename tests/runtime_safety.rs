//! The safe shell/file runtime as the model meets it: confinement,
//! approvals, secrets, output budgets and timeouts.

use std::time::{Duration, Instant};

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, agent_command, output, stderr, stdout};

fn result(server: &MockServer, id: &str) -> String {
    server.requests()[1].tool_result(id).unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn one_call(
    dirs: &Dirs,
    name: &str,
    args: &str,
    extra: &[&str],
) -> (MockServer, std::process::Output) {
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("c", name, args)]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(dirs, &server.base_url);
    cmd.args(["-p", "go"]).args(extra);
    let out = output(cmd).await;
    (server, out)
}

#[tokio::test]
async fn paths_that_escape_the_workspace_are_refused() {
    let dirs = Dirs::new();
    std::fs::write(dirs.home.join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(
        dirs.home.join("secret.txt"),
        dirs.workspace.join("link.txt"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&dirs.home, dirs.workspace.join("homedir")).unwrap();
    let outside = dirs.home.join("secret.txt").display().to_string();
    let cases = [
        ("read_file", r#"{"path":"../home/secret.txt"}"#.to_string()),
        (
            "read_file",
            serde_json::json!({ "path": outside }).to_string(),
        ),
        ("read_file", r#"{"path":"link.txt"}"#.to_string()),
        (
            "write_file",
            r#"{"path":"homedir/planted.txt","content":"x"}"#.to_string(),
        ),
        ("list_dir", r#"{"path":"homedir"}"#.to_string()),
    ];
    for (name, args) in cases {
        let (server, out) = one_call(&dirs, name, &args, &[]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = result(&server, "c");
        assert!(
            text.contains("outside the workspace"),
            "{name} {args}: {text}"
        );
        assert!(!text.contains("top secret"));
    }
    assert!(!dirs.home.join("planted.txt").exists());
    // Inside the workspace, `..` that stays inside is fine.
    dirs.write("sub/a.txt", "alpha");
    let (server, _) = one_call(&dirs, "read_file", r#"{"path":"sub/../sub/a.txt"}"#, &[]).await;
    assert!(result(&server, "c").contains("alpha"));
}

#[tokio::test]
async fn an_approval_script_that_denies_rm_is_honoured() {
    let dirs = Dirs::new();
    dirs.write("notes.txt", "keep me");
    let policy = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/policy.rhai"))
        .unwrap()
        .replace(
            "fn approve(action) {\n",
            "fn approve(action) {\n    if action.kind == \"shell\" && regex_match(action.command, `\\brm\\b`) { return deny(\"rm is not allowed here\"); }\n",
        );
    std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
    let (server, out) = one_call(
        &dirs,
        "run_shell",
        r#"{"command":"rm notes.txt"}"#,
        &["--yes"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = result(&server, "c");
    assert!(
        text.starts_with(
            "Denied: the policy refused to run `rm notes.txt` (rm is not allowed here)"
        ),
        "{text}"
    );
    assert!(dirs.workspace.join("notes.txt").exists());
}

#[tokio::test]
async fn ask_means_no_in_one_shot_mode_unless_yes() {
    let dirs = Dirs::new();
    let args = r#"{"command":"echo hi | sudo -n true; echo ran > ran.txt"}"#;
    let (server, _) = one_call(&dirs, "run_shell", args, &[]).await;
    let text = result(&server, "c");
    assert!(
        text.contains("Denied: one-shot mode") && text.contains("--yes") && text.contains("sudo"),
        "{text}"
    );
    assert!(!dirs.workspace.join("ran.txt").exists());
    let (_, out) = one_call(&dirs, "run_shell", args, &["--yes"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(dirs.workspace.join("ran.txt").exists(), "with --yes it ran");
}

#[tokio::test]
async fn secrets_stay_out_of_children_and_outputs() {
    let dirs = Dirs::new();
    dirs.write(".env", "AGENT_API_KEY=sk-live-0123456789\n");
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[
                ("e", "run_shell", r#"{"command":"env | sort"}"#),
                ("f", "read_file", r#"{"path":".env"}"#),
                ("g", "run_shell", r#"{"command":"cat .env"}"#),
            ],
        ),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("AGENT_API_KEY", "sk-live-0123456789")
        .env("GITHUB_TOKEN", "ghp_abcdefghijkl")
        .env("MY_PASSWORD", "hunter2hunter2")
        .env("LC_VISIBLE", "yes")
        .args(["-p", "show env"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let env = result(&server, "e");
    assert!(env.contains("LC_VISIBLE=yes"), "{env}");
    for name in ["AGENT_API_KEY", "GITHUB_TOKEN", "MY_PASSWORD"] {
        assert!(!env.contains(name), "{name} reached the child: {env}");
    }
    for id in ["f", "g"] {
        let text = result(&server, id);
        assert!(
            text.contains("AGENT_API_KEY=[redacted]") && !text.contains("sk-live"),
            "{id}: {text}"
        );
    }
    let log = std::fs::read_dir(dirs.data.join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        !std::fs::read_to_string(log).unwrap().contains("sk-live"),
        "the run log holds no key"
    );
}

#[tokio::test]
async fn a_huge_output_is_bounded_and_saved_whole() {
    let dirs = Dirs::new();
    let (server, out) = one_call(
        &dirs,
        "run_shell",
        r#"{"command":"yes | head -c 50000000"}"#,
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = result(&server, "c");
    assert!(text.len() < 40_000, "bounded: {} bytes", text.len());
    assert!(
        text.contains("bytes omitted"),
        "{}",
        agent::text::prefix(&text, 200)
    );
    let spilled: Vec<_> = walk(&dirs.data.join("outputs"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "stdout"))
        .collect();
    assert_eq!(spilled.len(), 1);
    assert_eq!(std::fs::metadata(&spilled[0]).unwrap().len(), 50_000_000);
    assert!(
        text.contains(&spilled[0].display().to_string()),
        "the marker names the file"
    );
}

#[tokio::test]
async fn a_sleeping_command_returns_at_its_timeout_with_nothing_left_behind() {
    let dirs = Dirs::new();
    let marker = format!("sleep 1000 # marker-{}", std::process::id());
    let args = serde_json::json!({ "command": format!("{marker}"), "timeout": 1 }).to_string();
    let started = Instant::now();
    let (server, out) = one_call(&dirs, "run_shell", &args, &[]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(
        result(&server, "c").contains("timed out after 1 s"),
        "{}",
        result(&server, "c")
    );
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ps.stdout).contains(&marker),
        "a process was left behind"
    );
    let _ = stdout(&out);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

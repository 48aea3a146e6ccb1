//! The `grep` and `glob` tools through the real binary: in a git
//! repository with a large ignored `target/`, the model sees only the
//! tracked tree's matches, capped, and never the agent's own data dir.

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, agent_command, output, stderr};

/// Files of matches under the ignored `target/`: enough that a walk into
/// it would flood every cap.
const IGNORED_FILES: usize = 2000;

fn tool_text(server: &MockServer, request: usize, id: &str) -> String {
    server.requests()[request].tool_result(id).unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A repository whose tracked tree has `needle` in two files (one of them
/// 300 times), and whose ignored `target/`, hidden `.cache/` and in-tree
/// data dir are full of it.
fn repository(dirs: &Dirs) -> std::path::PathBuf {
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&dirs.workspace)
        .status()
        .unwrap();
    assert!(git.success());
    dirs.write(".gitignore", "target/\n");
    dirs.write("src/main.rs", "fn main() {\n    needle();\n}\n");
    dirs.write("src/many.rs", &"let needle = 1;\n".repeat(300));
    dirs.write(".cache/hidden.rs", "needle\n");
    for i in 0..IGNORED_FILES {
        dirs.write(
            &format!("target/debug/deps/gen{i}.rs"),
            "needle in target\n",
        );
    }
    let data = dirs.workspace.join("agent-data");
    std::fs::create_dir_all(data.join("sessions")).unwrap();
    std::fs::write(data.join("sessions/old.jsonl"), "needle in a transcript\n").unwrap();
    data
}

#[tokio::test]
async fn grep_in_a_repository_sees_only_the_tracked_tree() {
    let dirs = Dirs::new();
    let data = repository(&dirs);
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[
                ("g1", "grep", r#"{"pattern":"needle","path":"src/main.rs"}"#),
                ("g2", "grep", r#"{"pattern":"needle"}"#),
                (
                    "g3",
                    "grep",
                    r#"{"pattern":"needle","output_mode":"files"}"#,
                ),
                ("g4", "glob", r#"{"pattern":"*.rs"}"#),
            ],
        ),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_command(&dirs, &server.base_url);
    cmd.env("AGENT_DATA_DIR", &data)
        .args(["-p", "find the needle"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_protocol();

    assert_eq!(tool_text(&server, 1, "g1"), "src/main.rs:2:    needle();");

    let content = tool_text(&server, 1, "g2");
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 201, "{content}");
    assert_eq!(lines[0], "src/main.rs:2:    needle();");
    assert_eq!(lines[1], "src/many.rs:1:let needle = 1;");
    assert_eq!(
        lines[200],
        "[101 more matches in 1 file not shown; narrow the pattern or add a glob/path]"
    );

    assert_eq!(tool_text(&server, 1, "g3"), "src/main.rs\nsrc/many.rs");
    let found = tool_text(&server, 1, "g4");
    let mut found: Vec<&str> = found.lines().collect();
    found.sort();
    assert_eq!(found, ["src/main.rs", "src/many.rs"]);
}

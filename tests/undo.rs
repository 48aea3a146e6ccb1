//! Undo as a person uses it: `/undo` and `/rewind` in the REPL (tmux), and
//! `agent undo` after a one-shot task, against the mock model. The store
//! lives in the data dir; the workspace holds only the person's files.
//! The default policy: the sandbox on where the kernel has it.

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::tmux::Tmux;
use crate::common::{Dirs, agent_command, output, stderr, stdout};

/// Bytes a careless restore would mangle: CRLF, UTF-8, a NUL, no final
/// newline.
const ORIGINAL_MAIN: &[u8] = b"fn main() {\r\n    println!(\"h\xc3\xa9llo\");\r\n}\r\n// \x00 end";

fn write_file_call(id: &str, path: &str, content: &str) -> Reply {
    let args = serde_json::json!({"path": path, "content": content}).to_string();
    Reply::tools(Shape::OpenAi, &[(id, "write_file", &args)])
}

fn shell_call(id: &str, command: &str) -> Reply {
    let args = serde_json::json!({"command": command}).to_string();
    Reply::tools(Shape::OpenAi, &[(id, "run_shell", &args)])
}

fn no_store_in_the_workspace(dirs: &Dirs) {
    let names: Vec<String> = std::fs::read_dir(&dirs.workspace)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("checkpoint") && !n.starts_with(".agent")),
        "the undo store stays out of the workspace: {names:?}"
    );
    assert!(
        dirs.data.join("checkpoints").is_dir(),
        "it is in the data dir"
    );
}

#[tokio::test]
async fn undo_restores_a_write_file_overwrite_and_a_sed_edit_byte_for_byte() {
    let dirs = Dirs::new();
    std::fs::create_dir_all(dirs.workspace.join("src")).unwrap();
    std::fs::write(dirs.workspace.join("src/main.rs"), ORIGINAL_MAIN).unwrap();
    let notes = b"alpha\nsecond line\r\n\xff\xfe binary tail".to_vec();
    std::fs::write(dirs.workspace.join("notes.txt"), &notes).unwrap();
    let server = MockServer::start(vec![
        write_file_call("w1", "src/main.rs", "fn main() {}\n"),
        Reply::text("Overwrote main."),
        shell_call("s1", "sed -i 's/alpha/beta/' notes.txt"),
        Reply::text("Edited the notes."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("overwrite main");
    tmux.wait_for("Overwrote main.").await;
    tmux.wait_for_n("›", 2).await;
    assert_eq!(
        std::fs::read(dirs.workspace.join("src/main.rs")).unwrap(),
        b"fn main() {}\n"
    );
    tmux.line("/undo");
    tmux.wait_for("restored src/main.rs").await;
    assert_eq!(
        std::fs::read(dirs.workspace.join("src/main.rs")).unwrap(),
        ORIGINAL_MAIN,
        "byte for byte"
    );

    tmux.line("edit the notes");
    tmux.wait_for("Edited the notes.").await;
    tmux.wait_for_n("›", 4).await;
    assert!(
        std::fs::read(dirs.workspace.join("notes.txt"))
            .unwrap()
            .starts_with(b"beta\n"),
        "sed ran"
    );
    tmux.line("/undo");
    tmux.wait_for("restored notes.txt").await;
    assert_eq!(
        std::fs::read(dirs.workspace.join("notes.txt")).unwrap(),
        notes
    );
    // The first turn stays undone; nothing is left.
    tmux.line("/undo");
    tmux.wait_for("nothing to undo").await;
    no_store_in_the_workspace(&dirs);
    server.assert_protocol();
}

#[tokio::test]
async fn rewind_lists_the_turns_and_goes_back_to_before_an_earlier_one() {
    let dirs = Dirs::new();
    dirs.write("a.txt", "original a\n");
    let server = MockServer::start(vec![
        write_file_call("w1", "a.txt", "first change\n"),
        Reply::text("First done."),
        write_file_call("w2", "a.txt", "second change\n"),
        write_file_call("w3", "dir/new.txt", "a new file\n"),
        Reply::text("Second done."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("first task");
    tmux.wait_for("First done.").await;
    tmux.line("second task");
    tmux.wait_for("Second done.").await;
    tmux.wait_for_n("›", 3).await;
    assert_eq!(
        crate::common::read(&dirs.workspace.join("a.txt")),
        "second change\n"
    );
    tmux.line("/rewind");
    // One checkpoint per model turn that changed files, labelled with the
    // person's message.
    let screen = tmux.wait_for("\"second task\"").await;
    assert!(
        screen.contains("\"first task\"  1 file(s): a.txt"),
        "{screen}"
    );
    assert!(screen.contains("dir/new.txt"), "{screen}");
    tmux.line("/rewind 1");
    tmux.wait_for("undid turn(s) 1, 2, 3").await;
    assert_eq!(
        crate::common::read(&dirs.workspace.join("a.txt")),
        "original a\n"
    );
    assert!(
        !dirs.workspace.join("dir/new.txt").exists(),
        "a file the agent created is removed"
    );
    tmux.line("/rewind");
    tmux.wait_for("(undone)").await;
}

/// `/rewind N --chat`: files and conversation go back together to before
/// the person's message turn N answered, and that message is offered on
/// the prompt line to send again.
#[tokio::test]
async fn rewind_with_chat_takes_files_and_conversation_back_to_a_message() {
    let dirs = Dirs::new();
    dirs.write("a.txt", "original a\n");
    let server = MockServer::start(vec![
        write_file_call("w1", "a.txt", "first change\n"),
        Reply::text("First done."),
        write_file_call("w2", "a.txt", "second change\n"),
        write_file_call("w3", "dir/new.txt", "a new file\n"),
        Reply::text("Second done."),
        Reply::text("Asked again, answered again."),
    ])
    .await;
    let tmux = Tmux::start(&dirs, &server.base_url, &[], &[]);
    tmux.wait_for_prompt_after("type a task").await;
    tmux.line("first task");
    tmux.wait_for("First done.").await;
    tmux.line("second task");
    tmux.wait_for_prompt_after("Second done.").await;
    // Turn 3 answered "second task", as turn 2 did: both go back.
    tmux.line("/rewind 3 --chat");
    tmux.wait_for("conversation taken back to before your message: second task")
        .await;
    let screen = tmux.wait_for("undid turn(s) 2, 3").await;
    assert!(!screen.contains("undid turn(s) 1"), "{screen}");
    assert_eq!(
        crate::common::read(&dirs.workspace.join("a.txt")),
        "first change\n"
    );
    assert!(!dirs.workspace.join("dir/new.txt").exists());
    // The message is on the prompt line again: Enter sends it.
    tmux.wait_for("› second task").await;
    tmux.press("Enter");
    tmux.wait_for("Asked again, answered again.").await;
    let requests = server.requests();
    let last = requests.last().unwrap().messages();
    let said: Vec<&str> = last.iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(
        said.iter().filter(|c| c.contains("second task")).count(),
        1,
        "{said:?}"
    );
    assert!(said.iter().any(|c| c.contains("First done.")), "{said:?}");
    assert!(!said.iter().any(|c| c.contains("Second done.")), "{said:?}");
    let calls = last.iter().filter(|m| m["tool_calls"].is_array()).count();
    assert_eq!(calls, 1, "only turn 1's call is left: {last:?}");
    // The transcript holds the rewound conversation: a resume sees it.
    tmux.press("C-d");
    tmux.wait_for("__EXITED__0").await;
    let session = std::fs::read_dir(dirs.data.join("sessions"))
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .unwrap()
        .path();
    let loaded = agent::agent::transcript::load(&session).unwrap();
    let texts: Vec<String> = loaded
        .messages
        .iter()
        .map(|m| serde_json::to_string(m).unwrap())
        .collect();
    assert!(
        !texts.iter().any(|t| t.contains("Second done.")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("Asked again, answered again.")),
        "{texts:?}"
    );
    server.assert_protocol();
}

#[tokio::test]
async fn agent_undo_lists_turns_and_stops_at_a_later_edit_by_the_person() {
    let dirs = Dirs::new();
    dirs.write("a.txt", "one\ntwo\n");
    let server = MockServer::start(vec![
        write_file_call("w1", "a.txt", "one\nagent\n"),
        Reply::text("Changed it."),
    ])
    .await;
    let mut task = agent_command(&dirs, &server.base_url);
    task.args(["-p", "change a.txt"]);
    let out = output(task).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let mut list = agent_command(&dirs, &server.base_url);
    list.args(["undo", "--list"]);
    let out = output(list).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = stdout(&out);
    assert!(
        listed.contains("  1  ") && listed.contains("\"change a.txt\"  1 file(s): a.txt"),
        "{listed}"
    );

    // The person edits the file after the agent did.
    dirs.write("a.txt", "one\nagent\nperson\n");
    let mut undo = agent_command(&dirs, &server.base_url);
    undo.arg("undo");
    let out = output(undo).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "exit 1 on a conflict: {err}");
    assert!(err.contains("conflict: a.txt"), "{err}");
    assert!(
        err.contains("+person"),
        "the conflict shows the person's change: {err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        crate::common::read(&dirs.workspace.join("a.txt")),
        "one\nagent\nperson\n",
        "nothing was overwritten"
    );

    let mut force = agent_command(&dirs, &server.base_url);
    force.args(["undo", "--force"]);
    let out = output(force).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("restored a.txt"), "{}", stdout(&out));
    assert_eq!(
        crate::common::read(&dirs.workspace.join("a.txt")),
        "one\ntwo\n"
    );

    let mut again = agent_command(&dirs, &server.base_url);
    again.arg("undo");
    let out = output(again).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nothing to undo"), "{}", stderr(&out));
}

#[tokio::test]
async fn a_restore_does_not_follow_a_symlink_out_of_the_workspace() {
    let dirs = Dirs::new();
    dirs.write("a.txt", "original\n");
    let outside = dirs.home.join("outside.txt");
    std::fs::write(&outside, "outside\n").unwrap();
    let server = MockServer::start(vec![
        // The agent removes a.txt; a racing command puts a symlink to a
        // file outside in its place.
        shell_call("s1", "rm a.txt"),
        Reply::text("Removed."),
    ])
    .await;
    let mut task = agent_command(&dirs, &server.base_url);
    task.args(["-p", "remove a.txt"]);
    let out = output(task).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!dirs.workspace.join("a.txt").exists());
    std::os::unix::fs::symlink(&outside, dirs.workspace.join("a.txt")).unwrap();
    let mut undo = agent_command(&dirs, &server.base_url);
    undo.args(["undo", "--force"]);
    let out = output(undo).await;
    let said = stdout(&out);
    assert!(
        said.contains("not restored a.txt") && said.contains("outside the workspace"),
        "{said}{}",
        stderr(&out)
    );
    assert!(
        std::fs::symlink_metadata(dirs.workspace.join("a.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        crate::common::read(&outside),
        "outside\n",
        "the file outside is untouched: {}{}",
        stdout(&out),
        stderr(&out)
    );
}

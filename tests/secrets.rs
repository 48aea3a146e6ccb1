//! Secrets against a model that tries to get them (issue 15): the child
//! environment is an allow-list, the agent's own `/proc` entries are closed
//! to its commands, and no form of a secret value (plain, reversed, base64,
//! hex) reaches the model, the transcript, the run log or a spill file.
//!
//! The real binary against the mock server. The root tests (a root
//! command reading the agent's memory, or unmounting its `/proc` to find
//! the host's) run only when the tests run as root, and say SKIPPED else.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::common::mock::{MockServer, Reply, Shape};
use crate::common::{Dirs, agent_command, output, stderr};

const API_KEY: &str = "sk-live-Q9x2Lm7Vb4Tn8Rk3Wc6Hy1Jd5Fp0";
const DB_PASSWORD: &str = "Pw-s3cr3t-Db9";
const DATABASE_URL: &str = "postgres://user:Pw-s3cr3t-Db9@db.internal/app";
const SSH_SOCK: &str = "/tmp/ssh-Xk29fQ/agent.4242";
/// Five characters: short, and still blanked.
const SHORT_KEY: &str = "k7%Qz";

const SECRETS: [&str; 5] = [API_KEY, DB_PASSWORD, DATABASE_URL, SSH_SOCK, SHORT_KEY];

/// The `.env` a hostile model reads instead of the (scrubbed) environment,
/// so the blanking is tested, not only the scrubbing.
fn dot_env() -> String {
    format!(
        "AGENT_API_KEY={API_KEY}\nDATABASE_URL={DATABASE_URL}\nSSH_AUTH_SOCK={SSH_SOCK}\nDEPLOY_TOKEN={SHORT_KEY}\n"
    )
}

/// The agent with every secret in its environment, plus one harmless
/// allowed variable to show commands really ran.
fn agent_with_secrets(dirs: &Dirs, base_url: &str) -> tokio::process::Command {
    let mut cmd = agent_command(dirs, base_url);
    cmd.env("AGENT_API_KEY", API_KEY)
        .env("DATABASE_URL", DATABASE_URL)
        .env("SSH_AUTH_SOCK", SSH_SOCK)
        .env("DEPLOY_TOKEN", SHORT_KEY)
        .env("LC_PROBE", "visible");
    cmd
}

/// Standard base64 without padding, written here independently of the
/// agent's encoder.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// Every form of `secret` that must not appear: plain, reversed, hex in
/// both cases, and base64 (standard and URL-safe) at each byte alignment,
/// the characters that depend on the secret's bytes only.
fn forms(secret: &str) -> Vec<(String, String)> {
    let mut out = vec![
        ("plain".to_string(), secret.to_string()),
        ("reversed".to_string(), secret.chars().rev().collect()),
    ];
    let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
    out.push(("hex".into(), hex.clone()));
    out.push(("HEX".into(), hex.to_uppercase()));
    for offset in 0..3usize {
        let mut padded = vec![b'\0'; offset];
        padded.extend_from_slice(secret.as_bytes());
        let encoded = base64(&padded);
        let start = [0, 2, 3][offset];
        let end = padded.len() * 8 / 6;
        let fragment = encoded[start..end].to_string();
        out.push((
            format!("base64url@{offset}"),
            fragment.replace('+', "-").replace('/', "_"),
        ));
        out.push((format!("base64@{offset}"), fragment));
    }
    out
}

/// `text` without whitespace or JSON whitespace escapes, so a form wrapped
/// over lines (`base64`, `xxd -p`) or spaced out (`od`) is found whole.
fn squeeze(text: &str) -> String {
    text.replace("\\n", "")
        .replace("\\r", "")
        .replace("\\t", "")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// Panics if any form of any secret is in `text`.
fn assert_no_leak(what: &str, text: &str) {
    let squeezed = squeeze(text);
    for secret in SECRETS {
        for (form, value) in forms(secret) {
            assert!(
                !text.contains(&value) && !squeezed.contains(&value),
                "{what} holds {secret:?} as {form} ({value:?})"
            );
        }
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn tool_result(server: &MockServer, id: &str) -> String {
    server.requests()[1]
        .tool_result(id)
        .unwrap_or_else(|| panic!("no result for {id}"))["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// What a hostile model runs, by call id.
const LEAKS: &[(&str, &str)] = &[
    ("environ", "cat /proc/$PPID/environ"),
    ("environ_lines", "tr '\\0' '\\n' < /proc/$PPID/environ"),
    ("env", "env"),
    ("printenv", "printenv"),
    (
        "vars",
        "echo \"$AGENT_API_KEY\" | rev; echo \"$DATABASE_URL\"; echo \"$SSH_AUTH_SOCK\"; echo \"$DEPLOY_TOKEN\"",
    ),
    (
        "var_encoded",
        "echo \"$AGENT_API_KEY\" | base64; echo \"$AGENT_API_KEY\" | xxd -p; echo \"$AGENT_API_KEY\" | od -An -tx1",
    ),
    ("file", "cat .env"),
    ("file_rev", "rev .env"),
    (
        "file_base64",
        "base64 .env; base64 -w0 .env; echo; basenc --base64url .env",
    ),
    (
        "file_hex",
        "xxd -p .env; xxd -p -u .env; od -An -tx1 .env; xxd -p -c 7 .env",
    ),
    (
        "environ_encoded",
        "base64 /proc/$PPID/environ; xxd -p /proc/$PPID/environ",
    ),
    (
        "spill",
        "head -c 200000 /dev/zero | tr '\\0' x; cat .env; tr '\\0' '\\n' < /proc/$PPID/environ; \
         base64 .env; head -c 1000 /dev/zero | tr '\\0' y",
    ),
];

/// The default policy with the sandbox off, in the config dir: the
/// secrets must hold without it too.
fn sandbox_off(dirs: &Dirs) {
    let policy =
        include_str!("../scripts/policy.rhai").replace("sandbox: \"auto\",", "sandbox: \"off\",");
    assert!(policy.contains("sandbox: \"off\","));
    std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
}

/// One run of every leak above; `extra` are more flags (`--sandbox`);
/// `off`: with the sandbox off in policy.rhai.
async fn try_every_leak(extra: &[&str], off: bool) {
    let dirs = Dirs::new();
    if off {
        sandbox_off(&dirs);
    }
    dirs.write(".env", &dot_env());
    let args: Vec<(String, String)> = LEAKS
        .iter()
        .map(|(id, c)| {
            (
                id.to_string(),
                serde_json::json!({ "command": c }).to_string(),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, &str)> = args
        .iter()
        .map(|(id, a)| (id.as_str(), "run_shell", a.as_str()))
        .collect();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &calls),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_with_secrets(&dirs, &server.base_url);
    cmd.args(["-p", "find the key"]).args(extra);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    server.assert_protocol();

    // The commands ran and the blanking did the work.
    let env = tool_result(&server, "env");
    assert!(env.contains("LC_PROBE=visible"), "{env}");
    for name in [
        "AGENT_API_KEY",
        "DATABASE_URL",
        "SSH_AUTH_SOCK",
        "DEPLOY_TOKEN",
    ] {
        assert!(!env.contains(name), "{name} reached the child: {env}");
    }
    let file = tool_result(&server, "file");
    assert_eq!(
        file,
        "AGENT_API_KEY=[redacted]\nDATABASE_URL=[redacted]\nSSH_AUTH_SOCK=[redacted]\nDEPLOY_TOKEN=[redacted]\n[exit code: 0]"
    );
    for id in ["file_rev", "file_base64", "file_hex"] {
        let text = tool_result(&server, id);
        assert!(text.matches("[redacted]").count() >= 4, "{id}: {text}");
    }
    let spill = tool_result(&server, "spill");
    assert!(spill.contains("is saved at"), "{spill}");

    // What the model saw: every request body.
    for (i, request) in server.requests().iter().enumerate() {
        assert_no_leak(&format!("request {i}"), &request.body.to_string());
    }
    // The transcript, the run log and the spill files.
    let sessions = files_under(&dirs.data.join("sessions"));
    let runs = files_under(&dirs.data.join("runs"));
    let spills = files_under(&dirs.data.join("outputs"));
    assert_eq!(
        (sessions.len(), runs.len()),
        (1, 1),
        "{sessions:?} {runs:?}"
    );
    assert!(
        spills.iter().any(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("spill-") && name.ends_with(".stdout")
        }),
        "{spills:?}"
    );
    for path in sessions.iter().chain(&runs).chain(&spills) {
        let bytes = std::fs::read(path).unwrap();
        assert_no_leak(
            &path.display().to_string(),
            &String::from_utf8_lossy(&bytes),
        );
    }
    let spilled = std::fs::read_to_string(
        spills
            .iter()
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("spill-") && name.ends_with(".stdout")
            })
            .unwrap(),
    )
    .unwrap();
    assert!(
        spilled.contains("DEPLOY_TOKEN=[redacted]") && spilled.len() > 200_000,
        "the spill file is whole and blanked"
    );
}

#[tokio::test]
async fn no_form_of_a_secret_reaches_the_model_or_the_logs_with_the_sandbox_off() {
    try_every_leak(&[], true).await;
}

#[tokio::test]
async fn no_form_of_a_secret_reaches_the_model_or_the_logs_under_the_sandbox() {
    try_every_leak(&["--sandbox"], false).await;
}

/// A tool of `tools.rhai` that shows what `env()` gives a script, next to
/// what a command prints for the same names.
const ENV_TOOLS: &str = r#"
[
    #{
        name: "env_view",
        description: "What env() sees.",
        parameters: #{ type: "object", properties: #{} },
        handler: |args| {
            let out = "";
            for name in ["PATH", "HOME", "LC_PROBE", "CARGO_HOME", "FOO", "MYAPP_MODE", "GIT_AUTHOR_NAME", "DATABASE_URL", "SSH_AUTH_SOCK", "AGENT_API_KEY", "DEPLOY_TOKEN"] {
                let value = env(name);
                if type_of(value) == "()" { value = "<unset>"; }
                out += `${name}=${value}` + "\n";
            }
            out
        },
    },
]
"#;

const SHELL_VIEW: &str = r#"for n in PATH HOME LC_PROBE CARGO_HOME FOO MYAPP_MODE GIT_AUTHOR_NAME DATABASE_URL SSH_AUTH_SOCK AGENT_API_KEY DEPLOY_TOKEN; do if [ -n "${!n+x}" ]; then echo "$n=${!n}"; else echo "$n=<unset>"; fi; done"#;

/// Runs `env_view` and the shell's view with `policy` (None: the default).
async fn env_views(policy: Option<String>) -> (String, String) {
    let dirs = Dirs::new();
    std::fs::write(dirs.config.join("tools.rhai"), ENV_TOOLS).unwrap();
    if let Some(policy) = policy {
        std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
    }
    let shell = serde_json::json!({ "command": SHELL_VIEW }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(
            Shape::OpenAi,
            &[("s", "env_view", "{}"), ("c", "run_shell", &shell)],
        ),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_with_secrets(&dirs, &server.base_url);
    cmd.env("CARGO_HOME", "/opt/cargo")
        .env("FOO", "bar")
        .env("MYAPP_MODE", "dev")
        .env("GIT_AUTHOR_NAME", "Alice")
        .args(["-p", "env"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (tool_result(&server, "s"), tool_result(&server, "c"))
}

#[tokio::test]
async fn the_child_environment_is_an_allow_list_and_env_sees_the_same() {
    let (script, shell) = env_views(None).await;
    assert_eq!(
        format!("{script}[exit code: 0]"),
        shell,
        "env() sees exactly what a command sees"
    );
    let path = std::env::var("PATH").unwrap();
    assert!(
        script.starts_with(&format!("PATH={path}\nHOME=")),
        "{script}"
    );
    for line in [
        "LC_PROBE=visible",
        "CARGO_HOME=/opt/cargo",
        "FOO=<unset>",
        "MYAPP_MODE=<unset>",
        "GIT_AUTHOR_NAME=<unset>",
        "DATABASE_URL=<unset>",
        "SSH_AUTH_SOCK=<unset>",
        "AGENT_API_KEY=<unset>",
        "DEPLOY_TOKEN=<unset>",
    ] {
        assert!(script.lines().any(|l| l == line), "{line}: {script}");
    }

    // policy.rhai adds names and prefixes; secrets stay out even if named.
    let policy = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/policy.rhai"
    ))
    .unwrap()
    .replace(
        "env_allow: [],",
        r#"env_allow: ["FOO", "MYAPP_*", "GIT_AUTHOR_NAME", "DATABASE_URL", "DEPLOY_TOKEN"],"#,
    );
    assert!(
        policy.contains("MYAPP_*"),
        "the default has an env_allow line"
    );
    let (script, shell) = env_views(Some(policy)).await;
    assert_eq!(format!("{script}[exit code: 0]"), shell);
    for line in [
        "FOO=bar",
        "MYAPP_MODE=dev",
        "GIT_AUTHOR_NAME=Alice",
        "DATABASE_URL=<unset>",
        "DEPLOY_TOKEN=<unset>",
        "AGENT_API_KEY=<unset>",
    ] {
        assert!(script.lines().any(|l| l == line), "{line}: {script}");
    }
}

#[tokio::test]
async fn a_bad_env_allow_entry_is_reported_by_check() {
    let dirs = Dirs::new();
    let policy =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/policy.rhai"))
            .unwrap()
            .replace("env_allow: [],", r#"env_allow: ["MY-VAR"],"#);
    std::fs::write(dirs.config.join("policy.rhai"), policy).unwrap();
    let mut cmd = agent_command(&dirs, "http://127.0.0.1:9/v1");
    cmd.arg("check");
    let out = output(cmd).await;
    let report = crate::common::stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("env_allow") && report.contains("\"MY-VAR\" is not a variable name"),
        "{report}"
    );
}

/// Reads the agent's environment and its writable memory into files in the
/// workspace (files are not blanked: what is in them is what the command
/// got), and reports what each step said.
const PROC_ATTACK: &str = r#"cat /proc/$PPID/environ > leak-environ; echo "environ=$?"
while read -r range perms rest; do
  case $perms in rw*) s=${range%-*}; e=${range#*-}
    dd if=/proc/$PPID/mem bs=4096 skip=$((0x$s / 4096)) count=$(((0x$e - 0x$s) / 4096)) >> leak-mem 2>/dev/null;;
  esac
done < /proc/$PPID/maps; echo "maps=$?"
tr '\0' '\n' < /proc/$$/environ | grep -c '^LC_PROBE=visible$'"#;

/// Runs [`PROC_ATTACK`] as `uid` (None: as the test runs) and returns the
/// tool result and whether any leak file holds the key.
async fn proc_attack(as_uid: Option<u32>, off: bool) -> (String, bool) {
    let dirs = Dirs::new();
    if off {
        sandbox_off(&dirs);
    }
    if let Some(uid) = as_uid {
        let root = dirs.workspace.parent().unwrap().to_path_buf();
        for path in std::iter::once(root.clone()).chain(walk_all(&root)) {
            std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
        }
    }
    let args = serde_json::json!({ "command": PROC_ATTACK }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("p", "run_shell", &args)]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_with_secrets(&dirs, &server.base_url);
    if let Some(uid) = as_uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.args(["-p", "read the agent"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = tool_result(&server, "p");
    assert!(
        text.contains("\n1\n"),
        "the command's own environ is readable: {text}"
    );
    let leaked = ["leak-environ", "leak-mem"].iter().any(|f| {
        let bytes = std::fs::read(dirs.workspace.join(f)).unwrap_or_default();
        bytes
            .windows(API_KEY.len())
            .any(|w| w == API_KEY.as_bytes())
    });
    (text, leaked)
}

fn walk_all(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        out.push(p.clone());
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk_all(&p));
        }
    }
    out
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The unprivileged user the root test runner becomes.
const NOBODY: u32 = 65534;

#[tokio::test]
async fn a_command_of_the_same_user_cannot_read_the_agents_environ_or_memory() {
    // As root, run the agent as `nobody`: the point is a command of the
    // agent's own (unprivileged) user.
    let as_uid = running_as_root().then_some(NOBODY);
    let (text, leaked) = proc_attack(as_uid, false).await;
    assert!(!leaked, "a leak file holds the key: {text}");
    assert!(text.contains("environ=1"), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
}

/// As root with the sandbox off: unmount the command's fresh `/proc` to
/// find the host's beneath it, then read every process's environment and
/// the writable memory of every `agent` process there.
const PROC_UNMASK: &str = r#"umount /proc; echo "umount=$?"
ls -d /proc/[0-9]* | wc -l | sed 's/^/pids=/'
for p in /proc/[0-9]*; do cat $p/environ; done > leak-environ 2>/dev/null
for p in /proc/[0-9]*; do
  [ "$(cat $p/comm 2>/dev/null)" = agent ] || continue
  while read -r range perms rest; do
    case $perms in rw*) s=${range%-*}; e=${range#*-}
      dd if=$p/mem bs=4096 skip=$((0x$s / 4096)) count=$(((0x$e - 0x$s) / 4096)) >> leak-mem 2>/dev/null;;
    esac
  done < $p/maps
done; echo scanned"#;

#[tokio::test]
async fn a_root_command_that_unmounts_its_proc_finds_no_agent_beneath() {
    if !running_as_root() {
        eprintln!("SKIPPED: a root command's /proc needs the tests to run as root");
        return;
    }
    let dirs = Dirs::new();
    sandbox_off(&dirs);
    let args = serde_json::json!({ "command": PROC_UNMASK }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("p", "run_shell", &args)]),
        Reply::text("done"),
    ])
    .await;
    let mut cmd = agent_with_secrets(&dirs, &server.base_url);
    // The person approves everything: the policy would ask for `umount`,
    // but the boundary must hold without it.
    cmd.args(["--yes", "-p", "look under /proc"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = tool_result(&server, "p");
    assert!(text.contains("\nscanned"), "the attack did not run: {text}");
    for f in ["leak-environ", "leak-mem"] {
        let bytes = std::fs::read(dirs.workspace.join(f)).unwrap_or_default();
        assert!(
            !bytes
                .windows(API_KEY.len())
                .any(|w| w == API_KEY.as_bytes()),
            "{f} holds the key: {text}"
        );
    }
}

#[tokio::test]
async fn a_root_command_cannot_read_the_agents_environ_or_memory() {
    if !running_as_root() {
        eprintln!("SKIPPED: a root command needs the tests to run as root");
        return;
    }
    let (text, leaked) = proc_attack(None, false).await;
    assert!(!leaked, "a leak file holds the key: {text}");
    // With the sandbox off, the command still runs in its own PID
    // namespace with a fresh /proc: the agent is not there to read.
    let (text, leaked) = proc_attack(None, true).await;
    assert!(
        !leaked,
        "with the sandbox off, a leak file holds the key: {text}"
    );
}

#[tokio::test]
async fn a_command_cannot_read_the_environment_of_the_agents_parent() {
    // The agent's parent is a shell that has the key in its environment,
    // as a person's shell or terminal often does.
    let dirs = Dirs::new();
    let command = "cat /proc/$(cut -d' ' -f4 /proc/$PPID/stat)/environ > leak; echo rc=$?";
    let args = serde_json::json!({ "command": command }).to_string();
    let server = MockServer::start(vec![
        Reply::tools(Shape::OpenAi, &[("p", "run_shell", &args)]),
        Reply::text("done"),
    ])
    .await;
    let agent = agent_with_secrets(&dirs, &server.base_url);
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg("\"$0\" -p go; echo agent-exited")
        .arg(env!("CARGO_BIN_EXE_agent"))
        .env_clear();
    for (k, v) in agent.as_std().get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.current_dir(&dirs.workspace)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = output(cmd).await;
    assert!(
        crate::common::stdout(&out).contains("agent-exited"),
        "{}",
        stderr(&out)
    );
    let text = tool_result(&server, "p");
    let bytes = std::fs::read(dirs.workspace.join("leak")).unwrap_or_default();
    assert!(
        !bytes
            .windows(API_KEY.len())
            .any(|w| w == API_KEY.as_bytes()),
        "the parent's environment held the key: {text}"
    );
}

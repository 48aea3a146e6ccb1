//! The Rhai script host: the system prompt, the user's tools and the
//! watchdog's rules live in scripts a person edits without recompiling.
//!
//! - [`DEFAULTS`] are the files in `scripts/`, embedded in the binary.
//! - A file of the same name in the config dir replaces its default; a
//!   missing file means the default. A user file that fails to compile, run
//!   or validate is reported (file, line, column, caret) and its default is
//!   used instead. Scripts inside the workspace are never run.
//! - Each file is compiled once and its top level evaluated once; hooks are
//!   then called by name without re-running the top level.
//! - [`ScriptHost::reload`] re-reads changed files; a file whose new
//!   version fails keeps its last good version.
//!
//! | file | owns |
//! |---|---|
//! | `engine` | the one engine, its limits, the per-call context, `print` |
//! | `api` | every function a script can call |
//! | `error` | rendering errors with file, line, column and caret |
//! | `check` | `agent check`: every hook called once with sample data |
//! | `prompt` | prompt.rhai: the system prompt and the summary prompt |
//! | `tools` | tools.rhai: script tools in the one registry |
//! | `watchdog` | watchdog.rhai: the watchdog's settings and [`crate::watchdog::Rules`] |
//! | `policy` | policy.rhai: limits, secrets, and [`crate::runtime::policy::Approve`] |
//! | `models` | models.rhai: profiles and [`crate::client::RequestOptions`] |
//! | `mcp` | mcp.rhai: the MCP servers ([`crate::tools::mcp::ServerConfig`]) |

pub mod api;
pub mod check;
pub mod engine;
pub mod error;
pub mod mcp;
pub mod models;
pub mod policy;
pub mod policy_api;
pub mod policy_test;
pub mod prompt;
pub mod tools;
pub mod watchdog;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rhai::{AST, CallFnOptions, Dynamic, Scope};
use tokio_util::sync::CancellationToken;

pub use error::ScriptError;

use engine::{CallGuard, SCRIPT_CALL_BUDGET, engine};

/// The scripts the agent knows, with their embedded defaults.
pub const DEFAULTS: &[(&str, &str)] = &[
    (PROMPT, include_str!("../../scripts/prompt.rhai")),
    (TOOLS, include_str!("../../scripts/tools.rhai")),
    (WATCHDOG, include_str!("../../scripts/watchdog.rhai")),
    (POLICY, include_str!("../../scripts/policy.rhai")),
    (MODELS, include_str!("../../scripts/models.rhai")),
    (MCP, include_str!("../../scripts/mcp.rhai")),
];

pub const PROMPT: &str = "prompt.rhai";
pub const TOOLS: &str = "tools.rhai";
pub const WATCHDOG: &str = "watchdog.rhai";
pub const POLICY: &str = "policy.rhai";
pub const MODELS: &str = "models.rhai";
pub const MCP: &str = "mcp.rhai";

/// Where a loaded script came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The copy embedded in the binary.
    Default,
    /// The person's file in the config dir.
    User(PathBuf),
}

/// One compiled script.
pub struct Script {
    pub name: &'static str,
    pub origin: Origin,
    pub source: String,
    pub ast: AST,
    /// What the top level evaluated to (the tool list for `tools.rhai`).
    pub value: Dynamic,
    /// The user file's modification time when it was loaded.
    modified: Option<SystemTime>,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .field("origin", &self.origin)
            .finish()
    }
}

impl Script {
    /// The path people should look at: the user file, or `(default) name`.
    pub fn display_path(&self) -> String {
        match &self.origin {
            Origin::User(path) => path.display().to_string(),
            Origin::Default => format!("(built-in) {}", self.name),
        }
    }

    /// Whether the script defines `name` with `arity` parameters.
    pub fn has_fn(&self, name: &str, arity: usize) -> bool {
        self.ast
            .iter_functions()
            .any(|f| f.name == name && f.params.len() == arity)
    }

    /// Calls a hook on the current thread under the script budget.
    /// Host functions that need a runtime are unavailable here.
    pub fn call_hook(&self, name: &str, args: Vec<Dynamic>) -> Result<Dynamic, ScriptError> {
        let _guard = CallGuard::enter(SCRIPT_CALL_BUDGET, CancellationToken::new(), None, None);
        engine()
            .call_fn_with_options::<Dynamic>(
                CallFnOptions::new().eval_ast(false),
                &mut Scope::new(),
                &self.ast,
                name,
                args,
            )
            .map_err(|e| error::runtime_error(&self.display_path(), &self.source, &e))
    }
}

/// Compiles `source`, evaluates its top level once, and validates it for
/// the role `name` plays.
pub fn compile(name: &'static str, source: String, origin: Origin) -> Result<Script, ScriptError> {
    let path = match &origin {
        Origin::User(p) => p.display().to_string(),
        Origin::Default => format!("(built-in) {name}"),
    };
    let engine = engine();
    let ast = engine
        .compile(&source)
        .map_err(|e| error::parse_error(&path, &source, &e))?;
    let value = {
        let _guard = CallGuard::enter(SCRIPT_CALL_BUDGET, CancellationToken::new(), None, None);
        engine
            .eval_ast_with_scope::<Dynamic>(&mut Scope::new(), &ast)
            .map_err(|e| error::runtime_error(&path, &source, &e))?
    };
    let modified = match &origin {
        Origin::User(p) => std::fs::metadata(p).and_then(|m| m.modified()).ok(),
        Origin::Default => None,
    };
    let script = Script {
        name,
        origin,
        source,
        ast,
        value,
        modified,
    };
    validate(&script).map_err(|message| ScriptError {
        rendered: format!("error: {message}\n --> {path}\n"),
        summary: format!("{message} ({path})"),
    })?;
    Ok(script)
}

/// Checks that a script has what its role needs.
fn validate(script: &Script) -> Result<(), String> {
    let need = |name: &str, arity: usize| {
        if script.has_fn(name, arity) {
            Ok(())
        } else {
            Err(format!(
                "{} must define `fn {name}({})`",
                script.name,
                ["a", "b", "c"][..arity].join(", ")
            ))
        }
    };
    match script.name {
        // summary_prompt() is optional: without it the built-in one is used.
        PROMPT => need("system_prompt", 1),
        TOOLS => tools::definitions(script).map(|_| ()),
        WATCHDOG => {
            need("settings", 0)?;
            need("is_progress", 1)?;
            need("repair_prompt", 1)
        }
        POLICY => {
            need("settings", 0)?;
            if !script.has_fn("is_secret", 2) {
                need("is_secret", 1)?;
            }
            need("approve", 1)
        }
        MODELS => models::parse(script).map(|_| ()),
        _ => Ok(()),
    }
}

fn default_source(name: &str) -> &'static str {
    DEFAULTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap_or("")
}

/// Compiles the embedded default of a script (`prompt.rhai`, ...). The
/// defaults' tests make sure this succeeds.
pub fn compile_default(name: &'static str) -> Result<Script, ScriptError> {
    compile(name, default_source(name).to_string(), Origin::Default)
}

/// The most of one script file a fingerprint reads (scripts are small;
/// a huge file still changes its first megabyte or its mtime).
const MAX_SCRIPT_BYTES: u64 = 1 << 20;

/// What happened to one file on load or reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadNote {
    /// The user's file was loaded (`replaced` names built-in tools it replaced).
    Loaded { name: &'static str, path: PathBuf },
    /// The user's file failed; `fallback` says what is used instead.
    Failed {
        name: &'static str,
        error: ScriptError,
        fallback: String,
    },
    /// The user's file was removed; the default is back.
    Reverted { name: &'static str },
}

impl LoadNote {
    /// A message for the person.
    pub fn message(&self) -> String {
        match self {
            LoadNote::Loaded { name, path } => format!("loaded {name} from {}", path.display()),
            LoadNote::Failed {
                error, fallback, ..
            } => {
                format!(
                    "{}   = note: {fallback}; fix the file and run `agent check`",
                    error.rendered
                )
            }
            LoadNote::Reverted { name } => {
                format!("{name} was removed from the config dir; using the built-in default")
            }
        }
    }
}

/// All scripts of one agent.
#[derive(Debug)]
pub struct ScriptHost {
    config_dir: PathBuf,
    scripts: Vec<Arc<Script>>,
}

impl ScriptHost {
    /// Loads every script: the user's file where it exists and works, the
    /// default otherwise. Returns the notes to show the person.
    pub fn load(config_dir: &Path) -> (ScriptHost, Vec<LoadNote>) {
        let mut notes = Vec::new();
        let mut scripts = Vec::new();
        for (name, _) in DEFAULTS {
            let (script, note) = load_one(name, config_dir, None);
            notes.extend(note);
            if let Some(script) = script {
                scripts.push(Arc::new(script));
            }
        }
        (
            ScriptHost {
                config_dir: config_dir.to_path_buf(),
                scripts,
            },
            notes,
        )
    }

    pub fn config_dir(&self) -> &Path {
        &self.config_dir
    }

    /// What the script files on disk hold now: a hash of each (`None` when
    /// absent or unreadable). Comparing two fingerprints tells whether a
    /// file changed in between, even within one mtime tick.
    pub fn fingerprint(&self) -> Vec<Option<u64>> {
        use std::hash::{Hash, Hasher};
        use std::io::Read;
        DEFAULTS
            .iter()
            .map(|(name, _)| {
                let file = std::fs::File::open(self.config_dir.join(name)).ok()?;
                let mut bytes = Vec::new();
                file.take(MAX_SCRIPT_BYTES).read_to_end(&mut bytes).ok()?;
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                Some(h.finish())
            })
            .collect()
    }

    /// The names of the scripts whose files changed since they were loaded.
    pub fn changed_names(&self) -> Vec<&'static str> {
        DEFAULTS
            .iter()
            .filter(|(name, _)| self.file_changed(name, &self.config_dir.join(name)))
            .map(|(name, _)| *name)
            .collect()
    }

    /// The loaded script of this name.
    pub fn get(&self, name: &str) -> Option<&Arc<Script>> {
        self.scripts.iter().find(|s| s.name == name)
    }

    /// Whether any user file changed (or appeared, or vanished) since load.
    pub fn changed(&self) -> bool {
        DEFAULTS
            .iter()
            .any(|(name, _)| self.file_changed(name, &self.config_dir.join(name)))
    }

    fn file_changed(&self, name: &str, path: &Path) -> bool {
        let on_disk = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        match self.get(name) {
            Some(s) => match (&s.origin, on_disk) {
                (Origin::User(_), None) => true,
                (Origin::User(_), Some(t)) => s.modified != Some(t),
                (Origin::Default, Some(_)) => true,
                (Origin::Default, None) => false,
            },
            None => true,
        }
    }

    /// Reloads changed files (all files when `force`). A file whose new
    /// version fails keeps its last good version.
    pub fn reload(&mut self, force: bool) -> Vec<LoadNote> {
        let mut notes = Vec::new();
        for (name, _) in DEFAULTS {
            let path = self.config_dir.join(name);
            if !force && !self.file_changed(name, &path) {
                continue;
            }
            let current = self.get(name).cloned();
            let (script, note) = load_one(name, &self.config_dir, current.clone());
            notes.extend(note);
            if let Some(script) = script {
                let script = Arc::new(script);
                match self.scripts.iter_mut().find(|s| s.name == *name) {
                    Some(slot) => *slot = script,
                    None => self.scripts.push(script),
                }
            }
        }
        notes
    }
}

/// Loads one script. With `current` (a reload), a failing user file keeps
/// `current`; without it (startup), it falls back to the default.
fn load_one(
    name: &'static str,
    config_dir: &Path,
    current: Option<Arc<Script>>,
) -> (Option<Script>, Option<LoadNote>) {
    let path = config_dir.join(name);
    let source = match std::fs::read(&path) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            let error = ScriptError {
                rendered: format!("error: cannot read {}: {e}\n", path.display()),
                summary: format!("cannot read {}: {e}", path.display()),
            };
            return fallback(name, error, current);
        }
    };
    match source {
        None => {
            let was_user = current
                .as_ref()
                .is_some_and(|c| matches!(c.origin, Origin::User(_)));
            match compile_default(name) {
                Ok(script) => (
                    Some(script),
                    was_user.then_some(LoadNote::Reverted { name }),
                ),
                Err(error) => (
                    None,
                    Some(LoadNote::Failed {
                        name,
                        error,
                        fallback: "the built-in default is broken too".into(),
                    }),
                ),
            }
        }
        Some(source) => match compile(name, source, Origin::User(path.clone())) {
            Ok(script) => (Some(script), Some(LoadNote::Loaded { name, path })),
            Err(error) => fallback(name, error, current),
        },
    }
}

fn fallback(
    name: &'static str,
    error: ScriptError,
    current: Option<Arc<Script>>,
) -> (Option<Script>, Option<LoadNote>) {
    if current.is_some() {
        // Reload: keep the last good version (returning None leaves it).
        return (
            None,
            Some(LoadNote::Failed {
                name,
                error,
                fallback: format!("keeping the last good version of {name}"),
            }),
        );
    }
    match compile_default(name) {
        Ok(script) => (
            Some(script),
            Some(LoadNote::Failed {
                name,
                error,
                fallback: format!("using the built-in default {name} instead"),
            }),
        ),
        Err(default_error) => (
            None,
            Some(LoadNote::Failed {
                name,
                error: default_error,
                fallback: "the built-in default is broken too".into(),
            }),
        ),
    }
}

/// Writes the default scripts into `config_dir`. Existing files are kept
/// unless `force`. Returns, per file, whether it was written.
pub fn init(config_dir: &Path, force: bool) -> std::io::Result<Vec<(PathBuf, bool)>> {
    std::fs::create_dir_all(config_dir)?;
    let mut written = Vec::new();
    for (name, source) in DEFAULTS {
        let path = config_dir.join(name);
        if path.exists() && !force {
            written.push((path, false));
            continue;
        }
        crate::runtime::fs::write_atomic(&path, source.as_bytes())?;
        written.push((path, true));
    }
    Ok(written)
}

/// The value `settings()` of `script` returns, as JSON, with every field
/// it leaves out taken from the built-in script of the same name: the
/// defaults live in the `.rhai` files only. Errors name the script.
pub fn merged_settings(script: &Script) -> Result<serde_json::Value, String> {
    let read = |s: &Script| -> Result<serde_json::Value, String> {
        let value = s.call_hook("settings", vec![]).map_err(|e| e.summary)?;
        api::to_json(&value).map_err(|e| format!("settings(): {e}"))
    };
    let mut value = read(script)?;
    if script.origin != Origin::Default
        && let Ok(default) = compile_default(script.name)
        && let (Ok(serde_json::Value::Object(base)), serde_json::Value::Object(mine)) =
            (read(&default), &mut value)
    {
        for (k, v) in base {
            mine.entry(k).or_insert(v);
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::PromptContext;
    use prompt::system_prompt;

    #[test]
    fn every_default_compiles_and_defines_its_hooks() {
        for (name, source) in DEFAULTS {
            let script = compile(name, source.to_string(), Origin::Default)
                .unwrap_or_else(|e| panic!("{name}: {}", e.rendered));
            match *name {
                PROMPT => assert!(script.has_fn("system_prompt", 1)),
                WATCHDOG => {
                    assert!(script.has_fn("settings", 0));
                    assert!(script.has_fn("is_progress", 1));
                    assert!(script.has_fn("repair_prompt", 1));
                }
                TOOLS => {
                    let names: Vec<String> = tools::definitions(&script)
                        .unwrap()
                        .into_iter()
                        .map(|d| d.spec.name)
                        .collect();
                    assert_eq!(names, ["current_time", "git_status", "update_plan"]);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn the_default_prompt_uses_the_context_and_appends_agents_md() {
        let dir = tempfile::tempdir().unwrap();
        let (host, notes) = ScriptHost::load(dir.path());
        assert!(notes.is_empty(), "{notes:?}");
        let ctx = PromptContext {
            cwd: "/home/u/x".into(),
            os: "linux".into(),
            date: "2026-12-02".into(),
            model: "m".into(),
            tools: vec!["run_shell".into(), "read_file".into()],
            project_instructions: Some("Always run cargo fmt.".into()),
            lean: false,
            tool_calls: "native".into(),
            tool_descriptions: "- run_shell(command: string): Runs a command.".into(),
        };
        let prompt = system_prompt(&host, &ctx).unwrap();
        assert!(
            prompt.contains("/home/u/x") && prompt.contains("2026-12-02"),
            "{prompt}"
        );
        assert!(prompt.contains("run_shell"), "{prompt}");
        assert!(prompt.ends_with("Always run cargo fmt."), "{prompt}");
        // Local profiles: a short prompt, and the tools described in it
        // when the request carries none.
        let lean = PromptContext {
            lean: true,
            project_instructions: None,
            ..ctx.clone()
        };
        let short = system_prompt(&host, &lean).unwrap();
        assert!(short.len() * 2 < prompt.len(), "{short}");
        let lean = PromptContext {
            lean: true,
            tool_calls: "text".into(),
            ..ctx.clone()
        };
        let short = system_prompt(&host, &lean).unwrap();
        assert!(
            short.contains("/home/u/x") && short.contains("```json"),
            "{short}"
        );
        assert!(short.contains("- run_shell(command: string)"), "{short}");
        assert!(short.ends_with("Always run cargo fmt."), "{short}");
    }

    #[test]
    fn a_broken_user_file_falls_back_then_reload_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROMPT);
        std::fs::write(&path, "fn system_prompt(ctx) {\n  \"mine\"\n}\n").unwrap();
        let (mut host, notes) = ScriptHost::load(dir.path());
        assert!(
            matches!(notes.as_slice(), [LoadNote::Loaded { .. }]),
            "{notes:?}"
        );
        assert_eq!(
            system_prompt(&host, &PromptContext::default()).unwrap(),
            "mine"
        );

        std::fs::write(&path, "fn system_prompt(ctx) {\n  \"oops\n}\n").unwrap();
        let notes = host.reload(true);
        let message = notes.iter().map(LoadNote::message).collect::<String>();
        assert!(message.contains("prompt.rhai:2:"), "{message}");
        assert!(
            message.contains("keeping the last good version"),
            "{message}"
        );
        assert_eq!(
            system_prompt(&host, &PromptContext::default()).unwrap(),
            "mine"
        );

        let (fresh, notes) = ScriptHost::load(dir.path());
        assert!(
            notes[0]
                .message()
                .contains("using the built-in default prompt.rhai")
        );
        assert!(
            system_prompt(&fresh, &PromptContext::default())
                .unwrap()
                .contains("coding agent")
        );
    }

    #[test]
    fn a_runaway_hook_is_stopped() {
        let script = compile(
            PROMPT,
            "fn system_prompt(ctx) { loop { } }".into(),
            Origin::User(PathBuf::from("p.rhai")),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let err = script
            .call_hook("system_prompt", vec![Dynamic::UNIT])
            .unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(3));
        assert!(err.summary.contains("was stopped"), "{}", err.summary);
    }

    #[test]
    fn eval_and_import_are_refused() {
        for src in ["eval(\"1\")", "import \"x\" as x;"] {
            assert!(engine().compile(src).is_err(), "{src}");
        }
    }

    #[test]
    fn init_never_clobbers_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let first = init(dir.path(), false).unwrap();
        assert!(first.iter().all(|(_, w)| *w));
        std::fs::write(dir.path().join(TOOLS), "// mine\n[]").unwrap();
        let second = init(dir.path(), false).unwrap();
        assert!(second.iter().all(|(_, w)| !*w));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(TOOLS)).unwrap(),
            "// mine\n[]"
        );
        init(dir.path(), true).unwrap();
        assert!(
            std::fs::read_to_string(dir.path().join(TOOLS))
                .unwrap()
                .contains("current_time")
        );
    }
}

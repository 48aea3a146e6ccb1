//! Wiring the scripts into an agent: the tool registry (built-ins plus the
//! tools of `tools.rhai`), the system prompt from `prompt.rhai`, and the
//! watchdog from `watchdog.rhai`. Used at startup and on every reload, so
//! both paths build exactly the same thing.

use std::path::Path;
use std::sync::Arc;

use crate::agent::watchdog_from_script;
use crate::config::Settings;
use crate::prompt::PromptContext;
use crate::runtime::Runtime;
use crate::runtime::policy::{Asker, Policy};
use crate::script::policy::{PolicySettings, ScriptApprove};
use crate::script::tools::ScriptTool;
use crate::script::{POLICY, ScriptHost, TOOLS, WATCHDOG};
use crate::tools::Registry;
use crate::watchdog::Watchdog;

/// What the scripts produce, plus notes for the person.
pub struct Setup {
    pub registry: Arc<Registry>,
    pub system_prompt: String,
    pub summary_prompt: String,
    pub watchdog: Option<Watchdog>,
    /// Warnings and facts to show at startup or after a reload.
    pub notes: Vec<String>,
}

/// Builds the runtime from `policy.rhai`: limits, extra roots, the secret
/// rule (applied to `env`), the approval hook answered by `asker`, and the
/// API key among the values blanked out of tool outputs. Returns the
/// runtime, whether the policy asks for the sandbox, and notes.
pub fn runtime(
    host: &ScriptHost,
    settings: &Settings,
    spill_dir: std::path::PathBuf,
    env: Vec<(String, String)>,
    asker: Arc<dyn Asker>,
) -> (Runtime, bool, Vec<String>) {
    let mut notes = Vec::new();
    let script = host.get(POLICY).cloned();
    let policy_settings = match script.as_deref().map(PolicySettings::from_script) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            notes.push(format!("policy.rhai: {e}; using the default limits"));
            PolicySettings::default()
        }
        None => PolicySettings::default(),
    };
    let mut runtime = match &script {
        Some(script) => {
            Runtime::with_secret_rule(settings.workspace.clone(), spill_dir, env, &|name: &str| {
                crate::script::policy::is_secret(script, name)
            })
        }
        None => Runtime::new(settings.workspace.clone(), spill_dir, env),
    };
    runtime.limits = policy_settings.limits();
    let extra: Vec<std::path::PathBuf> = policy_settings
        .extra_roots
        .iter()
        .map(|p| {
            if p.is_absolute() {
                p.clone()
            } else {
                settings.workspace.join(p)
            }
        })
        .collect();
    runtime.set_extra_roots(&extra);
    if let Some(key) = &settings.api_key {
        runtime.add_redaction(key);
    }
    if let Some(script) = script {
        let approve = ScriptApprove {
            script,
            workspace: settings.workspace.clone(),
            home: std::env::var("HOME").unwrap_or_default(),
            config_dir: host.config_dir().to_path_buf(),
            // The lead wires the real value (whether the sandbox is on).
            sandboxed: false,
        };
        runtime.policy = Policy::new(Arc::new(approve), asker);
    }
    (runtime, policy_settings.sandbox, notes)
}

/// Builds the registry, the prompt and the watchdog from loaded scripts.
pub fn assemble(host: &ScriptHost, workspace: &Path, model: &str) -> Setup {
    let mut notes = Vec::new();
    let mut registry = Registry::with_builtins();
    if let Some(script) = host.get(TOOLS) {
        match ScriptTool::all(script) {
            Ok(tools) => {
                for tool in tools {
                    let name = tool.spec().name.clone();
                    if registry.register(tool).is_some() {
                        notes.push(format!(
                            "{}: the tool `{name}` replaces the built-in `{name}`",
                            script.display_path()
                        ));
                    }
                }
            }
            Err(e) => notes.push(format!(
                "{}: {e}; its tools are not available",
                script.display_path()
            )),
        }
    }
    let ctx = PromptContext::new(workspace, model, registry.names());
    let system_prompt = match host.system_prompt(&ctx) {
        Ok(prompt) => prompt,
        Err(e) => {
            notes.push(format!(
                "{}   = note: using the built-in prompt instead",
                e.rendered
            ));
            builtin_prompt(&ctx)
        }
    };
    let summary_prompt = match host.summary_prompt() {
        Ok(Some(p)) => p,
        Ok(None) => builtin_summary_prompt(),
        Err(e) => {
            notes.push(format!(
                "{}   = note: using the built-in summary prompt instead",
                e.rendered
            ));
            builtin_summary_prompt()
        }
    };
    let watchdog = host.get(WATCHDOG).map(|script| {
        let (watchdog, warnings) = watchdog_from_script(script.clone());
        notes.extend(warnings);
        watchdog
    });
    Setup {
        registry: Arc::new(registry),
        system_prompt,
        summary_prompt,
        watchdog,
        notes,
    }
}

/// The summary prompt of the embedded `prompt.rhai`.
pub fn builtin_summary_prompt() -> String {
    crate::script::compile_default(crate::script::PROMPT)
        .and_then(|script| script.call_hook("summary_prompt", vec![]))
        .map(|v| v.to_string())
        .unwrap_or_else(|_| "Summarise the conversation so far for the agent that continues it: the goal, what was done, the current state and what is left.".to_string())
}

/// The prompt of the embedded `prompt.rhai`, for when the person's
/// `system_prompt(ctx)` fails at run time.
fn builtin_prompt(ctx: &PromptContext) -> String {
    crate::script::compile_default(crate::script::PROMPT)
        .and_then(|script| {
            script.call_hook(
                "system_prompt",
                vec![crate::script::prompt_context_map(ctx)],
            )
        })
        .map(|v| v.to_string())
        .unwrap_or_else(|_| format!("You are a coding agent working in {}.", ctx.cwd))
}

/// The model side of a session: resolved settings, the client and the
/// profile's per-request options.
pub struct ModelSetup {
    pub settings: Settings,
    pub client: crate::client::ChatClient,
    pub options: Option<Arc<dyn crate::agent::RequestOptions>>,
    /// The profile's name, when one applied.
    pub profile: Option<String>,
    pub context_window: Option<u64>,
}

/// Picks the profile (`profile` or the default of `models.rhai`) and
/// resolves settings and the client from it, the environment and flags.
pub fn model_setup(
    host: &ScriptHost,
    overrides: &crate::config::Overrides,
    env: &dyn Fn(&str) -> Option<String>,
    profile: Option<&str>,
) -> Result<ModelSetup, String> {
    use crate::script::models;
    let script = host.get(crate::script::MODELS).cloned();
    let parsed = match &script {
        Some(s) => Some(models::parse(s)?),
        None => None,
    };
    let chosen = match (&parsed, profile) {
        (Some(m), Some(name)) => Some(m.profile(name)?.clone()),
        (Some(m), None) if !m.profiles.is_empty() => Some(m.profile(&m.default)?.clone()),
        (None, Some(name)) => {
            return Err(format!(
                "there is no profile named {name:?}: models.rhai is not loaded"
            ));
        }
        _ => None,
    };
    let settings = Settings::resolve_with(
        overrides,
        env,
        chosen.as_ref().map(models::Profile::endpoint).as_ref(),
    )
    .map_err(|e| e.to_string())?;
    let mut config = crate::client::ClientConfig::new(
        settings.base_url.clone(),
        settings.model.clone(),
        settings.api_key.clone(),
    );
    if let Some(m) = &parsed {
        m.client.apply(&mut config);
    }
    let client = crate::client::ChatClient::new(config).map_err(|e| e.to_string())?;
    let options: Option<Arc<dyn crate::agent::RequestOptions>> = match (&script, &chosen) {
        (Some(script), Some(p)) => Some(Arc::new(models::ProfileOptions {
            script: script.clone(),
            options: p.options.clone(),
        })),
        _ => None,
    };
    Ok(ModelSetup {
        settings,
        client,
        options,
        profile: chosen.as_ref().map(|p| p.name.clone()),
        context_window: chosen.and_then(|p| p.context_window),
    })
}

//! `agent check`: compiles every script (the person's file where there is
//! one, the default otherwise) and calls each hook once with sample data,
//! so a broken rule is found before it is trusted.

use std::path::{Path, PathBuf};

use rhai::Dynamic;

use super::{
    DEFAULTS, MCP, MODELS, Origin, POLICY, PROMPT, Script, ScriptError, TOOLS, WATCHDOG, compile,
    models, policy, tools,
};
use crate::prompt::PromptContext;

fn approve_sample(approve: &policy::ScriptApprove) -> Dynamic {
    approve.action_map(&crate::runtime::policy::Action::Shell {
        command: "rm -rf /tmp/sample".into(),
    })
}

/// One line of `agent check`'s report.
#[derive(Clone, Debug)]
pub struct CheckResult {
    pub name: &'static str,
    /// The file checked (the user's, or the built-in default).
    pub path: String,
    /// `Ok(summary)` or the rendered error.
    pub result: Result<String, String>,
}

/// Compiles every script (the user's file where there is one, the default
/// otherwise) and calls each hook once with sample data.
pub fn check(config_dir: &Path) -> Vec<CheckResult> {
    DEFAULTS
        .iter()
        .map(|(name, default)| {
            let path = config_dir.join(name);
            let (source, origin) = match std::fs::read(&path) {
                Ok(bytes) => (
                    String::from_utf8_lossy(&bytes).into_owned(),
                    Origin::User(path.clone()),
                ),
                Err(_) => (default.to_string(), Origin::Default),
            };
            let display = match &origin {
                Origin::User(p) => p.display().to_string(),
                Origin::Default => format!("(built-in) {name}"),
            };
            let result = compile(name, source, origin)
                .map_err(|e| e.rendered)
                .and_then(|script| smoke_test(&script).map_err(|e| e.rendered));
            CheckResult {
                name,
                path: display,
                result,
            }
        })
        .collect()
}

/// Calls a script's hooks once with sample data and checks what they return.
fn smoke_test(script: &Script) -> Result<String, ScriptError> {
    let expect = |what: &str, value: &Dynamic, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(ScriptError {
                rendered: format!(
                    "error: {what} returned {}, which is the wrong type\n --> {}\n",
                    value.type_name(),
                    script.display_path()
                ),
                summary: format!("{what} returned the wrong type"),
            })
        }
    };
    match script.name {
        PROMPT => {
            let ctx = PromptContext {
                cwd: "/home/user/project".into(),
                os: std::env::consts::OS.into(),
                date: "2026-01-01".into(),
                model: "sample-model".into(),
                tools: vec!["run_shell".into(), "read_file".into()],
                project_instructions: Some("Sample AGENTS.md text.".into()),
                lean: false,
                tool_calls: "native".into(),
                tool_descriptions: "- run_shell(command: string): Runs a command.".into(),
            };
            // The lean, text-call style of local profiles too.
            let lean = PromptContext {
                lean: true,
                tool_calls: "text".into(),
                ..ctx.clone()
            };
            let value =
                script.call_hook("system_prompt", vec![super::prompt::context_map(&lean)])?;
            expect(
                "system_prompt(ctx) with ctx.lean",
                &value,
                value.is_string(),
            )?;
            let value =
                script.call_hook("system_prompt", vec![super::prompt::context_map(&ctx)])?;
            expect("system_prompt(ctx)", &value, value.is_string())?;
            Ok(format!(
                "system_prompt(ctx) returned {} characters",
                value.to_string().len()
            ))
        }
        TOOLS => {
            let defs = tools::definitions(script).map_err(|m| ScriptError {
                rendered: format!("error: {m}\n"),
                summary: m,
            })?;
            let names: Vec<String> = defs.into_iter().map(|d| d.spec.name).collect();
            Ok(format!("{} tools: {}", names.len(), names.join(", ")))
        }
        MCP => {
            let servers = super::mcp::servers(script).map_err(|m| ScriptError {
                rendered: format!("error: {m}\n --> {}\n", script.display_path()),
                summary: m,
            })?;
            let names: Vec<String> = servers.into_iter().map(|s| s.name).collect();
            Ok(match names.len() {
                0 => "no servers".to_string(),
                n => format!("{n} servers: {}", names.join(", ")),
            })
        }
        WATCHDOG => {
            let settings = script.call_hook("settings", vec![])?;
            expect("settings()", &settings, settings.is_map())?;
            let call = crate::watchdog::sample_call();
            let facts = super::watchdog::facts_map(&crate::watchdog::sample_facts(&call));
            let progress = script.call_hook("is_progress", vec![facts])?;
            expect("is_progress(record)", &progress, progress.is_bool())?;
            let stop = super::watchdog::stop_map(&crate::watchdog::sample_stop());
            let text = script.call_hook("repair_prompt", vec![stop])?;
            expect("repair_prompt(stop)", &text, text.is_string())?;
            super::watchdog::settings(script).map_err(|m| ScriptError {
                rendered: format!("error: {m}\n --> {}\n", script.display_path()),
                summary: m,
            })?;
            Ok("settings(), is_progress(record) and repair_prompt(stop) work".to_string())
        }
        POLICY => {
            let settings =
                policy::PolicySettings::from_script(script).map_err(|m| ScriptError {
                    rendered: format!("error: {m}\n --> {}\n", script.display_path()),
                    summary: m,
                })?;
            let secret = policy::call_is_secret(script, "SAMPLE_TOKEN", "sample")?;
            expect("is_secret(name, value)", &secret, secret.is_bool())?;
            let approve = policy::ScriptApprove {
                script: std::sync::Arc::new(compile(
                    POLICY,
                    script.source.clone(),
                    script.origin.clone(),
                )?),
                workspace: PathBuf::from("/home/user/project"),
                home: "/home/user".into(),
                config_dir: PathBuf::from("/home/user/.config/agent"),
                sandboxed: false,
            };
            let map = approve_sample(&approve);
            let decision = script.call_hook("approve", vec![map])?;
            expect("approve(action)", &decision, decision.is_map())?;
            Ok(format!(
                "settings(), is_secret(name, value) and approve(action) work; sandbox {}",
                settings.sandbox.as_str()
            ))
        }
        MODELS => {
            let models = models::parse(script).map_err(|m| ScriptError {
                rendered: format!("error: {m}\n"),
                summary: m,
            })?;
            let mut lines = Vec::new();
            for profile in models.profiles.values() {
                if let models::Options::Function(_) = profile.options {
                    let hook = models::ProfileOptions {
                        script: std::sync::Arc::new(compile(
                            MODELS,
                            script.source.clone(),
                            script.origin.clone(),
                        )?),
                        options: profile.options.clone(),
                    };
                    use crate::client::RequestOptions;
                    hook.options(&crate::client::RequestCtx {
                        turn: 1,
                        after_tool: false,
                    })
                    .map_err(|m| ScriptError {
                        rendered: format!("error: profile `{}`: options: {m}\n", profile.name),
                        summary: m,
                    })?;
                }
                let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
                let key = if profile.key_env.is_empty() {
                    "no key needed".to_string()
                } else if set(crate::config::env::API_KEY) {
                    // AGENT_API_KEY beats every profile's variable.
                    format!("key from {}", crate::config::env::API_KEY)
                } else if set(&profile.key_env) {
                    format!("key in {}", profile.key_env)
                } else {
                    format!("{} is not set", profile.key_env)
                };
                let mark = if profile.name == models.default {
                    " (default)"
                } else {
                    ""
                };
                lines.push(format!(
                    "\n    {}{mark}: {} at {}; {key}; tool calls {}",
                    profile.name,
                    profile.model,
                    profile.base_url,
                    profile.tool_calls.as_str()
                ));
            }
            // The text-call reader, on a call written as a fenced object.
            let reader = if script.has_fn(models::PARSE_TOOL_CALLS, 2) {
                use crate::tools::text_calls::CallReader;
                let reader = models::ScriptCallReader {
                    script: std::sync::Arc::new(compile(
                        MODELS,
                        script.source.clone(),
                        script.origin.clone(),
                    )?),
                };
                let sample =
                    "```json\n{\"name\": \"list_dir\", \"arguments\": {\"path\": \".\"}}\n```";
                let calls = reader
                    .read(sample, &crate::tools::Registry::with_builtins())
                    .map_err(|m| ScriptError {
                        rendered: format!("error: {m}\n"),
                        summary: m,
                    })?;
                format!(
                    "; parse_tool_calls(text, tools) found {} call(s) in a sample",
                    calls.len()
                )
            } else {
                String::new()
            };
            Ok(format!(
                "{} profiles{reader}:{}",
                models.profiles.len(),
                lines.concat()
            ))
        }
        _ => Ok(String::new()),
    }
}

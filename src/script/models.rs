//! `models.rhai`: model profiles (endpoint, key variable, model id, context
//! window, request options) and the client's network settings.
//!
//! Options are a map merged into every request body, or a closure of the
//! request (`|ctx| ...`, with `ctx.turn` and `ctx.after_tool`) called for
//! each request on a blocking thread.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rhai::{Dynamic, FnPtr, Map};
use serde::Deserialize;
use serde_json::Value;

use super::engine::{CallGuard, SCRIPT_CALL_BUDGET, engine};
use super::{Script, api, error};
use crate::client::{ClientConfig, RequestCtx, RequestOptions};
use crate::config::Endpoint;
use crate::tools::Registry;
use crate::tools::text_calls::{self, CallReader, TextCall, ToolCallMode};

/// The client settings of `models.rhai`: timeouts in seconds, caps in
/// bytes.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSettings {
    pub max_attempts: u32,
    pub connect_timeout: u64,
    pub first_token_timeout: u64,
    pub idle_timeout: u64,
    // Bounds on what the server sends (see client::bounds).
    pub request_timeout: u64,
    pub max_response_bytes: u64,
    pub max_tool_argument_bytes: u64,
    // The cut of an answer that pads or chants (see client::repetition).
    pub max_blank_run: u64,
    pub max_repeated_run: u64,
}

impl ClientSettings {
    /// Applies these settings to a client config.
    pub fn apply(&self, config: &mut ClientConfig) {
        config.max_attempts = self.max_attempts.max(1);
        config.connect_timeout = Duration::from_secs(self.connect_timeout.max(1));
        config.first_token_timeout = Duration::from_secs(self.first_token_timeout.max(1));
        config.idle_timeout = Duration::from_secs(self.idle_timeout.max(1));
        config.request_timeout = Duration::from_secs(self.request_timeout.max(1));
        // A zero cap would refuse every answer; one byte is the least.
        let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX).max(1);
        config.limits.max_response_bytes = bytes(self.max_response_bytes);
        config.limits.max_tool_argument_bytes = bytes(self.max_tool_argument_bytes);
        // Zero turns a check off.
        let chars = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        config.limits.max_blank_run = chars(self.max_blank_run);
        config.limits.max_repeated_run = chars(self.max_repeated_run);
    }
}

/// The plain fields of a profile (everything but `options`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFields {
    base_url: String,
    #[serde(default)]
    key_env: String,
    model: String,
    #[serde(default)]
    context_window: Option<u64>,
    /// `native` (the default), `auto` or `text`.
    #[serde(default)]
    tool_calls: Option<String>,
    /// Compact tool descriptions and a shorter system prompt.
    #[serde(default)]
    lean_prompt: bool,
}

/// A profile's request options.
#[derive(Clone, Debug)]
pub enum Options {
    Fixed(serde_json::Map<String, Value>),
    Function(FnPtr),
}

/// One profile.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: String,
    pub base_url: String,
    /// The variable holding the key; empty for none.
    pub key_env: String,
    pub model: String,
    pub context_window: Option<u64>,
    pub options: Options,
    /// How the model makes tool calls (`tool_calls`).
    pub tool_calls: ToolCallMode,
    /// Whether requests use compact tool descriptions and the system
    /// prompt is built with `ctx.lean` (`lean_prompt`).
    pub lean_prompt: bool,
}

impl Profile {
    /// The endpoint part, for settings resolution.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            name: self.name.clone(),
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            key_env: (!self.key_env.is_empty()).then(|| self.key_env.clone()),
        }
    }
}

/// Everything `models.rhai` says.
#[derive(Clone, Debug)]
pub struct Models {
    pub default: String,
    pub client: ClientSettings,
    pub profiles: BTreeMap<String, Profile>,
}

impl Models {
    /// The profile called `name`; the error lists the known ones.
    pub fn profile(&self, name: &str) -> Result<&Profile, String> {
        self.profiles.get(name).ok_or_else(|| {
            format!(
                "there is no profile named {name:?} in models.rhai; known profiles: {}",
                self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// The `client` map of the built-in models.rhai, as JSON.
fn built_in_client() -> Result<Option<serde_json::Map<String, Value>>, String> {
    let script = super::compile_default(super::MODELS).map_err(|e| e.summary)?;
    let value = script.value.flatten_clone();
    let client = value
        .read_lock::<Map>()
        .and_then(|top| top.get("client").cloned());
    match client.map(|c| api::to_json(&c)) {
        Some(Ok(Value::Object(map))) => Ok(Some(map)),
        Some(Err(e)) => Err(e.to_string()),
        _ => Ok(None),
    }
}

/// Reads `models.rhai`'s value. Every problem names the profile and field.
pub fn parse(script: &Script) -> Result<Models, String> {
    let value = script.value.flatten_clone();
    let Some(top) = value.read_lock::<Map>().map(|m| m.clone()) else {
        return Err(format!(
            "models.rhai must end with a map #{{ default_profile, client, profiles }}, not {}",
            value.type_name()
        ));
    };
    for key in top.keys() {
        if !["default_profile", "client", "profiles"].contains(&key.as_str()) {
            return Err(format!(
                "models.rhai: unknown field `{key}` at the top level (expected default_profile, client, profiles)"
            ));
        }
    }
    // Fields the person's `client` map leaves out come from the built-in
    // models.rhai: the defaults live there only.
    let mut client = match top.get("client") {
        None => serde_json::Value::Object(serde_json::Map::new()),
        Some(c) => api::to_json(c).map_err(|e| format!("models.rhai: `client`: {e}"))?,
    };
    if script.origin != super::Origin::Default
        && let Ok(Some(built_in)) = built_in_client()
        && let serde_json::Value::Object(mine) = &mut client
    {
        for (k, v) in built_in {
            mine.entry(k).or_insert(v);
        }
    }
    let client: ClientSettings =
        serde_json::from_value(client).map_err(|e| format!("models.rhai: `client`: {e}"))?;
    let Some(profiles_map) = top
        .get("profiles")
        .and_then(|p| p.read_lock::<Map>().map(|m| m.clone()))
    else {
        return Err(
            "models.rhai: `profiles` must be a map of name: #{ base_url, key_env, model, ... }"
                .into(),
        );
    };
    let mut profiles = BTreeMap::new();
    for (name, entry) in profiles_map {
        let at = format!("models.rhai: profile `{name}`");
        let Some(mut map) = entry.read_lock::<Map>().map(|m| m.clone()) else {
            return Err(format!("{at} must be a map"));
        };
        let options = match map.remove("options").map(|o| o.flatten()) {
            None => Options::Fixed(serde_json::Map::new()),
            Some(o) if o.is_fnptr() => Options::Function(o.cast::<FnPtr>()),
            Some(o) => match api::to_json(&o).map_err(|e| format!("{at}: `options`: {e}"))? {
                Value::Object(m) => Options::Fixed(m),
                other => {
                    return Err(format!(
                        "{at}: `options` must be a map or a function, not {other}"
                    ));
                }
            },
        };
        let json = api::to_json(&Dynamic::from_map(map)).map_err(|e| format!("{at}: {e}"))?;
        let fields: ProfileFields =
            serde_json::from_value(json).map_err(|e| format!("{at}: {e}"))?;
        if !(fields.base_url.starts_with("http://") || fields.base_url.starts_with("https://")) {
            return Err(format!(
                "{at}: base_url {:?} is not an http(s) URL",
                fields.base_url
            ));
        }
        let tool_calls = match fields.tool_calls.as_deref() {
            None => ToolCallMode::Native,
            Some(v) => ToolCallMode::parse(v).map_err(|e| format!("{at}: {e}"))?,
        };
        profiles.insert(
            name.to_string(),
            Profile {
                name: name.to_string(),
                base_url: fields.base_url,
                key_env: fields.key_env,
                model: fields.model,
                context_window: fields.context_window,
                options,
                tool_calls,
                lean_prompt: fields.lean_prompt,
            },
        );
    }
    let default = match top.get("default_profile") {
        Some(d) if d.is_string() => d.to_string(),
        Some(d) => {
            return Err(format!(
                "models.rhai: `default_profile` must be a profile name, not {}",
                d.type_name()
            ));
        }
        None => profiles.keys().next().cloned().unwrap_or_default(),
    };
    let models = Models {
        default,
        client,
        profiles,
    };
    if !models.profiles.is_empty() {
        models
            .profile(&models.default)
            .map_err(|e| format!("models.rhai: `default_profile`: {e}"))?;
    }
    Ok(models)
}

/// A profile's options as the agent's per-request hook.
pub struct ProfileOptions {
    pub script: Arc<Script>,
    pub options: Options,
}

impl RequestOptions for ProfileOptions {
    fn options(&self, ctx: &RequestCtx) -> Result<serde_json::Map<String, Value>, String> {
        match &self.options {
            Options::Fixed(map) => Ok(map.clone()),
            Options::Function(f) => {
                let _guard = CallGuard::enter(SCRIPT_CALL_BUDGET, Default::default(), None, None);
                /// What an `options(ctx)` function is given.
                #[derive(serde::Serialize)]
                struct Ctx {
                    turn: i64,
                    after_tool: bool,
                }
                let m = rhai::serde::to_dynamic(Ctx {
                    turn: ctx.turn.into(),
                    after_tool: ctx.after_tool,
                })
                .map_err(|e| e.to_string())?;
                let value = f
                    .call::<Dynamic>(engine(), &self.script.ast, (m,))
                    .map_err(|e| {
                        error::runtime_error(&self.script.display_path(), &self.script.source, &e)
                            .summary
                    })?;
                match api::to_json(&value).map_err(|e| e.to_string())? {
                    Value::Object(map) => Ok(map),
                    Value::Null => Ok(serde_json::Map::new()),
                    other => Err(format!("the options function returned {other}, not a map")),
                }
            }
        }
    }

    fn fixed(&self) -> Option<&serde_json::Map<String, Value>> {
        match &self.options {
            Options::Fixed(map) => Some(map),
            Options::Function(_) => None,
        }
    }
}

/// `parse_tool_calls(text, tools)` of `models.rhai`, when it defines one;
/// the built-in reader otherwise. `tools` is a list of `#{name,
/// description, parameters}`; the function returns a list of `#{name,
/// arguments}` (the built-in reader is `default_tool_calls(text, tools)`).
pub struct ScriptCallReader {
    pub script: Arc<Script>,
}

/// The hook's name.
pub const PARSE_TOOL_CALLS: &str = "parse_tool_calls";

impl CallReader for ScriptCallReader {
    fn read(&self, text: &str, registry: &Registry) -> Result<Vec<TextCall>, String> {
        if !self.script.has_fn(PARSE_TOOL_CALLS, 2) {
            return Ok(text_calls::parse(text));
        }
        let tools: rhai::Array = registry
            .tools()
            .map(|t| {
                let spec = t.spec();
                /// A tool as `parse_tool_calls` sees it.
                #[derive(serde::Serialize)]
                struct Tool<'a> {
                    name: &'a str,
                    description: &'a str,
                    parameters: &'a Value,
                }
                rhai::serde::to_dynamic(Tool {
                    name: &spec.name,
                    description: &spec.description,
                    parameters: &spec.parameters,
                })
                .unwrap_or(Dynamic::UNIT)
            })
            .collect();
        let value = self
            .script
            .call_hook(
                PARSE_TOOL_CALLS,
                vec![text.into(), Dynamic::from_array(tools)],
            )
            .map_err(|e| e.summary)?;
        calls_from_dynamic(&value)
            .map_err(|e| format!("{PARSE_TOOL_CALLS} in models.rhai returned {e}"))
    }
}

/// A script's list of `#{name, arguments}` as calls.
pub fn calls_from_dynamic(value: &Dynamic) -> Result<Vec<TextCall>, String> {
    if value.is_unit() {
        return Ok(Vec::new());
    }
    let Value::Array(items) = api::to_json(value).map_err(|e| e.to_string())? else {
        return Err(format!("{}, not a list", value.type_name()));
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Object(mut m) => {
                let name = m
                    .remove("name")
                    .and_then(|n| n.as_str().map(str::to_string));
                match (name, m.remove("arguments")) {
                    (Some(name), Some(arguments)) => Ok(TextCall { name, arguments }),
                    _ => Err("an entry without name or arguments".to_string()),
                }
            }
            other => Err(format!("an entry that is not a map: {other}")),
        })
        .collect()
}

/// The built-in reader's calls as a script value (`default_tool_calls`).
pub fn calls_to_dynamic(calls: Vec<TextCall>) -> rhai::Array {
    calls
        .into_iter()
        .map(|c| {
            /// A call as a script sees it.
            #[derive(serde::Serialize)]
            struct Call {
                name: String,
                arguments: Value,
            }
            rhai::serde::to_dynamic(Call {
                name: c.name,
                arguments: c.arguments,
            })
            .unwrap_or(Dynamic::UNIT)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{DEFAULTS, MODELS, Origin, compile};

    fn default_models() -> (Arc<Script>, Models) {
        let source = DEFAULTS.iter().find(|(n, _)| *n == MODELS).unwrap().1;
        let script = Arc::new(compile(MODELS, source.into(), Origin::Default).unwrap());
        let models = parse(&script).unwrap();
        (script, models)
    }

    #[test]
    fn the_defaults_have_the_presets() {
        let (_, models) = default_models();
        assert_eq!(models.default, "deepseek");
        let names: Vec<&String> = models.profiles.keys().collect();
        assert_eq!(
            names,
            ["deepseek", "llamacpp", "ollama", "openai", "openrouter"]
        );
        // Every client value of the script matches the client's own
        // constants (what a client built without scripts uses).
        let floor = crate::client::ClientConfig::new("u", "m", None);
        let mut scripted = floor.clone();
        models.client.apply(&mut scripted);
        assert_eq!(format!("{scripted:?}"), format!("{floor:?}"));
        let err = models.profile("nope").unwrap_err();
        assert!(err.contains("known profiles: deepseek, llamacpp"), "{err}");
    }

    #[test]
    fn a_partial_client_map_takes_the_rest_from_the_built_in_file() {
        let source = r#"#{ default_profile: "p", client: #{ idle_timeout: 7 },
            profiles: #{ p: #{ base_url: "http://127.0.0.1:1/v1", model: "m" } } }"#;
        let script = compile(
            MODELS,
            source.into(),
            Origin::User("/tmp/models.rhai".into()),
        )
        .unwrap();
        let models = parse(&script).unwrap();
        assert_eq!(models.client.idle_timeout, 7);
        assert_eq!(models.client.max_attempts, crate::client::MAX_ATTEMPTS);
        // A misspelt field is named when the file is compiled.
        let err = compile(
            MODELS,
            r#"#{ default_profile: "p", client: #{ idel_timeout: 7 }, profiles: #{ p: #{ base_url: "x", model: "m" } } }"#.into(),
            Origin::User("/tmp/models.rhai".into()),
        )
        .unwrap_err();
        assert!(err.summary.contains("idel_timeout"), "{}", err.summary);
    }

    #[test]
    fn function_options_change_with_the_request() {
        let script = Arc::new(
            compile(
                MODELS,
                r#"#{ profiles: #{ p: #{ base_url: "http://x/v1", model: "m",
                    options: |ctx| if ctx.turn == 1 { #{ tool_choice: "required" } } else { #{ temperature: 0 } } } } }"#
                    .into(),
                Origin::User("models.rhai".into()),
            )
            .unwrap(),
        );
        let models = parse(&script).unwrap();
        let hook = ProfileOptions {
            script,
            options: models.profile("p").unwrap().options.clone(),
        };
        let first = hook
            .options(&RequestCtx {
                turn: 1,
                after_tool: false,
            })
            .unwrap();
        let later = hook
            .options(&RequestCtx {
                turn: 2,
                after_tool: true,
            })
            .unwrap();
        assert_eq!(
            first.get("tool_choice"),
            Some(&Value::String("required".into()))
        );
        assert_eq!(later.get("tool_choice"), None);
        assert_eq!(later.get("temperature"), Some(&serde_json::json!(0)));
    }

    #[test]
    fn hosted_presets_call_natively_and_local_ones_cannot_hang() {
        let (script, models) = default_models();
        for name in ["deepseek", "openai", "openrouter"] {
            let p = models.profile(name).unwrap();
            assert_eq!(p.tool_calls, ToolCallMode::Native, "{name}");
            assert!(!p.lean_prompt, "{name}");
        }
        for name in ["ollama", "llamacpp"] {
            let p = models.profile(name).unwrap();
            assert_eq!(p.tool_calls, ToolCallMode::Auto, "{name}");
            assert!(p.lean_prompt, "{name}");
            let hook = ProfileOptions {
                script: script.clone(),
                options: p.options.clone(),
            };
            for turn in 1..4 {
                let o = hook
                    .options(&RequestCtx {
                        turn,
                        after_tool: turn > 1,
                    })
                    .unwrap();
                // Every answer is bounded, and no call is forced.
                assert!(
                    o.get("max_tokens").and_then(Value::as_u64).is_some(),
                    "{name}"
                );
                assert_ne!(
                    o.get("tool_choice"),
                    Some(&serde_json::json!("required")),
                    "{name}"
                );
            }
        }
        let err = compile(
            MODELS,
            r#"#{ profiles: #{ p: #{ base_url: "http://x/v1", model: "m", tool_calls: "maybe" } } }"#.into(),
            Origin::User("models.rhai".into()),
        )
        .unwrap_err();
        assert!(
            err.summary.contains("profile `p`") && err.summary.contains("\"maybe\""),
            "{}",
            err.summary
        );
    }

    #[test]
    fn the_script_reader_uses_the_hook_or_the_built_in_one() {
        let registry = Registry::with_builtins();
        let text = "```json\n{\"name\": \"list_dir\", \"arguments\": {\"path\": \".\"}}\n```";
        let (script, _) = default_models();
        let calls = ScriptCallReader { script }.read(text, &registry).unwrap();
        assert_eq!(calls[0].name, "list_dir");
        // A person's own format, falling back on the built-in reader.
        let script = Arc::new(
            compile(
                MODELS,
                r#"fn parse_tool_calls(text, tools) {
                    if text.starts_with("CALL ") { [#{ name: text.sub_string(5), arguments: #{} }] }
                    else { default_tool_calls(text, tools) }
                }
                #{ profiles: #{} }"#
                    .into(),
                Origin::User("models.rhai".into()),
            )
            .unwrap(),
        );
        let reader = ScriptCallReader { script };
        assert_eq!(reader.read("CALL glob", &registry).unwrap()[0].name, "glob");
        assert_eq!(reader.read(text, &registry).unwrap()[0].name, "list_dir");
    }

    #[test]
    fn the_bounds_reach_the_client_config() {
        let script = compile(
            MODELS,
            "#{ client: #{ request_timeout: 5, max_response_bytes: 1000, max_tool_argument_bytes: 0 }, profiles: #{} }".into(),
            Origin::User("models.rhai".into()),
        )
        .unwrap();
        let models = parse(&script).unwrap();
        let mut config = ClientConfig::new("http://x/v1", "m", None);
        models.client.apply(&mut config);
        assert_eq!(config.request_timeout, Duration::from_secs(5));
        assert_eq!(config.limits.max_response_bytes, 1000);
        assert_eq!(config.limits.max_tool_argument_bytes, 1, "never zero");
        assert_eq!(config.idle_timeout, crate::client::IDLE_TIMEOUT);
    }

    #[test]
    fn misspelt_fields_are_reported() {
        let script = compile(
            MODELS,
            "#{ default_profile: \"a\", profiles: #{ a: #{ base_url: \"http://x/v1\", model: \"m\", temprature: 0 } } }".into(),
            Origin::User("models.rhai".into()),
        );
        let err = match script {
            Ok(s) => parse(&s).unwrap_err(),
            Err(e) => e.summary,
        };
        assert!(
            err.contains("profile `a`") && err.contains("unknown field `temprature`"),
            "{err}"
        );
    }
}

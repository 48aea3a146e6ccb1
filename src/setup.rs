//! The one assembly path: every part of an agent is built here from the
//! scripts and the settings — the model client and its request options,
//! the context window, the runtime and its policy, the tool registry, the
//! system and summary prompts, and the watchdog. Startup, `/reload` and
//! `/model` all go through [`Session`], so they cannot disagree.
//!
//! What belongs to the session rather than to one assembly is carried over
//! explicitly: its id and data paths, the "always" approvals, the channel
//! approval questions travel on, the sandbox probe, and the conversation
//! itself (which lives in the [`Agent`]).

use std::path::PathBuf;
use std::sync::Arc;

use crate::agent::{Agent, transcript};
use crate::client::{ChatClient, ClientConfig, RequestOptions};
use crate::config::{Overrides, Settings};
use crate::data_dir::retention::{Pruned, Retention};
use crate::data_dir::{DataDir, new_session_id};
use crate::prompt::PromptContext;
use crate::runtime::Runtime;
use crate::runtime::checkpoint::{Caps, Checkpoints};
use crate::runtime::policy::{Approvals, Asks, Policy, ask_channel};
use crate::runtime::sandbox;
use crate::script::policy::{PolicySettings, ScriptApprove};
use crate::script::tools::ScriptTool;
use crate::script::{self, LoadNote, MCP, MODELS, POLICY, ScriptHost, TOOLS, WATCHDOG, models};
use crate::tools::Registry;
use crate::tools::mcp::{Hub, ServerConfig};
use crate::tools::text_calls::{BuiltinReader, CallReader, ToolCallMode};
use crate::watchdog::replay::RunLog;
use crate::watchdog::{Judge, Watchdog};

/// Something the person should be told about the assembly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A fact: a resumed session, a reloaded script.
    Info(String),
    /// Something failed and a default stands in, or a feature is off.
    Warning(String),
}

impl Note {
    /// The note as every front end shows it: a fact is a notice, a
    /// failure a warning.
    pub fn event(&self) -> crate::protocol::Event {
        use crate::protocol::Event;
        match self {
            Note::Info(text) => Event::Notice(text.clone()),
            Note::Warning(text) => Event::Warning(text.clone()),
        }
    }
}

/// The model side of a session: resolved settings, the client and the
/// profile's per-request options and window.
pub struct ModelSetup {
    pub settings: Settings,
    pub client: ChatClient,
    pub options: Option<Arc<dyn RequestOptions>>,
    /// The profile's name, when one applied.
    pub profile: Option<String>,
    pub context_window: Option<u64>,
    /// How the profile's model calls tools and how long its prompt is.
    pub style: PromptStyle,
    /// Reads calls written as text (`parse_tool_calls` of models.rhai).
    pub reader: Arc<dyn CallReader>,
}

/// What a profile changes about the prompt and the tools array.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromptStyle {
    pub tool_calls: ToolCallMode,
    pub lean: bool,
}

/// Picks the profile (`profile` or the default of `models.rhai`) and
/// resolves settings and the client from it, the environment and flags.
pub fn model_setup(
    host: &ScriptHost,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
    profile: Option<&str>,
) -> Result<ModelSetup, String> {
    let script = host.get(MODELS).cloned();
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
    let mut config = ClientConfig::new(
        settings.base_url.clone(),
        settings.model.clone(),
        settings.api_key.clone(),
    );
    if let Some(m) = &parsed {
        m.client.apply(&mut config);
    }
    let client = ChatClient::new(config).map_err(|e| e.to_string())?;
    let options: Option<Arc<dyn RequestOptions>> = match (&script, &chosen) {
        (Some(script), Some(p)) => Some(Arc::new(models::ProfileOptions {
            script: script.clone(),
            options: p.options.clone(),
        })),
        _ => None,
    };
    let style = chosen
        .as_ref()
        .map(|p| PromptStyle {
            tool_calls: p.tool_calls,
            lean: p.lean_prompt,
        })
        .unwrap_or_default();
    let reader: Arc<dyn CallReader> = match &script {
        Some(script) => Arc::new(models::ScriptCallReader {
            script: script.clone(),
        }),
        None => Arc::new(BuiltinReader),
    };
    Ok(ModelSetup {
        settings,
        client,
        options,
        profile: chosen.as_ref().map(|p| p.name.clone()),
        context_window: chosen.and_then(|p| p.context_window),
        style,
        reader,
    })
}

/// What the scripts make of a workspace: the tools, both prompts and the
/// watchdog, with notes for the person.
pub struct Assembled {
    pub registry: Arc<Registry>,
    pub system_prompt: String,
    pub summary_prompt: String,
    pub compaction: crate::agent::context::CompactionRule,
    pub watchdog: Watchdog,
    pub notes: Vec<Note>,
}

/// Builds the registry (built-ins plus the tools of tools.rhai), the
/// prompts and the watchdog from loaded scripts.
pub fn assemble(host: &ScriptHost, workspace: &std::path::Path, model: &str) -> Assembled {
    assemble_in(host, workspace, workspace, model, PromptStyle::default())
}

/// [`assemble`] for an agent started in `cwd`, a directory of the
/// workspace: its `AGENTS.md` files reach the prompt too.
pub fn assemble_in(
    host: &ScriptHost,
    workspace: &std::path::Path,
    cwd: &std::path::Path,
    model: &str,
    style: PromptStyle,
) -> Assembled {
    let mut notes = Vec::new();
    let mut registry = Registry::with_builtins();
    if let Some(script) = host.get(TOOLS) {
        match ScriptTool::all(script) {
            Ok(tools) => {
                for tool in tools {
                    let name = tool.spec().name.clone();
                    if registry.register(tool).is_some() {
                        notes.push(Note::Info(format!(
                            "{}: the tool `{name}` replaces the built-in `{name}`",
                            script.display_path()
                        )));
                    }
                }
            }
            Err(e) => notes.push(Note::Warning(format!(
                "{}: {e}; its tools are not available",
                script.display_path()
            ))),
        }
    }
    let mut ctx = PromptContext::new(workspace, cwd, model, registry.names());
    ctx.lean = style.lean;
    ctx.tool_calls = style.tool_calls.as_str().to_string();
    ctx.tool_descriptions = registry.describe_compact();
    let (system_prompt, summary_prompt, prompt_notes) = script::prompt::prompts(host, &ctx);
    notes.extend(prompt_notes.into_iter().map(Note::Warning));
    let compaction = script::prompt::compaction(host).unwrap_or_else(|e| {
        notes.push(Note::Warning(format!(
            "prompt.rhai: {e}; compacting by the built-in rule"
        )));
        crate::agent::context::CompactionRule::default()
    });
    let (watchdog, warnings) = match host.get(WATCHDOG) {
        Some(script) => script::watchdog::from_script(script.clone()),
        None => script::watchdog::default_watchdog(),
    };
    notes.extend(warnings.into_iter().map(Note::Warning));
    Assembled {
        registry: Arc::new(registry),
        system_prompt,
        summary_prompt,
        compaction,
        watchdog,
        notes,
    }
}

/// What the scripts produce for the tool side of an agent.
pub struct Parts {
    pub runtime: Runtime,
    pub registry: Arc<Registry>,
    pub system_prompt: String,
    pub summary_prompt: String,
    pub compaction: crate::agent::context::CompactionRule,
    pub watchdog: Watchdog,
}

/// One session: the scripts, the settings and the state that outlives a
/// reload.
pub struct Session {
    pub host: ScriptHost,
    pub settings: Settings,
    pub overrides: Overrides,
    pub profile: Option<String>,
    /// The current profile's prompt style.
    style: PromptStyle,
    pub id: String,
    pub data: DataDir,
    approvals: Approvals,
    asks: Asks,
    /// The kernel probe, started with the session and read when the first
    /// runtime is built.
    probe: Option<sandbox::SessionProbe>,
    /// The session's sandbox as first built: the launcher, what the kernel
    /// supports, the private temp dir. A reload rebuilds it from the new
    /// settings with the same report and temp dir.
    sandbox: Option<sandbox::SessionSandbox>,
    /// The environment commands inherit, before scrubbing.
    child_env: Vec<(String, String)>,
    /// Where settings and key variables are looked up, also on reload.
    lookup: Env,
    /// What the data dir keeps (`keep_days`, `keep_mb` in policy.rhai).
    retention: Retention,
    /// The undo store's size rule (`checkpoint_*_cap` in policy.rhai).
    checkpoint_caps: Caps,
    /// The ids of saved conversations this session continued.
    resumed: Vec<String>,
    /// The prune of old sessions started with this one; waited for when
    /// the session ends, so the agent never exits in the middle of it.
    pruning: Option<std::thread::JoinHandle<Pruned>>,
    /// The MCP servers of `mcp.rhai`, started in the background.
    pub mcp: Hub,
    /// The registry the scripts built, before the MCP servers' tools are
    /// added to it ([`Session::refresh_mcp`]).
    base_registry: Arc<Registry>,
    /// [`Hub::generation`] when the agent's registry was last built.
    mcp_generation: Option<u64>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.mcp.shutdown();
        if let Some(pruning) = self.pruning.take() {
            let _ = pruning.join();
        }
    }
}

/// How the session reads environment variables (the process's own in
/// the binary; a map in tests), for settings and profiles' key variables.
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// How to start a session.
pub struct Start<'a> {
    /// Where the scripts and the data live (`config_dir`, `data_dir`).
    /// The rest is resolved again from `overrides` and `env` with the
    /// profile chosen, so a workspace is given as `overrides.workspace`.
    pub settings: &'a Settings,
    pub overrides: &'a Overrides,
    pub env: Env,
    pub profile: Option<&'a str>,
    /// Continue a saved conversation: `last`, an id or a path.
    pub resume: Option<&'a str>,
    /// The agent binary that launches commands (`sandbox-exec`); `None`:
    /// this process's own executable. Tests that build a session in
    /// process name the built binary.
    pub launcher: Option<PathBuf>,
}

impl Session {
    /// Loads the scripts and builds a ready agent. `Err` is a message for
    /// the person (a bad profile, an unknown session).
    pub fn start(start: Start<'_>) -> Result<(Session, Agent, Vec<Note>), String> {
        // Probing the kernel takes a process; it runs while the scripts load.
        let launcher = match &start.launcher {
            Some(path) => Ok(path.clone()),
            None => std::env::current_exe(),
        };
        let probe = sandbox::SessionProbe::start_cached(launcher, Some(&start.settings.data_dir));
        let (host, load_notes) = ScriptHost::load(&start.settings.config_dir);
        let mut notes: Vec<Note> = load_notes
            .iter()
            .filter(|n| !matches!(n, LoadNote::Loaded { .. }))
            .map(|n| Note::Warning(n.message()))
            .collect();
        let model = model_setup(&host, start.overrides, &*start.env, start.profile)?;
        let (asks, queue) = ask_channel();
        let data = DataDir::new(model.settings.data_dir.clone());
        let mut session = Session {
            host,
            settings: model.settings.clone(),
            overrides: start.overrides.clone(),
            profile: model.profile.clone(),
            style: model.style,
            id: new_session_id(),
            data,
            approvals: Approvals::default(),
            asks,
            probe: Some(probe),
            sandbox: None,
            child_env: std::env::vars().collect(),
            lookup: start.env.clone(),
            retention: Retention {
                keep_days: 0,
                keep_mb: 0,
            },
            checkpoint_caps: Caps::default(),
            resumed: Vec::new(),
            pruning: None,
            mcp: Hub::empty(),
            base_registry: Arc::new(Registry::default()),
            mcp_generation: None,
        };
        let parts = session.parts(&mut notes);
        session.base_registry = parts.registry.clone();
        session.start_mcp(&parts.runtime, &mut notes);
        let judge = Judge::new(parts.watchdog, session.settings.workspace.clone())
            .with_run_log(RunLog::new(session.data.run_log(&session.id)))
            .with_checkpoints(session.checkpoints(&session.id));
        let mut agent = Agent::new(
            Arc::new(model.client),
            parts.registry,
            Arc::new(parts.runtime),
            parts.system_prompt,
            judge,
        );
        agent.set_asks(queue);
        agent.set_summary_prompt(parts.summary_prompt);
        agent.set_compaction(parts.compaction);
        agent.set_request_options(model.options);
        agent.set_context_window(model.context_window);
        agent.set_tool_calls(model.style.tool_calls, model.reader);
        agent.set_lean_tools(model.style.lean);
        match start.resume {
            Some(which) => notes.extend(session.resume(&mut agent, which)?),
            None => notes.extend(session.new_transcript(&mut agent)),
        }
        session.start_pruning();
        Ok((session, agent, notes))
    }

    /// The servers `mcp.rhai` configures (none when it is broken, with a
    /// warning).
    fn mcp_configs(&self, notes: &mut Vec<Note>) -> Vec<ServerConfig> {
        match self.host.get(MCP).map(|s| script::mcp::servers(s)) {
            Some(Ok(list)) => list,
            Some(Err(e)) => {
                notes.push(Note::Warning(format!("{e}; no MCP servers are started")));
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Starts the servers of `mcp.rhai` in the background (a hub with the
    /// same servers already running is kept). Their tools join the
    /// registry at [`Session::refresh_mcp`].
    fn start_mcp(&mut self, runtime: &Runtime, notes: &mut Vec<Note>) {
        let configs = self.mcp_configs(notes);
        if configs == self.mcp.configs() {
            return;
        }
        self.mcp.shutdown();
        self.mcp_generation = None;
        if configs.is_empty() {
            self.mcp = Hub::empty();
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            notes.push(Note::Warning(
                "MCP servers need the async runtime; none are started".into(),
            ));
            self.mcp = Hub::empty();
            return;
        };
        let lookup = self.lookup.clone();
        let names: Vec<String> = configs
            .iter()
            .filter(|c| c.enabled)
            .map(|c| c.name.clone())
            .collect();
        let setup = crate::tools::mcp::Setup {
            child_env: runtime.child_env.clone(),
            workspace: self.settings.workspace.clone(),
            lookup: Arc::new(move |name: &str| lookup(name)),
        };
        self.mcp = Hub::start(configs, setup, &handle);
        if !names.is_empty() {
            notes.push(Note::Info(format!(
                "MCP: starting {} in the background; /mcp shows them",
                names.join(", ")
            )));
        }
    }

    /// Waits until no MCP server is still starting (each within its
    /// `startup_timeout`).
    pub async fn mcp_started(&self) {
        self.mcp.wait_started().await;
    }

    /// Puts the running MCP servers' tools into the agent's registry when
    /// they changed, and returns what happened to the servers since the
    /// last call (failed starts, crashes, restarts) for the person.
    pub fn refresh_mcp(&mut self, agent: &mut Agent) -> Vec<Note> {
        let notes: Vec<Note> = self
            .mcp
            .take_reports()
            .into_iter()
            .map(|line| {
                if line.contains("restarted") {
                    Note::Info(line)
                } else {
                    Note::Warning(line)
                }
            })
            .collect();
        let generation = self.mcp.generation();
        if self.mcp_generation != Some(generation) {
            let mut registry = (*self.base_registry).clone();
            for tool in self.mcp.tools() {
                if registry.get(&tool.spec().name).is_none() {
                    registry.register(tool);
                }
            }
            agent.set_registry(Arc::new(registry));
            self.mcp_generation = Some(generation);
        }
        notes
    }

    /// Deletes old sessions by the retention rule, in the background (off
    /// the first prompt's path); never this one or one it continued. Also
    /// removes the private temp dirs of sessions that were killed.
    /// At most once an hour ([`crate::data_dir::retention::PRUNE_EVERY`]).
    fn start_pruning(&mut self) {
        if !crate::data_dir::retention::claim(&self.data) {
            return;
        }
        let (data, rule) = (self.data.clone(), self.retention);
        let mut keep = self.resumed.clone();
        keep.push(self.id.clone());
        let work = move || {
            sandbox::sweep_stale_temp_dirs();
            let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
            crate::data_dir::retention::prune(&data, rule, &keep)
        };
        self.pruning = std::thread::Builder::new()
            .name("prune".into())
            .spawn(work)
            .ok();
    }

    /// What the scripts make of this session's workspace and profile.
    fn assembled(&self) -> Assembled {
        assemble_in(
            &self.host,
            &self.settings.workspace,
            &self.settings.cwd,
            &self.settings.model,
            self.style,
        )
    }

    /// The tool side from the loaded scripts.
    fn parts(&mut self, notes: &mut Vec<Note>) -> Parts {
        let runtime = self.runtime(notes);
        let assembled = self.assembled();
        notes.extend(assembled.notes);
        Parts {
            runtime,
            registry: assembled.registry,
            system_prompt: assembled.system_prompt,
            summary_prompt: assembled.summary_prompt,
            compaction: assembled.compaction,
            watchdog: assembled.watchdog,
        }
    }

    /// The runtime from `policy.rhai`: limits, extra roots, the secret rule
    /// (applied to the environment), the approval hook, the API key among
    /// the values blanked out of tool outputs, and the sandbox.
    fn runtime(&mut self, notes: &mut Vec<Note>) -> Runtime {
        let settings = &self.settings;
        let script = self.host.get(POLICY).cloned();
        let mut built_in = || {
            PolicySettings::built_in().unwrap_or_else(|e| {
                notes.push(Note::Warning(format!(
                    "the built-in policy.rhai cannot be read ({e}); using the runtime's own limits"
                )));
                PolicySettings::floor()
            })
        };
        let policy_settings = match script.as_deref().map(PolicySettings::from_script) {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                let settings = built_in();
                notes.push(Note::Warning(format!(
                    "policy.rhai: {e}; using the default limits"
                )));
                settings
            }
            None => built_in(),
        };
        self.retention = policy_settings.retention();
        self.checkpoint_caps = policy_settings.checkpoint_caps();
        let spill_dir = self.data.outputs(&self.id);
        let env = self.child_env.clone();
        let mut runtime = match &script {
            Some(script) => Runtime::with_env_rules(
                settings.workspace.clone(),
                spill_dir,
                env,
                &policy_settings.env_allow,
                &|name, value| crate::script::policy::is_secret(script, name, value),
            ),
            None => Runtime::new(settings.workspace.clone(), spill_dir, env),
        };
        runtime.limits = policy_settings.limits();
        runtime.data_dir = Some(self.data.root().to_path_buf());
        let extra: Vec<PathBuf> = policy_settings
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
        // The agent's own dirs are read-only to file tools.
        runtime.protect(&[settings.data_dir.clone(), settings.config_dir.clone()]);
        if let Some(key) = &settings.api_key {
            runtime.add_redaction(key);
        }
        if let Some(Ok(servers)) = self.host.get(MCP).map(|s| script::mcp::servers(s)) {
            guard_mcp_tokens(&mut runtime, &servers, &*self.lookup);
        }
        let mut sandbox_settings = policy_settings.sandbox_settings();
        if settings.sandbox {
            // `--sandbox` / AGENT_SANDBOX: confinement or no commands.
            sandbox_settings.mode = sandbox::SandboxMode::Require;
        }
        let protected = [settings.config_dir.clone(), settings.data_dir.clone()];
        let previous = self.sandbox.as_ref().map(|s| s.line.clone());
        let session_sandbox = match self.sandbox.take() {
            Some(s) => s,
            None => sandbox::for_agent(
                self.probe
                    .take()
                    .unwrap_or_else(|| sandbox::SessionProbe::start(std::env::current_exe())),
                &sandbox_settings,
                &settings.workspace,
                &self.id,
                &protected,
            ),
        };
        let session_sandbox =
            session_sandbox.with_settings(&sandbox_settings, &settings.workspace, &protected);
        // A missing layer is a warning, said at startup and again only
        // when a reload changes what holds.
        if session_sandbox.degraded && previous.as_deref() != Some(session_sandbox.line.as_str()) {
            notes.push(Note::Warning(session_sandbox.line.clone()));
        }
        runtime = runtime.with_sandbox(session_sandbox.sandbox.clone());
        self.sandbox = Some(session_sandbox);
        let approve: Arc<dyn crate::runtime::policy::Approve> = match script {
            Some(script) => Arc::new(ScriptApprove {
                script,
                workspace: settings.workspace.clone(),
                home: std::env::var("HOME").unwrap_or_default(),
                config_dir: settings.config_dir.clone(),
                sandboxed: runtime.sandbox.as_ref().is_some_and(|s| s.confines()),
            }),
            None => Arc::new(crate::runtime::policy::AllowAll),
        };
        runtime.policy = Policy::new(approve, Some(self.asks.clone()), self.approvals.clone());
        runtime
    }

    /// Applies edited scripts to `agent` (all of them when `force`, else
    /// only when a file changed): the runtime, tools, both prompts, the
    /// watchdog, and the current profile's request options and window.
    /// The conversation and the session's approvals stay.
    pub fn reload(&mut self, agent: &mut Agent, force: bool) -> Vec<Note> {
        let mut notes: Vec<Note> = self
            .host
            .reload(force)
            .iter()
            .map(|n| match n {
                LoadNote::Loaded { name, .. } => Note::Info(format!("reloaded {name}")),
                other => Note::Warning(other.message()),
            })
            .collect();
        // The profile first: its style shapes the prompt.
        match model_setup(
            &self.host,
            &self.overrides,
            &*self.lookup,
            self.profile.as_deref(),
        ) {
            Ok(model) => self.apply_model(agent, model),
            Err(e) => notes.push(Note::Warning(format!(
                "models.rhai: {e}; keeping the current model settings"
            ))),
        }
        let parts = self.parts(&mut notes);
        self.base_registry = parts.registry.clone();
        self.start_mcp(&parts.runtime, &mut notes);
        self.apply(agent, parts);
        // The new registry lacks the MCP tools until they are put back.
        self.mcp_generation = None;
        notes.extend(self.refresh_mcp(agent));
        notes
    }

    fn apply(&self, agent: &mut Agent, parts: Parts) {
        agent.set_runtime(Arc::new(parts.runtime));
        agent.set_registry(parts.registry);
        agent.set_system_prompt(parts.system_prompt);
        agent.set_summary_prompt(parts.summary_prompt);
        agent.set_compaction(parts.compaction);
        agent.set_watchdog(parts.watchdog);
        if let Some(cp) = agent.checkpoints_mut() {
            cp.set_caps(self.checkpoint_caps);
        }
    }

    /// The undo store of session `id` (new, or continued).
    fn checkpoints(&self, id: &str) -> Checkpoints {
        Checkpoints::new(
            self.data.checkpoints(id),
            &self.settings.workspace,
            self.checkpoint_caps,
        )
    }

    fn apply_model(&mut self, agent: &mut Agent, model: ModelSetup) {
        agent.set_model(Arc::new(model.client));
        agent.set_request_options(model.options);
        agent.set_context_window(model.context_window);
        agent.set_tool_calls(model.style.tool_calls, model.reader);
        agent.set_lean_tools(model.style.lean);
        self.profile = model.profile;
        self.settings = model.settings;
        self.style = model.style;
    }

    /// Switches to profile `name`: model, endpoint, key, request options
    /// and context window together.
    pub fn switch_profile(&mut self, agent: &mut Agent, name: &str) -> Result<(), String> {
        let model = model_setup(&self.host, &self.overrides, &*self.lookup, Some(name))?;
        let restyled = model.style != self.style;
        self.apply_model(agent, model);
        if restyled {
            // A lean or text-call profile has its own system prompt.
            agent.set_system_prompt(self.assembled().system_prompt);
        }
        Ok(())
    }

    /// What the banner and `agent check` say about this session.
    pub fn facts(&self, agent: &Agent) -> Facts {
        Facts {
            workspace: self.settings.workspace.clone(),
            model: self.settings.model.clone(),
            endpoint: self.settings.base_url.clone(),
            profile: self.profile.clone(),
            key_source: self.settings.key_source.clone(),
            key_needed: self.key_needed(),
            sandbox: agent
                .runtime()
                .sandbox
                .as_ref()
                .map(|s| s.describe())
                .unwrap_or_else(|| "sandbox off: commands are not confined".to_string()),
        }
    }

    /// The variable a key is expected in, when the endpoint is not on
    /// this machine and no key is set.
    fn key_needed(&self) -> Option<String> {
        if self.settings.api_key.is_some() || is_local(&self.settings.base_url) {
            return None;
        }
        let profile_var = self
            .host
            .get(MODELS)
            .and_then(|s| models::parse(s).ok())
            .and_then(|m| {
                self.profile
                    .as_ref()
                    .and_then(|p| m.profiles.get(p).map(|p| p.key_env.clone()))
            })
            .filter(|v| !v.is_empty());
        Some(match profile_var {
            Some(var) => format!("{var} or AGENT_API_KEY"),
            None => "AGENT_API_KEY".to_string(),
        })
    }

    /// The session's "always" approvals.
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    /// Starts a new conversation in a new transcript (the old one stays).
    pub fn new_conversation(&mut self, agent: &mut Agent) -> Vec<Note> {
        agent.clear();
        crate::script::api::clear_session_state();
        self.id = new_session_id();
        agent.set_checkpoints(self.checkpoints(&self.id));
        self.new_transcript(agent)
    }

    fn new_transcript(&self, agent: &mut Agent) -> Vec<Note> {
        match transcript::new_session(
            &self.data,
            &self.id,
            &self.settings.workspace,
            &self.settings.model,
        ) {
            Ok(t) => {
                agent.set_transcript(Some(t));
                Vec::new()
            }
            Err(e) => {
                agent.set_transcript(None);
                vec![Note::Warning(format!(
                    "cannot save the transcript in {}: {e}; this conversation is not saved",
                    self.data.sessions().display()
                ))]
            }
        }
    }

    /// Continues a saved conversation in `agent`.
    pub fn resume(&mut self, agent: &mut Agent, which: &str) -> Result<Vec<Note>, String> {
        let (path, loaded) = transcript::find(&self.data, &self.settings.workspace, which)?;
        let mut notes = vec![Note::Info(format!(
            "resumed {} ({} messages{})",
            path.display(),
            loaded.messages.len(),
            if loaded.skipped > 0 {
                format!("; {} unreadable line(s) skipped", loaded.skipped)
            } else {
                String::new()
            }
        ))];
        agent.restore(loaded.messages);
        if let Some(id) = path.file_stem().and_then(|s| s.to_str()) {
            self.resumed.push(id.to_string());
            // Undo goes on in the continued session's store.
            agent.set_checkpoints(self.checkpoints(id));
        }
        match transcript::Transcript::append_to(&path) {
            Ok(t) => agent.set_transcript(Some(t)),
            Err(e) => {
                agent.set_transcript(None);
                notes.push(Note::Warning(format!(
                    "cannot append to {}: {e}; this session is not saved",
                    path.display()
                )));
            }
        }
        Ok(notes)
    }
}

/// What the person should know about a session at a glance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub workspace: PathBuf,
    pub model: String,
    pub endpoint: String,
    pub profile: Option<String>,
    /// Where the key came from; `None` when no key is set.
    pub key_source: Option<String>,
    /// Set when a key is missing for a remote endpoint: where to put one.
    pub key_needed: Option<String>,
    /// The sandbox's state in one line (which layers hold).
    pub sandbox: String,
}

/// Whether `base_url` points at this machine (a local server needs no key).
pub fn is_local(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Keeps the bearer tokens of `servers` (the variables their `token_env`
/// names) secret whatever the variables are called: each value is blanked
/// wherever the agent writes text (tool results the model reads, spill
/// files, transcripts, run logs), and the variable never reaches a
/// command or a stdio server, even when `env_allow` lets it.
fn guard_mcp_tokens(
    runtime: &mut Runtime,
    servers: &[ServerConfig],
    lookup: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) {
    for server in servers {
        if let crate::tools::mcp::Transport::Http {
            token_env: Some(var),
            ..
        } = &server.transport
        {
            runtime.child_env.retain(|(name, _)| name != var);
            if let Some(token) = lookup(var) {
                runtime.add_redaction(&token);
            }
        }
    }
}

/// `agent check`: starts every server of `mcp.rhai` (with the child
/// environment `policy.rhai` gives commands), waits for each within its
/// startup timeout, and says what became of it; then stops them all.
/// `Err` when mcp.rhai cannot be read.
pub async fn check_mcp(
    host: &ScriptHost,
    workspace: &std::path::Path,
    env: Env,
) -> Result<Vec<crate::tools::mcp::ServerStatus>, String> {
    let configs = match host.get(MCP) {
        Some(script) => script::mcp::servers(script)?,
        None => Vec::new(),
    };
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let mut runtime = match host
        .get(POLICY)
        .map(|p| (p, PolicySettings::from_script(p)))
    {
        Some((script, Ok(settings))) => Runtime::with_env_rules(
            workspace.to_path_buf(),
            std::env::temp_dir(),
            vars,
            &settings.env_allow,
            &|name, value| crate::script::policy::is_secret(script, name, value),
        ),
        _ => Runtime::new(workspace.to_path_buf(), std::env::temp_dir(), vars),
    };
    guard_mcp_tokens(&mut runtime, &configs, &*env);
    let setup = crate::tools::mcp::Setup {
        child_env: runtime.child_env.clone(),
        workspace: workspace.to_path_buf(),
        lookup: Arc::new(move |name: &str| env(name)),
    };
    let hub = Hub::start(configs, setup, &tokio::runtime::Handle::current());
    hub.wait_started().await;
    let status = hub.status();
    hub.shutdown();
    Ok(status)
}

/// One line for `agent check`: the endpoint and model the agent would use
/// after every override, and where its key comes from.
pub fn describe_endpoint(
    host: &ScriptHost,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
    profile: Option<&str>,
) -> Result<String, String> {
    let model = model_setup(host, overrides, env, profile)?;
    let s = &model.settings;
    let profile = model
        .profile
        .map(|p| format!(" (profile {p})"))
        .unwrap_or_default();
    let key = match (&s.key_source, is_local(&s.base_url)) {
        (Some(var), _) => format!("key from {var}"),
        (None, true) => "no key (a local server needs none)".to_string(),
        (None, false) => {
            "no key is set: requests will be refused; set AGENT_API_KEY or the profile's key_env"
                .to_string()
        }
    };
    Ok(format!(
        "model {} at {}{profile}; {key}",
        s.model, s.base_url
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_endpoints_need_no_key() {
        assert!(is_local("http://localhost:11434/v1"));
        assert!(is_local("http://127.0.0.1:8080/v1"));
        assert!(is_local("http://[::1]:8080/v1"));
        assert!(!is_local("https://api.deepseek.com/v1"));
        assert!(!is_local("http://localhost.evil.test/v1"));
        assert!(!is_local("not a url"));
    }

    #[test]
    fn an_mcp_token_is_blanked_and_kept_from_children_whatever_its_name() {
        use crate::tools::mcp::{DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, Transport};
        // A name the secret rule misses, let through by env_allow.
        let env = vec![
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("WEB_BEARER".to_string(), "tok-4f9Qx2".to_string()),
        ];
        let mut runtime = Runtime::with_env_rules(
            PathBuf::from("/w"),
            PathBuf::from("/s"),
            env.clone(),
            &["WEB_BEARER".to_string()],
            &crate::runtime::secrets::is_secret_env,
        );
        assert!(runtime.child_env.iter().any(|(k, _)| k == "WEB_BEARER"));
        let server = ServerConfig {
            name: "web".into(),
            transport: Transport::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                token_env: Some("WEB_BEARER".into()),
            },
            enabled: true,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            allow: None,
            deny: Vec::new(),
        };
        let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        guard_mcp_tokens(&mut runtime, &[server], &lookup);
        assert!(!runtime.child_env.iter().any(|(k, _)| k == "WEB_BEARER"));
        assert!(runtime.child_env.iter().any(|(k, _)| k == "PATH"));
        assert_eq!(
            runtime.redact("token tok-4f9Qx2 here".into()),
            "token [redacted] here"
        );
    }
}

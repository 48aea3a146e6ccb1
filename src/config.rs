//! Settings from the environment and the command line.
//!
//! Order, lowest to highest: built-in defaults, `AGENT_*` environment
//! variables, then flags. The environment is passed in as a function, so
//! tests never mutate the process environment.

use std::path::PathBuf;

/// Default endpoint: DeepSeek's OpenAI-compatible API.
pub const DEFAULT_BASE_URL: &str = "https://api.deepseek.com/v1";
/// Default model id.
pub const DEFAULT_MODEL: &str = "deepseek-chat";

/// Environment variable names, in one place.
pub mod env {
    pub const BASE_URL: &str = "AGENT_BASE_URL";
    pub const MODEL: &str = "AGENT_MODEL";
    pub const API_KEY: &str = "AGENT_API_KEY";
    pub const CONFIG_DIR: &str = "AGENT_CONFIG_DIR";
    pub const DATA_DIR: &str = "AGENT_DATA_DIR";
    pub const SANDBOX: &str = "AGENT_SANDBOX";
}

/// What the flags contribute; `None` means "not given".
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// `--sandbox`: confine shell commands' writes. A flag can only turn
    /// it on; `AGENT_SANDBOX=1` does the same.
    pub sandbox: bool,
    /// `-C DIR`: the workspace (else the enclosing git work tree's root,
    /// else the current directory).
    pub workspace: Option<PathBuf>,
}

/// Where a model profile points (from `models.rhai`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub base_url: String,
    pub model: String,
    /// The variable holding its key; `None` when it needs none.
    pub key_env: Option<String>,
}

/// The resolved settings of one run.
#[derive(Clone)]
pub struct Settings {
    pub base_url: String,
    pub model: String,
    /// Optional: local servers need none.
    pub api_key: Option<String>,
    /// The variable the key came from (`AGENT_API_KEY` or the profile's).
    pub key_source: Option<String>,
    /// Where the user's scripts live (`~/.config/agent` on Linux).
    pub config_dir: PathBuf,
    /// Where transcripts, history and spilled outputs go
    /// (`~/.local/share/agent` on Linux).
    pub data_dir: PathBuf,
    /// The workspace root: `-C DIR`, else the top of the git work tree
    /// holding the current directory, else the current directory. Commands
    /// run here and file tools are confined to it.
    pub workspace: PathBuf,
    /// The directory the agent was started in (inside the workspace, or
    /// the workspace itself); its `AGENTS.md` is read after the root's.
    pub cwd: PathBuf,
    /// Whether shell commands should run in the Landlock sandbox (when the
    /// kernel allows it).
    pub sandbox: bool,
}

impl std::fmt::Debug for Settings {
    // Hand-written so the key can never reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[set]"))
            .field("key_source", &self.key_source)
            .field("config_dir", &self.config_dir)
            .field("data_dir", &self.data_dir)
            .field("workspace", &self.workspace)
            .field("sandbox", &self.sandbox)
            .finish()
    }
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No home directory, and no override for the config or data dir.
    #[error(
        "cannot find a home directory for the {0} dir; set {1} to a directory the agent may use"
    )]
    NoDirectory(&'static str, &'static str),
    /// The base URL is not an http(s) URL.
    #[error(
        "{0} {1:?} is not an http(s) URL; use something like https://api.deepseek.com/v1 or http://localhost:11434/v1"
    )]
    BadBaseUrl(&'static str, String),
    /// A yes/no variable holds something else.
    #[error("{0}={1:?} is not a yes/no value; use 1 (on) or 0 (off)")]
    BadSwitch(&'static str, String),
    /// The current directory cannot be read.
    #[error("cannot read the current directory: {0}")]
    NoWorkspace(std::io::Error),
    /// `-C DIR` is not a directory.
    #[error("-C {0}: {1}; give a directory that exists")]
    BadWorkspace(PathBuf, std::io::Error),
}

impl Settings {
    /// Resolves settings from flags and an environment lookup.
    pub fn resolve(
        flags: &Overrides,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        Self::resolve_with(flags, env, None)
    }

    /// Resolves settings with a model profile underneath. Lowest to
    /// highest: the built-in defaults, the profile, `AGENT_BASE_URL` /
    /// `AGENT_MODEL` / `AGENT_API_KEY`, then `--base-url` / `--model`.
    pub fn resolve_with(
        flags: &Overrides,
        env: &dyn Fn(&str) -> Option<String>,
        profile: Option<&Endpoint>,
    ) -> Result<Settings, ConfigError> {
        let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let (base_url, source) = match (&flags.base_url, get(env::BASE_URL), profile) {
            (Some(flag), _, _) => (flag.clone(), "--base-url"),
            (None, Some(var), _) => (var, env::BASE_URL),
            (None, None, Some(p)) => (p.base_url.clone(), "the profile's base_url"),
            (None, None, None) => (DEFAULT_BASE_URL.to_string(), "the default base URL"),
        };
        let base_url = base_url.trim().trim_end_matches('/').to_string();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ConfigError::BadBaseUrl(source, base_url));
        }
        let model = flags
            .model
            .clone()
            .or_else(|| get(env::MODEL))
            .or_else(|| profile.map(|p| p.model.clone()))
            .unwrap_or_else(|| DEFAULT_MODEL.to_string());
        let profile_key = profile.and_then(|p| p.key_env.clone());
        let (api_key, key_source) = match (get(env::API_KEY), &profile_key) {
            (Some(k), _) => (Some(k), Some(env::API_KEY.to_string())),
            (None, Some(var)) => match get(var) {
                Some(k) => (Some(k), Some(var.clone())),
                None => (None, None),
            },
            (None, None) => (None, None),
        };
        let api_key = api_key.map(|k| k.trim().to_string());
        let dirs = directories::ProjectDirs::from("", "", "agent");
        let config_dir = match get(env::CONFIG_DIR) {
            Some(dir) => PathBuf::from(dir),
            None => dirs
                .as_ref()
                .map(|d| d.config_dir().to_path_buf())
                .ok_or(ConfigError::NoDirectory("config", env::CONFIG_DIR))?,
        };
        let data_dir = match get(env::DATA_DIR) {
            Some(dir) => PathBuf::from(dir),
            None => dirs
                .as_ref()
                .map(|d| d.data_dir().to_path_buf())
                .ok_or(ConfigError::NoDirectory("data", env::DATA_DIR))?,
        };
        let sandbox = flags.sandbox
            || match get(env::SANDBOX) {
                Some(value) => {
                    parse_switch(&value).ok_or(ConfigError::BadSwitch(env::SANDBOX, value))?
                }
                None => false,
            };
        let cwd = std::env::current_dir().map_err(ConfigError::NoWorkspace)?;
        let (workspace, cwd) = match &flags.workspace {
            Some(dir) => {
                let dir = cwd
                    .join(dir)
                    .canonicalize()
                    .map_err(|e| ConfigError::BadWorkspace(dir.clone(), e))?;
                if !dir.is_dir() {
                    return Err(ConfigError::BadWorkspace(
                        dir,
                        std::io::Error::other("not a directory"),
                    ));
                }
                (dir.clone(), dir)
            }
            None => (work_tree_root(&cwd).unwrap_or_else(|| cwd.clone()), cwd),
        };
        Ok(Settings {
            base_url,
            model,
            api_key,
            key_source,
            config_dir,
            data_dir,
            workspace,
            cwd,
            sandbox,
        })
    }
}

/// The top of the git work tree holding `dir`: the nearest ancestor with a
/// `.git` directory or file (a worktree or submodule). Found by looking,
/// not by running git, so nothing in the repository's config runs.
pub fn work_tree_root(dir: &std::path::Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").symlink_metadata().is_ok())
        .map(std::path::Path::to_path_buf)
}

/// Reads a yes/no environment value: `1`, `true`, `yes`, `on` or `0`,
/// `false`, `no`, `off` (any case); `None` for anything else.
fn parse_switch(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_then_env_then_flags() {
        let env = env_of(&[("AGENT_CONFIG_DIR", "/c"), ("AGENT_DATA_DIR", "/d")]);
        let s = Settings::resolve(&Overrides::default(), &env).unwrap();
        assert_eq!(
            (s.base_url.as_str(), s.model.as_str()),
            (DEFAULT_BASE_URL, DEFAULT_MODEL)
        );
        assert_eq!(s.api_key, None);

        let env = env_of(&[
            ("AGENT_BASE_URL", "http://localhost:8080/v1/"),
            ("AGENT_MODEL", "qwen"),
            ("AGENT_API_KEY", "k"),
            ("AGENT_CONFIG_DIR", "/c"),
            ("AGENT_DATA_DIR", "/d"),
        ]);
        let s = Settings::resolve(&Overrides::default(), &env).unwrap();
        assert_eq!(
            (s.base_url.as_str(), s.model.as_str()),
            ("http://localhost:8080/v1", "qwen")
        );
        assert_eq!(s.config_dir, PathBuf::from("/c"));

        let flags = Overrides {
            base_url: Some("https://x.test/v1".into()),
            model: Some("m2".into()),
            ..Overrides::default()
        };
        let s = Settings::resolve(&flags, &env).unwrap();
        assert_eq!(
            (s.base_url.as_str(), s.model.as_str()),
            ("https://x.test/v1", "m2")
        );
    }

    #[test]
    fn profile_then_env_then_flags() {
        let profile = Endpoint {
            name: "local".into(),
            base_url: "http://localhost:8080/v1".into(),
            model: "small".into(),
            key_env: Some("LOCAL_KEY".into()),
        };
        let env = env_of(&[
            ("AGENT_CONFIG_DIR", "/c"),
            ("AGENT_DATA_DIR", "/d"),
            ("LOCAL_KEY", "lk"),
        ]);
        let s = Settings::resolve_with(&Overrides::default(), &env, Some(&profile)).unwrap();
        assert_eq!(
            (s.base_url.as_str(), s.model.as_str(), s.api_key.as_deref()),
            ("http://localhost:8080/v1", "small", Some("lk"))
        );
        let env = env_of(&[
            ("AGENT_CONFIG_DIR", "/c"),
            ("AGENT_DATA_DIR", "/d"),
            ("LOCAL_KEY", "lk"),
            ("AGENT_MODEL", "env-model"),
            ("AGENT_API_KEY", "ak"),
        ]);
        let s = Settings::resolve_with(&Overrides::default(), &env, Some(&profile)).unwrap();
        assert_eq!(
            (s.model.as_str(), s.api_key.as_deref()),
            ("env-model", Some("ak"))
        );
        let flags = Overrides {
            model: Some("flag-model".into()),
            ..Overrides::default()
        };
        let s = Settings::resolve_with(&flags, &env, Some(&profile)).unwrap();
        assert_eq!(s.model, "flag-model");
    }

    #[test]
    fn sandbox_comes_from_the_flag_or_the_variable() {
        let base = [("AGENT_CONFIG_DIR", "/c"), ("AGENT_DATA_DIR", "/d")];
        let with = |value: &str| {
            let mut pairs = base.to_vec();
            pairs.push(("AGENT_SANDBOX", value));
            Settings::resolve(&Overrides::default(), &env_of(&pairs))
        };
        assert!(
            !Settings::resolve(&Overrides::default(), &env_of(&base))
                .unwrap()
                .sandbox
        );
        assert!(with("1").unwrap().sandbox);
        assert!(with(" Yes ").unwrap().sandbox);
        assert!(!with("0").unwrap().sandbox);
        assert!(!with("").unwrap().sandbox);
        let err = with("maybe").unwrap_err();
        assert!(err.to_string().contains("AGENT_SANDBOX=\"maybe\""), "{err}");
        let flags = Overrides {
            sandbox: true,
            ..Overrides::default()
        };
        let env = env_of(&[
            ("AGENT_CONFIG_DIR", "/c"),
            ("AGENT_DATA_DIR", "/d"),
            ("AGENT_SANDBOX", "0"),
        ]);
        assert!(Settings::resolve(&flags, &env).unwrap().sandbox);
    }

    #[test]
    fn bad_url_names_its_source_and_the_key_stays_out_of_debug() {
        let env = env_of(&[
            ("AGENT_BASE_URL", "localhost:1234"),
            ("AGENT_API_KEY", "sk-123"),
        ]);
        let err = Settings::resolve(&Overrides::default(), &env).unwrap_err();
        assert!(err.to_string().contains("AGENT_BASE_URL"), "{err}");
        let env = env_of(&[
            ("AGENT_API_KEY", "sk-123"),
            ("AGENT_CONFIG_DIR", "/c"),
            ("AGENT_DATA_DIR", "/d"),
        ]);
        let s = Settings::resolve(&Overrides::default(), &env).unwrap();
        assert!(!format!("{s:?}").contains("sk-123"));
    }

    #[test]
    fn the_workspace_is_the_work_tree_root_and_the_key_names_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        assert_eq!(work_tree_root(&repo.join("src/deep")), Some(repo.clone()));
        assert_eq!(work_tree_root(dir.path()), None);

        let env = env_of(&[
            ("AGENT_CONFIG_DIR", "/c"),
            ("AGENT_DATA_DIR", "/d"),
            ("LOCAL_KEY", "lk"),
        ]);
        let flags = Overrides {
            workspace: Some(repo.join("src")),
            ..Overrides::default()
        };
        let profile = Endpoint {
            name: "local".into(),
            base_url: "http://localhost:8080/v1".into(),
            model: "small".into(),
            key_env: Some("LOCAL_KEY".into()),
        };
        let s = Settings::resolve_with(&flags, &env, Some(&profile)).unwrap();
        assert_eq!(s.workspace, repo.join("src"), "-C chooses the workspace");
        assert_eq!(s.key_source.as_deref(), Some("LOCAL_KEY"));
        let bad = Overrides {
            workspace: Some(repo.join("nope")),
            ..Overrides::default()
        };
        let err = Settings::resolve(&bad, &env).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}

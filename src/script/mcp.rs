//! `mcp.rhai`: the MCP servers of a session, read from the map the file
//! ends with, `#{ servers: #{ NAME: #{ ... }, ... } }` (see the embedded
//! default for the fields). Every problem names the server and the field.

use std::time::Duration;

use serde_json::Value;

use super::{Script, api};
use crate::tools::mcp::{
    DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, ServerConfig, Transport, valid_server_name,
};

/// The fields a server may have; any other is named as a mistake.
const FIELDS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "token_env",
    "enabled",
    "startup_timeout",
    "tool_timeout",
    "allow",
    "deny",
];

/// The servers of a loaded `mcp.rhai`, in name order.
pub fn servers(script: &Script) -> Result<Vec<ServerConfig>, String> {
    let value = api::to_json(&script.value).map_err(|e| {
        format!(
            "{} must end with a map #{{ servers: #{{ ... }} }}: {e}",
            script.name
        )
    })?;
    parse(&value)
}

/// Reads the servers from the file's value, as JSON.
pub fn parse(value: &Value) -> Result<Vec<ServerConfig>, String> {
    let Some(top) = value.as_object() else {
        return Err("mcp.rhai must end with a map #{ servers: #{ NAME: #{ ... } } }".into());
    };
    if let Some(other) = top.keys().find(|k| *k != "servers") {
        return Err(format!(
            "mcp.rhai: unknown field `{other}` (the map has one field, `servers`)"
        ));
    }
    let servers = match top.get("servers") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err("mcp.rhai: `servers` must be a map of NAME: #{ ... }".into()),
    };
    let mut out: Vec<ServerConfig> = Vec::new();
    for (name, entry) in servers {
        out.push(server(name, entry)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn server(name: &str, entry: &Value) -> Result<ServerConfig, String> {
    let at = format!("mcp.rhai: server `{name}`");
    if !valid_server_name(name) {
        return Err(format!(
            "{at}: a name is 1-32 letters, digits, `_` or `-`, without `__`"
        ));
    }
    let Some(m) = entry.as_object() else {
        return Err(format!(
            "{at} must be a map #{{ command: ..., args: [...] }}"
        ));
    };
    if let Some(other) = m.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "{at}: unknown field `{other}` (known: {})",
            FIELDS.join(", ")
        ));
    }
    let text = |key: &str| -> Result<Option<String>, String> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{at}: `{key}` must be a string")),
        }
    };
    let list = |key: &str| -> Result<Option<Vec<String>>, String> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Ok(other.to_string()),
                })
                .collect::<Result<Vec<_>, String>>()
                .map(Some),
            Some(_) => Err(format!("{at}: `{key}` must be a list of strings")),
        }
    };
    let seconds = |key: &str, default: Duration| -> Result<Duration, String> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => match v.as_f64() {
                Some(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
                _ => Err(format!("{at}: `{key}` must be a number of seconds above 0")),
            },
        }
    };
    let transport = match (text("command")?, text("url")?) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{at}: give either `command` (stdio) or `url` (HTTP), not both"
            ));
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(format!("{at}: `command` is empty"));
            }
            let env = match m.get("env") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Object(vars)) => vars
                    .iter()
                    .map(|(k, v)| {
                        let value = match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (k.clone(), value)
                    })
                    .collect(),
                Some(_) => return Err(format!("{at}: `env` must be a map of NAME: \"value\"")),
            };
            Transport::Stdio {
                command,
                args: list("args")?.unwrap_or_default(),
                env,
                cwd: text("cwd")?.map(std::path::PathBuf::from),
            }
        }
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("{at}: `url` must start with http:// or https://"));
            }
            for key in ["args", "env", "cwd"] {
                if m.contains_key(key) {
                    return Err(format!("{at}: `{key}` is for a command, not a `url`"));
                }
            }
            Transport::Http {
                url,
                token_env: text("token_env")?,
            }
        }
        (None, None) => {
            return Err(format!(
                "{at}: give `command` (and `args`) for a local server or `url` for an HTTP one"
            ));
        }
    };
    if matches!(transport, Transport::Stdio { .. }) && m.contains_key("token_env") {
        return Err(format!("{at}: `token_env` is for a `url`, not a command"));
    }
    let enabled = match m.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(format!("{at}: `enabled` must be true or false")),
    };
    Ok(ServerConfig {
        name: name.to_string(),
        transport,
        enabled,
        startup_timeout: seconds("startup_timeout", DEFAULT_STARTUP_TIMEOUT)?,
        tool_timeout: seconds("tool_timeout", DEFAULT_TOOL_TIMEOUT)?,
        allow: list("allow")?,
        deny: list("deny")?.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{DEFAULTS, MCP, Origin, compile};
    use serde_json::json;

    #[test]
    fn the_default_has_no_servers() {
        let source = DEFAULTS.iter().find(|(n, _)| *n == MCP).unwrap().1;
        let script = compile(MCP, source.into(), Origin::Default).unwrap();
        assert_eq!(servers(&script).unwrap(), Vec::new());
    }

    #[test]
    fn a_computed_map_is_read() {
        let source = r#"
            let s = #{ time: #{ command: "uvx", args: ["mcp-server-time"], tool_timeout: 5 } };
            if which("surely-not-a-program-here") != "" { s.never = #{ command: "x" }; }
            s.web = #{ url: "http://127.0.0.1:9/mcp", token_env: "WEB_TOKEN", deny: ["drop"] };
            #{ servers: s }
        "#;
        let script = compile(MCP, source.into(), Origin::Default).unwrap();
        let list = servers(&script).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].name, "time");
        assert_eq!(list[0].tool_timeout, Duration::from_secs(5));
        assert_eq!(list[0].startup_timeout, DEFAULT_STARTUP_TIMEOUT);
        assert_eq!(
            list[1].transport,
            Transport::Http {
                url: "http://127.0.0.1:9/mcp".into(),
                token_env: Some("WEB_TOKEN".into())
            }
        );
        assert!(!list[1].offers("drop"));
    }

    #[test]
    fn mistakes_name_the_server_and_field() {
        let cases = [
            (
                json!({"servers": {"a": {"comand": "x"}}}),
                "unknown field `comand`",
            ),
            (json!({"servers": {"a": {}}}), "give `command`"),
            (
                json!({"servers": {"a": {"command": "x", "url": "http://h"}}}),
                "not both",
            ),
            (
                json!({"servers": {"a__b": {"command": "x"}}}),
                "without `__`",
            ),
            (
                json!({"servers": {"a": {"command": "x", "tool_timeout": -1}}}),
                "`tool_timeout`",
            ),
            (json!({"servers": {"a": {"url": "ftp://h"}}}), "http://"),
        ];
        for (value, expected) in cases {
            let err = parse(&value).unwrap_err();
            assert!(err.contains(expected), "{err} should contain {expected}");
        }
    }
}

//! The script API: every function a Rhai handler can call besides Rhai's
//! standard library. This module is the whole of it, and
//! `scripts/README.md`-style docs live on each function below.
//!
//! | function | returns |
//! |---|---|
//! | `shell(cmd)`, `shell(cmd, #{timeout: secs})` | `#{exit_code, stdout, stderr, timed_out}` |
//! | `read_file(path)`, `read_file(path, #{offset, limit})` | the file's text (lines `offset..`, at most `limit` lines), capped like the built-in `read_file` |
//! | `write_file(path, text)` | bytes written |
//! | `list_dir(path)` | `[#{name, kind: "file"/"dir"/"symlink"/"other", size}]`, sorted |
//! | `file_exists(path)` | bool |
//! | `env(name)` | the variable's value, or `()` when unset or secret |
//! | `cwd()` | the workspace root |
//! | `now()`, `now(format)` | local time, `%Y-%m-%d %H:%M:%S %:z` by default |
//! | `unix_time()` | seconds since 1970 |
//! | `json_parse(text)`, `json_stringify(value)` | JSON in and out |
//! | `regex_match(text, pattern)`, `regex_escape(text)` | regular expressions (Rust `regex` syntax) |
//! | `default_tool_calls(text, tools)` | the tool calls the built-in reader finds in a model's text: `[#{name, arguments}]` ([`crate::tools::text_calls`]) |
//! | `which(program)` | the program's path on the agent's `PATH`, or `""` (mcp.rhai adds a server only where its program exists) |
//! | `session_get(key)`, `session_set(key, value)` | state that lasts the session (until `/clear`): the value last set, or `()` |
//! | `emit(kind, data)` | shows `data` to the person as an event of `kind` (`"plan"`: a checklist); returns `()` |
//! | `is_read_only(cmd)`, `writes_outside(action)`, ... | the policy's helpers over a parsed command: [`super::policy_api`] |
//!
//! Shell commands and file access go through [`crate::runtime`], the same
//! layer the built-in tools use, so its timeouts, output caps, secret
//! scrubbing and path rules apply to scripts too: files are opened beneath
//! the workspace without following symlinks out (`runtime::beneath`), only
//! regular files are read or written, and `read_file` stops at the built-in
//! tool's line and byte limits. A failing call throws a script error whose
//! message says what went wrong.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rhai::{Array, Dynamic, Engine, EvalAltResult, FuncRegistration, ImmutableString, Map};

use super::engine::{call_context, credit_host_time};
use crate::runtime::beneath::{AccessError, EntryKind, Located};
use crate::runtime::process;
use crate::tools::builtin::{READ_BYTE_CAP, READ_LINE_LIMIT};

type Res<T> = Result<T, Box<EvalAltResult>>;

/// Registers the API on the engine. Side-effecting functions are volatile,
/// so the optimizer never runs them at compile time.
pub fn register(engine: &mut Engine) {
    FuncRegistration::new("shell")
        .with_volatility(true)
        .register_into_engine(engine, |cmd: &str| shell(cmd, None));
    FuncRegistration::new("shell")
        .with_volatility(true)
        .register_into_engine(engine, |cmd: &str, opts: Map| {
            shell(cmd, timeout_of(&opts)?)
        });
    FuncRegistration::new("read_file")
        .with_volatility(true)
        .register_into_engine(engine, |path: &str| read_file(path, 1, READ_LINE_LIMIT));
    FuncRegistration::new("read_file")
        .with_volatility(true)
        .register_into_engine(engine, |path: &str, opts: Map| {
            let (offset, limit) = window_of(&opts)?;
            read_file(path, offset, limit)
        });
    FuncRegistration::new("write_file")
        .with_volatility(true)
        .register_into_engine(engine, write_file);
    FuncRegistration::new("list_dir")
        .with_volatility(true)
        .register_into_engine(engine, list_dir);
    FuncRegistration::new("file_exists")
        .with_volatility(true)
        .register_into_engine(engine, file_exists);
    FuncRegistration::new("env")
        .with_volatility(true)
        .register_into_engine(engine, env);
    FuncRegistration::new("cwd")
        .with_volatility(true)
        .register_into_engine(engine, cwd);
    FuncRegistration::new("now")
        .with_volatility(true)
        .register_into_engine(engine, || now_fmt(DEFAULT_TIME_FORMAT));
    FuncRegistration::new("now")
        .with_volatility(true)
        .register_into_engine(engine, |fmt: &str| now_fmt(fmt));
    FuncRegistration::new("unix_time")
        .with_volatility(true)
        .register_into_engine(engine, || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    engine.register_fn("regex_match", regex_match);
    engine.register_fn("regex_escape", |text: &str| regex::escape(text));
    engine.register_fn("json_parse", json_parse);
    engine.register_fn("json_stringify", json_stringify);
    // The built-in reader of tool calls written as text, for
    // `parse_tool_calls(text, tools)` in models.rhai.
    engine.register_fn("default_tool_calls", |text: &str, _tools: Array| {
        super::models::calls_to_dynamic(crate::tools::text_calls::parse(text))
    });
    FuncRegistration::new("which")
        .with_volatility(true)
        .register_into_engine(engine, |program: &str| which(program));
    FuncRegistration::new("session_get")
        .with_volatility(true)
        .register_into_engine(engine, session_get);
    FuncRegistration::new("session_set")
        .with_volatility(true)
        .register_into_engine(engine, session_set);
    FuncRegistration::new("emit")
        .with_volatility(true)
        .register_into_engine(engine, emit);
    super::policy_api::register(engine);
}

/// `which(program)`: the first executable `program` on the agent's `PATH`
/// (a name with a `/` is checked as it is), or `""`.
pub fn which(program: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let runs = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return String::new();
    }
    if program.contains('/') {
        return if runs(std::path::Path::new(program)) {
            program.to_string()
        } else {
            String::new()
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| runs(p))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Keys `session_set` keeps at most: state for a few tools, not a database.
pub const MAX_SESSION_KEYS: usize = 256;

/// Bytes of one `emit`'s data as JSON at most: a checklist, not a file.
pub const MAX_EMIT_BYTES: usize = 64 * 1024;

/// The session's script state (`session_get` / `session_set`).
static SESSION_STATE: std::sync::Mutex<Option<Map>> = std::sync::Mutex::new(None);

/// Forgets the session's script state (a new conversation).
pub fn clear_session_state() {
    if let Ok(mut state) = SESSION_STATE.lock() {
        *state = None;
    }
}

/// The value `session_set` last stored under `key`, or `()`.
fn session_get(key: &str) -> Dynamic {
    SESSION_STATE
        .lock()
        .ok()
        .and_then(|s| s.as_ref().and_then(|m| m.get(key).cloned()))
        .unwrap_or(Dynamic::UNIT)
}

/// Stores `value` under `key` for the rest of the session; `()` removes it.
fn session_set(key: &str, value: Dynamic) -> Res<()> {
    let mut state = SESSION_STATE
        .lock()
        .map_err(|_| "session_set: the session state is unavailable".to_string())?;
    let map = state.get_or_insert_with(Map::new);
    if value.is_unit() {
        map.remove(key);
        return Ok(());
    }
    if !map.contains_key(key) && map.len() >= MAX_SESSION_KEYS {
        return Err(format!(
            "session_set: at most {MAX_SESSION_KEYS} keys; remove one with session_set(key, ())"
        )
        .into());
    }
    map.insert(key.into(), value.flatten_clone());
    Ok(())
}

/// Sends `data` to the UI as an event of `kind` (letters, digits, `_`, `-`).
fn emit(kind: &str, data: Dynamic) -> Res<()> {
    if kind.is_empty()
        || kind.len() > 32
        || !kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "emit: the kind must be 1-32 letters, digits, `_` or `-`, not {kind:?}"
        )
        .into());
    }
    let json = to_json(&data).map_err(|e| format!("emit: `data` is not plain data: {e}"))?;
    let bytes = json.to_string().len();
    if bytes > MAX_EMIT_BYTES {
        return Err(
            format!("emit: the data is {bytes} bytes as JSON, over {MAX_EMIT_BYTES}").into(),
        );
    }
    super::engine::emit_event(kind, json);
    Ok(())
}

/// `now()`'s format: date, time and UTC offset.
pub const DEFAULT_TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S %:z";

fn timeout_of(opts: &Map) -> Res<Option<Duration>> {
    match opts.get("timeout") {
        None => Ok(None),
        Some(v) if v.is_unit() => Ok(None),
        Some(v) => {
            let secs = v
                .as_int()
                .map(|i| i as f64)
                .or_else(|_| v.as_float())
                .map_err(|_| {
                    format!(
                        "shell: `timeout` must be a number of seconds, not {}",
                        v.type_name()
                    )
                })?;
            if !(secs > 0.0 && secs.is_finite()) {
                return Err(format!(
                    "shell: `timeout` must be a positive number of seconds, not {secs}"
                )
                .into());
            }
            Ok(Some(Duration::from_secs_f64(secs)))
        }
    }
}

/// Runs a command like the `run_shell` tool does and returns
/// `#{exit_code, stdout, stderr, timed_out}`. `exit_code` is `()` when the
/// command was killed.
fn shell(cmd: &str, timeout: Option<Duration>) -> Res<Map> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let (runtime, handle, cancel) = call_context()?;
    let label = format!(
        "script-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    );
    let started = Instant::now();
    let outcome = handle.block_on(runtime.run_command(cmd, timeout, &label, &cancel));
    credit_host_time(started.elapsed());
    let outcome = outcome.map_err(|e| match e {
        crate::runtime::RunError::Denied(text) => format!("shell: {text}"),
        crate::runtime::RunError::Io(e) => format!("shell: cannot run {cmd:?}: {e}"),
    })?;
    /// What a script sees of a command.
    #[derive(serde::Serialize)]
    struct Shell {
        exit_code: Option<i64>,
        stdout: String,
        stderr: String,
        timed_out: bool,
    }
    let shown = Shell {
        exit_code: outcome.exit_code.map(i64::from),
        stdout: outcome.stdout.text,
        stderr: outcome.stderr.text,
        timed_out: matches!(
            outcome.ended,
            process::Ended::TimedOut | process::Ended::Inactive
        ),
    };
    to_map(&shown)
}

/// A Rust value as the script map its fields make (rhai's serde support).
fn to_map(value: &impl serde::Serialize) -> Res<Map> {
    rhai::serde::to_dynamic(value)?
        .try_cast::<Map>()
        .ok_or_else(|| "not a map".into())
}

fn locate(path: &str) -> Res<Located> {
    let (runtime, ..) = call_context()?;
    runtime
        .locate(path)
        .map_err(|reason| format!("cannot use the path {path:?}: {reason}").into())
}

/// `#{offset, limit}` of `read_file`: 1-based first line, most lines.
fn window_of(opts: &Map) -> Res<(u64, u64)> {
    let get = |key: &str, default: u64| -> Res<u64> {
        match opts.get(key) {
            None => Ok(default),
            Some(v) if v.is_unit() => Ok(default),
            Some(v) => match v.as_int() {
                Ok(n) if n > 0 => Ok(n as u64),
                _ => Err(format!("read_file: `{key}` must be a positive whole number").into()),
            },
        }
    };
    Ok((
        get("offset", 1)?,
        get("limit", READ_LINE_LIMIT)?.min(READ_LINE_LIMIT),
    ))
}

/// The line that ends a script `read_file` cut at the limits.
pub fn read_cut_marker(path: &str, next: u64) -> String {
    format!(
        "\n[read_file stopped at {READ_LINE_LIMIT} lines or {READ_BYTE_CAP} bytes; call read_file({path:?}, #{{offset: {next}}}) to read on]"
    )
}

/// Reads lines `offset..offset + limit` of a regular file beneath the
/// workspace, at most [`READ_BYTE_CAP`] bytes of them; a cut result ends
/// with [`read_cut_marker`]. Never holds more than the cap in memory.
fn read_file(path: &str, offset: u64, limit: u64) -> Res<String> {
    let place = locate(path)?;
    let (file, _) = place
        .open_read()
        .map_err(|e| format!("read_file {path:?}: {e}"))?;
    let (bytes, next) = read_lines(file, offset, limit, READ_BYTE_CAP)
        .map_err(|e| format!("read_file {path:?}: {e}"))?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if let Some(next) = next {
        text.push_str(&read_cut_marker(path, next));
    }
    Ok(text)
}

/// Lines `offset..offset + limit` (1-based) of `file`, at most `cap` bytes,
/// and the line to read on from when something is left.
fn read_lines(
    file: std::fs::File,
    offset: u64,
    limit: u64,
    cap: usize,
) -> std::io::Result<(Vec<u8>, Option<u64>)> {
    let mut reader = BufReader::new(file);
    let mut line_no = 1;
    while line_no < offset {
        if reader.skip_until(b'\n')? == 0 {
            return Ok((Vec::new(), None));
        }
        line_no += 1;
    }
    let mut out = Vec::new();
    let mut taken = 0;
    loop {
        if taken == limit {
            let more = !reader.fill_buf()?.is_empty();
            return Ok((out, more.then_some(line_no)));
        }
        let mut line = Vec::new();
        let room = (cap - out.len()) as u64 + 1;
        if (&mut reader).take(room).read_until(b'\n', &mut line)? == 0 {
            return Ok((out, None));
        }
        if out.len() + line.len() > cap {
            if taken == 0 {
                // One line longer than the cap: its start is better than nothing.
                line.truncate(cap);
                out.extend_from_slice(&line);
                return Ok((out, Some(line_no + 1)));
            }
            return Ok((out, Some(line_no)));
        }
        out.extend_from_slice(&line);
        taken += 1;
        line_no += 1;
    }
}

fn write_file(path: &str, text: &str) -> Res<i64> {
    let place = locate(path)?;
    let (runtime, handle, _) = call_context()?;
    let started = Instant::now();
    let allowed = handle.block_on(runtime.check_write(&place.path));
    credit_host_time(started.elapsed());
    allowed.map_err(|text| format!("write_file: {text}"))?;
    place
        .write(text.as_bytes())
        .map_err(|e| format!("write_file {path:?}: {e}"))?;
    Ok(text.len() as i64)
}

fn list_dir(path: &str) -> Res<Array> {
    let place = locate(path)?;
    let entries = place
        .read_dir()
        .map_err(|e| format!("list_dir {path:?}: {e}"))?;
    let mut rows: Vec<(String, &'static str, i64)> = entries
        .into_iter()
        .map(|entry| {
            let (kind, size) = match entry.kind {
                EntryKind::Dir => ("dir", 0),
                EntryKind::File(size) => ("file", size as i64),
                EntryKind::Symlink(_) => ("symlink", 0),
                EntryKind::Other => ("other", 0),
            };
            (entry.name, kind, size)
        })
        .collect();
    rows.sort();
    rows.into_iter()
        .map(|(name, kind, size)| {
            /// One entry as a script sees it.
            #[derive(serde::Serialize)]
            struct Entry<'a> {
                name: String,
                kind: &'a str,
                size: i64,
            }
            to_map(&Entry { name, kind, size }).map(Dynamic::from_map)
        })
        .collect::<Res<Array>>()
}

/// Whether something exists at the path (symlinks inside followed). A path
/// leading outside is an error, as for the other file functions.
fn file_exists(path: &str) -> Res<bool> {
    match locate(path)?.metadata() {
        Ok(_) => Ok(true),
        Err(e @ (AccessError::Outside { .. } | AccessError::TooManyLinks)) => {
            Err(format!("file_exists {path:?}: {e}").into())
        }
        Err(_) => Ok(false),
    }
}

/// Reads from the scrubbed child environment, so a script sees exactly what
/// a shell command would: no secrets.
fn env(name: &str) -> Res<Dynamic> {
    let (runtime, ..) = call_context()?;
    Ok(runtime
        .child_env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| Dynamic::from(v.clone()))
        .unwrap_or(Dynamic::UNIT))
}

fn cwd() -> Res<String> {
    let (runtime, ..) = call_context()?;
    Ok(runtime.workspace.display().to_string())
}

fn now_fmt(fmt: &str) -> Res<String> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(fmt))
        .map_err(|_| format!("now: invalid time format {fmt:?}"))?;
    Ok(out)
}

/// Compiled patterns, so a hook called per command does not recompile.
static PATTERNS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, regex::Regex>>,
> = std::sync::LazyLock::new(Default::default);

/// Most patterns kept compiled at once.
const MAX_CACHED_PATTERNS: usize = 256;

fn regex_match(text: &str, pattern: &str) -> Res<bool> {
    let mut cache = PATTERNS
        .lock()
        .map_err(|_| "regex_match: the pattern cache is unusable")?;
    if !cache.contains_key(pattern) {
        let re = regex::Regex::new(pattern)
            .map_err(|e| format!("regex_match: invalid pattern {pattern:?}: {e}"))?;
        if cache.len() >= MAX_CACHED_PATTERNS {
            cache.clear();
        }
        cache.insert(pattern.to_string(), re);
    }
    Ok(cache.get(pattern).is_some_and(|re| re.is_match(text)))
}

fn json_parse(text: &str) -> Res<Dynamic> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("json_parse: not valid JSON: {e}"))?;
    rhai::serde::to_dynamic(value)
}

fn json_stringify(value: Dynamic) -> Res<ImmutableString> {
    let json = to_json(&value)?;
    Ok(json.to_string().into())
}

/// Converts a script value to JSON. Closures and other non-data values are
/// refused with an error that names them.
pub fn to_json(value: &Dynamic) -> Res<serde_json::Value> {
    rhai::serde::from_dynamic::<serde_json::Value>(&value.flatten_clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(text: &str, offset: u64, limit: u64, cap: usize) -> (String, Option<u64>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, text).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let (bytes, next) = read_lines(file, offset, limit, cap).unwrap();
        (String::from_utf8(bytes).unwrap(), next)
    }

    #[test]
    fn read_lines_stops_at_the_line_and_byte_limits() {
        assert_eq!(lines_of("a\nb\nc", 1, 10, 100), ("a\nb\nc".into(), None));
        assert_eq!(lines_of("a\nb\nc\n", 2, 1, 100), ("b\n".into(), Some(3)));
        assert_eq!(lines_of("a\nb\n", 5, 1, 100), (String::new(), None));
        // The byte cap ends the window on a line boundary.
        assert_eq!(
            lines_of("aaaa\nbbbb\ncccc\n", 1, 10, 12),
            ("aaaa\nbbbb\n".into(), Some(3))
        );
        // One line longer than the cap: its start.
        assert_eq!(
            lines_of(&"x".repeat(50), 1, 10, 8),
            ("x".repeat(8), Some(2))
        );
    }
}

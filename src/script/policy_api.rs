//! The parsed command as `approve(action)` sees it, and the helpers
//! `policy.rhai` calls on it so the default policy stays short.
//!
//! | field of `action` | what |
//! |---|---|
//! | `commands` | `[#{program, args, raw, wrappers, cwd, writes, deletes, perms, read_only, privileged, system, history, redirects}]` |
//! | `redirects` | `[#{path, append}]`: files written by `>`/`>>` (absolute, or `?` + text when not static) |
//! | `programs` | every program and wrapper name, in order |
//! | `opaque`, `opaque_reasons` | what runs cannot be known statically, and why |
//!
//! | helper | returns |
//! |---|---|
//! | `is_read_only(cmd)` | the command only reads (and its redirects only discard) |
//! | `writes_outside(action)`, `deletes_outside(action)`, `perms_outside(action)` | it writes / deletes / changes permissions of a path outside the workspace (an unknown path counts as outside) |
//! | `outside(action, what)` | those paths, `what` = `"writes"`, `"deletes"` or `"perms"` |
//! | `touches_config(action)` | it writes, deletes or changes anything in the agent's config dir |
//! | `privileged(action)` | the program that changes user (`sudo`, `su`, ...), or `""` |
//! | `rewrites_history(action)`, `system_change(action)` | why it rewrites history / changes the system, or `""` |
//! | `is_inside(path, dir)` | `path` is `dir` or below it |

use rhai::{Array, Dynamic, Engine, Map};

use crate::runtime::command::{Parsed, Redirect, SimpleCommand, UNKNOWN};
use crate::runtime::effects::{self, PRIVILEGE};

/// Adds the parsed fields to an action map.
pub fn insert_parsed(m: &mut Map, parsed: &Parsed) {
    m.insert(
        "commands".into(),
        Dynamic::from_array(parsed.commands.iter().map(command_map).collect()),
    );
    m.insert("redirects".into(), redirects(&parsed.redirects));
    m.insert("programs".into(), strings(&parsed.programs()));
    m.insert("opaque".into(), parsed.opaque.into());
    m.insert("opaque_reasons".into(), strings(&parsed.opaque_reasons));
}

fn strings(items: &[String]) -> Dynamic {
    Dynamic::from_array(items.iter().map(|s| Dynamic::from(s.clone())).collect())
}

fn redirects(items: &[Redirect]) -> Dynamic {
    Dynamic::from_array(
        items
            .iter()
            .map(|r| {
                let mut m = Map::new();
                m.insert("path".into(), r.path.clone().into());
                m.insert("append".into(), r.append.into());
                Dynamic::from_map(m)
            })
            .collect(),
    )
}

fn command_map(c: &SimpleCommand) -> Dynamic {
    let mut m = Map::new();
    let e = &c.effects;
    m.insert("program".into(), c.program.clone().into());
    let args: Vec<String> = c.args.iter().map(|a| a.text.clone()).collect();
    m.insert("args".into(), strings(&args));
    m.insert("raw".into(), c.raw.clone().into());
    m.insert("wrappers".into(), strings(&c.wrappers));
    m.insert(
        "cwd".into(),
        c.cwd
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
            .into(),
    );
    m.insert("writes".into(), strings(&e.writes));
    m.insert("deletes".into(), strings(&e.deletes));
    m.insert("perms".into(), strings(&e.perms));
    m.insert("read_only".into(), e.read_only.into());
    let privileged = e.privilege || c.wrappers.iter().any(|w| PRIVILEGE.contains(&w.as_str()));
    m.insert("privileged".into(), privileged.into());
    m.insert("system".into(), e.system.clone().unwrap_or_default().into());
    m.insert(
        "history".into(),
        e.history.clone().unwrap_or_default().into(),
    );
    m.insert("redirects".into(), redirects(&c.redirects));
    Dynamic::from_map(m)
}

/// Registers the helpers on the engine (pure functions of their input).
pub fn register(engine: &mut Engine) {
    engine.register_fn("is_read_only", is_read_only);
    engine.register_fn("writes_outside", |a: Map| !outside(&a, "writes").is_empty());
    engine.register_fn("deletes_outside", |a: Map| {
        !outside(&a, "deletes").is_empty()
    });
    engine.register_fn("perms_outside", |a: Map| !outside(&a, "perms").is_empty());
    engine.register_fn("outside", |a: Map, what: &str| -> Array {
        outside(&a, what).into_iter().map(Dynamic::from).collect()
    });
    engine.register_fn("touches_config", touches_config);
    engine.register_fn("privileged", privileged);
    engine.register_fn("rewrites_history", |a: Map| first_text(&a, "history"));
    engine.register_fn("system_change", |a: Map| first_text(&a, "system"));
    engine.register_fn("is_inside", |path: &str, dir: &str| is_inside(path, dir));
}

fn text(m: &Map, key: &str) -> String {
    m.get(key).map(|v| v.to_string()).unwrap_or_default()
}

fn list(m: &Map, key: &str) -> Vec<Dynamic> {
    m.get(key)
        .and_then(|v| v.read_lock::<Array>().map(|a| a.clone()))
        .unwrap_or_default()
}

fn maps(m: &Map, key: &str) -> Vec<Map> {
    list(m, key)
        .into_iter()
        .filter_map(|v| v.try_cast::<Map>())
        .collect()
}

/// `path` is `dir` or inside it (both absolute; an unknown path is not).
pub fn is_inside(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    if path.starts_with(UNKNOWN) || dir.is_empty() {
        return false;
    }
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

fn is_read_only(cmd: Map) -> bool {
    cmd.get("read_only").and_then(|v| v.as_bool().ok()) == Some(true)
        && maps(&cmd, "redirects")
            .iter()
            .all(|r| effects::is_sink(&text(r, "path")))
}

/// Every path the action would write (`"writes"`), delete (`"deletes"`) or
/// change permissions of (`"perms"`); redirects and a file write count as
/// writes. Discarding sinks (`/dev/null`) are left out.
fn paths(action: &Map, what: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in maps(action, "commands") {
        out.extend(list(&c, what).into_iter().map(|v| v.to_string()));
    }
    if what == "writes" {
        out.extend(maps(action, "redirects").iter().map(|r| text(r, "path")));
        if text(action, "kind") == "write" {
            out.push(text(action, "path"));
        }
    }
    out.retain(|p| !effects::is_sink(p));
    out
}

fn outside(action: &Map, what: &str) -> Vec<String> {
    let workspace = text(action, "workspace");
    // Deleting the workspace itself is not a delete inside it.
    let root = workspace.trim_end_matches('/');
    paths(action, what)
        .into_iter()
        .filter(|p| {
            !is_inside(p, &workspace) || (what == "deletes" && p.trim_end_matches('/') == root)
        })
        .collect()
}

fn touches_config(action: Map) -> bool {
    let config = text(&action, "config_dir");
    ["writes", "deletes", "perms"]
        .iter()
        .flat_map(|w| paths(&action, w))
        .any(|p| is_inside(&p, &config))
}

fn privileged(action: Map) -> String {
    for c in maps(&action, "commands") {
        if c.get("privileged").and_then(|v| v.as_bool().ok()) != Some(true) {
            continue;
        }
        for w in list(&c, "wrappers") {
            let w = w.to_string();
            if PRIVILEGE.contains(&w.as_str()) {
                return w;
            }
        }
        return text(&c, "program");
    }
    String::new()
}

fn first_text(action: &Map, key: &str) -> String {
    maps(action, "commands")
        .iter()
        .map(|c| text(c, key))
        .find(|t| !t.is_empty())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_means_below_not_a_prefix() {
        assert!(is_inside("/w", "/w") && is_inside("/w/a", "/w/"));
        assert!(!is_inside("/wx", "/w") && !is_inside("?/w/$x", "/w"));
        assert!(!is_inside("/w", ""));
    }
}

//! Pure rendering: the lines the person sees for tool calls, results,
//! warnings and turn summaries. No terminal here, so every line is tested
//! as a string.

use serde_json::Value;

use super::Style;
use crate::protocol::{ToolOutput, ToolStatus, Usage};
use crate::text;

/// Longest tool input summary on one line.
const MAX_INPUT_SUMMARY: usize = 160;

/// Longest line of a script event shown.
const MAX_SCRIPT_EVENT: usize = 200;

/// Longest error line in a failed call's summary.
const MAX_ERROR_LINE: usize = 160;

/// A one-line summary of a tool call's input, for display: the command,
/// the path, or the compact JSON.
pub fn summarize_input(input: &Value) -> String {
    let text = match input {
        Value::Object(map) => ["command", "path", "pattern", "query"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))
            .map(str::to_string)
            .unwrap_or_else(|| input.to_string()),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text::shorten(&text::one_line(&text), MAX_INPUT_SUMMARY)
}

/// The first line that says something about a failure: section markers
/// such as `[stderr]` are skipped.
pub fn error_line(output: &str) -> String {
    let line = output
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && *l != "[stderr]")
        .unwrap_or("");
    text::shorten(line, MAX_ERROR_LINE)
}

/// The line under a tool call once it finished.
pub fn tool_result(style: Style, output: &ToolOutput) -> String {
    match (output.status, output.exit_code) {
        (ToolStatus::Ok, _) => style.green("  ✓ ok"),
        (ToolStatus::Failed, Some(code)) => {
            style.red(&format!("  ✗ exit {code}: {}", error_line(&output.text)))
        }
        (ToolStatus::Failed, None) => {
            let kind = output.error_kind.map(|k| k.as_str()).unwrap_or("failed");
            style.red(&format!("  ✗ {kind}: {}", error_line(&output.text)))
        }
    }
}

/// Lines of a successful tool's output shown under it in the REPL.
const PREVIEW_LINES: usize = 3;

/// Longest preview line.
const MAX_PREVIEW_LINE: usize = 120;

/// A unified diff for the screen: additions green, removals red, hunk
/// headers cyan, the file headers dim; every line indented and with its
/// control characters made visible. Pure: text in, lines out.
pub fn diff(style: Style, diff: &str) -> Vec<String> {
    diff.lines()
        .map(|line| {
            let shown = format!("    {}", super::sanitize::visible_line(line));
            if line.starts_with("+++") || line.starts_with("---") {
                style.dim(&shown)
            } else if line.starts_with('+') {
                style.green(&shown)
            } else if line.starts_with('-') {
                style.red(&shown)
            } else if line.starts_with("@@") {
                style.cyan(&shown)
            } else {
                shown
            }
        })
        .collect()
}

/// A few lines of what a successful tool printed, indented, with how many
/// more there are (`/last` shows all). Failures show their error line in
/// [`tool_result`] instead.
pub fn preview(output: &ToolOutput) -> Vec<String> {
    if output.status != ToolStatus::Ok {
        return Vec::new();
    }
    let lines: Vec<&str> = output
        .text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("[exit code"))
        .collect();
    let mut shown: Vec<String> = lines
        .iter()
        .take(PREVIEW_LINES)
        .map(|l| format!("    {}", text::shorten(l.trim_end(), MAX_PREVIEW_LINE)))
        .collect();
    if lines.len() > PREVIEW_LINES {
        shown.push(format!(
            "    … {} more lines (/last shows them)",
            lines.len() - PREVIEW_LINES
        ));
    }
    shown
}

/// A warning: one label, even when the text (a rendered script error)
/// brings its own.
pub fn warning(style: Style, text: &str) -> String {
    let text = text.strip_prefix("error: ").unwrap_or(text);
    format!("{} {}", style.yellow("warning:"), text.trim_end())
}

/// An error for the person.
pub fn error(style: Style, text: &str) -> String {
    format!("{} {}", style.red("error:"), text.trim_end())
}

/// The line after a turn: tokens used, and how full the context is.
pub fn turn_summary(usage: Usage, context: u64, window: Option<u64>) -> Option<String> {
    let mut line = String::new();
    if usage.total_tokens > 0 {
        line = format!(
            "tokens: {} in, {} out",
            usage.prompt_tokens, usage.completion_tokens
        );
    }
    if let Some(w) = window.filter(|w| *w > 0) {
        let pct = (context as f64 / w as f64 * 100.0).round();
        line.push_str(&format!(
            "{}context {pct}% of {w}",
            if line.is_empty() { "" } else { " · " }
        ));
    }
    (!line.is_empty()).then_some(line)
}

/// The banner's second line: where the agent works and what it talks to.
pub fn banner(style: Style, facts: &crate::setup::Facts) -> Vec<String> {
    let profile = facts
        .profile
        .as_deref()
        .map(|p| format!(" (profile {p})"))
        .unwrap_or_default();
    let key = match (&facts.key_source, &facts.key_needed) {
        (Some(var), _) => format!("key from {var}"),
        (None, Some(_)) => "no key".to_string(),
        (None, None) => "no key needed".to_string(),
    };
    let mut lines = vec![
        style.dim(&format!(
            "workspace {} · {} at {}{profile} · {key}",
            facts.workspace.display(),
            facts.model,
            facts.endpoint
        )),
        style.dim(&facts.sandbox),
    ];
    if let Some(var) = &facts.key_needed {
        lines.push(warning(
            style,
            &format!(
                "no API key is set for {}; requests will be refused (401). Set {var}.",
                facts.endpoint
            ),
        ));
    }
    lines
}

/// Longest first request shown in a session list.
const MAX_LISTED_REQUEST: usize = 60;

/// The lines of a session list: id, start, messages, first request;
/// `current` is marked.
pub fn sessions(
    list: &[crate::agent::transcript::SessionInfo],
    current: Option<&str>,
) -> Vec<String> {
    if list.is_empty() {
        return vec!["  no saved conversations for this workspace yet".to_string()];
    }
    list.iter()
        .map(|s| {
            let started = s.started.get(..16).unwrap_or(&s.started).replace('T', " ");
            let request = s
                .first_request
                .as_deref()
                .map(|r| text::shorten(&text::one_line(r), MAX_LISTED_REQUEST))
                .unwrap_or_default();
            let mark = if current == Some(s.id.as_str()) {
                " (this one)"
            } else {
                ""
            };
            format!(
                "  {}  {started}  {:>4} messages  {request}{mark}",
                s.id, s.messages
            )
        })
        .collect()
}

/// The report as lines for the person: `allow`, `ask` or `deny`, the
/// command (control characters made visible), and the reason.
pub fn policy_report(report: &crate::script::policy_test::Report) -> String {
    use crate::runtime::policy::Decision;
    use crate::ui::sanitize::visible_line;
    let mut out = format!("policy: {}\n", report.policy);
    for note in &report.notes {
        out.push_str(&format!("note: {}\n", visible_line(note)));
    }
    for v in &report.verdicts {
        let (word, reason) = match &v.decision {
            Decision::Allow => ("allow", None),
            Decision::Ask(r) => ("ask", Some(r)),
            Decision::Deny(r) => ("deny", Some(r)),
        };
        out.push_str(&format!(
            "{word:<5} {}: {}",
            v.line,
            visible_line(&v.command)
        ));
        if let Some(r) = reason {
            out.push_str(&format!("\n        {}", visible_line(r)));
        }
        out.push('\n');
    }
    let count =
        |f: fn(&Decision) -> bool| report.verdicts.iter().filter(|v| f(&v.decision)).count();
    out.push_str(&format!(
        "{} allowed, {} asked, {} denied\n",
        count(|d| matches!(d, Decision::Allow)),
        count(|d| matches!(d, Decision::Ask(_))),
        count(|d| matches!(d, Decision::Deny(_))),
    ));
    out
}

/// `/mcp` and `agent check`: each MCP server, its state and its tools.
pub fn mcp_servers(style: Style, servers: &[crate::tools::mcp::ServerStatus]) -> Vec<String> {
    use crate::tools::mcp::State;
    if servers.is_empty() {
        return vec!["  no MCP servers (add them to mcp.rhai in the config dir)".to_string()];
    }
    let mut lines = Vec::new();
    for s in servers {
        let state = match &s.state {
            State::Running => style.green("running"),
            State::Failed(_) | State::Crashed(_) => {
                style.red(&super::sanitize::visible(&s.state.describe()))
            }
            other => other.describe(),
        };
        lines.push(format!(
            "  {} ({}): {state}",
            s.name,
            super::sanitize::visible(&s.what)
        ));
        if !s.tools.is_empty() {
            lines.push(format!("    tools: {}", s.tools.join(", ")));
        }
    }
    lines
}

/// The model's plan (`emit("plan", #{items: [#{step, status}], explanation})`)
/// as a checklist: `[x]` done, `[>]` in progress, `[ ]` pending.
pub fn plan(style: Style, data: &Value) -> Vec<String> {
    let items = data
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let done = items
        .iter()
        .filter(|i| i.get("status").and_then(Value::as_str) == Some("done"))
        .count();
    let mut lines = vec![style.cyan(&format!("plan ({done} of {} done)", items.len()))];
    if let Some(why) = data.get("explanation").and_then(Value::as_str)
        && !why.trim().is_empty()
    {
        lines.push(style.dim(&format!(
            "  {}",
            text::shorten(&text::one_line(why), MAX_SCRIPT_EVENT)
        )));
    }
    for item in &items {
        let step = item.get("step").and_then(Value::as_str).unwrap_or("?");
        let step = text::shorten(&text::one_line(step), MAX_SCRIPT_EVENT);
        lines.push(match item.get("status").and_then(Value::as_str) {
            Some("done") => style.dim(&format!("  [x] {step}")),
            Some("in_progress") => style.yellow(&format!("  [>] {step}")),
            _ => format!("  [ ] {step}"),
        });
    }
    lines
}

/// Any other script event, on one line.
pub fn script_event(kind: &str, data: &Value) -> String {
    let body = match data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text::shorten(
        &text::one_line(&format!("[{kind}] {body}")),
        MAX_SCRIPT_EVENT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorKind;
    use serde_json::json;

    const PLAIN: Style = Style { color: false };

    #[test]
    fn summaries_prefer_the_command_or_path() {
        assert_eq!(summarize_input(&json!({"command": "ls\n-la"})), "ls⏎-la");
        assert_eq!(
            summarize_input(&json!({"path": "a.rs", "offset": 3})),
            "a.rs"
        );
        assert_eq!(summarize_input(&json!({"x": 1})), "{\"x\":1}");
        assert!(summarize_input(&json!({"command": "x".repeat(500)})).ends_with('…'));
    }

    #[test]
    fn a_failure_shows_its_error_not_a_marker() {
        let out = ToolOutput::failed(ErrorKind::Failed, "[stderr]\nls: cannot access 'x'\n")
            .with_exit_code(Some(2));
        assert_eq!(
            tool_result(PLAIN, &out),
            "  ✗ exit 2: ls: cannot access 'x'"
        );
        let denied = ToolOutput::failed(ErrorKind::Denied, "Denied: the person refused");
        assert_eq!(
            tool_result(PLAIN, &denied),
            "  ✗ denied: Denied: the person refused"
        );
        assert_eq!(tool_result(PLAIN, &ToolOutput::ok("x")), "  ✓ ok");
    }

    #[test]
    fn a_preview_is_a_few_lines_of_a_success() {
        let out = ToolOutput::ok("one\n\ntwo\nthree\nfour\nfive\n");
        assert_eq!(
            preview(&out),
            [
                "    one",
                "    two",
                "    three",
                "    … 2 more lines (/last shows them)"
            ]
        );
        assert_eq!(preview(&ToolOutput::ok("done\n")), ["    done"]);
        let failed = ToolOutput::failed(ErrorKind::Failed, "boom");
        assert!(preview(&failed).is_empty());
    }

    #[test]
    fn a_warning_has_one_label() {
        assert_eq!(
            warning(PLAIN, "error: tools.rhai:3:1 oops\n"),
            "warning: tools.rhai:3:1 oops"
        );
        assert_eq!(error(PLAIN, "boom"), "error: boom");
    }

    #[test]
    fn the_turn_summary() {
        let usage = Usage {
            prompt_tokens: 10,
            completion_tokens: 2,
            total_tokens: 12,
        };
        assert_eq!(
            turn_summary(usage, 500, Some(1000)).as_deref(),
            Some("tokens: 10 in, 2 out · context 50% of 1000")
        );
        assert_eq!(turn_summary(Usage::default(), 0, None), None);
    }

    #[test]
    fn a_plan_is_a_checklist_and_other_events_one_line() {
        let data = serde_json::json!({"items": [
            {"step": "read", "status": "done"},
            {"step": "fix\nit", "status": "in_progress"},
            {"step": "test", "status": "pending"},
        ], "explanation": "found the cause"});
        let lines = plan(Style { color: false }, &data);
        assert_eq!(
            lines,
            [
                "plan (1 of 3 done)",
                "  found the cause",
                "  [x] read",
                "  [>] fix⏎it",
                "  [ ] test"
            ]
        );
        assert_eq!(
            plan(Style { color: false }, &serde_json::json!(5)),
            ["plan (0 of 0 done)"]
        );
        assert_eq!(script_event("note", &serde_json::json!("hi")), "[note] hi");
    }
}

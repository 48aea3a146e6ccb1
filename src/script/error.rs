//! Script errors a person can act on: `file:line:col`, the line itself and
//! a caret under the spot.

use rhai::{EvalAltResult, ParseError, Position};

use super::engine::{SCRIPT_CALL_BUDGET, termination_kind};

/// A script error, already rendered for people.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{rendered}")]
pub struct ScriptError {
    /// The whole message: what went wrong, where, and the source line.
    pub rendered: String,
    /// The one-line summary, for the model or a list.
    pub summary: String,
}

/// Renders a parse error of `file`.
pub fn parse_error(file: &str, source: &str, err: &ParseError) -> ScriptError {
    let summary = err.err_type().to_string();
    render(file, source, &summary, err.position())
}

/// Renders a runtime error of `file`, walking nested function-call errors
/// down to the innermost one, which carries the real position.
pub fn runtime_error(file: &str, source: &str, err: &EvalAltResult) -> ScriptError {
    let mut inner = err;
    let mut chain = Vec::new();
    loop {
        match inner {
            EvalAltResult::ErrorInFunctionCall(name, _, next, pos) => {
                chain.push((name.clone(), *pos));
                inner = next;
            }
            EvalAltResult::ErrorInModule(_, next, _) => inner = next,
            _ => break,
        }
    }
    let position = if inner.position().is_none() {
        err.position()
    } else {
        inner.position()
    };
    let summary = match termination_kind(err) {
        Some("timeout") => format!(
            "the script ran for more than {} s of its own time and was stopped (an endless loop?)",
            SCRIPT_CALL_BUDGET.as_secs()
        ),
        Some(_) => "the script was cancelled".to_string(),
        None => match inner {
            EvalAltResult::ErrorRuntime(value, _) if value.is_string() => {
                format!("thrown: {value}")
            }
            _ => strip_position(&inner.to_string()),
        },
    };
    let mut out = render(file, source, &summary, position);
    for (name, pos) in chain.iter().filter(|(n, _)| !n.starts_with("anon$")) {
        if let Some(line) = pos.line() {
            out.rendered
                .push_str(&format!("   = in a call to `{name}` at {file}:{line}\n"));
        }
    }
    out
}

/// Rhai appends " (line L, position C)" to messages; the caret shows it.
fn strip_position(message: &str) -> String {
    match message.rfind(" (line ") {
        Some(i) if message.ends_with(')') => crate::text::prefix(message, i).to_string(),
        _ => message.to_string(),
    }
}

fn render(file: &str, source: &str, summary: &str, pos: Position) -> ScriptError {
    let mut rendered = format!("error: {summary}\n");
    match (pos.line(), pos.position()) {
        (Some(line), col) => {
            let col = col.unwrap_or(1);
            rendered.push_str(&format!(" --> {file}:{line}:{col}\n"));
            let text = source
                .split('\n')
                .nth(line - 1)
                .unwrap_or("")
                .trim_end_matches('\r');
            let width = line.to_string().len();
            rendered.push_str(&format!("{:width$} |\n", ""));
            rendered.push_str(&format!("{line} | {text}\n"));
            // Tabs keep their width so the caret lines up.
            let pad: String = text
                .chars()
                .take(col.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            rendered.push_str(&format!("{:width$} | {pad}^\n", ""));
        }
        _ => rendered.push_str(&format!(" --> {file}\n")),
    }
    ScriptError {
        rendered,
        summary: match pos.line() {
            Some(line) => format!("{summary} ({file}:{line}:{})", pos.position().unwrap_or(1)),
            None => format!("{summary} ({file})"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::engine::engine;

    #[test]
    fn syntax_errors_point_at_the_line_and_column() {
        let source = "let a = 1;\nlet b = ;\n";
        let err = engine().compile(source).unwrap_err();
        let e = parse_error("tools.rhai", source, &err);
        assert!(e.rendered.contains(" --> tools.rhai:2:9"), "{}", e.rendered);
        assert!(e.rendered.contains("2 | let b = ;"), "{}", e.rendered);
        assert!(e.rendered.contains("  |         ^"), "{}", e.rendered);
        assert!(e.summary.ends_with("(tools.rhai:2:9)"), "{}", e.summary);
    }

    #[test]
    fn runtime_errors_in_functions_point_inside_the_function() {
        let source = "fn inner(x) {\n    x.no_such_method()\n}\nfn outer() { inner(1) }\n";
        let ast = engine().compile(source).unwrap();
        let err = engine()
            .call_fn::<rhai::Dynamic>(&mut rhai::Scope::new(), &ast, "outer", ())
            .unwrap_err();
        let e = runtime_error("w.rhai", source, &err);
        assert!(e.rendered.contains("w.rhai:2:7"), "{}", e.rendered);
        assert!(e.rendered.contains("no_such_method"), "{}", e.rendered);
        assert!(
            e.rendered.contains("in a call to `inner`"),
            "{}",
            e.rendered
        );
    }
}

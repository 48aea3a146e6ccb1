//! One tool of one MCP server as a registry entry: its spec (the server's
//! JSON Schema passed through), the approval check (`kind: "mcp"`), the
//! call, and the mapping of its result to the text the model reads.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Map, Value};

use super::server::{CallError, Server};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::runtime::policy::Action;
use crate::tools::{Tool, ToolContext, ToolOrigin, ToolSpec};

/// A server's tool, as the model sees it.
pub struct McpTool {
    server: Arc<Server>,
    spec: ToolSpec,
    /// The name the server knows it by.
    tool: String,
    /// `destructiveHint: true` (and not read-only).
    destructive: bool,
    /// `readOnlyHint: true`.
    read_only: bool,
}

impl McpTool {
    pub(super) fn new(server: Arc<Server>, tool: &rmcp::model::Tool) -> McpTool {
        let hints = tool.annotations.as_ref();
        let read_only = hints.and_then(|a| a.read_only_hint) == Some(true);
        let destructive = !read_only && hints.and_then(|a| a.destructive_hint) == Some(true);
        let mut parameters = Value::Object((*tool.input_schema).clone());
        // The model APIs want an object schema; a server that sends none
        // (or a bare `{}`) takes no arguments.
        if parameters.get("type").is_none() {
            if let Value::Object(m) = &mut parameters {
                m.insert("type".into(), "object".into());
            }
        }
        let description = tool.description.as_deref().unwrap_or("").trim().to_string();
        McpTool {
            spec: ToolSpec {
                name: super::tool_name(&server.config.name, &tool.name),
                description: format!("(MCP server `{}`) {description}", server.config.name),
                parameters,
            },
            server,
            tool: tool.name.to_string(),
            destructive,
            read_only,
        }
    }
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn origin(&self) -> ToolOrigin {
        ToolOrigin::Mcp
    }

    fn is_mutating(&self) -> bool {
        !self.read_only
    }

    fn call(&self, args: Map<String, Value>, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let server = self.server.clone();
        let tool = self.tool.clone();
        let action = Action::Mcp {
            server: server.config.name.clone(),
            tool: tool.clone(),
            arguments: Value::Object(args.clone()).to_string(),
            destructive: self.destructive,
            read_only: self.read_only,
        };
        Box::pin(async move {
            let preview = serde_json::to_string_pretty(&Value::Object(args.clone())).ok();
            if let Err(text) = ctx
                .runtime
                .policy
                .check_with_preview(&action, preview)
                .await
            {
                return ToolOutput::failed(ErrorKind::Denied, text);
            }
            match server.call(&tool, args, &ctx.cancel).await {
                Ok(result) => {
                    let (ok, text) = render_result(&result);
                    let text = fit(ctx.runtime.redact(text), &ctx);
                    if ok {
                        ToolOutput::ok(text)
                    } else {
                        ToolOutput::failed(ErrorKind::Failed, text)
                    }
                }
                Err(CallError::Cancelled) => {
                    ToolOutput::failed(ErrorKind::Cancelled, crate::tools::messages::CANCELLED)
                }
                Err(CallError::Timeout(limit)) => {
                    ToolOutput::failed(ErrorKind::Timeout, timed_out(&tool, limit))
                }
                Err(CallError::Failed(why)) => {
                    let text = if why.starts_with("Error:") {
                        why
                    } else {
                        format!("Error: the MCP tool `{tool}` failed: {why}")
                    };
                    ToolOutput::failed(ErrorKind::Failed, fit(ctx.runtime.redact(text), &ctx))
                }
            }
        })
    }
}

/// What the model reads when a call ran past the server's `tool_timeout`.
pub fn timed_out(tool: &str, limit: std::time::Duration) -> String {
    format!(
        "Error: the MCP tool `{tool}` did not answer within {} s (tool_timeout in mcp.rhai); the server was told to stop it.",
        limit.as_secs_f64()
    )
}

/// The text of a result, and whether it succeeded (`isError` is a
/// failure). Text blocks as they are; an embedded resource as its URI
/// then its text (binary ones as a note); a resource link as its URI; an
/// image or audio clip as a short note (the model cannot see it here);
/// structured content as JSON, unless a text block already is exactly it.
pub fn render_result(result: &CallToolResult) -> (bool, String) {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!(
                "[image: {}, {} bytes; images are not shown to you here — describe what you need from it to the user, or use a tool that returns text]",
                i.mime_type,
                base64_len(&i.data)
            ),
            ContentBlock::Audio(a) => format!(
                "[audio: {}, {} bytes; not shown to you here]",
                a.mime_type,
                base64_len(&a.data)
            ),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => format!(
                    "[resource {uri}: {}, {} bytes of binary data, not shown]",
                    mime_type.as_deref().unwrap_or("binary"),
                    base64_len(blob)
                ),
                // The enum is non-exhaustive: a kind a newer SDK knows.
                _ => "[an embedded resource of a kind this client cannot read]".to_string(),
            },
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[resource link {}", link.uri);
                if !link.name.is_empty() {
                    line.push_str(&format!(" ({})", link.name));
                }
                if let Some(d) = &link.description {
                    line.push_str(&format!(": {d}"));
                }
                line.push(']');
                line
            }
            // A block of a kind newer than this SDK (the enum is
            // non-exhaustive).
            _ => "[a content block of a kind this client cannot read]".to_string(),
        });
    }
    if let Some(structured) = &result.structured_content {
        let already = result.content.iter().any(|b| match b {
            ContentBlock::Text(t) => {
                serde_json::from_str::<Value>(&t.text).is_ok_and(|v| &v == structured)
            }
            _ => false,
        });
        if !already {
            let json = serde_json::to_string_pretty(structured).unwrap_or_default();
            parts.push(format!("structured content:\n{json}"));
        }
    }
    let failed = result.is_error == Some(true);
    let mut text = parts.join("\n");
    if text.is_empty() {
        text = if failed {
            "Error: the tool failed and said nothing more".into()
        } else {
            "(the tool returned nothing)".into()
        };
    }
    (!failed, text)
}

/// The decoded size of base64 `data`.
fn base64_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// Keeps a result within the output cap, as a command's output is: a
/// longer one is saved to a spill file the model can page through (whole,
/// or its start and end past the spill cap), and the model reads the first
/// quarter and the last three quarters of the cap with the same marker as
/// a command's (`is saved at PATH`) between.
fn fit(text: String, ctx: &ToolContext) -> String {
    let limits = &ctx.runtime.limits;
    let cap = limits.output_cap;
    if text.len() <= cap {
        return text;
    }
    let target = crate::runtime::spill::SpillTarget {
        dir: ctx.runtime.spill_dir.clone(),
        label: crate::runtime::sanitize_label(&ctx.call_id),
        stream: "stdout",
        cap: limits.spill_cap,
    };
    let saved = crate::runtime::spill::SpillFile::create(&target).and_then(|mut file| {
        match file.write(text.as_bytes()) {
            Ok(()) => file.finish(),
            Err(e) => {
                file.discard();
                Err(e)
            }
        }
    });
    let head = crate::text::prefix(&text, cap / 4);
    let tail = crate::text::suffix(&text, cap - cap / 4);
    let omitted = (text.len() - head.len() - tail.len()) as u64;
    let total = text.len() as u64;
    let marker = match saved {
        Ok(spilled) => {
            crate::runtime::process::omission_marker(omitted, total, &spilled.path, spilled.dropped)
        }
        Err(e) => crate::runtime::process::unsaved_marker(omitted, total, &e),
    };
    [head, &marker, tail].concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock as Content;
    use serde_json::json;

    fn result(content: Vec<Content>, structured: Option<Value>, error: bool) -> CallToolResult {
        let mut r = CallToolResult::success(content);
        r.structured_content = structured;
        r.is_error = Some(error);
        r
    }

    #[test]
    fn text_and_structured_content_reach_the_model() {
        let r = result(
            vec![Content::text("hello")],
            Some(json!({"temperature": 21})),
            false,
        );
        let (ok, text) = render_result(&r);
        assert!(ok);
        assert!(text.starts_with("hello\nstructured content:\n"), "{text}");
        assert!(text.contains("\"temperature\": 21"), "{text}");
    }

    #[test]
    fn structured_content_equal_to_a_text_block_is_not_repeated() {
        let r = result(
            vec![Content::text(r#"{"a": 1}"#)],
            Some(json!({"a": 1})),
            false,
        );
        assert_eq!(render_result(&r).1, r#"{"a": 1}"#);
    }

    #[test]
    fn images_become_a_note_and_resources_keep_their_uri() {
        let r = result(
            vec![
                Content::image("aGVsbG8=", "image/png"),
                Content::embedded_text("file:///tmp/a.txt", "the file"),
            ],
            None,
            false,
        );
        let (_, text) = render_result(&r);
        assert!(text.contains("[image: image/png, 5 bytes;"), "{text}");
        assert!(
            text.contains("[resource file:///tmp/a.txt]\nthe file"),
            "{text}"
        );
    }

    #[test]
    fn is_error_is_a_failure() {
        let r = result(vec![Content::text("no such zone")], None, true);
        assert_eq!(render_result(&r), (false, "no such zone".to_string()));
        let empty = result(vec![], None, true);
        assert!(!render_result(&empty).0);
    }
}

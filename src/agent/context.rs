//! Context management: how many tokens the history holds, when to compact,
//! and what to keep. Pure functions over the history.
//!
//! The count starts from the server's own `prompt_tokens` for the last
//! request and adds an estimate (about four characters a token) for what
//! came after; with no usage figures, everything is estimated.

use crate::protocol::Message;

/// Compact when a request would use more than this share of the window
/// (the loop's floor; `compaction()` in prompt.rhai sets it).
pub const COMPACT_AT: f64 = 0.8;

/// After compaction the kept recent messages use at most this share of
/// the context as it was (the loop's floor; prompt.rhai sets it).
pub const KEEP_RECENT: f64 = 0.25;

/// When to compact and what to keep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompactionRule {
    /// Share of the window a request may use before the history is
    /// compacted.
    pub compact_at: f64,
    /// Share of the context (as it was, and at most of the window) the
    /// kept recent messages may use; the rest is summarised. Small enough
    /// that compaction frees real room.
    pub keep_recent: f64,
}

impl Default for CompactionRule {
    fn default() -> Self {
        CompactionRule {
            compact_at: COMPACT_AT,
            keep_recent: KEEP_RECENT,
        }
    }
}

/// The token budget of the messages kept by a compaction: a share of the
/// context as it is now (and never more than that share of the window), so
/// that compacting a short conversation still frees most of it. Pure.
pub fn keep_budget(window: u64, context: u64, keep_recent: f64) -> u64 {
    (window.min(context) as f64 * keep_recent.clamp(0.0, 0.9)) as u64
}

/// Characters per token in the estimate; the usual figure for English text
/// and code with BPE tokenizers.
const CHARS_PER_TOKEN: usize = 4;

/// Longest piece of one message shown to the summariser; tool outputs are
/// cut in the middle beyond it.
const MAX_RENDERED_MESSAGE: usize = 4000;

/// An estimate of a message's tokens.
pub fn estimate(message: &Message) -> u64 {
    let chars = match message {
        Message::System { content } | Message::User { content, .. } => content.len(),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            content.as_deref().map_or(0, str::len)
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len() + 16)
                    .sum::<usize>()
        }
        Message::Tool { content, .. } => content.len() + 16,
    };
    (chars / CHARS_PER_TOKEN + 4) as u64
}

/// An estimate of the whole history's tokens.
pub fn estimate_all(messages: &[Message]) -> u64 {
    messages.iter().map(estimate).sum()
}

/// Where to cut `history` (index of the first kept message) so the kept
/// tail stays within `budget` tokens. The cut is always before a `user`
/// message or before an assistant message whose tool calls are all
/// answered after it, so no call is separated from its answer. Index 0 is
/// the system message and never counts. `None` when nothing can be cut.
pub fn cut_point(history: &[Message], budget: u64) -> Option<usize> {
    let mut kept = 0u64;
    let mut best = None;
    // Walk back from the end; a valid cut is a message that starts a step.
    for i in (2..history.len()).rev() {
        kept += estimate(&history[i]);
        if kept > budget {
            break;
        }
        if matches!(history[i], Message::User { .. } | Message::Assistant { .. }) {
            best = Some(i);
        }
    }
    // Keep at least the latest step even when it alone is over budget.
    best.or_else(|| {
        (2..history.len())
            .rev()
            .find(|&i| matches!(history[i], Message::User { .. } | Message::Assistant { .. }))
    })
}

/// The older messages as plain text for the summariser.
pub fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let (who, text) = match m {
            Message::System { .. } => continue,
            Message::User { content, .. } => ("user", content.clone()),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut t = content.clone().unwrap_or_default();
                for c in tool_calls {
                    t.push_str(&format!("\n[calls {} {}]", c.name, c.arguments));
                }
                ("assistant", t)
            }
            Message::Tool { name, content, .. } => ("tool result", format!("({name}) {content}")),
        };
        out.push_str(&format!("--- {who}:\n{}\n", shorten(&text)));
    }
    out
}

fn shorten(text: &str) -> String {
    if text.len() <= MAX_RENDERED_MESSAGE {
        return text.to_string();
    }
    let head = crate::text::prefix(text, MAX_RENDERED_MESSAGE / 2);
    let tail = crate::text::suffix(text, MAX_RENDERED_MESSAGE / 2);
    format!(
        "{head}\n[… {} characters left out …]\n{tail}",
        text.len() - head.len() - tail.len(),
    )
}

/// Whether a server error means the request was too long for the context.
pub fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("context")
        && (m.contains("length")
            || m.contains("too long")
            || m.contains("exceed")
            || m.contains("window")))
        || m.contains("maximum context")
        || m.contains("too many tokens")
        || m.contains("prompt is too long")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ToolCall, ToolStatus};

    fn assistant_call(id: &str) -> Message {
        Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "read_file".into(),
                arguments: "{}".into(),
            }],
            reasoning: None,
        }
    }

    fn tool(id: &str, size: usize) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "read_file".into(),
            content: "x".repeat(size),
            status: ToolStatus::Ok,
            exit_code: None,
        }
    }

    #[test]
    fn the_cut_never_separates_a_call_from_its_answer() {
        let history = vec![
            Message::System {
                content: "s".into(),
            },
            Message::user("task"),
            assistant_call("a"),
            tool("a", 4000),
            assistant_call("b"),
            tool("b", 400),
            Message::user("next"),
        ];
        let cut = cut_point(&history, 200).unwrap();
        assert!(matches!(
            history[cut],
            Message::User { .. } | Message::Assistant { .. }
        ));
        assert_eq!(
            cut, 4,
            "keeps the last call with its answer and the new message"
        );
        assert_eq!(cut_point(&history[..2], 1000), None, "nothing to cut");
    }

    #[test]
    fn the_kept_budget_is_a_share_of_the_context_not_of_the_window() {
        // A 10k-token conversation in a 128k window keeps 2.5k, not 32k.
        assert_eq!(keep_budget(128_000, 10_000, 0.25), 2_500);
        // Over the window (a context-too-long error), the window bounds it.
        assert_eq!(keep_budget(8_000, 12_000, 0.25), 2_000);
        assert_eq!(keep_budget(8_000, 12_000, 5.0), 7_200);
    }

    #[test]
    fn overflow_errors_are_recognised() {
        assert!(is_context_overflow(
            "This model's maximum context length is 8192 tokens"
        ));
        assert!(is_context_overflow(
            "the request exceeds the available context size"
        ));
        assert!(!is_context_overflow("Invalid API key"));
    }

    #[test]
    fn long_outputs_are_cut_in_the_middle_for_the_summariser() {
        let text = render(&[tool("a", 20_000)]);
        assert!(text.len() < 5000 && text.contains("characters left out"));
    }
}

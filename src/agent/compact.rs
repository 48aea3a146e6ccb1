//! Compaction: when the history outgrows the context window, the older
//! turns are summarised by the model (with `summary_prompt()` from
//! prompt.rhai) and the recent turns and the person's request are kept.

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::messages::SUMMARY_HEADER;
use super::{Agent, TurnError, context};
use crate::client::{Piece, wire};
use crate::protocol::{Event, EventSink, Message, UserSource};

/// What a compaction did, for the person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compaction {
    pub messages_summarised: usize,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

impl Agent {
    pub(super) async fn compact_and_report(
        &mut self,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Result<Option<Compaction>, TurnError> {
        let report = self.compact(cancel).await?;
        if let Some(r) = &report {
            sink.emit(Event::Notice(format!(
                "context compacted: {} older messages summarised (about {} → {} tokens)",
                r.messages_summarised, r.tokens_before, r.tokens_after
            )));
        }
        Ok(report)
    }

    /// Summarises the older turns with the model and keeps the recent ones
    /// and the task. Returns `None` when there is nothing old enough to
    /// summarise.
    pub async fn compact(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Compaction>, TurnError> {
        let window = self
            .context_window
            .unwrap_or_else(|| self.context_tokens().max(1));
        let budget =
            context::keep_budget(window, self.context_tokens(), self.compaction.keep_recent);
        let Some(cut) = context::cut_point(&self.history, budget) else {
            return Ok(None);
        };
        if cut <= 1 {
            return Ok(None);
        }
        let tokens_before = self.context_tokens();
        let older = &self.history[1..cut];
        let task = self.last_request().unwrap_or_default().to_string();
        let messages = [
            Message::System {
                content: self.summary_prompt.clone(),
            },
            Message::user(format!(
                "The conversation so far:\n{}\nThe user's current request: {task}",
                context::render(older)
            )),
        ];
        let (no_tools, no_extra) = (Value::Array(Vec::new()), Map::new());
        let request = wire::request_body(self.model.name(), &messages, &no_tools, &no_extra);
        let mut ignore_piece = |_: Piece| {};
        let mut ignore_notice = |_: String| {};
        let summary = self
            .model
            .respond(&request, &mut ignore_piece, &mut ignore_notice, cancel)
            .await?;
        if let Some(usage) = summary.usage {
            self.usage.add(usage);
        }
        let summarised = cut - 1;
        let recent = self.history.split_off(cut);
        self.history.truncate(1);
        self.wire.forget_from(1);
        self.chat_marks.clear();
        let note = Message::User {
            content: format!(
                "{SUMMARY_HEADER}\n{}\n\nThe user's current request: {task}",
                summary.content.trim()
            ),
            source: UserSource::Summary,
        };
        self.history.push(note);
        self.history.extend(recent);
        let runtime = self.runtime.clone();
        if let Some(t) = self.transcript.as_mut()
            && t.compaction(&self.history[1..], &|line| runtime.redact(line))
                .is_err()
        {
            self.transcript = None;
        }
        self.last_prompt = None;
        Ok(Some(Compaction {
            messages_summarised: summarised,
            tokens_before,
            tokens_after: self.context_tokens(),
        }))
    }
}

//! Running the calls of one response, in order. Every call gets exactly one
//! `tool` message: identical repeats inside the response are answered
//! without running, calls after an interrupt are answered as cancelled,
//! and a tool that does not stop within [`CANCEL_GRACE`] is answered for.
//! While a tool runs, the policy's approval questions go to the UI as
//! events.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::messages::duplicate_call;
use super::{Agent, CANCEL_GRACE};
use crate::protocol::{
    ApprovalAsk, ErrorKind, Event, EventSink, LiveLine, Message, ToolCall, ToolOutput,
};
use crate::runtime::policy::{Action, ApprovalRequest, AskQueue};
use crate::tools::{Registry, ToolContext, messages};
use crate::watchdog::CallRecord;
use crate::watchdog::mask::action_key;

impl Agent {
    /// Runs the calls of one response; returns what the judge needs.
    pub(super) async fn run_calls(
        &mut self,
        calls: &[ToolCall],
        oversized: &[crate::client::OversizedCall],
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> Vec<CallRecord> {
        let mut records = Vec::with_capacity(calls.len());
        let mut first_ids: Vec<(String, String, ToolOutput)> = Vec::new();
        for call in calls {
            let input = serde_json::from_str::<Value>(&call.arguments)
                .unwrap_or_else(|_| Value::String(call.arguments.clone()));
            let key = action_key(&call.name, &input);
            let duplicate = first_ids.iter().find(|(k, ..)| *k == key).cloned();
            // An unknown tool runs nothing, so it changes nothing.
            let mutating = self
                .registry
                .get(&call.name)
                .is_some_and(|t| t.is_mutating());
            let too_large = oversized.iter().find(|o| o.id == call.id);
            let (output, ran) = if cancel.is_cancelled() {
                (
                    ToolOutput::failed(ErrorKind::Cancelled, messages::CANCELLED),
                    false,
                )
            } else if let Some(o) = too_large {
                // Its arguments were not kept (client::bounds): refuse it.
                let text = crate::client::argument_too_large(&o.name, o.bytes, o.cap);
                (ToolOutput::failed(ErrorKind::InvalidArgs, text), false)
            } else if let Some((_, first_id, first)) = &duplicate {
                let output = ToolOutput {
                    text: duplicate_call(first_id),
                    ..first.clone()
                };
                (output, false)
            } else {
                sink.emit(Event::ToolCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    input: input.clone(),
                });
                if mutating
                    && self.judge.as_ref().is_some_and(|j| {
                        j.records_checkpoints() || j.write_path(&call.name, &input).is_some()
                    })
                {
                    let (name, input) = (call.name.clone(), input.clone());
                    self.on_judge(move |j| j.before_call(&name, &input)).await;
                }
                (self.dispatch(call, sink, cancel).await, true)
            };
            if duplicate.is_none() && output.error_kind != Some(ErrorKind::Cancelled) {
                first_ids.push((key, call.id.clone(), output.clone()));
            }
            sink.emit(Event::ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                output: output.clone(),
            });
            let record = self.record(call, input, &output, mutating && ran).await;
            records.extend(record);
            self.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: output.text,
                status: output.status,
                exit_code: output.exit_code,
            });
        }
        records
    }

    /// The judge's record of a call; on a blocking thread only when the
    /// call may have changed the workspace.
    async fn record(
        &mut self,
        call: &ToolCall,
        input: Value,
        output: &ToolOutput,
        mutating: bool,
    ) -> Option<CallRecord> {
        if mutating
            && self
                .judge
                .as_ref()
                .is_some_and(|j| j.may_read_disk() || j.write_path(&call.name, &input).is_some())
        {
            let (name, output) = (call.name.clone(), output.clone());
            return self
                .on_judge(move |j| j.after_call(&name, input, &output, true))
                .await;
        }
        let judge = self.judge.as_mut()?;
        Some(judge.after_call(&call.name, input, output, mutating))
    }

    /// Runs one call, forwarding approval questions to the UI while it
    /// waits. Secret values never reach the model or the logs.
    async fn dispatch(
        &mut self,
        call: &ToolCall,
        sink: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let runtime = self.runtime.clone();
        let live = LiveLine::default();
        sink.emit(Event::ToolRunning {
            id: call.id.clone(),
            live: live.clone(),
        });
        let mut ctx = ToolContext::new(runtime.clone(), cancel.clone(), &call.id);
        ctx.live = live;
        let work = run_one(self.registry.clone(), call.clone(), ctx);
        tokio::pin!(work);
        loop {
            tokio::select! {
                output = &mut work => {
                    let mut output = output;
                    output.text = runtime.redact(output.text);
                    output.diff = output.diff.map(|d| runtime.redact(d));
                    return output;
                }
                request = next_ask(&mut self.asks) => match request {
                    Some(request) => sink.emit(Event::Approval(approval_event(request))),
                    // Every sender is gone: nothing more can be asked.
                    None => self.asks = None,
                },
            }
        }
    }
}

/// The next approval question; never resolves when there is no queue.
async fn next_ask(asks: &mut Option<AskQueue>) -> Option<ApprovalRequest> {
    match asks {
        Some(queue) => queue.recv().await,
        None => std::future::pending().await,
    }
}

/// The event the UI sees for an approval question.
fn approval_event(request: ApprovalRequest) -> ApprovalAsk {
    let (command, path) = match &request.action {
        Action::Shell { command } | Action::Unsandboxed { command } => {
            (Some(command.clone()), None)
        }
        Action::Write { path } => (None, Some(path.display().to_string())),
        Action::Mcp { .. } => (None, None),
    };
    ApprovalAsk {
        id: request.id,
        action: request.action.describe(),
        command,
        path,
        programs: request.programs,
        scope: request.scope,
        preview: request.preview,
        reason: request.reason,
        reply: request.reply,
    }
}

/// Runs one call, answering for it if the turn is cancelled and the tool
/// does not stop within [`CANCEL_GRACE`]. Owns its `Arc`s, so it borrows
/// nothing of the agent across its awaits.
async fn run_one(registry: Arc<Registry>, call: ToolCall, ctx: ToolContext) -> ToolOutput {
    let cancel = ctx.cancel.clone();
    let dispatch = registry.dispatch(&call, ctx);
    tokio::pin!(dispatch);
    tokio::select! {
        biased;
        output = &mut dispatch => output,
        () = cancel.cancelled() => {
            // The tool sees the same token; give it a moment to stop on
            // its own and return its partial output.
            tokio::time::timeout(CANCEL_GRACE, &mut dispatch)
                .await
                .unwrap_or_else(|_| ToolOutput::failed(ErrorKind::Cancelled, messages::CANCELLED))
        }
    }
}

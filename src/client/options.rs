//! Per-request body fields a model profile adds (`options` in
//! `models.rhai`): a fixed map, or a function of the request. The client
//! layer defines the trait; `script::models` implements it.

use serde_json::{Map, Value};

/// What a profile's request options may depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestCtx {
    /// The request number within the current user turn, from 1.
    pub turn: u32,
    /// Whether the last message is a tool result.
    pub after_tool: bool,
}

/// Extra request-body fields, per request (a profile's `options`).
pub trait RequestOptions: Send + Sync {
    fn options(&self, ctx: &RequestCtx) -> Result<Map<String, Value>, String>;

    /// The options when they are the same for every request (a map, not a
    /// script function): then no script call and no blocking thread.
    fn fixed(&self) -> Option<&Map<String, Value>> {
        None
    }
}

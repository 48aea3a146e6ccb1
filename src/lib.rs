//! agent: a terminal coding agent whose behaviour is scripted in Rhai.
//!
//! | module | owns |
//! |---|---|
//! | [`protocol`] | the shared vocabulary: messages, tool calls and outputs, usage, events |
//! | [`config`] | settings from `AGENT_*` variables and flags; config and data dirs |
//! | [`client`] | the OpenAI-compatible streaming client: SSE framing, delta assembly, retries |
//! | [`agent`] | the turn loop: ask the model, run its tool calls, answer each one, repeat |
//! | [`tools`] | the registry and dispatcher, and the built-in tools |
//! | [`runtime`] | the safe shell/file layer every tool goes through |
//! | [`prompt`] | the facts the system prompt is built from, and `AGENTS.md` |
//! | [`ui`] | rendering events for people (text, REPL) and programs (JSON lines) |
//! | [`cli`] | flags, one-shot mode, exit codes |
//!
//! Data flows one way: `cli` builds an [`agent::Agent`] from a
//! [`client::ChatClient`], a [`tools::Registry`] and a [`runtime::Runtime`];
//! the agent turns a person's message into requests, tool calls into
//! [`protocol::ToolOutput`]s, and reports everything as [`protocol::Event`]s
//! to an [`protocol::EventSink`] from [`ui`]. Nothing below `ui` prints.

pub mod agent;
pub mod cli;
pub mod client;
pub mod config;
pub mod demo;
pub mod prompt;
pub mod protocol;
pub mod runtime;
pub mod script;
pub mod session;
pub mod tools;
pub mod ui;
pub mod watchdog;

//! agent: a terminal coding agent whose behaviour is scripted in Rhai.
//!
//! | layer | module | owns |
//! |---|---|---|
//! | vocabulary | [`protocol`] | messages, tool calls and outputs, usage, events, approval answers |
//! | | [`text`] | char-safe cutting of strings, one-line forms |
//! | | [`config`] | settings from `AGENT_*` variables and flags; config and data dirs |
//! | | [`data_dir`] | the paths of sessions, run logs, spilled outputs and history |
//! | machine | [`client`] | the OpenAI-compatible streaming client; the `RequestOptions` trait |
//! | | [`runtime`] | the safe shell/file layer every tool goes through; the approval policy |
//! | | [`prompt`] | the facts the system prompt is built from, and `AGENTS.md` (read through `runtime`) |
//! | tools | [`tools`] | the registry, the dispatcher and the built-in tools |
//! | judge | [`watchdog`] | detectors, budget, workspace identity, run log, `replay`; the `Rules` trait |
//! | loop | [`agent`] | the turn loop, compaction, transcripts |
//! | scripts | [`script`] | Rhai: the engine, the script API, one file per script role |
//! | assembly | [`setup`] | builds every part from scripts and settings: startup, `/reload`, `/model` |
//! | people | [`ui`] | renders events, answers approval questions, the REPL; the only printer |
//! | entry | [`cli`] | flags, subcommands, one-shot mode, exit codes, the demo |
//!
//! **The rule:** a module imports only from its own layer's vocabulary and
//! from layers above it in this table (`grep -rn "use crate::" src/`
//! checks it). So `agent` never imports `script`, `setup`, `ui` or `cli`;
//! `script` adapts Rhai to the traits the lower layers define
//! (`watchdog::Rules`, `client::RequestOptions`,
//! `runtime::policy::Approve`, `tools::Tool`); `ui` never imports `cli`.
//!
//! Data flows one way: `cli` starts a [`setup::Session`], which builds an
//! [`agent::Agent`] from a model client, a [`tools::Registry`], a
//! [`runtime::Runtime`] and a [`watchdog::Judge`]. The agent turns a
//! person's message into requests, tool calls into
//! [`protocol::ToolOutput`]s, and reports everything — approval questions
//! included — as [`protocol::Event`]s to an [`protocol::EventSink`] from
//! [`ui`]. Nothing outside `ui` prints (`clippy::print_stdout` and
//! `print_stderr` are denied elsewhere).

// The vocabulary.
pub mod config;
pub mod data_dir;
pub mod prompt;
pub mod protocol;
pub mod text;

// The machine.
pub mod client;
pub mod runtime;

// Tools, the judge and the loop.
pub mod tools;

pub mod watchdog;

pub mod agent;

// Scripts, and the assembly from them.
pub mod script;

pub mod setup;

// People, and the entry point.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod ui;

pub mod cli;

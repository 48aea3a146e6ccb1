//! The one integration test binary. Modules:
//! - `common`: the scripted mock server (`common::mock`) and the harness.
//! - `client`: the streaming client against the mock (shapes, errors, retries,
//!   and the bounds on what a server sends: caps, timeouts, peak memory).
//! - `turn_loop`: the agent loop in-process: tool results reach the model,
//!   bad calls come back as text, several calls per response.
//! - `binary`: the built `agent` binary end to end, with its exit codes.
//! - `containment_fs`: the agent's own file access and helpers as an
//!   attacker tries them: fsmonitor, symlink races, spill symlinks, FIFOs,
//!   hard links, AGENTS.md, a gigabyte of output.
//! - `hostile_model`: one run of the binary with the defaults against a model
//!   that tries every escape of issue 13: refusals, nothing outside changed.
//! - `fuzz`: property tests: arbitrary bytes never panic the SSE reader or the assembler.
//! - `local_models`: streams recorded from llama-server replayed: calls
//!   written as text, keep-alives, the usage chunk, the padding cut.
//! - `layering`: the import rule of `src/lib.rs`, checked over the sources.
//! - `mcp`: the reference MCP servers (npm, PyPI) through the agent: calls, isError, approval, restart, HTTP.
//! - `plan`: the `update_plan` script tool: its checklist on the screen and
//!   for the model, `/plan`, and the watchdog counting a step done.
//! - `policy`: the default policy.rhai over tables of dangerous and everyday
//!   commands, and `agent policy test` end to end.
//! - `profiles`: model profiles from models.rhai reaching the request body.
//! - `repl`: the REPL in a real terminal (tmux), saved sessions and compaction.
//! - `repl_commands`: the slash commands through their handler, in process: the lines each replies.
//! - `runtime_safety`: confinement, approvals, secrets, output budget, timeouts.
//! - `scripts`: the Rhai scripts as a person uses them (tools, prompt, check, init).
//! - `search`: the `grep` and `glob` tools in a repository with an ignored `target/`.
//! - `setup`: the one assembly path: what `/reload` and `/model` change and what the session keeps.
//! - `secrets`: a hostile model after the key: the child environment's
//!   allow-list, `/proc` of the agent, every encoded form of a secret.
//! - `tls`: an `https` endpoint on loopback with a throwaway authority: trusted, and refused without retries.
//! - `sandbox`: the Landlock sandbox through the real launcher and `--sandbox`
//!   (checks the fallback where the kernel has no Landlock).
//! - `watchdog_classes`: each runaway class of issue 16 live (exit 4, the rule named) and its
//!   look-alike real work (exit 0), through the built binary.
//! - `undo`: `/undo`, `/rewind` and `agent undo`: byte-for-byte restores of
//!   tool writes and `sed -i`, conflicts with the person's later edits.
//! - `watchdog_live`: the watchdog in the live loop (repair, stop, timeouts, stalls).
//! - `watchdog_notes`: the watchdog's notes as a small model reads them:
//!   placement, the restated request, the summary turn that answers it.
//! - `watchdog_scenarios`: runs that must trip the watchdog (loops) and runs
//!   that must not (real work), through the same pure `replay::run`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A failing test may explain itself on stderr, and test data is ASCII
// (`string_slice` guards the product's code against cutting a character).
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::string_slice)]

mod common;

mod binary;
mod client;
mod containment_fs;
mod fuzz;
mod hostile_model;
mod layering;
mod local_models;
mod mcp;
mod plan;
mod policy;
mod profiles;
mod repl;
mod repl_commands;
mod runtime_safety;
mod sandbox;
mod scripts;
mod search;
mod secrets;
mod setup;
mod tls;
mod turn_loop;
mod undo;
mod watchdog_classes;
mod watchdog_live;
mod watchdog_notes;
mod watchdog_scenarios;

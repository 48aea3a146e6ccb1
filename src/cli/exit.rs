//! Process exit codes, documented in the README.

/// The task finished.
pub const OK: u8 = 0;
/// `agent undo` restored nothing: a conflict with a later edit, or
/// nothing to undo.
pub const NOT_RESTORED: u8 = 1;
/// Bad usage or configuration (including scripts `agent check` rejects).
pub const USAGE: u8 = 2;
/// The model API failed.
pub const API: u8 = 3;
/// The watchdog stopped the run.
pub const WATCHDOG: u8 = 4;
/// The person interrupted the run (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

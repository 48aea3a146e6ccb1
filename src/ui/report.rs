//! Lines for the person from the commands that are not a turn
//! (`agent init`, `check`, `replay`, `demo`, startup errors): the CLI
//! decides what to say, this module is where it is printed.

use std::io::Write;

use super::{Style, render};

/// A line on stdout (a command's result).
pub fn out(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A line on stderr (diagnostics).
pub fn err(line: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{line}");
}

pub fn error(style: Style, message: &str) {
    err(&render::error(style, message));
}

pub fn warning(style: Style, message: &str) {
    err(&render::warning(style, message));
}

/// A clap error or help text, as clap formats it.
pub fn clap(e: &clap::Error) {
    let _ = e.print();
}

//! agent: a terminal coding agent whose behaviour is scripted in Rhai.
//! (Architecture map: see README.md; filled in as modules land.)

pub mod protocol;
pub mod runtime;
pub mod tools;

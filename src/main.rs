//! The `agent` binary: everything lives in the library; see `agent::cli`.

fn main() -> std::process::ExitCode {
    // The sandbox's launcher and init come first: they must set up
    // namespaces before any thread starts, and must stay dumpable while
    // they map their ids (they hold only the scrubbed environment).
    if let Some(code) = agent::cli::hidden() {
        return std::process::ExitCode::from(code);
    }
    // Before anything else: no process of the same user may read this
    // one's environment or memory (the API key) through /proc.
    if let Err(e) = agent::runtime::secrets::harden_process() {
        agent::ui::report::warning(agent::ui::Style { color: false }, &e.to_string());
    }
    std::process::ExitCode::from(agent::cli::main())
}

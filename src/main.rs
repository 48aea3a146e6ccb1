//! The `agent` binary: everything lives in the library; see `agent::cli`.

fn main() -> std::process::ExitCode {
    // Before anything else: no process of the same user may read this
    // one's environment or memory (the API key) through /proc.
    if let Err(e) = agent::runtime::secrets::harden_process() {
        agent::ui::report::warning(agent::ui::Style { color: false }, &e.to_string());
    }
    std::process::ExitCode::from(agent::cli::main())
}

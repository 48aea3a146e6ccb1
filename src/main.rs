//! The `agent` binary: everything lives in the library; see `agent::cli`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(agent::cli::main())
}

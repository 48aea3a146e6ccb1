//! The subcommands that are not a conversation: `agent init`, `agent
//! check`, `agent replay` and `agent undo`.

use std::path::Path;

use super::exit;
use crate::config::Settings;
use crate::script::{self, ScriptHost};
use crate::ui::{Style, report};
use crate::watchdog::replay;

pub fn init(settings: &Settings, style: Style, force: bool) -> u8 {
    match script::init(&settings.config_dir, force) {
        Ok(files) => init_report(&files),
        Err(e) => init_failed(settings, style, &e),
    }
}

fn init_report(files: &[(std::path::PathBuf, bool)]) -> u8 {
    for (path, written) in files {
        if *written {
            report::out(&format!("wrote   {}", path.display()));
        } else {
            report::out(&format!(
                "kept    {} (already there; --force overwrites it)",
                path.display()
            ));
        }
    }
    report::out("Edit these files to change the agent; `agent check` tries them.");
    exit::OK
}

fn init_failed(settings: &Settings, style: Style, e: &std::io::Error) -> u8 {
    report::error(
        style,
        &format!(
            "cannot write the scripts to {}: {e}. Set AGENT_CONFIG_DIR to a directory you can write.",
            settings.config_dir.display()
        ),
    );
    exit::USAGE
}

/// `endpoint` is what the agent would talk to after every override.
/// `mcp` is what became of each MCP server when it was started.
pub fn check(
    settings: &Settings,
    style: Style,
    endpoint: Result<String, String>,
    mcp: Result<Vec<crate::tools::mcp::ServerStatus>, String>,
) -> u8 {
    let mut failed = 0;
    let mut mcp_failed = 0;
    match &endpoint {
        Ok(line) => report::out(&format!("{}  endpoint: {line}", style.green("ok"))),
        Err(e) => {
            failed += 1;
            report::out(&format!("{}  endpoint: {e}", style.red("FAILED")));
        }
    }
    for result in script::check::check(&settings.config_dir) {
        match &result.result {
            Ok(summary) => report::out(&format!(
                "{}  {}: {summary}",
                style.green("ok"),
                result.path
            )),
            Err(rendered) => {
                failed += 1;
                report::out(&format!("{}  {}", style.red("FAILED"), result.path));
                report::out(rendered.trim_end());
            }
        }
    }
    match &mcp {
        Ok(servers) if servers.is_empty() => report::out(&format!(
            "{}  mcp: no servers configured",
            style.green("ok")
        )),
        Ok(servers) => {
            for server in servers {
                let running = server.state == crate::tools::mcp::State::Running
                    || server.state == crate::tools::mcp::State::Disabled;
                if !running {
                    mcp_failed += 1;
                }
                let mark = if running {
                    style.green("ok")
                } else {
                    style.red("FAILED")
                };
                report::out(&format!("{mark}  mcp server `{}`:", server.name));
                for line in crate::ui::render::mcp_servers(style, std::slice::from_ref(server)) {
                    report::out(&line);
                }
            }
        }
        // mcp.rhai's own error is reported with the scripts above.
        Err(_) => {}
    }
    let (host, _) = ScriptHost::load(&settings.config_dir);
    let sandbox_settings = host
        .get(script::POLICY)
        .and_then(|s| script::policy::PolicySettings::from_script(s).ok())
        .map(|p| p.sandbox_settings())
        .unwrap_or_default();
    for line in crate::runtime::sandbox::check_lines(std::env::current_exe(), &sandbox_settings) {
        report::out(&line);
    }
    if mcp_failed > 0 {
        report::out(&format!(
            "{mcp_failed} MCP server(s) did not start; their tools are not available until they do (see above)."
        ));
    }
    if failed == 0 && mcp_failed == 0 {
        report::out("All scripts are fine.");
        exit::OK
    } else if failed == 0 {
        exit::USAGE
    } else {
        report::out(&format!(
            "{failed} script(s) have errors; until they are fixed the agent uses the built-in default for each."
        ));
        exit::USAGE
    }
}

/// `agent policy test FILE`: your policy's decision for each command in
/// FILE; nothing runs. Exit 2 when the file cannot be read.
pub fn policy_test(settings: &Settings, style: Style, file: &Path) -> u8 {
    let home = std::env::var("HOME").unwrap_or_default();
    match script::policy_test::run(
        &settings.config_dir,
        &settings.workspace,
        &home,
        settings.sandbox,
        file,
    ) {
        Ok(report) => {
            report::out(crate::ui::render::policy_report(&report).trim_end());
            exit::OK
        }
        Err(e) => {
            report::error(style, &e);
            exit::USAGE
        }
    }
}

/// Runs the watchdog over a recorded run (JSON lines).
pub fn replay_file(settings: &Settings, style: Style, file: &Path) -> u8 {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            report::error(style, &format!("cannot read {}: {e}", file.display()));
            return exit::USAGE;
        }
    };
    let turns = match replay::parse(&text) {
        Ok(t) => t,
        Err(e) => {
            report::error(style, &format!("{}: {e}", file.display()));
            return exit::USAGE;
        }
    };
    let (host, notes) = ScriptHost::load(&settings.config_dir);
    for note in notes
        .iter()
        .filter(|n| !matches!(n, script::LoadNote::Loaded { .. }))
    {
        report::warning(style, &note.message());
    }
    let (mut watchdog, warnings) = match host.get(script::WATCHDOG) {
        Some(s) => script::watchdog::from_script(s.clone()),
        None => script::watchdog::default_watchdog(),
    };
    for w in warnings {
        report::warning(style, &w);
    }
    for (turn, verdict) in replay::run(&mut watchdog, &turns) {
        report::out(&replay::verdict_json(turn, &verdict).to_string());
    }
    exit::OK
}

/// `agent undo [--list] [--to N] [--force]`: the newest session of this
/// workspace that has checkpoints.
pub fn undo(settings: &Settings, style: Style, list: bool, to: Option<u32>, force: bool) -> u8 {
    use crate::runtime::checkpoint::Checkpoints;
    use crate::ui::undo::Request;
    let data = crate::data_dir::DataDir::new(settings.data_dir.clone());
    let Some(dir) = Checkpoints::latest_for(&data.checkpoints_root(), &settings.workspace) else {
        report::error(
            style,
            &format!(
                "no session in {} has changed files in {} yet; nothing to undo",
                data.checkpoints_root().display(),
                settings.workspace.display()
            ),
        );
        return exit::NOT_RESTORED;
    };
    let mut checkpoints = match Checkpoints::open(dir) {
        Ok(c) => c,
        Err(e) => {
            report::error(style, &e.to_string());
            return exit::USAGE;
        }
    };
    let request = match (list, to) {
        (true, _) => Request::List,
        (false, Some(n)) => Request::To(n),
        (false, None) => Request::Last,
    };
    match crate::ui::undo::undo(&mut checkpoints, request, force) {
        Ok(lines) => {
            lines.iter().for_each(|l| report::out(l));
            exit::OK
        }
        Err(lines) => {
            let mut lines = lines.iter();
            if let Some(first) = lines.next() {
                report::error(style, first.trim_start());
            }
            lines.for_each(|l| report::err(l));
            exit::NOT_RESTORED
        }
    }
}

//! A real terminal for REPL tests: the agent runs in a detached tmux
//! session on a private socket; tests type with `send-keys` and read the
//! screen with `capture-pane`. Every wait is bounded.

use std::process::Command;
use std::time::{Duration, Instant};

use super::Dirs;

/// How long a test waits for text to appear on the screen.
pub const SCREEN_TIMEOUT: Duration = Duration::from_secs(20);

/// One agent in one tmux session.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `agent ARGS` in the workspace with a clean environment.
    pub fn start(dirs: &Dirs, base_url: &str, args: &[&str], extra_env: &[(&str, &str)]) -> Tmux {
        Tmux::start_in(dirs, &dirs.workspace, base_url, args, extra_env)
    }

    /// Starts `agent ARGS` in `dir` (the workspace or a directory below
    /// it) with a clean environment.
    pub fn start_in(
        dirs: &Dirs,
        dir: &std::path::Path,
        base_url: &str,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> Tmux {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let socket = format!(
            "agent-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut env = vec![
            (
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            ),
            ("HOME".to_string(), dirs.home.display().to_string()),
            ("TERM".to_string(), "xterm-256color".to_string()),
            ("NO_COLOR".to_string(), "1".to_string()),
            ("AGENT_BASE_URL".to_string(), base_url.to_string()),
            ("AGENT_MODEL".to_string(), "mock-model".to_string()),
            (
                "AGENT_CONFIG_DIR".to_string(),
                dirs.config.display().to_string(),
            ),
            (
                "AGENT_DATA_DIR".to_string(),
                dirs.data.display().to_string(),
            ),
        ];
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let mut command = format!("cd {} && env -i", quote(&dir.display().to_string()));
        for (k, v) in &env {
            command.push_str(&format!(" {k}={}", quote(v)));
        }
        command.push(' ');
        command.push_str(&quote(env!("CARGO_BIN_EXE_agent")));
        for a in args {
            command.push(' ');
            command.push_str(&quote(a));
        }
        let status = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "150",
                "-y",
                "50",
            ])
            .arg(format!("{command}; echo __EXITED__$?; sleep 60"))
            .status()
            .expect("tmux runs (install it: apt-get install tmux)");
        assert!(status.success(), "tmux could not start");
        Tmux { socket }
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs")
    }

    /// Types literal text (no Enter).
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", text]);
    }

    /// Presses keys by tmux name: `Enter`, `C-c`, `C-d`, `Up`, `M-Enter`.
    pub fn press(&self, key: &str) {
        self.tmux(&["send-keys", "-t", "t", key]);
    }

    /// Types a line and presses Enter.
    pub fn line(&self, text: &str) {
        self.type_text(text);
        self.press("Enter");
    }

    /// Empties the scrollback (what scrolled off the visible screen).
    pub fn clear_history(&self) {
        self.tmux(&["clear-history", "-t", "t"]);
    }

    /// The screen, with some scrollback.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-t", "t", "-S", "-500"])
                .stdout,
        )
        .to_string()
    }

    /// Waits until the screen contains `needle` `count` times.
    pub async fn wait_for_n(&self, needle: &str, count: usize) -> String {
        let deadline = Instant::now() + SCREEN_TIMEOUT;
        loop {
            let screen = self.screen();
            if screen.matches(needle).count() >= count {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("{needle:?} did not appear {count} time(s) on the screen:\n{screen}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the screen contains `needle`.
    pub async fn wait_for(&self, needle: &str) -> String {
        self.wait_for_n(needle, 1).await
    }

    /// Waits until `anchor` is on the screen and a fresh prompt follows it:
    /// the line editor reads again, so a key pressed now (Ctrl+D) reaches
    /// it instead of the turn that printed `anchor`.
    pub async fn wait_for_prompt_after(&self, anchor: &str) -> String {
        let deadline = Instant::now() + SCREEN_TIMEOUT;
        loop {
            let screen = self.screen();
            if let Some((_, after)) = screen.rsplit_once(anchor)
                && after.lines().any(|l| l.starts_with('›'))
            {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("no prompt appeared after {anchor:?}:\n{screen}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

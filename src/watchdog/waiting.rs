//! Waiting is not looping. A shell command that waits (`sleep`, `until`,
//! `retry`...) gets the polling allowance, `poll_repeats`, instead of
//! `repeated_action`; so does a probe that fails soon after the agent
//! started something in the background (`cmd &`, `nohup`, `docker run
//! -d`...): a health check refused while the server boots. Both are set in
//! `watchdog.rhai` (`wait_words`, `start_words`, `wait_window`), and after
//! `wait_notice` identical polls the model gets back-off hints.

use super::mask::contains_word;
use super::settings::{Settings, on};
use super::{UserTurn, messages};

/// Whether a failing call (`failed_probe`: it failed and wrote nothing) is
/// waiting for something started in the background: within `wait_window`
/// turns of the start or of the last waiting probe. A call that starts
/// something is remembered here.
pub fn is_waiting(t: &mut UserTurn, s: &Settings, command: &str, failed_probe: bool) -> bool {
    if is_background_start(command, &s.start_words) {
        t.started_at = Some(t.turns);
        return false;
    }
    let waiting = failed_probe
        && on(s.wait_window)
        && t.started_at
            .is_some_and(|at| t.turns.saturating_sub(at) <= s.wait_window);
    if waiting {
        t.started_at = Some(t.turns);
    }
    waiting
}

/// The back-off note after `same` identical results of a waiting command,
/// once, at `wait_notice`.
pub fn wait_notice(s: &Settings, same: u32) -> Option<String> {
    (on(s.wait_notice) && same == s.wait_notice)
        .then(|| messages::wait_notice(same, s.poll_repeats))
}

/// Whether a shell command starts something in the background: one of
/// `words` appears in it, where `"&"` stands for the shell's background
/// operator (a lone `&`, not `&&`, `>&` or `&>`).
pub fn is_background_start(command: &str, words: &[String]) -> bool {
    let lower = command.to_lowercase();
    words.iter().any(|w| {
        if w == "&" {
            has_background_operator(command)
        } else {
            contains_word(&lower, &w.to_lowercase())
        }
    })
}

fn has_background_operator(command: &str) -> bool {
    let chars: Vec<char> = command.chars().collect();
    let mut quote: Option<char> = None;
    for (i, &c) in chars.iter().enumerate() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '&' => {
                let prev = i.checked_sub(1).map(|j| chars[j]);
                let next = chars.get(i + 1).copied();
                if prev != Some('&') && next != Some('&') && prev != Some('>') && next != Some('>')
                {
                    return true;
                }
            }
            None => {}
        }
    }
    false
}

/// Whether a shell command waits (polls): one of `words` appears in it as
/// a word.
pub fn is_wait(command: &str, words: &[String]) -> bool {
    command
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-')
        .any(|word| words.iter().any(|w| w == word))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        crate::watchdog::tests::settings()
    }

    #[test]
    fn background_starts_must_trip_and_foreground_must_not() {
        let words = settings().start_words;
        for c in [
            "npm run dev &",
            "nohup ./server > log 2>&1",
            "python -m http.server 8000 & sleep 1",
            "docker run -d -p 5432:5432 postgres",
            "systemctl start nginx",
        ] {
            assert!(is_background_start(c, &words), "{c}");
        }
        for c in [
            "make && ./run",
            "cargo test 2>&1 | tail",
            "echo '&' > amp.txt",
            "ls &> out.txt",
            "docker run --rm alpine true",
        ] {
            assert!(!is_background_start(c, &words), "{c}");
        }
    }

    #[test]
    fn waits_are_words() {
        let words = settings().wait_words;
        assert!(is_wait("sleep 5 && curl x", &words));
        assert!(is_wait("until curl -f x; do :; done", &words));
        assert!(!is_wait("cat sleeping.txt", &words));
    }

    #[test]
    fn the_back_off_note_comes_once() {
        let s = settings();
        assert!(wait_notice(&s, s.wait_notice - 1).is_none());
        let note = wait_notice(&s, s.wait_notice).unwrap();
        assert!(note.contains("Back off"), "{note}");
        assert!(wait_notice(&s, s.wait_notice + 1).is_none());
    }
}

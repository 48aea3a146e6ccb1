//! Outcome-level detectors: work that looks new call by call but goes
//! nowhere. Each is a small function with its threshold in
//! `watchdog.rhai`:
//!
//! - *wandering*: turns in a row that only read, without writing or
//!   changing anything (a review or an audit is allowed more);
//! - *flailing*: the same check failing the same way after each of several
//!   different edits;
//! - *runaway generation*: near-duplicate contents written to many files;
//! - *announcing*: the same announcement, without a call, turn after turn;
//! - *counter echoes*: calls that differ by a counter whose outputs differ
//!   only by that counter.
//!
//! The facts they compute (`counter_echo`, `same_failure_after_edits`,
//! `near_duplicates`, `quiet_turns`) are also in `is_progress`'s record.

use std::collections::HashSet;

use super::mask::{contains_word, hash_of, shape_key};
use super::settings::{Settings, on};
use super::{
    Announced, CallRecord, CheckStats, Fired, Generated, ShapeStats, TurnRecord, UserTurn,
    messages, snippet,
};
use crate::protocol::ToolStatus;

/// Files remembered for runaway generation per user turn; past this, the
/// oldest are forgotten so a huge scaffold costs bounded memory and time.
const MAX_GENERATED: usize = 256;

/// Updates a shape's last call and says whether this call is a counter
/// echo: another key of the same shape, a different outcome, but the
/// same outcome once the call's own numbers are masked in its output.
pub fn is_counter_echo(shape: &mut ShapeStats, key: &str, outcome: u64, echo: u64) -> bool {
    let is_echo = shape
        .last
        .as_ref()
        .is_some_and(|(k, o, e)| k != key && *o != outcome && *e == echo);
    shape.last = Some((key.to_string(), outcome, echo));
    is_echo
}

/// Counter echoes in a row: `?page=1` → `"page": 1`, `?page=2` →
/// `"page": 2`, the rest unchanged. Waits are never echoes.
pub fn counter_echo(
    shape: &mut ShapeStats,
    s: &Settings,
    key: &str,
    echo: bool,
    output: &str,
) -> Option<Fired> {
    shape.echoes = if echo { shape.echoes + 1 } else { 0 };
    (on(s.counter_echo) && shape.echoes >= s.counter_echo).then(|| {
        Fired::new(
            "counter_echo",
            messages::COUNTER_ECHO,
            format!(
                "{} calls shaped like {} in a row changed only the echoed counter: {}",
                shape.echoes + 1,
                snippet(&shape_key(key)),
                snippet(output)
            ),
        )
    })
}

/// Updates a failing check's streak: how many workspace states in a row it
/// failed the same way in. The same failure in the same state (no edit in
/// between) leaves the streak alone; that is `repeated_action`'s to judge.
pub fn check_streak(stats: &mut CheckStats, outcome: u64, state: &Option<String>) -> u32 {
    stats.streak = match &stats.last {
        Some((o, ws)) if *o == outcome && ws == state => stats.streak,
        Some((o, _)) if *o == outcome && state.is_some() => stats.streak + 1,
        _ => 1,
    };
    stats.last = Some((outcome, state.clone()));
    stats.streak
}

/// Flailing: the same check failed the same way after each of several
/// different edits; the edits do not move the outcome they aim at.
pub fn flailing(s: &Settings, streak: u32, key: &str, output: &str) -> Option<Fired> {
    (on(s.flailing) && streak >= s.flailing).then(|| {
        Fired::new(
            "flailing",
            messages::FLAILING,
            format!(
                "{} failed the same way after {} different edits: {}",
                snippet(key),
                streak - 1,
                snippet(output)
            ),
        )
    })
}

/// The lines of a text for near-duplicate tests: trimmed, whitespace
/// collapsed, digits as `#`, blank lines left out.
fn line_set(content: &str) -> HashSet<u64> {
    content
        .lines()
        .map(|l| {
            l.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .map(|c| if c.is_ascii_digit() { '#' } else { c })
                .collect::<String>()
        })
        .filter(|l| !l.is_empty())
        .map(|l| hash_of(&[&l]))
        .collect()
}

/// Line similarity of two files, in percent (Jaccard).
fn similarity(a: &HashSet<u64>, b: &HashSet<u64>) -> u32 {
    let union = a.union(b).count();
    if union == 0 {
        return 100;
    }
    (a.intersection(b).count() * 100 / union) as u32
}

/// Records a write's content and returns how many distinct files (this one
/// included) hold near-duplicates of it. Writes without a `content`, or
/// smaller than `generation_min_bytes`, count 0.
pub fn generation_cluster(generated: &mut Vec<Generated>, s: &Settings, call: &CallRecord) -> u32 {
    let (Some(path), Some(content)) = (
        call.input.get("path").and_then(|v| v.as_str()),
        call.input.get("content").and_then(|v| v.as_str()),
    ) else {
        return 0;
    };
    if call.status != ToolStatus::Ok || content.len() < s.generation_min_bytes as usize {
        return 0;
    }
    let lines = line_set(content);
    generated.retain(|g| g.path != path);
    let near = generated
        .iter()
        .filter(|g| similarity(&g.lines, &lines) >= s.near_duplicate_percent)
        .count() as u32;
    if generated.len() >= MAX_GENERATED {
        generated.remove(0);
    }
    generated.push(Generated {
        path: path.to_string(),
        lines,
    });
    near + 1
}

/// Runaway generation: near-duplicate contents written to many files.
pub fn runaway_generation(s: &Settings, near_duplicates: u32, call: &CallRecord) -> Option<Fired> {
    (on(s.runaway_generation) && near_duplicates >= s.runaway_generation).then(|| {
        let path = call
            .input
            .get("path")
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        Fired::new(
            "runaway_generation",
            messages::RUNAWAY_GENERATION,
            format!(
                "{near_duplicates} files with near-identical contents, the last {path} (at least {}% of their lines alike)",
                s.near_duplicate_percent
            ),
        )
    })
}

/// Wandering: many turns in a row that change nothing — only reading,
/// searching and running checks — without an answer. The threshold is
/// `wandering_review` when the person asked for reading (a review, an
/// audit). Waiting turns neither count nor reset.
pub fn wandering(
    t: &mut UserTurn,
    s: &Settings,
    record: &TurnRecord,
    changed_state: bool,
    only_waits: bool,
) -> Option<Fired> {
    if changed_state {
        t.quiet_turns = 0;
    } else if !record.calls.is_empty() && !only_waits {
        t.quiet_turns += 1;
    }
    let asked = t.asked.to_lowercase();
    let review = s.review_words.iter().any(|w| contains_word(&asked, w));
    let limit = if review {
        s.wandering_review
    } else {
        s.wandering
    };
    (on(limit) && t.quiet_turns >= limit).then(|| {
        Fired::new(
            "wandering",
            messages::WANDERING,
            format!(
                "{} turns in a row read or ran things without changing anything (allowed {limit}{})",
                t.quiet_turns,
                if review { " for a reading request" } else { "" }
            ),
        )
    })
}

/// Announcing: the same announcement of an action ("I'll now run the
/// tests") in model turns in a row that make no call. Counted across user
/// messages, since a text-only turn ends the loop: the person asking "go
/// on" and getting the same promise is the loop.
pub fn announcing(state: &mut Announced, s: &Settings, record: &TurnRecord) -> Option<Fired> {
    let text = record
        .text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let announces = s.announce_words.iter().any(|w| contains_word(&text, w));
    if !record.calls.is_empty() || text.is_empty() || !announces {
        *state = Announced::default();
        return None;
    }
    if state.text == text {
        state.times += 1;
    } else {
        *state = Announced { text, times: 1 };
    }
    (on(s.announcing) && state.times >= s.announcing).then(|| {
        Fired::new(
            "announcing",
            messages::ANNOUNCING,
            format!(
                "\"{}\" was said {} times in a row without a tool call",
                snippet(&record.text),
                state.times
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings() -> Settings {
        crate::watchdog::tests::settings()
    }

    fn call(command: &str, status: ToolStatus, output: &str) -> CallRecord {
        crate::watchdog::tests::shell_call(command, status, output)
    }

    #[test]
    fn counter_echoes_must_trip_and_real_pages_must_not() {
        let s = settings();
        let mut shape = ShapeStats::default();
        // Outcomes differ, echo outcomes agree.
        assert!(!is_counter_echo(&mut shape, "p1", 1, 9));
        let mut fired = None;
        for (i, key) in ["p2", "p3", "p4"].iter().enumerate() {
            let echo = is_counter_echo(&mut shape, key, 2 + i as u64, 9);
            assert!(echo);
            fired = counter_echo(&mut shape, &s, key, echo, "{\"page\":4}");
        }
        assert_eq!(fired.map(|f| f.rule), Some("counter_echo"));
        let mut pages = ShapeStats::default();
        for (i, key) in ["p1", "p2", "p3", "p4", "p5"].iter().enumerate() {
            let echo = is_counter_echo(&mut pages, key, i as u64, 100 + i as u64);
            assert!(!echo);
            assert!(counter_echo(&mut pages, &s, key, echo, "x").is_none());
        }
    }

    #[test]
    fn flailing_must_trip_after_edits_that_do_not_move_the_failure() {
        let s = settings();
        let mut check = CheckStats::default();
        let ws = |n: u32| Some(format!("w{n}"));
        assert_eq!(check_streak(&mut check, 7, &ws(0)), 1);
        assert_eq!(check_streak(&mut check, 7, &ws(0)), 1, "no edit between");
        assert_eq!(check_streak(&mut check, 7, &ws(1)), 2);
        assert_eq!(check_streak(&mut check, 7, &ws(2)), 3);
        assert!(flailing(&s, 3, "k", "o").is_none());
        assert_eq!(check_streak(&mut check, 7, &ws(3)), 4);
        assert_eq!(flailing(&s, 4, "k", "o").map(|f| f.rule), Some("flailing"));
        // A failure that moves starts over: the edits are working.
        let mut moving = CheckStats::default();
        for n in 0..6 {
            assert_eq!(check_streak(&mut moving, n as u64, &ws(n)), 1);
        }
    }

    fn write(path: &str, content: &str) -> CallRecord {
        CallRecord {
            name: "write_file".into(),
            input: json!({ "path": path, "content": content }),
            ..CallRecord::default()
        }
    }

    #[test]
    fn runaway_generation_must_trip_on_near_duplicates_only() {
        let s = settings();
        let body = |n: u32| {
            format!(
                "import unittest\n\nclass TestCase{n}(unittest.TestCase):\n    def test_it(self):\n        self.assertEqual(compute({n}), {n})\n\nif __name__ == '__main__':\n    unittest.main()\n"
            )
        };
        let mut generated = Vec::new();
        let counts: Vec<u32> = (1..=4)
            .map(|n| generation_cluster(&mut generated, &s, &write(&format!("t{n}.py"), &body(n))))
            .collect();
        assert_eq!(counts, [1, 2, 3, 4]);
        assert!(runaway_generation(&s, 4, &write("t4.py", "")).is_some());
        // Rewriting one file with small changes is not generation.
        let mut rewrites = Vec::new();
        for n in 1..=6 {
            assert_eq!(
                generation_cluster(&mut rewrites, &s, &write("main.py", &body(n))),
                1
            );
        }
        // Distinct modules are not near-duplicates.
        let mut modules = Vec::new();
        for (i, name) in ["parser", "lexer", "codegen", "optimizer", "linker"]
            .iter()
            .enumerate()
        {
            let content = format!(
                "//! The {name}.\npub struct {name}State {{ pub depth: usize }}\npub fn run_{name}(input: &str) -> Result<(), String> {{\n    let state = {name}State {{ depth: {i} }};\n    todo!(\"{name} over {{input}} at {{}}\", state.depth)\n}}\n"
            );
            assert_eq!(
                generation_cluster(&mut modules, &s, &write(&format!("{name}.rs"), &content)),
                1
            );
        }
    }

    #[test]
    fn wandering_must_trip_past_its_threshold_and_a_review_gets_more() {
        let s = settings();
        let record = TurnRecord {
            calls: vec![call("cat a", ToolStatus::Ok, "a")],
            ..TurnRecord::default()
        };
        let mut t = UserTurn::default();
        for _ in 0..s.wandering - 1 {
            assert!(wandering(&mut t, &s, &record, false, false).is_none());
        }
        assert!(
            wandering(&mut t, &s, &record, false, true).is_none(),
            "waits do not count"
        );
        assert_eq!(
            wandering(&mut t, &s, &record, false, false).map(|f| f.rule),
            Some("wandering")
        );
        assert!(wandering(&mut t, &s, &record, true, false).is_none());
        let mut review = UserTurn {
            asked: "Please review the auth module".into(),
            ..UserTurn::default()
        };
        for _ in 0..s.wandering_review - 1 {
            assert!(wandering(&mut review, &s, &record, false, false).is_none());
        }
        assert!(wandering(&mut review, &s, &record, false, false).is_some());
    }

    #[test]
    fn announcing_must_trip_on_the_same_promise_and_not_on_answers() {
        let s = settings();
        let promise = TurnRecord {
            text: "I'll now run the tests.".into(),
            ..TurnRecord::default()
        };
        let mut state = Announced::default();
        assert!(announcing(&mut state, &s, &promise).is_none());
        assert_eq!(
            announcing(&mut state, &s, &promise).map(|f| f.rule),
            Some("announcing")
        );
        // A call in between starts over.
        let acted = TurnRecord {
            calls: vec![call("cargo test", ToolStatus::Ok, "ok")],
            ..promise.clone()
        };
        assert!(announcing(&mut state, &s, &acted).is_none());
        assert!(announcing(&mut state, &s, &promise).is_none());
        // The same plain answer twice is an answer, not an announcement.
        let answer = TurnRecord {
            text: "The port is 8080.".into(),
            ..TurnRecord::default()
        };
        let mut state = Announced::default();
        assert!(announcing(&mut state, &s, &answer).is_none());
        assert!(announcing(&mut state, &s, &answer).is_none());
    }
}

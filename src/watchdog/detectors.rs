//! The call-level detectors: one function per runaway class. Each reads
//! the facts of the turn (and updates the counters it owns in
//! [`UserTurn`]) and returns what fired, if anything. [`after_call`] and
//! [`after_turn`] run them, and the outcome-level ones of
//! [`super::outcomes`], in a fixed order; [`super::Watchdog::observe`]
//! reports the first that fired.

use std::collections::{HashMap, HashSet};

use super::facts::{Observed, TurnSummary};
use super::settings::{Settings, on};
use super::{
    ActionStats, CallRecord, Fired, ShapeStats, TurnRecord, UserTurn, messages, outcomes, snippet,
    waiting,
};
use crate::watchdog::mask::{action_key, hash_of, shape_key};

/// The detectors of one call, in order. `first_in_response`: a duplicate
/// inside one response counts once as a repeat.
pub fn after_call(
    t: &mut UserTurn,
    s: &Settings,
    call: &CallRecord,
    seen: &Observed,
    progress: bool,
    first_in_response: bool,
) -> Vec<Fired> {
    let mut fired = Vec::new();
    if first_in_response {
        let stats = t.actions.entry(seen.key.clone()).or_default();
        stats.last_raw = Some(seen.raw);
        let outcome = (seen.outcome, seen.state.clone());
        let (key, output) = (&seen.key, &call.output);
        fired.extend(repeated_call(
            stats,
            s,
            key,
            outcome,
            seen.is_wait,
            progress,
            output,
        ));
        if seen.is_wait && !progress {
            t.notice = waiting::wait_notice(s, stats.same).or(t.notice.take());
        }
    }
    let shape = t.shapes.entry(seen.shape.clone()).or_default();
    let (key, output) = (&seen.key, &call.output);
    fired.extend(counter_args(
        shape,
        s,
        key,
        seen.outcome,
        seen.is_wait,
        progress,
        output,
    ));
    let echo = seen.counter_echo && !seen.is_wait;
    fired.extend(outcomes::counter_echo(shape, s, key, echo, output));
    if seen.failed && !seen.is_wait {
        fired.extend(same_error(&mut t.errors, s, call, key, &seen.masked));
    }
    fired.extend(outcomes::flailing(s, seen.streak, key, output));
    fired.extend(outcomes::runaway_generation(s, seen.near_duplicates, call));
    t.outputs_seen.insert(seen.outcome);
    t.sequence
        .push((hash_of(&[key, &seen.outcome.to_string()]), progress));
    fired
}

/// The detectors of a whole model turn, in order, after its calls.
pub fn after_turn(
    t: &mut UserTurn,
    s: &Settings,
    record: &TurnRecord,
    sum: &TurnSummary,
) -> Vec<Fired> {
    let mut fired = Vec::new();
    fired.extend(ping_pong(t, s));
    fired.extend(consecutive_errors(
        t,
        s,
        record,
        sum.all_failed,
        sum.only_waits,
    ));
    fired.extend(repeated_text(t, s, record, sum.progress, sum.only_waits));
    fired.extend(stagnation(t, s, record, sum.progress, sum.only_waits));
    fired.extend(outcomes::wandering(
        t,
        s,
        record,
        sum.changed_state,
        sum.only_waits,
    ));
    fired
}

/// Responses with neither text nor tool calls.
pub fn empty_response(t: &mut UserTurn, s: &Settings, record: &TurnRecord) -> Option<Fired> {
    if !(record.calls.is_empty() && record.text.trim().is_empty()) {
        return None;
    }
    t.empty_responses += 1;
    (on(s.empty_responses) && t.empty_responses >= s.empty_responses).then(|| {
        Fired::new(
            "empty_response",
            messages::EMPTY_RESPONSE,
            format!("{} empty response(s) in this turn", t.empty_responses),
        )
    })
}

/// The same call asked for many times inside one response.
pub fn duplicate_calls(s: &Settings, record: &TurnRecord) -> Option<Fired> {
    let mut in_response: HashMap<String, u32> = HashMap::new();
    for call in &record.calls {
        *in_response
            .entry(action_key(&call.name, &call.input))
            .or_default() += 1;
    }
    let (key, n) = in_response.into_iter().max_by_key(|(_, n)| *n)?;
    (on(s.duplicate_calls) && n >= s.duplicate_calls).then(|| {
        Fired::new(
            "duplicate_calls",
            messages::DUPLICATE_CALLS,
            format!("{} was asked for {n} times in one response", snippet(&key)),
        )
    })
}

/// The same call with the same outcome in the same workspace state, again
/// and again. Calls that wait get the polling allowance instead.
pub fn repeated_call(
    stats: &mut ActionStats,
    s: &Settings,
    key: &str,
    outcome_in_state: (u64, Option<String>),
    is_wait: bool,
    progress: bool,
    output: &str,
) -> Option<Fired> {
    let same_as_last = stats.last.as_ref() == Some(&outcome_in_state);
    stats.same = if same_as_last { stats.same + 1 } else { 1 };
    stats.last = Some(outcome_in_state);
    let (limit, message, rule) = if is_wait {
        (s.poll_repeats, messages::POLL_REPEATS, "poll_repeats")
    } else {
        (
            s.repeated_action,
            messages::REPEATED_ACTION,
            "repeated_action",
        )
    };
    (!progress && on(limit) && stats.same >= limit).then(|| {
        Fired::new(
            rule,
            message,
            format!(
                "{} ran {} times with the same result: {}",
                snippet(key),
                stats.same,
                snippet(output)
            ),
        )
    })
}

/// Calls that differ only by numbers, all with the same outcome. Waits
/// that differ only by a number (`sleep 2`, `sleep 4`...) are a back-off:
/// they get the polling allowance.
pub fn counter_args(
    shape: &mut ShapeStats,
    s: &Settings,
    key: &str,
    outcome: u64,
    is_wait: bool,
    progress: bool,
    output: &str,
) -> Option<Fired> {
    shape.keys.insert(key.to_string());
    shape.outcomes.insert(outcome);
    shape.stale = if progress { 0 } else { shape.stale + 1 };
    let (limit, message, rule) = if is_wait {
        (s.poll_repeats, messages::POLL_REPEATS, "poll_repeats")
    } else {
        (s.counter_args, messages::COUNTER_ARGS, "counter_args")
    };
    (on(limit) && shape.keys.len() >= 2 && shape.outcomes.len() == 1 && shape.stale >= limit).then(
        || {
            Fired::new(
                rule,
                message,
                format!(
                    "{} calls shaped like {} all gave: {}",
                    shape.stale,
                    snippet(&shape_key(key)),
                    snippet(output)
                ),
            )
        },
    )
}

/// The same (masked) error from calls with different arguments.
pub fn same_error(
    errors: &mut HashMap<u64, HashSet<String>>,
    s: &Settings,
    call: &CallRecord,
    key: &str,
    masked_output: &str,
) -> Option<Fired> {
    let keys = errors
        .entry(hash_of(&[&call.name, masked_output]))
        .or_default();
    keys.insert(key.to_string());
    (on(s.same_error) && keys.len() >= s.same_error as usize).then(|| {
        Fired::new(
            "same_error",
            messages::SAME_ERROR,
            format!(
                "{} different calls to {} failed with: {}",
                keys.len(),
                call.name,
                snippet(&call.output)
            ),
        )
    })
}

/// A B A B (or A B C A B C) with unchanged outcomes.
pub fn ping_pong(t: &UserTurn, s: &Settings) -> Option<Fired> {
    if !on(s.ping_pong) {
        return None;
    }
    let period = cycle_period(&t.sequence, s.ping_pong as usize)?;
    Some(Fired::new(
        "ping_pong",
        messages::PING_PONG,
        format!(
            "the last {} calls repeat a cycle of {period} calls with the same results",
            period * s.ping_pong as usize
        ),
    ))
}

/// Turns in a row where every call failed; turns that only waited do not
/// count (a poller's failures are expected).
pub fn consecutive_errors(
    t: &mut UserTurn,
    s: &Settings,
    record: &TurnRecord,
    all_failed: bool,
    only_waits: bool,
) -> Option<Fired> {
    t.error_turns = if all_failed && !only_waits {
        t.error_turns + 1
    } else {
        0
    };
    (on(s.consecutive_errors) && t.error_turns >= s.consecutive_errors).then(|| {
        let last = record
            .calls
            .last()
            .map(|c| snippet(&c.output))
            .unwrap_or_default();
        Fired::new(
            "consecutive_errors",
            messages::CONSECUTIVE_ERRORS,
            format!(
                "{} turns in a row failed; the last error: {last}",
                t.error_turns
            ),
        )
    })
}

/// The same assistant text in turns without progress. Saying "still
/// waiting" while polling is not a loop: waiting turns are left to
/// `poll_repeats`.
pub fn repeated_text(
    t: &mut UserTurn,
    s: &Settings,
    record: &TurnRecord,
    turn_progress: bool,
    only_waits: bool,
) -> Option<Fired> {
    let text = record.text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() || record.calls.is_empty() || turn_progress || only_waits {
        return None;
    }
    let n = t.texts.entry(text.clone()).or_default();
    *n += 1;
    (on(s.repeated_text) && *n >= s.repeated_text).then(|| {
        Fired::new(
            "repeated_text",
            messages::REPEATED_TEXT,
            format!("\"{}\" was written {n} times", snippet(&text)),
        )
    })
}

/// Turns in a row without progress (read-only wandering). Waiting turns
/// neither count nor reset; a final answer ends the turn anyway.
pub fn stagnation(
    t: &mut UserTurn,
    s: &Settings,
    record: &TurnRecord,
    turn_progress: bool,
    only_waits: bool,
) -> Option<Fired> {
    if turn_progress {
        t.no_progress_turns = 0;
    } else if !record.calls.is_empty() && !only_waits {
        t.no_progress_turns += 1;
    }
    (on(s.stagnation) && t.no_progress_turns >= s.stagnation).then(|| {
        Fired::new(
            "stagnation",
            messages::STAGNATION,
            format!(
                "{} turns without progress; the calls either failed or showed nothing new",
                t.no_progress_turns
            ),
        )
    })
}

/// The period (2 or 3) of a cycle repeated `cycles` times at the end of
/// `seq`, made of distinct calls none of which made progress.
pub fn cycle_period(seq: &[(u64, bool)], cycles: usize) -> Option<usize> {
    for period in 2..=3 {
        let need = period * cycles.max(2);
        if seq.len() < need {
            continue;
        }
        let tail = &seq[seq.len() - need..];
        let distinct: HashSet<u64> = tail[..period].iter().map(|(h, _)| *h).collect();
        if distinct.len() != period {
            continue;
        }
        let periodic = tail
            .iter()
            .enumerate()
            .all(|(i, (h, _))| *h == tail[i % period].0);
        let stale = tail[period..].iter().all(|(_, progress)| !progress);
        if periodic && stale {
            return Some(period);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolStatus;

    fn settings() -> Settings {
        crate::watchdog::tests::settings()
    }

    fn call(command: &str, status: ToolStatus, output: &str) -> CallRecord {
        crate::watchdog::tests::shell_call(command, status, output)
    }

    #[test]
    fn an_empty_response_fires_at_its_threshold() {
        let mut t = UserTurn::default();
        let empty = TurnRecord::default();
        assert!(empty_response(&mut t, &settings(), &empty).is_some());
        let text = TurnRecord {
            text: "hi".into(),
            ..TurnRecord::default()
        };
        assert!(empty_response(&mut UserTurn::default(), &settings(), &text).is_none());
    }

    #[test]
    fn duplicates_inside_one_response_fire_at_three() {
        let two = TurnRecord {
            calls: vec![call("ls", ToolStatus::Ok, "a"); 2],
            ..TurnRecord::default()
        };
        assert!(duplicate_calls(&settings(), &two).is_none());
        let three = TurnRecord {
            calls: vec![call("ls", ToolStatus::Ok, "a"); 3],
            ..TurnRecord::default()
        };
        let fired = duplicate_calls(&settings(), &three).unwrap();
        assert_eq!(fired.rule, "duplicate_calls");
    }

    #[test]
    fn a_repeat_fires_unless_it_made_progress_and_waits_get_room() {
        let s = settings();
        let mut stats = ActionStats::default();
        let same = (7, Some("w".to_string()));
        for _ in 0..2 {
            assert!(repeated_call(&mut stats, &s, "k", same.clone(), false, false, "o").is_none());
        }
        assert!(repeated_call(&mut stats, &s, "k", same.clone(), false, true, "o").is_none());
        let fired = repeated_call(&mut stats, &s, "k", same.clone(), false, false, "o").unwrap();
        assert_eq!(fired.rule, "repeated_action");
        // A new outcome starts the count over.
        assert!(repeated_call(&mut stats, &s, "k", (8, None), false, false, "o").is_none());
        let mut waits = ActionStats::default();
        for _ in 0..s.poll_repeats - 1 {
            assert!(repeated_call(&mut waits, &s, "k", same.clone(), true, false, "o").is_none());
        }
        let fired = repeated_call(&mut waits, &s, "k", same, true, false, "o").unwrap();
        assert_eq!(fired.rule, "poll_repeats");
    }

    #[test]
    fn counters_need_two_keys_one_outcome_and_no_progress() {
        let s = settings();
        let mut shape = ShapeStats::default();
        assert!(counter_args(&mut shape, &s, "a1", 1, false, false, "x").is_none());
        assert!(counter_args(&mut shape, &s, "a2", 1, false, false, "x").is_none());
        assert!(counter_args(&mut shape, &s, "a3", 1, false, false, "x").is_some());
        let mut varied = ShapeStats::default();
        for (i, key) in ["b1", "b2", "b3", "b4"].iter().enumerate() {
            assert!(counter_args(&mut varied, &s, key, i as u64, false, false, "x").is_none());
        }
    }

    #[test]
    fn the_same_error_from_different_arguments() {
        let s = settings();
        let mut errors = HashMap::new();
        let failed = call("x", ToolStatus::Failed, "boom");
        assert!(same_error(&mut errors, &s, &failed, "k1", "boom").is_none());
        assert!(same_error(&mut errors, &s, &failed, "k1", "boom").is_none());
        assert!(same_error(&mut errors, &s, &failed, "k2", "boom").is_none());
        assert!(same_error(&mut errors, &s, &failed, "k3", "boom").is_some());
    }

    #[test]
    fn cycles_of_two_and_three_without_progress() {
        let stale = |ids: &[u64]| ids.iter().map(|&h| (h, false)).collect::<Vec<_>>();
        assert_eq!(cycle_period(&stale(&[1, 2, 1, 2]), 2), Some(2));
        assert_eq!(cycle_period(&stale(&[1, 2, 3, 1, 2, 3]), 2), Some(3));
        assert_eq!(cycle_period(&stale(&[1, 1, 1, 1]), 2), None);
        let mut moving = stale(&[1, 2, 1, 2]);
        moving[3].1 = true;
        assert_eq!(cycle_period(&moving, 2), None);
        let mut t = UserTurn {
            sequence: stale(&[5, 6, 5, 6]),
            ..UserTurn::default()
        };
        assert!(ping_pong(&t, &settings()).is_some());
        t.sequence.pop();
        assert!(ping_pong(&t, &settings()).is_none());
    }

    #[test]
    fn error_turns_count_unless_only_waiting() {
        let s = settings();
        let mut t = UserTurn::default();
        let record = TurnRecord {
            calls: vec![call("make", ToolStatus::Failed, "err")],
            ..TurnRecord::default()
        };
        assert!(consecutive_errors(&mut t, &s, &record, true, false).is_none());
        assert!(consecutive_errors(&mut t, &s, &record, true, true).is_none());
        assert_eq!(t.error_turns, 0, "a waiting turn resets the count");
        for _ in 0..2 {
            assert!(consecutive_errors(&mut t, &s, &record, true, false).is_none());
        }
        assert!(consecutive_errors(&mut t, &s, &record, true, false).is_some());
    }

    #[test]
    fn narration_and_stagnation() {
        let s = settings();
        let record = TurnRecord {
            text: "Let me  look again".into(),
            calls: vec![call("ls", ToolStatus::Ok, "a")],
            ..TurnRecord::default()
        };
        let mut t = UserTurn::default();
        assert!(repeated_text(&mut t, &s, &record, false, false).is_none());
        assert!(repeated_text(&mut t, &s, &record, true, false).is_none());
        assert!(repeated_text(&mut t, &s, &record, false, false).is_none());
        assert!(repeated_text(&mut t, &s, &record, false, false).is_some());

        let mut t = UserTurn::default();
        for _ in 0..s.stagnation - 1 {
            assert!(stagnation(&mut t, &s, &record, false, false).is_none());
        }
        assert!(stagnation(&mut t, &s, &record, false, true).is_none());
        assert!(stagnation(&mut t, &s, &record, false, false).is_some());
        assert!(stagnation(&mut t, &s, &record, true, false).is_none());
        assert_eq!(t.no_progress_turns, 0);
    }
}

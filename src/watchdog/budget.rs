//! The soft budget of model turns per user message: renewed while the
//! agent makes progress, up to the hard cap (a cost guard for long tasks,
//! which the person can raise for one turn); a notice to the model, saying
//! how much is left, when little is; a stop with one tool-less summary turn
//! when it runs out.

use super::settings::Settings;
use super::{Budget, StopInfo, TurnRecord, UserTurn, Verdict, messages};

/// The verdict for a turn no detector fired on.
pub fn after_turn(
    t: &mut UserTurn,
    s: &Settings,
    record: &TurnRecord,
    turn_progress: bool,
) -> Verdict {
    let used = t.turns;
    let hard_cap = t.hard_cap(s);
    if turn_progress && used + s.renew_when_left >= t.budget && t.budget < hard_cap {
        t.budget = t.budget.saturating_add(s.base_budget).min(hard_cap);
    }
    let budget = Budget {
        used,
        limit: t.budget,
    };
    if used >= t.budget && !record.calls.is_empty() {
        t.stopped = true;
        let (rule, message) = if t.budget >= hard_cap {
            ("hard_cap", messages::HARD_CAP)
        } else {
            ("max_steps", messages::MAX_STEPS)
        };
        let limit = t.budget;
        return Verdict::Stop {
            budget,
            reason: format!("{rule}: {message} ({used} of {limit} turns)"),
            stop: StopInfo {
                rule,
                message: message.to_string(),
                evidence: format!("{used} of {limit} turns used"),
                turns_used: used,
                budget: limit,
                hard_cap,
                request: t.request.clone(),
                last_result: t.last_result.clone(),
            },
            summarise: true,
        };
    }
    let left = t.budget - used;
    if !record.calls.is_empty() && left <= s.notice_when_left {
        return Verdict::Notice {
            budget,
            text: budget_notice(left, t.budget, hard_cap, used),
        };
    }
    Verdict::Continue { budget }
}

/// The note the model sees near the end of its budget: what is left of
/// this budget and of the hard cap.
pub fn budget_notice(left: u32, budget: u32, hard_cap: u32, used: u32) -> String {
    let cap_left = hard_cap.saturating_sub(used);
    if budget >= hard_cap {
        format!(
            "[agent watchdog] {left} of {hard_cap} turns left: this is the hard cap for this request. Finish the task or summarise where you are."
        )
    } else {
        format!(
            "[agent watchdog] {left} turns left in this budget ({used} of {budget} used); up to {cap_left} more before the hard cap of {hard_cap}. The budget is renewed only while you make progress; finish the task or summarise where you are."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchdog::{CallRecord, VerdictKind};

    fn with_call() -> TurnRecord {
        TurnRecord {
            calls: vec![CallRecord::default()],
            ..TurnRecord::default()
        }
    }

    #[test]
    fn the_budget_renews_on_progress_up_to_the_cap() {
        let s = crate::watchdog::tests::settings();
        let mut t = UserTurn {
            budget: s.base_budget,
            ..UserTurn::default()
        };
        let mut last = VerdictKind::Continue;
        for _ in 0..s.hard_cap() {
            t.turns += 1;
            last = after_turn(&mut t, &s, &with_call(), true).kind();
        }
        assert_eq!(t.budget, s.hard_cap());
        assert_eq!(last, VerdictKind::Stop);
    }

    #[test]
    fn without_progress_a_notice_then_a_stop_with_a_summary() {
        let s = crate::watchdog::tests::settings();
        let mut t = UserTurn {
            budget: s.base_budget,
            ..UserTurn::default()
        };
        let mut kinds = Vec::new();
        let mut summarise = false;
        for _ in 0..s.base_budget {
            t.turns += 1;
            let v = after_turn(&mut t, &s, &with_call(), false);
            if let Verdict::Stop { summarise: sum, .. } = &v {
                summarise = *sum;
            }
            kinds.push(v.kind());
        }
        assert_eq!(kinds.last(), Some(&VerdictKind::Stop));
        assert!(summarise);
        assert!(kinds.contains(&VerdictKind::Notice));
        assert_eq!(t.budget, s.base_budget);
    }

    #[test]
    fn the_notice_says_how_much_is_left_and_the_person_can_raise_the_cap() {
        let text = budget_notice(2, 12, 48, 10);
        assert!(text.contains("2 turns left"), "{text}");
        assert!(text.contains("38 more before the hard cap of 48"), "{text}");
        assert!(budget_notice(1, 48, 48, 47).contains("hard cap"));

        let s = crate::watchdog::tests::settings();
        let mut t = UserTurn {
            budget: s.base_budget,
            extra_cap: 20,
            ..UserTurn::default()
        };
        for _ in 0..s.hard_cap() + 20 {
            t.turns += 1;
            let v = after_turn(&mut t, &s, &with_call(), true);
            if t.turns < s.hard_cap() + 20 {
                assert_ne!(v.kind(), VerdictKind::Stop, "turn {}", t.turns);
            } else {
                assert_eq!(v.kind(), VerdictKind::Stop);
            }
        }
        assert_eq!(t.budget, s.hard_cap() + 20);
    }
}

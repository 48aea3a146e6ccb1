//! Stable keys for calls and volatile-token masking for outputs.
//!
//! Two calls are "the same action" when their tool names match and their
//! arguments are equal after key-sorting ([`stable_json`]). Two outputs are
//! "the same outcome" when they are equal after masking what changes from
//! run to run without meaning anything: timestamps (dates, clock times,
//! epoch seconds), durations, pids, hex addresses, hex ids, UUIDs, temp
//! paths and the port of an "address in use" error ([`mask_volatile`]).
//! Plain numbers stay — counts, percentages, step counters, line counts —
//! so "3 failed" and "1 failed" differ. Because masking also hides a
//! clock that a poll is watching, the watchdog compares the raw output too
//! ([`is_small`] says when a raw change counts). An output "says nothing"
//! when all it holds is a tool's placeholder for emptiness and the shell's
//! exit-code line ([`says_nothing`]).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::tools::builtin::messages;

/// JSON text with object keys sorted at every level, so `{a,b}` and
/// `{b,a}` give the same key.
pub fn stable_json(value: &Value) -> String {
    let mut out = String::new();
    write_stable(value, &mut out);
    out
}

fn write_stable(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                write_stable(&map[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_stable(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A deterministic 64-bit hash (SipHash with fixed keys).
pub fn hash_of(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// The action key of a call: tool name plus key-sorted arguments.
pub fn action_key(name: &str, input: &Value) -> String {
    format!("{name}:{}", stable_json(input))
}

/// A pattern compiled with ASCII classes (`\d`, `\b`, `\s`, `(?i)` are
/// ASCII only), or with Unicode ones where the pattern needs them (a class
/// like `[^ /]` could match half a character otherwise). Unicode classes
/// cost: the masks below took 2.9 ms and 1.7 MB to compile with them, and
/// 1.8 ms and 0.6 MB without (measured), paid by every one-shot task.
fn ascii_regex(pattern: &str) -> Option<Regex> {
    regex::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
        .or_else(|_| Regex::new(pattern))
        .ok()
}

static DIGITS: LazyLock<Option<Regex>> = LazyLock::new(|| ascii_regex(r"\d+"));

/// The action key with every run of digits replaced by `#`, so calls that
/// differ only by a counter (`--retry=1`, `--retry=2`) share a shape.
pub fn shape_key(key: &str) -> String {
    match DIGITS.as_ref() {
        Some(re) => re.replace_all(key, "#").into_owned(),
        None => key.to_string(),
    }
}

/// The patterns masked before outputs are compared, in order.
static VOLATILE: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
            "<uuid>",
        ),
        (
            r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?",
            "<time>",
        ),
        (r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b", "<time>"),
        // Epoch seconds (2017-2033), with optional ms/µs/ns digits.
        (r"\b1[5-9]\d{8}(\d{3}|\d{6}|\d{9})?\b", "<epoch>"),
        (r"\b0x[0-9a-fA-F]+\b", "<hex>"),
        (r"\b\d+m\d+(\.\d+)?s\b", "<duration>"),
        (
            r"\b\d+(\.\d+)?\s?(ns|µs|us|ms|s|sec|secs|seconds?|mins?|minutes?|h)\b",
            "<duration>",
        ),
        (r"(?i)\b(pid|process)\s*[:=#]?\s*\d+", "$1 <pid>"),
        // A shell's job line for `cmd &`: `[1] 12345`.
        (r"(?m)^\[\d+\]\s+\d+\s*$", "[<n>] <pid>"),
        (r"\[\d+\]", "[<n>]"),
        (r"/tmp/[^\s/]+", "/tmp/<tmp>"),
        (r"/var/folders/\S+", "<tmp>"),
        (r"\btmp[._-][A-Za-z0-9]{6,}\b", "<tmp>"),
    ]
    .into_iter()
    .filter_map(|(pattern, with)| ascii_regex(pattern).map(|re| (re, with)))
    .collect()
});

/// Hex ids (git hashes, container ids): runs of 7 to 64 hex digits. Only
/// runs with both a letter and a digit are masked, so a long plain number
/// (a byte count, a counter) keeps its meaning.
static HEX_ID: LazyLock<Option<Regex>> = LazyLock::new(|| ascii_regex(r"\b[0-9a-f]{7,64}\b"));

/// A port in a line that says an address is taken.
static PORT: LazyLock<Option<Regex>> = LazyLock::new(|| ascii_regex(r"(?i)(:|port\s*)\d{2,5}\b"));

/// What marks a line as an "address in use" error.
const IN_USE_MARKS: [&str; 3] = ["in use", "eaddrinuse", "could not bind"];

/// The output with volatile tokens replaced by placeholders.
pub fn mask_volatile(text: &str) -> String {
    let mut out = text.trim().to_string();
    for (re, with) in VOLATILE.iter() {
        if re.is_match(&out) {
            out = re.replace_all(&out, *with).into_owned();
        }
    }
    if let Some(re) = HEX_ID.as_ref() {
        out = re
            .replace_all(&out, |c: &regex::Captures<'_>| {
                let id = &c[0];
                let letter = id.bytes().any(|b| b.is_ascii_alphabetic());
                let digit = id.bytes().any(|b| b.is_ascii_digit());
                if letter && digit {
                    "<hash>".to_string()
                } else {
                    id.to_string()
                }
            })
            .into_owned();
    }
    if let Some(re) = PORT.as_ref() {
        let lower = out.to_lowercase();
        if IN_USE_MARKS.iter().any(|m| lower.contains(m)) {
            out = out
                .lines()
                .map(|line| {
                    let l = line.to_lowercase();
                    if IN_USE_MARKS.iter().any(|m| l.contains(m)) {
                        re.replace_all(line, "${1}<port>").into_owned()
                    } else {
                        line.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
        }
    }
    out
}

/// The output without the shell's trailing `[exit code: N]` line.
pub fn without_exit_line(output: &str, exit_code: Option<i32>) -> &str {
    let text = output.trim();
    match exit_code {
        Some(code) => text
            .strip_suffix(messages::shell_exit_code(code).as_str())
            .map(str::trim_end)
            .unwrap_or(text),
        None => text,
    }
}

/// Whether an output is small and structured enough that any raw change
/// in it is news to a poll: at most `lines` lines and `bytes` bytes once
/// the exit-code line is set aside (a clock, a counter, a status line).
pub fn is_small(output: &str, exit_code: Option<i32>, lines: u32, bytes: u32) -> bool {
    let text = without_exit_line(output, exit_code);
    text.len() <= bytes as usize && text.lines().count() <= lines as usize
}

/// The outcome of a call with the numbers of its own arguments masked in
/// its output: equal for two calls when the only difference between their
/// outputs is the counter they were given (`?page=2` → `"page": 2`).
pub fn echo_outcome(key: &str, status: &str, exit: &str, masked_output: &str) -> u64 {
    let Some(digits) = DIGITS.as_ref() else {
        return hash_of(&[status, exit, masked_output]);
    };
    let numbers: std::collections::HashSet<&str> =
        digits.find_iter(key).map(|m| m.as_str()).collect();
    let echoed = digits.replace_all(masked_output, |c: &regex::Captures<'_>| {
        if numbers.contains(&c[0]) {
            "#".to_string()
        } else {
            c[0].to_string()
        }
    });
    hash_of(&[status, exit, &echoed])
}

/// `phrase` in `text` at word boundaries.
pub fn contains_word(text: &str, phrase: &str) -> bool {
    if phrase.is_empty() {
        return false;
    }
    text.match_indices(phrase).any(|(i, _)| {
        let before = text.get(..i).and_then(|t| t.chars().next_back());
        let after = text.get(i + phrase.len()..).and_then(|t| t.chars().next());
        let edge = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_');
        edge(before) && edge(after)
    })
}

/// What the built-in tools print in place of an empty result.
const EMPTY_PLACEHOLDERS: [&str; 3] = [
    messages::SHELL_NO_OUTPUT,
    messages::READ_EMPTY_FILE,
    messages::LIST_EMPTY_DIR,
];

/// Whether an output carries nothing: it is blank, or a placeholder such as
/// `(no output)`, once the shell's `[exit code: N]` line is set aside. The
/// shell always prints that line, so without this a command that found
/// nothing would look like it showed something.
pub fn says_nothing(output: &str, exit_code: Option<i32>) -> bool {
    let text = without_exit_line(output, exit_code);
    text.is_empty() || EMPTY_PLACEHOLDERS.contains(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mask_compiles() {
        assert_eq!(VOLATILE.len(), 13, "a volatile pattern did not compile");
        assert!(DIGITS.is_some() && HEX_ID.is_some() && PORT.is_some());
        assert_eq!(mask_volatile("took 1.5µs"), "took <duration>");
    }
    use serde_json::json;

    #[test]
    fn keys_ignore_argument_order() {
        let a = action_key(
            "x",
            &json!({"b": 1, "a": {"d": [1, {"z": 0, "y": 1}], "c": 2}}),
        );
        let b = action_key(
            "x",
            &json!({"a": {"c": 2, "d": [1, {"y": 1, "z": 0}]}, "b": 1}),
        );
        assert_eq!(a, b);
        assert_eq!(
            shape_key("run:{\"command\":\"npm test --retry=12\"}"),
            "run:{\"command\":\"npm test --retry=#\"}"
        );
    }

    #[test]
    fn volatile_tokens_are_masked_but_counts_stay() {
        let a = mask_volatile(
            "2026-12-02T10:00:01Z build 12:00:01 took 1.52s pid 4242 at 0x7ffd1234 id 3f2a9c1b7e4d5a6b",
        );
        let b = mask_volatile(
            "2026-12-03T11:30:59Z build 13:01:02 took 0.9 s pid 17 at 0xdeadbeef id a1b2c3d4e5f60718",
        );
        assert_eq!(a, b);
        assert_ne!(
            mask_volatile("3 passed; 1 failed"),
            mask_volatile("4 passed; 0 failed")
        );
    }

    #[test]
    fn meaning_stays_and_volatile_tokens_go() {
        // Counts, percentages, step counters and line counts stay.
        for (a, b) in [
            ("3 failed", "1 failed"),
            ("[build] 40%", "[build] 63%"),
            ("epoch 3/10 loss 0.41", "epoch 4/10 loss 0.38"),
            ("  120 src/main.rs", "  121 src/main.rs"),
            ("total bytes 123456789012", "total bytes 123456789013"),
        ] {
            assert_ne!(mask_volatile(a), mask_volatile(b), "{a} / {b}");
        }
        // Clocks, ids, job lines, temp paths and taken ports go.
        for (a, b) in [
            ("1764672000123456789", "1764672000987654321"),
            ("1764672000", "1764672042"),
            ("[1] 4242", "[1] 977"),
            ("commit 3f2a9c1", "commit 77be0d2"),
            ("wrote /tmp/tmp.Xa81kQ/out", "wrote /tmp/tmp.Q0pzz1/out"),
            (
                "Error: listen EADDRINUSE: address already in use :::3000",
                "Error: listen EADDRINUSE: address already in use :::3001",
            ),
            ("took 1m3.2s", "took 0m58.1s"),
        ] {
            assert_eq!(mask_volatile(a), mask_volatile(b), "{a} / {b}");
        }
        // A plain word of hex letters is not an id.
        assert_eq!(mask_volatile("defaced"), "defaced");
    }

    #[test]
    fn small_outputs_and_counter_echoes() {
        assert!(is_small(
            "1764672000123456789\n[exit code: 0]",
            Some(0),
            2,
            120
        ));
        assert!(!is_small("a\nb\nc\n[exit code: 0]", Some(0), 2, 120));
        assert!(!is_small(&"x".repeat(121), None, 2, 120));
        let k1 = "run_shell:{\"command\":\"curl ?page=1\"}";
        let k2 = "run_shell:{\"command\":\"curl ?page=2\"}";
        assert_eq!(
            echo_outcome(k1, "ok", "0", "{\"page\":1,\"items\":[]}"),
            echo_outcome(k2, "ok", "0", "{\"page\":2,\"items\":[]}")
        );
        assert_ne!(
            echo_outcome(k1, "ok", "0", "{\"page\":1,\"items\":[7]}"),
            echo_outcome(k2, "ok", "0", "{\"page\":2,\"items\":[9]}")
        );
    }

    #[test]
    fn placeholders_and_the_exit_code_line_say_nothing() {
        assert!(says_nothing("", None));
        assert!(says_nothing("(no output)\n[exit code: 0]", Some(0)));
        assert!(says_nothing("  (no output)\n[exit code: 1]\n", Some(1)));
        assert!(says_nothing("(empty file)", None));
        assert!(says_nothing("(empty directory)", None));
        assert!(!says_nothing("[]\n[exit code: 0]", Some(0)));
        assert!(!says_nothing("(no output)\n[exit code: 0]", Some(1)));
        assert!(!says_nothing("src/main.rs\n[exit code: 0]", Some(0)));
    }
}

//! Stable keys for calls and volatile-token masking for outputs.
//!
//! Two calls are "the same action" when their tool names match and their
//! arguments are equal after key-sorting ([`stable_json`]). Two outputs are
//! "the same outcome" when they are equal after masking what changes from
//! run to run without meaning anything: timestamps, durations, pids, hex
//! addresses, long hashes, UUIDs and temp paths ([`mask_volatile`]). Plain
//! numbers stay, so "3 passed" and "4 passed" differ. An output "says
//! nothing" when all it holds is a tool's placeholder for emptiness and the
//! shell's exit-code line ([`says_nothing`]).

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

static DIGITS: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\d+").ok());

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
        (r"\b0x[0-9a-fA-F]+\b", "<hex>"),
        (r"\b[0-9a-f]{12,64}\b", "<hash>"),
        (
            r"\b\d+(\.\d+)?\s?(ns|µs|us|ms|s|sec|secs|seconds?|mins?|minutes?|h)\b",
            "<duration>",
        ),
        (r"(?i)\b(pid|process)\s*[:=#]?\s*\d+", "$1 <pid>"),
        (r"\[\d+\]", "[<n>]"),
        (r"/tmp/[^\s/]+", "/tmp/<tmp>"),
    ]
    .into_iter()
    .filter_map(|(pattern, with)| Regex::new(pattern).ok().map(|re| (re, with)))
    .collect()
});

/// The output with volatile tokens replaced by placeholders.
pub fn mask_volatile(text: &str) -> String {
    let mut out = text.trim().to_string();
    for (re, with) in VOLATILE.iter() {
        if re.is_match(&out) {
            out = re.replace_all(&out, *with).into_owned();
        }
    }
    out
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
    let mut text = output.trim();
    if let Some(code) = exit_code {
        let status = messages::shell_exit_code(code);
        if let Some(rest) = text.strip_suffix(status.as_str()) {
            text = rest.trim_end();
        }
    }
    text.is_empty() || EMPTY_PLACEHOLDERS.contains(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            "2026-12-03T11:30:59Z build 13:01:02 took 0.9 s pid 17 at 0xdeadbeef id 0011223344556677",
        );
        assert_eq!(a, b);
        assert_ne!(
            mask_volatile("3 passed; 1 failed"),
            mask_volatile("4 passed; 0 failed")
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

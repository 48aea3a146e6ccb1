//! Bounds on what one model response may hold, and the texts that say a
//! bound was hit.
//!
//! A server is not trusted to stop: it may stream forever, send one line
//! without end, or put megabytes into one tool call's arguments. The caps
//! here keep the agent's memory bounded whatever it sends; the timeouts
//! live beside the others in [`super`]. Each cap is a setting in the
//! `client` map of `models.rhai`, and every text names the setting to raise.

use super::ApiError;

/// The most one response may hold: answer text, reasoning and tool calls
/// (names, ids, arguments) together. A long real answer is tens of KB and
/// a large file written by a tool call a few hundred; 4 MB is well past
/// both, and bounds an endless stream long before memory matters.
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// The most one tool call's arguments may hold. A whole source file written
/// in one call fits many times over; a bigger call is refused (it would be
/// re-sent with every later request) and the model is told to split it.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 1 << 20;

/// The SSE line cap as a multiple of the response cap: a server that sends
/// a whole answer in one `data:` line JSON-escapes it, which for text at
/// most about doubles it. Reading one line costs about three times its
/// size at its peak (the line, its data, the parsed text), so a larger
/// factor would cost memory for no real server: at the 4 MB default, an
/// 8 MB line peaks the agent at about 41 MB (measured in tests/client.rs).
pub const LINE_CAP_FACTOR: usize = 2;

/// The smallest line cap, whatever the response cap: a real chunk is a few
/// hundred bytes of JSON around its text, so lowering the response cap must
/// not make ordinary chunks too long.
pub const MIN_LINE_BYTES: usize = 64 << 10;

/// What a new tool call costs against the response cap, so that a stream
/// of empty calls cannot grow the agent without bound either (about the
/// memory an empty call holds).
pub const CALL_COST: usize = 128;

/// The caps one response is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// See [`MAX_RESPONSE_BYTES`].
    pub max_response_bytes: usize,
    /// See [`MAX_TOOL_ARGUMENT_BYTES`].
    pub max_tool_argument_bytes: usize,
    /// See [`super::repetition::MAX_BLANK_RUN`]; 0 is off.
    pub max_blank_run: usize,
    /// See [`super::repetition::MAX_REPEATED_RUN`]; 0 is off.
    pub max_repeated_run: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_response_bytes: MAX_RESPONSE_BYTES,
            max_tool_argument_bytes: MAX_TOOL_ARGUMENT_BYTES,
            max_blank_run: super::repetition::MAX_BLANK_RUN,
            max_repeated_run: super::repetition::MAX_REPEATED_RUN,
        }
    }
}

impl Limits {
    /// The longest SSE line (and the largest non-streamed JSON body) read.
    pub fn line_cap(&self) -> usize {
        self.max_response_bytes
            .saturating_mul(LINE_CAP_FACTOR)
            .max(MIN_LINE_BYTES)
    }
}

/// A tool call whose arguments passed [`Limits::max_tool_argument_bytes`]:
/// they were not kept, and the call must be answered with
/// [`argument_too_large`] instead of running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OversizedCall {
    pub id: String,
    pub name: String,
    /// The size of the arguments the server sent.
    pub bytes: usize,
    /// The cap they passed.
    pub cap: usize,
}

/// What stands in the history for arguments that were too large: valid
/// JSON (servers re-read it with every request) and a few dozen bytes.
pub fn omitted_arguments(bytes: usize, cap: usize) -> String {
    serde_json::json!({
        "omitted": format!("{bytes} bytes of arguments, over the {cap}-byte limit; not kept")
    })
    .to_string()
}

/// The model-facing answer to a call whose arguments were too large.
pub fn argument_too_large(name: &str, bytes: usize, cap: usize) -> String {
    format!(
        "Error: the arguments of this `{name}` call are {} ({bytes} bytes), over the limit of {} for one tool call, so it was not run and its arguments were not kept. Make the same change in smaller calls: split the content over several calls (for example write the first part of a file, then append the rest), or generate it with a command.",
        format_bytes(bytes),
        format_bytes(cap)
    )
}

/// What the history keeps after a partial answer that a bound cut off, so
/// the model knows its answer did not arrive whole. `None` for errors that
/// leave nothing worth keeping.
pub fn cut_note(error: &ApiError) -> Option<String> {
    match error {
        ApiError::ResponseTooLarge { cap } => Some(format!(
            "\n\n[agent: this answer was cut off here: it passed {}, the most one response may hold. Give shorter answers and make large changes in several smaller steps.]",
            format_bytes(*cap)
        )),
        ApiError::TimedOut { limit } => Some(format!(
            "\n\n[agent: this answer was cut off here: the request ran past its time limit of {}.]",
            super::format_delay(*limit)
        )),
        _ => None,
    }
}

/// What the history keeps after an answer cut because it stopped saying
/// anything (see [`super::repetition`]), so the model learns of it.
pub fn repetition_note(what: &str) -> String {
    format!(
        "\n\n[agent: this answer was cut off here: it had become {what}. Do not pad or repeat; answer briefly, or make the tool call.]"
    )
}

/// The notice for the person when an answer was cut that way.
pub fn repetition_notice(what: &str) -> String {
    format!(
        "the model's answer was cut: it had become {what} (max_blank_run / max_repeated_run in the client map of models.rhai); the text before it is kept"
    )
}

/// A byte count for people: `512 bytes`, `64 KB`, `4 MB`, `1.5 MB`.
pub fn format_bytes(n: usize) -> String {
    const KB: usize = 1 << 10;
    const MB: usize = 1 << 20;
    let (unit, size) = match n {
        n if n >= MB => ("MB", MB),
        n if n >= KB => ("KB", KB),
        _ => return format!("{n} bytes"),
    };
    if n % size == 0 {
        format!("{} {unit}", n / size)
    } else {
        format!("{:.1} {unit}", n as f64 / size as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(format_bytes(512), "512 bytes");
        assert_eq!(format_bytes(64 << 10), "64 KB");
        assert_eq!(format_bytes(MAX_RESPONSE_BYTES), "4 MB");
        assert_eq!(format_bytes(3 << 19), "1.5 MB");
    }

    #[test]
    fn the_line_cap_follows_the_response_cap_with_a_floor() {
        assert_eq!(Limits::default().line_cap(), 8 << 20);
        let small = Limits {
            max_response_bytes: 100,
            ..Limits::default()
        };
        assert_eq!(small.line_cap(), MIN_LINE_BYTES);
    }

    #[test]
    fn the_placeholder_is_small_valid_json() {
        let p = omitted_arguments(52_428_800, MAX_TOOL_ARGUMENT_BYTES);
        let v: serde_json::Value = serde_json::from_str(&p).unwrap();
        assert!(v.is_object() && p.len() < 100, "{p}");
        assert!(p.contains("52428800"), "{p}");
    }

    #[test]
    fn the_refusal_names_the_tool_the_sizes_and_what_to_do() {
        let text = argument_too_large("write_file", 5 << 20, 1 << 20);
        assert!(text.starts_with("Error:"), "{text}");
        assert!(
            text.contains("`write_file`") && text.contains("5 MB"),
            "{text}"
        );
        assert!(
            text.contains("1 MB") && text.contains("smaller calls"),
            "{text}"
        );
    }
}

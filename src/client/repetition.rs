//! Cutting an answer that has stopped saying anything: only whitespace, or
//! one line or sentence said again and again, for a long stretch.
//!
//! A server that forbids the end of an answer (a grammar waiting for call
//! markup) makes a weak model pad with newlines until the context is full,
//! and at temperature 0 a model may repeat one sentence for minutes. Chunks
//! keep arriving, so no timeout fires. [`RepeatWatch`] sees the answer text
//! as it streams and says where to cut it; the client then stops reading
//! and the answer ends there. Pure, so it is tested on plain strings.

/// Characters of only whitespace in a row past which an answer is cut
/// (`max_blank_run` in models.rhai). Real answers have a few blank lines in
/// a row, never hundreds.
pub const MAX_BLANK_RUN: usize = 200;

/// Characters of one line or sentence repeated, after its first
/// occurrence, past which an answer is cut (`max_repeated_run`). Fifty
/// repeats of a 40-character sentence; no real answer repeats one line
/// that often in a row.
pub const MAX_REPEATED_RUN: usize = 2000;

/// Where an answer was cut, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Bytes of the answer kept: everything before the stretch (one copy
    /// of a repeated line stays).
    pub keep: usize,
    /// What the stretch was, for the person and the model.
    pub what: String,
}

/// Watches an answer's text for a stretch that says nothing.
#[derive(Debug, Default)]
pub struct RepeatWatch {
    max_blank: usize,
    max_repeated: usize,
    /// Bytes seen.
    len: usize,
    /// Whitespace characters at the end, and where they began.
    blank_run: usize,
    blank_start: usize,
    /// The line or sentence being read, the last whole one (trimmed), and
    /// the characters of its repeats since its first occurrence ended.
    unit: String,
    last: String,
    repeated: usize,
    repeats_from: usize,
    prev: char,
}

impl RepeatWatch {
    /// A watch with these limits; 0 turns a check off.
    pub fn new(max_blank: usize, max_repeated: usize) -> Self {
        RepeatWatch {
            max_blank,
            max_repeated,
            ..RepeatWatch::default()
        }
    }

    /// Reads more of the answer; `Some` once it should be cut.
    pub fn push(&mut self, text: &str) -> Option<Cut> {
        for c in text.chars() {
            let at = self.len;
            self.len += c.len_utf8();
            if c.is_whitespace() {
                if self.blank_run == 0 {
                    self.blank_start = at;
                }
                self.blank_run += 1;
                if self.max_blank > 0 && self.blank_run > self.max_blank {
                    return Some(Cut {
                        keep: self.blank_start,
                        what: format!("only whitespace for {} characters", self.blank_run),
                    });
                }
            } else {
                self.blank_run = 0;
            }
            self.unit.push(c);
            let boundary = c == '\n' || (c.is_whitespace() && matches!(self.prev, '.' | '!' | '?'));
            self.prev = c;
            if boundary {
                self.end_unit();
                if self.max_repeated > 0 && self.repeated > self.max_repeated {
                    return Some(Cut {
                        keep: self.repeats_from,
                        what: format!(
                            "the same line repeated for {} characters: {:?}",
                            self.repeated,
                            crate::text::shorten(&self.last, 80)
                        ),
                    });
                }
            }
        }
        None
    }

    fn end_unit(&mut self) {
        let unit = std::mem::take(&mut self.unit);
        let trimmed = unit.trim();
        let chars = unit.chars().count();
        if trimmed.is_empty() {
            // Blank lines between repeats are part of the stretch.
            if self.repeated > 0 {
                self.repeated += chars;
            }
        } else if trimmed == self.last {
            self.repeated += chars;
        } else {
            self.last = trimmed.to_string();
            self.repeated = 0;
            self.repeats_from = self.len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_cut_where_it_began() {
        let mut w = RepeatWatch::new(MAX_BLANK_RUN, MAX_REPEATED_RUN);
        let head = "```json\n{\"name\": \"run_shell\"}\n```";
        assert_eq!(w.push(head), None);
        let mut cut = None;
        for _ in 0..1000 {
            if let Some(c) = w.push("\n") {
                cut = Some(c);
                break;
            }
        }
        let cut = cut.expect("cut");
        assert_eq!(cut.keep, head.len());
        assert!(cut.what.contains("only whitespace"), "{}", cut.what);
    }

    #[test]
    fn a_chanted_sentence_is_cut_after_its_first_copy() {
        let mut w = RepeatWatch::new(MAX_BLANK_RUN, MAX_REPEATED_RUN);
        let intro = "Here is the plan.\n";
        assert_eq!(w.push(intro), None);
        let sentence = "I will run the command now. ";
        let mut fed = intro.len();
        let cut = loop {
            fed += sentence.len();
            if let Some(c) = w.push(sentence) {
                break c;
            }
            assert!(fed < 10_000, "never cut");
        };
        assert_eq!(cut.keep, intro.len() + sentence.len());
        assert!(
            cut.what.contains("I will run the command now."),
            "{}",
            cut.what
        );
        // Repeated lines with blank lines between them count too.
        let mut w = RepeatWatch::new(MAX_BLANK_RUN, 100);
        let cut = (0..50).find_map(|_| w.push("all good\n\n"));
        assert!(cut.is_some());
    }

    #[test]
    fn real_answers_are_not_cut() {
        let mut w = RepeatWatch::new(MAX_BLANK_RUN, MAX_REPEATED_RUN);
        // Code with blank lines and repeated short lines, a list, a table.
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(&format!("fn f{i}() {{\n    x();\n}}\n\n\n"));
            text.push_str("| a | b |\n|---|---|\n- item\n- item\n");
        }
        assert_eq!(w.push(&text), None);
        // Zero turns the checks off.
        let mut off = RepeatWatch::new(0, 0);
        assert_eq!(off.push(&"\n".repeat(10_000)), None);
        assert_eq!(off.push(&"same.\n".repeat(10_000)), None);
    }
}

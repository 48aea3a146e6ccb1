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
pub const MAX_BLANK_RUN: usize = 400;

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

/// Watches an answer's text for a stretch that says nothing. It reads the
/// answer in place (each call passes the whole text so far) and keeps only
/// offsets into it, so watching costs one pass over the bytes and no copy.
/// Lengths are in bytes (characters, for ASCII text); only ASCII
/// whitespace counts as blank.
#[derive(Debug, Default)]
pub struct RepeatWatch {
    max_blank: usize,
    max_repeated: usize,
    /// Bytes of the answer already read.
    seen: usize,
    /// Whitespace bytes at the end, and where they began.
    blank_run: usize,
    blank_start: usize,
    /// Where the line or sentence being read began; the last whole one
    /// (trimmed, as a range of the text); the bytes of its repeats since
    /// its first occurrence ended, and where that was.
    unit_start: usize,
    last: Option<(usize, usize)>,
    repeated: usize,
    repeats_from: usize,
    prev: u8,
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

    /// Reads what `text` (the whole answer so far) added since the last
    /// call; `Some` once the answer should be cut.
    pub fn push(&mut self, text: &str) -> Option<Cut> {
        let from = self.seen;
        self.seen = text.len();
        for (i, &b) in text.as_bytes().iter().enumerate().skip(from) {
            let blank = b.is_ascii_whitespace();
            if blank {
                if self.blank_run == 0 {
                    self.blank_start = i;
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
            let boundary = b == b'\n' || (blank && matches!(self.prev, b'.' | b'!' | b'?'));
            self.prev = b;
            if boundary {
                self.end_unit(text, i + 1);
                if self.max_repeated > 0 && self.repeated > self.max_repeated {
                    let last = self.last.and_then(|(a, z)| text.get(a..z)).unwrap_or("");
                    return Some(Cut {
                        keep: self.repeats_from,
                        what: format!(
                            "the same line repeated for {} characters: {:?}",
                            self.repeated,
                            crate::text::shorten(last, 80)
                        ),
                    });
                }
            }
        }
        None
    }

    /// Ends the unit that runs to `end` (just after its boundary).
    fn end_unit(&mut self, text: &str, end: usize) {
        let unit = text.get(self.unit_start..end).unwrap_or("");
        let len = end - self.unit_start;
        let lead = unit.len() - unit.trim_start().len();
        let trimmed = unit.trim();
        let range = (
            self.unit_start + lead,
            self.unit_start + lead + trimmed.len(),
        );
        self.unit_start = end;
        if trimmed.is_empty() {
            // Blank lines between repeats are part of the stretch.
            if self.repeated > 0 {
                self.repeated += len;
            }
        } else if self
            .last
            .and_then(|(a, z)| text.get(a..z))
            .is_some_and(|last| last == trimmed)
        {
            self.repeated += len;
        } else {
            self.last = Some(range);
            self.repeated = 0;
            self.repeats_from = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends `piece` to the answer and lets the watch read it.
    fn feed(w: &mut RepeatWatch, answer: &mut String, piece: &str) -> Option<Cut> {
        answer.push_str(piece);
        w.push(answer)
    }

    #[test]
    fn padding_is_cut_where_it_began() {
        let mut w = RepeatWatch::new(MAX_BLANK_RUN, MAX_REPEATED_RUN);
        let mut answer = String::new();
        let head = "```json\n{\"name\": \"run_shell\"}\n```";
        assert_eq!(feed(&mut w, &mut answer, head), None);
        let mut cut = None;
        for _ in 0..1000 {
            if let Some(c) = feed(&mut w, &mut answer, "\n") {
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
        let mut answer = String::new();
        let intro = "Here is the plan.\n";
        assert_eq!(feed(&mut w, &mut answer, intro), None);
        let sentence = "I will run the command now. ";
        let cut = loop {
            if let Some(c) = feed(&mut w, &mut answer, sentence) {
                break c;
            }
            assert!(answer.len() < 10_000, "never cut");
        };
        assert_eq!(cut.keep, intro.len() + sentence.len());
        assert!(
            cut.what.contains("I will run the command now."),
            "{}",
            cut.what
        );
        // Repeated lines with blank lines between them count too.
        let mut w = RepeatWatch::new(MAX_BLANK_RUN, 100);
        let mut answer = String::new();
        let cut = (0..50).find_map(|_| feed(&mut w, &mut answer, "all good\n\n"));
        assert_eq!(cut.map(|c| c.keep), Some("all good\n".len()));
        // Pieces of any size read the same (non-ASCII text included).
        let text = format!("é plan.\n{}", "ça va.\n".repeat(40));
        let expected = RepeatWatch::new(0, 50).push(&text);
        assert!(expected.is_some());
        let chars: Vec<char> = text.chars().collect();
        for size in 1..20 {
            let mut w = RepeatWatch::new(0, 50);
            let mut answer = String::new();
            let got = chars
                .chunks(size)
                .find_map(|piece| feed(&mut w, &mut answer, &piece.iter().collect::<String>()));
            assert_eq!(got, expected, "pieces of {size}");
        }
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
        let mut off = RepeatWatch::new(0, 0);
        assert_eq!(off.push(&"same.\n".repeat(10_000)), None);
    }
}

//! Char-safe text helpers: cutting strings by characters or bytes without
//! splitting a UTF-8 character, and the one-line forms the UI and the
//! watchdog show. Every truncation in the crate goes through here, so no
//! caller byte-slices a string (`clippy::string_slice` is on).

/// The mark appended to a string that was cut.
pub const ELLIPSIS: char = '…';

/// `text` cut to at most `max` characters, with [`ELLIPSIS`] appended when
/// something was cut.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => {
            let mut out = String::with_capacity(end + ELLIPSIS.len_utf8());
            out.push_str(prefix(text, end));
            out.push(ELLIPSIS);
            out
        }
    }
}

/// Whether `text` has more than `max` characters.
pub fn longer_than(text: &str, max: usize) -> bool {
    text.char_indices().nth(max).is_some()
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a
/// character boundary.
pub fn prefix(text: &str, max_bytes: usize) -> &str {
    if max_bytes >= text.len() {
        return text;
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.get(..cut).unwrap_or("")
}

/// The longest suffix of `text` of at most `max_bytes` bytes that starts on
/// a character boundary.
pub fn suffix(text: &str, max_bytes: usize) -> &str {
    if max_bytes >= text.len() {
        return text;
    }
    let mut cut = text.len() - max_bytes;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text.get(cut..).unwrap_or("")
}

/// The first `n` characters of `text` (all of it when shorter).
pub fn first_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((end, _)) => prefix(text, end),
        None => text,
    }
}

/// The first line of `text` that is not blank, trimmed at the end.
pub fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim_end()
}

/// `text` on one line: newlines shown as `⏎`.
pub fn one_line(text: &str) -> String {
    text.replace("\r\n", "⏎").replace('\n', "⏎")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_never_split_a_character() {
        let s = "日本語のテキスト";
        for n in 0..=s.len() + 1 {
            assert!(s.starts_with(prefix(s, n)), "{n}");
            assert!(s.ends_with(suffix(s, n)), "{n}");
            assert!(prefix(s, n).len() <= n);
            assert!(suffix(s, n).len() <= n);
        }
        assert_eq!(prefix(s, 4), "日");
        assert_eq!(suffix(s, 4), "ト");
        assert_eq!(first_chars(s, 2), "日本");
        assert_eq!(first_chars("ab", 5), "ab");
    }

    #[test]
    fn shorten_marks_the_cut() {
        assert_eq!(shorten("hello", 5), "hello");
        assert_eq!(shorten("hello!", 5), "hello…");
        assert_eq!(shorten("日本語", 2), "日本…");
        assert!(longer_than("abc", 2) && !longer_than("abc", 3));
    }

    #[test]
    fn lines() {
        assert_eq!(first_line("\n  \nfirst  \nsecond"), "first");
        assert_eq!(first_line(""), "");
        assert_eq!(one_line("a\nb\r\nc"), "a⏎b⏎c");
    }
}

//! Markdown for the terminal, rendered as it streams. Pure: text in,
//! styled text out; the sink prints it.
//!
//! Streaming decides the shape: a line is rendered once it is complete
//! (its newline arrived), so what is on the screen never changes. Block
//! structure (headings, lists, block quotes, rules, fenced code, table
//! rows) is recognised per line with a little state (inside a fence or
//! not); inline spans (emphasis, strong, code, links, strikethrough) are
//! parsed with `pulldown-cmark`. Code in a fence is highlighted by a small
//! keyword highlighter for common languages (`highlight`), which costs no
//! syntax tables in memory. Without colour ([`Markdown::plain`]) the text
//! passes through unchanged.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// ANSI styles used for Markdown.
mod sgr {
    pub const RESET: &str = "\x1b[0m";
    pub const BOLD: &str = "\x1b[1m";
    pub const DIM: &str = "\x1b[2m";
    pub const ITALIC: &str = "\x1b[3m";
    pub const UNDERLINE: &str = "\x1b[4m";
    pub const STRIKE: &str = "\x1b[9m";
    pub const CYAN: &str = "\x1b[36m";
    pub const MAGENTA: &str = "\x1b[35m";
    pub const GREEN: &str = "\x1b[32m";
    pub const YELLOW: &str = "\x1b[33m";
    pub const BLUE: &str = "\x1b[34m";
}

/// A streaming Markdown renderer for one answer.
#[derive(Debug, Default)]
pub struct Markdown {
    /// Pass text through unchanged (no colour, or not a terminal).
    plain: bool,
    /// The current line, until its newline arrives.
    pending: String,
    /// Inside a fenced code block: its fence and its language.
    fence: Option<(String, String)>,
}

impl Markdown {
    /// A renderer with terminal styling.
    pub fn styled() -> Self {
        Markdown::default()
    }

    /// A renderer that changes nothing.
    pub fn plain() -> Self {
        Markdown {
            plain: true,
            ..Markdown::default()
        }
    }

    /// Takes the next piece of the answer; returns what can be shown now.
    pub fn push(&mut self, piece: &str) -> String {
        if self.plain {
            return piece.to_string();
        }
        self.pending.push_str(piece);
        let mut out = String::new();
        while let Some(end) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=end).collect();
            out.push_str(&self.line(line.trim_end_matches(['\n', '\r'])));
            out.push('\n');
        }
        out
    }

    /// The end of the answer: renders a last line without a newline.
    pub fn finish(&mut self) -> String {
        if self.plain || self.pending.is_empty() {
            return String::new();
        }
        let line = std::mem::take(&mut self.pending);
        let out = self.line(&line);
        self.fence = None;
        out
    }

    fn line(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if let Some((fence, lang)) = &self.fence {
            if trimmed.starts_with(fence.as_str())
                && trimmed.trim_matches(fence.as_bytes()[0] as char).is_empty()
            {
                self.fence = None;
                return format!("{}{}{}", sgr::DIM, line, sgr::RESET);
            }
            return format!("  {}", highlight(lang, line));
        }
        for fence in ["```", "~~~"] {
            if let Some(lang) = trimmed.strip_prefix(fence) {
                let lang = lang.trim().trim_start_matches(fence.as_bytes()[0] as char);
                self.fence = Some((fence.to_string(), lang.trim().to_ascii_lowercase()));
                return format!("{}{}{}", sgr::DIM, line, sgr::RESET);
            }
        }
        block(line)
    }
}

/// One line outside code: its block marker, then its inline spans.
fn block(line: &str) -> String {
    let indent = line.len() - line.trim_start().len();
    let pad = " ".repeat(indent);
    let t = line.trim_start();
    if t.is_empty() {
        return String::new();
    }
    let level = t.chars().take_while(|c| *c == '#').count();
    let after_hashes = t.get(level..).unwrap_or("");
    if (1..=6).contains(&level) && after_hashes.starts_with(' ') {
        let text = inline(after_hashes.trim());
        let style = if level <= 2 {
            format!("{}{}", sgr::BOLD, sgr::UNDERLINE)
        } else {
            sgr::BOLD.to_string()
        };
        return format!("{pad}{style}{text}{}", sgr::RESET);
    }
    if t.len() >= 3 && t.chars().all(|c| c == '-' || c == ' ') && t.matches('-').count() >= 3
        || t.chars().all(|c| c == '*' || c == ' ') && t.matches('*').count() >= 3
        || t.chars().all(|c| c == '_') && t.len() >= 3
    {
        return format!("{pad}{}{}{}", sgr::DIM, "─".repeat(40), sgr::RESET);
    }
    if let Some(rest) = t.strip_prefix("> ").or_else(|| (t == ">").then_some("")) {
        return format!(
            "{pad}{}│{} {}{}{}",
            sgr::DIM,
            sgr::RESET,
            sgr::ITALIC,
            block(rest),
            sgr::RESET
        );
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = t.strip_prefix(bullet) {
            let (check, rest) = match rest.get(..4) {
                Some("[ ] ") => ("☐ ", rest.get(4..).unwrap_or("")),
                Some("[x] ") | Some("[X] ") => ("☑ ", rest.get(4..).unwrap_or("")),
                _ => ("", rest),
            };
            return format!("{pad}{}•{} {check}{}", sgr::CYAN, sgr::RESET, inline(rest));
        }
    }
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let (number, after) = (t.get(..digits).unwrap_or(""), t.get(digits..).unwrap_or(""));
    if digits > 0 && (after.starts_with(". ") || after.starts_with(") ")) {
        let rest = after.get(2..).unwrap_or("");
        return format!("{pad}{}{number}.{} {}", sgr::CYAN, sgr::RESET, inline(rest));
    }
    if let Some(inner) = t.strip_prefix('|').and_then(|r| r.strip_suffix('|')) {
        let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
        if cells
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')))
        {
            let rule: Vec<String> = cells.iter().map(|c| "─".repeat(c.len().max(3))).collect();
            return format!("{pad}{}{}{}", sgr::DIM, rule.join("─┼─"), sgr::RESET);
        }
        let sep = format!(" {}│{} ", sgr::DIM, sgr::RESET);
        let rendered: Vec<String> = cells.iter().map(|c| inline(c)).collect();
        return format!("{pad}{}", rendered.join(&sep));
    }
    format!("{pad}{}", inline(t))
}

/// Inline spans of one line, styled.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut stack: Vec<&'static str> = Vec::new();
    let mut link: Option<String> = None;
    let restyle = |out: &mut String, stack: &[&'static str]| {
        out.push_str(sgr::RESET);
        for s in stack {
            out.push_str(s);
        }
    };
    for event in Parser::new_ext(text, Options::ENABLE_STRIKETHROUGH) {
        match event {
            Event::Text(t) => out.push_str(&t),
            Event::Code(c) => {
                out.push_str(sgr::YELLOW);
                out.push_str(&c);
                restyle(&mut out, &stack);
            }
            Event::Start(Tag::Emphasis) => {
                stack.push(sgr::ITALIC);
                out.push_str(sgr::ITALIC);
            }
            Event::Start(Tag::Strong) => {
                stack.push(sgr::BOLD);
                out.push_str(sgr::BOLD);
            }
            Event::Start(Tag::Strikethrough) => {
                stack.push(sgr::STRIKE);
                out.push_str(sgr::STRIKE);
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                stack.push(sgr::UNDERLINE);
                out.push_str(sgr::UNDERLINE);
                link = Some(dest_url.to_string());
            }
            Event::End(TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough) => {
                stack.pop();
                restyle(&mut out, &stack);
            }
            Event::End(TagEnd::Link) => {
                stack.pop();
                restyle(&mut out, &stack);
                if let Some(url) = link.take() {
                    out.push_str(&format!(" {}({url}){}", sgr::DIM, sgr::RESET));
                }
            }
            Event::SoftBreak | Event::HardBreak => out.push(' '),
            Event::Html(h) | Event::InlineHtml(h) => out.push_str(&h),
            _ => {}
        }
    }
    if !stack.is_empty() {
        out.push_str(sgr::RESET);
    }
    out
}

/// Keywords of the languages the highlighter knows.
fn keywords(lang: &str) -> &'static [&'static str] {
    match lang {
        "rust" | "rs" => &[
            "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
            "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod",
            "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super",
            "trait", "true", "type", "unsafe", "use", "where", "while",
        ],
        "python" | "py" => &[
            "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
            "elif", "else", "except", "False", "finally", "for", "from", "if", "import", "in",
            "is", "lambda", "None", "not", "or", "pass", "raise", "return", "True", "try", "while",
            "with", "yield",
        ],
        "js" | "javascript" | "ts" | "typescript" | "jsx" | "tsx" => &[
            "async",
            "await",
            "break",
            "case",
            "catch",
            "class",
            "const",
            "continue",
            "default",
            "delete",
            "else",
            "export",
            "extends",
            "false",
            "finally",
            "for",
            "function",
            "if",
            "import",
            "in",
            "instanceof",
            "interface",
            "let",
            "new",
            "null",
            "return",
            "switch",
            "this",
            "throw",
            "true",
            "try",
            "type",
            "typeof",
            "undefined",
            "var",
            "while",
            "yield",
        ],
        "go" => &[
            "break",
            "case",
            "chan",
            "const",
            "continue",
            "default",
            "defer",
            "else",
            "false",
            "for",
            "func",
            "go",
            "if",
            "import",
            "interface",
            "map",
            "nil",
            "package",
            "range",
            "return",
            "select",
            "struct",
            "switch",
            "true",
            "type",
            "var",
        ],
        "c" | "cpp" | "c++" | "h" | "java" | "cs" => &[
            "break", "case", "class", "const", "continue", "default", "do", "else", "enum",
            "false", "for", "if", "new", "null", "private", "public", "return", "static", "struct",
            "switch", "this", "true", "void", "while",
        ],
        "sh" | "bash" | "shell" | "zsh" | "console" => &[
            "case", "do", "done", "elif", "else", "esac", "export", "fi", "for", "function", "if",
            "in", "local", "return", "then", "until", "while",
        ],
        _ => &[],
    }
}

/// The line-comment marker of a language.
fn comment(lang: &str) -> Option<&'static str> {
    match lang {
        "python" | "py" | "sh" | "bash" | "shell" | "zsh" | "toml" | "yaml" | "yml" | "ruby"
        | "rb" => Some("#"),
        "rust" | "rs" | "js" | "javascript" | "ts" | "typescript" | "jsx" | "tsx" | "go" | "c"
        | "cpp" | "c++" | "h" | "java" | "cs" => Some("//"),
        "sql" | "lua" => Some("--"),
        _ => None,
    }
}

/// One line of code, highlighted: keywords, strings, numbers, comments.
/// An unknown language is shown in one colour.
pub fn highlight(lang: &str, line: &str) -> String {
    let words = keywords(lang);
    let marker = comment(lang);
    if words.is_empty() && marker.is_none() {
        return format!("{}{line}{}", sgr::GREEN, sgr::RESET);
    }
    let mut out = String::with_capacity(line.len() + 32);
    let mut rest = line;
    while !rest.is_empty() {
        if let Some(m) = marker
            && rest.starts_with(m)
        {
            out.push_str(&format!("{}{rest}{}", sgr::DIM, sgr::RESET));
            break;
        }
        let c = rest.chars().next().unwrap_or(' ');
        if c == '"' || c == '\'' || c == '`' {
            // Up to and including the closing quote (or the line's end).
            let end = rest
                .char_indices()
                .skip(1)
                .find(|(_, ch)| *ch == c)
                .map(|(i, ch)| i + ch.len_utf8())
                .unwrap_or(rest.len());
            let (quoted, after) = rest.split_at(end);
            out.push_str(&format!("{}{quoted}{}", sgr::GREEN, sgr::RESET));
            rest = after;
        } else if c.is_alphanumeric() || c == '_' {
            let end = rest
                .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                .unwrap_or(rest.len());
            let (word, after) = rest.split_at(end);
            if words.contains(&word) {
                out.push_str(&format!("{}{word}{}", sgr::MAGENTA, sgr::RESET));
            } else if c.is_ascii_digit() {
                out.push_str(&format!("{}{word}{}", sgr::BLUE, sgr::RESET));
            } else {
                out.push_str(word);
            }
            rest = after;
        } else {
            out.push(c);
            rest = rest.split_at(c.len_utf8()).1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rendered text with its escapes written out, for golden tests.
    fn shown(s: &str) -> String {
        s.replace("\x1b[0m", "</>")
            .replace("\x1b[1m", "<b>")
            .replace("\x1b[2m", "<dim>")
            .replace("\x1b[3m", "<i>")
            .replace("\x1b[4m", "<u>")
            .replace("\x1b[9m", "<s>")
            .replace("\x1b[36m", "<cyan>")
            .replace("\x1b[35m", "<kw>")
            .replace("\x1b[32m", "<str>")
            .replace("\x1b[33m", "<code>")
            .replace("\x1b[34m", "<num>")
    }

    fn render(text: &str) -> String {
        let mut md = Markdown::styled();
        let mut out = md.push(text);
        out.push_str(&md.finish());
        shown(&out)
    }

    #[test]
    fn headings_lists_quotes_and_inline_spans() {
        assert_eq!(render("# Title\n"), "<b><u>Title</>\n");
        assert_eq!(render("### Part\n"), "<b>Part</>\n");
        assert_eq!(
            render("- one **two** `three`\n"),
            "<cyan>•</> one <b>two</> <code>three</>\n"
        );
        assert_eq!(render("2. second\n"), "<cyan>2.</> second\n");
        assert_eq!(render("- [x] done\n"), "<cyan>•</> ☑ done\n");
        assert_eq!(render("> *quoted*\n"), "<dim>│</> <i><i>quoted</></>\n");
        assert_eq!(
            render("see [docs](https://x.test) ~~old~~\n"),
            "see <u>docs</> <dim>(https://x.test)</> <s>old</>\n"
        );
        assert_eq!(render("---\n"), format!("<dim>{}</>\n", "─".repeat(40)));
    }

    #[test]
    fn a_fenced_rust_block_is_highlighted_until_its_fence_closes() {
        let out = render("```rust\nfn main() { let x = \"hi\"; } // c\n```\nafter **b**\n");
        assert_eq!(
            out,
            "<dim>```rust</>\n  <kw>fn</> main() { <kw>let</> x = <str>\"hi\"</>; } <dim>// c</>\n<dim>```</>\nafter <b>b</>\n"
        );
        // Markdown inside a fence is code, not styling.
        assert_eq!(
            render("```\n**x**\n```\n"),
            "<dim>```</>\n  <str>**x**</>\n<dim>```</>\n"
        );
    }

    #[test]
    fn tables_render_with_rules() {
        let out = render("| a | b |\n|---|:-:|\n| 1 | **2** |\n");
        assert_eq!(
            out,
            "a <dim>│</> b\n<dim>────┼────</>\n1 <dim>│</> <b>2</>\n"
        );
    }

    #[test]
    fn a_line_is_shown_once_its_newline_arrives_at_any_split() {
        let text = "# Head\nsome **bold** text\n```py\nif x: # c\n```\ntail";
        let whole = render(text);
        for cut in 0..text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let (head, tail) = text.split_at(cut);
            let mut md = Markdown::styled();
            let mut out = md.push(head);
            out.push_str(&md.push(tail));
            out.push_str(&md.finish());
            assert_eq!(shown(&out), whole, "cut at {cut}");
        }
        let mut md = Markdown::styled();
        assert_eq!(md.push("no newline yet"), "");
        assert_eq!(shown(&md.finish()), "no newline yet");
    }

    #[test]
    fn plain_changes_nothing() {
        let mut md = Markdown::plain();
        assert_eq!(md.push("# **raw** `x`\n```\n"), "# **raw** `x`\n```\n");
        assert_eq!(md.finish(), "");
    }
}

//! Secrets: what child processes may see of the agent's environment, and
//! the blanking of secret values wherever the agent writes text.
//!
//! Two lines of defence, in this order:
//!
//! 1. **No secret in a child's reach.** A command gets only the variables
//!    of an allow-list ([`DEFAULT_ENV_ALLOW`] plus `env_allow` in
//!    `policy.rhai`), and of those none that `is_secret(name, value)` calls
//!    a secret. [`harden_process`] makes the agent itself non-dumpable, so a
//!    command running as the same user cannot read `/proc/<agent>/environ`
//!    or `/proc/<agent>/mem`, attach with ptrace, or get a core dump. (A
//!    command running as root still can; only the command namespaces stop
//!    that.)
//! 2. **Blanking.** A [`Redactor`] replaces every secret value of at least
//!    [`MIN_REDACTED_LEN`] characters, and its reversed, base64 (standard
//!    and URL-safe, at each of the three byte alignments) and hex forms,
//!    with [`REDACTED`] in tool outputs, spill files, transcripts and run
//!    logs. Encoded forms are found across line breaks and single spaces
//!    (`base64`, `xxd -p`, `od -An -tx1`), raw or JSON-escaped. A
//!    [`StreamRedactor`] does the same over a stream cut into chunks, so a
//!    spill file never holds a secret, not even while the command runs.
//!
//! Blanking is a second line only: a program that can read a secret can
//! always encode it in a way no filter recognises. The first line is what
//! holds.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use std::ops::Range;

use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{AhoCorasick, Anchored, MatchKind};

/// What a secret value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Secret values shorter than this (in characters) are not blanked: a
/// three-character value would match ordinary text everywhere. Such a
/// value still never reaches a child.
pub const MIN_REDACTED_LEN: usize = 4;

/// Encoded forms (base64, hex) shorter than this are not searched for: a
/// four-character base64 fragment matches random base64 far too often. It
/// only drops the base64 of a 4-character value at an unaligned offset.
const MIN_ENCODED_LEN: usize = 5;

/// Values longer than this are searched for as they are and reversed, but
/// not encoded: their encoded forms would make the matcher huge (a PEM key
/// is 3 KB). Each line of a multi-line value is a secret of its own, with
/// every form, so `echo "$KEY" | head -2 | base64` is still caught.
const MAX_ENCODED_VALUE: usize = 512;

/// Gap bytes (space, tab, `\r`, `\n`, or their JSON escapes) allowed in
/// one run between two characters of an encoded form. Covers line wrapping
/// (`base64` at 76 columns, `xxd -p` at 60), `\r\n`, and the spaces of `od
/// -An -tx1` and `hexdump -C`, in outputs and in JSON-lines logs; a longer
/// run ends a candidate match, which keeps the stream window bounded.
const MAX_GAP_BYTES: usize = 4;

/// Values of secret variables that are not blanked: words that configure
/// rather than authenticate (`GIT_ASKPASS_ENABLED=true`), which blanking
/// would remove from every output.
const NOT_SECRET_VALUES: &[&str] = &[
    "true", "false", "null", "none", "auto", "never", "always", "enabled", "disabled",
];

/// The variables every command gets (when set), before `env_allow` in
/// `policy.rhai` adds more. A name ending in `*` is a prefix. What is left
/// out on purpose: the agent's own `AGENT_*`, `SSH_AUTH_SOCK`, `GPG_*`,
/// `DBUS_SESSION_BUS_ADDRESS`, `XDG_RUNTIME_DIR`, `DISPLAY` /
/// `WAYLAND_DISPLAY` (ways into the person's agents and desktop), and
/// everything a tool or cloud SDK reads credentials from.
pub const DEFAULT_ENV_ALLOW: &[&str] = &[
    // The session.
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "TMP",
    "TEMP",
    "TZ",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "CI",
    // The terminal.
    "TERM",
    "TERMINFO",
    "COLORTERM",
    "NO_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    "EDITOR",
    "VISUAL",
    "PAGER",
    // Rust.
    "CARGO_HOME",
    "CARGO_TARGET_DIR",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "RUSTFLAGS",
    "RUST_BACKTRACE",
    // Go.
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "GOMODCACHE",
    "GOFLAGS",
    "GOPROXY",
    "GOTOOLCHAIN",
    // Python.
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "CONDA_EXE",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "PYTHONPATH",
    // JVM, Node, Ruby, .NET, Android, version managers.
    "JAVA_HOME",
    "GRADLE_USER_HOME",
    "M2_HOME",
    "NVM_DIR",
    "NVM_BIN",
    "NODE_PATH",
    "PNPM_HOME",
    "BUN_INSTALL",
    "VOLTA_HOME",
    "GEM_HOME",
    "GEM_PATH",
    "RBENV_ROOT",
    "RBENV_VERSION",
    "DOTNET_ROOT",
    "ANDROID_HOME",
    "ANDROID_SDK_ROOT",
    "SDKMAN_DIR",
    "ASDF_DIR",
    "ASDF_DATA_DIR",
    // C and C++ builds.
    "CC",
    "CXX",
    "AR",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "PKG_CONFIG_PATH",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
];

/// Whether `name` matches an allow-list entry: the same name, or a prefix
/// entry `PREFIX*` (`*` alone matches every name).
pub fn env_allowed(name: &str, entry: &str) -> bool {
    match entry.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == entry,
    }
}

/// Checks one `env_allow` entry: a variable name, optionally ending in `*`.
/// `Err` says what is wrong with it.
pub fn check_allow_entry(entry: &str) -> Result<(), String> {
    let name = entry.strip_suffix('*').unwrap_or(entry);
    let valid = name
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    if valid && (entry == "*" || !name.is_empty()) {
        Ok(())
    } else {
        Err(format!(
            "{entry:?} is not a variable name or a prefix like \"MYAPP_*\""
        ))
    }
}

/// Whether a variable's *name* says it holds a secret: it contains KEY,
/// TOKEN, SECRET, PASS (PASSWORD, PASSWD, PASSPHRASE), CRED, AUTH or PRIVATE
/// (any case; AUTHOR does not count, so `GIT_AUTHOR_NAME` is not one), or it
/// is `SSH_AUTH_SOCK`. The built-in rule, used when `policy.rhai` has none
/// or its `is_secret` fails; the default script says the same.
pub fn is_secret_var(name: &str) -> bool {
    let upper = name.to_ascii_uppercase().replace("AUTHOR", "");
    upper == "SSH_AUTH_SOCK"
        || ["KEY", "TOKEN", "SECRET", "PASS", "CRED", "AUTH", "PRIVATE"]
            .iter()
            .any(|needle| upper.contains(needle))
}

/// Whether a variable's *value* is a secret whatever its name: it holds a
/// URL with credentials (`postgres://user:password@host/db`,
/// `https://TOKEN@github.com`).
pub fn is_secret_value(value: &str) -> bool {
    !url_credentials(value).is_empty()
}

/// The built-in `is_secret(name, value)`: [`is_secret_var`] or
/// [`is_secret_value`].
pub fn is_secret_env(name: &str, value: &str) -> bool {
    is_secret_var(name) || is_secret_value(value)
}

/// The credentials (the password, or a user name standing alone as a
/// token) of every URL in `value` that has them.
fn url_credentials(value: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for (at, _) in value.match_indices("://") {
        let scheme_ends_well = value
            .get(..at)
            .unwrap_or("")
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        let rest = value.get(at + 3..).unwrap_or("");
        let authority = rest
            .split(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .next()
            .unwrap_or_default();
        let Some((userinfo, _host)) = authority.rsplit_once('@') else {
            continue;
        };
        if !scheme_ends_well || userinfo.is_empty() {
            continue;
        }
        found.push(match userinfo.split_once(':') {
            Some((_, password)) if !password.is_empty() => password,
            _ => userinfo,
        });
    }
    found
}

/// Splits the agent's environment into what children get and the secret
/// values to blank: a variable is passed when an `allow` entry (see
/// [`env_allowed`]) matches its name and `is_secret(name, value)` is
/// false. Values of secret variables are collected (with the credentials
/// of URLs in them and the lines of multi-line values) whether allowed or
/// not; variables that are neither allowed nor secret are just dropped.
pub fn split_env(
    env: impl IntoIterator<Item = (String, String)>,
    allow: &[String],
    is_secret: &dyn Fn(&str, &str) -> bool,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut child = Vec::new();
    let mut secrets = Vec::new();
    for (name, value) in env {
        if is_secret(&name, &value) {
            secrets.extend(url_credentials(&value).into_iter().map(str::to_string));
            secrets.push(value);
        } else if allow.iter().any(|entry| env_allowed(&name, entry)) {
            child.push((name, value));
        }
    }
    (child, secrets)
}

/// The default allow-list plus `extra` entries from `policy.rhai`.
pub fn allow_list(extra: &[String]) -> Vec<String> {
    DEFAULT_ENV_ALLOW
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect()
}

/// Makes the agent's process non-dumpable (`PR_SET_DUMPABLE` 0): its
/// `/proc/<pid>/environ`, `mem`, `maps` and `fd` become root's, ptrace
/// attach needs `CAP_SYS_PTRACE`, and no core dump is written. Children
/// are not affected: `execve` makes them dumpable again. Call first thing
/// in `main`, before any child exists.
///
/// # Errors
///
/// When the kernel refuses, with a message for the person.
pub fn harden_process() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_dumpable(false).map_err(|e| {
            format!(
                "cannot make the agent non-dumpable ({e}): commands running as you could read \
                 its environment and memory, including the API key"
            )
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}

/// Blanks secret values and their encoded forms out of text.
///
/// Two Aho-Corasick automata, built in well under a millisecond: one for
/// the plain, reversed and JSON-escaped values (a SIMD-prefiltered search),
/// one for the base64 and hex forms, walked byte by byte with gap bytes
/// skipped. Text with no secret in it is returned without a copy.
#[derive(Clone, Default)]
pub struct Redactor {
    /// The values (trimmed), for rebuilding.
    values: Vec<String>,
    exact: Option<AhoCorasick>,
    encoded: Option<Arc<NFA>>,
    /// The longest encoded form, in bytes without gaps.
    longest_encoded: usize,
    /// The longest span one match can cover, for [`StreamRedactor`].
    longest: usize,
    /// Set when an automaton could not be built: texts are withheld.
    broken: bool,
}

impl fmt::Debug for Redactor {
    // Never print the values themselves.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("values", &self.values.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for `values`; those shorter than [`MIN_REDACTED_LEN`]
    /// characters (after trimming) or in [`NOT_SECRET_VALUES`] are skipped.
    pub fn new(values: impl IntoIterator<Item = String>) -> Redactor {
        let mut redactor = Redactor::default();
        redactor.extend(values);
        redactor
    }

    /// Adds values and rebuilds the automata.
    pub fn extend(&mut self, values: impl IntoIterator<Item = String>) {
        let before = self.values.len();
        for value in values {
            for candidate in candidates(&value) {
                if !self.values.iter().any(|v| v == candidate) {
                    self.values.push(candidate.to_string());
                }
            }
        }
        if self.values.len() != before {
            self.rebuild();
        }
    }

    /// Whether there is nothing to blank.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn rebuild(&mut self) {
        let mut exact: Vec<String> = Vec::new();
        let mut encoded: Vec<String> = Vec::new();
        for value in &self.values {
            let (e, enc) = forms(value);
            exact.extend(e);
            encoded.extend(enc);
        }
        exact.sort();
        exact.dedup();
        encoded.sort();
        encoded.dedup();
        let exact_ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&exact);
        let encoded_nfa = if encoded.is_empty() {
            Ok(None)
        } else {
            NFA::builder()
                .match_kind(MatchKind::Standard)
                .build(&encoded)
                .map(|nfa| Some(Arc::new(nfa)))
        };
        self.longest_encoded = encoded.iter().map(String::len).max().unwrap_or(0);
        let longest_exact = exact.iter().map(String::len).max().unwrap_or(0);
        self.longest = longest_exact
            .max(self.longest_encoded + self.longest_encoded.saturating_sub(1) * MAX_GAP_BYTES);
        match (exact_ac, encoded_nfa) {
            (Ok(exact), Ok(encoded)) => {
                self.exact = Some(exact);
                self.encoded = encoded;
                self.broken = false;
            }
            // Never expected (the patterns are small); nothing is shown
            // rather than a secret.
            _ => {
                self.exact = None;
                self.encoded = None;
                self.broken = true;
            }
        }
    }

    /// The byte ranges of `text` to blank: sorted, not overlapping.
    fn spans(&self, text: &[u8]) -> Vec<Range<usize>> {
        let mut spans: Vec<Range<usize>> = Vec::new();
        if let Some(ac) = &self.exact {
            spans.extend(ac.find_iter(text).map(|m| m.range()));
        }
        if let Some(nfa) = &self.encoded {
            let before = spans.len();
            encoded_spans(nfa, self.longest_encoded, text, &mut spans);
            if spans.len() > before {
                spans.sort_by_key(|r| r.start);
                let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
                for span in spans {
                    match merged.last_mut() {
                        Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
                        _ => merged.push(span),
                    }
                }
                return merged;
            }
        }
        spans
    }

    /// `text` with every secret form replaced by [`REDACTED`]. Returns the
    /// input unchanged (no copy) when it holds none.
    pub fn redact_bytes<'a>(&self, text: &'a [u8]) -> Cow<'a, [u8]> {
        if self.broken {
            return Cow::Owned(WITHHELD.as_bytes().to_vec());
        }
        let spans = self.spans(text);
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = Vec::with_capacity(text.len());
        let mut done = 0;
        for span in spans {
            out.extend_from_slice(&text[done..span.start]);
            out.extend_from_slice(REDACTED.as_bytes());
            done = span.end;
        }
        out.extend_from_slice(&text[done..]);
        Cow::Owned(out)
    }

    /// [`Redactor::redact_bytes`] for a string.
    pub fn redact_str(&self, text: String) -> String {
        match self.redact_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => text,
            // Matches start and end on character boundaries, so this is
            // valid UTF-8; the lossy path is for safety only.
            Cow::Owned(bytes) => String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        }
    }

    /// A streaming redactor sharing this one's automata.
    pub fn stream(self: &Arc<Self>) -> StreamRedactor {
        StreamRedactor {
            redactor: Arc::clone(self),
            pending: Vec::new(),
            withheld: false,
        }
    }
}

/// Finds the encoded forms in `text`, skipping runs of up to
/// [`MAX_GAP_BYTES`] gap bytes between their characters, and pushes the
/// spans they cover (first to last character) to `spans`.
fn encoded_spans(nfa: &NFA, longest: usize, text: &[u8], spans: &mut Vec<Range<usize>>) {
    let Ok(start) = nfa.start_state(Anchored::No) else {
        return;
    };
    let mut sid = start;
    // Where the last `window` non-gap bytes were (a ring), to find where a
    // match starts.
    let window = longest.max(1);
    let mut at = vec![0usize; window];
    let mut slot = 0;
    // Non-gap bytes fed since the last reset.
    let mut fed = 0usize;
    let mut gap_run = 0;
    let mut i = 0;
    while i < text.len() {
        let byte = text[i];
        if IS_GAP[usize::from(byte)] {
            let gap = if byte != b'\\' {
                1
            } else if matches!(text.get(i + 1), Some(b'n' | b'r' | b't')) {
                2
            } else {
                0
            };
            if gap > 0 {
                gap_run += gap;
                if gap_run > MAX_GAP_BYTES {
                    sid = start;
                    fed = 0;
                }
                i += gap;
                continue;
            }
        }
        gap_run = 0;
        sid = nfa.next_state(Anchored::No, sid, byte);
        at[slot] = i;
        slot += 1;
        if slot == window {
            slot = 0;
        }
        fed += 1;
        if nfa.is_special(sid) && nfa.is_match(sid) {
            let len = (0..nfa.match_len(sid))
                .map(|k| nfa.pattern_len(nfa.match_pattern(sid, k)))
                .max()
                .unwrap_or(1)
                .clamp(1, fed.min(window));
            spans.push(at[(slot + window - len) % window]..i + 1);
        }
        i += 1;
    }
}

/// The bytes that may be gap bytes: space, tab, `\r`, `\n`, and `\` (a
/// gap only when it starts the escape `\n`, `\r` or `\t`).
const IS_GAP: [bool; 256] = {
    let mut table = [false; 256];
    table[b' ' as usize] = true;
    table[b'\t' as usize] = true;
    table[b'\n' as usize] = true;
    table[b'\r' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// What replaces a text when no matcher could be built (never expected).
const WITHHELD: &str = "[output withheld: the secret filter could not be built]";

/// The values worth blanking in `value`: itself, trimmed, and each line of
/// a multi-line value; short ones and configuration words skipped.
fn candidates(value: &str) -> Vec<&str> {
    let trimmed = value.trim();
    let mut out = vec![trimmed];
    if trimmed.contains('\n') {
        out.extend(trimmed.lines().map(str::trim));
    }
    out.retain(|v| {
        v.chars().count() >= MIN_REDACTED_LEN
            && !NOT_SECRET_VALUES.iter().any(|w| v.eq_ignore_ascii_case(w))
    });
    out
}

/// The forms of one value: exact (plain, reversed, JSON-escaped) and, for
/// values up to [`MAX_ENCODED_VALUE`] bytes, encoded (base64 standard and
/// URL-safe at each alignment, hex in both cases).
fn forms(value: &str) -> (Vec<String>, Vec<String>) {
    let mut exact = vec![value.to_string(), value.chars().rev().collect()];
    let escaped = serde_json::to_string(value).unwrap_or_default();
    if let Some(escaped) = escaped.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        if escaped != value {
            exact.push(escaped.to_string());
        }
    }
    let mut encoded = Vec::new();
    if value.len() <= MAX_ENCODED_VALUE {
        let bytes = value.as_bytes();
        for offset in 0..3 {
            let standard = base64_at(bytes, offset);
            if standard.len() >= MIN_ENCODED_LEN {
                encoded.push(standard.replace('+', "-").replace('/', "_"));
                encoded.push(standard);
            }
        }
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        encoded.push(hex.to_uppercase());
        encoded.push(hex);
    }
    (exact, encoded)
}

/// The base64 characters that `bytes` fix when they start `offset` bytes
/// into an encoded stream: the characters shared with the prefix and the
/// partial last character are left out, so the result is found inside any
/// larger base64 text that holds `bytes` at that alignment.
fn base64_at(bytes: &[u8], offset: usize) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut padded = vec![0u8; offset];
    padded.extend_from_slice(bytes);
    let bits = padded.len() * 8;
    // Characters made only of bits of `bytes`: skip those touching the
    // prefix, stop before the one that needs bits after the end.
    let first = (offset * 8).div_ceil(6);
    let last = bits / 6;
    (first..last)
        .map(|i| {
            let bit = i * 6;
            let byte = bit / 8;
            let word = (u16::from(padded[byte]) << 8)
                | u16::from(padded.get(byte + 1).copied().unwrap_or(0));
            let index = (word >> (10 - bit % 8)) & 0x3f;
            char::from(ALPHABET[usize::from(index)])
        })
        .collect()
}

/// Blanks secrets out of a stream that arrives in chunks. Bytes that could
/// be the start of a secret cut by a chunk boundary are held back until
/// the next chunk (at most the longest match's span); everything else is
/// passed on at once.
#[derive(Debug)]
pub struct StreamRedactor {
    redactor: Arc<Redactor>,
    pending: Vec<u8>,
    /// The withheld notice was given (see `WITHHELD`).
    withheld: bool,
}

impl StreamRedactor {
    /// Takes one chunk; appends what is now safe to pass on to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.redactor.broken {
            if !self.withheld {
                out.extend_from_slice(WITHHELD.as_bytes());
                self.withheld = true;
            }
            return;
        }
        if self.redactor.is_empty() {
            out.extend_from_slice(chunk);
            return;
        }
        self.pending.extend_from_slice(chunk);
        // A match starting before `safe` fits in `pending` whole, so it has
        // been seen; one starting later may still be cut.
        let hold = self.redactor.longest.saturating_sub(1);
        let safe = self.pending.len().saturating_sub(hold);
        let mut done = 0;
        for span in self.redactor.spans(&self.pending) {
            if span.start >= safe {
                break;
            }
            out.extend_from_slice(&self.pending[done..span.start]);
            out.extend_from_slice(REDACTED.as_bytes());
            done = span.end;
        }
        let emit = safe.max(done);
        out.extend_from_slice(&self.pending[done..emit]);
        self.pending.drain(..emit);
    }

    /// The whole lines among the held-back bytes, blanked: a secret does
    /// not span a line break, so a line that has ended is safe to show even
    /// though the stream still holds it back. For a live view of the
    /// stream's last line.
    pub fn held_lines(&self) -> Cow<'_, [u8]> {
        match self.pending.iter().rposition(|&b| b == b'\n') {
            Some(end) if !self.redactor.broken => self.redactor.redact_bytes(&self.pending[..=end]),
            _ => Cow::Borrowed(&[]),
        }
    }

    /// Ends the stream: appends the rest, blanked, to `out`.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let rest = std::mem::take(&mut self.pending);
        if !self.redactor.broken {
            out.extend_from_slice(&self.redactor.redact_bytes(&rest));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-0123456789abcdefXYZ";

    fn shell(script: &str, input: &str) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    }

    fn redactor(values: &[&str]) -> Redactor {
        Redactor::new(values.iter().map(|s| s.to_string()))
    }

    #[test]
    fn base64_at_each_alignment_is_found_inside_real_base64() {
        for prefix in ["", "a", "ab", "abc", "KEY=", "AGENT_API_KEY="] {
            for suffix in ["", "\n", "x", "xy", " trailing text"] {
                let input = format!("{prefix}{KEY}{suffix}");
                let offset = prefix.len() % 3;
                let ours = base64_at(KEY.as_bytes(), offset);
                for tool in ["base64", "base64 -w0", "basenc --base64url"] {
                    let encoded: String = shell(tool, &input)
                        .chars()
                        .filter(|c| !c.is_whitespace())
                        .collect();
                    let ours = if tool.contains("url") {
                        ours.replace('+', "-").replace('/', "_")
                    } else {
                        ours.clone()
                    };
                    assert!(
                        encoded.contains(&ours),
                        "{tool} {input:?}: {encoded} ∌ {ours}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_form_is_blanked_as_tools_print_it() {
        let r = redactor(&[KEY]);
        for tool in [
            "cat",
            "rev",
            "base64",
            "base64 -w0",
            "base64 -w 7",
            "basenc --base64url",
            "xxd -p",
            "xxd -p -c 5",
            "od -An -tx1",
            "hexdump -v -e '/1 \"%02X\"'",
            "sed 's/^/prefix: /' | base64",
            "sed 's/^/pr/' | base64",
            "sed 's/^/p/' | base64",
        ] {
            let printed = shell(tool, &format!("{KEY}\n"));
            let redacted = r.redact_str(printed.clone());
            assert!(
                redacted.contains(REDACTED),
                "{tool}: {printed:?} -> {redacted:?}"
            );
            let squeezed: String = redacted.chars().filter(|c| !c.is_whitespace()).collect();
            for form in [
                KEY.to_string(),
                KEY.chars().rev().collect(),
                base64_at(KEY.as_bytes(), 0),
            ] {
                assert!(!squeezed.contains(&form), "{tool}: {redacted}");
            }
        }
    }

    #[test]
    fn json_escaped_forms_are_blanked() {
        let tricky = "pa\"ss\\wo\trd";
        let r = redactor(&[tricky, KEY]);
        let line = serde_json::to_string(&serde_json::json!({
            "a": tricky,
            "b": shell("base64 -w 20", KEY),
        }))
        .unwrap();
        let redacted = r.redact_str(line);
        assert_eq!(redacted.matches(REDACTED).count(), 2, "{redacted}");
    }

    #[test]
    fn short_and_boring_values_are_not_blanked() {
        let r = redactor(&["abc", "true", " x ", "k7%Qz"]);
        assert_eq!(
            r.redact_str("abc is true; k7%Qz".into()),
            "abc is true; [redacted]"
        );
        assert!(redactor(&["abc", "TRUE"]).is_empty());
    }

    #[test]
    fn text_without_secrets_is_returned_as_is() {
        let r = redactor(&[KEY]);
        let text = "hello world\n".repeat(100);
        let ptr = text.as_ptr();
        let out = r.redact_str(text);
        assert_eq!(out.as_ptr(), ptr, "no copy on the fast path");
        assert_eq!(Redactor::default().redact_str("x".into()), "x");
    }

    #[test]
    fn lines_of_a_multiline_value_are_secrets_too() {
        let pem = format!(
            "-----BEGIN KEY-----\n{}\n-----END KEY-----",
            "Q".repeat(600)
        );
        let r = redactor(&[&pem]);
        let out = r.redact_str(format!("head: {}\n", "Q".repeat(600)));
        assert_eq!(out, "head: [redacted]\n");
        assert_eq!(r.redact_str(format!("all: {pem}")), "all: [redacted]");
    }

    #[test]
    fn a_stream_is_blanked_at_every_split_point() {
        let r = Arc::new(redactor(&[KEY, "k7%Qz"]));
        let b64 = shell("base64 -w 10", KEY);
        let text = format!("before {KEY} mid k7%Qz {b64} after {KEY}");
        let whole = r.redact_str(text.clone());
        assert_eq!(whole.matches(REDACTED).count(), 4, "{whole}");
        let bytes = text.as_bytes();
        for split in 0..=bytes.len() {
            for second in [split, (split + 7).min(bytes.len())] {
                let mut s = r.stream();
                let mut out = Vec::new();
                s.feed(&bytes[..split], &mut out);
                s.feed(&bytes[split..second], &mut out);
                s.feed(&bytes[second..], &mut out);
                s.finish(&mut out);
                assert_eq!(String::from_utf8(out).unwrap(), whole, "split at {split}");
            }
        }
        // One byte at a time.
        let mut s = r.stream();
        let mut out = Vec::new();
        for b in bytes {
            s.feed(std::slice::from_ref(b), &mut out);
        }
        s.finish(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), whole);
    }

    #[test]
    fn a_stream_passes_most_bytes_on_at_once() {
        let r = Arc::new(redactor(&[KEY]));
        let mut s = r.stream();
        let mut out = Vec::new();
        s.feed(&[b'x'; 10_000], &mut out);
        assert!(out.len() >= 10_000 - r.longest, "{}", out.len());
    }

    #[test]
    fn names_and_values_that_are_secrets() {
        for name in [
            "AGENT_API_KEY",
            "GITHUB_TOKEN",
            "db_password",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASSFILE",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "NPM_AUTH",
            "SSH_AUTH_SOCK",
            "GPG_PRIVATE",
            "GIT_AUTHOR_TOKEN",
        ] {
            assert!(is_secret_var(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "LANG",
        ] {
            assert!(!is_secret_var(name), "{name}");
        }
        for value in [
            "postgres://user:password@host/db",
            "https://ghp_abc@github.com/o/r.git",
            "--proxy http://u:p@proxy:8080",
        ] {
            assert!(is_secret_value(value), "{value}");
        }
        for value in [
            "https://example.com/a@b",
            "mailto:me@example.com",
            "://@x",
            "/usr/bin",
        ] {
            assert!(!is_secret_value(value), "{value}");
        }
        assert_eq!(
            url_credentials("postgres://user:pw-s3cret@h/db and https://tok3n@x"),
            ["pw-s3cret", "tok3n"]
        );
    }

    #[test]
    fn the_environment_is_split_by_allow_list_and_secret_rule() {
        let env = [
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("FOO", "bar"),
            ("MYAPP_MODE", "dev"),
            ("AGENT_API_KEY", "sk-1234"),
            ("DATABASE_URL", "postgres://u:pw-long@h/db"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let allow = allow_list(&["MYAPP_*".into(), "DATABASE_URL".into()]);
        let (child, secrets) = split_env(env, &allow, &is_secret_env);
        let names: Vec<&str> = child.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "LC_ALL", "MYAPP_MODE"]);
        assert_eq!(
            secrets,
            [
                "sk-1234",
                "pw-long",
                "postgres://u:pw-long@h/db",
                "/tmp/ssh-x/agent.1"
            ]
        );
        assert!(env_allowed("ANYTHING", "*"));
        for ok in ["FOO", "MYAPP_*", "*", "_X1"] {
            assert!(check_allow_entry(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1X", "A-B", "A*B", "**"] {
            assert!(check_allow_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_process_is_not_dumpable_after_hardening() {
        // Runs in the test process: harmless, children are dumpable again.
        harden_process().unwrap();
        assert!(!nix::sys::prctl::get_dumpable().unwrap());
        let _ = nix::sys::prctl::set_dumpable(true);
    }
}

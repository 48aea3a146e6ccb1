//! Running one shell command: the only place the agent starts the
//! commands a model asks for (MCP stdio servers, which the person names
//! in `mcp.rhai`, are started by `tools::mcp::server`, in their own process
//! group with the same scrubbed environment).
//!
//! [`run`] starts `bash -c <command>` (or `sh -c`) with a scrubbed
//! environment and no stdin, through the sandbox launcher when
//! [`CommandSpec::sandbox`] is set (the CLI always sets it): its own
//! session and PID namespace, tied to this process by a pipe, so the whole
//! tree dies with the command, on a limit, or when the agent dies (see
//! [`super::sandbox`]). Without a launcher the shell leads its own process
//! group. It reads stdout and stderr as bytes arrive, and enforces three
//! limits: a wall clock, an inactivity timeout and cancellation. Any of them
//! ends the command (SIGTERM, a grace period, SIGKILL), so `make` and the
//! compilers it started die together.
//!
//! Each stream goes into a [`Capture`] that keeps a bounded head and tail for
//! the model and, once the stream outgrows the cap, saves it whole to a spill
//! file. Memory stays bounded however much a command prints, and nothing is
//! lost: the model is told where the full output lives. With a
//! [`CommandSpec::redactor`], secrets are blanked as bytes arrive, before
//! they reach the spill file, the head or the tail.
//!
//! [`clean_for_model`] turns terminal output into plain text (ANSI escapes
//! stripped, `\r` progress lines collapsed).

use std::collections::VecDeque;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::protocol::LiveLine;

use super::sandbox::Sandbox;
use super::secrets::{Redactor, StreamRedactor};
use super::spill::{SpillFile, SpillTarget};

/// After the shell exits, how long we keep reading its pipes. A background
/// grandchild (`server &`) inherits them and may hold them open for hours;
/// one second is plenty for output already in flight, and short enough that
/// the model is not kept waiting on a process it meant to leave running.
pub const PIPE_DRAIN: Duration = Duration::from_secs(1);

/// Size of one read from a pipe: the default Linux pipe capacity, so one
/// read usually empties the pipe.
const READ_CHUNK: usize = 64 * 1024;

/// The shell used when bash is not on `PATH`; POSIX guarantees it exists.
const FALLBACK_SHELL: &str = "/bin/sh";

/// Longer than any real limit (30 years). Limits are clamped to it so that a
/// huge duration (`Duration::MAX`) cannot overflow an `Instant` and panic.
const EFFECTIVELY_NEVER: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// The instant `limit` after `start`, without overflow.
fn after(start: Instant, limit: Duration) -> Instant {
    start + limit.min(EFFECTIVELY_NEVER)
}

/// What to run and under which limits.
#[derive(Clone, Debug)]
pub struct CommandSpec {
    /// A shell command line, run with `bash -c` (or `sh -c` without bash).
    pub command: String,
    /// The working directory of the command.
    pub cwd: PathBuf,
    /// Environment for the child; nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// Wall-clock limit, counted from spawn.
    pub timeout: Duration,
    /// Longest allowed silence on both streams together.
    pub inactivity_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when a limit ends the command.
    pub kill_grace: Duration,
    /// Bytes of each stream kept for the model (head and tail).
    pub output_cap: usize,
    /// Directory where a stream larger than `output_cap` is saved whole.
    pub spill_dir: PathBuf,
    /// A file-name-safe label for spill files (e.g. the tool call id).
    pub label: String,
    /// Most bytes of one spill file; past it the middle is dropped.
    pub spill_cap: u64,
    /// When set, the shell is started through the sandbox launcher: in its
    /// own session and PID namespace, limited, and confined unless the
    /// sandbox says otherwise; see [`super::sandbox`].
    pub sandbox: Option<Sandbox>,
    /// Secret values to blank out of both streams as they arrive, so no
    /// spill file ever holds one; `None` when there are none.
    pub redactor: Option<std::sync::Arc<Redactor>>,
    /// Where the last line printed (on either stream, blanked) goes while
    /// the command runs; `None` when nobody watches.
    pub live: Option<LiveLine>,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited by itself (possibly killed by a signal it raised).
    Exited,
    /// It ran past its wall-clock limit and its group was killed.
    TimedOut,
    /// It printed nothing for the inactivity limit and its group was killed.
    Inactive,
    /// The turn was cancelled and its group was killed.
    Cancelled,
}

/// One captured stream, ready for the model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// What the model sees: the whole stream when it fits the cap, otherwise
    /// head + marker + tail. Invalid UTF-8 replaced, ANSI escapes stripped.
    pub text: String,
    /// Bytes the stream produced in all.
    pub total_bytes: u64,
    /// The file holding the whole stream, when it overflowed the cap.
    pub spilled: Option<PathBuf>,
    /// Bytes the spill cap dropped from the middle of the spill file (0:
    /// it holds the whole stream).
    pub spill_dropped: u64,
}

/// The result of [`run`].
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The exit code, when the process exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Whether it exited by itself or a limit ended it.
    pub ended: Ended,
    /// The captured standard output.
    pub stdout: Captured,
    /// The captured standard error.
    pub stderr: Captured,
    /// Wall time from spawn until the pipes were drained.
    pub duration: Duration,
}

/// Runs `spec.command` to completion, timeout or cancellation.
///
/// Limits are reported in [`Outcome::ended`] with the partial output kept.
/// Dropping the future kills the process group.
///
/// Through the launcher, background processes end with the command (their
/// PID namespace goes when its shell exits). Without it, they are not
/// killed when it exits normally, but their pipes are closed after
/// [`PIPE_DRAIN`].
///
/// # Errors
///
/// Only when the command cannot be started (missing `cwd`, no shell) or
/// cannot be waited for.
pub async fn run(spec: CommandSpec, cancel: CancellationToken) -> io::Result<Outcome> {
    let started = Instant::now();
    let mut command = match &spec.sandbox {
        // The launcher starts its own session (and so its own group, whose
        // id is its pid). Its stdin is the lifeline: a pipe only this
        // process writes to, whose EOF (when this process drops it or
        // dies, by any signal) ends the command's whole tree.
        Some(sandbox) => {
            let mut launcher = Command::new(&sandbox.launcher);
            launcher.stdin(Stdio::piped());
            launcher
        }
        None => {
            let mut shell = Command::new(shell());
            shell
                .arg("-c")
                .arg(&spec.command)
                .stdin(Stdio::null())
                .process_group(0);
            shell
        }
    };
    command
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (mut child, held) = match &spec.sandbox {
        Some(sandbox) => spawn_launcher(command, sandbox, &spec.command).await?,
        None => (command.spawn()?, false),
    };
    let _lifeline = child.stdin.take();
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| io::Error::other("the spawned shell has no usable pid"))?;
    // The child leads a new group whose id is its pid.
    let mut guard = GroupGuard {
        pgid: Pid::from_raw(pid),
        armed: true,
    };

    let capture = |stream: &'static str| {
        let target = SpillTarget {
            dir: spec.spill_dir.clone(),
            label: spec.label.clone(),
            stream,
            cap: spec.spill_cap,
        };
        Capture::new(spec.output_cap, target)
            .with_redactor(spec.redactor.as_ref())
            .with_live(spec.live.clone())
    };
    let mut pipes = Pipes {
        stdout: Pipe::new(child.stdout.take(), capture("stdout")),
        stderr: Pipe::new(child.stderr.take(), capture("stderr")),
    };

    let (status, ended) = match watch(&mut child, &mut pipes, &spec, started, &cancel).await? {
        Stop::Exited(status) => {
            // A normal exit: whatever it left running in the background stays.
            guard.disarm();
            (status, Ended::Exited)
        }
        Stop::Limit(ended) => {
            let status = terminate(&mut child, &mut pipes, guard.pgid, spec.kill_grace).await?;
            guard.disarm();
            (status, ended)
        }
    };

    if spec.sandbox.is_some() && !held {
        // The launcher's pids cgroup, which it cannot remove from inside
        // its own user namespace.
        // Off the result's path: nothing waits for it.
        let launcher = pid.unsigned_abs();
        drop(tokio::task::spawn_blocking(move || {
            super::sandbox::cgroup::remove_launcher_cgroup(launcher);
        }));
    }
    pipes.drain(after(Instant::now(), PIPE_DRAIN)).await;
    Ok(Outcome {
        exit_code: status.code(),
        signal: status.signal(),
        ended,
        stdout: pipes.stdout.capture.finish(),
        stderr: pipes.stderr.capture.finish(),
        duration: started.elapsed(),
    })
}

/// Starts the launcher for `text` (`command` has all but its arguments):
/// on the spawner thread, born in its pids cgroup, when there is one
/// ([`super::sandbox::spawner`]); else here, making its own. Returns the
/// child and whether the spawner's cgroup holds it.
async fn spawn_launcher(
    mut command: Command,
    sandbox: &Sandbox,
    text: &str,
) -> io::Result<(Child, bool)> {
    use super::sandbox::{layers::TASKS_PER_PROCESS, spawner};
    let tasks = sandbox
        .options
        .max_processes
        .saturating_mul(TASKS_PER_PROCESS);
    if tasks == 0 || !spawner::available() {
        command.args(sandbox.launcher_args(shell(), text, false));
        return Ok((command.spawn()?, false));
    }
    let held_args = sandbox.launcher_args(shell(), text, true);
    let own_args = sandbox.launcher_args(shell(), text, false);
    let runtime = tokio::runtime::Handle::current();
    let spawned = spawner::run(move |cgroup| {
        let held = cgroup.is_some_and(|c| c.allow(tasks).is_ok());
        command.args(if held { held_args } else { own_args });
        let _entered = runtime.enter();
        command.spawn().map(|child| (child, held))
    })
    .await;
    spawned.unwrap_or_else(|| Err(io::Error::other("the sandbox's spawner thread is gone")))
}

/// Why [`watch`] stopped.
enum Stop {
    /// The shell exited by itself.
    Exited(ExitStatus),
    /// A limit was hit; the group must be killed.
    Limit(Ended),
}

/// Reads output until the child exits or a limit is hit.
async fn watch(
    child: &mut Child,
    pipes: &mut Pipes,
    spec: &CommandSpec,
    started: Instant,
    cancel: &CancellationToken,
) -> io::Result<Stop> {
    let deadline = after(started, spec.timeout);
    let mut last_output = started;
    loop {
        // Not `biased`: a command flooding its pipes must not starve the timers.
        tokio::select! {
            status = child.wait() => return status.map(Stop::Exited),
            got_bytes = pipes.next(), if pipes.any_open() => {
                if got_bytes {
                    last_output = Instant::now();
                }
            }
            () = sleep_until(deadline) => return Ok(Stop::Limit(Ended::TimedOut)),
            () = sleep_until(after(last_output, spec.inactivity_timeout)) => {
                return Ok(Stop::Limit(Ended::Inactive));
            }
            () = cancel.cancelled() => return Ok(Stop::Limit(Ended::Cancelled)),
        }
    }
}

/// SIGTERM to the group, up to `grace` for the child to exit (still reading,
/// so a cleanup message is kept and a full pipe cannot block the exit), then
/// SIGKILL to the group, which also reaches grandchildren ignoring SIGTERM.
async fn terminate(
    child: &mut Child,
    pipes: &mut Pipes,
    pgid: Pid,
    grace: Duration,
) -> io::Result<ExitStatus> {
    signal_group(pgid, Signal::SIGTERM);
    let grace_end = after(Instant::now(), grace);
    let exited = loop {
        tokio::select! {
            status = child.wait() => break Some(status?),
            _ = pipes.next(), if pipes.any_open() => {}
            () = sleep_until(grace_end) => break None,
        }
    };
    signal_group(pgid, Signal::SIGKILL);
    match exited {
        Some(status) => Ok(status),
        None => child.wait().await,
    }
}

/// Sends `signal` to a process group. Failure means the group is already
/// gone (ESRCH), which is the outcome we want anyway.
fn signal_group(pgid: Pid, signal: Signal) {
    let _ = killpg(pgid, signal);
    // The launcher may not have made its session yet; its pid is the id.
    let _ = nix::sys::signal::kill(pgid, signal);
}

/// Kills the process group if [`run`] is dropped before it finishes (the
/// turn loop drops it on Ctrl+C).
struct GroupGuard {
    pgid: Pid,
    armed: bool,
}

impl GroupGuard {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
        }
    }
}

/// The shell to run commands with: bash from the agent's `PATH`, else
/// `/bin/sh`. Resolved once to an absolute path, because the child's own
/// environment (which may lack `PATH`) must not decide which shell runs.
fn shell() -> &'static Path {
    static SHELL: OnceLock<PathBuf> = OnceLock::new();
    SHELL.get_or_init(|| find_in_path("bash").unwrap_or_else(|| PathBuf::from(FALLBACK_SHELL)))
}

/// The first executable file called `name` in the agent's `PATH`.
fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Both output pipes of the child.
struct Pipes {
    stdout: Pipe<ChildStdout>,
    stderr: Pipe<ChildStderr>,
}

impl Pipes {
    fn any_open(&self) -> bool {
        self.stdout.reader.is_some() || self.stderr.reader.is_some()
    }

    /// Waits for the next chunk (or EOF) on either pipe and captures it.
    /// Returns whether bytes arrived. Cancel-safe: a chunk is captured in
    /// the same poll that reads it. Call only while [`Pipes::any_open`].
    async fn next(&mut self) -> bool {
        tokio::select! {
            got = self.stdout.pump(), if self.stdout.reader.is_some() => got,
            got = self.stderr.pump(), if self.stderr.reader.is_some() => got,
            else => false,
        }
    }

    /// Reads until both pipes are at EOF or `until` passes, then closes them.
    async fn drain(&mut self, until: Instant) {
        while self.any_open() {
            tokio::select! {
                _ = self.next() => {}
                () = sleep_until(until) => break,
            }
        }
        self.stdout.reader = None;
        self.stderr.reader = None;
    }
}

/// One output pipe and the capture it feeds.
struct Pipe<R> {
    /// `None` once the pipe reached EOF or failed.
    reader: Option<R>,
    capture: Capture,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Pipe<R> {
    fn new(reader: Option<R>, capture: Capture) -> Self {
        Pipe {
            reader,
            capture,
            buf: vec![0; READ_CHUNK],
        }
    }

    /// Reads one chunk into the capture; returns whether bytes arrived.
    async fn pump(&mut self) -> bool {
        let Some(reader) = self.reader.as_mut() else {
            return false;
        };
        match reader.read(&mut self.buf).await {
            Ok(n) if n > 0 => {
                self.capture.push(&self.buf[..n]);
                true
            }
            // EOF, or a read error we cannot recover from: stop reading.
            _ => {
                self.reader = None;
                false
            }
        }
    }
}

/// The bounded capture of one stream: the first `cap / 4` bytes (head), the
/// last `cap - cap / 4` bytes (tail), and, once the stream exceeds `cap`, a
/// spill file holding every byte.
///
/// Spill writes are plain blocking writes: they go to the page cache, one
/// chunk at a time, and keep this type synchronous and easy to test.
#[derive(Debug)]
struct Capture {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spill_to: SpillTarget,
    spill: Spill,
    /// Blanks secrets before bytes are kept or spilled.
    redactor: Option<StreamRedactor>,
    /// Reused output buffer of the redactor.
    clean: Vec<u8>,
    /// Gets the stream's last line after each chunk.
    live: Option<LiveLine>,
}

/// The state of a capture's spill file.
#[derive(Debug)]
enum Spill {
    /// The stream still fits the cap.
    NotNeeded,
    /// The stream overflowed; every byte (up to the spill cap) goes here.
    Writing(SpillFile),
    /// The file could not be created or written; head and tail only.
    Failed(io::Error),
}

impl Capture {
    fn new(cap: usize, spill_to: SpillTarget) -> Self {
        Capture {
            cap,
            head: Vec::with_capacity(cap / 4),
            tail: VecDeque::new(),
            total: 0,
            spill_to,
            spill: Spill::NotNeeded,
            redactor: None,
            clean: Vec::new(),
            live: None,
        }
    }

    /// Shows the stream's last line on `live` as the stream goes.
    fn with_live(mut self, live: Option<LiveLine>) -> Self {
        self.live = live;
        self
    }

    /// Blanks `redactor`'s secrets out of the stream before anything else
    /// sees it (head, tail and spill file alike, so a secret cut by the
    /// head/tail boundary cannot leave half of itself behind).
    fn with_redactor(mut self, redactor: Option<&std::sync::Arc<Redactor>>) -> Self {
        self.redactor = redactor.map(Redactor::stream);
        self
    }

    fn head_cap(&self) -> usize {
        self.cap / 4
    }

    fn tail_cap(&self) -> usize {
        self.cap - self.head_cap()
    }

    fn push(&mut self, chunk: &[u8]) {
        match self.redactor.as_mut() {
            None => self.keep(chunk),
            Some(redactor) => {
                let mut clean = std::mem::take(&mut self.clean);
                clean.clear();
                redactor.feed(chunk, &mut clean);
                self.keep(&clean);
                self.clean = clean;
            }
        }
        self.show_live();
    }

    /// Keeps a chunk of the (blanked) stream: head, tail, spill file.
    fn keep(&mut self, chunk: &[u8]) {
        let new_total = self.total + chunk.len() as u64;
        if matches!(self.spill, Spill::NotNeeded) && new_total > self.cap as u64 {
            // Nothing has been dropped yet, so head + tail is the whole stream.
            self.spill = match self.open_spill() {
                Ok(file) => Spill::Writing(file),
                Err(err) => Spill::Failed(err),
            };
        }
        if let Spill::Writing(file) = &mut self.spill {
            if let Err(err) = file.write(chunk) {
                self.spill = self.abandon_spill(err);
            }
        }

        let to_head = chunk.len().min(self.head_cap() - self.head.len());
        self.head.extend_from_slice(&chunk[..to_head]);
        let rest = &chunk[to_head..];
        let tail_cap = self.tail_cap();
        if rest.len() >= tail_cap {
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - tail_cap..]);
        } else {
            let excess = (self.tail.len() + rest.len()).saturating_sub(tail_cap);
            self.tail.drain(..excess);
            self.tail.extend(rest);
        }
        self.total = new_total;
    }

    /// Puts the stream's last whole or partial line on the live line: from
    /// what was kept plus the held-back lines that have ended.
    fn show_live(&self) {
        let Some(live) = &self.live else {
            return;
        };
        let held = self
            .redactor
            .as_ref()
            .map(StreamRedactor::held_lines)
            .unwrap_or_default();
        let mut window: Vec<u8> = if self.tail.is_empty() {
            self.head[self.head.len().saturating_sub(LIVE_WINDOW)..].to_vec()
        } else {
            let from = self.tail.len().saturating_sub(LIVE_WINDOW);
            self.tail.range(from..).copied().collect()
        };
        window.extend_from_slice(&held);
        if let Some(line) = last_line(&window) {
            live.set(&line);
        }
    }

    fn open_spill(&self) -> io::Result<SpillFile> {
        let mut file = SpillFile::create(&self.spill_to)?;
        let written = file.write(&self.head).and_then(|()| {
            let (front, back) = self.tail.as_slices();
            file.write(front)?;
            file.write(back)
        });
        match written {
            Ok(()) => Ok(file),
            Err(e) => {
                file.discard();
                Err(e)
            }
        }
    }

    /// Gives up on the spill file; a partial file would only mislead.
    fn abandon_spill(&mut self, err: io::Error) -> Spill {
        if let Spill::Writing(file) = std::mem::replace(&mut self.spill, Spill::NotNeeded) {
            file.discard();
        }
        Spill::Failed(err)
    }

    /// Renders the stream for the model.
    fn finish(mut self) -> Captured {
        if let Some(mut redactor) = self.redactor.take() {
            let mut rest = Vec::new();
            redactor.finish(&mut rest);
            self.keep(&rest);
        }
        let tail: Vec<u8> = self.tail.into();
        let omitted = self.total - (self.head.len() + tail.len()) as u64;
        let (marker, spilled) = match self.spill {
            // Still within the cap: head and tail together are the stream.
            Spill::NotNeeded => {
                let mut all = self.head;
                all.extend_from_slice(&tail);
                return Captured {
                    text: clean_for_model(&String::from_utf8_lossy(&all)),
                    total_bytes: self.total,
                    spilled: None,
                    spill_dropped: 0,
                };
            }
            Spill::Writing(file) => {
                let path = file.path().to_path_buf();
                match file.finish() {
                    Ok(done) => (
                        omission_marker(omitted, self.total, &done.path, done.dropped),
                        Some(done),
                    ),
                    Err(err) => {
                        let _ = std::fs::remove_file(&path);
                        (unsaved_marker(omitted, self.total, &err), None)
                    }
                }
            }
            Spill::Failed(err) => (unsaved_marker(omitted, self.total, &err), None),
        };
        let text = [
            clean_for_model(&String::from_utf8_lossy(&self.head)),
            marker,
            clean_for_model(&String::from_utf8_lossy(&tail)),
        ]
        .concat();
        Captured {
            text,
            total_bytes: self.total,
            spill_dropped: spilled.as_ref().map_or(0, |s| s.dropped),
            spilled: spilled.map(|s| s.path),
        }
    }
}

/// The line that replaces the middle of an overflowing stream, telling the
/// model where the stream is saved (whole, or head and tail when the spill
/// cap dropped `dropped` bytes) and how to look at it.
pub(crate) fn omission_marker(omitted: u64, total: u64, path: &Path, dropped: u64) -> String {
    if dropped > 0 {
        return format!(
            "\n[... {omitted} bytes omitted; the output ({total} bytes) passed the spill cap, so {} keeps its start and end and {dropped} bytes of its middle are gone; \
             read it with read_file (offset/limit) or grep ...]\n",
            path.display()
        );
    }
    format!(
        "\n[... {omitted} bytes omitted; the full output ({total} bytes) is saved at {}; \
         read it with read_file (offset/limit) or grep ...]\n",
        path.display()
    )
}

/// The marker when the spill file could not be written.
pub(crate) fn unsaved_marker(omitted: u64, total: u64, err: &io::Error) -> String {
    format!(
        "\n[... {omitted} bytes omitted; the full output ({total} bytes) could not be \
         saved: {err} ...]\n"
    )
}

/// Bytes at the end of a stream looked at for its last line.
const LIVE_WINDOW: usize = 512;

/// The last non-empty line of the end of a stream, cleaned as for the
/// model: escapes stripped, carriage-return progress collapsed to what a
/// terminal would show. Pure.
fn last_line(bytes: &[u8]) -> Option<String> {
    let text = clean_for_model(&String::from_utf8_lossy(bytes));
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// Turns terminal output into plain text for the model.
///
/// - ANSI escapes are removed: CSI (`ESC [` … final byte), OSC (`ESC ]` …
///   BEL or `ESC \`), two-byte `ESC x` and charset sequences like `ESC ( B`.
///   A malformed sequence ends at the first character that cannot belong to
///   it (kept as text), an unterminated OSC at the end of its line, so a
///   stray escape cannot swallow the rest of the output.
/// - Carriage-return progress lines collapse: a line keeps only the text
///   after its last `\r`. `\r\n` is a plain newline, and a trailing `\r` with
///   nothing after it on the line clears nothing.
#[must_use]
pub fn clean_for_model(text: &str) -> String {
    /// Where we are in an escape sequence.
    #[derive(Clone, Copy)]
    enum State {
        Text,
        Esc,
        /// `ESC` and intermediate bytes, as in `ESC ( B`.
        EscIntermediate,
        Csi,
        Osc,
    }
    const ESC: char = '\x1b';
    const BEL: char = '\x07';

    let mut out = String::with_capacity(text.len());
    let mut line_start = 0;
    // A `\r` was seen; the line is cleared when more text follows on it.
    let mut pending_cr = false;
    let mut state = State::Text;
    for c in text.chars() {
        state = match (state, c) {
            (State::Esc, '[') => State::Csi,
            (State::Esc, ']') => State::Osc,
            (State::Esc | State::EscIntermediate, '\x20'..='\x2f') => State::EscIntermediate,
            (State::Esc | State::EscIntermediate, '\x30'..='\x7e') => State::Text,
            (State::Csi, '\x20'..='\x3f') => State::Csi,
            (State::Csi, '\x40'..='\x7e') => State::Text,
            (State::Osc, BEL) => State::Text,
            (State::Osc, ESC) => State::Esc,
            (State::Osc, c) if c != '\n' => State::Osc,
            (_, ESC) => State::Esc,
            (_, '\r') => {
                pending_cr = true;
                State::Text
            }
            (_, '\n') => {
                pending_cr = false;
                out.push('\n');
                line_start = out.len();
                State::Text
            }
            (_, c) => {
                if pending_cr {
                    out.truncate(line_start);
                    pending_cr = false;
                }
                out.push(c);
                State::Text
            }
        };
    }
    out
}

#[cfg(test)]
// A failed expectation in a test is a test failure, so panicking is right.
mod tests {
    use super::*;
    use std::future::Future;

    /// Upper bound for any single await in these tests.
    const TEST_WAIT: Duration = Duration::from_secs(20);

    async fn bounded<F: Future>(fut: F) -> F::Output {
        tokio::time::timeout(TEST_WAIT, fut)
            .await
            .expect("test step timed out")
    }

    fn spec(command: &str, dir: &Path) -> CommandSpec {
        CommandSpec {
            command: command.to_string(),
            cwd: dir.to_path_buf(),
            env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
            timeout: Duration::from_secs(10),
            inactivity_timeout: Duration::from_secs(10),
            kill_grace: Duration::from_millis(500),
            output_cap: 30_000,
            spill_dir: dir.join("spill"),
            label: "call-1".into(),
            spill_cap: crate::runtime::spill::DEFAULT_SPILL_CAP,
            sandbox: None,
            redactor: None,
            live: None,
        }
    }

    fn target(dir: &Path) -> SpillTarget {
        SpillTarget {
            dir: dir.to_path_buf(),
            label: "x".into(),
            stream: "stdout",
            cap: crate::runtime::spill::DEFAULT_SPILL_CAP,
        }
    }

    async fn run_ok(spec: CommandSpec) -> Outcome {
        bounded(run(spec, CancellationToken::new()))
            .await
            .expect("run failed")
    }

    /// Live (non-zombie) processes in process group `pgid`, from /proc.
    /// Zombies are skipped: whether they are reaped depends on PID 1.
    fn live_members(pgid: i32) -> usize {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return 0;
        };
        entries
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                // "pid (comm) state ppid pgrp ..."; comm may contain spaces.
                let Some((_, rest)) = stat.rsplit_once(')') else {
                    return false;
                };
                let fields: Vec<&str> = rest.split_whitespace().collect();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
            })
            .count()
    }

    async fn assert_group_gone(pgid: i32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while live_members(pgid) > 0 {
            assert!(Instant::now() < deadline, "process group {pgid} survived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn capture_small_stream_is_kept_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s");
        let mut cap = Capture::new(100, target(&path));
        cap.push(b"hello ");
        cap.push(&[b'x'; 94]);
        let got = cap.finish();
        assert_eq!(got.total_bytes, 100);
        assert_eq!(got.text, format!("hello {}", "x".repeat(94)));
        assert_eq!(got.spilled, None);
        assert!(!path.exists());
    }

    #[test]
    fn capture_keeps_head_tail_and_spills_everything() {
        let data = pattern(10_000);
        for sizes in [
            &[1usize][..],
            &[7, 13, 1],
            &[99, 100, 101],
            &[5000],
            &[10_000],
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let spill_dir = dir.path().join("spill");
            let mut cap = Capture::new(100, target(&spill_dir));
            let mut fed = 0;
            for &size in sizes.iter().cycle() {
                if fed == data.len() {
                    break;
                }
                let end = (fed + size).min(data.len());
                cap.push(&data[fed..end]);
                fed = end;
            }
            assert_eq!(cap.total, 10_000);
            assert_eq!(cap.head, &data[..25]);
            assert_eq!(Vec::from(cap.tail.clone()), &data[10_000 - 75..]);
            let got = cap.finish();
            let path = got.spilled.expect("spilled");
            assert_eq!(path.parent(), Some(spill_dir.as_path()));
            assert_eq!(std::fs::read(&path).expect("spill file"), data, "{sizes:?}");
        }
    }

    #[test]
    fn capture_renders_head_marker_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cap = Capture::new(8, target(dir.path()));
        cap.push(b"ab");
        cap.push(b"cdefghijkl");
        let got = cap.finish();
        let marker = omission_marker(4, 12, got.spilled.as_deref().expect("spilled"), 0);
        assert_eq!(got.text, format!("ab{marker}ghijkl"));
        assert!(
            got.text.starts_with("ab\n[... 4 bytes omitted"),
            "{}",
            got.text
        );
    }

    #[test]
    fn the_live_line_is_the_last_printed_line_cleaned_and_blanked() {
        let secret = "sk-live-0123456789abcdef";
        let redactor = std::sync::Arc::new(Redactor::new([secret.to_string()]));
        let dir = tempfile::tempdir().expect("tempdir");
        let live = LiveLine::default();
        let mut cap = Capture::new(100, target(dir.path()))
            .with_redactor(Some(&redactor))
            .with_live(Some(live.clone()));
        cap.push(b"building\n");
        assert_eq!(live.get(), "building");
        // Progress redrawn with \r shows as a terminal would; escapes go.
        cap.push(b"\x1b[32m 10%\r 55%\x1b[0m\n\n");
        assert_eq!(live.get(), "55%");
        // Past the head, from the tail; a secret split across chunks is
        // blanked before the line is shown.
        let (first, rest) = secret.as_bytes().split_at(9);
        cap.push(format!("{}\nkey ", "x".repeat(150)).as_bytes());
        cap.push(first);
        cap.push(rest);
        cap.push(b" end\n");
        assert_eq!(live.get(), "key [redacted] end");
    }

    #[test]
    fn capture_blanks_secrets_in_the_spill_file_and_around_the_cut() {
        let secret = "sk-live-0123456789abcdef";
        let redactor = std::sync::Arc::new(Redactor::new([secret.to_string()]));
        // The secret sits at the head/tail cut, deep in the middle, and at
        // the end; chunk sizes put boundaries inside it.
        let data = format!(
            "{}{secret}{}{secret}{}{secret}",
            "a".repeat(20),
            "b".repeat(200_000),
            "c".repeat(50)
        );
        for size in [1, 7, 4096, 65_536] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut cap = Capture::new(100, target(dir.path())).with_redactor(Some(&redactor));
            for chunk in data.as_bytes().chunks(size) {
                cap.push(chunk);
            }
            let got = cap.finish();
            let path = got.spilled.clone().expect("spilled");
            let spilled = std::fs::read_to_string(&path).expect("spill file");
            let expected = data.replace(secret, "[redacted]");
            assert_eq!(spilled, expected, "chunks of {size}");
            assert!(
                !got.text.contains("sk-live") && !got.text.contains("0123"),
                "{}",
                got.text
            );
            assert!(got.text.ends_with("c[redacted]"), "{}", got.text);
            assert_eq!(got.total_bytes, expected.len() as u64);
        }
    }

    #[test]
    fn capture_survives_unwritable_spill_dir() {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        // A directory under a regular file cannot be created.
        let mut cap = Capture::new(10, target(&file.path().join("spill")));
        cap.push(&pattern(50));
        let got = cap.finish();
        assert_eq!(got.spilled, None);
        assert_eq!(got.total_bytes, 50);
        assert!(got.text.contains("could not be saved"), "{}", got.text);
    }

    #[test]
    fn clean_strips_ansi_escapes() {
        assert_eq!(clean_for_model("\x1b[31mred\x1b[0m\n"), "red\n");
        assert_eq!(clean_for_model("\x1b[1;32;40mok\x1b[K"), "ok");
        assert_eq!(clean_for_model("\x1b]0;title\x07text"), "text");
        assert_eq!(
            clean_for_model("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"),
            "link"
        );
        assert_eq!(clean_for_model("a\x1b(Bb\x1b=c"), "abc");
        assert_eq!(clean_for_model("end\x1b"), "end");
        assert_eq!(clean_for_model("a\x1b\nb"), "a\nb");
        assert_eq!(clean_for_model("\x1b(\x1b[0mx"), "x");
        assert_eq!(clean_for_model("\x1b[12é"), "é");
        assert_eq!(clean_for_model("\x1b]unterminated\nnext"), "\nnext");
    }

    #[test]
    fn clean_collapses_carriage_returns() {
        assert_eq!(clean_for_model("10%\r50%\r100%\ndone\n"), "100%\ndone\n");
        assert_eq!(clean_for_model("a\r\nb\r\n"), "a\nb\n");
        assert_eq!(clean_for_model("first\nabc\rde"), "first\nde");
        assert_eq!(clean_for_model("done\r"), "done");
        assert_eq!(clean_for_model("abc\r\r\n"), "abc\n");
        assert_eq!(clean_for_model("50%\r\x1b[K100%\n"), "100%\n");
        assert_eq!(clean_for_model("naïve ✓\n"), "naïve ✓\n");
    }

    #[tokio::test]
    async fn exit_code_and_both_streams() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_ok(spec("echo hello; echo err >&2; exit 3", dir.path())).await;
        assert_eq!(out.exit_code, Some(3));
        assert_eq!(out.signal, None);
        assert_eq!(out.ended, Ended::Exited);
        assert_eq!(out.stdout.text, "hello\n");
        assert_eq!(out.stderr.text, "err\n");
        assert_eq!(out.stdout.total_bytes, 6);
    }

    #[tokio::test]
    async fn huge_limits_do_not_overflow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec("echo ok", dir.path());
        s.timeout = Duration::MAX;
        s.inactivity_timeout = Duration::MAX;
        let out = run_ok(s).await;
        assert_eq!(out.stdout.text, "ok\n");
    }

    #[tokio::test]
    async fn stdin_is_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_ok(spec("cat", dir.path())).await;
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stdout.text, "");
    }

    #[tokio::test]
    async fn missing_cwd_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = spec("true", &dir.path().join("nope"));
        assert!(bounded(run(spec, CancellationToken::new())).await.is_err());
    }

    #[tokio::test]
    async fn huge_output_is_bounded_and_spilled_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_ok(spec("head -c 50000000 /dev/zero | tr '\\0' x", dir.path())).await;
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stdout.total_bytes, 50_000_000);
        assert!(out.stdout.text.len() < 40_000, "{}", out.stdout.text.len());
        assert!(out.stdout.text.contains("bytes omitted"));
        let path = out.stdout.spilled.expect("spilled");
        assert_eq!(path.parent(), Some(dir.path().join("spill").as_path()));
        assert_eq!(out.stdout.spill_dropped, 0);
        let meta = std::fs::metadata(&path).expect("spill file");
        assert_eq!(meta.len(), 50_000_000);
        assert_eq!(out.stderr.spilled, None);
    }

    #[tokio::test]
    async fn timeout_keeps_partial_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec("echo start; sleep 30", dir.path());
        s.timeout = Duration::from_millis(500);
        let t0 = Instant::now();
        let out = run_ok(s).await;
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(out.ended, Ended::TimedOut);
        assert_eq!(out.stdout.text, "start\n");
        assert_eq!(out.exit_code, None);
        assert_eq!(out.signal, Some(Signal::SIGTERM as i32));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec("sleep 1000 & sleep 1000 & echo $$; wait", dir.path());
        s.timeout = Duration::from_millis(500);
        let out = run_ok(s).await;
        assert_eq!(out.ended, Ended::TimedOut);
        let pgid: i32 = out.stdout.text.trim().parse().expect("pid");
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn sigterm_ignorers_get_sigkill() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec(
            "trap '' TERM; echo $$; while :; do sleep 0.1; done",
            dir.path(),
        );
        s.timeout = Duration::from_millis(300);
        s.kill_grace = Duration::from_millis(200);
        let out = run_ok(s).await;
        assert_eq!(out.ended, Ended::TimedOut);
        assert_eq!(out.signal, Some(Signal::SIGKILL as i32));
        let pgid: i32 = out.stdout.text.trim().parse().expect("pid");
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn inactivity_ends_a_silent_command() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec("echo a; sleep 30", dir.path());
        s.inactivity_timeout = Duration::from_millis(300);
        s.timeout = Duration::from_secs(30);
        let t0 = Instant::now();
        let out = run_ok(s).await;
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(out.ended, Ended::Inactive);
        assert_eq!(out.stdout.text, "a\n");
    }

    #[tokio::test]
    async fn cancel_kills_the_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            trigger.cancel();
        });
        let out = bounded(run(spec("echo $$; sleep 30", dir.path()), cancel))
            .await
            .expect("run failed");
        assert_eq!(out.ended, Ended::Cancelled);
        let pgid: i32 = out.stdout.text.trim().parse().expect("pid");
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("pid");
        let command = format!("echo $$ > {}; sleep 30", pid_file.display());
        let fut = run(spec(&command, dir.path()), CancellationToken::new());
        let mut fut = Box::pin(fut);
        let deadline = Instant::now() + Duration::from_secs(5);
        let pgid: i32 = loop {
            tokio::select! {
                _ = &mut fut => panic!("command finished early"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            let written = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if let Ok(pid) = written.trim().parse() {
                break pid;
            }
            assert!(Instant::now() < deadline, "pid never written");
        };
        // Proves the /proc scan sees the group while it is alive.
        assert!(live_members(pgid) > 0);
        drop(fut);
        assert_group_gone(pgid).await;
    }

    #[tokio::test]
    async fn environment_is_only_what_was_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec("env", dir.path());
        s.env.push(("FOO".into(), "bar".into()));
        let out = run_ok(s).await;
        let lines: Vec<&str> = out.stdout.text.lines().collect();
        assert!(lines.contains(&"FOO=bar"), "{lines:?}");
        assert!(!lines.iter().any(|l| l.starts_with("HOME=")), "{lines:?}");
    }

    #[tokio::test]
    async fn ansi_is_stripped_from_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_ok(spec("printf '\\033[31mred\\033[0m\\n'", dir.path())).await;
        assert_eq!(out.stdout.text, "red\n");
    }

    #[tokio::test]
    async fn background_grandchild_does_not_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t0 = Instant::now();
        let out = run_ok(spec("sleep 5 & echo done", dir.path())).await;
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(out.ended, Ended::Exited);
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stdout.text, "done\n");
    }
}

//! The one Rhai engine, its limits, and the per-call context.
//!
//! The engine is built once per process ([`engine`]) from `Engine::new_raw`
//! plus a shared standard package, with every limit set explicitly so debug
//! and release builds behave alike, `eval` and `import` disabled, and
//! `print`/`debug` routed to the agent's output instead of stdout.
//!
//! A script call runs on a blocking thread inside a [`CallGuard`], which
//! installs a thread-local deadline, a cancel token and the runtime the host
//! functions use. `on_progress` checks the deadline and the token every 256
//! operations, so `loop {}` ends within about a second. Time spent inside
//! host functions (a shell command) does not count against the script's
//! budget: each host call moves the deadline forward by its own duration.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use rhai::packages::{Package, StandardPackage};
use rhai::{Dynamic, Engine, EvalAltResult};
use tokio_util::sync::CancellationToken;

use crate::runtime::Runtime;

/// CPU budget of one script call (a handler, a hook). One second is far
/// more than any sane handler needs and short enough that a runaway loop
/// costs the person nothing noticeable.
pub const SCRIPT_CALL_BUDGET: Duration = Duration::from_secs(1);

/// Backstop on operations per evaluation, in case the clock check is ever
/// skipped. About ten seconds of pure script work.
pub const MAX_OPERATIONS: u64 = 100_000_000;
/// Nested function calls; the same in debug and release builds.
pub const MAX_CALL_LEVELS: usize = 64;
/// Expression nesting; also guards the parser against deep nesting.
pub const MAX_EXPR_DEPTH: usize = 64;
/// Largest string a script may build (4 MiB).
pub const MAX_STRING_SIZE: usize = 4 << 20;
/// Size checks are O(n) per mutation, so arrays and maps stay modest.
pub const MAX_ARRAY_SIZE: usize = 20_000;
pub const MAX_MAP_SIZE: usize = 10_000;
pub const MAX_VARIABLES: usize = 10_000;
pub const MAX_FUNCTIONS: usize = 2_000;

/// Marker tokens passed through `on_progress`. Host-only types, so a
/// script cannot forge them with `throw`.
#[derive(Clone, Debug)]
pub struct DeadlineExceeded;
#[derive(Clone, Debug)]
pub struct CallCancelled;

/// What a script's `print` and `debug` lines go to.
pub type Printer = Arc<dyn Fn(&str) + Send + Sync>;

static PRINTER: RwLock<Option<Printer>> = RwLock::new(None);

/// Lines printed before a printer was installed (while the scripts load);
/// handed to the printer when it comes.
static EARLY: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Most early lines kept: a script printing in a loop at load time must
/// not grow memory without bound.
const MAX_EARLY_LINES: usize = 200;

/// Routes script `print`/`debug` output; the CLI installs one that turns
/// each line into an event for the UI. Lines printed earlier go to it
/// first.
pub fn set_printer(printer: Printer) {
    let early = EARLY
        .lock()
        .map(|mut e| std::mem::take(&mut *e))
        .unwrap_or_default();
    for line in &early {
        printer(line);
    }
    if let Ok(mut slot) = PRINTER.write() {
        *slot = Some(printer);
    }
}

/// What a script's `emit(kind, data)` goes to: the CLI installs one that
/// turns each into an [`crate::protocol::Event::ScriptEvent`].
pub type Emitter = Arc<dyn Fn(&str, serde_json::Value) + Send + Sync>;

static EMITTER: RwLock<Option<Emitter>> = RwLock::new(None);

/// Routes script `emit` calls. Before one is installed (`agent check`,
/// tests) they go nowhere.
pub fn set_emitter(emitter: Emitter) {
    if let Ok(mut slot) = EMITTER.write() {
        *slot = Some(emitter);
    }
}

/// Hands one emitted event to the emitter, if any.
pub(super) fn emit_event(kind: &str, data: serde_json::Value) {
    let emitter = EMITTER.read().ok().and_then(|e| e.clone());
    if let Some(e) = emitter {
        e(kind, data);
    }
}

fn print_line(line: &str) {
    let printer = PRINTER.read().ok().and_then(|p| p.clone());
    match printer {
        Some(p) => p(line),
        None => {
            if let Ok(mut early) = EARLY.lock()
                && early.len() < MAX_EARLY_LINES
            {
                early.push(line.to_string());
            }
        }
    }
}

struct CallState {
    deadline: Instant,
    cancel: CancellationToken,
    runtime: Option<Arc<Runtime>>,
    handle: Option<tokio::runtime::Handle>,
}

thread_local! {
    static CALL: RefCell<Option<CallState>> = const { RefCell::new(None) };
}

/// Installs the per-call context on this thread; clears it when dropped,
/// even on panic.
pub struct CallGuard(());

impl CallGuard {
    pub fn enter(
        budget: Duration,
        cancel: CancellationToken,
        runtime: Option<Arc<Runtime>>,
        handle: Option<tokio::runtime::Handle>,
    ) -> CallGuard {
        CALL.with(|c| {
            *c.borrow_mut() = Some(CallState {
                deadline: Instant::now() + budget,
                cancel,
                runtime,
                handle,
            })
        });
        CallGuard(())
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        CALL.with(|c| *c.borrow_mut() = None);
    }
}

/// The runtime, tokio handle and cancel token of the current call, for host
/// functions. Errors when called outside a call (e.g. at load time).
pub fn call_context()
-> Result<(Arc<Runtime>, tokio::runtime::Handle, CancellationToken), Box<EvalAltResult>> {
    CALL.with(|c| {
        let state = c.borrow();
        match state.as_ref() {
            Some(CallState {
                runtime: Some(rt),
                handle: Some(h),
                cancel,
                ..
            }) => Ok((rt.clone(), h.clone(), cancel.clone())),
            _ => Err(
                "this function can only be used inside a tool handler, not while the script loads"
                    .into(),
            ),
        }
    })
}

/// Moves the current call's deadline forward by `spent`: time inside a host
/// function is not script time.
pub fn credit_host_time(spent: Duration) {
    CALL.with(|c| {
        if let Some(state) = c.borrow_mut().as_mut() {
            state.deadline += spent;
        }
    });
}

fn check_progress(ops: u64) -> Option<Dynamic> {
    if ops & 0xff != 0 {
        return None;
    }
    CALL.with(|c| {
        let state = c.borrow();
        let state = state.as_ref()?;
        if state.cancel.is_cancelled() {
            return Some(Dynamic::from(CallCancelled));
        }
        (Instant::now() > state.deadline).then(|| Dynamic::from(DeadlineExceeded))
    })
}

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// The process's engine, built on first use.
pub fn engine() -> &'static Engine {
    ENGINE.get_or_init(build_engine)
}

fn build_engine() -> Engine {
    static STD: OnceLock<StandardPackage> = OnceLock::new();
    let mut engine = Engine::new_raw();
    STD.get_or_init(StandardPackage::new)
        .register_into_engine(&mut engine);
    engine.set_max_strings_interned(1024);
    engine
        .set_max_operations(MAX_OPERATIONS)
        .set_max_call_levels(MAX_CALL_LEVELS)
        .set_max_expr_depths(MAX_EXPR_DEPTH, MAX_EXPR_DEPTH)
        .set_max_string_size(MAX_STRING_SIZE)
        .set_max_array_size(MAX_ARRAY_SIZE)
        .set_max_map_size(MAX_MAP_SIZE)
        .set_max_variables(MAX_VARIABLES)
        .set_max_functions(MAX_FUNCTIONS)
        .set_max_modules(0)
        .set_strict_variables(true);
    engine.disable_symbol("eval");
    engine.disable_symbol("import");
    engine.on_print(print_line);
    engine.on_debug(|text, _source, pos| match (pos.line(), pos.position()) {
        (Some(l), Some(c)) => print_line(&format!("debug {l}:{c}: {text}")),
        _ => print_line(&format!("debug: {text}")),
    });
    engine.on_progress(check_progress);
    super::api::register(&mut engine);
    engine
}

/// Whether an error is our deadline or cancel marker, and which.
pub fn termination_kind(err: &EvalAltResult) -> Option<&'static str> {
    match err.unwrap_inner() {
        EvalAltResult::ErrorTerminated(token, _) if token.is::<DeadlineExceeded>() => {
            Some("timeout")
        }
        EvalAltResult::ErrorTerminated(token, _) if token.is::<CallCancelled>() => {
            Some("cancelled")
        }
        _ => None,
    }
}

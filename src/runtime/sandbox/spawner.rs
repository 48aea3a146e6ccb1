//! The thread that starts the sandbox's launchers, where its pids cgroup
//! can hold it alone (cgroup v1).
//!
//! A launcher that moves itself into a fresh pids cgroup waits 8-16 ms in
//! the kernel (see [`super::cgroup`]). Instead, one thread of the agent
//! moves once, in the background when the session's sandbox is set up,
//! and every launcher it forks is born in that cgroup: the limit is set
//! before each start ([`ThreadCgroup::allow`]) and the launcher only
//! reads it ([`super::cgroup::PidsCgroup::held`]). Where the thread cannot
//! be moved (cgroup v2, no writable hierarchy), jobs are told so and the
//! launcher makes its own cgroup as before.
//!
//! Commands run one at a time (the loop runs calls in order), so the
//! shared cgroup bounds each command as its own would; two at once would
//! share the headroom of both.

use std::sync::OnceLock;
use std::sync::mpsc;

use super::cgroup::ThreadCgroup;

/// What the spawner thread runs: given its cgroup, when it has one.
type Job = Box<dyn FnOnce(Option<&ThreadCgroup>) + Send>;

/// The spawner's queue, once started; `None` when the thread could not
/// be created.
static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

/// The spawner thread's stack: it forks and writes two small files.
const STACK_SIZE: usize = 256 * 1024;

/// Starts the spawner thread, once per process. Returns at once: the
/// thread moves into its cgroup on its own, and a job sent meanwhile waits
/// for that.
pub fn start() {
    SPAWNER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("agent-spawn".into())
            .stack_size(STACK_SIZE)
            .spawn(move || {
                let cgroup = ThreadCgroup::for_this_thread().ok();
                for job in queue {
                    job(cgroup.as_ref());
                }
            })
            .ok()
            .map(|_| jobs)
    });
}

/// Whether [`run`] has a thread to run on.
pub fn available() -> bool {
    SPAWNER.get().is_some_and(Option::is_some)
}

/// Runs `job` on the spawner thread and returns what it returned; `None`
/// when there is no spawner ([`available`]) or it is gone.
pub async fn run<T: Send + 'static>(
    job: impl FnOnce(Option<&ThreadCgroup>) -> T + Send + 'static,
) -> Option<T> {
    let jobs = SPAWNER.get()?.as_ref()?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    jobs.send(Box::new(move |cgroup| {
        let _ = tx.send(job(cgroup));
    }))
    .ok()?;
    rx.await.ok()
}

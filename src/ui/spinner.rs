//! The spinner shown on stderr while waiting for the model's first token,
//! and while a tool runs: a frame, what it waits for, and the seconds so
//! far.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Time between spinner frames.
const FRAME: std::time::Duration = std::time::Duration::from_millis(100);

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

pub struct Spinner {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Spinner {
    /// Starts spinning with `label` ("waiting for the model").
    pub fn start(label: String) -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let mut i = 0;
            while !flag.load(Ordering::Relaxed) {
                {
                    let mut e = std::io::stderr().lock();
                    let _ = write!(
                        e,
                        "\r\x1b[2K{} {label}… {}s",
                        FRAMES[i % FRAMES.len()],
                        started.elapsed().as_secs()
                    );
                    let _ = e.flush();
                }
                i += 1;
                std::thread::sleep(FRAME);
            }
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
        });
        Spinner { stop, thread }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

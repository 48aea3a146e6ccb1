//! A tiny timing harness shared by the bench targets (`harness = false`,
//! no criterion).
//!
//! [`Bench::batched`] warms an operation up, picks a batch size so that one
//! sample takes about [`SAMPLE_TIME`], takes [`SAMPLES`] samples and reports
//! the median and p90 of the per-operation time (each sample is the mean of
//! its batch, so p90 is the spread between batches, not a per-call tail).
//! [`Bench::each`] times single calls, each on fresh state built outside
//! the timed region, for operations that change what they run on.
//!
//! Every result is printed as one row with its target, if it has one, and
//! whether the target was met. Arguments that do not start with `-` filter
//! the measurements by substring, like `cargo bench -- sse`.

#![allow(dead_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Wall time of one batched sample.
pub const SAMPLE_TIME: Duration = Duration::from_millis(2);
/// Samples per batched measurement.
pub const SAMPLES: usize = 100;
/// Warm-up time before a batched measurement.
pub const WARM_UP: Duration = Duration::from_millis(100);

/// What a measurement should reach.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// The median time per operation must stay under this.
    Under(Duration),
    /// The median throughput must stay above this many MB/s (10^6 bytes).
    AboveMbps(f64),
    /// The median size must stay under this many MB (10^6 bytes).
    UnderMb(f64),
}

/// The result of one measurement.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median: Duration,
    pub p90: Duration,
}

/// Collects and prints the rows of one bench binary.
pub struct Bench {
    filters: Vec<String>,
    missed: usize,
}

impl Bench {
    /// Reads the filters from the command line and prints the header.
    pub fn new(title: &str) -> Bench {
        let filters = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        println!("\n{title}");
        println!(
            "{:<58} {:>12} {:>12}  target",
            "measurement", "median", "p90"
        );
        Bench { filters, missed: 0 }
    }

    /// Whether a measurement of this name should run.
    pub fn wants(&self, name: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| name.contains(f.as_str()))
    }

    /// Times `op` in batches; see the module doc.
    pub fn batched<R>(
        &mut self,
        name: &str,
        target: Option<Target>,
        op: impl FnMut() -> R,
    ) -> Option<Stats> {
        if !self.wants(name) {
            return None;
        }
        let mut times = sample_sync(op);
        let stats = summarise(&mut times);
        self.row(name, stats, target, None);
        Some(stats)
    }

    /// Times `samples` single calls of `op`, each on a value `setup` built
    /// outside the timed region; `op`'s result is dropped outside it too.
    pub fn each<S, R>(
        &mut self,
        name: &str,
        target: Option<Target>,
        samples: usize,
        mut setup: impl FnMut() -> S,
        mut op: impl FnMut(S) -> R,
    ) -> Option<Stats> {
        if !self.wants(name) {
            return None;
        }
        let mut times = Vec::with_capacity(samples);
        for i in 0..samples + samples / 10 + 1 {
            let state = setup();
            let t = Instant::now();
            let out = black_box(op(black_box(state)));
            let elapsed = t.elapsed().as_secs_f64();
            drop(out);
            // The first tenth warms caches and is not kept.
            if i > samples / 10 {
                times.push(elapsed);
            }
        }
        let stats = summarise(&mut times);
        self.row(name, stats, target, None);
        Some(stats)
    }

    /// Times `op` over `bytes` of input, `samples` times after `warm_up`
    /// unrecorded runs, and reports time and throughput.
    pub fn throughput<R>(
        &mut self,
        name: &str,
        target: Option<Target>,
        bytes: usize,
        (warm_up, samples): (usize, usize),
        mut op: impl FnMut() -> R,
    ) -> Option<Stats> {
        if !self.wants(name) {
            return None;
        }
        for _ in 0..warm_up {
            black_box(op());
        }
        let mut times: Vec<f64> = (0..samples)
            .map(|_| {
                let t = Instant::now();
                black_box(op());
                t.elapsed().as_secs_f64()
            })
            .collect();
        let stats = summarise(&mut times);
        self.row(name, stats, target, Some(bytes));
        Some(stats)
    }

    /// Prints a row computed from other rows: the difference of two
    /// medians (a difference of p90s would mean nothing, so none is shown).
    pub fn difference(&mut self, name: &str, a: Option<Stats>, b: Option<Stats>) {
        let (Some(a), Some(b)) = (a, b) else { return };
        let median = show(a.median.saturating_sub(b.median));
        println!("{name:<58} {median:>12} {:>12}", "-");
    }

    /// Reports times (in seconds) that `measure` takes elsewhere: in child
    /// processes, or on a runtime with [`sample_async`].
    pub fn sampled(
        &mut self,
        name: &str,
        target: Option<Target>,
        measure: impl FnOnce() -> Vec<f64>,
    ) -> Option<Stats> {
        if !self.wants(name) {
            return None;
        }
        let mut times = measure();
        if times.is_empty() {
            println!("{name:<58} {:>12}", "unavailable");
            return None;
        }
        let stats = summarise(&mut times);
        self.row(name, stats, target, None);
        Some(stats)
    }

    /// Reports sizes in bytes (peak RSS of child processes, say).
    pub fn sizes(&mut self, name: &str, target: Option<Target>, mut sizes: Vec<f64>) {
        if !self.wants(name) {
            return;
        }
        if sizes.is_empty() {
            println!("{name:<58} {:>12}", "unavailable");
            return;
        }
        sizes.sort_by(f64::total_cmp);
        let at = |q: f64| sizes[((sizes.len() - 1) as f64 * q).round() as usize] / 1e6;
        let (median, p90) = (at(0.5), at(0.9));
        let verdict = match target {
            Some(Target::UnderMb(limit)) => {
                let met = median < limit;
                self.missed += usize::from(!met);
                format!("< {limit} MB {}", if met { "met" } else { "MISSED" })
            }
            _ => String::new(),
        };
        let (median, p90) = (format!("{median:.1} MB"), format!("{p90:.1} MB"));
        println!("{name:<58} {median:>12} {p90:>12}  {verdict}");
    }

    fn row(&mut self, name: &str, stats: Stats, target: Option<Target>, bytes: Option<usize>) {
        let (median, p90) = match bytes {
            Some(b) => (
                format!("{:.0} MB/s", mbps(b, stats.median)),
                // The slower tail: p90 of time is the p10 of throughput.
                format!("{:.0} MB/s", mbps(b, stats.p90)),
            ),
            None => (show(stats.median), show(stats.p90)),
        };
        let verdict = match target {
            None => String::new(),
            Some(Target::Under(limit)) => {
                let met = stats.median < limit;
                self.missed += usize::from(!met);
                format!("< {} {}", show(limit), if met { "met" } else { "MISSED" })
            }
            Some(Target::AboveMbps(limit)) => {
                let met = bytes.is_some_and(|b| mbps(b, stats.median) > limit);
                self.missed += usize::from(!met);
                format!("> {limit:.0} MB/s {}", if met { "met" } else { "MISSED" })
            }
            Some(Target::UnderMb(_)) => String::new(),
        };
        println!("{name:<58} {median:>12} {p90:>12}  {verdict}");
    }

    /// Prints how many targets were missed.
    pub fn finish(self) {
        if self.missed > 0 {
            println!("{} target(s) missed", self.missed);
        }
    }
}

/// The batched loop of [`Bench::batched`] for an async operation; returns
/// the per-operation time of each sample, for [`Bench::sampled`].
pub async fn sample_async<F, Fut>(mut op: F) -> Vec<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future,
{
    let started = Instant::now();
    let mut calls = 0u64;
    while started.elapsed() < WARM_UP || calls < 3 {
        black_box(op().await);
        calls += 1;
    }
    let batch = batch_size(started.elapsed(), calls);
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        for _ in 0..batch {
            black_box(op().await);
        }
        times.push(t.elapsed().as_secs_f64() / batch as f64);
    }
    times
}

/// The batched loop of [`Bench::batched`], returning the per-operation
/// time of each sample, for [`Bench::sampled`].
pub fn sample_sync<R>(mut op: impl FnMut() -> R) -> Vec<f64> {
    let started = Instant::now();
    let mut calls = 0u64;
    while started.elapsed() < WARM_UP || calls < 3 {
        black_box(op());
        calls += 1;
    }
    let batch = batch_size(started.elapsed(), calls);
    (0..SAMPLES)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                black_box(op());
            }
            t.elapsed().as_secs_f64() / batch as f64
        })
        .collect()
}

/// CPU time this process's threads have run so far (user and kernel),
/// from `/proc/self/task/*/schedstat`; `None` where that is unavailable.
/// Threads that have exited are not counted, so measure over a stretch in
/// which none exits.
pub fn cpu_time() -> Option<Duration> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

/// CPU time of all threads (user and kernel) per call of `op`: ten
/// samples of `calls / 10` calls each, after as many warm-up calls. This
/// is the work a call causes, without time spent waiting for wake-ups.
/// Empty where [`cpu_time`] is unavailable.
pub async fn cpu_async<F, Fut>(calls: u32, mut op: F) -> Vec<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future,
{
    let per_sample = (calls / 10).max(1);
    for _ in 0..per_sample {
        black_box(op().await);
    }
    let mut samples = Vec::with_capacity(10);
    for _ in 0..10 {
        let Some(before) = cpu_time() else {
            return Vec::new();
        };
        for _ in 0..per_sample {
            black_box(op().await);
        }
        let Some(after) = cpu_time() else {
            return Vec::new();
        };
        samples.push(after.saturating_sub(before).as_secs_f64() / f64::from(per_sample));
    }
    samples
}

/// Calls per sample so that one sample takes about [`SAMPLE_TIME`].
fn batch_size(warm_up: Duration, calls: u64) -> u64 {
    let per_call = warm_up.as_secs_f64() / calls as f64;
    ((SAMPLE_TIME.as_secs_f64() / per_call) as u64).max(1)
}

fn summarise(times: &mut [f64]) -> Stats {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((times.len() - 1) as f64 * q).round() as usize;
        Duration::from_secs_f64(times[i])
    };
    Stats {
        median: at(0.5),
        p90: at(0.9),
    }
}

fn mbps(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / 1e6 / time.as_secs_f64()
}

/// A duration with a unit that keeps three significant digits.
pub fn show(d: Duration) -> String {
    let ns = d.as_secs_f64() * 1e9;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

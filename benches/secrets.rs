//! What blanking secrets costs: building the matcher, and scanning tool
//! outputs and spill streams with and without a secret in them. Run with
//! `cargo bench --bench secrets`; the numbers are in `BENCHMARKS.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark reports its numbers on stdout.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::string_slice)]

mod common;

use std::hint::black_box;
use std::sync::Arc;

use agent::runtime::secrets::Redactor;
use common::{Bench, Target};

/// A tool output of typical size (the default output cap).
const OUTPUT: usize = 30_000;
/// A large spilled stream.
const STREAM: usize = 32 << 20;
/// Read size of the command pipes.
const CHUNK: usize = 64 << 10;

/// Compiler-like text: ASCII words, paths, numbers, newlines.
fn text(len: usize) -> Vec<u8> {
    let line = b"error[E0599]: no method named `frobnicate` found for struct `Widget` in src/lib.rs:1042:17\n";
    line.iter().copied().cycle().take(len).collect()
}

/// The API key alone, and a realistic developer environment: ten tokens
/// of 40 characters, a database URL and a 900-character JWT.
fn secrets() -> (Vec<String>, Vec<String>) {
    let key = vec!["sk-live-Q9x2Lm7Vb4Tn8Rk3Wc6Hy1Jd5Fp0aZ".to_string()];
    let mut many: Vec<String> = (0..10)
        .map(|i| format!("ghp_{i}aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"))
        .collect();
    many.push("postgres://user:Pw-s3cr3t-Db9@db.internal/app".into());
    many.push(format!(
        "eyJhbGciOiJIUzI1NiJ9.{}.sig",
        "QWxhZGRpbjpvcGVuIHNlc2FtZQ".repeat(34)
    ));
    many.extend(key.clone());
    (key, many)
}

fn main() {
    let mut b = Bench::new("secrets: blanking outputs and spill streams");
    let (key, many) = secrets();
    b.batched("build: the API key", None, || Redactor::new(key.clone()));
    b.batched("build: 13 secrets incl. a 900-char JWT", None, || {
        Redactor::new(many.clone())
    });
    let small = text(OUTPUT);
    let large = text(STREAM);
    let mut with_secret = large.clone();
    for at in (0..STREAM - 100).step_by(CHUNK + 333) {
        with_secret[at..at + key[0].len()].copy_from_slice(key[0].as_bytes());
    }
    b.throughput(
        "baseline: memmem for the key in 32 MB (the old check)",
        None,
        STREAM,
        (1, 7),
        || memchr::memmem::find(&large, key[0].as_bytes()),
    );
    for (name, values) in [("key", &key), ("13 secrets", &many)] {
        let r = Arc::new(Redactor::new(values.clone()));
        b.batched(&format!("redact 30 KB, no secret ({name})"), None, || {
            black_box(r.redact_bytes(&small)).len()
        });
        b.throughput(
            &format!("redact 32 MB, no secret ({name})"),
            Some(Target::AboveMbps(200.0)),
            STREAM,
            (1, 7),
            || r.redact_bytes(&large).len(),
        );
        b.throughput(
            &format!("redact 32 MB, a key every 64 KB ({name})"),
            None,
            STREAM,
            (1, 7),
            || r.redact_bytes(&with_secret).len(),
        );
        b.throughput(
            &format!("stream 32 MB in 64 KB chunks, no secret ({name})"),
            Some(Target::AboveMbps(200.0)),
            STREAM,
            (1, 7),
            || {
                let mut s = r.stream();
                let mut out = Vec::with_capacity(CHUNK * 2);
                let mut n = 0;
                for chunk in large.chunks(CHUNK) {
                    out.clear();
                    s.feed(chunk, &mut out);
                    n += out.len();
                }
                out.clear();
                s.finish(&mut out);
                n + out.len()
            },
        );
    }
    b.finish();
}

//! Link layout for release builds: the functions a short run needs are
//! placed together at the front of the binary's code, in the order
//! `link/hot-symbols.txt` lists them (written by `link/order.py`).
//!
//! Why: the kernel maps a program's code in whole page-cache folios, so a
//! run that calls one function in a folio pays memory for all of it. With
//! the code as the compiler leaves it, a one-shot task touched most folios
//! and mapped 8.2 MB of the 11 MB of code; packed, 4.1 MB (peak RSS 16.0 →
//! 12.6 MB, BENCHMARKS.md). Nothing here changes what the program does.
//!
//! Applied only where it cannot break a build: release profile, x86_64
//! Linux with glibc, rustc 1.90 or later (whose default linker there is
//! lld, which reads the file), and no linker chosen by the person (a
//! configured `linker` or `-C linker`/`-fuse-ld` flags turn it off, since
//! other linkers may not take the flag). `AGENT_NO_LINK_ORDER=1` turns it
//! off too. Symbols the file names that the binary lacks (another
//! toolchain or Cargo.lock changes their hashes) are skipped silently;
//! `bench/run.sh` reports how many still match.
#![allow(clippy::print_stdout)]

use std::env;
use std::process::Command;

/// The ordering file, relative to the package root.
const HOT_SYMBOLS: &str = "link/hot-symbols.txt";
/// Set to anything but empty or `0` to link without the ordering.
const OPT_OUT: &str = "AGENT_NO_LINK_ORDER";
/// The first rustc whose default linker on x86_64-unknown-linux-gnu is lld.
const LLD_BY_DEFAULT: (u32, u32) = (1, 90);

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={HOT_SYMBOLS}");
    println!("cargo:rerun-if-env-changed={OPT_OUT}");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if !applies() {
        return;
    }
    let Ok(root) = env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let file = std::path::Path::new(&root).join(HOT_SYMBOLS);
    if !file.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=agent=-Wl,--symbol-ordering-file={}",
        file.display()
    );
    println!("cargo:rustc-link-arg-bin=agent=-Wl,--no-warn-symbol-ordering");
}

/// Whether this build links with lld on x86_64 glibc Linux, in release.
fn applies() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let opted_out = !matches!(var(OPT_OUT).as_str(), "" | "0");
    let release = var("PROFILE") == "release";
    let target = var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu";
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let own_linker = env::var_os("RUSTC_LINKER").is_some()
        || ["linker", "fuse-ld", "link-self-contained"]
            .iter()
            .any(|f| flags.contains(f));
    !opted_out && release && target && !own_linker && rustc_version() >= Some(LLD_BY_DEFAULT)
}

/// The (major, minor) version of the compiler cargo uses.
fn rustc_version() -> Option<(u32, u32)> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

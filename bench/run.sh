#!/bin/bash
# Runs every benchmark and prints the machine it ran on; BENCHMARKS.md holds
# the numbers and their targets. Builds what it needs in release mode first
# (the agent binary with fat LTO: several minutes on 2 cores from scratch),
# then measures for about a minute.
#
#   benches/scripts.rs  the Rhai layer: loading, script-tool calls, watchdog
#   benches/core.rs     SSE decoding, building a request
#   benches/e2e.rs      target/release/agent against a zero-latency mock
#                       server: startup, a one-shot task, per-step overhead
#
# Extra arguments filter measurements by substring: `bench/run.sh sse`.
# Needs only cargo, bash and git (the e2e bench runs `bash -c` and `git`).
set -eu
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(free -h | awk '/^Mem:/ {print $2}') RAM"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
echo "date:    $(date -u)"
echo "rustc:   $(rustc --version)"
# Build first, so that compiling never overlaps a measurement. The e2e
# bench measures the binary `cargo build --release` makes (the one people
# run): the bench profile's own build of it has other symbol hashes, so
# the link order of link/hot-symbols.txt (build.rs) would not apply. Cargo
# puts both at target/release/agent, so the release one is built last and
# kept under its own name (a hard link: the same file and page cache).
cargo bench --quiet --no-run
cargo build --quiet --release
target_dir=${CARGO_TARGET_DIR:-target}
bin="$target_dir/agent-release"
ln -f "$target_dir/release/agent" "$bin"
hot=$(sort -u link/hot-symbols.txt | wc -l)
have=$(nm --defined-only "$bin" | awk '{print $3}' | sort -u | comm -12 - <(sort -u link/hot-symbols.txt) | wc -l)
echo "link:    $have of the $hot functions in link/hot-symbols.txt are in $bin (rerun link/order.py when few are)"
cargo bench --quiet --bench scripts -- "$@"
cargo bench --quiet --bench core -- "$@"
AGENT_BENCH_BIN=${AGENT_BENCH_BIN:-$bin} cargo bench --quiet --bench e2e -- "$@"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min), after the runs"

#!/bin/sh
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
# Build first, so that compiling never overlaps a measurement.
cargo bench --quiet --no-run
cargo bench --quiet --bench scripts -- "$@"
cargo bench --quiet --bench core -- "$@"
cargo bench --quiet --bench e2e -- "$@"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min), after the runs"

#!/bin/sh
# Runs every benchmark (release build, about a minute on 2 cores) and prints
# the machine it ran on. BENCHMARKS.md holds the numbers and their targets.
# Extra arguments filter measurements by substring: `bench/run.sh sse`.
set -eu
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(free -h | awk '/^Mem:/ {print $2}') RAM"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
echo "date:    $(date -u)"
echo "rustc:   $(rustc --version)"
cargo bench --quiet --bench scripts -- "$@"
cargo bench --quiet --bench core -- "$@"

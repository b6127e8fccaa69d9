#!/usr/bin/env bash
# kube-sim benchmark: generation time and peak memory for k8s-limits, full LIST of 150,000 pods, and watch
# fan-out to 1,000 watchers. Usage: bench/kube-sim.sh [extra kube-sim-bench args]
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || true
cargo build --release -q -p kube-sim --bin kube-sim-bench
exec target/release/kube-sim-bench "$@"

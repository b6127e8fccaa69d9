#!/usr/bin/env bash
# herald serving benchmark on a k8s-limits kube-sim (needs ~9 GB RAM): time to first sync and herald's
# memory after it, req/s and p50/p99 for a ~10,000-target job as 200 (gzip) and as 304 with 64 clients,
# and kube-sim write -> long-poll wake latency under churn.
# Usage: bench/herald.sh            (HERALD_BENCH_PRESET=small for a quick run)
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 65536 2>/dev/null || true
export HERALD_BENCH_PRESET="${HERALD_BENCH_PRESET:-k8s-limits}"
exec cargo bench -q -p herald-server --bench sd_throughput

#!/usr/bin/env bash
# herald simulate on kube-sim's k8s-limits cluster (10,000 Services): the time to generate the
# rulesets (N runs, median) and one --measure run end to end, timed.
# Usage: bench/simulate.sh [RUNS (3)] [PRESET (k8s-limits)] [SEED (11)]
# Needs: root (network namespaces), iptables and nftables (apt-get install iptables nftables),
# release builds (cargo build --release -p herald -p kube-sim).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"; PRESET="${2:-k8s-limits}"; SEED="${3:-11}"
BIN="${CARGO_TARGET_DIR:-target}/release"
OUT="$(mktemp -d)"; trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT
SIM_PORT=18453

"$BIN/kube-sim" serve --listen "127.0.0.1:$SIM_PORT" --preset "$PRESET" --seed "$SEED" --churn 0 >"$OUT/sim.log" 2>&1 &
SP=$!
until curl -sf "127.0.0.1:$SIM_PORT/healthz" >/dev/null; do sleep 0.5; done
curl -s "127.0.0.1:$SIM_PORT/sim/dump" >"$OUT/dump.json"
kill $SP; wait $SP 2>/dev/null || true
echo "dump of $PRESET seed $SEED: $(du -h "$OUT/dump.json" | cut -f1)"

echo "generation at the cluster's size (median of $RUNS; from the report's generate_s):"
for i in $(seq "$RUNS"); do
  "$BIN/herald" simulate --from "$OUT/dump.json" --factors 1 --output json \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); p=[p for p in r["curve"] if p["label"]=="1×"][0]; print(p["generate_s"], p["sizes"]["services"], sum(t["rules"] for t in p["sizes"]["iptables"]), p["sizes"]["iptables_bytes"])'
done | sort -n | awk '{a[NR]=$0} END {print "  runs:", NR; print "  median generate_s, Services, iptables rules, restore bytes:", a[int((NR+1)/2)]}'

echo "--measure at 0.25x..4x, end to end:"
start=$(date +%s.%N)
"$BIN/herald" simulate --from "$OUT/dump.json" --measure --report "$OUT/report.html" | tee "$OUT/measure.txt"
end=$(date +%s.%N)
echo "  wall time: $(echo "$end - $start" | bc) s; namespaces left: $(ip netns list | grep -c herald-sim- || true)"

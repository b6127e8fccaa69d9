#!/usr/bin/env bash
# Discovery cost of one herald and one vmagent on the same kube-sim cluster, each process alone, side by
# side in one run: time to first complete sync, RSS after it, CPU seconds, bytes taken from kube-sim.
# Jobs: pod and endpointslice (every target dropped in vmagent, so it never scrapes).
# Usage: bench/discovery-cost.sh [PRESET (k8s-limits)] [SEED (11)]
# Needs: release builds (cargo build --release -p herald -p kube-sim), vmagent (Debian victoria-metrics).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${1:-k8s-limits}"; SEED="${2:-11}"
BIN="${CARGO_TARGET_DIR:-target}/release"
OUT="$(mktemp -d)"; trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT
SIM_PORT=18443; HERALD_PORT=18444; VM_PORT=18445
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{printf "%.1f", ($14+$15)/t}' "/proc/$1/stat"; }
rss() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }
ua_bytes() { curl -s "127.0.0.1:$SIM_PORT/sim/stats" | python3 -c "import json,sys; d=json.load(sys.stdin)['by_user_agent']; print(sum(v['bytes_sent'] for k,v in d.items() if k.startswith('$1')))"; }

"$BIN/kube-sim" serve --listen "127.0.0.1:$SIM_PORT" --preset "$PRESET" --seed "$SEED" --churn 0 >"$OUT/sim.log" 2>&1 &
until curl -sf "127.0.0.1:$SIM_PORT/healthz" >/dev/null; do sleep 0.5; done
echo "kube-sim $PRESET seed $SEED up: $(curl -s 127.0.0.1:$SIM_PORT/sim/stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["objects"])')"

printf 'jobs:\n- name: pod\n  role: pod\n- name: endpointslice\n  role: endpointslice\n' >"$OUT/jobs.yaml"
start=$(date +%s.%N)
"$BIN/herald" serve --config "$OUT/jobs.yaml" --apiserver "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$HERALD_PORT" >"$OUT/herald.log" 2>&1 &
HP=$!
until curl -sf "127.0.0.1:$HERALD_PORT/readyz" >/dev/null; do sleep 0.1; done
end=$(date +%s.%N)
targets=$(curl -s "127.0.0.1:$HERALD_PORT/sd/v1" | python3 -c 'import json,sys; print(sum(j["targets"] for j in json.load(sys.stdin)))')
sleep 2
echo "herald: first sync $(echo "$end - $start" | bc) s, targets $targets, RSS $(rss $HP) MiB, CPU $(cpu $HP) s, upstream bytes $(ua_bytes herald)"
kill $HP; wait $HP 2>/dev/null || true

sed "s/SIMPORT/$SIM_PORT/" >"$OUT/vm.yaml" <<'YAML'
scrape_configs:
- job_name: pod
  kubernetes_sd_configs: [{role: pod, api_server: "http://127.0.0.1:SIMPORT"}]
  relabel_configs: [{source_labels: [__address__], regex: '.*', action: drop}]
- job_name: endpointslice
  kubernetes_sd_configs: [{role: endpointslice, api_server: "http://127.0.0.1:SIMPORT"}]
  relabel_configs: [{source_labels: [__address__], regex: '.*', action: drop}]
YAML
start=$(date +%s.%N)
vmagent -httpListenAddr="127.0.0.1:$VM_PORT" -promscrape.config="$OUT/vm.yaml" -promscrape.maxDroppedTargets=2000000 \
  -remoteWrite.url=http://127.0.0.1:1/api/v1/write -remoteWrite.tmpDataPath="$OUT/rw" >"$OUT/vm.log" 2>&1 &
VP=$!
# Synced: vmagent's informers hold every pod, EndpointSlice and Service (its lists are complete; it
# builds targets from them lazily afterwards, which its CPU seconds include).
want=$(curl -s "127.0.0.1:$SIM_PORT/sim/stats" | python3 -c 'import json,sys; o=json.load(sys.stdin)["objects"]; print(o["pods"]+o["endpointslices"]+o["services"])')
n=0
until [ "$n" -ge "$want" ]; do
  sleep 0.2
  n=$(curl -s "127.0.0.1:$VM_PORT/metrics" | awk '/^vm_promscrape_discovery_kubernetes_objects\{/ {s+=$2} END {print s+0}')
done
end=$(date +%s.%N)
sleep 2
echo "vmagent: first sync $(echo "$end - $start" | bc) s, objects $n, RSS $(rss $VP) MiB, CPU $(cpu $VP) s, upstream bytes $(ua_bytes Go-http-client)"

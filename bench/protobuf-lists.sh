#!/usr/bin/env bash
# Lists in JSON and in protobuf, from kube-sim and from herald's face: for Pods, EndpointSlices,
# Services and Nodes of one generated cluster, the bytes of each format, the server's answer time
# (herald's first protobuf list encodes each object; later ones reuse the encoding) and client-go's
# decode time into typed objects (peers/cmd/protojudge measure: k8s.io/client-go v0.37.2's universal
# deserializer, medians of RUNS). herald's RSS and CPU before and after the protobuf lists show what
# holding a second encoding costs. Writes bench/out/protobuf-lists.json and prints a markdown table.
#
# Usage: bench/protobuf-lists.sh          the k8s-limits preset
#        bench/protobuf-lists.sh --quick  the small preset
# Env: PRESET, RUNS (default 5); SIM_ARGS adds kube-sim flags (e.g. "--nodes 500 --services 1000
# --pods 15000": a tenth of k8s-limits). CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."

preset=${PRESET:-k8s-limits} runs=${RUNS:-5}
if [ "${1:-}" = "--quick" ]; then preset=${PRESET:-small}; fi
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p herald -p kube-sim
peers/build >/dev/null
bin="$(peers/build --print)"

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_mib() { awk '/VmRSS/ {printf "%.0f\n", $2/1024}' "/proc/$1/status"; }
cpu_s() { awk '{printf "%.2f\n", ($14+$15)/100}' "/proc/$1/stat"; }

sim_port=$(port)
"$target/release/kube-sim" serve --listen "127.0.0.1:$sim_port" --preset "$preset" --seed 11 ${SIM_ARGS:-} > "$work/sim.out" 2> "$work/sim.log" &
sim_pid=$!; pids+=("$sim_pid")
until grep -q http "$work/sim.out" 2>/dev/null; do sleep 1; kill -0 "$sim_pid" || { cat "$work/sim.log"; exit 1; }; done
sim_url="http://127.0.0.1:$sim_port"
echo "jobs: []" > "$work/jobs.yaml"
sd_port=$(port) face_port=$(port)
"$target/release/herald" serve --config "$work/jobs.yaml" --apiserver "$sim_url" --listen "127.0.0.1:$sd_port" \
  --kube-listen "127.0.0.1:$face_port" > "$work/herald.out" 2> "$work/herald.log" &
herald_pid=$!; pids+=("$herald_pid")
until curl -fs "http://127.0.0.1:$sd_port/readyz" >/dev/null 2>&1; do sleep 1; kill -0 "$herald_pid" || { cat "$work/herald.log"; exit 1; }; done

kinds=(pods endpointslices services nodes)
"$bin/protojudge" measure --server "$sim_url" --runs "$runs" "${kinds[@]}" > "$work/sim.json"
rss0=$(rss_mib "$herald_pid") cpu0=$(cpu_s "$herald_pid")
"$bin/protojudge" measure --server "http://127.0.0.1:$face_port" --runs "$runs" "${kinds[@]}" > "$work/herald.json"
rss1=$(rss_mib "$herald_pid") cpu1=$(cpu_s "$herald_pid")

mkdir -p bench/out
python3 - "$work/sim.json" "$work/herald.json" "$preset" "${SIM_ARGS:-}" "$rss0" "$rss1" "$cpu0" "$cpu1" <<'EOF'
import json, sys
sim, herald = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
preset, sim_args, rss0, rss1, cpu0, cpu1 = sys.argv[3:9]
out = {"preset": preset, "sim_args": sim_args, "kube_sim": sim, "herald": herald,
       "herald_rss_mib_before": int(rss0), "herald_rss_mib_after": int(rss1),
       "herald_cpu_s_for_the_lists": round(float(cpu1) - float(cpu0), 2)}
json.dump(out, open("bench/out/protobuf-lists.json", "w"), indent=2)
print(f"preset {preset} {sim_args}".strip())
print("| kind | items | JSON MB | protobuf MB | bytes pb/JSON | client-go decode JSON ms | protobuf ms | decode pb/JSON | herald list JSON ms | herald 1st pb ms | herald pb ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for k, m in herald.items():
    print(f"| {k} | {m['items']} | {m['json_bytes']/1e6:.1f} | {m['proto_bytes']/1e6:.1f} | {m['proto_over_json_bytes']:.2f} | "
          f"{m['json_decode_ms']:.0f} | {m['proto_decode_ms']:.0f} | {m['proto_over_json_decode']:.2f} | "
          f"{m['json_list_ms']:.0f} | {m['proto_first_list_ms']:.0f} | {m['proto_list_ms']:.0f} |")
print(f"herald RSS {rss0} → {rss1} MiB after the protobuf lists; CPU for all of them {float(cpu1)-float(cpu0):.2f} s")
print("kube-sim (same lists, same code): " + ", ".join(f"{k} {m['proto_over_json_bytes']:.2f}× bytes" for k, m in sim.items()))
EOF

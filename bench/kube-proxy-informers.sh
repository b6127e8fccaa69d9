#!/usr/bin/env bash
# kube-proxy's informers through herald versus directly on kube-sim: N sets of client-go informers
# shaped like kube-proxy's (peers/cmd/proxy-informers: Services and EndpointSlices with its selectors,
# its own Node, ServiceCIDRs; each set on its own connections), with a writer updating Services on
# kube-sim at a fixed rate. For each target and content type: the informers' sync time, their CPU per
# delivered event (the client side of the cost), delivery p50/p99 (write → handler), kube-sim's bytes
# sent and watches open, herald's CPU and bytes sent. Writes bench/out/kube-proxy-informers.json and
# prints a markdown table. These are the baseline figures herald's protobuf work is measured against.
#
# Usage: bench/kube-proxy-informers.sh           100 sets, k8s-limits-sized Services and slices,
#                                                100 updates/s, 30 s window
#        bench/kube-proxy-informers.sh --quick   10 sets, the small preset, 5 s window
# Env: INFORMERS, PRESET, RATE, SECONDS_WINDOW override the defaults; SIM_ARGS adds kube-sim flags
# (e.g. "--nodes 500 --services 1000 --pods 15000": a tenth of k8s-limits). CARGO_TARGET_DIR is honoured.
# WATCH_ONLY=1: each set is one plain client-go watch of the same Services instead of informers (no
# cache, no handlers): the client CPU of client-go's watch decoding alone.
# RESOURCE=pods or RESOURCE=endpointslices: each set is one informer (or with WATCH_ONLY=1 one plain
# watch) of every Pod, or of kube-proxy's EndpointSlices, and the writer updates that resource: the
# client CPU per event for the objects kubelets and kube-proxy receive (issue 21's kinds).
set -euo pipefail
cd "$(dirname "$0")/.."

watch_only=${WATCH_ONLY:-} resource=${RESOURCE:-services}
informers=${INFORMERS:-100} preset=${PRESET:-k8s-limits} rate=${RATE:-100} window=${SECONDS_WINDOW:-30}
if [ "${1:-}" = "--quick" ]; then
  informers=${INFORMERS:-10} preset=${PRESET:-small} window=${SECONDS_WINDOW:-5}
fi
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p herald -p kube-sim
peers/build >/dev/null
bin="$(peers/build --print)"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
kubeconfig() { printf 'apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: "%s"}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n' "$1" > "$2"; }

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
kubeconfig "$sim_url" "$work/sim.kubeconfig"
kubeconfig "http://127.0.0.1:$face_port" "$work/herald.kubeconfig"

sim_bytes() { curl -fs "$sim_url/sim/stats" | python3 -c 'import json,sys; d=json.load(sys.stdin)["by_resource"]; print(sum(v.get("bytes_sent",0) for v in d.values()))'; }
sim_watches() { curl -fs "$sim_url/sim/stats" | python3 -c 'import json,sys; d=json.load(sys.stdin)["by_resource"]; print(sum(v.get("watches_open",0) for v in d.values()))'; }
herald_bytes() { curl -fs "http://127.0.0.1:$sd_port/metrics" | awk '/^herald_kube_bytes_sent_total/ {s+=$2} END {printf "%d\n", s}'; }

mkdir -p bench/out
results=()
for via in herald direct; do
  for ct in json protobuf; do
    kc="$work/$via.kubeconfig"; [ "$via" = direct ] && kc="$work/sim.kubeconfig"
    flags=(--resource "$resource"); [ "$ct" = protobuf ] && flags+=(--protobuf)
    [ -n "$watch_only" ] && flags+=(--watch-only)
    b0=$(sim_bytes); h0=$(herald_bytes)
    out="$work/$via-$ct.json"
    "$bin/proxy-informers" --kubeconfig "$kc" --informers "$informers" --rate 0 --seconds "${window}s" \
      --warmup 5s --pid "kube-sim=$sim_pid,herald=$herald_pid" "${flags[@]}" --json "$out" \
      2> "$work/informers.err" > "$work/informers.out" &
    ipid=$!
    # The writer in a process of its own (the informers' CPU is theirs alone), started once they synced.
    until grep -q synced "$work/informers.err" 2>/dev/null; do sleep 0.2; kill -0 "$ipid" || { cat "$work/informers.err"; exit 1; }; done
    "$bin/proxy-informers" --kubeconfig "$work/sim.kubeconfig" --informers 0 --rate "$rate" --resource "$resource" \
      --seconds "$((window + 2))s" --warmup 5s > "$work/writer.out" 2>> "$work/writer.err" &
    wpid=$!
    # kube-sim's open watches while the informers run (herald's own seven included).
    sleep $(( window / 2 + 5 )); watches=$(sim_watches)
    wait "$ipid"; wait "$wpid"
    b1=$(sim_bytes); h1=$(herald_bytes)
    python3 - "$out" "$via" "$ct" "$((b1 - b0))" "$((h1 - h0))" "$watches" <<'EOF'
import json, sys
path, via, ct, sim_b, her_b, watches = sys.argv[1:]
r = json.load(open(path))
r.update(via=via, content_type=ct, sim_bytes_sent=int(sim_b), herald_bytes_sent=int(her_b), sim_watches_open=int(watches))
json.dump(r, open(path, "w"))
EOF
    results+=("$out")
  done
done
python3 - "$informers" "$preset" "$rate" "$resource" "${results[@]}" <<'EOF'
import json, os, sys
informers, preset, rate, resource, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
rows = [json.load(open(p)) for p in paths]
out = "bench/out/kube-proxy-informers.json" if resource == "services" else f"bench/out/informers-{resource}.json"
json.dump({"informers": int(informers), "preset": preset, "sim_args": os.environ.get("SIM_ARGS", ""),
           "rate": float(rate), "resource": resource, "runs": rows},
          open(out, "w"), indent=2)
shape = "kube-proxy-shaped informer sets" if resource == "services" else f"sets reading {resource}"
print(f"\n{informers} {shape}, preset {preset} {os.environ.get('SIM_ARGS', '')}, {rate} {resource} updates/s\n")
print("| via | client | content | sync s | events | client CPU µs/event | p50 ms | p99 ms | kube-sim watches | kube-sim MB sent | kube-sim CPU s | herald CPU s | herald CPU µs/event | herald MB sent |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    cpu = r.get("server_cpu_seconds", {})
    print(f"| {r['via']} | {r.get('client', 'informers')} | {r['content_type']} | {r['sync_seconds']:.1f} | {r['events']} | {r['client_cpu_per_event_us']:.0f} | "
          f"{r['latency_p50_ms']:.1f} | {r['latency_p99_ms']:.1f} | {r['sim_watches_open']} | {r['sim_bytes_sent']/1e6:.1f} | "
          f"{cpu.get('kube-sim', 0):.1f} | {cpu.get('herald', 0):.1f} | "
          f"{(cpu.get('herald', 0) / r['events'] * 1e6 if r['via'] == 'herald' and r['events'] else 0):.1f} | {r['herald_bytes_sent']/1e6:.1f} |")
EOF

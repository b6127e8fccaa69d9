#!/usr/bin/env bash
# Kubernetes API watch fan-out: N watchers of ConfigMaps on one herald versus the same N directly on
# kube-sim, with kube-sim taking 100 ConfigMap updates/s. Prints markdown tables; writes
# bench/out/kube-watchers.json. kube-sim, herald and the client are separate processes on loopback.
#
# Usage: bench/kube-watchers.sh            1,000 and 10,000 watchers, 30 s window, 3 runs each
#        bench/kube-watchers.sh --quick    100 watchers, 5 s, one run (smoke test)
#        bench/kube-watchers.sh [--quick] --protobuf   the same in protobuf (bench/out/kube-watchers-protobuf.json)
#        bench/kube-watchers.sh [--quick] --kind pods|endpointslices [--protobuf]   watchers of every Pod
#                                     or EndpointSlice of kube-sim's small cluster, the writer updating
#                                     the first 50 of them (bench/out/kube-watchers-KIND[-protobuf].json)
#        bench/kube-watchers.sh [--quick] [kube-watchers args...]   (given args replace the defaults;
#                                                                    kube-watchers --help lists them)
# CARGO_TARGET_DIR is honoured (default target/).
set -euo pipefail
cd "$(dirname "$0")/.."

defaults=(--watchers 1000,10000 --seconds 30 --warmup 5 --runs 3)
if [ "${1:-}" = "--quick" ]; then
  shift
  defaults=(--watchers 100 --seconds 5 --warmup 2 --runs 1)
fi

# 10,000 watchers need 10,000 sockets in this client and 10,000 in herald (or kube-sim): raise the
# soft limit to the hard limit, which the children inherit.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "open files limit: $(ulimit -n)" >&2

# Defaults for the flags not given on the command line.
args=()
for ((i = 0; i < ${#defaults[@]}; i += 2)); do
  case " $* " in *" ${defaults[i]} "* | *" ${defaults[i]}="*) ;; *) args+=("${defaults[i]}" "${defaults[i+1]}") ;; esac
done

target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p herald -p kube-sim -p herald-bench
mkdir -p bench/out
# --protobuf (watchers ask for application/vnd.kubernetes.protobuf) and --kind pods|endpointslices
# (watchers of every Pod or EndpointSlice, the writer updating generated ones) write files of their own.
out=bench/out/kube-watchers
args_line=" $* "
kind=$(sed -n 's/.* --kind[ =]\([a-z]*\) .*/\1/p' <<< "$args_line")
[ -n "$kind" ] && [ "$kind" != configmaps ] && out="$out-$kind"
case "$args_line" in *" --protobuf "*) out="$out-protobuf" ;; esac
out="$out.json"
exec "$target/release/kube-watchers" \
  --kube-sim "$target/release/kube-sim" --herald "$target/release/herald" \
  --json "$out" "${args[@]}" "$@"

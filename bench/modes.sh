#!/usr/bin/env bash
# bench/modes.sh — the deployment-mode benchmark behind numaserve's reason to
# exist, run side by side in one session for ranker_a and ranker_b:
#   single   one instance over all the server's CPUs
#   bound    one instance per NUMA node, pinned to its CPUs and memory
#            (numaserve's supervisor: --replicas-per-numa-node 1)
#   unbound  one instance per NUMA node, not pinned (--replicas N --bind none)
#   k-bound  k instances per node (--per-node-k K, when every node has K cores)
# each at saturation (closed loop) and at a fixed offered load (open loop,
# constant arrival rate: --load times single's saturation rate), plus the
# latency-vs-load curve of single and bound, the limits (in-process forward
# items/s and BLAS sgemm GFLOP/s on the same CPUs) and the peer (FastAPI +
# uvicorn + PyTorch serving the same model, same CPUs, same requests).
# Writes results.json, results.csv and SVG plots into --out; prints a table.
# On a multi-socket machine it runs unchanged; that is where `bound` shows
# its gain. Every process it starts is stopped when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=8 warmup=2 load=0.7 items=200 k=2 peer=1 server_cpus="" client_cpus=""
build=${BUILD_DIR:-build} models="" out="" numaserve="" only_modes=""
usage() {
  cat <<EOF
Usage: bench/modes.sh [--seconds S] [--warmup S] [--load F] [--items N] [--per-node-k K]
                      [--server-cpus LIST] [--client-cpus LIST] [--models DIR] [--out DIR] [--no-peer]
                      [--modes single,bound,...] [--numaserve BINARY]
Defaults: ${seconds}s per measurement after ${warmup}s warm-up; fixed load = $load x single's
saturation; $items items per request; the load generator on the last allowed CPU and the
servers on the others (all of them when only one is allowed); demo models in $build/bench-models;
results in bench/results/modes-<time>/. --modes runs only those modes, --numaserve another
build's server (an older commit's, to compare).
EOF
}
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --items) items=$2; shift 2 ;;
    --per-node-k) k=$2; shift 2 ;;
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-peer) peer=0; shift ;;
    --modes) only_modes=$2; shift 2 ;;
    --numaserve) numaserve=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/modes.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh bench
./scripts/build.sh > /dev/null
numaserve=${numaserve:-$build/service/numaserve} bench=$build/bench/numaserve-bench
models=${models:-$build/bench-models}
[[ -f $models/ranker_a/model.pt ]] || "$build/service/numaserve" make-demo-models "$models" > /dev/null
out=${out:-bench/results/modes-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
source bench/lib.sh

# Server and client CPUs: apart when the machine allows it.
read -ra allowed <<< "$(expand_cpus "$(taskset -pc $$ | sed 's/.*: //')")"
if [[ -z $client_cpus ]]; then
  client_cpus=${allowed[-1]}
  ((${#allowed[@]} > 1)) && unset 'allowed[-1]'
fi
server_cpus=${server_cpus:-$(join_cpus "${allowed[@]}")}
read -ra server_list <<< "$(expand_cpus "$server_cpus")"
nodes=()
for dir in /sys/devices/system/node/node[0-9]*; do
  for cpu in $(expand_cpus "$(cat "$dir/cpulist")"); do
    if [[ " ${server_list[*]} " == *" $cpu "* ]]; then nodes+=("${dir##*node}"); break; fi
  done
done
echo "server CPUs $server_cpus (NUMA nodes ${nodes[*]}), load generator CPUs $client_cpus" >&2
limit=$((seconds * 4 + 60))
connections=$((4 * ${#server_list[@]}))

measure() {  # PORT RATE(0=closed loop) CONNECTIONS MODEL_NAME -> JSON with server CPU use
  local before after result pid=$server_pid
  before=$(tree_cpu_seconds "$pid")
  result=$(timeout $limit "$bench" load --port "$1" --rate "$2" --connections "$3" --model "$4" --items "$items" \
    --feature-store "$models/store.jsonl" --seconds "$seconds" --warmup "$warmup" --cpus "$client_cpus")
  after=$(tree_cpu_seconds "$pid")
  jq -c --argjson b "$before" --argjson a "$after" --argjson span "$((seconds + warmup))" --argjson cpus "${#server_list[@]}" \
    '. + {cpu_utilisation: (($a - $b) / $span / $cpus)}' <<< "$result"
}

# Share of model pages on each worker's own nodes, over the workers that answer.
locality() {  # PORT
  local i p
  for i in $(seq 1 40); do
    p=$(curl -sf --max-time 10 "http://127.0.0.1:$1/placement") || continue
    jq -c '{instance, local: .models[0].local_fraction}' <<< "$p"
  done | jq -s 'unique_by(.instance) | {workers: length, local_fraction: (map(.local) | add / length)}'
}

mode_flags() {  # MODE
  case $1 in
    single) echo "" ;;
    bound) echo "--replicas-per-numa-node 1" ;;
    unbound) echo "--replicas ${#nodes[@]} --bind none" ;;
    k-bound) echo "--replicas-per-numa-node $k" ;;
  esac
}

modes=(single bound unbound)
can_k=1
for node in "${nodes[@]}"; do
  n=0
  for cpu in $(expand_cpus "$(cat /sys/devices/system/node/node$node/cpulist)"); do
    [[ " ${server_list[*]} " == *" $cpu "* ]] && n=$((n + 1))
  done
  ((n >= 2 * k)) || can_k=0
done
if ((can_k)); then modes+=(k-bound); else echo "k-bound skipped: a node has fewer than $k cores among the server CPUs" >&2; fi
if [[ -n $only_modes ]]; then read -ra modes <<< "${only_modes//,/ }"; fi

# The arithmetic limit of the server CPUs: BLAS sgemm, one pinned process per CPU.
for cpu in "${server_list[@]}"; do "$bench" sgemm --cpus "$cpu" --seconds 3 > "$out/sgemm-$cpu.json" & done
wait
gflops=$(cat "$out"/sgemm-*.json | jq -s 'map(.gflops) | add')
echo "sgemm on the server CPUs: $gflops GFLOP/s" >&2

rows=()
probe='{"user": {"id": "u42"}, "context": {"hour": 20, "device": "ios"}, "items": [{"id": "i7"}, {"id": "i99"}, {"id": "new", "features": {"price": 19.9}}]}'
for model in ranker_a ranker_b; do
  # The forward limit on the same CPUs: one pinned process per CPU, summed.
  for cpu in "${server_list[@]}"; do
    "$bench" forward --model-dir "$models/$model" --feature-store "$models/store.jsonl" --items "$items" --cpus "$cpu" \
      --seconds "$seconds" --warmup 1 > "$out/forward-$model-$cpu.json" &
  done
  wait
  forward=$(cat "$out"/forward-$model-*.json | jq -s 'map(.items_per_s) | add')
  echo "$model: forward limit $forward items/s" >&2
  saturation_single="" paced=""
  for mode in "${modes[@]}"; do
    port=$(free_port)
    # shellcheck disable=SC2046
    start_server "$port" "$server_cpus" "$models/$model" "$models/store.jsonl" $(mode_flags "$mode")
    [[ $mode == single ]] && curl -s -X POST "http://127.0.0.1:$port/predict" -d "$probe" | jq -c .scores > "$out/probe-$model.json"
    sat=$(measure "$port" 0 "$connections" "$model")
    saturation_single=${saturation_single:-$(jq .rps <<< "$sat")}
    rate=$(awk -v r="$saturation_single" -v f="$load" 'BEGIN { print r * f }')
    fixed=$(measure "$port" "$rate" 64 "$model")
    if [[ -z ${paced:-} ]]; then
      # The floor for the fixed load's tail: the forward alone, in process,
      # one call due every 1/rate s per server CPU (the thread sleeping in
      # between, as an idle worker does), latency from when each was due.
      stop_servers
      paced=$(timeout $limit "$bench" forward --model-dir "$models/$model" --feature-store "$models/store.jsonl" \
        --items "$items" --cpus "${server_list[0]}" --seconds "$seconds" --warmup 1 \
        --rate "$(awk -v r="$rate" -v n="${#server_list[@]}" 'BEGIN { print r / n }')" | jq -c '{rate, p50_ms, p99_ms}')
      start_server "$port" "$server_cpus" "$models/$model" "$models/store.jsonl" $(mode_flags "$mode")
    fi
    where=$( [[ $mode == single ]] && echo '{}' || locality "$port")
    curve='[]'
    if [[ $model == ranker_a && ($mode == single || $mode == bound) ]]; then
      curve=$(for f in 0.2 0.4 0.6 0.8 1.0; do
        measure "$port" "$(awk -v r="$saturation_single" -v f="$f" 'BEGIN { print r * f }')" 64 "$model" |
          jq -c --argjson f "$f" '{load: $f, rps, p50_ms, p99_ms}'
      done | jq -s .)
    fi
    stop_servers
    rows+=("$(jq -nc --arg model "$model" --arg mode "$mode" --argjson sat "$sat" --argjson fixed "$fixed" \
      --argjson where "$where" --argjson curve "$curve" --argjson forward "$forward" --argjson gflops "$gflops" \
      --argjson paced "$paced" \
      '{model: $model, mode: $mode, saturation: $sat, fixed_load: $fixed, locality: $where, curve: $curve,
        forward_limit_items_per_s: $forward, sgemm_gflops: $gflops, paced_forward: $paced,
        fraction_of_forward_limit: ($sat.items_per_s / $forward)}')")
    echo "$model $mode: $(jq -r '"\(.saturation.rps | floor) req/s at saturation (\(.fraction_of_forward_limit * 100 | floor)% of the forward limit), p99 \(.fixed_load.p99_ms * 10 | round / 10) ms at fixed load"' <<< "${rows[-1]}")" >&2
  done
  if ((peer)); then
    port=$(free_port)
    PEER_MODEL_DIR=$models/$model PEER_STORE=$models/store.jsonl taskset -c "$server_cpus" \
      /usr/bin/python3 -m uvicorn --app-dir bench/peer server:app --host 127.0.0.1 --port "$port" \
      --workers "${#server_list[@]}" --log-level warning 2> "$out/peer-$model.log" &
    server_pid=$!
    server_pids+=("$server_pid")
    wait_ready "$port" "the FastAPI peer" "$out/peer-$model.log"
    peer_scores=$(curl -s -X POST "http://127.0.0.1:$port/predict" -d "$probe" | jq -c .scores)
    same=$(jq -n --argjson a "$peer_scores" --argjson b "$(cat "$out/probe-$model.json")" \
      '[range(0; $a | length)] | all(($a[.] - $b[.]) | fabs < 1e-5)')
    sat=$(measure "$port" 0 "$connections" "$model")
    stop_servers
    rows+=("$(jq -nc --arg model "$model" --argjson sat "$sat" --argjson same "$same" --argjson forward "$forward" \
      '{model: $model, mode: "peer-fastapi", saturation: $sat, same_scores: $same, forward_limit_items_per_s: $forward,
        fraction_of_forward_limit: ($sat.items_per_s / $forward)}')")
    echo "$model peer: $(jq -r '"\(.saturation.rps | floor) req/s, same scores: \(.same_scores)"' <<< "${rows[-1]}")" >&2
  fi
done

printf '%s\n' "${rows[@]}" | jq -s --arg machine "$(machine_summary)" --arg server "$server_cpus" --arg client "$client_cpus" \
  --argjson seconds "$seconds" --argjson load "$load" --argjson items "$items" \
  '{machine: $machine, server_cpus: $server, client_cpus: $client, seconds: $seconds, fixed_load: $load,
    items_per_request: $items, results: .}' > "$out/results.json"
jq -r '"model,mode,rps,items_per_s,p50_ms,p90_ms,p99_ms,cpu_utilisation,fixed_rps,fixed_p50_ms,fixed_p90_ms,fixed_p99_ms,fixed_cpu_utilisation,local_fraction,fraction_of_forward_limit",
  (.results[] | [.model, .mode, .saturation.rps, .saturation.items_per_s, .saturation.p50_ms, .saturation.p90_ms,
    .saturation.p99_ms, .saturation.cpu_utilisation, (.fixed_load.rps // ""), (.fixed_load.p50_ms // ""),
    (.fixed_load.p90_ms // ""), (.fixed_load.p99_ms // ""), (.fixed_load.cpu_utilisation // ""),
    (.locality.local_fraction // ""), .fraction_of_forward_limit] | @csv)' "$out/results.json" > "$out/results.csv"
bench/plot.sh "$out"

jq -r '"machine: \(.machine); server CPUs \(.server_cpus), load generator \(.client_cpus)",
  "model     mode          req/s  items/s  p99 sat  p50 / p99 @\(.fixed_load * 100 | floor)%  p99/p50  CPU   local  of forward limit",
  (.results[] | "\(.model)  \(.mode | .[0:12] + "            " | .[0:12])  \(.saturation.rps | floor | tostring | ("      " + .)[-6:])  \(.saturation.items_per_s | floor | tostring | ("       " + .)[-7:])  \(.saturation.p99_ms * 10 | round / 10 | tostring | ("     " + .)[-6:]) ms  \((.fixed_load.p50_ms // 0) * 100 | round / 100 | tostring | ("     " + .)[-5:]) / \((.fixed_load.p99_ms // 0) * 100 | round / 100 | tostring | ("     " + .)[-5:]) ms  \(if .fixed_load.p50_ms then (.fixed_load.p99_ms / .fixed_load.p50_ms * 100 | round / 100 | tostring | ("     " + .)[-5:]) else "    -" end)  \(.saturation.cpu_utilisation * 100 | round | tostring | ("   " + .)[-3:])%  \(.locality.local_fraction // "" | tostring | .[0:5] | ("     " + .)[-5:])  \(.fraction_of_forward_limit * 100 | round)%")' "$out/results.json"
jq -r '.results | group_by(.model)[] | .[0] | select(.paced_forward) |
  "\(.model): the forward alone, in process, paced at \(.paced_forward.rate | floor)/s per CPU: p50 \(.paced_forward.p50_ms * 100 | round / 100) / p99 \(.paced_forward.p99_ms * 100 | round / 100) ms"' "$out/results.json"
peer_ratio=$(jq -r '[.results[] | select(.mode == "single" or .mode == "peer-fastapi")] | group_by(.model)[] |
  "\(.[0].model): numaserve/peer = \((map(select(.mode == "single"))[0].saturation.rps) / (map(select(.mode == "peer-fastapi"))[0].saturation.rps // 1) * 100 | round / 100)"' "$out/results.json" 2> /dev/null || true)
echo "$peer_ratio"
echo "results: $out/results.json, $out/results.csv, plots $out/*.svg"

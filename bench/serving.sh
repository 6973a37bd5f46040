#!/usr/bin/env bash
# bench/serving.sh — what serving over HTTP costs beside the model, measured
# side by side in one run, the server on the same pinned CPU throughout:
#   (a)   in-process forward of ranker_a, N items per call, on --server-cpus
#   (b)   POST /predict at saturation (closed loop), N items per request,
#         --connections connections, the load generator on --client-cpus
#   (b16) the same with 4x the connections: requests arrive together and
#         share a forward (natural batching), so per item it can beat (a)
#   (p)   the /predict pipeline without HTTP — parse, query, extract,
#         forward, reply in turn on one thread: the most a transport could
#         serve one request at a time
#   (w)   Debian's wrk (a Lua script posting the same bodies) with (b)'s
#         connections: a second, independent load generator
#   (g)   the same requests as numaserve.v1.Ranking/Predict over gRPC (the
#         server's --grpc-port), --connections HTTP/2 connections with one
#         call outstanding each: items/s beside (b)'s, and the server's CPU
#         per request outside the forward beside (b)'s
#   (v)   the same requests to the KServe v2 infer route as the tensors the
#         server extracts for them, JSON data (vj) and Triton's binary tensor
#         data (vb), --connections connections: items/s, p99 and the server's
#         CPU per request of each, vb beside vj
#   (bf)  (b) against a second server on the same CPU serving ranker_a
#         with --precision bf16 (where the CPU has bf16 instructions): items/s
#         beside (b)'s, p99, and the server's CPU per request
#   (i8)  the same with --precision int8 (int8 linear layers where the CPU
#         has VNNI, rowwise int8 tables), where check-model says it loads
#   (r)   (b) with the features in Redis (Feast's online format, a
#         redis-server on --client-cpus, loaded by `feature-store load`):
#         warm, the item cache holding every item (a request asks Redis for
#         its user only), and cold, every item fetched every time
#         (--item-cache-ttl 0); with Redis's CPU per request and the p99
#         they add to (b). Over loopback TCP, as the cluster's below.
#   (rc)  (r) from a Redis Cluster: 3 masters, no replicas, on --client-cpus
#         (tests/service/redis_cluster.py), loaded the same way; two more
#         servers, warm and cold, measured right after (r)'s in the same
#         rounds: items/s per round against (r)'s (targets: warm >= 0.95,
#         cold >= 0.85 x single-server Redis), p99, the server's CPU per
#         request and the 3 masters' CPU per request
# Then the sweep: b/a again (own rounds, same server CPU) for each of
# --sizes items per request on ranker_a, and for ranker_b (the tiny model,
# where the request's own overhead is most of its CPU) at --items.
# Prints items/s, the ratios b/a, b16/a, p/a and w/b (each taken within its
# round, median over rounds), the sweep's b/a per size and model,
# p50/p99, the mean batch, and the server's CPU
# per request: the stages it measures itself (parse, query, extract,
# forward, encode) and the transport, what is left (socket reads and
# writes, HTTP framing, the loop); and for (b) and (g) the server's user
# space outside the forward apart from its system CPU (the kernel's
# loopback TCP, which no change to the server's own code removes). Writes
# a JSON results file. Not a test: numbers for a person (and the README) to
# read.
set -euo pipefail
cd "$(dirname "$0")/.."

server_cpus=0 client_cpus=1 items=200 seconds=5 warmup=2 connections=4 repeats=5 profile=0 sizes="32 1000"
build=${BUILD_DIR:-build} models="" out="" numaserve=""
usage() {
  cat <<USAGE
Usage: bench/serving.sh [--server-cpus LIST] [--client-cpus LIST] [--items N] [--seconds S]
                        [--connections C] [--repeats R] [--models DIR] [--out FILE] [--numaserve BINARY]
                        [--profile] [--sizes "N ..."]
Defaults: server on CPU $server_cpus, client on CPU $client_cpus, $items items, ${seconds}s per
measurement after ${warmup}s warm-up, $connections connections (and 4x for b16), $repeats rounds
(medians; a ratio is the median of the rounds' own ratios), demo models (200 MiB of embeddings)
made in $build/bench-models. --numaserve measures another build's server (e.g. an older
commit's) with the same load; figures it does not export are left out. --profile samples
the server's kernel stacks with perf during (b) and splits its CPU per request into the
socket system calls (the send into the loopback delivery to the client) and the rest.
--sizes: the request sizes of the sweep besides --items (default "$sizes"; "" for none).
USAGE
}
while (($#)); do
  case $1 in
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --items) items=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --numaserve) numaserve=$2; shift 2 ;;
    --profile) profile=1; shift ;;
    --sizes) sizes=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/serving.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh bench
./scripts/build.sh > /dev/null
numaserve=${numaserve:-$build/service/numaserve} bench=$build/bench/numaserve-bench
models=${models:-$build/bench-models}
[[ -f $models/ranker_a/model.pt ]] || "$build/service/numaserve" make-demo-models "$models" > /dev/null
out=${out:-bench/results/serving-$(date -u +%Y%m%dT%H%M%SZ).json}
mkdir -p "$(dirname "$out")"
bodies=$models/bodies-$items.jsonl
"$bench" bodies --feature-store "$models/store.jsonl" --items "$items" > "$bodies"

source bench/lib.sh

# stop_redis: (r)'s Redis and (rc)'s cluster, when up; at the end and on any
# exit (the cluster's nodes run in sessions of their own: nothing else ends them).
redis_pid="" redis_dir="" cluster_dir=""
stop_redis() {
  if [[ -n $redis_pid ]]; then
    kill "$redis_pid" 2> /dev/null || true
    wait "$redis_pid" 2> /dev/null || true
    rm -rf "$redis_dir"
    redis_pid=""
  fi
  if [[ -n $cluster_dir ]]; then
    python3 tests/service/redis_cluster.py stop "$cluster_dir" || true
    rm -rf "$cluster_dir"
    cluster_dir=""
  fi
}
trap 'cleanup_servers; stop_redis' EXIT

# processes_cpu_seconds PID...: their user + system CPU seconds so far, summed (0 for none).
processes_cpu_seconds() {
  local pid total=0
  for pid in "$@"; do
    total=$(awk -v a="$total" -v b="$(process_cpu_seconds "$pid")" 'BEGIN { printf "%.3f", a + b }')
  done
  echo "$total"
}

port=$(free_port) grpc_port=""
if [[ $("$numaserve" serve --help) == *--grpc-port* ]]; then
  grpc_port=$(free_port)
  start_server "$port" "$server_cpus" "$models/ranker_a" "$models/store.jsonl" --grpc-port "$grpc_port"
else
  start_server "$port" "$server_cpus" "$models/ranker_a" "$models/store.jsonl"
fi

# (bf) and (i8)'s servers: ranker_a in bf16 and in int8, each where this
# CPU (and this build) serves it.
narrowed=(bf16 int8)
declare -A narrowed_port=() narrowed_pid=() narrowed_runs=()
for precision in "${narrowed[@]}"; do
  if "$numaserve" check-model "$models/ranker_a" --precision "$precision" > /dev/null 2>&1; then
    narrowed_port[$precision]=$(free_port)
    start_server "${narrowed_port[$precision]}" "$server_cpus" "$models/ranker_a" "$models/store.jsonl" --precision "$precision"
    narrowed_pid[$precision]=$server_pid
  else
    echo "($precision): not served here: $("$numaserve" check-model "$models/ranker_a" --precision "$precision" 2>&1 | tail -1)" >&2
  fi
done

# (r)'s Redis and the two servers that read it, when this build has the
# Redis store. The servers read it over loopback TCP, not its unix socket: a
# cluster is reached over TCP only, so (r) and (rc) pay the same transport
# (results files from before (rc) came read it over the unix socket).
redis_warm_port="" redis_cold_port=""
if [[ $("$numaserve" serve --help) == *--item-cache-ttl* ]]; then
  redis_dir=$(mktemp -d)
  redis_port=$(free_port)
  taskset -c "$client_cpus" redis-server --port "$redis_port" --bind 127.0.0.1 --unixsocket "$redis_dir/redis.sock" \
    --save '' --appendonly no --logfile "$redis_dir/redis.log" &
  redis_pid=$!
  for ((i = 0; i < 100; i++)); do [[ -S $redis_dir/redis.sock ]] && break; sleep 0.05; done  # after the TCP port
  redis_url=redis://127.0.0.1:$redis_port
  "$numaserve" feature-store load "$models/store.jsonl" --to "$redis_url" --model-dir "$models/ranker_a" > /dev/null
  redis_warm_port=$(free_port)
  start_server "$redis_warm_port" "$server_cpus" "$models/ranker_a" "$redis_url" --item-cache-ttl 1h
  redis_warm_pid=$server_pid
  redis_cold_port=$(free_port)
  start_server "$redis_cold_port" "$server_cpus" "$models/ranker_a" "$redis_url" --item-cache-ttl 0
  redis_cold_pid=$server_pid
fi

# (rc)'s cluster, 3 masters and no replicas (a benchmark: a replica would
# only take CPU from the load generator's), its nodes pinned to the load
# generator's CPUs like (r)'s Redis (they inherit the affinity), and its two
# servers, when this build reads a cluster.
cluster_pids=() cluster_warm_port="" cluster_cold_port=""
if [[ -n $redis_pid && $("$numaserve" serve --help) == *redis+cluster://* ]]; then
  cluster_dir=$(mktemp -d)
  cluster=$(taskset -c "$client_cpus" python3 tests/service/redis_cluster.py start "$cluster_dir" --masters 3 --replicas 0)
  mapfile -t cluster_ports < <(jq -r '.masters[]' <<< "$cluster")
  cluster_nodes=()
  for p in "${cluster_ports[@]}"; do
    # The tests' 1 s failure detection is for failovers; here a node slowed
    # by the saturated CPU must not be marked failed (no replica to take
    # its slots: the cluster would answer CLUSTERDOWN).
    redis-cli -p "$p" CONFIG SET cluster-node-timeout 15000 > /dev/null
    cluster_pids+=("$(redis-cli -p "$p" INFO server | tr -d '\r' | sed -n 's/^process_id://p')")
    cluster_nodes+=("127.0.0.1:$p")
  done
  "$numaserve" feature-store load "$models/store.jsonl" --to "redis+cluster://${cluster_nodes[0]}" \
    --model-dir "$models/ranker_a" > /dev/null
  keys=0
  for p in "${cluster_ports[@]}"; do keys=$((keys + $(redis-cli -p "$p" DBSIZE))); done
  echo "(rc): Redis Cluster on ports ${cluster_ports[*]} (pids ${cluster_pids[*]}), $keys keys;" \
       "(r)'s Redis $(redis-cli -p "$redis_port" DBSIZE)" >&2
  cluster_url=redis+cluster://$(IFS=,; echo "${cluster_nodes[*]}")  # every master a startup node
  cluster_warm_port=$(free_port)
  start_server "$cluster_warm_port" "$server_cpus" "$models/ranker_a" "$cluster_url" --item-cache-ttl 1h
  cluster_warm_pid=$server_pid
  cluster_cold_port=$(free_port)
  start_server "$cluster_cold_port" "$server_cpus" "$models/ranker_a" "$cluster_url" --item-cache-ttl 0
  cluster_cold_pid=$server_pid
fi
server_pid=${server_pids[0]}

# load CONNECTIONS [PROFILE [PORT PID [--grpc GRPC_PORT | --v2-infer json|binary | --redis "PID..."]]]: one
# closed-loop measurement, with what the server spent on it per request: CPU
# by thread kind, its own stage times, Redis's CPU when it has one ((r)'s
# Redis, or the processes --redis names: (rc)'s masters, summed), and with
# PROFILE=1 the system calls' share (syscall_profile).
load() {
  local m0 m1 t0 t1 u0 u1 r0 r1 result kernel='null' profiled port=${3:-$port} server_pid=${4:-$server_pid}
  local target=(--port "$port") redis_pids=()
  [[ ${5:-} != --grpc ]] || target=(--grpc --port "$6")
  [[ ${5:-} != --v2-infer ]] || target+=(--v2-infer "$6" --model-dir "$models/ranker_a")
  [[ -z $redis_pid ]] || redis_pids=("$redis_pid")
  [[ ${5:-} != --redis ]] || read -ra redis_pids <<< "$6"
  m0=$(scrape_stages "$port")
  t0=$(thread_cpu_seconds "$server_pid")
  u0=$(process_user_system_seconds "$server_pid")
  r0=$(processes_cpu_seconds "${redis_pids[@]}")
  if [[ ${2:-0} == 1 ]]; then
    profiled=$(mktemp)
    (sleep "$warmup"; syscall_profile "$server_pid" $((seconds - 1)) > "$profiled") &
  fi
  result=$(timeout $limit "$bench" load "${target[@]}" --feature-store "$models/store.jsonl" --items "$items" \
    --connections "$1" --seconds "$seconds" --warmup "$warmup" --cpus "$client_cpus")
  t1=$(thread_cpu_seconds "$server_pid")
  u1=$(process_user_system_seconds "$server_pid")
  r1=$(processes_cpu_seconds "${redis_pids[@]}")
  m1=$(scrape_stages "$port")
  if [[ ${2:-0} == 1 ]]; then
    wait
    kernel=$(jq -c --argjson rps "$(jq .rps <<< "$result")" --argjson s $((seconds - 1)) \
      'with_entries(.value = (.value / ($rps * $s) * 1e6 * 10 | round / 10))' "$profiled")
    rm -f "$profiled"
  fi
  jq -c --argjson t0 "$t0" --argjson t1 "$t1" --argjson m0 "$m0" --argjson m1 "$m1" --argjson kernel "$kernel" \
    --argjson u0 "$u0" --argjson u1 "$u1" --argjson r0 "$r0" --argjson r1 "$r1" '
    ($m1.requests - $m0.requests) as $n
    | def per_request($key): (($m1[$key] - $m0[$key]) / $n * 1e6);
    . + {served_requests: $n,
         cpu_us_per_request: ($t1 | with_entries(.value = ((.value - ($t0[.key] // 0)) / $n * 1e6 | round))),
         stages_us: {parse: per_request("parse"), query: per_request("query"), extract: per_request("extract"),
                      forward: per_request("forward"), encode: per_request("encode")},
         mean_batch_requests: (if $m1.forwards > $m0.forwards
                               then ($m1.forward_requests - $m0.forward_requests) / ($m1.forwards - $m0.forwards)
                               else null end)}
    | .transport_us = ((.cpu_us_per_request | [.[]] | add) - (.stages_us | [.[]] | add))
    # User space and kernel apart; the forward (its wall time on the pinned
    # CPU, all user space) taken out of the user side.
    | .user_us_per_request = (($u1.user - $u0.user) / $n * 1e6)
    | .system_us_per_request = (($u1.system - $u0.system) / $n * 1e6)
    | .user_outside_forward_us = (.user_us_per_request - .stages_us.forward)
    | .redis_cpu_us_per_request = (($r1 - $r0) / $n * 1e6 | round)
    | if $kernel then .profile_us = $kernel else . end' <<< "$result"
}

# wrk CONNECTIONS: requests/s and non-200 answers from wrk, same bodies.
wrk_load() {
  local text
  text=$(timeout $limit taskset -c "$client_cpus" wrk -t1 -c"$1" -d"${seconds}s" --timeout 10s \
    -s bench/wrk_predict.lua "http://127.0.0.1:$port/predict" -- "$bodies")
  jq -nc --arg text "$text" --argjson items "$items" '
    ($text | capture("Requests/sec:\\s+(?<rps>[0-9.]+)").rps | tonumber) as $rps
    | {rps: $rps, items_per_s: ($rps * $items),
       non_200: (($text | capture("Non-2xx or 3xx responses: (?<n>[0-9]+)").n // "0") | tonumber)}'
}

limit=$((seconds * 3 + 60))
forward=() served=() batched=() stages=() wrks=() redis_warm=() redis_cold=() grpcs=() v2_json=() v2_binary=()
cluster_warm=() cluster_cold=()
binary_tensors=0  # (v): a server that takes Triton's binary tensor data says so in its metadata
curl -sf "http://127.0.0.1:$port/v2" | jq -e '.extensions | index("binary_tensor_data")' > /dev/null && binary_tensors=1
for ((r = 1; r <= repeats; r++)); do
  # Interleaved, each ratio within its round: this machine's speed drifts by
  # tens of percent over a minute, less over the seconds a round takes.
  forward+=("$(timeout $limit "$bench" forward --model-dir "$models/ranker_a" --feature-store "$models/store.jsonl" \
    --items "$items" --cpus "$server_cpus" --seconds "$seconds" --warmup "$warmup")")
  served+=("$(load "$connections" $((profile && r == 1)))")
  wrks+=("$(wrk_load "$connections")")
  stages+=("$(timeout $limit "$bench" stages --model-dir "$models/ranker_a" --feature-store "$models/store.jsonl" \
    --items "$items" --cpus "$server_cpus" --seconds "$seconds")")
  batched+=("$(load $((connections * 4)))")
  if [[ -n $grpc_port ]]; then
    grpcs+=("$(load "$connections" 0 "$port" "$server_pid" --grpc "$grpc_port")")
    echo "round $r: Ranking.Predict over gRPC $(jq .items_per_s <<< "${grpcs[-1]}") items/s" >&2
  fi
  for precision in "${narrowed[@]}"; do
    [[ -n ${narrowed_port[$precision]:-} ]] || continue
    run=$(load "$connections" 0 "${narrowed_port[$precision]}" "${narrowed_pid[$precision]}")
    narrowed_runs[$precision]+=$run$'\n'
    echo "round $r: /predict in $precision $(jq .items_per_s <<< "$run") items/s" >&2
  done
  if ((binary_tensors)); then
    v2_json+=("$(load "$connections" 0 "$port" "$server_pid" --v2-infer json)")
    v2_binary+=("$(load "$connections" 0 "$port" "$server_pid" --v2-infer binary)")
    echo "round $r: v2 infer, JSON tensors $(jq .items_per_s <<< "${v2_json[-1]}"), binary $(jq .items_per_s <<< "${v2_binary[-1]}") items/s" >&2
  fi
  if [[ -n $redis_pid ]]; then
    redis_warm+=("$(load "$connections" 0 "$redis_warm_port" "$redis_warm_pid")")
    redis_cold+=("$(load "$connections" 0 "$redis_cold_port" "$redis_cold_pid")")
    echo "round $r: Redis, item cache warm $(jq .items_per_s <<< "${redis_warm[-1]}"), cold $(jq .items_per_s <<< "${redis_cold[-1]}") items/s" >&2
  fi
  if [[ -n $cluster_warm_port ]]; then
    # Right after (r)'s, same load: each ratio to (r) is taken within the round.
    cluster_warm+=("$(load "$connections" 0 "$cluster_warm_port" "$cluster_warm_pid" --redis "${cluster_pids[*]}")")
    cluster_cold+=("$(load "$connections" 0 "$cluster_cold_port" "$cluster_cold_pid" --redis "${cluster_pids[*]}")")
    echo "round $r: Redis Cluster, item cache warm $(jq .items_per_s <<< "${cluster_warm[-1]}")" \
         "($(jq -n "${cluster_warm[-1]} | .items_per_s / ${redis_warm[-1]}.items_per_s * 1000 | round / 1000") x single)," \
         "cold $(jq .items_per_s <<< "${cluster_cold[-1]}")" \
         "($(jq -n "${cluster_cold[-1]} | .items_per_s / ${redis_cold[-1]}.items_per_s * 1000 | round / 1000") x single) items/s" >&2
  fi
  echo "round $r: forward $(jq .items_per_s <<< "${forward[-1]}"), /predict $(jq .items_per_s <<< "${served[-1]}")," \
       "wrk $(jq .items_per_s <<< "${wrks[-1]}"), $((connections * 4)) connections $(jq .items_per_s <<< "${batched[-1]}")," \
       "pipeline $(jq .items_per_s <<< "${stages[-1]}") items/s" >&2
done

# sweep MODEL ITEMS PORT: rounds of (a) and (b) for MODEL at ITEMS items
# per request; prints one JSON object with the median of the rounds' b/a.
sweep() {
  local model=$1 n=$2 sweep_port=$3 a b ratios=() r
  for ((r = 1; r <= repeats; r++)); do
    a=$(timeout $limit "$bench" forward --model-dir "$models/$model" --feature-store "$models/store.jsonl" \
      --items "$n" --cpus "$server_cpus" --seconds "$seconds" --warmup "$warmup" | jq .items_per_s)
    b=$(timeout $limit "$bench" load --port "$sweep_port" --feature-store "$models/store.jsonl" --items "$n" \
      --connections "$connections" --seconds "$seconds" --warmup "$warmup" --cpus "$client_cpus" | jq .items_per_s)
    ratios+=("$(jq -n --argjson a "$a" --argjson b "$b" '{a: $a, b: $b, b_a: ($b / $a)}')")
  done
  printf '%s\n' "${ratios[@]}" | jq -sc --arg model "$model" --argjson items "$n" '
    def median: sort | .[(length / 2 | floor)];
    {model: $model, items: $items, forward_items_per_s: ([.[].a] | median),
     predict_items_per_s: ([.[].b] | median), b_a: ([.[].b_a] | median)}'
  echo "sweep: $model, $n items: b/a $(jq .b_a <<< "${ratios[-1]}") (last round)" >&2
}
swept=()
for n in $sizes; do swept+=("$(sweep ranker_a "$n" "$port")"); done
b_port=$(free_port)
start_server "$b_port" "$server_cpus" "$models/ranker_b" "$models/store.jsonl"
swept+=("$(sweep ranker_b "$items" "$b_port")")

stop_servers
stop_redis

jq -n --argjson forward "$(printf '%s\n' "${forward[@]}" | jq -s .)" \
  --argjson served "$(printf '%s\n' "${served[@]}" | jq -s .)" \
  --argjson batched "$(printf '%s\n' "${batched[@]}" | jq -s .)" \
  --argjson stages "$(printf '%s\n' "${stages[@]}" | jq -s .)" \
  --argjson wrks "$(printf '%s\n' "${wrks[@]}" | jq -s .)" \
  --argjson redis_warm "$(printf '%s\n' "${redis_warm[@]}" | jq -s .)" \
  --argjson redis_cold "$(printf '%s\n' "${redis_cold[@]}" | jq -s .)" \
  --argjson cluster_warm "$(printf '%s\n' "${cluster_warm[@]}" | jq -s .)" \
  --argjson cluster_cold "$(printf '%s\n' "${cluster_cold[@]}" | jq -s .)" \
  --argjson grpcs "$(printf '%s\n' "${grpcs[@]}" | jq -s .)" \
  --argjson narrowed "$(for precision in "${narrowed[@]}"; do
      printf '%s' "${narrowed_runs[$precision]:-}" | jq -sc --arg p "$precision" '{($p): .}'
    done | jq -s add)" \
  --argjson v2_json "$(printf '%s\n' "${v2_json[@]}" | jq -s .)" \
  --argjson v2_binary "$(printf '%s\n' "${v2_binary[@]}" | jq -s .)" \
  --argjson sweep "$(printf '%s\n' "${swept[@]}" | jq -s .)" \
  --arg machine "$(machine_summary)" --arg server_cpus "$server_cpus" --arg client_cpus "$client_cpus" \
  --arg numaserve "$numaserve" --argjson connections "$connections" '
  def median: map(select(. != null)) | sort | if length == 0 then null else .[(length / 2 | floor)] end;
  # The median over rounds of (this measurement / that one of the same round).
  def per_round_ratio($of; $to): [range(0; $of | length) as $i | $of[$i].items_per_s / $to[$i].items_per_s] | median;
  def summary($runs): {items_per_s: ([$runs[].items_per_s] | median), rps: ([$runs[].rps] | median),
    p50_ms: ([$runs[].p50_ms] | median), p99_ms: ([$runs[].p99_ms] | median), errors: ([$runs[].errors] | add),
    mean_batch_requests: ([$runs[].mean_batch_requests] | median),
    cpu_us_per_request: ([$runs[].cpu_us_per_request] | map(keys) | add | unique
      | map({key: ., value: ([$runs[].cpu_us_per_request[.] // 0] | median)}) | from_entries),
    stages_us: ($runs[0].stages_us | keys | map({key: ., value: ([$runs[].stages_us[.]] | median)}) | from_entries),
    transport_us: ([$runs[].transport_us] | median),
    user_us_per_request: ([$runs[].user_us_per_request] | median),
    system_us_per_request: ([$runs[].system_us_per_request] | median),
    user_outside_forward_us: ([$runs[].user_outside_forward_us] | median),
    redis_cpu_us_per_request: ([$runs[].redis_cpu_us_per_request] | median)};
  def narrowed($runs): if ($runs | length) == 0 then null else summary($runs) + {vs_predict: per_round_ratio($runs; $served)} end;
  def redis($runs): if ($runs | length) == 0 then null else summary($runs) + {
    vs_embedded: per_round_ratio($runs; $served),
    p99_added_ms: ([range(0; $runs | length) as $i | $runs[$i].p99_ms - $served[$i].p99_ms] | median)} end;
  # (rc): the fields of (r), and beside the single server of the same rounds.
  def cluster($runs; $single; $target): redis($runs) | if . == null then null else . + {
    vs_single: per_round_ratio($runs; $single), vs_single_target: $target,
    p99_added_vs_single_ms: ([range(0; $runs | length) as $i | $runs[$i].p99_ms - $single[$i].p99_ms] | median)} end;
  {machine: $machine, numaserve: $numaserve, server_cpus: $server_cpus, client_cpus: $client_cpus,
   connections: $connections,
   forward: {items_per_s: ([$forward[].items_per_s] | median), p50_ms: ([$forward[].p50_ms] | median)},
   predict: summary($served), batched: summary($batched),
   profile_us: ($served[0].profile_us // null),
   wrk: {items_per_s: ([$wrks[].items_per_s] | median), non_200: ([$wrks[].non_200] | add)},
   redis_warm: redis($redis_warm), redis_cold: redis($redis_cold),
   redis_transport: (if ($redis_warm | length) == 0 then null else "tcp loopback" end),
   redis_cluster_warm: cluster($cluster_warm; $redis_warm; 0.95),
   redis_cluster_cold: cluster($cluster_cold; $redis_cold; 0.85),
   # (bf), (i8): beside (b) in the same rounds.
   bf16: narrowed($narrowed.bf16), int8: narrowed($narrowed.int8),
   grpc: (if ($grpcs | length) == 0 then null else summary($grpcs) + {vs_predict: per_round_ratio($grpcs; $served),
     transport_vs_predict_us: ([range(0; $grpcs | length) as $i | $grpcs[$i].transport_us - $served[$i].transport_us] | median)} end),
   v2_infer: (if ($v2_json | length) == 0 then null else {json: summary($v2_json),
     binary: (summary($v2_binary) + {vs_json: per_round_ratio($v2_binary; $v2_json)})} end),
   pipeline: {items_per_s: ([$stages[].items_per_s] | median),
              stages_us: {parse: ([$stages[].parse_us] | median), query: ([$stages[].query_us] | median),
                          extract: ([$stages[].extract_us] | median), forward: ([$stages[].forward_us] | median),
                          reply: ([$stages[].reply_us] | median)}},
   ratios: {b_a: per_round_ratio($served; $forward), b16_a: per_round_ratio($batched; $forward),
            p_a: per_round_ratio($stages; $forward), w_b: per_round_ratio($wrks; $served)},
   sweep: $sweep,
   rounds: {forward: $forward, predict: $served, batched: $batched, stages: $stages, wrk: $wrks,
            redis_warm: $redis_warm, redis_cold: $redis_cold,
            redis_cluster_warm: $cluster_warm, redis_cluster_cold: $cluster_cold, grpc: $grpcs, bf16: $narrowed.bf16, int8: $narrowed.int8, v2_json: $v2_json, v2_binary: $v2_binary}}' > "$out"

jq -r '
  . as $root |
  def r3: . * 1000 | round / 1000;
  def r2: . * 100 | round / 100;
  def breakdown: "\(.cpu_us_per_request | [.[]] | add) us: " +
    (.stages_us | to_entries | map("\(.key) \(.value | round)") | join(", ")) + ", transport \(.transport_us // 0 | round)";
  "machine: \(.machine)", "server: \(.numaserve), CPUs \(.server_cpus); load generator CPUs \(.client_cpus); medians of \(.rounds.forward | length) rounds",
  "(a)   forward in-process:  \(.forward.items_per_s | floor) items/s (p50 \(.forward.p50_ms | r3) ms per call)",
  "(b)   POST /predict, \(.connections) conn: \(.predict.items_per_s | floor) items/s, \(.predict.rps | floor) req/s, p50 \(.predict.p50_ms | r2) ms, p99 \(.predict.p99_ms | r2) ms, errors \(.predict.errors), mean batch \(.predict.mean_batch_requests // "n/a" | tostring | .[0:4]) requests",
  "(b16) POST /predict, \(.connections * 4) conn: \(.batched.items_per_s | floor) items/s, p50 \(.batched.p50_ms | r2) ms, p99 \(.batched.p99_ms | r2) ms, errors \(.batched.errors), mean batch \(.batched.mean_batch_requests // "n/a" | tostring | .[0:4]) requests",
  "(w)   wrk, \(.connections) conn:       \(.wrk.items_per_s | floor) items/s, non-200 \(.wrk.non_200)",
  "(p)   pipeline, no HTTP:   \(.pipeline.items_per_s | floor) items/s",
  ((["bf", "bf16"], ["i8", "int8"]) as [$tag, $precision] | $root[$precision] | select(. != null) |
    "(\($tag))  POST /predict, precision \($precision), \($root.connections) conn: \(.items_per_s | floor) items/s = \(.vs_predict | r3) x (b), p50 \(.p50_ms | r2) ms, p99 \(.p99_ms | r2) ms, errors \(.errors); server CPU \(breakdown) us"),
  (.grpc | select(. != null) |
    "(g)   Ranking.Predict, gRPC, \($root.connections) conn: \(.items_per_s | floor) items/s = \(.vs_predict | r3) x (b), p50 \(.p50_ms | r2) ms, p99 \(.p99_ms | r2) ms, errors \(.errors); server CPU \(breakdown) us, outside the stages \(.transport_vs_predict_us | r2) us over (b)"),
  (.v2_infer | select(. != null) |
    "(vj)  v2 infer, JSON tensors, \($root.connections) conn: \(.json.items_per_s | floor) items/s, p50 \(.json.p50_ms | r2) ms, p99 \(.json.p99_ms | r2) ms, errors \(.json.errors)",
    "(vb)  v2 infer, binary tensors, \($root.connections) conn: \(.binary.items_per_s | floor) items/s = \(.binary.vs_json | r3) x (vj), p50 \(.binary.p50_ms | r2) ms, p99 \(.binary.p99_ms | r2) ms, errors \(.binary.errors)"),
  (["warm", .redis_warm], ["cold", .redis_cold] | select(.[1] != null) | .[0] as $cache | .[1] |
    "(r)   Redis, item cache \($cache): \(.items_per_s | floor) items/s = \(.vs_embedded | r3) x (b), p99 \(.p99_ms | r2) ms (\(.p99_added_ms | r2) ms over (b)), query \(.stages_us.query | round) us/request, Redis CPU \(.redis_cpu_us_per_request) us/request, server CPU \(.cpu_us_per_request | [.[]] | add) us/request, errors \(.errors)"),
  (["warm", .redis_cluster_warm], ["cold", .redis_cluster_cold] | select(.[1] != null) | .[0] as $cache | .[1] |
    "(rc)  Redis Cluster, 3 masters, item cache \($cache): \(.items_per_s | floor) items/s = \(.vs_single | r3) x (r) \($cache) (target >= \(.vs_single_target): \(if .vs_single >= .vs_single_target then "met" else "missed" end)), \(.vs_embedded | r3) x (b), p99 \(.p99_ms | r2) ms (\(.p99_added_vs_single_ms | r2) ms over (r)), query \(.stages_us.query | round) us/request, Redis CPU (3 masters) \(.redis_cpu_us_per_request) us/request, server CPU \(.cpu_us_per_request | [.[]] | add) us/request, errors \(.errors)"),
  "ratios: b/a \(.ratios.b_a | r3), b16/a \(.ratios.b16_a | r3), p/a \(.ratios.p_a | r3), wrk/b \(.ratios.w_b | r3)",
  (.sweep[] | "sweep: \(.model), \(.items) items per request: b/a \(.b_a | r3) (forward \(.forward_items_per_s | floor), /predict \(.predict_items_per_s | floor) items/s)"),
  "server CPU per request in (b), by thread: \(.predict.cpu_us_per_request | to_entries | map(select(.value > 0)) | map("\(.key) \(.value) us") | join(", "))",
  "  where it goes (b):   \(.predict | breakdown) us",
  "  where it goes (b16): \(.batched | breakdown) us",
  (.grpc | select(. != null) | "  where it goes (g):   \(breakdown) us"),
  (.v2_infer | select(. != null) | "  where it goes (vj):  \(.json | breakdown) us", "  where it goes (vb):  \(.binary | breakdown) us"),
  (["(b)", .predict, 30], ["(g)", .grpc, 20] | select(.[1] != null) | .[0] as $tag | .[2] as $target | .[1] |
    "  user space and kernel \($tag): outside the forward \(.user_outside_forward_us | round) us of user space (target <= \($target)), \(.system_us_per_request | round) us of system CPU per request"),
  (if .profile_us then "  (b) by perf, per request: send \(.profile_us.send) us (of it \(.profile_us.loopback_receive) us delivering into the client on this CPU), recv \(.profile_us.recv) us, epoll \(.profile_us.epoll) us, other kernel \(.profile_us.other_kernel) us, user space \(.profile_us.user) us" else empty end),
  "stages of (p), each beside the forward: \(.pipeline.stages_us | to_entries | map("\(.key) \(.value | round) us") | join(", "))"' "$out"
echo "results: $out"

#!/usr/bin/env bash
# bench/serving.sh — how close serving over HTTP comes to the model's own
# speed, measured side by side in one run on the same pinned CPU:
#   (a) in-process forward of ranker_a, N items per call, on --server-cpus
#   (b) POST /predict at saturation (closed loop), N items per request, the
#       server pinned to --server-cpus and the load generator to --client-cpus
#   (c) the same with dynamic batching on and twice the connections, so the
#       batcher has requests to join
#   (p) the same pipeline as /predict without HTTP: parse, query, extract,
#       forward, reply in turn on one thread on --server-cpus — the most any
#       transport could serve, and what each stage costs beside the forward
# Prints items/s of each, the ratios b/a, c/a and p/a, p50/p99, where (b)
# spends the server's CPU (HTTP threads vs inference workers, per request),
# and writes a JSON results file. Not a test: numbers for a person (and the
# README) to read.
set -euo pipefail
cd "$(dirname "$0")/.."

server_cpus=0 client_cpus=1 items=200 seconds=5 warmup=2 connections=4 repeats=5
build=${BUILD_DIR:-build} models="" out=""
usage() {
  cat <<EOF
Usage: bench/serving.sh [--server-cpus LIST] [--client-cpus LIST] [--items N] [--seconds S]
                        [--connections C] [--repeats R] [--models DIR] [--out FILE]
Defaults: server on CPU $server_cpus, client on CPU $client_cpus, $items items, ${seconds}s per
measurement after ${warmup}s warm-up, $connections connections, $repeats alternating repeats
(medians reported; a ratio is the median of the rounds' own ratios), demo models (200 MiB of embeddings) made in $build/bench-models.
EOF
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
    -h|--help) usage; exit 0 ;;
    *) echo "bench/serving.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

./scripts/build.sh > /dev/null
numaserve=$build/service/numaserve bench=$build/bench/numaserve-bench
models=${models:-$build/bench-models}
[[ -f $models/ranker_a/model.pt ]] || "$numaserve" make-demo-models "$models" > /dev/null
out=${out:-bench/results/serving-$(date -u +%Y%m%dT%H%M%SZ).json}
mkdir -p "$(dirname "$out")"

source bench/lib.sh
# Two servers for the whole run, each pinned like a pod with this cpuset;
# only the one under load is busy.
port=$(free_port)
start_server "$port" "$server_cpus" "$models/ranker_a" "$models/store.jsonl"
plain_pid=$server_pid
batching_port=$(free_port)
start_server "$batching_port" "$server_cpus" "$models/ranker_a" "$models/store.jsonl" --dynamic-batching
batching_pid=$server_pid

# load PORT PID CONNECTIONS: one closed-loop measurement, with the server's
# CPU use, and its CPU per request by thread kind (HTTP side, workers).
load() {
  local before after threads_before threads_after result
  before=$(process_cpu_seconds "$2")
  threads_before=$(thread_cpu_seconds "$2")
  result=$(timeout $limit "$bench" load --port "$1" --feature-store "$models/store.jsonl" --items "$items" \
    --connections "$3" --seconds "$seconds" --warmup "$warmup" --cpus "$client_cpus")
  after=$(process_cpu_seconds "$2")
  threads_after=$(thread_cpu_seconds "$2")
  # The load generator counts requests after its warm-up; the threads' CPU
  # covers warm-up too, so it is spread over the requests of the whole span.
  jq -c --argjson before "$before" --argjson after "$after" --argjson span "$((seconds + warmup))" \
    --argjson t0 "$threads_before" --argjson t1 "$threads_after" '
    (.rps * $span) as $all
    | . + {server_cpu_utilisation: (($after - $before) / $span),
           cpu_us_per_request: ($t1 | with_entries(.value = ((.value - ($t0[.key] // 0)) / $all * 1e6 | round)))}' <<< "$result"
}

limit=$((seconds * 3 + 60))
forward=() served=() batched=() stages=()
for ((r = 1; r <= repeats; r++)); do
  # Interleave (a), (b), (p) and (c), each ratio taken within its round:
  # this machine's speed drifts by tens of percent over a minute, less over
  # the seconds one round takes.
  forward+=("$(timeout $limit "$bench" forward --model-dir "$models/ranker_a" --feature-store "$models/store.jsonl" \
    --items "$items" --cpus "$server_cpus" --seconds "$seconds" --warmup "$warmup")")
  served+=("$(load "$port" "$plain_pid" "$connections")")
  stages+=("$(timeout $limit "$bench" stages --model-dir "$models/ranker_a" --feature-store "$models/store.jsonl" \
    --items "$items" --cpus "$server_cpus" --seconds "$seconds")")
  batched+=("$(load "$batching_port" "$batching_pid" $((connections * 2)))")
  echo "round $r: forward $(jq .items_per_s <<< "${forward[-1]}"), /predict $(jq .items_per_s <<< "${served[-1]}")," \
       "batched $(jq .items_per_s <<< "${batched[-1]}"), pipeline $(jq .items_per_s <<< "${stages[-1]}") items/s" >&2
done
stop_servers

jq -n --argjson forward "$(printf '%s\n' "${forward[@]}" | jq -s .)" \
  --argjson served "$(printf '%s\n' "${served[@]}" | jq -s .)" \
  --argjson batched "$(printf '%s\n' "${batched[@]}" | jq -s .)" \
  --argjson stages "$(printf '%s\n' "${stages[@]}" | jq -s .)" \
  --arg machine "$(machine_summary)" --arg server_cpus "$server_cpus" --arg client_cpus "$client_cpus" '
  def median: sort | .[(length / 2 | floor)];
  # The median over rounds of (this measurement / the forward of its round).
  def per_round_ratio($of): [range(0; $of | length) as $i | $of[$i].items_per_s / $forward[$i].items_per_s] | median;
  {machine: $machine, server_cpus: $server_cpus, client_cpus: $client_cpus,
   forward_items_per_s: ([$forward[].items_per_s] | median),
   forward_p50_ms: ([$forward[].p50_ms] | median),
   predict_items_per_s: ([$served[].items_per_s] | median),
   predict_rps: ([$served[].rps] | median),
   predict_p50_ms: ([$served[].p50_ms] | median),
   predict_p99_ms: ([$served[].p99_ms] | median),
   predict_errors: ([$served[].errors] | add),
   server_cpu_utilisation: ([$served[].server_cpu_utilisation] | median),
   ratio: per_round_ratio($served),
   batched_items_per_s: ([$batched[].items_per_s] | median),
   batched_p50_ms: ([$batched[].p50_ms] | median),
   batched_p99_ms: ([$batched[].p99_ms] | median),
   batched_errors: ([$batched[].errors] | add),
   batched_ratio: per_round_ratio($batched),
   predict_cpu_us_per_request: ([$served[].cpu_us_per_request] | map(keys) | add | unique
     | map({key: ., value: ([$served[].cpu_us_per_request[.] // 0] | median)}) | from_entries),
   # The share of the server CPU that the inference workers used under (b):
   # what b/a would be if the forward cost inside the server what it costs
   # alone. Measured within each round, it moves less with the speed of this
   # machine than b/a, whose (a) and (b) run seconds apart.
   predict_forward_share: ([$served[].cpu_us_per_request | (."ns-worker" // 0) / ([.[]] | add)] | median),
   pipeline_items_per_s: ([$stages[].items_per_s] | median),
   pipeline_ratio: per_round_ratio($stages),
   stages_us: {parse: ([$stages[].parse_us] | median), query: ([$stages[].query_us] | median),
                extract: ([$stages[].extract_us] | median), forward: ([$stages[].forward_us] | median),
                reply: ([$stages[].reply_us] | median)},
   rounds: {forward: $forward, predict: $served, batched: $batched, stages: $stages}}' > "$out"

jq -r '"machine: \(.machine)",
  "server CPUs \(.server_cpus), load generator CPUs \(.client_cpus); medians of \(.rounds.forward | length) rounds",
  "(a) forward in-process: \(.forward_items_per_s | floor) items/s (p50 \(.forward_p50_ms * 1000 | round / 1000) ms per call)",
  "(b) POST /predict:      \(.predict_items_per_s | floor) items/s, \(.predict_rps | floor) req/s, p50 \(.predict_p50_ms * 100 | round / 100) ms, p99 \(.predict_p99_ms * 100 | round / 100) ms, errors \(.predict_errors), server CPU \(.server_cpu_utilisation * 100 | round)%",
  "(c) /predict, batching:  \(.batched_items_per_s | floor) items/s, p50 \(.batched_p50_ms * 100 | round / 100) ms, p99 \(.batched_p99_ms * 100 | round / 100) ms, errors \(.batched_errors)",
  "ratio b/a:              \(.ratio * 1000 | round / 1000)",
  "ratio c/a:              \(.batched_ratio * 1000 | round / 1000)",
  "(p) pipeline, no HTTP:  \(.pipeline_items_per_s | floor) items/s, p/a \(.pipeline_ratio * 1000 | round / 1000) (the most any transport could serve)",
  "workers share of server CPU under (b): \(.predict_forward_share * 1000 | round / 1000) (b/a if the forward cost in the server what it costs alone)",
  "where (b) spends the server CPU, per request: \(.predict_cpu_us_per_request | to_entries | map(select(.value > 0)) | map("\(.key) \(.value) us") | join(", ")) (forward alone: \(1000 * .forward_p50_ms | round) us)",
  "stages of (p), each beside the forward: parse \(.stages_us.parse | round) us, query \(.stages_us.query | round) us, extract \(.stages_us.extract | round) us, forward \(.stages_us.forward | round) us, reply \(.stages_us.reply | round) us"' "$out"
echo "results: $out"

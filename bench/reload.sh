#!/usr/bin/env bash
# bench/reload.sh — what a hot reload costs the traffic, side by side in one
# run, the server pinned to the same CPUs throughout (explicit mode, its
# admin port taking the load calls):
#   (s)  saturation: closed-loop /predict, to size the offered load
#   (q)  open loop at --load x (s)'s rate, no reload: p50/p99
#   (r)  the same load while ranker_a is reloaded back to back (versions 1
#        and 2 alternate; each load: read, check, warm on every worker,
#        switch, free the old): p50/p99, reloads done, non-200 replies
#   (e)  the same with one reload every --every seconds (2): a window in
#        which reloads happen, as a daily or hourly retrain has them
# each round in that order on one server per --shares value (its
# --reload-cpu-share; default 1, reading model.pt at full speed, and 0.25,
# the service's default), all at the rate of the round's saturation on the
# first, --repeats rounds, medians and the ratios p99(r)/p99(q) and
# p99(e)/p99(q) taken within each round. Then the
# load and warm-up seconds the server measured (its /metrics histograms)
# for the 200 MiB demo model and, with --big MB, for a model of MB MiB of
# tables (make-demo-models --embedding-mb), from page cache (each version
# read once before). Writes a JSON results file. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."

server_cpus=0 client_cpus=1 items=200 seconds=6 warmup=2 load=0.7 repeats=3 big=0 every=2 shares="1 0.25"
build=${BUILD_DIR:-build} models="" out=""
usage() {
  cat <<USAGE
Usage: bench/reload.sh [--server-cpus LIST] [--client-cpus LIST] [--items N] [--seconds S]
                       [--load F] [--repeats R] [--every S] [--shares "S..."] [--big MB] [--models DIR] [--out FILE]
Defaults: server on CPU $server_cpus, client on CPU $client_cpus, $items items, ${seconds}s per
measurement after ${warmup}s warm-up, offered load $load x saturation, $repeats rounds, demo models
(200 MiB of tables) in $build/bench-models, one server per --reload-cpu-share in "$shares";
--big 4096 also times a 4 GiB model's load.
USAGE
}
while (($#)); do
  case $1 in
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --items) items=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --big) big=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --shares) shares=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/reload.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

source bench/lib.sh
prepare_models
out=${out:-bench/results/reload-$(date -u +%Y%m%dT%H%M%SZ).json}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'cleanup_servers; rm -rf "$work"' EXIT

# A repository of ranker_a at versions 1 and 2 (copies of the same files:
# two versions to alternate between), each moved into place. Not hard
# links: a link changes its file's ctime, which the completion rule reads
# (docs/operate.md) as a version still being written.
repository() {  # DIR MODEL_DIR
  mkdir -p "$1/ranker_a"
  for v in 1 2; do
    cp -r "$2" "$1/ranker_a/.incoming-$v"
    mv "$1/ranker_a/.incoming-$v" "$1/ranker_a/$v"
  done
  echo 'version_policy: {specific: [1]}' > "$1/ranker_a/config.yaml"
}

# start_repository PORT ADMIN_PORT REPO STORE [SHARE]: the server on $server_cpus.
start_repository() {
  local log
  log=$(mktemp)
  taskset -c "$server_cpus" "$numaserve" serve --model-repository "$3" --model-control-mode explicit \
    --feature-store "$4" --port "$1" --admin-port "$2" --listen-address 127.0.0.1 --log-level warning \
    --reload-cpu-share "${5:-0.25}" 2> "$log" &
  server_pid=$!
  server_pids+=("$server_pid")
  wait_ready "$1" "numaserve" "$log"
}

# Reloads back to back (PAUSE 0) or PAUSE seconds apart until $work/stop
# exists, from one process on the load generator's CPUs at nice 19
# (bench/reload_trigger.py); prints the reloads done and failed.
reload_loop() {  # ADMIN_PORT REPO PAUSE
  nice -n 19 taskset -c "$client_cpus" python3 bench/reload_trigger.py "$1" "$2/ranker_a/config.yaml" "$work/stop" "$3"
}

# Open loop over 32 connections: a server that stalls shows it as latency,
# not as requests the generator found no free connection for.
measure() {  # PORT RATE
  timeout $((seconds * 4 + 60)) "$bench" load --port "$1" --rate "$2" --connections 32 --items "$items" \
    --feature-store "$models/store.jsonl" --seconds "$seconds" --warmup "$warmup" --cpus "$client_cpus"
}

# The server's own load and warm-up seconds: each histogram's mean.
load_seconds() {  # ADMIN_PORT
  curl -s "http://127.0.0.1:$1/metrics" | awk '
    /^numaserve_model_load_seconds_sum/ {ls = $2} /^numaserve_model_load_seconds_count/ {lc = $2}
    /^numaserve_model_warmup_seconds_sum/ {ws = $2} /^numaserve_model_warmup_seconds_count/ {wc = $2}
    END { printf "{\"loads\": %d, \"load_s\": %.4f, \"warmup_s\": %.4f}\n", lc, lc ? ls / lc : 0, wc ? ws / wc : 0 }'
}

declare -A port admin
for share in $shares; do
  repository "$work/repo-$share" "$models/ranker_a"
  port[$share]=$(free_port) admin[$share]=$(free_port)
  start_repository "${port[$share]}" "${admin[$share]}" "$work/repo-$share" "$models/store.jsonl" "$share"
done
first=${shares%% *}
echo "machine: $(machine_summary); server CPUs $server_cpus, load generator CPUs $client_cpus; --reload-cpu-share $shares" >&2

rounds=()
for round in $(seq 1 "$repeats"); do
  s=$(timeout $((seconds * 4 + 60)) "$bench" load --port "${port[$first]}" --rate 0 --connections 4 --items "$items" \
    --feature-store "$models/store.jsonl" --seconds "$seconds" --warmup "$warmup" --cpus "$client_cpus")
  rate=$(jq -r --argjson f "$load" '.rps * $f' <<< "$s")
  with_reloads() {  # SHARE PAUSE -> the load's JSON with the reloads counted
    rm -f "$work/stop"
    reload_loop "${admin[$1]}" "$work/repo-$1" "$2" > "$work/reloads.json" &
    local loop=$! m
    m=$(measure "${port[$1]}" "$rate")
    touch "$work/stop"
    wait "$loop"
    jq -c --slurpfile n "$work/reloads.json" '{p50_ms, p99_ms, errors, statuses} + $n[0]' <<< "$m"
  }
  per_share=()
  for share in $shares; do
    q=$(measure "${port[$share]}" "$rate")
    r=$(with_reloads "$share" 0)
    e=$(with_reloads "$share" "$every")
    row=$(jq -n --argjson q "$q" --argjson r "$r" --argjson e "$e" --argjson every "$every" --argjson share "$share" '{
      cpu_share: $share,
      quiet: {p50_ms: $q.p50_ms, p99_ms: $q.p99_ms, errors: $q.errors, statuses: $q.statuses},
      back_to_back: $r, every: ($e + {seconds: $every}),
      p99_ratio_back_to_back: ($r.p99_ms / $q.p99_ms), p99_ratio_every: ($e.p99_ms / $q.p99_ms),
      p50_ratio_back_to_back: ($r.p50_ms / $q.p50_ms)}')
    echo "round $round, --reload-cpu-share $share: $(jq -c '{quiet: .quiet | {p50_ms, p99_ms}, back_to_back: .back_to_back | {p50_ms, p99_ms, reloads, statuses}, every: .every | {p50_ms, p99_ms, reloads, statuses}, p99_ratio_back_to_back, p99_ratio_every}' <<< "$row")" >&2
    per_share+=("$row")
  done
  rounds+=("$(printf '%s\n' "${per_share[@]}" | jq -s -c --argjson s "$s" --argjson rate "$rate" '{saturation_rps: $s.rps, offered_rps: $rate, shares: .}')")
done
load_of=()
for share in $shares; do load_of+=("$(load_seconds "${admin[$share]}" | jq -c --argjson share "$share" '. + {cpu_share: $share}')"); done
ranker_a_load=$(printf '%s\n' "${load_of[@]}" | jq -s -c .)
stop_servers

big_load=null
if ((big > 0)); then
  [[ -f $work/big/ranker_a/model.pt ]] || "$numaserve" make-demo-models --embedding-mb "$big" "$work/big" > /dev/null
  repository "$work/big-repo" "$work/big/ranker_a"
  cat "$work/big/ranker_a/model.pt" > /dev/null  # into page cache
  big_port=$(free_port) big_admin=$(free_port)
  start_repository "$big_port" "$big_admin" "$work/big-repo" "$work/big/store.jsonl" 1
  for v in 2 1 2; do
    echo "version_policy: {specific: [$v]}" > "$work/big-repo/ranker_a/config.yaml"
    curl -sf --max-time 600 -X POST "http://127.0.0.1:$big_admin/v2/repository/models/ranker_a/load" > /dev/null
  done
  big_load=$(load_seconds "$big_admin" | jq --argjson mb "$big" '. + {embedding_mb: $mb}')
  stop_servers
fi

printf '%s\n' "${rounds[@]}" | jq -s --arg machine "$(machine_summary)" --argjson a "$ranker_a_load" --argjson big "$big_load" \
  --arg server_cpus "$server_cpus" --argjson items "$items" '
  def median: sort | .[length / 2 | floor];
  . as $rounds | {
    machine: $machine, server_cpus: $server_cpus, items_per_request: $items, rounds: $rounds,
    median: [$rounds[0].shares | to_entries[] | .key as $i | [$rounds[].shares[$i]] | {
      cpu_share: .[0].cpu_share,
      quiet_p50_ms: (map(.quiet.p50_ms) | median), quiet_p99_ms: (map(.quiet.p99_ms) | median),
      back_to_back_p50_ms: (map(.back_to_back.p50_ms) | median), back_to_back_p99_ms: (map(.back_to_back.p99_ms) | median),
      every_p99_ms: (map(.every.p99_ms) | median),
      p99_ratio_back_to_back: (map(.p99_ratio_back_to_back) | median), p99_ratio_every: (map(.p99_ratio_every) | median),
      p50_ratio_back_to_back: (map(.p50_ratio_back_to_back) | median),
      reloads_back_to_back: (map(.back_to_back.reloads) | median),
      non_200: (map((.back_to_back.statuses, .every.statuses, .quiet.statuses) | to_entries[] | select(.key != "200" and .key != "0") | .value) | add // 0),
      not_sent: (map((.back_to_back.statuses, .every.statuses, .quiet.statuses) | to_entries[] | select(.key == "0") | .value) | add // 0)}],
    ranker_a_200MiB: $a, big: $big}' > "$out"
jq -r '.median[] | "--reload-cpu-share \(.cpu_share): p99 \(.quiet_p99_ms) ms without reloads, \(.back_to_back_p99_ms) ms with back-to-back reloads (x\(.p99_ratio_back_to_back), \(.reloads_back_to_back) per round; p50 x\(.p50_ratio_back_to_back)), \(.every_p99_ms) ms with one every 2 s (x\(.p99_ratio_every)); non-200 replies: \(.non_200), not sent (no free connection: a stall): \(.not_sent)"' "$out"
jq -r '.ranker_a_200MiB[] | "ranker_a at --reload-cpu-share \(.cpu_share): load \(.load_s) s + warm-up \(.warmup_s) s (\(.loads) loads)"' "$out"
echo "results: $out" >&2

#!/usr/bin/env bash
# bench/soak.sh — hours, not seconds: one server (ranker_a from a model
# repository in poll mode, features from Redis, pinned to --server-cpus)
# under an open-loop load at --load x its measured saturation for
# --minutes, while
#   - a new version of ranker_a is published every --publish-every minutes
#     (copied beside, moved into place) and the one before last retired
#     (its directory removed),
#   - Redis is restarted every --redis-every minutes (SIGTERM, its RDB
#     saved and read back), the failure policy answering meanwhile,
#   - --reconnect of the load's connections are closed and opened anew each
#     second, and
#   - --slow slow clients stay open (half trickling a header, half a body;
#     each opened again when the server's timeout closes it).
# At the end of every minute it records the server's RSS (anonymous and
# file-backed, from smaps_rollup), open descriptors and threads, the
# minute's p50/p99 and replies by status, and the server's own counters.
# At the end: the RSS slope after the first --warmup-minutes (least
# squares, MiB/hour), the descriptors' and threads' range, each minute's
# p99 against the first and the median minute's, and the forward paced at the
# same rate (the machine's own tail) before and after; SVG plots of each
# against time. Writes DIR/minutes.jsonl, DIR/results.json and the plots.
# Not a test: it prints numbers.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=30 warmup_minutes=5 load=0.7 items=200 connections=64 reconnect=0.1 slow=50
publish_every=1 redis_every=5 server_cpus=0 client_cpus=1
build=${BUILD_DIR:-build} models="" out=""
usage() {
  cat <<USAGE
Usage: bench/soak.sh [--minutes N] [--warmup-minutes N] [--load F] [--items N] [--connections N]
                     [--reconnect F] [--slow N] [--publish-every MIN] [--redis-every MIN]
                     [--server-cpus LIST] [--client-cpus LIST] [--models DIR] [--out DIR]
Defaults: $minutes minutes at $load x saturation over $connections connections ($reconnect of them
reconnecting each second) and $slow slow clients; a new model version every $publish_every minute(s),
Redis restarted every $redis_every; the RSS slope taken after $warmup_minutes minutes; server on CPU
$server_cpus, load generator, Redis and the slow clients on CPU $client_cpus; results in
bench/results/soak-<time>/.
USAGE
}
while (($#)); do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --warmup-minutes) warmup_minutes=$2; shift 2 ;;
    --load) load=$2; shift 2 ;;
    --items) items=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --reconnect) reconnect=$2; shift 2 ;;
    --slow) slow=$2; shift 2 ;;
    --publish-every) publish_every=$2; shift 2 ;;
    --redis-every) redis_every=$2; shift 2 ;;
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

source bench/lib.sh
prepare_models
out=${out:-bench/results/soak-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
work=$(mktemp -d)
redis_pid=""
stop_redis() { [[ -z $redis_pid ]] || { kill -TERM "$redis_pid" 2> /dev/null || true; wait "$redis_pid" 2> /dev/null || true; }; }
trap 'touch "$work/stop"; stop_redis; cleanup_servers; rm -rf "$work"' EXIT

# Redis keeps its data across a restart as a deployed one does: an RDB
# written at SIGTERM (a save point is set) and read at start.
start_redis() {
  rm -f "$work/redis.sock"
  nice -n -10 taskset -c "$client_cpus" redis-server --port 0 --unixsocket "$work/redis.sock" --dir "$work" --save '3600 1' \
    --appendonly no --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 200); do
    [[ -S $work/redis.sock ]] && redis-cli -s "$work/redis.sock" ping 2> /dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  echo "bench/soak.sh: redis-server did not start: $(cat "$work/redis.log")" >&2
  exit 1
}
start_redis
store=unix://$work/redis.sock
"$numaserve" feature-store load "$models/store.jsonl" --to "$store" --model-dir "$models/ranker_a" > /dev/null

# Versions are copied beside and moved into place (the completion rule:
# docs/operate.md); the policy serves the latest.
repo=$work/repo version=1
publish() {  # VERSION
  cp -r "$models/ranker_a" "$repo/ranker_a/.incoming-$1"
  mv "$repo/ranker_a/.incoming-$1" "$repo/ranker_a/$1"
}
mkdir -p "$repo/ranker_a"
publish 1

port=$(free_port)
log=$out/server.log
taskset -c "$server_cpus" "$numaserve" serve --model-repository "$repo" --model-control-mode poll \
  --feature-store "$store" --port "$port" --listen-address 127.0.0.1 --log-level warning 2> "$log" &
server_pid=$!
server_pids+=("$server_pid")
wait_ready "$port" numaserve "$log"
echo "machine: $(machine_summary); server CPUs $server_cpus, load generator, Redis and slow clients on CPUs $client_cpus" >&2

load_run() {  # RATE SECONDS WARMUP [extra]
  "$bench" load --port "$port" --model ranker_a --feature-store "$models/store.jsonl" --items "$items" \
    --rate "$1" --seconds "$2" --warmup "$3" --cpus "$client_cpus" "${@:4}"
}
saturation=$(load_run 0 10 2 --connections 4 | jq .rps)
rate=$(awk -v s="$saturation" -v f="$load" 'BEGIN { print s * f }')
# The machine's own tail at this rate: the forward alone, in process, on
# the server's first CPU while the server is idle, one call due every
# 1/rate s (bench/modes.sh's floor).
paced() {
  "$bench" forward --model-dir "$models/ranker_a" --feature-store "$models/store.jsonl" --items "$items" \
    --cpus "${server_cpus%%[,-]*}" --seconds 20 --warmup 1 --rate "$rate" | jq -c '{rate, p50_ms, p99_ms}'
}
paced_before=$(paced)
echo "saturation $saturation requests/s; offered $rate/s; paced forward: $paced_before" >&2

nice -n 19 taskset -c "$client_cpus" python3 bench/slow_clients.py "$port" "$slow" "$work/stop" > "$work/slow.json" &
slow_pid=$!

# The server's own counters that name a non-200's cause or a leak's source.
counters() {
  curl -sf --max-time 10 "http://127.0.0.1:$port/metrics" | awk '
    function add(key, v) { c[key] += v }
    /^numaserve_requests_total\{route="\/predict"/ { match($0, /code="[0-9]+"/); add("predict_" substr($0, RSTART + 6, 3), $2) }
    /^numaserve_feature_store_errors_total\{/ { match($0, /kind="[a-z_]+"/); add("store_" substr($0, RSTART + 6, RLENGTH - 7), $2) }
    /^numaserve_feature_store_degraded_total\{/ { add("store_degraded", $2) }
    /^numaserve_http_connections_closed_total\{/ { match($0, /reason="[a-z]+"/); add("closed_" substr($0, RSTART + 8, RLENGTH - 9), $2) }
    /^numaserve_worker_connections_accepted_total\{/ { add("accepted", $2) }
    /^numaserve_worker_connections\{/ { add("open_connections", $2) }
    /^numaserve_model_load_seconds_count\{/ { add("model_loads", $2) }
    /^numaserve_model_version_served\{/ { match($0, /version="[0-9]+"/); add("versions_served", $2); v = substr($0, RSTART + 9, RLENGTH - 10); if (v + 0 > top) top = v + 0 }
    END { printf "{"; sep = ""; for (k in c) { printf "%s\"%s\":%s", sep, k, c[k]; sep = "," } printf "%s\"top_version\":%d}\n", sep, top }'
}
sample() {  # MINUTE LOAD_JSON EVENTS_JSON
  local status rollup
  status=/proc/$server_pid/status rollup=/proc/$server_pid/smaps_rollup
  jq -c -n --argjson minute "$1" --argjson l "$2" --argjson events "$3" --argjson counters "$(counters)" \
    --argjson rss_kb "$(awk '/^Rss:/ { print $2 }' "$rollup")" \
    --argjson anon_kb "$(awk '/^Anonymous:/ { print $2 }' "$rollup")" \
    --argjson fds "$(find "/proc/$server_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)" \
    --argjson threads "$(awk '/^Threads:/ { print $2 }' "$status")" '{
      minute: $minute, rss_mib: ($rss_kb / 1024), anon_mib: ($anon_kb / 1024), file_mib: (($rss_kb - $anon_kb) / 1024),
      fds: $fds, threads: $threads, p50_ms: $l.p50_ms, p99_ms: $l.p99_ms, max_ms: $l.max_ms, rps: $l.rps,
      statuses: $l.statuses, cut: $l.cut, reconnects: $l.reconnects, late: $l.late, events: $events, counters: $counters}'
}

# Each minute: the load for 60 s; Redis restarted 20 s in, a version
# published 30 s in (each on its schedule; the first minute is quiet, the
# latency's reference); the sample at the minute's end,
# when the load's connections have closed and every minute is in the same
# phase.
: > "$out/minutes.jsonl"
for minute in $(seq 1 "$minutes"); do
  load_run "$rate" 60 0 --connections "$connections" --reconnect "$reconnect" > "$work/load.json" &
  load_pid=$!
  events=()
  sleep 20
  if ((minute > 1 && minute % redis_every == 0)); then
    t0=$(date +%s.%N)
    stop_redis
    start_redis
    events+=("$(jq -c -n --argjson s "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" '{redis_restart_s: $s}')")
  fi
  sleep 10
  if ((minute > 1 && minute % publish_every == 0)); then
    version=$((version + 1))
    publish "$version"
    retired=$((version - 2))
    ((retired < 1)) || rm -rf "${repo:?}/ranker_a/$retired"
    events+=("$(jq -c -n --argjson v "$version" --argjson r "$retired" '{published: $v, retired: (if $r > 0 then $r else null end)}')")
  fi
  wait "$load_pid" || true
  row=$(sample "$minute" "$(cat "$work/load.json")" "$(printf '%s\n' "${events[@]}" | jq -s -c 'add // {}')")
  echo "$row" >> "$out/minutes.jsonl"
  jq -r '"minute \(.minute): RSS \(.rss_mib | floor) MiB (anon \(.anon_mib | floor), file \(.file_mib | floor)), fds \(.fds), threads \(.threads), p50 \(.p50_ms * 100 | round / 100) ms, p99 \(.p99_ms * 100 | round / 100) ms, statuses \(.statuses | tojson) (cut \(.cut), late \(.late)), version \(.counters.top_version) \(.events | tojson)"' <<< "$row" >&2
done
touch "$work/stop"
wait "$slow_pid" || true
kill -0 "$server_pid" 2> /dev/null || { echo "bench/soak.sh: the server died; its log:" >&2; tail -50 "$log" >&2; exit 1; }
stop_servers
paced_after=$(paced)

jq -s --arg machine "$(machine_summary)" --argjson warm "$warmup_minutes" --argjson saturation "$saturation" \
  --argjson rate "$rate" --argjson before "$paced_before" --argjson after "$paced_after" \
  --slurpfile slow "$work/slow.json" --argjson settings "$(jq -n --argjson m "$minutes" --argjson c "$connections" \
    --argjson r "$reconnect" --argjson s "$slow" --argjson p "$publish_every" --argjson e "$redis_every" --argjson i "$items" --argjson w "$warmup_minutes" \
    '{minutes: $m, warmup_minutes: $w, connections: $c, reconnect_per_second: $r, slow_clients: $s, publish_every_minutes: $p, redis_every_minutes: $e, items: $i}')" '
  # Least squares slope of y over x.
  def slope(xs; ys): (xs | length) as $n | (xs | add / $n) as $mx | (ys | add / $n) as $my |
    ([range($n)] | map((xs[.] - $mx) * (ys[.] - $my)) | add) / ([range($n)] | map((xs[.] - $mx) * (xs[.] - $mx)) | add);
  . as $rows | ($rows | map(select(.minute > $warm))) as $late | ($rows[0].p99_ms) as $first |
  {
    machine: $machine, settings: $settings, saturation_rps: $saturation, offered_rps: $rate,
    rss_slope_mib_per_hour: (if ($late | length) > 1 then slope($late | map(.minute); $late | map(.rss_mib)) * 60 else null end),
    anon_slope_mib_per_hour: (if ($late | length) > 1 then slope($late | map(.minute); $late | map(.anon_mib)) * 60 else null end),
    rss_mib: {first: $rows[0].rss_mib, last: $rows[-1].rss_mib, min: ($rows | map(.rss_mib) | min), max: ($rows | map(.rss_mib) | max)},
    fds: {min: ($rows | map(.fds) | min), max: ($rows | map(.fds) | max)},
    threads: {min: ($rows | map(.threads) | min), max: ($rows | map(.threads) | max)},
    statuses: ($rows | map(.statuses | to_entries[]) | group_by(.key) | map({key: .[0].key, value: (map(.value) | add)}) | from_entries),
    # Status 0 is the load generator saying: cut (sent, the connection closed before a
    # reply) or not sent (every connection busy: a stall longer than the
    # connections cover).
    cut: ($rows | map(.cut) | add), not_sent: ($rows | map((.statuses["0"] // 0) - .cut) | add),
    p99_ms: {first_minute: $first, median: ($rows | map(.p99_ms) | sort | .[length / 2 | floor]), max: ($rows | map(.p99_ms) | max),
             worst_ratio_to_first: (($rows | map(.p99_ms) | max) / $first),
             minutes_over_2x_first: ($rows | map(select(.p99_ms > 2 * $first) | .minute)),
             minutes_over_2x_median: (($rows | map(.p99_ms) | sort | .[length / 2 | floor]) as $m | $rows | map(select(.p99_ms > 2 * $m) | .minute))},
    paced_forward: {before: $before, after: $after},
    versions_published: ($rows | map(.events.published // empty) | length),
    redis_restarts: ($rows | map(.events.redis_restart_s // empty) | length),
    model_loads: $rows[-1].counters.model_loads, serving_version: $rows[-1].counters.top_version,
    server_counters: $rows[-1].counters, slow_clients: $slow[0]
  }' "$out/minutes.jsonl" > "$out/results.json"

# The plots: one series per column of the minute's table.
jq -r '[.minute, .rss_mib, .anon_mib, .file_mib, .fds, .threads, .p50_ms, .p99_ms] | @tsv' "$out/minutes.jsonl" > "$out/minutes.dat"
if command -v gnuplot > /dev/null; then
  gnuplot <<EOF
set terminal svg size 800,400 font "sans,11" background "white" noenhanced
set key outside top center horizontal
set grid
set xlabel "minute"
set output "$out/rss.svg"
set title "Server memory over the soak\n$(machine_summary)"
set ylabel "MiB"
plot "$out/minutes.dat" using 1:2 with linespoints title "RSS", "" using 1:3 with linespoints title "anonymous", "" using 1:4 with linespoints title "file-backed"
set output "$out/descriptors.svg"
set title "Open descriptors and threads over the soak"
set ylabel "count"
set yrange [0:*]
plot "$out/minutes.dat" using 1:5 with linespoints title "descriptors", "" using 1:6 with linespoints title "threads"
set output "$out/latency.svg"
set title "Latency per minute (open loop at $rate/s)"
set ylabel "ms"
plot "$out/minutes.dat" using 1:7 with linespoints title "p50", "" using 1:8 with linespoints title "p99", $(jq .p99_ms <<< "$paced_before") with lines dashtype 2 title "paced in-process forward p99"
EOF
fi

jq -r 'def slope: if . == null then "n/a (under 2 minutes after it)" else "\(. * 100 | round / 100) MiB/hour" end;
  "RSS slope after minute \(.settings.warmup_minutes): \(.rss_slope_mib_per_hour | slope) (anonymous \(.anon_slope_mib_per_hour | slope)); RSS \(.rss_mib.first | floor) -> \(.rss_mib.last | floor) MiB",
  "descriptors \(.fds.min)..\(.fds.max), threads \(.threads.min)..\(.threads.max) at each minute'"'"'s end",
  "replies by status: \(.statuses | tojson) (status 0: \(.cut) cut, \(.not_sent) not sent for want of a free connection)",
  "p99: first minute \(.p99_ms.first_minute * 100 | round / 100) ms, median \(.p99_ms.median * 100 | round / 100), worst \(.p99_ms.max * 100 | round / 100) (x\(.p99_ms.worst_ratio_to_first * 100 | round / 100)); minutes over 2x the first: \(.p99_ms.minutes_over_2x_first | tojson), over 2x the median: \(.p99_ms.minutes_over_2x_median | tojson)",
  "paced in-process forward p99: \(.paced_forward.before.p99_ms * 100 | round / 100) ms before, \(.paced_forward.after.p99_ms * 100 | round / 100) ms after",
  "\(.versions_published) versions published, \(.model_loads) loads, serving version \(.serving_version); \(.redis_restarts) Redis restarts; slow clients \(.slow_clients | tojson)"' "$out/results.json"
echo "results: $out/results.json, plots: $out/rss.svg $out/descriptors.svg $out/latency.svg" >&2

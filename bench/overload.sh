#!/usr/bin/env bash
# bench/overload.sh — a peak on one pinned replica, with priority levels and
# without. One open-loop generator on --client-cpus offers two kinds of
# traffic at once: level 1 (the feed a user looks at) at 40% of the
# replica's saturation rate and level 2 (prefetch, bots) at 150%. Each round,
# the servers on the same --server-cpus in turn:
#   (s)  saturation: /predict closed loop, --connections connections
#   (1)  level 1 alone at its rate, against the server with levels
#   (L)  both at once against `serve --priority-levels 2`
#   (N)  both at once against a server with one level (today's behaviour):
#        the same requests, their level not named, each kind reported apart
# Then, once, the saturation gauge: the one-level server at 25%, 50%, 75%
# and 100% of the last round's saturation rate, open loop, each held for
# three of the gauge's 5 s windows, numaserve_saturation read at the end
# beside the offered share (target: within 0.1 of it).
# Prints per level: answered, refused (503), other failures, p50/p99 of the
# answers, and the refusals' p99; the targets beside: with levels, level 1's
# p99 <= 1.5x its p99 alone, no level-1 request refused or failed, level 2
# refused in part (only 503s, each with Retry-After: the service's error
# replies carry it, tests/service/api_test.cpp checks it), answered +
# refused = sent. Beside level 1's p99 as the client saw it, the server's
# own (numaserve_priority_request_seconds, read whole to reply made: the
# bound of the histogram's bucket), so a tail made outside the server shows
# as one. Medians over --repeats rounds. Writes a JSON results file.
# Not a test: numbers for a person to read.
set -euo pipefail
cd "$(dirname "$0")/.."

server_cpus=0 client_cpus=1 items=200 seconds=5 warmup=1 connections=4 repeats=3 high=0.4 low=1.5
build=${BUILD_DIR:-build} models="" out=""
usage() {
  cat <<USAGE
Usage: bench/overload.sh [--server-cpus LIST] [--client-cpus LIST] [--items N] [--seconds S]
                         [--repeats R] [--high SHARE] [--low SHARE] [--models DIR] [--out FILE]
Defaults: server on CPU $server_cpus, load on CPU $client_cpus, $items items, ${seconds}s per
measurement after ${warmup}s warm-up, $repeats rounds; level 1 at $high and level 2 at $low
of the saturation rate measured in the same round.
USAGE
}
while (($#)); do
  case $1 in
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --items) items=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --high) high=$2; shift 2 ;;
    --low) low=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/overload.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

source bench/lib.sh
prepare_models
out=${out:-bench/results/overload-$(date -u +%Y%m%dT%H%M%SZ).json}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'cleanup_servers; rm -rf "$work"' EXIT

store=$models/store.jsonl
levels_port=$(free_port)
start_server "$levels_port" "$server_cpus" "$models/ranker_a" "$store" --priority-levels 2
single_port=$(free_port)
start_server "$single_port" "$server_cpus" "$models/ranker_a" "$store"

# load PORT SECONDS WARMUP [flags...]: one measurement's JSON line. Open
# loops get enough connections that the server, not the client, decides
# what is refused.
load() {
  local port=$1 length=$2 settle=$3
  shift 3
  "$bench" load --port "$port" --feature-store "$store" --items "$items" --seconds "$length" --warmup "$settle" \
    --cpus "$client_cpus" "$@"
}

# scrape PORT FILE: the server's per-level latency buckets now (read whole
# to reply made), so each load's own can be told from the totals.
scrape() {
  curl -sf "http://127.0.0.1:$1/metrics" | grep '^numaserve_priority_request_seconds_bucket' > "$2"
}

for round in $(seq 1 "$repeats"); do
  saturation=$(load "$levels_port" "$seconds" "$warmup" --connections "$connections" --priority 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["rps"])')
  rate_high=$(python3 -c "print(round($saturation * $high))")
  rate_low=$(python3 -c "print(round($saturation * $low))")
  echo "round $round: saturation $saturation requests/s; level 1 at $rate_high/s, level 2 at $rate_low/s" >&2
  for side in alone levels; do
    mix="1:$rate_high"
    [[ $side == levels ]] && mix="$mix,2:$rate_low"
    scrape "$levels_port" "$work/$side-$round.before"
    load "$levels_port" "$seconds" "$warmup" --connections 256 --mix "$mix" > "$work/$side-$round.json"
    scrape "$levels_port" "$work/$side-$round.after"
  done
  load "$single_port" "$seconds" "$warmup" --connections 256 --mix "1:$rate_high,2:$rate_low" --mix-unnamed > "$work/single-$round.json"
  echo "{\"saturation_rps\": $saturation, \"rate_high\": $rate_high, \"rate_low\": $rate_low}" > "$work/rates-$round.json"
done

# gauge SHARE: numaserve_saturation at the end of 15 s at SHARE of saturation.
gauge() {
  local rate
  rate=$(python3 -c "print(round($saturation * $1))")
  load "$single_port" 15 0 --connections 256 --rate "$rate" > "$work/gauge-$1.json" &
  local loader=$!
  sleep 14.5
  curl -sf "http://127.0.0.1:$single_port/metrics" | awk '$1 == "numaserve_saturation" { print $2 }'
  wait "$loader"
}
sleep 15  # the last round's load out of the gauge's window
: > "$work/gauge.txt"
for share in 0.25 0.5 0.75 1.0; do
  echo "$share $(gauge "$share")" >> "$work/gauge.txt"
done

python3 - "$work" "$repeats" "$out" "$(machine_summary)" <<'PY'
import json, statistics, sys

work, repeats, out, machine = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def buckets(path, level):
    out = {}
    for line in open(path):
        name, count = line.rsplit(" ", 1)
        labels = dict(part.split("=", 1) for part in name[name.index("{") + 1:-1].split(","))
        if labels["priority"] == f'"{level}"':
            out[float(labels["le"].strip('"'))] = float(count)
    return out

def server_p99_ms(side, r, level=1):
    # The bound of the bucket holding the 99th percentile of this load's answers.
    before, after = buckets(f"{work}/{side}-{r}.before", level), buckets(f"{work}/{side}-{r}.after", level)
    delta = sorted((le, after[le] - before.get(le, 0)) for le in after)
    total = delta[-1][1]
    return next((le * 1000 for le, n in delta if total and n >= 0.99 * total), 0)

rounds = []
for r in range(1, repeats + 1):
    read = lambda name: json.load(open(f"{work}/{name}-{r}.json"))
    rounds.append({"rates": read("rates"), "alone": read("alone")["by_priority"],
                   "levels": read("levels")["by_priority"], "single": read("single")["by_priority"]})
    for side in ("alone", "levels"):
        rounds[-1][side]["1"]["server_p99_ms"] = server_p99_ms(side, r)

def level(side, n, key):
    return statistics.median(r[side].get(str(n), {}).get(key, 0) for r in rounds)

ratio = statistics.median(r["levels"]["1"]["p99_ms"] / r["alone"]["1"]["p99_ms"] for r in rounds)
print(f"{machine}")
print(f"saturation {statistics.median(r['rates']['saturation_rps'] for r in rounds):.0f} requests/s (median of {repeats} rounds)")
print(f"{'':22} {'answered':>9} {'refused':>8} {'other':>6} {'p50 ms':>8} {'p99 ms':>8} {'503 p99':>8}")
for side, name in (("alone", "level 1 alone"), ("levels", "with levels"), ("single", "without levels")):
    for n in (1, 2):
        if side == "alone" and n == 2:
            continue
        print(f"{name + ', level ' + str(n):22} {level(side, n, 'answered'):9.0f} {level(side, n, 'refused'):8.0f} "
              f"{level(side, n, 'other'):6.0f} {level(side, n, 'p50_ms'):8.2f} {level(side, n, 'p99_ms'):8.2f} "
              f"{level(side, n, 'refused_p99_ms'):8.2f}")
print(f"level 1's p99 on the server's side (read whole to reply made, bucket bound): alone <= "
      f"{level('alone', 1, 'server_p99_ms'):.2f} ms, with levels <= {level('levels', 1, 'server_p99_ms'):.2f} ms")
print(f"with levels: level 1's p99 / alone: {ratio:.2f} (target <= 1.5); level-1 refused or failed: "
      f"{level('levels', 1, 'refused') + level('levels', 1, 'other'):.0f} (target 0); level 2 refused: "
      f"{level('levels', 2, 'refused'):.0f} (target > 0), failed otherwise: {level('levels', 2, 'other'):.0f} (target 0)")
gauge = [dict(zip(("offered", "saturation_gauge"), map(float, line.split()))) for line in open(f"{work}/gauge.txt")]
for g in gauge:
    print(f"at {g['offered']:.2f} of saturation: numaserve_saturation {g['saturation_gauge']:.2f} "
          f"(off by {g['saturation_gauge'] - g['offered']:+.2f}; target within 0.10)")
json.dump({"machine": machine, "rounds": rounds, "level1_p99_ratio": ratio, "gauge": gauge}, open(out, "w"), indent=1)
print(f"results: {out}")
PY

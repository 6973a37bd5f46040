#!/usr/bin/env bash
# bench/plot.sh DIR — plots of a bench/modes.sh run (DIR/results.json) with
# gnuplot: throughput and p99 per mode and model, and p99 against offered
# load. Writes DIR/throughput.svg, DIR/p99.svg, DIR/latency_vs_load.svg.
set -euo pipefail
dir=${1:?usage: bench/plot.sh RESULTS_DIR}
json=$dir/results.json
[[ -f $json ]] || { echo "bench/plot.sh: no $json" >&2; exit 1; }

# One row per mode, one column per model.
table() {  # jq expression for the value
  jq -r --arg v "$1" '.results | group_by(.mode)[] |
    [.[0].mode, (map(select(.model == "ranker_a"))[0] | getpath($v | split(".")) // 0),
                (map(select(.model == "ranker_b"))[0] | getpath($v | split(".")) // 0)] | @tsv' "$json"
}
table saturation.rps > "$dir/throughput.dat"
table fixed_load.p99_ms > "$dir/p99.dat"
jq -r '.results[] | select(.model == "ranker_a" and (.curve | length) > 0) | .mode as $m |
  (.curve[] | [$m, .load, .rps, .p99_ms] | @tsv)' "$json" > "$dir/curve.dat"
machine=$(jq -r .machine "$json")

gnuplot <<EOF
set terminal svg size 800,450 font "sans,11" background "white" noenhanced
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key outside top center horizontal
set grid ytics
set yrange [0:*]

set output "$dir/throughput.svg"
set title "Requests/s at saturation by deployment mode\n$machine"
set ylabel "requests/s"
plot "$dir/throughput.dat" using 2:xtic(1) title "ranker_a", "" using 3 title "ranker_b"

set output "$dir/p99.svg"
set title "p99 latency at a fixed offered load\n$machine"
set ylabel "p99 (ms)"
plot "$dir/p99.dat" using 2:xtic(1) title "ranker_a", "" using 3 title "ranker_b"

set output "$dir/latency_vs_load.svg"
set style data linespoints
set title "ranker_a: p99 latency against offered load (open loop)\n$machine"
set xlabel "offered load (requests/s)"
set ylabel "p99 (ms)"
set yrange [*:*]
set logscale y
plot "< grep -P '^single\t' $dir/curve.dat" using 3:4 title "single instance" pt 7, \
     "< grep -P '^bound\t' $dir/curve.dat" using 3:4 title "one bound instance per NUMA node" pt 5
EOF
echo "plots: $dir/throughput.svg $dir/p99.svg $dir/latency_vs_load.svg"

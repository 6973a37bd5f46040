#!/usr/bin/env bash
# bench/forward.sh — the forward with and without --graph-optimizations, side
# by side in one run (alternating rounds in one process per model and size):
# ranker_a, ranker_b and a reference-DLRM-structured model over ranker_a's
# feature contract (tests/service/dlrm_models.py --like), at 200 and 1,000
# rows, one pinned CPU, one intra-op thread; with each model's roofline (its
# multiply-adds at the sgemm rate measured here plus its gathered bytes at
# the random-gather bandwidth measured here) and the share of it each side
# reaches; and ranker_a and dlrm at 200 rows on the kernels' narrower paths
# (AVX2, portable), what a machine without AVX-512 gets; each also with the
# fused forward pooling every bag (no reuse of a bag that repeats the row
# before's: a request's user bags), and at 200 rows that share nothing
# (every row another user's); each also narrowed beside fp32 in the same
# rounds (--beside): in bf16 where the CPU has bf16 instructions (precision
# bf16: tables and linear layers), in int8 where it has VNNI (precision
# int8: int8 linear layers and rowwise int8 tables), and with rowwise int8
# and int4 tables under fp32 linear layers (embedding_precision int8, int4);
# with the embedding-bag kernel alone on a float table and its bf16, int8
# and int4 copies on every path (`numaserve-bench bags`: what narrower
# tables cost or gain in the bags alone), and each narrowing's drift from
# fp32 on 1,000 generated requests (`numaserve check-model --precision ...
# --requests`); each
# also with the linear layers on LibTorch and its BLAS beside numaserve's
# kernels (--linear both), and LibTorch's linear layers with the BLAS as
# numaserve leaves it against OPENBLAS_CORETYPE forced to the CPU's best
# core (a fallback numaserve did not correct would show). Prints tables,
# writes a JSON results file. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."

cpus=0 seconds=10 build=${BUILD_DIR:-build} models="" out=""
usage() {
  cat <<USAGE
Usage: bench/forward.sh [--cpus LIST] [--seconds S] [--models DIR] [--out FILE]
Defaults: CPU $cpus, ${seconds}s per model and size for each side (5 alternating rounds),
demo models (200 MiB of embeddings) made in $build/bench-models.
USAGE
}
while (($#)); do
  case $1 in
    --cpus) cpus=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/forward.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

source bench/lib.sh
prepare_models
out=${out:-bench/results/forward-$(date -u +%Y%m%dT%H%M%SZ).json}
mkdir -p "$(dirname "$out")"

# The narrowings beside fp32 (forward --beside), and check-model's flags for each.
narrowings=(bf16 int8 int8-tables int4-tables)
narrowing_flags() {
  case $1 in
    bf16 | int8) echo --precision "$1" ;;
    *-tables) echo --precision fp32 --embedding-precision "${1%-tables}" ;;
  esac
}

runs=()
measure() {  # model items [forward flags...]
  local model=$1 items=$2
  shift 2
  echo "forward: $model, $items rows $* ..." >&2
  # Eight sides of $seconds each, their warm-ups and loads.
  runs+=("$(timeout $((seconds * 10 + 180)) "$bench" forward --model-dir "$models/$model" \
    --feature-store "$models/store.jsonl" --items "$items" --cpus "$cpus" --seconds "$seconds" --warmup 2 \
    --graph-optimizations both --bag-reuse-both --beside "$(IFS=,; echo "${narrowings[*]}")" --linear both --roofline "$@")")
}
for model in ranker_a ranker_b dlrm; do
  for items in 200 1000; do measure "$model" "$items"; done
done
# Rows that share nothing (each row another user's): what looking for
# repeated bags costs when there are none.
for model in ranker_a dlrm; do measure "$model" 200 --rows-share nothing; done
for kernels in avx2 portable; do
  for model in ranker_a dlrm; do
    "$bench" forward --model-dir "$models/$model" --feature-store "$models/store.jsonl" --seconds 0 --warmup 0 \
      --kernels "$kernels" > /dev/null 2>&1 && measure "$model" 200 --kernels "$kernels"
  done
done
# The BLAS's own choice against its best core for this CPU: the linear layers
# on LibTorch (--linear libtorch) as the process starts (numaserve corrects a
# core below the CPU's) and with OPENBLAS_CORETYPE naming the best core, in
# alternating runs (the variable is read when the library loads: one process
# each).
best_core=$("$bench" forward --model-dir "$models/ranker_a" --feature-store "$models/store.jsonl" --seconds 0 --warmup 0 \
  --graph-optimizations on 2>&1 | sed -n 's/.*msg="BLAS core[^"]*".* best=\([A-Za-z0-9_]*\).*/\1/p' | head -1)
blas="[]"
if [[ -n $best_core ]]; then
  for round in 1 2 3; do
    for env in default forced; do
      echo "BLAS: ranker_a, 200 rows, linear layers on LibTorch, $env core (round $round) ..." >&2
      run=$( (if [[ $env == forced ]]; then export OPENBLAS_CORETYPE=$best_core; fi
        timeout $((seconds + 120)) "$bench" forward --model-dir "$models/ranker_a" --feature-store "$models/store.jsonl" \
          --items 200 --cpus "$cpus" --seconds "$((seconds / 3 + 1))" --warmup 1 --linear libtorch) 2>/dev/null)
      blas=$(jq --arg env "$env" --argjson run "$run" '. + [{env: $env, items_per_s: $run.items_per_s, blas: $run.blas}]' <<< "$blas")
    done
  done
fi
echo "bags: fp32, bf16, int8 and int4 tables, every path ..." >&2
bags=$("$bench" bags --cpus "$cpus" --seconds "$((seconds * 2))")
drift="{}"
bodies=$(mktemp)
trap 'rm -f "$bodies"' EXIT
"$bench" bodies --feature-store "$models/store.jsonl" --items 200 --requests 1000 > "$bodies"
for model in ranker_a dlrm; do
  for narrowing in "${narrowings[@]}"; do
    echo "drift: $model, $narrowing against fp32 on 1,000 requests ..." >&2
    text=$("$numaserve" check-model "$models/$model" $(narrowing_flags "$narrowing") --requests "$bodies" \
      --feature-store "$models/store.jsonl" 2>&1 || true)
    # Its report, or why the load refused (no bf16 or VNNI on this CPU, the drift bound: the last line).
    if grep -q 'against fp32 on' <<< "$text"; then
      report=$(sed -n '/against fp32 on/,$p' <<< "$text")
    else
      report="  not served: $(tail -1 <<< "$text")"
    fi
    drift=$(jq --arg m "$model" --arg n "$narrowing" --arg r "$report" '.[$m] += {($n): $r}' <<< "$drift")
  done
done
printf '%s\n' "${runs[@]}" | jq -s --arg machine "$(lscpu | sed -n 's/^Model name: *//p')" \
  --argjson bags "$bags" --argjson drift "$drift" --argjson blas "$blas" \
  --argjson narrowings "$(printf '%s\n' "${narrowings[@]}" | jq -R . | jq -s .)" \
  '{machine: $machine, runs: ., narrowings: $narrowings, bags: $bags, drift: $drift, blas_fallback: $blas}' > "$out"
jq -r '"machine: \(.machine); BLAS \(.runs[0].blas); sgemm \(.runs[0].roofline.sgemm_gflops | floor) GFLOP/s, gather \(.runs[0].roofline.gather_gb_per_s * 10 | floor / 10) GB/s",
  "model     kernels   rows  share    off items/s  on, no reuse  on items/s  on/off  reuse  p50 off/on ms   roofline items/s  off/on of roofline",
  (.runs[] | "\(.model | .+"        " | .[0:9]) \(.kernels | .+"         " | .[0:9]) \(.items_per_call | tostring | .+"     " | .[0:5]) \(.rows_share | .+"        " | .[0:8]) \(.off.items_per_s | floor | tostring | .+"            " | .[0:12]) \(.no_bag_reuse.items_per_s | floor | tostring | .+"             " | .[0:13]) \(.items_per_s | floor | tostring | .+"           " | .[0:11]) \(.speedup * 100 | round / 100 | tostring | .+"       " | .[0:7]) \(.bag_reuse_speedup * 100 | round / 100 | tostring | .+"      " | .[0:6]) \(.off.p50_ms * 1000 | round / 1000)/\(.p50_ms * 1000 | round / 1000)     \(.roofline.items_per_s | floor | tostring | .+"                 " | .[0:17]) \(.off.of_roofline * 100 | round)%/\(.of_roofline * 100 | round)%")' "$out"
jq -r 'def pad($n): tostring | (. + " " * $n) | .[0:$n];
  def size: if . >= 1048576 then "\(. / 1048576 | round) MiB" else "\(. / 1024 | round) KiB" end;
  "\nnarrowed beside fp32 (the optimized forward, same rounds; served: linear layers/tables, and their instructions)",
  "model     kernels   rows  share    side         served                  fp32 items/s  side items/s  side/fp32  weights fp32/side      max drift (random rows)",
  (.narrowings as $narrowings | .runs[] as $r | $narrowings[] | . as $name | gsub("-"; "_") as $k |
   "\($r.model | pad(9)) \($r.kernels | pad(9)) \($r.items_per_call | pad(5)) \($r.rows_share | pad(8)) \($name | pad(12)) " +
   if $r[$k] == null then "not served: \($r[$k + "_error"] // "not run")" else
     ($r[$k] | "\("\(.precision)/\(.tables)\(if .instructions != "" then " (\(.instructions))" else "" end)" | pad(23)) ") +
     "\($r.items_per_s | floor | pad(13)) \($r[$k].items_per_s | floor | pad(13)) \($r[$k + "_speedup"] * 100 | round / 100 | pad(10)) " +
     "\("\($r.weight_bytes | size)/\($r[$k].weight_bytes | size)" | pad(22)) \($r[$k].max_drift_random_rows * 1e6 | round / 1e6)" +
     (if $r[$k].reason then " (linear layers fp32: \($r[$k].reason))" else "" end) end),
  "\nlinear layers on numaserve'"'"'s kernels (own) against LibTorch and its BLAS (libtorch), fp32",
  "model     kernels   rows  share    own items/s   libtorch items/s  own/libtorch  own path",
  (.runs[] | "\(.model | .+"        " | .[0:9]) \(.kernels | .+"         " | .[0:9]) \(.items_per_call | tostring | .+"     " | .[0:5]) \(.rows_share | .+"        " | .[0:8]) \(.items_per_s | floor | tostring | .+"             " | .[0:13]) \(.libtorch_linear.items_per_s // 0 | floor | tostring | .+"                 " | .[0:17]) \(.linear_speedup // 0 | . * 100 | round / 100 | tostring | .+"             " | .[0:13]) \(.linear.kernels)"),
  "\nthe BLAS as numaserve leaves it against OPENBLAS_CORETYPE forced to its best core (ranker_a, 200 rows, --linear libtorch)",
  (if (.blas_fallback | length) > 0 then
     (.blas_fallback | map(select(.env == "default") | .items_per_s) | sort | .[length / 2 | floor]) as $d |
     (.blas_fallback | map(select(.env == "forced") | .items_per_s) | sort | .[length / 2 | floor]) as $f |
     "default \($d | floor) items/s (\(.blas_fallback[0].blas)), forced \($f | floor) items/s: default/forced \($d / $f * 100 | round / 100)"
   else "no OpenBLAS core to force" end),
  "\nembedding bags alone, \(.bags.table_mb) MiB float table and its copies (\(.bags.tables_mb as $mb | ["bf16", "int8", "int4"] | map("\(.) \($mb[.] | round) MiB") | join(", "))), \(.bags.bags_per_call) bags per call",
  "kernels   ids/bag  fp32 bags/s   bf16 bags/s   bf16/fp32  int8 bags/s   int8/fp32  int4 bags/s   int4/fp32",
  (.bags.runs[] | "\(.kernels | pad(9)) \(.ids_per_bag | pad(8)) \(.fp32_bags_per_s | floor | pad(13)) " +
     (. as $run | ["bf16", "int8", "int4"] | map("\($run[. + "_bags_per_s"] | floor | pad(13)) \($run[. + "_speedup"] * 100 | round / 100 | pad(10))") | join(" "))),
  "\neach narrowing against fp32 on 1,000 generated requests of 200 items (check-model --precision ... --requests)",
  (.drift | to_entries[] | .key as $model | .value | to_entries[] | "\($model), \(.key):\n\(.value)")' "$out"
echo "results: $out" >&2

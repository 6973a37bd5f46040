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
# (every row another user's); each also in bf16 beside fp32 where the CPU
# has bf16 instructions (precision bf16: tables and larger layers in bf16),
# with the embedding-bag kernel alone on a float table and its bf16 copy on
# every path (`numaserve-bench bags`: what bf16 tables cost or gain on a CPU
# without bf16 products), and bf16's drift from fp32 on 1,000 generated
# requests (`numaserve check-model --precision bf16 --requests`); each
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

runs=()
measure() {  # model items [forward flags...]
  local model=$1 items=$2
  shift 2
  echo "forward: $model, $items rows $* ..." >&2
  runs+=("$(timeout $((seconds * 3 + 120)) "$bench" forward --model-dir "$models/$model" \
    --feature-store "$models/store.jsonl" --items "$items" --cpus "$cpus" --seconds "$seconds" --warmup 2 \
    --graph-optimizations both --bag-reuse-both --bf16-beside --linear both --roofline "$@")")
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
echo "bags: fp32 and bf16 tables, every path ..." >&2
bags=$("$bench" bags --cpus "$cpus" --seconds "$((seconds * 2))")
drift="{}"
bodies=$(mktemp)
trap 'rm -f "$bodies"' EXIT
"$bench" bodies --feature-store "$models/store.jsonl" --items 200 --requests 1000 > "$bodies"
for model in ranker_a dlrm; do
  echo "drift: $model in bf16 against fp32 on 1,000 requests ..." >&2
  report=$("$numaserve" check-model "$models/$model" --precision bf16 --requests "$bodies" \
    --feature-store "$models/store.jsonl" 2>&1 | sed -n '/bf16 against fp32/,$p' || true)
  drift=$(jq --arg m "$model" --arg r "${report:-no bf16 on this CPU}" '. + {($m): $r}' <<< "$drift")
done
printf '%s\n' "${runs[@]}" | jq -s --arg machine "$(lscpu | sed -n 's/^Model name: *//p')" \
  --argjson bags "$bags" --argjson drift "$drift" --argjson blas "$blas" \
  '{machine: $machine, runs: ., bags: $bags, drift: $drift, blas_fallback: $blas}' > "$out"
jq -r '"machine: \(.machine); BLAS \(.runs[0].blas); sgemm \(.runs[0].roofline.sgemm_gflops | floor) GFLOP/s, gather \(.runs[0].roofline.gather_gb_per_s * 10 | floor / 10) GB/s",
  "model     kernels   rows  share    off items/s  on, no reuse  on items/s  on/off  reuse  p50 off/on ms   roofline items/s  off/on of roofline",
  (.runs[] | "\(.model | .+"        " | .[0:9]) \(.kernels | .+"         " | .[0:9]) \(.items_per_call | tostring | .+"     " | .[0:5]) \(.rows_share | .+"        " | .[0:8]) \(.off.items_per_s | floor | tostring | .+"            " | .[0:12]) \(.no_bag_reuse.items_per_s | floor | tostring | .+"             " | .[0:13]) \(.items_per_s | floor | tostring | .+"           " | .[0:11]) \(.speedup * 100 | round / 100 | tostring | .+"       " | .[0:7]) \(.bag_reuse_speedup * 100 | round / 100 | tostring | .+"      " | .[0:6]) \(.off.p50_ms * 1000 | round / 1000)/\(.p50_ms * 1000 | round / 1000)     \(.roofline.items_per_s | floor | tostring | .+"                 " | .[0:17]) \(.off.of_roofline * 100 | round)%/\(.of_roofline * 100 | round)%")' "$out"
jq -r '"\nprecision bf16 beside fp32 (the optimized forward; \(.runs[0].bf16.instructions // "no bf16 on this CPU"))",
  "model     kernels   rows  share    fp32 items/s  bf16 items/s  bf16/fp32  weights fp32/bf16 MiB  max drift (random rows)",
  (.runs[] | "\(.model | .+"        " | .[0:9]) \(.kernels | .+"         " | .[0:9]) \(.items_per_call | tostring | .+"     " | .[0:5]) \(.rows_share | .+"        " | .[0:8]) \(.items_per_s | floor | tostring | .+"             " | .[0:13]) \(.bf16.items_per_s // 0 | floor | tostring | .+"             " | .[0:13]) \(.bf16_speedup // 0 | . * 100 | round / 100 | tostring | .+"          " | .[0:10]) \(.weight_bytes / 1048576 | round)/\(.bf16.weight_bytes // 0 | . / 1048576 | round)                \(.bf16.max_drift_random_rows // "-")"),
  "\nlinear layers on numaserve'"'"'s kernels (own) against LibTorch and its BLAS (libtorch), fp32",
  "model     kernels   rows  share    own items/s   libtorch items/s  own/libtorch  own path",
  (.runs[] | "\(.model | .+"        " | .[0:9]) \(.kernels | .+"         " | .[0:9]) \(.items_per_call | tostring | .+"     " | .[0:5]) \(.rows_share | .+"        " | .[0:8]) \(.items_per_s | floor | tostring | .+"             " | .[0:13]) \(.libtorch_linear.items_per_s // 0 | floor | tostring | .+"                 " | .[0:17]) \(.linear_speedup // 0 | . * 100 | round / 100 | tostring | .+"             " | .[0:13]) \(.linear.kernels)"),
  "\nthe BLAS as numaserve leaves it against OPENBLAS_CORETYPE forced to its best core (ranker_a, 200 rows, --linear libtorch)",
  (if (.blas_fallback | length) > 0 then
     (.blas_fallback | map(select(.env == "default") | .items_per_s) | sort | .[length / 2 | floor]) as $d |
     (.blas_fallback | map(select(.env == "forced") | .items_per_s) | sort | .[length / 2 | floor]) as $f |
     "default \($d | floor) items/s (\(.blas_fallback[0].blas)), forced \($f | floor) items/s: default/forced \($d / $f * 100 | round / 100)"
   else "no OpenBLAS core to force" end),
  "\nembedding bags alone, \(.bags.table_mb) MiB float table and its bf16 copy, \(.bags.bags_per_call) bags per call",
  "kernels   ids/bag  fp32 bags/s   bf16 bags/s   bf16/fp32",
  (.bags.runs[] | "\(.kernels | .+"         " | .[0:9]) \(.ids_per_bag | tostring | .+"        " | .[0:8]) \(.fp32_bags_per_s | floor | tostring | .+"             " | .[0:13]) \(.bf16_bags_per_s | floor | tostring | .+"             " | .[0:13]) \(.bf16_speedup * 100 | round / 100)"),
  "\nbf16 against fp32 on 1,000 generated requests of 200 items (check-model --precision bf16 --requests)",
  (.drift | to_entries[] | "\(.key):\n\(.value)")' "$out"
echo "results: $out" >&2

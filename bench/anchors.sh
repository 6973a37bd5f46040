#!/usr/bin/env bash
# bench/anchors.sh — the forward's anchors side by side with numaserve's, in
# one run on one pinned CPU, one thread, the same TorchScript models and the
# same kind of requests: Debian's PyTorch 1.13 (the LibTorch numaserve links),
# a current PyTorch from PyPI as loaded and frozen + optimize_for_inference,
# the same with Intel's extension for PyTorch, and numaserve's forward with
# --graph-optimizations off and on. The PyPI builds live in their own venv
# (bench/anchors/requirements.txt; ~5 GB, made once in
# ${NUMASERVE_CACHE:-/root/.cache/numaserve}/anchors-venv). Every anchor must
# give the first batch's scores within 1e-5 of Debian's PyTorch, so all ran
# the same model on the same rows. Prints a table, writes a JSON results
# file. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."

cpus=0 seconds=5 items=200 rounds=2 build=${BUILD_DIR:-build} models="" out=""
usage() {
  cat <<USAGE
Usage: bench/anchors.sh [--cpus LIST] [--seconds S] [--items N] [--rounds R] [--models DIR] [--out FILE]
Defaults: CPU $cpus, ${seconds}s per measurement, $items rows, $rounds rounds (medians), demo models
in $build/bench-models (and the DLRM-structured one bench/forward.sh makes).
USAGE
}
while (($#)); do
  case $1 in
    --cpus) cpus=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --items) items=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/anchors.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

source bench/lib.sh
prepare_models
venv=${NUMASERVE_CACHE:-/root/.cache/numaserve}/anchors-venv
stamp=$venv/.requirements
if ! cmp -s bench/anchors/requirements.txt "$stamp" 2> /dev/null; then
  echo "anchors: installing PyTorch and Intel's extension from PyPI into $venv (once) ..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r bench/anchors/requirements.txt
  cp bench/anchors/requirements.txt "$stamp"
fi
out=${out:-bench/results/anchors-$(date -u +%Y%m%dT%H%M%SZ).json}
mkdir -p "$(dirname "$out")"
inputs=$(mktemp -d)
trap 'rm -rf "$inputs"' EXIT

runs=()
"$bench" bodies --feature-store "$models/store.jsonl" --items "$items" > "$inputs/bodies.jsonl"
for model in ranker_a ranker_b dlrm; do
  head -64 "$inputs/bodies.jsonl" |
    "$numaserve" extract --model-dir "$models/$model" --feature-store "$models/store.jsonl" > "$inputs/$model.jsonl"
  for round in $(seq 1 "$rounds"); do
    echo "anchors: $model, round $round ..." >&2
    for anchor in "/usr/bin/python3 as-loaded" "$venv/bin/python as-loaded" "$venv/bin/python frozen" "$venv/bin/python ipex"; do
      read -r python mode <<< "$anchor"
      runs+=("$(timeout $((seconds * 4 + 120)) taskset -c "$cpus" "$python" bench/anchors/forward.py \
        --model-dir "$models/$model" --inputs "$inputs/$model.jsonl" --seconds "$seconds" --mode "$mode" |
        jq -c --arg model "$model" --argjson round "$round" '. + {model: $model, round: $round}')")
    done
    runs+=("$(timeout $((seconds * 4 + 120)) "$bench" forward --model-dir "$models/$model" \
      --feature-store "$models/store.jsonl" --items "$items" --cpus "$cpus" --seconds "$((seconds * 2))" --warmup 2 \
      --graph-optimizations both | jq -c --argjson round "$round" '. + {round: $round}')")
  done
done
printf '%s\n' "${runs[@]}" | jq -s --arg machine "$(lscpu | sed -n 's/^Model name: *//p')" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def name: if .what == "forward" then "numaserve" else "\(.versions.torch | split("+")[0]) \(.mode)" end;
  . as $all
  | ($all | map(select(.what == "anchor forward" and .mode == "as-loaded" and (.versions.torch | startswith("1.13")))) | map({key: .model, value: .first_scores}) | from_entries) as $debian
  | {machine: $machine, runs: $all,
     summary: ([$all[] | select(.what == "anchor forward")] | group_by([.model, name]) | map({
        model: .[0].model, anchor: (.[0] | name),
        items_per_s: (map(.items_per_s) | median), p50_ms: (map(.p50_ms) | median),
        max_score_difference_from_debian: ([.[0].first_scores, $debian[.[0].model]] | transpose | map(.[0] - .[1] | fabs) | max)})
      + ([$all[] | select(.what == "forward")] | group_by(.model) | map(
        {model: .[0].model, anchor: "numaserve off", items_per_s: (map(.off.items_per_s) | median), p50_ms: (map(.off.p50_ms) | median)},
        {model: .[0].model, anchor: "numaserve on", items_per_s: (map(.items_per_s) | median), p50_ms: (map(.p50_ms) | median)})))}' > "$out"
if jq -e '[.summary[] | select(.max_score_difference_from_debian != null and .max_score_difference_from_debian > 1e-5)] | length > 0' "$out" > /dev/null; then
  echo "bench/anchors.sh: an anchor's scores differ from Debian PyTorch's; see $out" >&2
  exit 1
fi
jq -r '"machine: \(.machine), \('"$items"') rows, one thread", "model     anchor                   items/s     p50 ms",
  (.summary | sort_by(.model, .items_per_s)[] | "\(.model | .+"          " | .[0:9]) \(.anchor | .+"                         " | .[0:24]) \(.items_per_s | floor | tostring | .+"            " | .[0:11]) \(.p50_ms * 1000 | round / 1000)")' "$out"
echo "results: $out" >&2

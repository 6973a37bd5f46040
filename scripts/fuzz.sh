#!/usr/bin/env bash
# scripts/fuzz.sh — builds numaserve's libFuzzer targets (tests/fuzz/) with
# clang under ASan and UBSan, in $FUZZ_BUILD_DIR (default build-fuzz/), and
# runs them. Prints, per target: executions, seconds, edges covered, corpus
# size, findings; writes $FUZZ_BUILD_DIR/fuzz-results.json. Exit status 1
# when anything was found, or a target did not run: the inputs are in
# $FUZZ_BUILD_DIR/findings/<target>/ (add each to
# tests/fuzz/regressions/<target>/ with its fix).
#
# Usage: scripts/fuzz.sh [TARGET...] [--seconds N | --runs N] [--build-only] [--no-build] [--merge]
#   --seconds N   run each target for N seconds (default 60)
#   --runs N      run each target for N executions instead
#   --build-only  build, run nothing
#   --no-build    run what is built
#   --merge       minimize the checked-in seed corpora with what the runs found
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60 runs="" build=1 run=1 merge=0 targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build-only) run=0; shift ;;
    --no-build) build=0; shift ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "scripts/fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=()
for harness in tests/fuzz/*.cpp; do
  name=$(basename "$harness" .cpp)
  [[ $name == replay_main ]] || all+=("$name")
done
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "scripts/fuzz.sh: no target $t (targets: ${all[*]})" >&2; exit 2; }
done

dir=${FUZZ_BUILD_DIR:-build-fuzz}
if ((build)); then
  scripts/install-deps.sh fuzz
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNUMASERVE_FUZZ=ON \
    -DNUMASERVE_WITH_TORCH=OFF -DNUMASERVE_BUILD_TESTS=OFF > /dev/null
  cmake --build "$dir" --parallel "$(nproc)" --target "${targets[@]/#/fuzz_}"
fi
((run)) || exit 0

# Seed directories: tests/fuzz/corpus/<target> where it exists, and seeds
# kept elsewhere in the tree (the topology fixtures).
seeds() {
  [[ -d tests/fuzz/corpus/$1 ]] && echo "tests/fuzz/corpus/$1"
  case $1 in
    hwloc_xml) echo tests/fixtures/topologies/xml ;;
  esac
}
max_len() {
  case $1 in
    hwloc_xml) echo 262144 ;;
    *) echo 65536 ;;
  esac
}

# The topology loader checks an XML file in a child whose address space it
# caps: an allocation past the cap must fail as it does without ASan (NULL),
# not end in ASan's report, whose death callback libFuzzer would file as the
# parent's finding.
asan_options() {
  case $1 in
    hwloc_xml) echo allocator_may_return_null=1 ;;
  esac
}

# Runs target $1's fuzzer with its sanitizer options and input size cap.
fuzzer() {
  local t=$1
  shift
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}$(asan_options "$t")" \
    "$dir/tests/fuzz/fuzz_$t" -max_len="$(max_len "$t")" "$@"
}

results=()
found=0
for t in "${targets[@]}"; do
  work=$dir/corpus/$t findings=$dir/findings/$t log=$dir/logs/$t.log
  rm -rf "$findings"  # this run's findings only; the work corpus carries over
  mkdir -p "$work" "$findings" "$(dirname "$log")"
  limit=(-max_total_time="$seconds")
  [[ -n $runs ]] && limit=(-runs="$runs")
  # The work corpus first: new inputs go there, the checked-in seeds stay as they are.
  # shellcheck disable=SC2046
  fuzzer "$t" "${limit[@]}" -timeout=2 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" "$work" $(seeds "$t") \
    > "$log" 2>&1 || true
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/.*Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  edges=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' "$log" | tail -1)
  corpus=$(find "$work" -type f | wc -l)
  crashes=$(find "$findings" -type f | wc -l)
  if ((crashes)); then
    verdict="$crashes FOUND: $findings (log $log)"
  elif [[ -z $executed ]]; then
    verdict="DID NOT RUN (log $log)"  # a target that stops before its first input finds nothing
  else
    verdict="no finding"
  fi
  [[ $verdict == "no finding" ]] || found=1
  printf '%-20s %10s runs %6ss  %6s edges  %6s inputs  %s\n' "$t" "${executed:-?}" "${took:-?}" "${edges:-?}" \
    "$corpus" "$verdict"
  results+=("$(jq -nc --arg t "$t" --arg runs "${executed:-0}" --arg secs "${took:-0}" --arg edges "${edges:-0}" \
    --argjson corpus "$corpus" --argjson findings "$crashes" \
    '{target: $t, runs: ($runs | tonumber), seconds: ($secs | tonumber), edges: ($edges | tonumber),
      corpus: $corpus, findings: $findings}')")
  if ((merge)); then
    # Edges only (-use_counters=0): hit counts would keep ten times the inputs.
    minimal=$(mktemp -d)
    # shellcheck disable=SC2046
    fuzzer "$t" -merge=1 -use_counters=0 "$minimal" $(seeds "$t") "$work" \
      >> "$log" 2>&1
    rm -rf "tests/fuzz/corpus/$t"
    mv "$minimal" "tests/fuzz/corpus/$t"
  fi
done
printf '%s\n' "${results[@]}" | jq -s . > "$dir/fuzz-results.json"
echo "results: $dir/fuzz-results.json"
exit "$found"

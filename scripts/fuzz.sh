#!/usr/bin/env bash
# scripts/fuzz.sh — builds numaserve's libFuzzer targets (tests/fuzz/) with
# clang under ASan and UBSan, in $FUZZ_BUILD_DIR (default build-fuzz/), and
# runs them. Prints, per target: executions, seconds, edges covered, corpus
# size, findings; writes $FUZZ_BUILD_DIR/fuzz-results.json. Exit status 1
# when anything was found, or a target did not run: the inputs are in
# $FUZZ_BUILD_DIR/findings/<target>/ (add each to
# tests/fuzz/regressions/<target>/ with its fix).
#
# Every run starts from the checked-in seeds (tests/fuzz/corpus/<target>,
# the topology fixtures for hwloc_xml) and every regression
# (tests/fuzz/regressions/<target>), plus what earlier runs of this build
# dir found ($FUZZ_BUILD_DIR/corpus/<target>) unless --smoke. libFuzzer's
# seed is printed, and written to the results: the same seed, runs, corpus
# and binary replay the same exploration, so a finding can be reproduced.
#
# Usage: scripts/fuzz.sh [TARGET...] [--seconds N | --runs N] [--seed N] [--smoke]
#                        [--build-only] [--no-build] [--merge]
#   --seconds N   run each target for N seconds (default 60)
#   --runs N      run each target for N executions instead (the same work on any machine)
#   --seed N      libFuzzer's seed (default: a new random one each run)
#   --smoke       the test suite's mode: start from the checked-in inputs only, keep
#                 nothing found, and mutate without comparison tracing, whose operands
#                 include pointers that differ from checkout to checkout; with --runs
#                 and --seed, every checkout on every machine then does the same work
#   --build-only  build, run nothing
#   --no-build    run what is built
#   --merge       minimize the checked-in seed corpora with what the runs found
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60 runs="" seed="" smoke=0 build=1 run=1 merge=0 targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --build-only) run=0; shift ;;
    --no-build) build=0; shift ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# Every input that ever broke the target, run first by every campaign.
regressions() {
  [[ -d tests/fuzz/regressions/$1 ]] && echo "tests/fuzz/regressions/$1"
  return 0
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
# The same seed replays the same exploration only at the same addresses:
# with ASLR on, comparisons of pointers (trace-cmp) fed libFuzzer other
# values each run, and two runs of seed 1 kept 56 and 57 new inputs of the
# same 30,000. setarch -R turns it off for the fuzzer alone; -reload=0
# keeps libFuzzer from rereading its corpus on a timer. That replays a run
# in the same checkout; another checkout's paths and environment still
# move the stack (12 of 16 targets' smokes differed between two clones),
# hence smoke_fuzzer below (then 15 of 16 the same; hwloc_xml's child caps
# its address space at its current size, and its time by the clock).
fuzzer() {
  local t=$1
  shift
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}$(asan_options "$t")" \
    setarch "$(uname -m)" -R "$dir/tests/fuzz/fuzz_$t" -max_len="$(max_len "$t")" -reload=0 "$@"
}
# The smoke's: the same argv and environment, byte for byte, in any
# checkout — the binary behind a link, the work corpus and artifacts under
# one fixed-length scratch dir, nothing else inherited.
smoke_fuzzer() {
  local t=$1 scratch=$2
  shift 2
  ln -sf "$(cd "$dir/tests/fuzz" && pwd)/fuzz_$t" "$scratch/fuzz"
  (cd "$scratch" && env -i PATH=/usr/bin:/bin NUMASERVE_FUZZ_SCRATCH=/dev/shm/"${scratch##*/}" \
    ASAN_OPTIONS="$(asan_options "$t")" \
    setarch "$(uname -m)" -R ./fuzz -max_len="$(max_len "$t")" -reload=0 -use_cmp=0 "$@")
}

[[ -n $seed ]] || seed=$((RANDOM << 15 | RANDOM | 1))
echo "seed $seed (to replay: scripts/fuzz.sh ${targets[*]} ${runs:+--runs $runs }--seed $seed$( ((smoke)) && echo ' --smoke'))"

results=()
found=0
for t in "${targets[@]}"; do
  work=$dir/corpus/$t findings=$dir/findings/$t log=$dir/logs/$t.log
  rm -rf "$findings"  # this run's findings only; the work corpus carries over
  mkdir -p "$work" "$findings" "$(dirname "$log")"
  limit=(-max_total_time="$seconds")
  [[ -n $runs ]] && limit=(-runs="$runs")
  if ((smoke)); then
    scratch=$(mktemp -d /tmp/numaserve-smoke.XXXXXX)
    mkdir -p "$scratch/work" "$scratch/found" "/dev/shm/${scratch##*/}"
    # The checked-in inputs by paths of the same length in every checkout.
    inputs=()
    for d in $(seeds "$t") $(regressions "$t"); do
      ln -s "$PWD/$d" "$scratch/in${#inputs[@]}"
      inputs+=("in${#inputs[@]}")
    done
    smoke_fuzzer "$t" "$scratch" "${limit[@]}" -seed="$seed" -timeout=2 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix=found/ work "${inputs[@]}" > "$log" 2>&1 || true
    find "$scratch/found" -type f -exec mv {} "$findings/" \;
    work=$scratch/work
  else
    # The work corpus first: new inputs go there, the checked-in seeds stay as they are.
    # shellcheck disable=SC2046
    fuzzer "$t" "${limit[@]}" -seed="$seed" -timeout=2 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$findings/" "$work" $(seeds "$t") $(regressions "$t") \
      > "$log" 2>&1 || true
  fi
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/.*Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  edges=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' "$log" | tail -1)
  corpus=$(find "$work" -type f | wc -l)
  crashes=$(find "$findings" -type f ! -name 'slow-unit-*' | wc -l)
  # libFuzzer keeps an input that took over 10 s as a slow unit; with
  # -timeout=2 a parser that slow would have been a timeout finding, so a
  # slow unit is the machine stalling (seen once here: an input that runs in
  # 0.08 s), named but not a finding.
  slow=$(find "$findings" -type f -name 'slow-unit-*' | wc -l)
  if ((crashes)); then
    verdict="$crashes FOUND: $findings (log $log)"
  elif [[ -z $executed ]]; then
    verdict="DID NOT RUN (log $log)"  # a target that stops before its first input finds nothing
  else
    verdict="no finding"
  fi
  [[ $verdict == "no finding" ]] || found=1
  ((slow)) && verdict+="; $slow slow unit(s) in $findings: a stall, re-time them"
  printf '%-20s %10s runs %6ss  %6s edges  %6s inputs  %s\n' "$t" "${executed:-?}" "${took:-?}" "${edges:-?}" \
    "$corpus" "$verdict"
  results+=("$(jq -nc --arg t "$t" --arg runs "${executed:-0}" --arg secs "${took:-0}" --arg edges "${edges:-0}" \
    --argjson corpus "$corpus" --argjson findings "$crashes" --argjson seed "$seed" \
    '{target: $t, seed: $seed, runs: ($runs | tonumber), seconds: ($secs | tonumber), edges: ($edges | tonumber),
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
  ((smoke)) && rm -rf "$scratch" "/dev/shm/${scratch##*/}"
done
printf '%s\n' "${results[@]}" | jq -s . > "$dir/fuzz-results.json"
echo "results: $dir/fuzz-results.json"
exit "$found"

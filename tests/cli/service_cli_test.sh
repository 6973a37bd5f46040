#!/usr/bin/env bash
# numaserve's command line as an operator meets it: exit status and the
# message for good and bad invocations (nothing here starts serving).
set -u
NUMASERVE=${1:?usage: service_cli_test.sh path/to/numaserve repo-root}
ROOT=${2:?usage: service_cli_test.sh path/to/numaserve repo-root}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {  # name, expected status, regex the combined output must match, args...
  local name=$1 want_rc=$2 want=$3; shift 3
  local out rc
  out=$("$NUMASERVE" "$@" 2>&1); rc=$?
  if [[ $rc == "$want_rc" ]] && grep -Eq -- "$want" <<<"$out"; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); printf 'FAIL %s: status %s (want %s), output:\n%s\n' "$name" "$rc" "$want_rc" "$out"
  fi
}
check "no subcommand is a usage error" 2 'subcommand' 
check "a bad number names the option" 2 "workers: 'many' is not a whole number" serve --model-dir x --workers many
check "a bad log level names the option" 2 "log level 'loud'" serve --model-dir x --log-level loud
check "serve without a model says how" 1 'no model: give --model-dir' serve
check "a missing model directory names the file" 1 "$tmp/none/model.yaml" serve --model-dir "$tmp/none" --port 0
printf 'workers: 1\nmodel_dirr: x\n' > "$tmp/bad.yaml"
check "an unknown YAML key names file and line" 2 "bad.yaml.*line 2.*unknown option 'model_dirr'" serve --config "$tmp/bad.yaml"
check "demo models refuse an empty table budget" 1 'embedding_mb > 0' make-demo-models "$tmp/demo" --embedding-mb 0
check "demo models are written" 0 "wrote $tmp/demo/ranker_a" make-demo-models "$tmp/demo" --embedding-mb 1 --users 5 --items 5
check "check-model says where the linear layers run and on which BLAS core" 0 \
  "linear layers: 5 on numaserve's kernels \((avx512|avx2|portable)\), 0 on LibTorch \(BLAS [^)]* core " check-model "$tmp/demo/ranker_a"
check "check-model --graph-optimizations off: every layer on LibTorch" 0 \
  "linear layers: 0 on numaserve's kernels, 5 on LibTorch" check-model "$tmp/demo/ranker_a" --graph-optimizations off
check "a bad precision names the option" 2 "precision: 'half' is not fp32, bf16, bf16-if-available, int8 or int8-if-available" check-model "$tmp/demo/ranker_a" --precision half
check "a bad embedding precision names the option" 2 "embedding_precision: 'int2' is not fp32, bf16, int8 or int4" check-model "$tmp/demo/ranker_a" --embedding-precision int2
check "check-model --embedding-precision int8: the served tables and their drift" 0 \
  "precision: linear layers fp32, tables int8; scores within [0-9.e-]+ of fp32's on 1024 random rows" check-model "$tmp/demo/ranker_a" --embedding-precision int8
check "check-model --requests asks for bf16" 2 "give --precision bf16" check-model "$tmp/demo/ranker_a" --requests x.jsonl
NUMASERVE_CPU_BF16=off check "bf16 on a CPU without it is refused naming why" 1 \
  "precision bf16: bf16 turned off by NUMASERVE_CPU_BF16=off" check-model "$tmp/demo/ranker_a" --precision bf16
NUMASERVE_CPU_BF16=off check "bf16-if-available on a CPU without it checks out in fp32, saying why" 0 \
  "precision: fp32 \(bf16-if-available: bf16 turned off" check-model "$tmp/demo/ranker_a" --precision bf16-if-available
printf '{"user":{"id":"u1"},"items":[{"id":"i1"},{"id":"i2"},{"id":"i3"}]}\n{"user":{"id":"u2"},"items":[{"id":"i4"},{"id":"i0"}]}\n' > "$tmp/requests.jsonl"
printf '[0,1,1]\n[1,"no"]\n' > "$tmp/bad-labels.jsonl"
printf '[0,1,1]\n[1,0]\n' > "$tmp/labels.jsonl"
if "$NUMASERVE" check-model "$tmp/demo/ranker_a" --precision bf16 > /dev/null 2>&1; then
  check "bf16's drift on requests, in ranking terms" 0 "bf16: AUC [0-9.]+, log-loss [0-9.]+" check-model "$tmp/demo/ranker_a" \
    --precision bf16 --requests "$tmp/requests.jsonl" --feature-store "$tmp/demo/store.jsonl" --labels "$tmp/labels.jsonl"
  check "a bad labels line names file and line" 1 "bad-labels.jsonl line 2: want a JSON array of 0 and 1" check-model "$tmp/demo/ranker_a" \
    --precision bf16 --requests "$tmp/requests.jsonl" --feature-store "$tmp/demo/store.jsonl" --labels "$tmp/bad-labels.jsonl"
  printf '{"user":{"id":"u1"},"items":[]}\n' >> "$tmp/requests.jsonl"
  check "a request /predict would refuse names file and line" 1 "requests.jsonl line 3: " check-model "$tmp/demo/ranker_a" \
    --precision bf16 --requests "$tmp/requests.jsonl" --feature-store "$tmp/demo/store.jsonl"
else
  echo "SKIP bf16's drift on requests: no bf16 on this CPU"
fi
closed=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
check "health with nothing listening fails naming the address" 1 "127.0.0.1:$closed/readyz: connect: Connection refused" health --port "$closed"
check "a bad admin port names the option" 2 "admin_port" serve --model-dir x --admin-port many
check "options table in Markdown" 0 '^\| `--model-dir DIR` \| `NUMASERVE_MODEL_DIR` \| `model_dir` \|.*\(repeatable\)' options

# The documented option table is the program's own, so they cannot drift.
if diff <("$NUMASERVE" options) <(sed -n '/<!-- service-options:begin -->/,/<!-- service-options:end -->/p' "$ROOT/docs/reference/options.md" | sed '1d;$d') >/dev/null; then
  pass=$((pass + 1)); echo "PASS docs/reference/options.md option table matches 'numaserve options'"
else
  fail=$((fail + 1)); echo "FAIL docs/reference/options.md option table differs from '$NUMASERVE options'; run scripts/update-option-tables.sh"
fi
echo "$pass passed, $fail failed"
((fail == 0))

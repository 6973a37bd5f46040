#!/usr/bin/env bash
# The main job on the embedded default: builds numaserve, writes the demo
# models (ranker_a, DLRM-like with ~200 MiB of embeddings; ranker_b, a small
# MLP) and their feature store once, then serves both on port 8080 with the
# threads and memory of this process's cpuset. Ctrl-C (or SIGTERM) drains and
# stops it. Extra arguments go to `numaserve serve` (e.g. --port 9090,
# --max-connections 20000, --log-format json). With --feature-store
# redis://... (or unix://...) the demo store is first written into that
# Redis in Feast's format, and served from there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
# Only the server: the tests and fuzz targets are the test command's (a
# fresh 2-CPU machine took 16 minutes to build them all before serving).
echo "run-demo: building numaserve into ${BUILD_DIR:-build}/ (the first time takes minutes)" >&2
BUILD_TARGETS=numaserve scripts/build.sh >&2
build=${BUILD_DIR:-build}
models=${NUMASERVE_DEMO_DIR:-$build/demo-models}
if [[ ! -f $models/ranker_a/model.pt || ! -f $models/ranker_b/model.pt || ! -f $models/store.jsonl ]]; then
  echo "run-demo: writing the demo models and their store into $models/" >&2
  "$build/service/numaserve" make-demo-models "$models" >&2
fi
store= password_file=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --feature-store) store=${args[i + 1]:-} ;;
    --feature-store=*) store=${args[i]#*=} ;;
    --feature-store-password-file) password_file=${args[i + 1]:-} ;;
    --feature-store-password-file=*) password_file=${args[i]#*=} ;;
  esac
done
if [[ $store == redis://* || $store == unix://* || $store == redis+cluster://* ]]; then
  load=(feature-store load "$models/store.jsonl" --to "$store" --model-dir "$models/ranker_a" --model-dir "$models/ranker_b")
  [[ -z $password_file ]] || load+=(--password-file "$password_file")
  "$build/service/numaserve" "${load[@]}" >&2
fi
# The demo's own store unless the arguments name one.
own_store=(--feature-store "$models/store.jsonl")
[[ -z $store ]] || own_store=()
exec "$build/service/numaserve" serve --model-dir "$models/ranker_a" --model-dir "$models/ranker_b" \
  "${own_store[@]}" "$@"

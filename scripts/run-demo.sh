#!/usr/bin/env bash
# The main job on the embedded default: builds numaserve, writes the demo
# models (ranker_a, DLRM-like with ~200 MiB of embeddings; ranker_b, a small
# MLP) and their feature store once, then serves both on port 8080 with the
# threads and memory of this process's cpuset. Ctrl-C (or SIGTERM) drains and
# stops it. Extra arguments go to `numaserve serve` (e.g. --port 9090,
# --max-connections 20000, --log-format json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
scripts/build.sh >&2
build=${BUILD_DIR:-build}
models=${NUMASERVE_DEMO_DIR:-$build/demo-models}
if [[ ! -f $models/ranker_a/model.pt || ! -f $models/ranker_b/model.pt || ! -f $models/store.jsonl ]]; then
  "$build/service/numaserve" make-demo-models "$models" >&2
fi
exec "$build/service/numaserve" serve --model-dir "$models/ranker_a" --model-dir "$models/ranker_b" \
  --feature-store "$models/store.jsonl" "$@"

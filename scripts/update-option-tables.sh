#!/usr/bin/env bash
# Pastes `numaserve options`, `numaserve-topology-agent options` and
# `numaserve-operator options` into
# docs/reference/options.md between their markers (the CLI tests fail when
# they differ; tests/docs/check_docs.py when a marker is missing).
# Usage: scripts/update-option-tables.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
python3 - "$root/docs/reference/options.md" \
  service "$("$build/service/numaserve" options)" \
  agent "$("$build/topology-agent/numaserve-topology-agent" options)" \
  operator "$("$build/operator/numaserve-operator" options)" <<'PY'
import sys
path, pairs = sys.argv[1], sys.argv[2:]
text = open(path).read()
for name, table in zip(pairs[::2], pairs[1::2]):
    begin, end = f"<!-- {name}-options:begin -->", f"<!-- {name}-options:end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        sys.exit(f"{path}: want one {begin} and one {end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    text = f"{head}{begin}\n{table}\n{end}{tail}"
open(path, "w").write(text)
PY

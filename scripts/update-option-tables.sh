#!/usr/bin/env bash
# Pastes `numaserve options` and `numaserve-topology-agent options` into the
# README between their markers (the CLI tests fail when they differ).
# Usage: scripts/update-option-tables.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
python3 - "$root/README.md" \
  service "$("$build/service/numaserve" options)" \
  agent "$("$build/topology-agent/numaserve-topology-agent" options)" <<'PY'
import re, sys
path, pairs = sys.argv[1], sys.argv[2:]
text = open(path).read()
for name, table in zip(pairs[::2], pairs[1::2]):
    begin, end = f"<!-- {name}-options:begin -->", f"<!-- {name}-options:end -->"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    text = f"{head}{begin}\n{table}\n{end}{tail}"
open(path, "w").write(text)
PY

#!/usr/bin/env bash
# The main job on the embedded default: builds numaserve and shows what it
# sees of this machine: NUMA nodes, CPUs, cores, memory, distances, and this
# process's own placement (cpuset, memory nodes, CPU quota).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
scripts/build.sh >&2  # progress on stderr; stdout is the result
exec "${BUILD_DIR:-build}/topology-agent/numaserve-topology-agent" discover "$@"

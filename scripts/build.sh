#!/usr/bin/env bash
# Configures and builds numaserve into $BUILD_DIR (default: build/).
# Extra arguments go to CMake's configure step, e.g. -DASAN=ON. With
# BUILD_TARGETS (e.g. "numaserve") only those targets and what they need.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
targets=()
for target in ${BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$BUILD_DIR" --parallel "$(nproc)" "${targets[@]}"

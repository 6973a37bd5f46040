#!/usr/bin/env bash
# Configures and builds numaserve into $BUILD_DIR (default: build/).
# Extra arguments go to CMake's configure step, e.g. -DASAN=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)"

#!/usr/bin/env bash
# The one command that installs, builds and runs every numaserve test:
# unit tests, then the multi-NUMA VM tests (label vm).
# Extra arguments go to ctest, e.g. -L unit or -R CpuSet.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
# The tree builds without a warning: a new one fails the tests' build.
scripts/build.sh -DNUMASERVE_WERROR=ON
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --parallel "$(nproc)" "$@"

#!/usr/bin/env bash
# test.sh - build and run every test: unit (cmocka), the store contract suite
# on memory, LMDB, Redis and PostgreSQL, the crash tests, the end-to-end tests
# of the idem binary (consume against real brokers included), the install,
# package and example tests (servers started by the tests); all but the
# `build` kind, which runs on request. Usage: scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
scripts/install-deps.sh
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEM_WERROR=ON ${IDEM_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
# -LE build: the second build (-DIDEM_REDIS=OFF ...) runs on request, in .ci/run
ctest --output-on-failure -j"$(nproc)" -LE '^build$' ${IDEM_CTEST_ARGS:-}

#!/usr/bin/env bash
# package.sh [BUILD_DIR] - build the Debian package in BUILD_DIR (default
# build-deb): prints the path of idem_VERSION_ARCH.deb. Needs what
# scripts/install-deps.sh installs (dpkg-dev for the package's Depends).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-deb}
cmake -S . -B "$build" -DIDEM_PACKAGE=ON -DIDEM_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
(cd "$build" && cpack -G DEB >/dev/null)
(cd "$build" && ls "$PWD"/idem_*.deb)

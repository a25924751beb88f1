#!/usr/bin/env bash
# run.sh - install what is missing, build, and start the gateway on the
# embedded LMDB store (./idem-data) in front of the example orders API.
#   gateway:  http://127.0.0.1:8081   (admin: http://127.0.0.1:8082)
#   upstream: http://127.0.0.1:8080   (examples/orders_upstream.py)
# Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target idem
python3 examples/orders_upstream.py 8080 &
upstream=$!
trap 'kill $upstream 2>/dev/null || true' EXIT INT TERM
build/idem serve --listen 127.0.0.1:8081 --admin-listen 127.0.0.1:8082 \
  --upstream http://127.0.0.1:8080 --store lmdb:./idem-data "$@"

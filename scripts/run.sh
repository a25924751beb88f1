#!/usr/bin/env bash
# run.sh - install what is missing, build, and start the gateway on the
# embedded LMDB store (./idem-data) in front of the example orders API.
#   gateway:  http://127.0.0.1:8081   (admin: http://127.0.0.1:8082)
#   upstream: http://127.0.0.1:8080   (examples/orders_upstream.py)
# Ctrl-C, or SIGTERM to this script, stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target idem
# another program on 8080 would answer the wait below in the example API's
# place, and the gateway would run in front of it: refuse instead
if (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; then
  echo "run.sh: 127.0.0.1:8080 is in use by another program; the example API listens there" >&2
  exit 1
fi
python3 examples/orders_upstream.py 8080 &
upstream=$!
trap 'kill $upstream 2>/dev/null || true' EXIT
# the gateway is ready only once its upstream is: wait for the port (10 s)
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && break
  kill -0 $upstream 2>/dev/null || { echo "run.sh: the example upstream did not start" >&2; exit 1; }
  sleep 0.1
done
if ! kill -0 $upstream 2>/dev/null || ! (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; then
  echo "run.sh: the example upstream did not start" >&2
  exit 1
fi
build/idem serve --listen 127.0.0.1:8081 --admin-listen 127.0.0.1:8082 \
  --upstream http://127.0.0.1:8080 --store lmdb:./idem-data "$@" &
gateway=$!
# bash runs a trap only between commands, so the gateway runs in the
# background and the script waits for it: a SIGTERM or Ctrl-C to the
# script is passed on at once, and the gateway finishes what is in flight
trap 'kill -TERM $gateway 2>/dev/null || true' INT TERM
while kill -0 $gateway 2>/dev/null; do
  wait $gateway || true # returns early (128+signal) when a trapped signal comes
done
# bash keeps an exited child's status: the script exits with the gateway's
# own (0 after a SIGTERM drain), not with the interrupted wait's 143
status=0
wait $gateway || status=$?
exit $status

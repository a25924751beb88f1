#!/usr/bin/env bash
# consume_bench.sh - idem consume on lmdb: vs the same consumer forwarding
# without a store (IDEM_BENCH_NO_STORE=1), on Redis Streams, RabbitMQ and
# NATS JetStream, side by side in one run; messages/s and p50/p99 per
# message. Writes bench/results/consume.md. The servers and nginx (the
# handler: a fixed 200) are started on free loopback ports in temp dirs and
# stopped by PID (consume_bench.py).
#   BENCH_MESSAGES=20000 BENCH_ROUNDS=3 BENCH_CONCURRENCY=64 bench/consume_bench.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake -S . -B "$build" -DIDEM_WERROR=ON >/dev/null
cmake --build "$build" -j2 --target idem >/dev/null
for t in nginx redis-server nats-server python3; do
  command -v "$t" >/dev/null || { echo "consume_bench: $t is missing (scripts/install-deps.sh)" >&2; exit 1; }
done
export IDEM_BIN=$build/idem
: "${BENCH_MESSAGES:=20000}" "${BENCH_ROUNDS:=3}" "${BENCH_CONCURRENCY:=64}"
export BENCH_MESSAGES BENCH_ROUNDS BENCH_CONCURRENCY
log=$(mktemp)
table=$(python3 bench/consume_bench.py 2>"$log")
out=bench/results/consume.md
{
  echo "# idem consume: lmdb vs a forwarder without a store"
  echo
  echo "Command: \`BENCH_MESSAGES=$BENCH_MESSAGES BENCH_ROUNDS=$BENCH_ROUNDS BENCH_CONCURRENCY=$BENCH_CONCURRENCY bench/consume_bench.sh\` ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo "## Machine"
  echo
  echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end (shared with other work)"
  echo "- Memory: $(free -h | awk '/Mem:/{print $2}')"
  echo "- $(redis-server --version | cut -d' ' -f1-3), rabbitmq-server $(dpkg-query -W -f='${Version}' rabbitmq-server), nats-server $(dpkg-query -W -f='${Version}' nats-server), $(nginx -v 2>&1)"
  echo
  echo "## Method"
  echo
  echo "Per broker and round, $BENCH_MESSAGES messages with unique keys are published first; then one"
  echo "\`idem consume --concurrency $BENCH_CONCURRENCY\` drains them into nginx (worker_processes 1, a fixed 200)."
  echo "msg/s: messages over the time from the consumer's start until its /metrics count them all acked."
  echo "p50/p99: receipt to ack, from its idem_message_seconds histogram (interpolated in buckets)."
  echo "lmdb: claim and complete on \`lmdb:\` (two durable group commits per message) before the ack."
  echo "forwarder: the same binary and flow with IDEM_BENCH_NO_STORE=1: handler, then ack, no record."
  echo "Rounds alternate the two; the table shows medians."
  echo
  echo "## Results"
  echo
  echo "$table"
  echo
  echo "## Raw runs"
  echo
  echo '```'
  cat "$log"
  echo '```'
} > "$out"
rm -f "$log"
cat "$out"

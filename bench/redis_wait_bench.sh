#!/usr/bin/env bash
# redis_wait_bench.sh - what wait_replicas=1 costs the Redis store: claim +
# complete pairs (bench/redis_bench.c) on a primary with one replica, with
# and without wait_replicas=1, in alternating rounds of one run; the report
# gives the median of the per-round ratios, at 64 pairs in flight and at 1.
#
# usage: bench/redis_wait_bench.sh [--build DIR] [--rounds 5] [--seconds 3]
#                                  [--out bench/results/redis_wait.md]
# Needs redis-server. Both servers listen on 127.0.0.1 free ports, without
# persistence, and are stopped by PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
BUILD=$(dirname "$HERE")/build ROUNDS=5 SECS=3 OUT=$HERE/results/redis_wait.md
CMDLINE="bench/redis_wait_bench.sh $*"
bench_options 7,8 "--build=BUILD --rounds=ROUNDS --seconds=SECS --out=OUT" "$@"
DRIVER=$BUILD/redis_bench
need_binary "$DRIVER"
bench_tmp idem-redis-wait

start_redis() { # name port [replicaof-port]
  mkdir -p "$TMP/$1"
  redis-server --bind 127.0.0.1 --port "$2" --dir "$TMP/$1" --save "" --appendonly no \
    --logfile "$TMP/$1/log" ${3:+--replicaof 127.0.0.1 "$3"} &
  PIDS+=($!)
  wait_port "$2" "${PIDS[-1]}" "redis-server $1"
}
PPORT=$(free_port)
start_redis primary "$PPORT"
RPORT=$(free_port)
start_redis replica "$RPORT" "$PPORT"
for _ in $(seq 200); do
  redis-cli -p "$RPORT" INFO replication | grep -q "master_link_status:up" && break
  sleep 0.05
done
URI="redis://127.0.0.1:$PPORT"
runs=$TMP/runs

run() { # label uri in_flight
  echo "mode=$1 $("$DRIVER" "$2" 1 "$3" "$SECS")" | tee -a "$runs"
}

for r in $(seq 1 "$ROUNDS"); do
  for n in 64 1; do
    if [ $((r % 2)) = 1 ]; then
      run plain "$URI" $n; run wait "$URI?wait_replicas=1" $n
    else
      run wait "$URI?wait_replicas=1" $n; run plain "$URI" $n
    fi
  done
done

{
  echo "# Redis store: the cost of wait_replicas=1"
  echo
  echo "Made by \`$CMDLINE\` at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$HERE" rev-parse --short HEAD)."
  echo
  echo "One primary and one replica (redis-server, no persistence) on this machine;"
  echo "\`bench/redis_bench.c\` keeps claim+complete pairs of fresh keys in flight on"
  echo "one connection, with \`wait_replicas=1\` (a WAIT 1 after the transitions of"
  echo "each loop turn) and without, alternating which goes first, $ROUNDS rounds of ${SECS}s."
  echo
  echo "| in flight | plain pairs/s | wait_replicas=1 pairs/s | ratio (median of rounds) | plain p50 / p99 ms | wait p50 / p99 ms |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
  for n in 64 1; do
    p="mode=plain,in_flight=$n" w="mode=wait,in_flight=$n"
    echo "| $n | $(kv_median "$runs" pairs_per_sec "$p") | $(kv_median "$runs" pairs_per_sec "$w") |" \
         "$(kv_ratio_median "$runs" pairs_per_sec "in_flight=$n" mode wait plain) |" \
         "$(kv_median "$runs" pair_p50_ms "$p") / $(kv_median "$runs" pair_p99_ms "$p") |" \
         "$(kv_median "$runs" pair_p50_ms "$w") / $(kv_median "$runs" pair_p99_ms "$w") |"
  done
  report_end "$runs"
} >"$OUT"
cat "$OUT"

#!/usr/bin/env bash
# redis_cluster_bench.sh - the Redis store on a Cluster beside one Redis:
# claim + complete pairs of fresh keys (bench/redis_bench.c) on a single
# redis-server (the reference), on redis+cluster:// (3 primaries, 3
# replicas), and on the cluster with wait_replicas=1, in alternating rounds
# of one run; the report gives the median of the per-round ratios against
# the single server, at 64 pairs in flight per handle and at 1.
#
# usage: bench/redis_cluster_bench.sh [--build DIR] [--rounds 5] [--seconds 3]
#                                     [--out bench/results/redis_cluster.md]
# Needs redis-server. The cluster is built by tests/e2e/redis_cluster.py
# (which runs this script again inside it); every server listens on a free
# 127.0.0.1 port, without persistence, and is stopped by PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
if [ -z "${IDEM_TEST_REDIS_CLUSTER_URI:-}" ]; then
  exec python3 "$(dirname "$HERE")/tests/e2e/redis_cluster.py" "$0" "$@"
fi
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
BUILD=$(dirname "$HERE")/build ROUNDS=5 SECS=3 OUT=$HERE/results/redis_cluster.md
CMDLINE="bench/redis_cluster_bench.sh $*"
bench_options 9,10 "--build=BUILD --rounds=ROUNDS --seconds=SECS --out=OUT" "$@"
DRIVER=$BUILD/redis_bench
need_binary "$DRIVER"
bench_tmp idem-redis-cluster

PORT=$(free_port)
mkdir -p "$TMP/single"
redis-server --bind 127.0.0.1 --port "$PORT" --dir "$TMP/single" --save "" --appendonly no \
  --logfile "$TMP/single/log" &
PIDS+=($!)
wait_port "$PORT" "${PIDS[-1]}" "redis-server"
SINGLE="redis://127.0.0.1:$PORT"
CLUSTER=$IDEM_TEST_REDIS_CLUSTER_URI
runs=$TMP/runs

run() { # label uri in_flight
  echo "mode=$1 $("$DRIVER" "$2" 1 "$3" "$SECS")" | tee -a "$runs"
}

for r in $(seq 1 "$ROUNDS"); do
  for n in 64 1; do
    order=(single cluster wait)
    [ $((r % 2)) = 0 ] && order=(wait cluster single)
    for m in "${order[@]}"; do
      case $m in
        single) run single "$SINGLE" $n ;;
        cluster) run cluster "$CLUSTER" $n ;;
        wait) run wait "$CLUSTER?wait_replicas=1" $n ;;
      esac
    done
  done
done

{
  echo "# Redis store: one Redis, a Cluster, and a Cluster with wait_replicas=1"
  echo
  echo "Made by \`$CMDLINE\` at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$HERE" rev-parse --short HEAD)."
  echo
  echo "\`bench/redis_bench.c\` keeps claim+complete pairs of fresh keys in flight on one"
  echo "store handle: against one redis-server (the reference), against"
  echo "\`redis+cluster://\` (3 primaries and 3 replicas, all on this machine, one"
  echo "connection per primary), and against the cluster with \`wait_replicas=1\`;"
  echo "the order alternates each round, $ROUNDS rounds of ${SECS}s. Ratios are the median"
  echo "of the per-round ratios against the single server."
  echo
  echo "| in flight | single pairs/s | cluster pairs/s | cluster / single | cluster+wait pairs/s | cluster+wait / single | single p50 / p99 ms | cluster p50 / p99 ms | cluster+wait p50 / p99 ms |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for n in 64 1; do
    s="mode=single,in_flight=$n" c="mode=cluster,in_flight=$n" w="mode=wait,in_flight=$n"
    echo "| $n | $(kv_median "$runs" pairs_per_sec "$s") | $(kv_median "$runs" pairs_per_sec "$c") |" \
         "$(kv_ratio_median "$runs" pairs_per_sec "in_flight=$n" mode cluster single) |" \
         "$(kv_median "$runs" pairs_per_sec "$w") |" \
         "$(kv_ratio_median "$runs" pairs_per_sec "in_flight=$n" mode wait single) |" \
         "$(kv_median "$runs" pair_p50_ms "$s") / $(kv_median "$runs" pair_p99_ms "$s") |" \
         "$(kv_median "$runs" pair_p50_ms "$c") / $(kv_median "$runs" pair_p99_ms "$c") |" \
         "$(kv_median "$runs" pair_p50_ms "$w") / $(kv_median "$runs" pair_p99_ms "$w") |"
  done
  echo
  echo "On 2 shared cores the six cluster nodes, the single server and the driver"
  echo "compete for the same CPUs: the cluster's figure here is what routing costs"
  echo "(a slot per key, a connection per primary), not what three machines would"
  echo "give."
  report_end "$runs"
} >"$OUT"
cat "$OUT"

#!/usr/bin/env bash
# cache_bench.sh - replays through idem serve on PostgreSQL, without and with
# --cache memory:, beside nginx as a plain proxy, in one run.
#
# One throwaway PostgreSQL (tests/support/with-postgres.sh), one nginx
# upstream (a fixed 200), nginx-proxy in front of it, and two gateways on
# the same database: idem-pg (no cache) and idem-pg-cache (--cache
# memory:256MiB). Each round runs wrk on every target in a rotating order
# (replays of --keys keys completed beforehand); the report gives, per
# target, the median over rounds of its req/s over nginx-proxy's in the same
# round.
#
# usage: bench/cache_bench.sh [--idem PATH] [--rounds 5] [--duration 5s]
#                             [--connections 64] [--keys 1000]
#                             [--out bench/results/cache.md]
# Needs nginx, wrk, python3, PostgreSQL. Everything it starts listens on
# 127.0.0.1 free ports and is stopped by PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
with_postgres "$0" "$@"
IDEM=$(dirname "$HERE")/build/idem ROUNDS=5 DURATION=5s CONNS=64 THREADS=2
REPLAY_KEYS=1000 OUT=$HERE/results/cache.md
BODY='{"amount":1000,"currency":"eur"}'
CMDLINE="bench/cache_bench.sh $*"
bench_options 13,15 "--idem=IDEM --rounds=ROUNDS --duration=DURATION --connections=CONNS
  --keys=REPLAY_KEYS --out=OUT" "$@"
need_binary "$IDEM" "build first, or --idem"

bench_tmp idem-cache
start_nginx_pair
write_bench_lua
"$IDEM" migrate --store "$IDEM_TEST_PG_URI" >/dev/null
start_idem idem-pg "$IDEM_TEST_PG_URI"
PG_PORT=$PORT
IDEM_EXTRA="--cache memory:256MiB?ttl=60s" start_idem idem-pg-cache "$IDEM_TEST_PG_URI"
CACHE_PORT=$PORT
populate "$PG_PORT" # the same database: both replay these
runs=$TMP/runs

run() { # target port
  wrk_run "$1" "$2" replay
  check_alive
  read -r rps p50 p99 status_errors socket_errors total <<<"$WRK_RESULT"
  echo "round=$r target=$1 rps=$rps p50_ms=$p50 p99_ms=$p99 non2xx=$status_errors" \
       "socket_errors=$socket_errors requests=$total" | tee -a "$runs"
}

targets=("nginx-proxy $PX_PORT" "idem-pg $PG_PORT" "idem-pg-cache $CACHE_PORT")
for r in $(seq 1 "$ROUNDS"); do
  for i in 0 1 2; do
    # shellcheck disable=SC2086
    run ${targets[$(((i + r) % 3))]}
  done
done

ratio() { kv_ratio_median "$runs" rps "" target "$1" nginx-proxy; }
{
  echo "# Replays on PostgreSQL, without and with --cache memory:"
  echo
  echo "Made by \`$CMDLINE\` at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$HERE" rev-parse --short HEAD)."
  echo
  echo "wrk ($THREADS threads, $CONNS connections, $DURATION per run) POSTs replays of"
  echo "$REPLAY_KEYS keys completed beforehand through nginx as a plain proxy and through"
  echo "two \`idem serve\` on one throwaway PostgreSQL (fsync on): without a cache, and with"
  echo "\`--cache memory:256MiB?ttl=60s\` (filled by each key's first replay). $ROUNDS rounds,"
  echo "the order of the targets rotating; ratios are to nginx-proxy in the same round."
  echo
  echo "| target | req/s (median) | p50 / p99 ms | ratio to nginx-proxy (median of rounds) |"
  echo "| --- | ---: | ---: | ---: |"
  for t in nginx-proxy idem-pg idem-pg-cache; do
    echo "| $t | $(kv_median "$runs" rps "target=$t") |" \
         "$(kv_median "$runs" p50_ms "target=$t") / $(kv_median "$runs" p99_ms "target=$t") |" \
         "$([ $t = nginx-proxy ] && echo 1.00 || ratio $t) |"
  done
  report_end "$runs"
} >"$OUT"
cat "$OUT"

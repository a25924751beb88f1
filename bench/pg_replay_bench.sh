#!/usr/bin/env bash
# pg_replay_bench.sh - what a replay costs the PostgreSQL store, and what a
# new key costs, for two builds of bench/pg_bench (A: an older claim
# statement, B: this build's), on one throwaway server in one run.
#
#   bench/pg_replay_bench.sh --a OLD_PG_BENCH [--a-is "what A is"] [--rounds 5]
#                            [--seconds 3] [--in-flight 64] [--pool 4] [--keys 1000] [--out FILE]
#
# Each round runs A and B (A first in odd rounds, B first in even ones) on
# fresh keys (claim+complete pairs) and on replays of --keys completed keys;
# the report gives the median of the per-round ratios B/A, and the rows
# written per replay: pg_stat_user_tables.n_tup_upd of idem_records before
# and after each replay run, read once that run's backends have exited
# (their statistics are flushed then). IDEM_BUILD: the build holding B
# (default ./build). Writes bench/results/postgres_replay.md by default.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
with_postgres "$0" "$@"

A="" A_IS="" ROUNDS=5 SECS=3 CONC=64 POOL=4 KEYS=1000 OUT=$repo/bench/results/postgres_replay.md
command="bench/pg_replay_bench.sh $*"
bench_options 8,9 "--a=A --a-is=A_IS --rounds=ROUNDS --seconds=SECS --in-flight=CONC --pool=POOL
  --keys=KEYS --out=OUT" "$@"
B=${IDEM_BUILD:-$repo/build}/pg_bench
[ -x "$A" ] && [ -x "$B" ] || { echo "pg_replay_bench.sh: --a names an older pg_bench; build B first" >&2; exit 2; }
psql=$(command -v psql || echo "${IDEM_TEST_PG_BIN:-/usr/bin}/psql")
uri=$IDEM_TEST_PG_URI
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs=$work/runs

q() { "$psql" -X -tA -d "$uri" -c "$1"; }

# n_tup_upd once no other backend of this database is left to flush its counts
updates() {
  for _ in $(seq 100); do
    [ "$(q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
           AND pid <> pg_backend_pid() AND backend_type = 'client backend'")" = 0 ] && break
    sleep 0.1
  done
  q "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'idem_records'"
}

run() { # name binary mode
  local args=("$uri?pool=$POOL" "$CONC" "$SECS") before after line
  [ "$3" = replay ] && args+=("$KEYS")
  before=$(updates)
  line=$("$2" run "${args[@]}")
  after=$(updates)
  echo "build=$1 $line updates=$((after - before))" | tee -a "$runs"
}

"$B" run "$uri?migrate=1&pool=$POOL" "$CONC" 1 >/dev/null
# the replay keys, completed (a claim racing its own key's first one is busy: ignored)
"$B" run "$uri?pool=$POOL" "$CONC" 2 "$KEYS" >/dev/null || true

echo "postgres replay bench: $ROUNDS rounds of ${SECS}s, $CONC in flight, pool $POOL, $KEYS replay keys"
for r in $(seq 1 "$ROUNDS"); do
  for mode in unique replay; do
    if [ $((r % 2)) = 1 ]; then run A "$A" $mode; run B "$B" $mode
    else run B "$B" $mode; run A "$A" $mode; fi
  done
done

per_replay() { # build: rows updated per replay over every replay run
  awk -v b="$1" '
    { delete kv; for (i = 1; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
      if (kv["build"] == b && kv["mode"] == "replay") { u += kv["updates"]; n += kv["pairs"] } }
    END { printf "%.3f", n ? u / n : 0 }' "$runs"
}

rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "# PostgreSQL store: a replay writes nothing, a new key costs no more"
  echo
  echo "Made by \`$command\` (B: $B) at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $rev."
  [ -z "$A_IS" ] || { echo; echo "A: $A_IS."; }
  echo
  echo "A and B are two builds of \`bench/pg_bench.c\` (one loop, a pool of $POOL pipelined"
  echo "connections, $CONC operations in flight) on one throwaway server (fsync on)."
  echo "*unique*: claim+complete pairs of fresh keys. *replay*: claims of $KEYS completed"
  echo "keys, each answered REPLAY. $ROUNDS rounds of ${SECS}s, the builds alternating"
  echo "which goes first. Rows updated: \`pg_stat_user_tables.n_tup_upd\` of"
  echo "\`idem_records\` before and after each replay run."
  echo
  echo "| | A | B | B/A (median of rounds) |"
  echo "| --- | ---: | ---: | ---: |"
  echo "| unique keys, pairs/s | $(kv_median "$runs" pairs_per_sec build=A,mode=unique) | $(kv_median "$runs" pairs_per_sec build=B,mode=unique) | $(kv_ratio_median "$runs" pairs_per_sec mode=unique build B A) |"
  echo "| replays/s | $(kv_median "$runs" pairs_per_sec build=A,mode=replay) | $(kv_median "$runs" pairs_per_sec build=B,mode=replay) | $(kv_ratio_median "$runs" pairs_per_sec mode=replay build B A) |"
  echo "| rows updated per replay | $(per_replay A) | $(per_replay B) | |"
  report_end "$runs"
} >"$OUT"
cat "$OUT"

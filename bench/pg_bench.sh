#!/usr/bin/env bash
# pg_bench.sh - claim+complete throughput of the PostgreSQL store against
# pgbench running the very same statements on the same server, in one run.
# Rounds alternate the tools so that a noisy neighbour hurts them alike; the
# report uses the median of each. Writes bench/results/postgres.md.
#
#   bench/pg_bench.sh [SECONDS_PER_RUN=5] [ROUNDS=3] [IN_FLIGHT=64] [POOL=4]
#
# The server is a throwaway one (tests/support/with-postgres.sh: initdb in a
# temp dir, fsync on, synchronous_commit on), unless IDEM_TEST_PG_URI names
# one (then IDEM_TEST_PG_BIN must hold pgbench). IDEM_BUILD: the build dir
# holding pg_bench (default ./build).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
with_postgres "$0" "$@"

secs=${1:-5}
rounds=${2:-3}
conc=${3:-64}
pool=${4:-4}
build=${IDEM_BUILD:-$repo/build}
bin=$build/pg_bench
pgbench=${IDEM_TEST_PG_BIN:-$(pg_config --bindir)}/pgbench
uri=$IDEM_TEST_PG_URI
out=$repo/bench/results/postgres.md
command="bench/pg_bench.sh $*"

need_binary "$bin" "build first, or set IDEM_BUILD"
[ -x "$pgbench" ] || { echo "pg_bench.sh: no pgbench at $pgbench" >&2; exit 2; }
mkdir -p "$repo/bench/results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs=$work/runs
script=$work/claim_complete.sql
"$bin" script >"$script"

# schema, and a warm table
"$bin" run "$uri?migrate=1&pool=$pool" "$conc" 1 >/dev/null

idem() { # in_flight [batch]
  "$bin" run "$uri?pool=$pool&batch=${2:-64}" "$1" "$secs" | tee -a "$runs"
}

pgb() { # clients
  local threads=$(($1 < 2 ? 1 : 2))
  "$pgbench" -n -M prepared -c "$1" -j "$threads" -T "$secs" -f "$script" "$uri" >"$work/pgbench.out" 2>&1 ||
    { cat "$work/pgbench.out" >&2; exit 1; }
  awk -v c="$1" '
    /^number of failed transactions/ { failed = $5 }
    /^latency average/ { lat = $4 }
    /^tps = / { tps = $3 }
    END { printf "tool=pgbench clients=%d tps=%.0f latency_avg_ms=%.2f failed=%s\n", c, tps, lat, failed == "" ? 0 : failed }
  ' "$work/pgbench.out" | tee -a "$runs"
}

echo "postgres bench: $rounds rounds of ${secs}s per tool, $conc pairs in flight, pool $pool, on $uri"
for r in $(seq 1 "$rounds"); do
  idem "$conc"
  idem "$conc" 1
  pgb "$pool"
  pgb "$conc"
done
# light load: one pair at a time (latency of a durable claim+complete)
idem 1
pgb 1

# field F of the median run matching every K=V of a comma-separated filter
median() { # filter field
  awk -v filter="$1" -v f="$2" '
    BEGIN { n = split(filter, conds, ",") }
    { delete kv; v = ""
      for (i = 1; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
      ok = 1
      for (j = 1; j <= n; j++) { split(conds[j], c, "="); if (kv[c[1]] != c[2]) ok = 0 }
      if (ok) print kv[f] }' "$runs" |
    sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }'
}

i_tps=$(median "tool=idem,batch=64,in_flight=$conc" pairs_per_sec)
i_p50=$(median "tool=idem,batch=64,in_flight=$conc" p50_ms)
i_p99=$(median "tool=idem,batch=64,in_flight=$conc" p99_ms)
s_tps=$(median "tool=idem,batch=1,in_flight=$conc" pairs_per_sec)
s_p50=$(median "tool=idem,batch=1,in_flight=$conc" p50_ms)
s_p99=$(median "tool=idem,batch=1,in_flight=$conc" p99_ms)
p_pool=$(median "tool=pgbench,clients=$pool" tps)
p_pool_lat=$(median "tool=pgbench,clients=$pool" latency_avg_ms)
p_conc=$(median "tool=pgbench,clients=$conc" tps)
p_conc_lat=$(median "tool=pgbench,clients=$conc" latency_avg_ms)
i1=$(median "tool=idem,in_flight=1" pairs_per_sec)
i1_p50=$(median "tool=idem,in_flight=1" p50_ms)
i1_p99=$(median "tool=idem,in_flight=1" p99_ms)
p1=$(median "tool=pgbench,clients=1" tps)
p1_lat=$(median "tool=pgbench,clients=1" latency_avg_ms)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

server=$(psql -X -tA -d "$uri" -c "SHOW server_version" 2>/dev/null ||
  "${IDEM_TEST_PG_BIN:-/usr/bin}/psql" -X -tA -d "$uri" -c "SHOW server_version")
rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)

{
  echo "# PostgreSQL store: claim+complete throughput against pgbench"
  echo
  echo "Made by \`$command\` (IDEM_BUILD=$build) at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $rev."
  echo
  echo "A *pair* is one claim and one complete of a fresh key: two statements, each"
  echo "answered only once committed (WAL flushed, fsync on). *idem* is the store as"
  echo "the gateway uses it (\`bench/pg_bench.c\`): one libuv loop, a pool of $pool"
  echo "connections in pipeline mode, $conc pairs in flight; the operations submitted in"
  echo "one turn of the loop go out as one batch, one transaction (\`batch=64\`, the"
  echo "default), or each in its own (\`batch=1\`). *pgbench* runs the same two"
  echo "prepared statements (printed by \`pg_bench script\`) on the same server, each"
  echo "in its own transaction (autocommit), with as many connections as idem's pool,"
  echo "and with a connection per pair in flight. $rounds rounds of ${secs}s, tools"
  echo "alternating; medians below."
  echo
  echo "| run | pairs/s | statements/s | pair latency |"
  echo "| --- | ---: | ---: | ---: |"
  echo "| idem, pool $pool, $conc in flight | $i_tps | $(awk -v g="$i_tps" 'BEGIN { print 2 * g }') | p50 ${i_p50} ms, p99 ${i_p99} ms |"
  echo "| idem batch=1, pool $pool, $conc in flight | $s_tps | $(awk -v g="$s_tps" 'BEGIN { print 2 * g }') | p50 ${s_p50} ms, p99 ${s_p99} ms |"
  echo "| pgbench, $pool connections | $p_pool | $(awk -v g="$p_pool" 'BEGIN { print 2 * g }') | avg ${p_pool_lat} ms |"
  echo "| pgbench, $conc connections | $p_conc | $(awk -v g="$p_conc" 'BEGIN { print 2 * g }') | avg ${p_conc_lat} ms |"
  echo "| idem, 1 in flight | $i1 | | p50 ${i1_p50} ms, p99 ${i1_p99} ms |"
  echo "| pgbench, 1 connection | $p1 | | avg ${p1_lat} ms |"
  echo
  echo "**idem: $(ratio "$i_tps" "$p_pool")x pgbench on the same $pool connections, $(ratio "$i_tps" "$p_conc")x pgbench"
  echo "with $conc connections**; one pair at a time: $(ratio "$i1" "$p1")x. Batching is worth"
  echo "$(ratio "$i_tps" "$s_tps")x over a transaction per operation on the same pipelined connections."
  echo
  echo "A durable commit waits for a WAL flush, so the rate is set by how many commits"
  echo "share one flush. pgbench gets its sharing from PostgreSQL's group commit across"
  echo "backends: many connections committing at once. Pipelining alone saves round"
  echo "trips but, on one connection, the commits still come one after another"
  echo "(\`batch=1\`); a batch makes many operations one commit on few connections."
  echo
  machine_lines
  echo "- Kernel: $(uname -sr); PostgreSQL $server (throwaway cluster, fsync on, shared_buffers 32MB)"
  echo
  raw_runs "$runs"
} >"$out"
echo "wrote $out"

#!/usr/bin/env bash
# lmdb_bench.sh - durable claim+complete throughput of lmdb: through its log
# (lmdb:DIR, one fdatasync per batch), against an LMDB commit per batch
# (lmdb:DIR?log=off), one commit per operation (?log=off&batch=1) and the raw
# write+fdatasync rate of the same disk, side by side in one run. Rounds
# alternate the modes so that a noisy neighbour hurts them alike; the report
# uses the median of the ratios within each round. Writes
# bench/results/lmdb.md.
#
#   bench/lmdb_bench.sh [SECONDS_PER_RUN=5] [ROUNDS=3] [CONCURRENCY=64]
#
# bench/results/lmdb.md is made with 3 10 64: many short rounds, since the
# disk's flush time drifts and the paired (per-round) ratio needs samples.
#
# Environment: IDEM_BUILD (build dir holding lmdb_bench, default ./build),
# BENCH_DIR (scratch dir on the disk to measure, default bench/tmp/lmdb).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
secs=${1:-5}
rounds=${2:-3}
conc=${3:-64}
build=${IDEM_BUILD:-$repo/build}
bin=$build/lmdb_bench
work=${BENCH_DIR:-$repo/bench/tmp/lmdb}
out=$repo/bench/results/lmdb.md
command="bench/lmdb_bench.sh $*"

need_binary "$bin" "build first, or set IDEM_BUILD"
mkdir -p "$work" "$repo/bench/results"
trap 'rm -rf "$work"' EXIT

runs=$(mktemp)
trap 'rm -rf "$work" "$runs"' EXIT

run() { # mode concurrency
  rm -rf "$work/store"
  if [ "$1" = fsync ]; then
    "$bin" fsync "$work" "$secs"
  else
    "$bin" "$1" "$work/store" "$2" "$secs"
  fi | tee -a "$runs"
}

echo "lmdb bench: $rounds rounds of ${secs}s per mode, $conc pairs in flight, in $work"
for r in $(seq 1 "$rounds"); do
  run fsync 0
  run single "$conc"
  run direct "$conc"
  run group "$conc"
done
# light load: one pair at a time (latency of a durable claim+complete)
run single 1
run group 1

# field NAME of the median run of MODE at CONCURRENCY (fsync: any)
median() {
  awk -v mode="$1" -v c="$2" -v f="$3" '
    { m = ""; cc = ""; v = ""
      for (i = 1; i <= NF; i++) { split($i, kv, "=")
        if (kv[1] == "mode") m = kv[2]; if (kv[1] == "concurrency") cc = kv[2]; if (kv[1] == f) v = kv[2] }
      if (m == mode && (mode == "fsync" || cc == c)) print v }' "$runs" |
    sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }'
}

# the ratio of MODE_A's FIELD_A to MODE_B's FIELD_B within each round (runs
# back to back), one per line; SCALE multiplies it (2: pairs to operations)
round_ratios() { # mode_a field_a mode_b field_b scale
  awk -v c="$conc" -v ma="$1" -v fa="$2" -v mb="$3" -v fb="$4" -v k="$5" '
    { delete f
      for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      if (f["mode"] == "fsync") f["concurrency"] = c
      if (f["concurrency"] != c) next
      if (f["mode"] == mb) b = f[fb]
      if (f["mode"] == ma) a = f[fa]
      if (f["mode"] == "group") { if (a > 0 && b > 0) printf "%.1f\n", k * a / b; a = 0; b = 0 } }' "$runs"
}
med() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }'; }
list() { paste -sd, - | sed 's/,/x, /g; s/$/x/'; }

fsync_rate=$(median fsync 0 syncs_per_sec)
group=$(median group "$conc" pairs_per_sec)
direct=$(median direct "$conc" pairs_per_sec)
single=$(median single "$conc" pairs_per_sec)
vs_single=$(round_ratios group pairs_per_sec single pairs_per_sec 1)
vs_direct=$(round_ratios group pairs_per_sec direct pairs_per_sec 1)
vs_fsync=$(round_ratios group pairs_per_sec fsync syncs_per_sec 2)
per_batch=$(median group "$conc" ops_per_commit)
d_per_batch=$(median direct "$conc" ops_per_commit)
fl_group=$(median group "$conc" dev_flushes_per_op)
fl_direct=$(median direct "$conc" dev_flushes_per_op)
fl_single=$(median single "$conc" dev_flushes_per_op)
ckpts=$(median group "$conc" checkpoints)
g_cycle=$(median group "$conc" commit_ms)
g_flush=$(median group "$conc" in_commit_ms)
g_apply=$(median group "$conc" apply_ms)
g_back=$(median group "$conc" handback_ms)
g1=$(median group 1 pairs_per_sec)
g1_p50=$(median group 1 p50_ms)
s1=$(median single 1 pairs_per_sec)
s1_p50=$(median single 1 p50_ms)
dev() { # mode concurrency: "W write requests, K KiB, F flushes" per batch (median)
  echo "$(median "$1" "$2" dev_writes) write requests, $(median "$1" "$2" dev_kb) KiB and $(median "$1" "$2" dev_flushes) flushes"
}
row() { # label mode concurrency
  local p
  p=$(median "$2" "$3" pairs_per_sec)
  echo "| $1 | $p | $(awk -v g="$p" 'BEGIN { print 2 * g }') | $(median "$2" "$3" ops_per_commit) | $(median "$2" "$3" dev_flushes_per_op) | $(median "$2" "$3" p50_ms) ms | $(median "$2" "$3" p99_ms) ms |"
}

fs=$(df -T "$work" | awk 'NR == 2 { print $2 " on " $1 }')
lmdb=$(dpkg-query -W -f '${Version}' liblmdb-dev 2>/dev/null || echo unknown)
rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)

{
  echo "# LMDB store: durable claim+complete throughput"
  echo
  echo "Made by \`$command\` (IDEM_BUILD=$build) at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $rev."
  echo
  echo "A *pair* is one claim and one complete of a fresh key, each durable before its"
  echo "callback; $conc pairs are in flight at once on one libuv loop. *log* is \`lmdb:DIR\`"
  echo "(the default: each batch appended to idem.log with one write and one"
  echo "fdatasync, LMDB checkpointed behind it); *LMDB commit per batch* is"
  echo "\`lmdb:DIR?log=off\` (one write transaction per batch, committed with LMDB's two"
  echo "flushes: the store before the log); *commit per operation* is"
  echo "\`lmdb:DIR?log=off&batch=1\`; *fsync* is a 4 KiB write + fdatasync loop on a file"
  echo "in the same directory (the disk's bare rate). $rounds rounds of ${secs}s, modes"
  echo "alternating; medians below. *Flushes per op* are the device's flush requests"
  echo "(its own counters, every process's I/O on it) per acknowledged operation."
  echo
  echo "| mode | pairs/s | durable ops/s | ops per batch | flushes per op | pair p50 | pair p99 |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  row "log, $conc in flight" group "$conc"
  row "LMDB commit per batch, $conc in flight" direct "$conc"
  row "commit per operation, $conc in flight" single "$conc"
  echo "| bare 4 KiB write + fdatasync | | $fsync_rate syncs/s | | 1 | | |"
  row "log, 1 in flight" group 1
  row "commit per operation, 1 in flight" single 1
  echo
  echo "Ratios within each round (the modes ran back to back), median and all rounds:"
  echo
  echo "- **log vs commit per operation: $(echo "$vs_single" | med)x** (aim 50x; $(echo "$vs_single" | list))"
  echo "- **log durable ops/s vs bare write+fdatasync/s: $(echo "$vs_fsync" | med)x** (aim 10x; $(echo "$vs_fsync" | list))"
  echo "- log vs LMDB commit per batch (the store before the log): $(echo "$vs_direct" | med)x ($(echo "$vs_direct" | list))"
  echo "- **flushes per acknowledged operation: $fl_group** with the log ($per_batch operations"
  echo "  per flush; aim 1/30 = 0.033), $fl_direct with an LMDB commit per batch ($d_per_batch"
  echo "  per commit), $fl_single with a commit per operation"
  echo
  echo "A log cycle (median): ${g_cycle} ms = ${g_apply} ms applying the batch + ${g_flush} ms"
  echo "writing and flushing it + ${g_back} ms handing the results back + the wait for"
  echo "callers to submit again. $ckpts LMDB checkpoints ran behind the log in the median"
  echo "run. On the device: a log batch is $(dev group "$conc"); an LMDB commit of"
  echo "$d_per_batch operations is $(dev direct "$conc"); a bare write + fdatasync is $(dev fsync 0)."
  echo
  machine_lines
  echo "- Kernel: $(uname -sr); filesystem: $fs"
  echo "- liblmdb $lmdb"
  echo
  raw_runs "$runs"
} >"$out"
echo "wrote $out"

#!/usr/bin/env bash
# lmdb_bench.sh - durable claim+complete throughput of lmdb: with group
# commit, against one commit per operation (lmdb:DIR?batch=1) and against the
# raw fsync rate of the same disk, side by side in one run. Rounds alternate
# the modes so that a noisy neighbour hurts them alike; the report uses the
# median of each. Writes bench/results/lmdb.md.
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

[ -x "$bin" ] || { echo "lmdb_bench.sh: no $bin (build first, or set IDEM_BUILD)" >&2; exit 2; }
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

fsync_rate=$(median fsync 0 syncs_per_sec)
single=$(median single "$conc" pairs_per_sec)
group=$(median group "$conc" pairs_per_sec)
ratio=$(awk -v g="$group" -v s="$single" 'BEGIN { printf "%.1f", (s > 0 ? g / s : 0) }')
vs_fsync=$(awk -v g="$group" -v f="$fsync_rate" 'BEGIN { printf "%.1f", (f > 0 ? g / f : 0) }')
per_commit=$(median group "$conc" ops_per_commit)
g_p50=$(median group "$conc" p50_ms)
g_p99=$(median group "$conc" p99_ms)
s_p50=$(median single "$conc" p50_ms)
s_p99=$(median single "$conc" p99_ms)
g_commit=$(median group "$conc" commit_ms)
s_commit=$(median single "$conc" commit_ms)
g_in=$(median group "$conc" in_commit_ms)
s_in=$(median single "$conc" in_commit_ms)
# ratio within each round (its single and group runs ran back to back), median
round_ratios=$(awk -v c="$conc" '
    { m = ""; cc = ""; v = ""
      for (i = 1; i <= NF; i++) { split($i, kv, "=")
        if (kv[1] == "mode") m = kv[2]; if (kv[1] == "concurrency") cc = kv[2]; if (kv[1] == "pairs_per_sec") v = kv[2] }
      if (cc != c) next
      if (m == "single") s = v
      if (m == "group" && s > 0) { printf "%.1f\n", v / s; s = 0 } }' "$runs")
round_median=$(echo "$round_ratios" | sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }')
round_list=$(echo "$round_ratios" | paste -sd, - | sed 's/,/x, /g; s/$/x/')
# the ceilings of the ratio within each round, median: ops per commit x
# (single cycle / group cycle) with a group cycle of only LMDB's commit, and of
# the writer's whole work (apply + commit + hand back), never waiting for callers
round_ceilings=$(awk -v c="$conc" '
    { delete f
      for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      if (f["concurrency"] != c) next
      if (f["mode"] == "single") s = f["commit_ms"]
      if (f["mode"] == "group" && s > 0) {
        printf "%.1f %.1f\n", f["ops_per_commit"] * s / f["in_commit_ms"],
          f["ops_per_commit"] * s / (f["in_commit_ms"] + f["apply_ms"] + f["handback_ms"])
        s = 0 } }' "$runs")
ceiling_commit=$(echo "$round_ceilings" | awk '{ print $1 }' | sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }')
ceiling_writer=$(echo "$round_ceilings" | awk '{ print $2 }' | sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print 0 }')
g_apply=$(median group "$conc" apply_ms)
g_back=$(median group "$conc" handback_ms)
g_wait=$(awk -v c="$g_commit" -v i="$g_in" -v a="$g_apply" -v b="$g_back" 'BEGIN { printf "%.3f", c - i - a - b }')
# what 50x leaves for everything outside LMDB's commit, per cycle (medians)
budget=$(awk -v n="$per_commit" -v s="$s_commit" -v i="$g_in" 'BEGIN { printf "%.3f", n * s / 50 - i }')
in_vs=$(awk -v g="$g_in" -v s="$s_in" 'BEGIN { printf "%.2f", (s > 0 ? g / s : 0) }')
dev() { # mode concurrency: "W write requests, K KiB, F flushes" per commit (median)
  local w k f
  w=$(median "$1" "$2" dev_writes)
  k=$(median "$1" "$2" dev_kb)
  f=$(median "$1" "$2" dev_flushes)
  echo "$w write requests, $k KiB and $f flushes"
}
g1=$(median group 1 pairs_per_sec)
g1_p50=$(median group 1 p50_ms)
s1=$(median single 1 pairs_per_sec)

fs=$(df -T "$work" | awk 'NR == 2 { print $2 " on " $1 }')
lmdb=$(dpkg-query -W -f '${Version}' liblmdb-dev 2>/dev/null || echo unknown)
rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)

{
  echo "# LMDB store: durable claim+complete throughput"
  echo
  echo "Made by \`$command\` (IDEM_BUILD=$build) at $(date -u '+%Y-%m-%d %H:%M UTC'), commit $rev."
  echo
  echo "A *pair* is one claim and one complete of a fresh key, each durable (fsync) before"
  echo "its callback; $conc pairs are in flight at once on one libuv loop. *group* is"
  echo "\`lmdb:DIR\` (one writer thread, every queued operation in one write transaction,"
  echo "one commit); *single* is \`lmdb:DIR?batch=1\` (a commit per operation); *fsync* is"
  echo "a 4 KiB write + fdatasync loop on a file in the same directory (the disk's raw"
  echo "rate). $rounds rounds of ${secs}s, modes alternating; medians below."
  echo
  echo "| mode | pairs/s | durable ops/s | ops per commit | pair p50 | pair p99 |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  echo "| group commit, $conc in flight | $group | $(awk -v g="$group" 'BEGIN { print 2 * g }') | $per_commit | ${g_p50} ms | ${g_p99} ms |"
  echo "| commit per operation, $conc in flight | $single | $(awk -v g="$single" 'BEGIN { print 2 * g }') | 1 | ${s_p50} ms | ${s_p99} ms |"
  echo "| raw 4 KiB write + fdatasync | | $fsync_rate syncs/s | | | |"
  echo "| group commit, 1 in flight | $g1 | | | ${g1_p50} ms | |"
  echo "| commit per operation, 1 in flight | $s1 | | | | |"
  echo
  echo "**Group commit: ${round_median}x the commit-per-operation rate** at $conc concurrent"
  echo "pairs (aim: 50x): the median of the ratios within each round, where the two ran"
  echo "back to back (${round_list}). The ratio of the two medians over the"
  echo "whole run is ${ratio}x. The disk's flush time drifts from run to run, so the"
  echo "paired figure is the one to trust; the aim counts as met when both reach 50x."
  echo "Group commit does ${vs_fsync}x more pairs per second than the disk does bare fsyncs."
  echo
  echo "Where a group commit cycle's time goes (medians): ${g_commit} ms per cycle ="
  echo "${g_apply} ms applying about $per_commit operations in the write transaction"
  echo "+ ${g_in} ms inside LMDB's commit (page writes, fdatasync, meta page write +"
  echo "sync) + ${g_back} ms handing the results back to the loop + ${g_wait} ms"
  echo "waiting for the callers to submit again (the loop thread runs the $conc"
  echo "callbacks, each submitting its next operation; every caller waits for the"
  echo "commit before, so this cannot overlap it). A single-operation cycle took"
  echo "${s_commit} ms, ${s_in} ms of it inside LMDB."
  echo
  echo "On the device (its own counters, /sys/dev/block/*/stat, which count every"
  echo "process's I/O on it): a commit of one operation is $(dev single "$conc"); a commit of"
  echo "$per_commit is $(dev group "$conc"); a bare 4 KiB write +"
  echo "fdatasync is $(dev fsync 0). Both commits pay the same two"
  echo "flushes, but the batch writes about twice the bytes in more requests, so"
  echo "inside LMDB it costs ${in_vs}x a single-operation commit."
  echo
  echo "The ratio is ops per commit x (single cycle / group cycle). Its ceilings"
  echo "within each round of this run, medians: **${ceiling_commit}x** if a group cycle"
  echo "were LMDB's commit alone, **${ceiling_writer}x** if the writer never waited for"
  echo "callers (apply + commit + hand back). 50x would leave ${budget} ms per cycle"
  echo "for everything outside LMDB's commit (applying the batch, handing it back,"
  echo "the callers' turn on the loop), against ${g_apply} ms for applying alone."
  echo "With a write transaction per batch, as this store commits, it would take a"
  echo "batch commit that costs less against a single one than this disk allows (for"
  echo "instance a separate append-only log with one flush per batch). The head"
  echo "comment of src/store/lmdb_writer.c lists what was tried to shorten the cycle."
  echo
  machine_lines
  echo "- Kernel: $(uname -sr); filesystem: $fs"
  echo "- liblmdb $lmdb"
  echo
  raw_runs "$runs"
} >"$out"
echo "wrote $out"

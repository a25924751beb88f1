#!/usr/bin/env bash
# cpu_per_thread.sh - where the CPU of a request goes: microseconds of CPU
# and system calls per request, per thread of idem serve (loops, the LMDB
# writer and checkpointer) and of nginx as a plain reverse proxy, under the
# load of gateway_bench.sh (wrk, unique keys, 64 connections by default).
#
# A diagnostic, not a race: each process is measured alone (`perf stat
# --per-thread -p`, started 2 s into a wrk run, for --window seconds), so
# the figures say what a request costs, not how fast the machine serves it.
# Per request = the counter over the requests wrk completed in the window
# (its rate times the window). Needs perf (linux-perf) and root.
#
# usage: bench/cpu_per_thread.sh [--idem build/idem] [--stores memory:,lmdb:]
#          [--connections 64] [--window 4] [--out FILE]
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
IDEM=build/idem STORES="memory:,lmdb:" CONNS=64 WINDOW=4 OUT=""
CMDLINE="bench/cpu_per_thread.sh $*"
bench_options 2,14 "--idem=IDEM --stores=STORES --connections=CONNS --window=WINDOW --out=OUT" "$@"
need_binary "$IDEM"
command -v perf >/dev/null || { echo "cpu_per_thread.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
THREADS=2 DURATION=$((WINDOW + 4))s REPLAY_KEYS=1000 BODY='{"amount":1000,"currency":"eur"}'

bench_tmp idem-cpu
start_nginx_pair
write_bench_lua
ROWS=$TMP/rows

# measure NAME PORT PIDS: one wrk run at PORT, perf on PIDS (comma-separated)
# in its middle; appends "name thread us_per_req syscalls_per_req" rows
measure() {
  local name=$1 port=$2 pids=$3 st rps
  (sleep 2; perf stat --per-thread -x, -e task-clock,raw_syscalls:sys_enter -p "$pids" \
     -o "$TMP/$name.perf" sleep "$WINDOW") &
  st=$!
  wrk_run "$name" "$port" unique
  wait "$st"
  rps=${WRK_RESULT%% *}
  # perf -x, rows: "thread-tid,value,unit,event,..."; threads of one name summed
  awk -F, -v name="$name" -v n="$(awk -v r="$rps" -v w="$WINDOW" 'BEGIN { print r * w }')" '
    NF > 4 && $2 ~ /^[0-9.]+$/ {
      t = $1; sub(/-[0-9]+$/, "", t)
      if ($4 == "task-clock") cpu[t] += $2 * 1000      # msec -> usec
      else if ($4 ~ /sys_enter/) sys[t] += $2
    }
    END { for (t in cpu) printf "%s %s %.1f %.2f\n", name, t, cpu[t] / n, sys[t] / n }
  ' "$TMP/$name.perf" | sort -k2 >>"$ROWS"
  echo "$name req/s $rps" >>"$TMP/rates"
}

IFS=, read -ra stores <<<"$STORES"
for store in "${stores[@]}"; do
  s=$store
  [ "$store" != lmdb: ] || s="lmdb:$TMP/lmdb"
  start_idem "idem-${store%:}" "$s"
  measure "idem-${store%:}" "$PORT" "${PIDS[-1]}"
  kill -TERM "${PIDS[-1]}"
done
measure nginx-proxy "$PX_PORT" "$(pgrep -P "${PIDS[1]}" | paste -sd,)"

report() {
  echo "# CPU per request, per thread"
  echo
  echo "Command: \`$CMDLINE\` ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$HERE" rev-parse --short HEAD))"
  echo
  echo "wrk -t$THREADS -c$CONNS, unique keys, POST $BODY; perf stat over ${WINDOW} s of each run."
  echo
  echo "| process | thread | µs of CPU per request | system calls per request |"
  echo "| --- | --- | ---: | ---: |"
  # each process's threads, then its total, in the order they were measured
  awk '$1 != last { if (last != "") total(last); last = $1 }
       { printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4; cpu[$1] += $3; sys[$1] += $4 }
       function total(p) { printf "| %s | **all** | **%.1f** | **%.2f** |\n", p, cpu[p], sys[p] }
       END { if (last != "") total(last) }' "$ROWS"
  echo
  sed 's/^/- /' "$TMP/rates"
  echo
  machine_lines
}
if [ -n "$OUT" ]; then report | tee "$OUT"; else report; fi

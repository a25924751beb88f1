#!/usr/bin/env bash
# redis_bench.sh - the Redis store and the gateway on Redis, each side by side
# with its reference, in one run.
#
# 1. Store: bench/redis_bench.c keeps claim+complete pairs in flight through
#    the idem store API (EVALSHA of the transition script) against a fresh
#    redis-server; redis-benchmark then runs the same script (EVALSHA claim
#    on fresh random keys) on the same server, with the same number of
#    connections and commands in flight per connection.
# 2. Gateway: wrk POSTs through nginx as a plain reverse proxy and through
#    idem serve --store redis://... (and --store memory: for reference), all
#    in front of one nginx upstream; unique keys (claim + forward + complete)
#    and replayed keys (answered from Redis).
#
# usage: bench/redis_bench.sh [--build DIR] [--duration 5s] [--threads 2]
#                             [--connections 64] [--out bench/results/redis.md]
# Needs redis-server, redis-benchmark, redis-cli, nginx, wrk, python3.
# Everything it starts listens on 127.0.0.1 free ports and is stopped by PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
BUILD=""
DURATION=5s
THREADS=2
CONNS=64
OUT=$HERE/results/redis.md
REPLAY_KEYS=1000
CMDLINE="bench/redis_bench.sh $*"

bench_options 2,19 "--build=BUILD --duration=DURATION --threads=THREADS --connections=CONNS --out=OUT" "$@"
if [ -z "$BUILD" ]; then
  for c in "$SRC/build" "$SRC/build-redis" "$SRC/build-e2e"; do
    [ -x "$c/idem" ] && [ -x "$c/redis_bench" ] && BUILD=$c && break
  done
fi
IDEM=$BUILD/idem
DRIVER=$BUILD/redis_bench
[ -x "$IDEM" ] && [ -x "$DRIVER" ] || {
  echo "redis_bench.sh: build idem and redis_bench first (--build DIR)" >&2; exit 2; }
for t in redis-server redis-benchmark redis-cli nginx wrk python3; do
  command -v $t >/dev/null || { echo "redis_bench.sh: $t not installed" >&2; exit 2; }
done
SECS=${DURATION%s}

bench_tmp idem-redisbench

RESULTS=$TMP/results.txt
: >"$RESULTS"

# ---- 1. the store against redis-benchmark -------------------------------

RPORT=$(free_port)
mkdir -p "$TMP/redis"
redis-server --bind 127.0.0.1 --port "$RPORT" --dir "$TMP/redis" --save "" \
  --appendonly no --daemonize no --logfile "$TMP/redis/log" &
PIDS+=($!)
wait_port "$RPORT" "${PIDS[-1]}" redis-server
RURI="redis://127.0.0.1:$RPORT"

SHA=$(redis-cli -p "$RPORT" SCRIPT LOAD "$("$DRIVER" script)")
[ "${#SHA}" = 40 ] || { echo "redis_bench.sh: SCRIPT LOAD failed: $SHA" >&2; exit 1; }

store_run() { # store_run THREADS IN_FLIGHT
  local out
  out=$("$DRIVER" "$RURI" "$1" "$2" "$SECS")
  echo "store idem-store $1 $2 $out" | tee -a "$RESULTS"
}

# redis-benchmark: -c connections, -P commands in flight per connection, as
# many requests as fit in about the same time (it runs by count, not time).
rb_run() { # rb_run CONNECTIONS PIPELINE
  local n out rps
  n=$(python3 -c "print(int(max(20000, 40000 * $SECS)))")
  out=$(redis-benchmark -h 127.0.0.1 -p "$RPORT" -c "$1" -P "$2" -n "$n" -r 1000000000 --csv \
    EVALSHA "$SHA" 1 "idem:{0:rb-__rand_int__}" claim 0123456789abcdef0123456789abcdef 0 \
    30000 3600000 0 0 "" "")
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  rps=$(printf '%s\n' "$out" | tail -1 | python3 -c 'import csv,sys; r=next(csv.reader(sys.stdin)); print(r[1], r[4], r[6])')
  echo "store redis-benchmark $1 $2 $rps $n" | tee -a "$RESULTS"
}

store_run 1 "$CONNS"
rb_run 1 "$CONNS"
store_run "$THREADS" $((CONNS / THREADS))
rb_run "$THREADS" $((CONNS / THREADS))
store_run "$CONNS" 1
rb_run "$CONNS" 1
redis-cli -p "$RPORT" FLUSHALL >/dev/null

# ---- 2. the gateway on Redis against nginx ------------------------------

start_nginx_pair

start_idem idem-redis "$RURI"
REDIS_GW=$PORT
start_idem idem-memory memory:bench
MEM_GW=$PORT

BODY='{"amount":100,"currency":"EUR"}'
write_bench_lua

# complete the replay key set through each gateway
populate "$REDIS_GW"
populate "$MEM_GW"

gw_run() { # gw_run TARGET PORT MODE
  wrk_run "$1" "$2" "$3"
  echo "gateway $1 $3 $WRK_RESULT" | tee -a "$RESULTS"
}
for mode in unique replay; do
  gw_run nginx-proxy "$PX_PORT" "$mode"
  gw_run idem-redis "$REDIS_GW" "$mode"
  gw_run idem-memory "$MEM_GW" "$mode"
done
RECORDS=$(redis-cli -p "$RPORT" DBSIZE)

check_alive

# ---- report ---------------------------------------------------------------

mkdir -p "$(dirname "$OUT")"
python3 - "$RESULTS" "$OUT" "$CMDLINE" "$DURATION" "$THREADS" "$CONNS" "$IDEM" "$RECORDS" <<'EOF'
import datetime, os, platform, subprocess, sys
res, out, cmd, dur, thr, conns, idem, records = sys.argv[1:9]
rows = [l.split() for l in open(res) if l.strip()]
def cpu():
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            return l.split(":", 1)[1].strip()
    return "?"
def kv(fields):
    return dict(f.split("=", 1) for f in fields if "=" in f)
ver = subprocess.run([idem, "version"], capture_output=True, text=True).stdout.strip()
rev = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(idem)),
                      "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
rv = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
rver = next((w[2:] for w in rv if w.startswith("v=")), "?")
load = open("/proc/loadavg").read().split()[:3]
L = ["# Redis store and gateway on Redis: benchmark\n",
     "Generated by `bench/redis_bench.sh` on %s UTC.\n" %
     datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
     "| machine | |\n| --- | --- |",
     "| cpu | %s |" % cpu(),
     "| nproc | %d |" % os.cpu_count(),
     "| kernel | %s %s |" % (platform.system(), platform.release()),
     "| load average at end (1/5/15 min) | %s |" % " / ".join(load),
     "| idem | %s (git %s) |" % (ver, rev or "?"),
     "| redis-server | %s, no persistence (`--save \"\" --appendonly no`), one per run |" % rver,
     "| nginx | %s |" % subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
     "",
     "Command: `%s`\n" % cmd.strip(),
     "## Store: claim+complete through libidem vs redis-benchmark, same script\n",
     "`redis_bench URI THREADS IN_FLIGHT SECONDS` keeps IN_FLIGHT claim+complete pairs in flight "
     "on each of THREADS loops (one store handle, so one Redis connection, per loop), each pair on "
     "a fresh key: two EVALSHA calls of the transition script per pair, the second carrying a "
     "32-byte header block and a 25-byte body. redis-benchmark runs `EVALSHA <same sha> 1 "
     "idem:{0:rb-<random>} claim ...`: the claim of a fresh key (HMGET, HSET of ten fields, "
     "PEXPIREAT), with as many connections and as many commands in flight per connection (`-c`, "
     "`-P`). Both count script calls per second against the same server; the gap is what the "
     "client side (hiredis, the store layer, completion delivery through the loop) costs.\n",
     "| connections x in flight | idem store pairs/s | idem store scripts/s | pair p50 ms | pair p99 ms | redis-benchmark EVALSHA/s | its p50 ms | its p99 ms | idem / redis-benchmark |",
     "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
store = {}
for r in rows:
    if r[0] != "store":
        continue
    store.setdefault((r[2], r[3]), {})[r[1]] = r[4:]
for (c, p), d in store.items():
    s = kv(d.get("idem-store", []))
    b = d.get("redis-benchmark", ["0", "0", "0"])
    sps = float(s.get("scripts_per_sec", 0))
    L.append("| %s x %s | %s | %s | %s | %s | %.0f | %s | %s | %.2fx |" % (
        c, p, s.get("pairs_per_sec", "-"), s.get("scripts_per_sec", "-"),
        s.get("pair_p50_ms", "-"), s.get("pair_p99_ms", "-"), float(b[0]), b[1], b[2],
        sps / float(b[0]) if float(b[0]) else 0))
L += ["",
      "## Gateway: idem serve on Redis vs nginx as a plain reverse proxy\n",
      "wrk, %s threads, %s connections, %s per run, POST /bench with a 31-byte JSON body, in front of "
      "one nginx upstream (`worker_processes auto`) returning a fixed 200. nginx-proxy: "
      "`proxy_pass` with `keepalive 512`, `worker_processes auto`. idem: `idem serve --store "
      "redis://...` (same redis-server as above) and `--store memory:bench` for reference, default "
      "flags. unique: a fresh `Idempotency-Key` per request (claim, forward, complete: two Redis "
      "round trips). replay: keys from a set of %d completed before the run (one round trip). "
      "nginx ignores the key, so its two rows measure the same work.\n" % (thr, conns, dur, 1000)]
for mode in ("unique", "replay"):
    L.append("### %s keys\n" % mode)
    L.append("| target | req/s | p50 ms | p99 ms | non-2xx | socket errors | vs nginx-proxy |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    g = {r[1]: r for r in rows if r[0] == "gateway" and r[2] == mode}
    base = float(g["nginx-proxy"][3]) if "nginx-proxy" in g else None
    for t in ("nginx-proxy", "idem-redis", "idem-memory"):
        if t not in g:
            continue
        r = g[t]
        L.append("| %s | %.0f | %.2f | %.2f | %s | %s | %s |" % (
            t, float(r[3]), float(r[4]), float(r[5]), r[6], r[7],
            "%.2fx" % (float(r[3]) / base) if base else "-"))
    L.append("")
L.append("Records in Redis at the end: %s.\n" % records)
L.append("Reading: a unique-key request costs two script calls in Redis (claim, complete) and a "
         "replay one, each a round trip on the worker's connection; and here the Redis server "
         "itself runs on the same two CPUs as wrk, nginx and idem, so the idem-redis rows also "
         "pay for Redis's CPU, which the nginx-proxy rows do not.\n")
L.append("Everything (Redis, nginx, idem, wrk, redis-benchmark) shares the same %d CPUs, "
         "on a machine shared with other work: compare rows of one run, not runs.\n" % os.cpu_count())
open(out, "w").write("\n".join(L))
print("wrote", out)
EOF

#!/usr/bin/env bash
# gateway_bench.sh - idem serve side by side with nginx, in one run.
#
# Targets, all on 127.0.0.1 free ports, all in front of one upstream (nginx
# answering a fixed 200 body to any method, keep-alive):
#   upstream       the upstream directly
#   nginx-proxy    nginx as a plain reverse proxy (proxy_pass, upstream keepalive)
#   idem-memory    idem serve --store memory:bench
#   idem-lmdb      idem serve --store lmdb:DIR
#   idem-lmdb-tmpfs  the same on a tmpfs directory (/dev/shm), where fsync
#                  returns at once: not durable, a diagnostic that shows what
#                  the disk's flushes cost (skipped without a tmpfs /dev/shm)
# Workloads (wrk, POST with a small JSON body):
#   unique         a new Idempotency-Key on every request (claim + complete)
#   replay         keys from a fixed set completed beforehand (replays)
# Reports req/s, p50, p99 and the ratio to nginx-proxy for the same workload.
#
# Then unique keys at more connections (--sweep), nginx-proxy, idem-lmdb and
# idem-memory alternating, --sweep-rounds rounds of --sweep-duration runs per
# point, with the median of the ratios within each round: a durable store
# shares each flush among the requests in flight, so its throughput depends
# on how many there are. Then replays at --connections, nginx-proxy and
# idem-lmdb alternating the same way.
#
# With --routes first, it is bench/routes_bench.sh instead (the rest of the
# arguments are routes_bench.sh's): flags only beside a 10-route --config and
# beside the routes with --access-log on.
#
# usage: bench/gateway_bench.sh [--idem PATH] [--duration 10s] [--threads 2]
#                               [--connections 64] [--out bench/results/gateway.md]
#                               [--sweep 128,256,512,1024] [--sweep-rounds 5]
#                               [--sweep-duration 5s]
#        bench/gateway_bench.sh --routes [routes_bench.sh options]
# Needs nginx, wrk, python3. Everything it starts is stopped by PID on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
IDEM=${IDEM_BIN:-}
DURATION=10s
THREADS=2
CONNS=64
OUT=$HERE/results/gateway.md
REPLAY_KEYS=1000
SWEEP=128,256,512,1024
SWEEP_ROUNDS=5
SWEEP_DURATION=5s
CMDLINE="bench/gateway_bench.sh $*"

while [ $# -gt 0 ]; do
  case $1 in
    --idem) IDEM=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --sweep) SWEEP=$2; shift 2 ;;
    --sweep-rounds) SWEEP_ROUNDS=$2; shift 2 ;;
    --sweep-duration) SWEEP_DURATION=$2; shift 2 ;;
    --routes) shift; exec "$(dirname "$0")/routes_bench.sh" "$@" ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "gateway_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$IDEM" ]; then
  for c in "$SRC/build-e2e/idem" "$SRC/build/idem"; do
    [ -x "$c" ] && IDEM=$c && break
  done
fi
[ -x "${IDEM:-}" ] || { echo "gateway_bench.sh: idem binary not found (--idem PATH)" >&2; exit 2; }
for t in nginx wrk python3; do
  command -v $t >/dev/null || { echo "gateway_bench.sh: $t not installed" >&2; exit 2; }
done

bench_tmp idem-gwbench
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

start_nginx_pair

start_idem idem-memory memory:bench --admin
MEM_PORT=$PORT MEM_ADMIN=$ADMIN MEM_PID=${PIDS[-1]}
mkdir -p "$TMP/lmdb"
start_idem idem-lmdb "lmdb:$TMP/lmdb/store" --admin
LMDB_PORT=$PORT LMDB_ADMIN=$ADMIN LMDB_PID=${PIDS[-1]}
SHM_PORT=
if [ "$(df -T /dev/shm 2>/dev/null | awk 'NR == 2 { print $2 }')" = tmpfs ]; then
  EXTRA_TMP=$(mktemp -d /dev/shm/idem-gwbench.XXXXXX)
  start_idem idem-lmdb-tmpfs "lmdb:$EXTRA_TMP/store" --admin
  SHM_PORT=$PORT SHM_ADMIN=$ADMIN SHM_PID=${PIDS[-1]}
fi

# the disk's flush latency: a 4 KiB write + fdatasync in a loop for 3s, on
# the disk that holds the lmdb store
FSYNC_MS=$(python3 - "$TMP/lmdb/fsync.dat" <<'EOF'
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o600)
block = b"f" * 4096
for i in range(16):
    os.pwrite(fd, block, i * 4096)
os.fsync(fd)
n, start = 0, time.monotonic()
while time.monotonic() - start < 3:
    os.pwrite(fd, block, (n % 16) * 4096)
    os.fdatasync(fd)
    n += 1
print("%.3f" % ((time.monotonic() - start) * 1000 / n))
os.close(fd)
os.unlink(sys.argv[1])
EOF
)

# outcomes ADMIN-PORT: "executed replayed other commits ops commit_seconds"
# from idem_requests_total and, on lmdb, the store's counters (else 0)
outcomes() {
  python3 - "$1" <<'EOF'
import re, sys, urllib.request
t = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode()
c = {m.group(1): float(m.group(2)) for m in
     re.finditer(r'^idem_requests_total\{outcome="([a-z_]+)"\} (\S+)$', t, re.M)}
ex, rp = c.get("executed", 0), c.get("replayed", 0)
def one(name):
    m = re.search(r'^%s (\S+)$' % name, t, re.M)
    return float(m.group(1)) if m else 0.0
print("%d %d %d %d %d %.6f" % (ex, rp, sum(c.values()) - ex - rp, one("idem_lmdb_commits_total"),
                               one("idem_lmdb_ops_written_total"), one("idem_lmdb_commit_seconds_total")))
EOF
}

BODY='{"amount":100,"currency":"EUR"}'
write_bench_lua

# complete the replay key set on every target (the same body and target)
populate "$MEM_PORT"
populate "$LMDB_PORT"
if [ -n "$SHM_PORT" ]; then populate "$SHM_PORT"; fi

# cpu_ticks PID: "process writer idle all" in clock ticks: the CPU time of
# PID and its child processes (nginx's workers), of its thread named
# idem-lmdb-write (the LMDB writer, else 0), and the machine's idle and total
cpu_ticks() {
  python3 - "$1" <<'EOF'
import os, sys
pid = sys.argv[1]
def ticks(path):
    f = open(path).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])  # utime, stime
def parent(p):  # None for a process that ended while we looked
    try:
        return open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[1]
    except OSError:
        return None
def safe_ticks(path):
    try:
        return ticks(path)
    except OSError:
        return 0
procs = [pid] + [p for p in os.listdir("/proc") if p.isdigit() and parent(p) == pid]
total = sum(safe_ticks("/proc/%s/stat" % p) for p in procs)
writer = sum(ticks("/proc/%s/task/%s/stat" % (pid, t)) for t in os.listdir("/proc/%s/task" % pid)
             if open("/proc/%s/task/%s/comm" % (pid, t)).read().strip() == "idem-lmdb-write")
cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
print(total, writer, cpu[3] + cpu[4], sum(cpu[:8]))
EOF
}

# cpu_per_request BEFORE AFTER REQUESTS: "process-us writer-us idle%"
cpu_per_request() {
  python3 - "$1" "$2" "$3" <<'EOF'
import os, sys
a, b, n = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()], float(sys.argv[3])
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
print("%.1f %.1f %.0f" % ((b[0] - a[0]) * tick_us / n, (b[1] - a[1]) * tick_us / n,
                          100 * (b[2] - a[2]) / max(b[3] - a[3], 1)))
EOF
}

# the process behind each target, for the CPU columns
target_pid() {
  case $1 in
    upstream) echo "${PIDS[0]}" ;;
    nginx-proxy) echo "${PIDS[1]}" ;;
    idem-memory) echo "$MEM_PID" ;;
    idem-lmdb) echo "$LMDB_PID" ;;
    idem-lmdb-tmpfs) echo "$SHM_PID" ;;
  esac
}

# measured TARGET PORT MODE: one wrk run with the target's CPU around it;
# sets WRK_RESULT and CPU_RESULT ("process-us writer-us idle%" per request)
measured() {
  local pid c0 c1
  pid=$(target_pid "$1")
  c0=$(cpu_ticks "$pid")
  wrk_run "$1" "$2" "$3"
  c1=$(cpu_ticks "$pid")
  set -- $WRK_RESULT
  CPU_RESULT=$(cpu_per_request "$c0" "$c1" "$6")
}

RESULTS=$TMP/results.txt
: >"$RESULTS"
run() { # run TARGET PORT MODE [ADMIN-PORT]
  local before="0 0 0 0 0 0" after="0 0 0 0 0 0"
  [ -n "${4:-}" ] && before=$(outcomes "$4")
  measured "$1" "$2" "$3"
  local delta="- - - - - -"
  if [ -n "${4:-}" ]; then
    after=$(outcomes "$4")
    delta=$(python3 -c 'import sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(" ".join("%g" % round(float(y)-float(x), 6) for x,y in zip(a,b)))' "$before" "$after")
  fi
  echo "$1 $3 $WRK_RESULT $delta $CPU_RESULT" | tee -a "$RESULTS"
}
echo "target mode req/s p50_ms p99_ms non2xx sockerr requests executed replayed other commits ops commit_s cpu_us writer_us idle%"
for mode in unique replay; do
  run upstream "$UP_PORT" "$mode"
  run nginx-proxy "$PX_PORT" "$mode"
  run idem-memory "$MEM_PORT" "$mode" "$MEM_ADMIN"
  run idem-lmdb "$LMDB_PORT" "$mode" "$LMDB_ADMIN"
  if [ -n "$SHM_PORT" ]; then run idem-lmdb-tmpfs "$SHM_PORT" "$mode" "$SHM_ADMIN"; fi
done

# unique keys at more connections: nginx-proxy and idem-lmdb in pairs
SWEEP_RESULTS=$TMP/sweep.txt
REPLAY_RESULTS=$TMP/replay.txt
: >"$SWEEP_RESULTS"
: >"$REPLAY_RESULTS"
if [ -n "$SWEEP" ]; then
  echo "connections round target req/s p50_ms p99_ms non2xx sockerr requests cpu_us writer_us idle%"
  main_conns=$CONNS main_duration=$DURATION
  CONNS_LIST=$(echo "$SWEEP" | tr ',' ' ')
  DURATION=$SWEEP_DURATION
  for c in $CONNS_LIST; do
    CONNS=$c
    for r in $(seq 1 "$SWEEP_ROUNDS"); do
      for t in nginx-proxy idem-lmdb idem-memory; do
        port=$PX_PORT
        [ "$t" = idem-lmdb ] && port=$LMDB_PORT
        [ "$t" = idem-memory ] && port=$MEM_PORT
        measured "$t" "$port" unique
        echo "$c $r $t $WRK_RESULT $CPU_RESULT" | tee -a "$SWEEP_RESULTS"
      done
    done
  done
  CONNS=$main_conns
  for r in $(seq 1 "$SWEEP_ROUNDS"); do
    for t in nginx-proxy idem-lmdb; do
      port=$PX_PORT
      [ "$t" = idem-lmdb ] && port=$LMDB_PORT
      measured "$t" "$port" replay
      echo "$CONNS $r $t $WRK_RESULT $CPU_RESULT" | tee -a "$REPLAY_RESULTS"
    done
  done
  DURATION=$main_duration
fi

# every gateway must still be alive after the runs
check_alive

mkdir -p "$(dirname "$OUT")"
python3 - "$RESULTS" "$OUT" "$CMDLINE" "$DURATION" "$THREADS" "$CONNS" "$IDEM" "$LOAD_START" "$FSYNC_MS" "$SWEEP_RESULTS" "$SWEEP_DURATION" "$REPLAY_RESULTS" <<'EOF'
import datetime, os, platform, statistics, subprocess, sys
res, out, cmd, dur, thr, conns, idem, load0, fsync_ms, sweep_res, sweep_dur, replay_res = sys.argv[1:13]
rows = [l.split() for l in open(res) if l.strip()]
data = {(r[0], r[1]): r for r in rows}
def cpu():
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            return l.split(":", 1)[1].strip()
    return "?"
ver = subprocess.run([idem, "version"], capture_output=True, text=True).stdout.strip()
src = os.path.dirname(os.path.abspath(idem))
rev = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"],
                     capture_output=True, text=True).stdout.strip()
top = subprocess.run(["git", "-C", src, "rev-parse", "--show-toplevel"],
                     capture_output=True, text=True).stdout.strip()
if top and subprocess.run(["git", "-C", top, "status", "--porcelain", "--", "src", "include"],
                          capture_output=True, text=True).stdout.strip():
    rev += " + uncommitted changes under src/ or include/"
load = open("/proc/loadavg").read().split()[:3]
L = []
L.append("# idem serve vs nginx: gateway benchmark\n")
L.append("Generated by `bench/gateway_bench.sh` on %s UTC.\n" %
         datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"))
L.append("| machine | |\n| --- | --- |")
L.append("| cpu | %s |" % cpu())
L.append("| nproc | %d |" % os.cpu_count())
L.append("| kernel | %s %s |" % (platform.system(), platform.release()))
L.append("| load average at start, at end (1/5/15 min) | %s; %s |" % (" / ".join(load0.split()), " / ".join(load)))
L.append("| idem | %s (git %s) |" % (ver, rev or "?"))
L.append("| nginx | %s |" % subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip())
L.append("| wrk | %s threads, %s connections, %s per run, POST /bench, 31-byte JSON body |\n" % (thr, conns, dur))
L.append("Command: `%s`\n" % cmd.strip())
L.append("Upstream: nginx (`worker_processes auto`, one per core) returning a fixed 200 JSON body to any method. "
         "nginx-proxy: nginx (`worker_processes auto`), `proxy_pass` with `keepalive 512` (idem keeps up to 512 idle upstream connections per loop). "
         "idem: `idem serve --store memory:bench` and `--store lmdb:DIR`, default flags "
         "(`--workers` defaults to one event loop per core, like nginx's `auto`). "
         "unique: a fresh `Idempotency-Key` per request (claim, forward, store). "
         "replay: keys from a set of 1000 completed before the run (answered from the store). "
         "The upstream and nginx-proxy ignore the key, so their two rows measure the same work. "
         "CPU µs per request: the CPU time (user + system, from /proc) of the target's processes "
         "(nginx's master and workers; idem's process, and in parentheses its LMDB writer thread) "
         "over the run, divided by the requests wrk completed; machine idle: the share of both "
         "CPUs left idle during the run. "
         "The last column is the change of idem's `idem_requests_total` by outcome over the run, "
         "read from its admin listener (it also counts requests wrk cut off at the end).\n")
def cpu_cell(c):  # "process-us writer-us idle%" -> "57.8 (writer 13.1)"
    if len(c) < 3:
        return "-"
    return c[0] + (" (writer %s)" % c[1] if float(c[1]) > 0 else "")
def idle_cell(c):
    return "%s%%" % c[2] if len(c) >= 3 else "-"
for mode in ("unique", "replay"):
    L.append("## %s keys\n" % mode)
    L.append("| target | req/s | p50 ms | p99 ms | non-2xx | socket errors | vs nginx-proxy req/s | CPU µs per request | machine idle | idem executed / replayed / other |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = float(data[("nginx-proxy", mode)][2]) if ("nginx-proxy", mode) in data else None
    for t in ("upstream", "nginx-proxy", "idem-memory", "idem-lmdb", "idem-lmdb-tmpfs"):
        r = data.get((t, mode))
        if not r:
            continue
        rps = float(r[2])
        ratio = "%.2fx" % (rps / base) if base else "-"
        outc = " / ".join(r[8:11]) if len(r) > 10 and r[8] != "-" else "-"
        L.append("| %s | %.0f | %.2f | %.2f | %s | %s | %s | %s | %s | %s |" % (
            t, rps, float(r[3]), float(r[4]), r[5], r[6], ratio, cpu_cell(r[14:17]), idle_cell(r[14:17]), outc))
    L.append("")
L.append("idem-lmdb-tmpfs is a diagnostic, not a way to run: the same LMDB store in a tmpfs "
         "directory, where fsync returns at once, so nothing it acknowledges would survive a power cut.\n")
def per_request_ms(t):  # Little's law: connections / throughput
    r = data.get((t, "unique"))
    return float(conns) / float(r[2]) * 1000 if r and float(r[2]) > 0 else None
px, disk, shm = (per_request_ms(t) for t in ("nginx-proxy", "idem-lmdb", "idem-lmdb-tmpfs"))
def commits(t):  # (ops per commit, ms per commit) over the unique-key run
    r = data.get((t, "unique"))
    if not r or len(r) < 14 or r[11] in ("-", "0"):
        return None
    n, ops, secs = float(r[11]), float(r[12]), float(r[13])
    return ops / n, secs * 1000 / n
if px and disk:
    L.append("## What the disk costs (unique keys)\n")
    L.append("With %s connections each waiting for its answer, the mean time per request is "
             "connections / throughput: nginx-proxy %.2f ms, idem-lmdb %.2f ms%s. "
             "A unique key needs two durable writes in series (the claim before the request goes "
             "upstream, the answer before it goes back); through the LMDB store's log each is one "
             "device flush shared by its batch (a 4 KiB write + fdatasync on this disk takes %s ms). "
             "%s"
             "0.75x nginx-proxy would need %.2f ms per request.\n" %
             (conns, px, disk,
              (", idem-lmdb-tmpfs %.2f ms (the difference, %.2f ms, is time spent waiting on the disk)" %
               (shm, disk - shm)) if shm else "",
              fsync_ms,
              ("During the run idem-lmdb's log batches held %.1f operations each and took %.2f ms "
               "to write and flush (idem_lmdb_* counters). " % commits("idem-lmdb"))
              if commits("idem-lmdb") else "",
              px / 0.75))
sweep = [l.split() for l in open(sweep_res) if l.strip()]
if sweep:
    L.append("## Unique keys at more connections\n")
    L.append("nginx-proxy, idem-lmdb and idem-memory alternating, %s per run; the ratio is taken "
             "within each round (the runs back to back), and the table gives medians.\n" % sweep_dur)
    L.append("| connections | nginx-proxy req/s | idem-lmdb req/s | p50 ms, nginx-proxy / idem-lmdb | p99 ms, nginx-proxy / idem-lmdb | CPU µs per request, nginx-proxy / idem-lmdb (writer) | machine idle, nginx-proxy / idem-lmdb | idem-lmdb / nginx-proxy (per round) | idem-memory / nginx-proxy (per round) |")
    L.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for c in sorted({int(r[0]) for r in sweep}):
        rows = [r for r in sweep if int(r[0]) == c]
        px_r = {r[1]: float(r[3]) for r in rows if r[2] == "nginx-proxy"}
        lm = {r[1]: r for r in rows if r[2] == "idem-lmdb"}
        ratios = [float(lm[k][3]) / px_r[k] for k in px_r if k in lm and px_r[k] > 0]
        mm = {r[1]: r for r in rows if r[2] == "idem-memory"}
        mratios = [float(mm[k][3]) / px_r[k] for k in px_r if k in mm and px_r[k] > 0]
        med = lambda xs: statistics.median(xs) if xs else 0
        pxrows = [r for r in rows if r[2] == "nginx-proxy"]
        col = lambda rs, i: med([float(r[i]) for r in rs if len(r) > i])
        L.append("| %d | %.0f | %.0f | %.2f / %.2f | %.2f / %.2f | %.1f / %.1f (%.1f) | %.0f%% / %.0f%% | **%.2fx** (%s) | %.2fx (%s) |" % (
            c, med(list(px_r.values())), med([float(r[3]) for r in lm.values()]),
            col(pxrows, 4), col(lm.values(), 4), col(pxrows, 5), col(lm.values(), 5),
            col(pxrows, 9), col(lm.values(), 9), col(lm.values(), 10),
            col(pxrows, 11), col(lm.values(), 11),
            med(ratios), ", ".join("%.2f" % x for x in ratios),
            med(mratios), ", ".join("%.2f" % x for x in mratios)))
    L.append("")
    top = max(int(r[0]) for r in sweep)
    rows = [r for r in sweep if int(r[0]) == top and len(r) > 11]
    lm = [r for r in rows if r[2] == "idem-lmdb"]
    pxr = [r for r in rows if r[2] == "nginx-proxy"]
    mem = data.get(("idem-memory", "unique"))
    if lm and pxr and mem and len(mem) > 16:
        med = statistics.median
        L.append("Where the CPU goes: at %d connections the machine was %.0f%% idle during idem-lmdb's "
                 "runs (%.0f%% during nginx-proxy's), so throughput there depends mostly on the CPU every "
                 "request costs on the two shared CPUs (wrk, the upstream and the proxy). idem-lmdb "
                 "spent %.1f µs per request, %.1f of them in its LMDB writer thread (applying batches, writing "
                 "and flushing the log; the checkpointer's B-tree work counts in the process total); "
                 "nginx-proxy spent %.1f µs, and idem-memory %s µs in the 64-connection run above.\n" % (
                     top, med(float(r[11]) for r in lm), med(float(r[11]) for r in pxr),
                     med(float(r[9]) for r in lm), med(float(r[10]) for r in lm),
                     med(float(r[9]) for r in pxr), mem[14]))
rp = [l.split() for l in open(replay_res) if l.strip()]
if rp:
    pxr = {r[1]: float(r[3]) for r in rp if r[2] == "nginx-proxy"}
    lmr = {r[1]: float(r[3]) for r in rp if r[2] == "idem-lmdb"}
    rr = [lmr[k] / pxr[k] for k in pxr if k in lmr and pxr[k] > 0]
    L.append("## Replays, paired\n")
    L.append("nginx-proxy and idem-lmdb alternating at %s connections, %s per run: idem-lmdb "
             "replays at **%.2fx** nginx-proxy's req/s (median of the ratios within each round: %s).\n" % (
                 conns, sweep_dur, statistics.median(rr) if rr else 0,
                 ", ".join("%.2f" % x for x in rr)))
L.append("All servers and wrk share the same %d CPUs; on a shared machine the figures move "
         "with the neighbours' load, so compare rows of one run, not runs.\n" % os.cpu_count())
open(out, "w").write("\n".join(L))
print("wrote", out)
EOF

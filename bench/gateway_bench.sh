#!/usr/bin/env bash
# gateway_bench.sh - idem serve side by side with nginx, in one run.
#
# Targets, all on 127.0.0.1 free ports, all in front of one upstream (nginx
# answering a fixed 200 body to any method, keep-alive):
#   upstream       the upstream directly
#   nginx-proxy    nginx as a plain reverse proxy (proxy_pass, upstream keepalive)
#   idem-memory    idem serve --store memory:bench
#   idem-lmdb      idem serve --store lmdb:DIR
# Workloads (wrk, POST with a small JSON body):
#   unique         a new Idempotency-Key on every request (claim + complete)
#   replay         keys from a fixed set completed beforehand (replays)
# Reports req/s, p50, p99 and the ratio to nginx-proxy for the same workload.
#
# usage: bench/gateway_bench.sh [--idem PATH] [--duration 10s] [--threads 2]
#                               [--connections 64] [--out bench/results/gateway.md]
# Needs nginx, wrk, python3. Everything it starts is stopped by PID on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
IDEM=${IDEM_BIN:-}
DURATION=10s
THREADS=2
CONNS=64
OUT=$HERE/results/gateway.md
REPLAY_KEYS=1000
CMDLINE="bench/gateway_bench.sh $*"

while [ $# -gt 0 ]; do
  case $1 in
    --idem) IDEM=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
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
NGINX=$(command -v nginx)

TMP=$(mktemp -d /tmp/idem-gwbench.XXXXXX)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_port PORT PID NAME: poll until PORT accepts, fail if PID died (20s deadline)
wait_port() {
  python3 - "$1" "$2" "$3" <<'EOF'
import os, socket, sys, time
port, pid, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("%s (pid %d) exited before listening" % (name, pid))
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit("%s not listening on %d after 20s" % (name, port))
EOF
}

nginx_conf() { # nginx_conf NAME BODY-OF-HTTP-SERVER-BLOCKS
  mkdir -p "$TMP/$1"
  cat >"$TMP/$1/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $TMP/$1/nginx.pid;
error_log $TMP/$1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/$1/body;
  proxy_temp_path $TMP/$1/proxy;
  fastcgi_temp_path $TMP/$1/fastcgi;
  uwsgi_temp_path $TMP/$1/uwsgi;
  scgi_temp_path $TMP/$1/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  $2
}
EOF
}

UP_PORT=$(free_port)
nginx_conf upstream "
  server {
    listen 127.0.0.1:$UP_PORT;
    location / {
      default_type application/json;
      return 200 '{\"ok\":true,\"id\":\"bench\"}\n';
    }
  }"
"$NGINX" -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" 2>"$TMP/upstream/stderr" &
PIDS+=($!)
wait_port "$UP_PORT" "${PIDS[-1]}" upstream

PX_PORT=$(free_port)
nginx_conf proxy "
  upstream app { server 127.0.0.1:$UP_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$PX_PORT;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }
  }"
"$NGINX" -p "$TMP/proxy" -c "$TMP/proxy/nginx.conf" 2>"$TMP/proxy/stderr" &
PIDS+=($!)
wait_port "$PX_PORT" "${PIDS[-1]}" nginx-proxy

start_idem() { # start_idem NAME STORE -> sets PORT, ADMIN
  local name=$1 store=$2
  PORT=$(free_port)
  ADMIN=$(free_port)
  "$IDEM" serve --listen "127.0.0.1:$PORT" --upstream "http://127.0.0.1:$UP_PORT" \
    --store "$store" --admin-listen "127.0.0.1:$ADMIN" 2>"$TMP/$name.stderr" &
  PIDS+=($!)
  wait_port "$PORT" "${PIDS[-1]}" "$name" || { cat "$TMP/$name.stderr" >&2; exit 1; }
  wait_port "$ADMIN" "${PIDS[-1]}" "$name-admin" || { cat "$TMP/$name.stderr" >&2; exit 1; }
}
start_idem idem-memory memory:bench
MEM_PORT=$PORT MEM_ADMIN=$ADMIN
mkdir -p "$TMP/lmdb"
start_idem idem-lmdb "lmdb:$TMP/lmdb/store"
LMDB_PORT=$PORT LMDB_ADMIN=$ADMIN

# outcomes ADMIN-PORT: "executed replayed other" from idem_requests_total
outcomes() {
  python3 - "$1" <<'EOF'
import re, sys, urllib.request
t = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode()
c = {m.group(1): float(m.group(2)) for m in
     re.finditer(r'^idem_requests_total\{outcome="([a-z_]+)"\} (\S+)$', t, re.M)}
ex, rp = c.get("executed", 0), c.get("replayed", 0)
print("%d %d %d" % (ex, rp, sum(c.values()) - ex - rp))
EOF
}

BODY='{"amount":100,"currency":"EUR"}'
cat >"$TMP/bench.lua" <<EOF
-- mode "unique": a fresh key per request; mode "replay": keys 0..N-1 (completed)
local mode, prefix, nkeys = "unique", "u", $REPLAY_KEYS
local counter, nthreads = 0, 0
local threads = {}
function setup(thread)
  nthreads = nthreads + 1
  thread:set("tid", nthreads)
  table.insert(threads, thread)
end
function init(args)
  mode = args[1] or mode
  prefix = args[2] or prefix
  wrk.method = "POST"
  wrk.body = '$BODY'
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  counter = counter + 1
  local key
  if mode == "replay" then
    key = "replay-" .. ((counter * 7 + tid) % nkeys)
  else
    key = prefix .. "-" .. tid .. "-" .. counter
  end
  wrk.headers["Idempotency-Key"] = key
  return wrk.format(nil, "/bench")
end
function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format("RESULT %.1f %.3f %.3f %d %d %d\n",
    summary.requests / secs, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.status, e.connect + e.read + e.write + e.timeout, summary.requests))
end
EOF

# complete the replay key set on every target (the same body and target)
populate() {
  python3 - "$1" "$REPLAY_KEYS" "$BODY" <<'EOF'
import http.client, sys
port, n, body = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
bad = 0
for i in range(n):
    c.request("POST", "/bench", body=body, headers={"Idempotency-Key": "replay-%d" % i,
                                                   "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    bad += r.status != 200
if bad:
    sys.exit("populate: %d non-200 answers on port %d" % (bad, port))
EOF
}
populate "$MEM_PORT"
populate "$LMDB_PORT"

RESULTS=$TMP/results.txt
: >"$RESULTS"
run() { # run TARGET PORT MODE [ADMIN-PORT]
  local out before="0 0 0" after="0 0 0"
  [ -n "${4:-}" ] && before=$(outcomes "$4")
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --timeout 10s -s "$TMP/bench.lua" \
        "http://127.0.0.1:$2/bench" -- "$3" "$1-$RANDOM" 2>&1) || {
    echo "wrk failed for $1 $3: $out" >&2; exit 1; }
  local line
  line=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -1)
  local delta="- - -"
  if [ -n "${4:-}" ]; then
    after=$(outcomes "$4")
    delta=$(python3 -c 'import sys; a=sys.argv[1].split(); b=sys.argv[2].split(); print(" ".join(str(int(y)-int(x)) for x,y in zip(a,b)))' "$before" "$after")
  fi
  echo "$1 $3 ${line#RESULT } $delta" | tee -a "$RESULTS"
}
echo "target mode req/s p50_ms p99_ms non2xx sockerr requests executed replayed other"
for mode in unique replay; do
  run upstream "$UP_PORT" "$mode"
  run nginx-proxy "$PX_PORT" "$mode"
  run idem-memory "$MEM_PORT" "$mode" "$MEM_ADMIN"
  run idem-lmdb "$LMDB_PORT" "$mode" "$LMDB_ADMIN"
done

# every gateway must still be alive after the runs
for p in "${PIDS[@]}"; do
  kill -0 "$p" 2>/dev/null || { echo "process $p died during the bench" >&2; exit 1; }
done

mkdir -p "$(dirname "$OUT")"
python3 - "$RESULTS" "$OUT" "$CMDLINE" "$DURATION" "$THREADS" "$CONNS" "$IDEM" "$LOAD_START" <<'EOF'
import datetime, os, platform, subprocess, sys
res, out, cmd, dur, thr, conns, idem, load0 = sys.argv[1:9]
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
         "nginx-proxy: nginx (`worker_processes auto`), `proxy_pass` with `keepalive 64`. "
         "idem: `idem serve --store memory:bench` and `--store lmdb:DIR`, default flags "
         "(`--workers` defaults to one event loop per core, like nginx's `auto`). "
         "unique: a fresh `Idempotency-Key` per request (claim, forward, store). "
         "replay: keys from a set of 1000 completed before the run (answered from the store). "
         "The upstream and nginx-proxy ignore the key, so their two rows measure the same work. "
         "The last column is the change of idem's `idem_requests_total` by outcome over the run, "
         "read from its admin listener (it also counts requests wrk cut off at the end).\n")
for mode in ("unique", "replay"):
    L.append("## %s keys\n" % mode)
    L.append("| target | req/s | p50 ms | p99 ms | non-2xx | socket errors | vs nginx-proxy req/s | idem executed / replayed / other |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = float(data[("nginx-proxy", mode)][2]) if ("nginx-proxy", mode) in data else None
    for t in ("upstream", "nginx-proxy", "idem-memory", "idem-lmdb"):
        r = data.get((t, mode))
        if not r:
            continue
        rps = float(r[2])
        ratio = "%.2fx" % (rps / base) if base else "-"
        outc = " / ".join(r[8:11]) if len(r) > 10 and r[8] != "-" else "-"
        L.append("| %s | %.0f | %.2f | %.2f | %s | %s | %s | %s |" % (t, rps, float(r[3]), float(r[4]), r[5], r[6], ratio, outc))
    L.append("")
L.append("All servers and wrk share the same %d CPUs; on a shared machine the figures move "
         "with the neighbours' load, so compare rows of one run, not runs.\n" % os.cpu_count())
open(out, "w").write("\n".join(L))
print("wrote", out)
EOF

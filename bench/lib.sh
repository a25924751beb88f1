# lib.sh - what the bench/*.sh scripts share. Sourced by bash, not run.
#
# Processes and ports (gateway_bench.sh, redis_bench.sh):
#   bench_tmp PREFIX            set TMP to a new /tmp/PREFIX.XXXXXX and PIDS=();
#                               on exit every PID in PIDS is stopped and TMP removed
#   free_port                   print a port free a moment ago on 127.0.0.1
#   wait_port PORT PID NAME     poll until PORT accepts, fail if PID died (20s deadline)
#   nginx_conf NAME BLOCKS      write $TMP/NAME/nginx.conf around server blocks
#   start_nginx_pair            nginx upstream (fixed 200 JSON) on UP_PORT and nginx
#                               as a plain reverse proxy to it on PX_PORT
#   start_idem NAME STORE [--admin]
#                               idem serve ($IDEM, with the flags in $IDEM_EXTRA)
#                               in front of UP_PORT; sets PORT
#                               (and ADMIN, the admin listener, with --admin)
#   write_bench_lua             $TMP/bench.lua, the wrk script: unique or replay keys
#                               ($REPLAY_KEYS of them), POST $BODY, one RESULT line
#   populate PORT               complete the replay key set through a gateway
#   wrk_run TARGET PORT MODE    one wrk run ($THREADS, $CONNS, $DURATION); sets
#                               WRK_RESULT to the RESULT fields
#   check_alive                 fail if any process in PIDS died
# Options (every script):
#   bench_options LINES SPEC ARGS...
#                               SPEC is "--flag=VAR ...": each "--flag VALUE" in ARGS sets
#                               VAR; --help prints lines LINES of $0; anything else exits 2
#   need_binary PATH [HINT]     exit 2 naming PATH unless it is executable (HINT: how to
#                               get it, default "build first")
# Servers (pg_bench.sh, pg_replay_bench.sh):
#   with_postgres "$0" "$@"     unless IDEM_TEST_PG_URI names a server, run the
#                               script again under tests/support/with-postgres.sh
# Runs as key=value lines (pg_replay_bench.sh, redis_wait_bench.sh):
#   kv_median FILE FIELD FILTER the median of FIELD over the lines of FILE that
#                               hold every k=v of FILTER ("k=v,k=v")
#   kv_ratio_median FILE FIELD FILTER BY NUM DEN
#                               among those lines, the i-th with BY=NUM over the
#                               i-th with BY=DEN (one per round): their median
# Reports (lmdb_bench.sh, pg_bench.sh):
#   machine_lines               "## Machine", CPU (with the load) and memory lines
#   raw_runs FILE               "## Raw runs" and FILE in a code block
#   report_end FILE             a blank line, machine_lines, a blank line, raw_runs FILE

bench_options() {
  local lines=$1 spec=$2 pair var
  shift 2
  while [ $# -gt 0 ]; do
    case $1 in -h|--help) sed -n "${lines}p" "$0"; exit 0 ;; esac
    var=""
    for pair in $spec; do [ "${pair%%=*}" = "$1" ] && var=${pair#*=}; done
    if [ -z "$var" ] || [ $# -lt 2 ]; then
      echo "$(basename "$0"): unknown option or missing value: $1" >&2
      exit 2
    fi
    printf -v "$var" '%s' "$2"
    shift 2
  done
}

need_binary() {
  [ -x "$1" ] || { echo "$(basename "$0"): no $1 (${2:-build first})" >&2; exit 2; }
}

with_postgres() {
  [ -n "${IDEM_TEST_PG_URI:-}" ] ||
    exec "$(dirname "${BASH_SOURCE[0]}")/../tests/support/with-postgres.sh" "$@"
}

bench_tmp() {
  TMP=$(mktemp -d "/tmp/$1.XXXXXX")
  PIDS=()
  trap bench_cleanup EXIT INT TERM
}

bench_cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
  if [ -n "${EXTRA_TMP:-}" ]; then rm -rf "$EXTRA_TMP"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

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

nginx_conf() {
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

start_nginx_pair() {
  UP_PORT=$(free_port)
  nginx_conf upstream "
  server {
    listen 127.0.0.1:$UP_PORT;
    location / {
      default_type application/json;
      return 200 '{\"ok\":true,\"id\":\"bench\"}\n';
    }
  }"
  nginx -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" 2>"$TMP/upstream/stderr" &
  PIDS+=($!)
  wait_port "$UP_PORT" "${PIDS[-1]}" upstream

  PX_PORT=$(free_port)
  nginx_conf proxy "
  upstream app { server 127.0.0.1:$UP_PORT; keepalive 512; }
  server {
    listen 127.0.0.1:$PX_PORT;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }
  }"
  nginx -p "$TMP/proxy" -c "$TMP/proxy/nginx.conf" 2>"$TMP/proxy/stderr" &
  PIDS+=($!)
  wait_port "$PX_PORT" "${PIDS[-1]}" nginx-proxy
}

start_idem() {
  local name=$1 store=$2 admin=() extra=()
  # IDEM_EXTRA: more flags, split on blanks and never globbed
  [ -z "${IDEM_EXTRA:-}" ] || read -ra extra <<<"$IDEM_EXTRA"
  PORT=$(free_port)
  if [ "${3:-}" = --admin ]; then
    ADMIN=$(free_port)
    admin=(--admin-listen "127.0.0.1:$ADMIN")
  fi
  "$IDEM" serve --listen "127.0.0.1:$PORT" --upstream "http://127.0.0.1:$UP_PORT" \
    --store "$store" "${admin[@]}" "${extra[@]}" 2>"$TMP/$name.stderr" &
  PIDS+=($!)
  wait_port "$PORT" "${PIDS[-1]}" "$name" || { cat "$TMP/$name.stderr" >&2; exit 1; }
  if [ ${#admin[@]} -gt 0 ]; then
    wait_port "$ADMIN" "${PIDS[-1]}" "$name-admin" || { cat "$TMP/$name.stderr" >&2; exit 1; }
  fi
}

write_bench_lua() {
  cat >"$TMP/bench.lua" <<EOF
-- mode "unique": a fresh key per request; mode "replay": keys 0..N-1 (completed)
local mode, prefix, nkeys = "unique", "u", $REPLAY_KEYS
local counter, nthreads = 0, 0
function setup(thread)
  nthreads = nthreads + 1
  thread:set("tid", nthreads)
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
}

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

wrk_run() {
  local out line
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --timeout 10s -s "$TMP/bench.lua" \
        "http://127.0.0.1:$2/bench" -- "$3" "$1-$RANDOM" 2>&1) || {
    echo "wrk failed for $1 $3: $out" >&2; exit 1; }
  line=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -1)
  WRK_RESULT=${line#RESULT }
}

check_alive() {
  for p in "${PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "process $p died during the bench" >&2; exit 1; }
  done
}

# the lines of $1 holding every k=v of the filter $2, as awk sees them
kv_select() {
  awk -v filter="$2" '
    BEGIN { n = split(filter, conds, ",") }
    { delete kv; for (i = 1; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
      for (j = 1; j <= n; j++) { split(conds[j], c, "="); if (kv[c[1]] != c[2]) next }
      print }' "$1"
}

# the median of the numbers on stdin, with printf format $1
median_of() {
  sort -g | awk -v fmt="$1" '{ a[NR] = $1 } END { printf fmt "\n", NR ? a[int((NR + 1) / 2)] : 0 }'
}

kv_median() {
  kv_select "$1" "$3" | awk -v f="$2" '{ for (i = 1; i <= NF; i++) { split($i, p, "="); if (p[1] == f) print p[2] } }' |
    median_of "%s"
}

kv_ratio_median() {
  kv_select "$1" "$3" | awk -v f="$2" -v by="$4" -v num="$5" -v den="$6" '
    { delete kv; for (i = 1; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
      c[kv[by]]++; v[kv[by], c[kv[by]]] = kv[f] }
    END { for (i = 1; i <= c[num] && i <= c[den]; i++) if (v[den, i] > 0) print v[num, i] / v[den, i] }' |
    median_of "%.2f"
}

machine_lines() {
  local cpu
  cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
  echo "## Machine"
  echo
  echo "- CPU: $cpu, $(nproc) cores (shared with other jobs while this ran: load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "- Memory: $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
}

raw_runs() {
  echo "## Raw runs"
  echo
  echo '```'
  cat "$1"
  echo '```'
}

report_end() {
  echo
  machine_lines
  echo
  raw_runs "$1"
}

#!/bin/sh
# with-redis.sh CMD [ARG...] - run CMD against a throwaway redis-server.
#
# Starts redis-server in a temp dir on a free 127.0.0.1 port (no persistence:
# --save "" --appendonly no), waits until it answers PING, replaces
# {REDIS_URI} in the arguments with redis://127.0.0.1:PORT, runs CMD, stops
# the server by PID and exits with CMD's status.
#
# CMD also gets in its environment:
#   IDEM_TEST_REDIS_URI   redis://127.0.0.1:PORT
#   IDEM_TEST_REDIS_PORT  PORT
#   IDEM_TEST_REDIS_PID   the server's PID
#
# redis-server is found on PATH, then in /usr/bin and /usr/sbin; set
# REDIS_SERVER to use another one. REDIS_ARGS adds server options
# (e.g. "--requirepass secret").
set -eu
. "$(dirname "$0")/lib.sh"

need_command with-redis.sh "{REDIS_URI}" $#

server=${REDIS_SERVER:-}
if [ -z "$server" ]; then
  server=$(command -v redis-server 2>/dev/null || true)
  for c in /usr/bin/redis-server /usr/sbin/redis-server /usr/local/bin/redis-server; do
    [ -n "$server" ] && break
    [ -x "$c" ] && server=$c
  done
fi
if [ -z "$server" ] || [ ! -x "$server" ]; then
  echo "with-redis.sh: redis-server not found (apt-get install redis-server, or set REDIS_SERVER)" >&2
  exit 2
fi

make_tmp idem-redis
pid=""

stop_server() {
  [ -n "$pid" ] || return 0
  stop_pid "$pid" TERM 100 # 10 s, then SIGKILL
  wait "$pid" 2>/dev/null || true
  pid=""
}

trap_cleanup

# PING over a plain socket, so that redis-cli is not needed either.
ping() {
  python3 - "$1" <<'EOF'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5)
    s.sendall(b"PING\r\n")
    ok = s.recv(64).startswith(b"+PONG")
except OSError:
    ok = False
sys.exit(0 if ok else 1)
EOF
}

# A free port can be taken between the probe and the bind: try a few.
port=""
for attempt in 1 2 3 4 5; do
  p=$(free_port)
  # shellcheck disable=SC2086
  "$server" --bind 127.0.0.1 --port "$p" --dir "$tmp" --save "" --appendonly no \
    --daemonize no --logfile "$tmp/redis.log" --protected-mode yes ${REDIS_ARGS:-} &
  pid=$!
  deadline=$(($(date +%s) + 10))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    if ping "$p"; then port=$p; break; fi
    sleep 0.05 # poll interval while waiting for the server
  done
  [ -n "$port" ] && break
  echo "with-redis.sh: redis-server did not come up on port $p (attempt $attempt):" >&2
  tail -n 5 "$tmp/redis.log" >&2 2>/dev/null || true
  stop_server
done
if [ -z "$port" ]; then
  echo "with-redis.sh: giving up starting redis-server" >&2
  exit 1
fi

uri="redis://127.0.0.1:$port"
IDEM_TEST_REDIS_URI=$uri
IDEM_TEST_REDIS_PORT=$port
IDEM_TEST_REDIS_PID=$pid
export IDEM_TEST_REDIS_URI IDEM_TEST_REDIS_PORT IDEM_TEST_REDIS_PID

# Replace {REDIS_URI} in every argument.
status=0
run_substituted "{REDIS_URI}" "$uri" "$@" || status=$?
exit $status

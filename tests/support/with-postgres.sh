#!/bin/sh
# with-postgres.sh CMD [ARG...] - run CMD against a throwaway PostgreSQL.
#
# Creates a cluster with initdb in a temp dir, starts it on a free 127.0.0.1
# port (fsync on, unix socket only in the temp dir), waits until pg_isready
# says yes, creates the database idem_test, replaces {PG_URI} in the
# arguments with its URI, runs CMD, stops the server by PID and exits with
# CMD's status.
#
# CMD also gets in its environment:
#   IDEM_TEST_PG_URI    postgresql://postgres@127.0.0.1:PORT/idem_test
#   IDEM_TEST_PG_START  a script that starts the server again (after a stop)
#   IDEM_TEST_PG_STOP   a script that stops it (fast shutdown) and waits
#   IDEM_TEST_PG_BIN    the PostgreSQL bin dir (psql, pgbench, ...)
#
# With IDEM_TEST_PG_PARAMS set (e.g. migrate=1), {PG_URI} gets it as its
# query string; IDEM_TEST_PG_URI stays without it.
#
# initdb refuses to run as root: as root the server runs as the 'postgres'
# user (override with IDEM_TEST_PG_USER); otherwise as the current user.
# The bin dir is found with pg_config, or set PG_BINDIR.
set -eu
. "$(dirname "$0")/lib.sh"

need_command with-postgres.sh "{PG_URI}" $#

bindir=${PG_BINDIR:-}
if [ -z "$bindir" ]; then
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n -r); do
    if [ -x "$d/initdb" ]; then bindir=$d; break; fi
  done
fi
if [ -z "$bindir" ] && command -v pg_config >/dev/null 2>&1; then
  bindir=$(pg_config --bindir)
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  echo "with-postgres.sh: initdb not found (install postgresql or set PG_BINDIR)" >&2
  exit 2
fi

make_tmp idem-pg
data=$tmp/data
runas=""
if [ "$(id -u)" = 0 ]; then
  user=${IDEM_TEST_PG_USER:-postgres}
  chown "$user" "$tmp"
  runas="runuser -u $user --"
fi

postmaster_pid() {
  [ -f "$data/postmaster.pid" ] && head -n 1 "$data/postmaster.pid" 2>/dev/null || true
}

stop_server() {
  pid=$(postmaster_pid)
  [ -n "$pid" ] || return 0
  stop_pid "$pid" INT 300 # a fast shutdown; 30 s, then SIGKILL
}

trap_cleanup

$runas "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 \
  --no-locale --no-sync >"$tmp/initdb.log" 2>&1 || {
  cat "$tmp/initdb.log" >&2
  echo "with-postgres.sh: initdb failed" >&2
  exit 2
}

# The start and stop scripts, also handed to the command (outage tests).
write_scripts() {
  cat >"$tmp/start.sh" <<EOF
#!/bin/sh
# start the test server in the background and wait until it accepts connections
set -eu
$runas "$bindir/postgres" -D "$data" -c listen_addresses=127.0.0.1 -p $1 \\
  -c unix_socket_directories="$tmp" -c fsync=on -c max_connections=200 \\
  -c shared_buffers=32MB -c log_min_messages=fatal >>"$tmp/server.log" 2>&1 &
i=0
until "$bindir/pg_isready" -q -h 127.0.0.1 -p $1 -t 1; do
  i=\$((i + 1))
  if ! kill -0 \$! 2>/dev/null || [ \$i -gt 300 ]; then
    echo "with-postgres.sh: server did not start; log:" >&2
    tail -n 20 "$tmp/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
EOF
  cat >"$tmp/stop.sh" <<EOF
#!/bin/sh
# fast shutdown of the test server, by PID; returns when it is gone
pid=\$(head -n 1 "$data/postmaster.pid" 2>/dev/null) || exit 0
[ -n "\$pid" ] || exit 0
kill -INT "\$pid" 2>/dev/null || exit 0
i=0
while kill -0 "\$pid" 2>/dev/null; do
  i=\$((i + 1))
  [ \$i -gt 300 ] && { kill -KILL "\$pid" 2>/dev/null; break; }
  sleep 0.1
done
EOF
  chmod +x "$tmp/start.sh" "$tmp/stop.sh"
}

# A free port can be taken between the probe and the bind: try a few.
started=0
for attempt in 1 2 3 4 5; do
  port=$(free_port)
  write_scripts "$port"
  if "$tmp/start.sh" 2>"$tmp/start.err"; then started=1; break; fi
  stop_server
done
if [ $started = 0 ]; then
  cat "$tmp/start.err" >&2
  echo "with-postgres.sh: could not start postgres" >&2
  exit 2
fi

"$bindir/psql" -q -X -h 127.0.0.1 -p "$port" -U postgres -d postgres \
  -c "CREATE DATABASE idem_test" >/dev/null

uri="postgresql://postgres@127.0.0.1:$port/idem_test"
export IDEM_TEST_PG_URI="$uri"
export IDEM_TEST_PG_START="$tmp/start.sh"
export IDEM_TEST_PG_STOP="$tmp/stop.sh"
export IDEM_TEST_PG_BIN="$bindir"

# Replace {PG_URI} in every argument, keeping the arguments apart.
arg_uri=$uri
if [ -n "${IDEM_TEST_PG_PARAMS:-}" ]; then arg_uri="$uri?$IDEM_TEST_PG_PARAMS"; fi
status=0
run_substituted "{PG_URI}" "$arg_uri" "$@" || status=$?
exit $status

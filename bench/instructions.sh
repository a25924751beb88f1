#!/usr/bin/env bash
# instructions.sh - the CPU instructions idem serve spends per request, counted
# by valgrind's callgrind, for two builds side by side (or one).
#
# A count of instructions does not move with the machine's load, so it shows
# a change to the request path's own work where a timed bench on a shared
# 2-core host cannot (bench/ab_bench.sh's rounds there spread by +-20%). It
# does not show what the kernel, the disk or waiting costs: the timed benches
# (gateway_bench.sh, ab_bench.sh) remain the measure of speed.
#
# usage: bench/instructions.sh --a IDEM [--b IDEM] [--requests 2000] [--out FILE]
#
# Per build and workload (unique or replay keys, on memory: and on lmdb:), one
# idem serve (--workers 1) runs under callgrind behind nginx's fixed 200 while
# a Python client sends requests one at a time on one keep-alive connection:
# once BASE (200) requests, once BASE + --requests. The difference of the two
# totals over --requests is the cost of one request (the whole process, all
# threads: the LMDB writer and checkpointer included), without start-up.
# With redis-server installed, the same for `idem consume --store memory:`
# draining a Redis stream into nginx: instructions per message.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
A="" B="" REQUESTS=2000 OUT=""
BASE=200 REPLAY_KEYS=200
BODY='{"amount":1000,"currency":"eur"}'
CMDLINE="bench/instructions.sh $*"
bench_options 2,12 "--a=A --b=B --requests=REQUESTS --out=OUT" "$@"
need_binary "$A"
[ -z "$B" ] || need_binary "$B"
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind" >&2; exit 2; }

bench_tmp idem-instr
start_nginx_pair

# total IDEM STORE MODE N: callgrind's total for N requests
total() {
  local bin=$1 store=$2 mode=$3 n=$4 port vpid st
  st=memory:instr
  [ "$store" = lmdb ] && { rm -rf "$TMP/store"; st=lmdb:$TMP/store; }
  port=$(free_port)
  valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" "$bin" serve --workers 1 \
    --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$UP_PORT" --store "$st" \
    2>"$TMP/vg.err" &
  vpid=$!
  wait_port "$port" "$vpid" idem-callgrind || { cat "$TMP/vg.err" >&2; exit 1; }
  [ "$mode" = replay ] && populate "$port"
  python3 - "$port" "$n" "$mode" "$BODY" "$REPLAY_KEYS" <<'EOF'
import http.client, sys
port, n, mode, body, nkeys = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4].encode(), int(sys.argv[5])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for i in range(n):
    key = "replay-%d" % (i % nkeys) if mode == "replay" else "u-%d" % i
    c.request("POST", "/bench", body=body, headers={"Idempotency-Key": key,
                                                   "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    if r.status != 200:
        sys.exit("instructions.sh: answer %d for key %s" % (r.status, key))
EOF
  kill -TERM "$vpid"
  wait "$vpid" || true
  awk '/^totals:/ { print $2 }' "$TMP/cg.out"
}

per_request() {
  local low high
  low=$(total "$1" "$2" "$3" "$BASE")
  high=$(total "$1" "$2" "$3" $((BASE + REQUESTS)))
  echo $(((high - low) / REQUESTS))
}

# consume_total IDEM N: callgrind's total for `idem consume` (memory:) draining
# N entries of a Redis stream into nginx's fixed 200
consume_total() {
  local bin=$1 n=$2 rport vpid
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" \
    >"$TMP/redis.log" 2>&1 &
  local rpid=$!
  wait_port "$rport" "$rpid" redis-server
  python3 - "$rport" "$n" "$BODY" <<'EOF2'
import socket, sys
port, n, body = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
s = socket.create_connection(("127.0.0.1", port))
out = b""
for i in range(n):
    args = [b"XADD", b"s", b"*", b"message_id", b"m-%d" % i, b"body", body]
    out += b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
s.sendall(out)
data = b""
while data.count(b"\r\n") < n:
    data += s.recv(65536)
EOF2
  valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" "$bin" consume \
    --from "redis://127.0.0.1:$rport?stream=s&group=g" --to "http://127.0.0.1:$UP_PORT/h" \
    --store memory:instr 2>"$TMP/vg.err" &
  vpid=$!
  python3 - "$rport" "$n" <<'EOF2'
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
def groups():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"*3\r\n$5\r\nXINFO\r\n$6\r\nGROUPS\r\n$1\r\ns\r\n")
    d = s.recv(65536)
    s.close()
    return d
deadline = time.time() + 600
while b"pending\r\n:0\r\n" not in (d := groups()) or b"entries-read\r\n:%d\r\n" % n not in d:
    if time.time() > deadline:
        sys.exit("instructions.sh: the consumer did not drain the stream: %r" % d)
    time.sleep(0.2)
EOF2
  kill -TERM "$vpid"
  wait "$vpid" || true
  kill -TERM "$rpid"
  wait "$rpid" || true
  awk '/^totals:/ { print $2 }' "$TMP/cg.out"
}

per_message() {
  local low high
  low=$(consume_total "$1" "$BASE")
  high=$(consume_total "$1" $((BASE + REQUESTS)))
  echo $(((high - low) / REQUESTS))
}

rows=()
if command -v redis-server >/dev/null; then
  a=$(per_message "$A")
  if [ -n "$B" ]; then
    b=$(per_message "$B")
    rows+=("| consume, Redis stream | memory | $a | $b | $(python3 -c "print('%.3f' % ($b / $a))") |")
  else
    rows+=("| consume, Redis stream | memory | $a |")
  fi
  echo "${rows[-1]}" >&2
fi
for store in memory lmdb; do
  for mode in unique replay; do
    a=$(per_request "$A" "$store" "$mode")
    if [ -n "$B" ]; then
      b=$(per_request "$B" "$store" "$mode")
      rows+=("| serve | $store, $mode keys | $a | $b | $(python3 -c "print('%.3f' % ($b / $a))") |")
    else
      rows+=("| serve | $store, $mode keys | $a |")
    fi
    echo "${rows[-1]}" >&2
  done
done

report() {
  echo "# Instructions per request (callgrind)"
  echo
  echo "Generated by \`$CMDLINE\` on $(date -u '+%Y-%m-%d %H:%M UTC')."
  echo
  echo "Each figure: callgrind's instruction total for $((BASE + REQUESTS)) requests minus the"
  echo "total for $BASE, over $REQUESTS; one \`idem serve --workers 1\`, the whole process"
  echo "(loop, LMDB writer and checkpointer), one client, one request at a time. For consume:"
  echo "\`idem consume --store memory:\` draining as many entries of a Redis stream (a message"
  echo "counts as a request). User-space instructions only: not the kernel's socket and disk"
  echo "work, not waiting."
  echo
  if [ -n "$B" ]; then
    echo "A: \`$A\`; B: \`$B\`."
    echo
    echo "| front door | store, workload | A instructions/request | B instructions/request | B / A |"
    echo "| --- | --- | ---: | ---: | ---: |"
  else
    echo "Build: \`$A\`."
    echo
    echo "| front door | store, workload | instructions/request |"
    echo "| --- | --- | ---: |"
  fi
  printf '%s\n' "${rows[@]}"
}
if [ -n "$OUT" ]; then
  report >"$OUT"
  echo "wrote $OUT" >&2
else
  report
fi

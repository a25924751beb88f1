# lib.sh - what tests/support/with-postgres.sh and with-redis.sh share.
# Sourced (POSIX sh), not run. The sourcing script defines stop_server.
#
#   free_port                      print a port free a moment ago on 127.0.0.1
#   make_tmp NAME                  set $tmp to a new dir ${TMPDIR:-/tmp}/NAME.XXXXXX
#   trap_cleanup                   on exit: stop_server, remove $tmp; INT exits 130, TERM 143
#   run_substituted PH VAL CMD...  run CMD with every PH in its arguments
#                                  replaced by VAL; returns CMD's status
#   need_command SCRIPT PH NARGS   usage and exit 2 when the script got no CMD
#   stop_pid PID SIG TENTHS        send SIG, wait up to TENTHS/10 s for PID to
#                                  go, then SIGKILL

need_command() {
  if [ "$3" -lt 1 ]; then
    echo "usage: $1 CMD [ARG...]  ($2 in ARGs is replaced)" >&2
    exit 2
  fi
}

stop_pid() {
  kill -"$2" "$1" 2>/dev/null || return 0
  _i=0
  while kill -0 "$1" 2>/dev/null; do
    _i=$((_i + 1))
    if [ $_i -gt "$3" ]; then
      kill -KILL "$1" 2>/dev/null || true
      break
    fi
    sleep 0.1 # a poll interval: we leave as soon as it is gone
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

make_tmp() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
}

cleanup() {
  stop_server
  rm -rf "$tmp"
}

trap_cleanup() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# Rebuild "$@" in place, keeping the arguments apart (POSIX sh: no arrays).
run_substituted() {
  _ph=$1
  _val=$2
  shift 2
  _n=$#
  _i=0
  while [ $_i -lt $_n ]; do
    _a=$1
    shift
    _out=""
    while :; do
      case $_a in
        *"$_ph"*)
          _out="$_out${_a%%"$_ph"*}$_val"
          _a=${_a#*"$_ph"}
          ;;
        *) break ;;
      esac
    done
    set -- "$@" "$_out$_a"
    _i=$((_i + 1))
  done
  _status=0
  "$@" || _status=$?
  return $_status
}

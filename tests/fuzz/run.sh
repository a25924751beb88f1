#!/bin/sh
# run.sh BUILD_DIR SECONDS - build the libFuzzer targets with clang and run
# each for SECONDS seconds from the seed corpus in tests/fuzz/corpus/<target>.
# Exits non-zero when a target crashes, leaks, hits UB or times out; the
# reproducer is left in BUILD_DIR/fuzz/artifacts/ and named in the output.
# Replay one by hand: BUILD_DIR/tests/fuzz/<target> <reproducer file>
set -eu

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
secs=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# every tests/fuzz/fuzz_*.c is a target
targets=$(cd "$here" && ls fuzz_*.c | sed "s/\.c$//" | tr "\n" " ")
jobs=${IDEM_FUZZ_JOBS:-2}

cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="${CC:-clang}" \
  -DIDEM_FUZZ=ON -DIDEM_TESTS=OFF -DIDEM_WERROR=ON >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" --target $targets

work=$build/fuzz
mkdir -p "$work/artifacts" "$work/logs"
failed=""
for t in $targets; do
  bin=$build/tests/fuzz/$t
  corpus=$work/corpus/$t # new inputs go here; the seeds stay untouched
  mkdir -p "$corpus"
  dict=""
  [ -f "$here/${t#fuzz_}.dict" ] && dict="-dict=$here/${t#fuzz_}.dict"
  log=$work/logs/$t.log
  echo "== $t: ${secs}s"
  # shellcheck disable=SC2086
  if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 $dict \
      -artifact_prefix="$work/artifacts/$t-" \
      "$corpus" "$here/corpus/$t" >"$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^Done ' "$log" || true
  else
    failed="$failed $t"
    echo "!! $t failed; last lines of $log:"
    tail -n 40 "$log"
  fi
done

if [ -n "$failed" ]; then
  echo "fuzzing failed:$failed (reproducers in $work/artifacts)" >&2
  exit 1
fi
echo "fuzzing passed: $targets"

#!/usr/bin/env bash
# build-without-stores.sh SOURCE_DIR [CMAKE [CC]] - configure and build idem
# with -DIDEM_REDIS=OFF -DIDEM_POSTGRES=OFF in a temporary build dir, then
# check what such a build promises:
#   - libidem.so and idem link neither hiredis nor libpq;
#   - redis:// and postgres:// URIs are refused by name, and --help offers
#     none: idem serve exits 2
#     (and idem consume, for a redis:// broker),
#     idem migrate exits 2, each saying this build has no such support;
#   - no test of those stores is registered;
#   - its unit, memory and LMDB contract and install tests pass (the install
#     puts no <idem/idem_pg.h> and no hiredis or libpq in idem.pc).
# A second build of the whole tree (about a minute on 2 cores), so CTest runs
# it only on request: ctest -L build.
set -euo pipefail
src=$(cd "$1" && pwd)
cmake=${2:-cmake}
cc=${3:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-nostores.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
build=$tmp/build
failed=0
check() { # check TEXT STATUS
  if [ "$2" = 0 ]; then echo "ok:     $1"; else echo "FAILED: $1"; failed=$((failed + 1)); fi
}

"$cmake" -S "$src" -B "$build" -DCMAKE_C_COMPILER="$cc" -DIDEM_WERROR=ON \
  -DIDEM_REDIS=OFF -DIDEM_POSTGRES=OFF >/dev/null
"$cmake" --build "$build" -j"$(nproc)" >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; exit 1; }
echo "built $build with -DIDEM_REDIS=OFF -DIDEM_POSTGRES=OFF"
set +e # from here on every check runs, and check counts the failures

for f in "$build/libidem.so" "$build/idem"; do
  needed=$(readelf -d "$f" | grep NEEDED || true)
  ! grep -Eq 'libhiredis|libpq' <<<"$needed"
  check "$(basename "$f") needs neither libhiredis nor libpq" $?
done

# run from the temp dir: serve's default spool directory lands there
serve() { (cd "$tmp" && timeout 30 "$build/idem" serve --store "$1" \
  --upstream http://127.0.0.1:1 --listen 127.0.0.1:0 2>&1); }
out=$(serve redis://127.0.0.1:1); status=$?
echo "  idem serve --store redis://127.0.0.1:1: exit $status: $out"
[ "$status" = 2 ] && grep -q "this build of idem has no Redis support" <<<"$out"
check "serve refuses redis:// with exit 2, naming Redis" $?

out=$(serve postgres://idem@127.0.0.1:1/idem); status=$?
echo "  idem serve --store postgres://idem@127.0.0.1:1/idem: exit $status: $out"
[ "$status" = 2 ] && grep -q "this build of idem has no PostgreSQL support" <<<"$out"
check "serve refuses postgres:// with exit 2, naming PostgreSQL" $?

out=$("$build/idem" migrate --store postgresql://idem@127.0.0.1:1/idem 2>&1); status=$?
echo "  idem migrate --store postgresql://idem@127.0.0.1:1/idem: exit $status: $out"
[ "$status" = 2 ] && grep -q "this build of idem has no PostgreSQL support" <<<"$out"
check "migrate refuses postgresql:// with exit 2, naming PostgreSQL" $?

out=$("$build/idem" consume --from 'redis://127.0.0.1:1?stream=s&group=g' \
  --to http://127.0.0.1:1/x --store memory: 2>&1); status=$?
echo "  idem consume --from redis://...: exit $status: $out"
[ "$status" = 2 ] && grep -q "this build of idem has no Redis support" <<<"$out"
check "consume refuses a redis:// broker with exit 2, naming Redis" $?

for cmd in serve consume; do
  out=$("$build/idem" "$cmd" --help 2>&1)
  ! grep -Eq 'redis(\+cluster)?://|postgres://' <<<"$out"
  check "idem $cmd --help offers no redis:// or postgres:// URI" $?
done

registered=$(cd "$build" && ctest -N | grep -Ei 'redis|postgres|pg_' || true)
[ -z "$registered" ]
check "no Redis or PostgreSQL test is registered${registered:+: $registered}" $?

(cd "$build" && ctest -R '^(unit\.|install\.|contract\.(memory|lmdb)$)' -j"$(nproc)" \
  --output-on-failure >"$tmp/ctest.log" 2>&1)
status=$?
grep -E "tests passed|tests failed" "$tmp/ctest.log" || tail -40 "$tmp/ctest.log"
check "unit, contract (memory, LMDB) and install tests pass" $status

echo "build without stores: $failed failed"
[ "$failed" = 0 ]

#!/usr/bin/env bash
# install-check.sh BUILD_DIR SOURCE_DIR - install into a temporary prefix and
# build examples/claim_once.c against it with pkg-config, shared and static;
# run both: the first run executes, the second replays. When the library has
# PostgreSQL (libpq among its private requirements), <idem/idem_pg.h> is
# installed too and examples/pg_exactly_once.c builds against it (it is not
# run: that needs a server); without PostgreSQL, no idem_pg.h is installed.
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc_dir=$(dirname "$(find "$tmp/prefix" -name idem.pc | head -1)")
export PKG_CONFIG_PATH=$pc_dir
test -f "$tmp/prefix/include/idem/idem.h"
cc -std=c11 -Wall -Wextra -Werror "$src/examples/claim_once.c" $(pkg-config --cflags --libs idem) \
  -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/claim_once_shared"
cc -std=c11 -Wall -Wextra -Werror "$src/examples/claim_once.c" $(pkg-config --cflags idem) \
  "$(pkg-config --variable=libdir idem)/libidem.a" \
  $(pkg-config --libs libuv $(pkg-config --print-requires-private idem)) -lpthread -lm \
  -o "$tmp/claim_once_static"
# libidem.a keeps its internals local: a program with functions of its own
# named like internal ones links against it, as against libidem.so
cat >"$tmp/clash.c" <<'EOF'
#include <idem/idem.h>
int lmdb_error(int rc) { return rc; }
int settings_set(void) { return 0; }
int json_pointer_valid(void) { return 1; }
int main(void) { return lmdb_error(0) + settings_set() + !json_pointer_valid() + !idem_strerror(0); }
EOF
cc -std=c11 -Wall -Wextra -Werror "$tmp/clash.c" $(pkg-config --cflags idem) \
  "$(pkg-config --variable=libdir idem)/libidem.a" \
  $(pkg-config --libs libuv $(pkg-config --print-requires-private idem)) -lpthread -lm \
  -o "$tmp/clash"
"$tmp/clash"
global=$(nm -g --defined-only "$(pkg-config --variable=libdir idem)/libidem.a" | awk 'NF == 3 && $3 !~ /^idem_/ {print $3}')
[[ -z $global ]] || { echo "libidem.a: global symbols outside idem_: $global" >&2; exit 1; }
if pkg-config --print-requires-private idem | grep -qx libpq; then
  test -f "$tmp/prefix/include/idem/idem_pg.h"
  cc -std=c11 -Wall -Wextra -Werror "$src/examples/pg_exactly_once.c" \
    $(pkg-config --cflags --libs idem libpq) -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/pg_exactly_once"
  echo "pg_exactly_once: built against <idem/idem_pg.h>"
else
  test ! -e "$tmp/prefix/include/idem/idem_pg.h"
  echo "no PostgreSQL in this build: no <idem/idem_pg.h> installed"
fi
first=$("$tmp/claim_once_shared" "lmdb:$tmp/store" order-7)
second=$("$tmp/claim_once_static" "lmdb:$tmp/store" order-7)
echo "first:  $first"
echo "second: $second"
[[ $first == "ran: charged 10 EUR (fence 1)" ]]
[[ $second == "replayed: charged 10 EUR" ]]
echo "install check: 1 passed, 0 failed"

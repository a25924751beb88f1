#!/usr/bin/env bash
# with-tempdir.sh CMD ARGS... - run CMD with {TMP} in its arguments replaced by
# a fresh temporary directory, removed afterwards; exits with CMD's status.
set -u
tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
args=()
for a in "$@"; do args+=("${a//\{TMP\}/$tmp}"); done
"${args[@]}"

#!/usr/bin/env bash
# install-deps.sh - install what building, testing and benchmarking idem
# needs, from Debian's packages. Idempotent: installs only what is missing.
set -euo pipefail
packages=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libuv1-dev libhttp-parser-dev liblmdb-dev lmdb-utils libhiredis-dev libpq-dev libssl-dev
  libcmocka-dev libyaml-dev python3 curl dpkg-dev file
  redis-server postgresql nginx-light wrk procps
  rabbitmq-server nats-server librabbitmq-dev libnats-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  # policy-rc.d keeps the packaged services (nginx, redis, postgresql,
  # rabbitmq, nats) from starting: tests start their own servers on free
  # ports. A policy the machine already has is left as it is.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    $sudo sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
    trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

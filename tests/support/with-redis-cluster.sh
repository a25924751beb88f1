#!/bin/sh
# with-redis-cluster.sh CMD [ARG...] - run CMD against a throwaway Redis
# Cluster: 3 primaries and 3 replicas, real redis-server processes on free
# 127.0.0.1 ports in temp dirs, cluster-node-timeout 1s. {REDIS_CLUSTER_URI}
# in the arguments becomes redis+cluster://127.0.0.1:P1,127.0.0.1:P2 (also
# IDEM_TEST_REDIS_CLUSTER_URI in CMD's environment). The nodes are stopped by
# PID afterwards; the exit status is CMD's. The cluster is built by
# tests/e2e/redis_cluster.py, which the e2e tests use directly.
set -eu
exec python3 "$(dirname "$0")/../e2e/redis_cluster.py" "$@"

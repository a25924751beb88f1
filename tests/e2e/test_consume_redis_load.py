"""test_consume_redis_load.py - `idem consume` on Redis Streams under load
and failures (consume_cases.LoadTests): 10,000 keys, 10% of them published
twice, three consumers on one group, a handler failing 10% of first attempts
with 503, and one consumer killed with SIGKILL every 2 s and restarted
(lmdb: store); the broker's redis-server killed and restarted mid-run; the
store's redis-server (a second one) killed and restarted mid-run. Each run
ends with every entry acked (XPENDING empty, no lag), no dead letters, and
every key having reached the handler as a success; where no consumer died,
exactly once. IDEM_CONSUME_LOAD_KEYS=N changes the size.
"""

from consume_cases import LoadTests
from harness import main
from test_consume_redis import ConsumeCase


class Load(ConsumeCase, LoadTests):
    pass


if __name__ == "__main__":
    main()

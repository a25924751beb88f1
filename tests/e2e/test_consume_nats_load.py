"""test_consume_nats_load.py - `idem consume` on NATS JetStream under load
and failures (consume_cases.LoadTests): 10,000 keys, 10% published twice,
three consumers on one durable consumer, a handler failing 10% of first
attempts with 503; one consumer killed with SIGKILL every 2 s; nats-server
killed and restarted mid-run; the store's redis-server killed and restarted
mid-run. IDEM_CONSUME_LOAD_KEYS=N changes the size.
"""

from consume_cases import LoadTests
from harness import main
from test_consume_nats import NatsCase


class Load(NatsCase, LoadTests):
    pass


if __name__ == "__main__":
    main()

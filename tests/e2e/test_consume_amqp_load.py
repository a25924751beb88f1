"""test_consume_amqp_load.py - `idem consume` on RabbitMQ under load and
failures (consume_cases.LoadTests): 10,000 keys, 10% published twice, three
consumers on one queue, a handler failing 10% of first attempts with 503;
one consumer killed with SIGKILL every 2 s; rabbitmq-server killed and
restarted mid-run; the store's redis-server killed and restarted mid-run.
IDEM_CONSUME_LOAD_KEYS=N changes the size.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from consume_cases import LoadTests  # noqa: E402
from test_consume_amqp import AmqpCase  # noqa: E402


class Load(AmqpCase, LoadTests):
    load_key_field = "message_id"
    load_key_args = []


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""test_consume_amqp_load.py - `idem consume` on RabbitMQ under load and
failures (consume_cases.LoadTests): 10,000 keys, 10% published twice, three
consumers on one queue, a handler failing 10% of first attempts with 503;
one consumer killed with SIGKILL every 2 s; rabbitmq-server killed and
restarted mid-run; the store's redis-server killed and restarted mid-run.
IDEM_CONSUME_LOAD_KEYS=N changes the size.
"""

from consume_cases import LoadTests
from harness import main
from test_consume_amqp import AmqpCase


class Load(AmqpCase, LoadTests):
    pass


if __name__ == "__main__":
    main()

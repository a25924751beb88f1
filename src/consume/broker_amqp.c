/*
 * broker_amqp.c - RabbitMQ (AMQP 0-9-1, librabbitmq) as a broker for
 * `idem consume`:
 *
 *   amqp://user:pass@host[:port]/vhost?queue=NAME[&prefetch=N]
 *
 * librabbitmq is blocking and not thread-safe, so one thread of this file
 * owns the connection and makes every call; the loop talks to it through
 * two queues (commands one way, deliveries and settles the other), a pipe
 * that wakes its poll, and a uv_async that wakes the loop.
 *
 * The connection: the queue declared (durable) with NAME.dead beside it,
 * basic.qos with the prefetch (default --concurrency plus --prefetch),
 * publisher confirms on, basic.consume with manual acks. Settles:
 *   ack    basic.ack; when the message has reply_to, the kept answer is
 *          first published there (correlation_id copied, header
 *          x-idem-status, x-idem-replayed), confirmed, then the ack.
 *   later  after the delay (the message stays unacked meanwhile), a copy
 *          is published to the queue with x-idem-deliveries counting, and
 *          once confirmed the original is acked. Classic queues count no
 *          deliveries and a nack with requeue comes back at once, so the
 *          count and the delay are idem's. A consumer that dies first: the
 *          broker requeues the original, flagged redelivered (counted once).
 *          A stop does not wait for the delay: the copy is published at
 *          once with x-idem-due (wall-clock ms), and a consumer that gets
 *          it sooner holds it, unacked and uncounted, until then.
 *   dead   published to NAME.dead with x-idem-reason, x-idem-id,
 *          x-idem-deliveries and the original headers and properties,
 *          confirmed, then the original acked.
 * A copy that would not fit a frame with idem's headers: a dead letter
 * goes without the delivery's own headers, a retry to the dead letters
 * (amqp_thread.c, publish_for()).
 * A publish the broker refuses (nack): the original stays unacked and the
 * publish is tried again after a backoff (amqp_thread.c, refused()).
 * Connection lost: the broker requeues what was unacked; settles of the
 * old connection fail (ok 0); reconnection backs off from 100 ms to 2 s.
 * Stop: the consumer is cancelled (basic.cancel) before the drain; a
 * delivery that comes anyway goes back to the queue as a copy that counts
 * no delivery (as a later that did not run), then the original is acked.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consume/amqp_int.h"
#include "idem/idem.h"

static const char *const a_params[] = {"queue", "prefetch", NULL};

static int a_check_uri(const cs_uri *u, char *err, size_t len) {
  const char *q = cs_uri_param(u, "queue"), *p = cs_uri_param(u, "prefetch");
  if (!q || !*q || strlen(q) > 200)
    return snprintf(err, len, "an AMQP broker needs ?queue=NAME"), -1;
  if (p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (!*p || *end || v < 1 || v > 65535)
      return snprintf(err, len, "prefetch is a number from 1 to 65535, not '%s'", p), -1;
  }
  return 0;
}


/* ---- the loop ---- */

static void maybe_done(abroker *b);

static amsg *reverse(amsg *q) {
  amsg *rev = NULL;
  while (q) {
    amsg *n = q->next;
    q->next = rev;
    rev = q;
    q = n;
  }
  return rev;
}

static void on_async(uv_async_t *a) {
  abroker *b = a->data;
  uv_mutex_lock(&b->mu);
  amsg *in = reverse(b->inq), *done = reverse(b->doneq);
  b->inq = b->doneq = NULL;
  int up = b->up;
  uv_mutex_unlock(&b->mu);
  if (up != b->up_seen) {
    b->up_seen = up;
    if (b->base.o.on_state)
      b->base.o.on_state(b->base.o.arg, up);
  }
  for (amsg *m = done, *next; m; m = next) {
    next = m->next;
    if (m->cb)
      m->cb(m->arg, &m->m, m->ok);
    amqp_msg_free(m);
    b->outstanding--;
  }
  for (amsg *m = in, *next; m; m = next) {
    next = m->next;
    b->outstanding++;
    b->base.o.on_message(b->base.o.arg, &m->m);
  }
  maybe_done(b);
}

static void command(abroker *b, amsg *m, int op, cs_settled_cb cb, void *arg) {
  m->op = op;
  m->cb = cb;
  m->arg = arg;
  amqp_push(b, &b->cmdq, m);
  amqp_wake_thread(b);
}

static void a_ack(cs_broker *base, cs_msg *msg, const cs_answer *answer, cs_settled_cb cb,
                  void *arg) {
  amsg *m = (amsg *)msg;
  if (m->reply_to && answer && answer->status) {
    m->status = answer->status;
    m->replayed = answer->replayed;
    m->answer = cs_dup(answer->body ? answer->body : "", answer->body_len);
    m->answer_len = m->answer ? answer->body_len : 0;
  }
  command((abroker *)base, m, OP_ACK, cb, arg);
}

static void a_later(cs_broker *base, cs_msg *msg, int64_t delay_ms, int ran, cs_settled_cb cb,
                    void *arg) {
  amsg *m = (amsg *)msg;
  m->due_ms = amqp_now_ms() + (uint64_t)(delay_ms > 0 ? delay_ms : 0);
  if (!ran && m->m.deliveries > 0)
    m->m.deliveries--; /* the copy counts as this delivery again */
  command((abroker *)base, m, OP_LATER, cb, arg);
}

static void a_dead(cs_broker *base, cs_msg *msg, const char *reason, cs_settled_cb cb, void *arg) {
  amsg *m = (amsg *)msg;
  snprintf(m->reason, sizeof m->reason, "%s", reason);
  command((abroker *)base, m, OP_DEAD, cb, arg);
}

/* Nothing to say: RabbitMQ hands an unacked message to no one else while
 * the channel that holds it is open. */
static void a_keep(cs_broker *base, cs_msg *msg) {
  (void)base;
  (void)msg;
}

static void a_credit(cs_broker *base, unsigned n) {
  (void)base; /* basic.qos prefetch is the window */
  (void)n;
}

static void async_closed(uv_handle_t *h) {
  abroker *b = h->data;
  close(b->wake_fd[0]);
  close(b->wake_fd[1]);
  uv_mutex_destroy(&b->mu);
  cs_broker_free(&b->base);
}

/* Closing: no more deliveries (stop 1); once every delivered message is
 * settled, the thread closes the connection and ends (stop 2). */
static void maybe_done(abroker *b) {
  if (!b->base.closing || b->outstanding || uv_is_closing((uv_handle_t *)&b->async))
    return;
  uv_mutex_lock(&b->mu);
  int finished = b->thread_done, pending = b->inq || b->doneq;
  if (!finished && !pending) /* what is pending is the loop's to run first */
    b->stop = 2;
  uv_mutex_unlock(&b->mu);
  if (pending)
    return;
  if (!finished) {
    amqp_wake_thread(b);
    return; /* its async comes when it ends */
  }
  uv_thread_join(&b->thread);
  uv_close((uv_handle_t *)&b->async, async_closed);
}

static void a_close(cs_broker *base) {
  abroker *b = (abroker *)base;
  uv_mutex_lock(&b->mu);
  if (!b->stop)
    b->stop = 1;
  uv_mutex_unlock(&b->mu);
  amqp_wake_thread(b);
  maybe_done(b);
}

static int a_start(cs_broker *base, char **why) {
  abroker *b = (abroker *)base;
  const cs_broker_opts *o = &b->base.o;
  if (pipe2(b->wake_fd, O_NONBLOCK | O_CLOEXEC)) {
    *why = strdup("cannot make a pipe");
    cs_broker_free(&b->base);
    return IDEM_ENOMEM;
  }
  b->queue = cs_uri_param(&b->base.uri, "queue");
  snprintf(b->dead_queue, sizeof b->dead_queue, "%s.dead", b->queue);
  const char *p = cs_uri_param(&b->base.uri, "prefetch");
  b->prefetch = p ? (unsigned)atoi(p) : o->window > 65535 ? 65535 : o->window;
  uv_mutex_init(&b->mu);
  uv_async_init(o->loop, &b->async, on_async);
  b->async.data = b;
  if (uv_thread_create(&b->thread, amqp_thread_main, b)) {
    *why = strdup("cannot start a thread");
    b->base.closing = 1;
    uv_close((uv_handle_t *)&b->async, async_closed);
    return IDEM_ENOMEM;
  }
  return 0;
}

const cs_broker_vt cs_broker_amqp = CS_BROKER_VT("amqp", abroker, 5672, a);

/*
 * amqp_thread.c - the thread of the amqp:// broker (see broker_amqp.c): it
 * owns the librabbitmq connection and makes every call on it. It connects
 * (with backoff), runs the settles the loop queues, republishes postponed
 * messages when due, reads frames (deliveries, publisher confirms, closes)
 * and hands deliveries and settled messages back to the loop.
 */
#include <poll.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <amqp_tcp_socket.h>

#include "consume/amqp_int.h"


/* ---- the thread: talking to the loop ---- */

void amqp_wake_thread(abroker *b) {
  char c = 1;
  ssize_t n = write(b->wake_fd[1], &c, 1);
  (void)n; /* a full pipe already wakes it */
}

void amqp_push(abroker *b, amsg **q, amsg *m) {
  uv_mutex_lock(&b->mu);
  m->next = *q;
  *q = m;
  uv_mutex_unlock(&b->mu);
}

static void finish(abroker *b, amsg *m, int ok) {
  if (m->internal) { /* the loop never saw it: acked, or the broker requeues it */
    amqp_msg_free(m);
    return;
  }
  m->ok = ok;
  amqp_push(b, &b->doneq, m);
  uv_async_send(&b->async);
}

static void set_up(abroker *b, int up) {
  uv_mutex_lock(&b->mu);
  b->up = up;
  uv_mutex_unlock(&b->mu);
  uv_async_send(&b->async);
}

/* ---- the thread: the connection ---- */

static int reply_failed(amqp_rpc_reply_t r, const char *what, char *why, size_t len) {
  if (r.reply_type == AMQP_RESPONSE_NORMAL)
    return 0;
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
    snprintf(why, len, "%s: %s", what, amqp_error_string2(r.library_error));
  else if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD || r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const amqp_channel_close_t *c = r.reply.decoded; /* same layout for both */
    snprintf(why, len, "%s: server said %u %.*s", what, c->reply_code, (int)c->reply_text.len,
             (const char *)c->reply_text.bytes);
  } else
    snprintf(why, len, "%s: server error", what);
  return -1;
}

static int rpc_failed(abroker *b, const char *what, char *why, size_t len) {
  return reply_failed(amqp_get_rpc_reply(b->conn), what, why, len);
}

/* A queue that exists is used as it is, whatever its arguments (a quorum
 * queue, a length limit): a passive declare. One that does not (the server
 * closes the channel: 404) is declared durable, on the channel opened
 * again. */
static int declare_queue(abroker *b, const char *name, const char *what, char *why, size_t len) {
  amqp_queue_declare(b->conn, CH, amqp_cstring_bytes(name), 1, 0, 0, 0, amqp_empty_table);
  amqp_rpc_reply_t r = amqp_get_rpc_reply(b->conn);
  int missing = r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
                r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
                ((const amqp_channel_close_t *)r.reply.decoded)->reply_code == AMQP_NOT_FOUND;
  if (!missing)
    return reply_failed(r, what, why, len);
  amqp_channel_close_ok_t ok = {0};
  if (amqp_send_method(b->conn, CH, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok)) {
    snprintf(why, len, "%s: channel.close-ok could not be sent", what);
    return -1;
  }
  amqp_channel_open(b->conn, CH);
  if (rpc_failed(b, "channel.open", why, len))
    return -1;
  amqp_queue_declare(b->conn, CH, amqp_cstring_bytes(name), 0, 1, 0, 0, amqp_empty_table);
  return rpc_failed(b, what, why, len);
}

static int connect_broker(abroker *b, char *why, size_t len) {
  b->conn = amqp_new_connection();
  amqp_socket_t *sock = b->conn ? amqp_tcp_socket_new(b->conn) : NULL;
  struct timeval tv = {2, 0};
  int rc = sock ? amqp_socket_open_noblock(sock, b->base.uri.host, b->base.uri.port, &tv) : AMQP_STATUS_NO_MEMORY;
  if (rc) {
    snprintf(why, len, "cannot connect: %s", amqp_error_string2(rc));
    return -1;
  }
  const char *vhost = *b->base.uri.path ? b->base.uri.path : "/";
  amqp_rpc_reply_t r = amqp_login(b->conn, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN,
                                  b->base.uri.user ? b->base.uri.user : "guest",
                                  b->base.uri.password ? b->base.uri.password : "guest");
  if (r.reply_type != AMQP_RESPONSE_NORMAL)
    return reply_failed(r, "login", why, len);
  amqp_channel_open(b->conn, CH);
  if (rpc_failed(b, "channel.open", why, len))
    return -1;
  if (declare_queue(b, b->queue, "queue.declare", why, len) ||
      declare_queue(b, b->dead_queue, "queue.declare of the dead letters", why, len))
    return -1;
  amqp_basic_qos(b->conn, CH, 0, (uint16_t)b->prefetch, 0); /* on the channel as it is now */
  if (rpc_failed(b, "basic.qos", why, len))
    return -1;
  amqp_confirm_select(b->conn, CH);
  if (rpc_failed(b, "confirm.select", why, len))
    return -1;
  amqp_basic_consume_ok_t *ok = amqp_basic_consume(b->conn, CH, amqp_cstring_bytes(b->queue),
                                                    amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
  if (rpc_failed(b, "basic.consume", why, len))
    return -1;
  b->ctag_len = ok && ok->consumer_tag.len < sizeof b->ctag ? ok->consumer_tag.len : 0;
  if (b->ctag_len)
    memcpy(b->ctag, ok->consumer_tag.bytes, b->ctag_len);
  b->cancelled = 0;
  b->gen++;
  b->next_seq = 1;
  return 0;
}

static void teardown(abroker *b, int graceful) {
  while (b->waiting) {
    amsg *m = b->waiting;
    b->waiting = m->next;
    finish(b, m, 0);
  }
  if (b->conn) {
    if (graceful)
      amqp_connection_close(b->conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(b->conn);
    b->conn = NULL;
  }
  set_up(b, 0);
}

/* ---- the thread: publishing, confirms ---- */

static amqp_table_entry_t entry(const char *key, const char *value, size_t len) {
  amqp_table_entry_t e;
  e.key = amqp_cstring_bytes(key);
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes.bytes = (void *)value;
  e.value.value.bytes.len = len;
  return e;
}

/* Headers idem sets on what it publishes again; the delivery's own values
 * of these are left out. */
static int idem_header(amqp_bytes_t key) {
  static const char *const names[] = {"x-idem-deliveries", "x-idem-reason", "x-idem-id",
                                      "x-idem-due"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (key.len == strlen(names[i]) && !strncasecmp(key.bytes, names[i], key.len))
      return 1;
  return 0;
}

/* The properties of a retry (OP_LATER) or a dead letter (OP_DEAD): the
 * delivery's own, every field and header of any type, persistent, with
 * idem's headers in e[0..n) first. A dead letter loses its expiration (as
 * RabbitMQ's own dead-lettering does), so that it stays to be looked at; a
 * user_id is kept only if it is this connection's user (RabbitMQ refuses
 * another), else it moves to the header x-idem-user-id. The delivery's own
 * headers are left out unless own_headers. Returns the count
 * of entries in e, which holds room for the delivery's headers plus 5. */
static int republished(abroker *b, const amsg *m, amqp_basic_properties_t *p,
                       amqp_table_entry_t *e, int n, int own_headers) {
  *p = m->props;
  p->_flags |= AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
  p->delivery_mode = 2;
  if (m->op == OP_DEAD)
    p->_flags &= (amqp_flags_t)~AMQP_BASIC_EXPIRATION_FLAG;
  const char *user = b->base.uri.user ? b->base.uri.user : "guest";
  if ((p->_flags & AMQP_BASIC_USER_ID_FLAG) &&
      (p->user_id.len != strlen(user) || memcmp(p->user_id.bytes, user, p->user_id.len))) {
    p->_flags &= (amqp_flags_t)~AMQP_BASIC_USER_ID_FLAG;
    e[n++] = entry("x-idem-user-id", p->user_id.bytes, p->user_id.len);
  }
  for (int i = 0; own_headers && i < m->props.headers.num_entries; i++)
    if (!idem_header(m->props.headers.entries[i].key))
      e[n++] = m->props.headers.entries[i];
  return n;
}

/* Whether a content header with properties p fits a frame of this
 * connection: its encoded size (frame header and end, class, weight, body
 * size, flags, then each property present). A table that does not encode
 * within a frame does not fit. */
static int fits_frame(abroker *b, const amqp_basic_properties_t *p) {
  size_t max = (size_t)amqp_get_frame_max(b->conn);
  size_t n = 8 + 14;
  const struct {
    amqp_flags_t flag;
    const amqp_bytes_t *v;
  } strs[] = {{AMQP_BASIC_CONTENT_TYPE_FLAG, &p->content_type},
              {AMQP_BASIC_CONTENT_ENCODING_FLAG, &p->content_encoding},
              {AMQP_BASIC_CORRELATION_ID_FLAG, &p->correlation_id},
              {AMQP_BASIC_REPLY_TO_FLAG, &p->reply_to},
              {AMQP_BASIC_EXPIRATION_FLAG, &p->expiration},
              {AMQP_BASIC_MESSAGE_ID_FLAG, &p->message_id},
              {AMQP_BASIC_TYPE_FLAG, &p->type},
              {AMQP_BASIC_USER_ID_FLAG, &p->user_id},
              {AMQP_BASIC_APP_ID_FLAG, &p->app_id},
              {AMQP_BASIC_CLUSTER_ID_FLAG, &p->cluster_id}};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    if (p->_flags & strs[i].flag) {
      if (strs[i].v->len > 255)
        return 0;
      n += 1 + strs[i].v->len;
    }
  n += (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG ? 1 : 0) +
       (p->_flags & AMQP_BASIC_PRIORITY_FLAG ? 1 : 0) + (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG ? 8 : 0);
  if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
    void *buf = malloc(max);
    size_t off = 0;
    amqp_table_t t = p->headers;
    int rc = buf ? amqp_encode_table((amqp_bytes_t){max, buf}, &t, &off) : AMQP_STATUS_NO_MEMORY;
    free(buf);
    if (rc)
      return 0;
    n += off;
  }
  return n <= max;
}

static void note_too_big(abroker *b, const amsg *m, const char *what) {
  fprintf(stderr, "idem consume: amqp broker %s:%d: message %s: %s\n", b->base.uri.host,
          b->base.uri.port, m->m.id, what);
}

/* m waits in b->waiting, unacked: for the confirm of publish pub_seq, or
 * (pub_seq 0) until its due_ms. */
static void wait_here(abroker *b, amsg *m, uint64_t pub_seq) {
  m->pub_seq = pub_seq;
  m->next = b->waiting;
  b->waiting = m;
}

/* Publish for m (op decides what and where), to be confirmed: 0 or -1.
 * A copy that would not fit a frame with idem's headers (the delivery's
 * own nearly fill one) is that message's failure, not the connection's
 * (amqp_basic_publish would fail after sending the method frame): a
 * retry's copy, which cannot go without x-idem-deliveries, goes to the
 * dead letters instead; a dead letter goes with idem's headers and
 * without the delivery's own, its reason saying so. */
static int publish_for(abroker *b, amsg *m) {
  amqp_basic_properties_t p;
  amqp_table_entry_t *e = malloc(((size_t)m->props.headers.num_entries + 5) * sizeof *e);
  if (!e)
    return -1;
  int n, slim = 0;
  char num[16], status[16], due[24], slim_reason[sizeof m->reason + 100];
  const char *to;
  amqp_bytes_t body;
again:
  p = (amqp_basic_properties_t){0};
  n = 0;
  to = m->op == OP_DEAD ? b->dead_queue : m->op == OP_LATER ? b->queue : m->reply_to;
  body = (amqp_bytes_t){m->m.body_len, m->m.body};
  if (m->op == OP_ACK) { /* the answer, to reply_to */
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.delivery_mode = 2;
    body = (amqp_bytes_t){m->answer_len, m->answer};
    snprintf(status, sizeof status, "%d", m->status);
    e[n++] = entry("x-idem-status", status, strlen(status));
    e[n++] = entry("x-idem-replayed", m->replayed ? "true" : "false", m->replayed ? 4 : 5);
    if (m->correlation_id) {
      p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
      p.correlation_id = amqp_cstring_bytes(m->correlation_id);
    }
  } else {
    snprintf(num, sizeof num, "%u", m->m.deliveries);
    e[n++] = entry("x-idem-deliveries", num, strlen(num));
    if (m->op == OP_LATER && m->due_wall > amqp_wall_ms()) { /* published early, by a stop */
      snprintf(due, sizeof due, "%llu", (unsigned long long)m->due_wall);
      e[n++] = entry("x-idem-due", due, strlen(due));
    }
    if (m->op == OP_DEAD) {
      const char *reason = m->reason;
      if (slim) {
        snprintf(slim_reason, sizeof slim_reason,
                 "%s (its own headers left out: with idem's they do not fit a frame)", m->reason);
        reason = slim_reason;
      }
      e[n++] = entry("x-idem-reason", reason, strlen(reason));
      e[n++] = entry("x-idem-id", m->m.id, strlen(m->m.id));
    }
    n = republished(b, m, &p, e, n, !slim);
  }
  p.headers.num_entries = n;
  p.headers.entries = e;
  if (m->op != OP_ACK && !slim && !fits_frame(b, &p)) {
    if (m->op == OP_LATER) {
      note_too_big(b, m, "its copy for a retry does not fit a frame with idem's headers: it "
                         "goes to the dead letters instead");
      m->op = OP_DEAD;
      snprintf(m->reason, sizeof m->reason,
               "its copy for a retry (with x-idem-deliveries) does not fit a frame");
    } else {
      note_too_big(b, m, "its dead letter goes without its own headers: with idem's they do "
                         "not fit a frame");
      slim = 1;
    }
    goto again;
  }
  int rc = amqp_basic_publish(b->conn, CH, amqp_empty_bytes, amqp_cstring_bytes(to), 0, 0, &p, body);
  free(e); /* the frame is encoded and written by now */
  if (rc)
    return -1;
  wait_here(b, m, b->next_seq++);
  return 0;
}

/* Publish for m, or finish it as failed: 0, or -1 (the connection failed). */
static int publish_or_fail(abroker *b, amsg *m) {
  if (publish_for(b, m) == 0)
    return 0;
  finish(b, m, 0);
  return -1;
}

#define REFUSED_BACKOFF_MIN_MS 200
#define REFUSED_BACKOFF_MAX_MS 5000

/* The broker refused m's publish (a full NAME.dead, say): the original
 * stays unacked, and the publish is tried again after a backoff. (A nack
 * with requeue would bring it back at once, to be refused again, as fast
 * as the loop turns.) */
static void refused(abroker *b, amsg *m) {
  if (m->refused++ == 0)
    fprintf(stderr, "idem consume: amqp broker %s:%d: a publish to '%s' was refused; message "
                    "%s stays unacked and the publish is tried again, backing off to %d ms\n",
            b->base.uri.host, b->base.uri.port,
            m->op == OP_DEAD ? b->dead_queue : m->op == OP_LATER ? b->queue : m->reply_to,
            m->m.id, REFUSED_BACKOFF_MAX_MS);
  uint64_t wait = (uint64_t)REFUSED_BACKOFF_MIN_MS << (m->refused < 6 ? m->refused - 1 : 5);
  m->due_ms = amqp_now_ms() + (wait < REFUSED_BACKOFF_MAX_MS ? wait : REFUSED_BACKOFF_MAX_MS);
  wait_here(b, m, 0);
}

static void confirmed(abroker *b, uint64_t tag, int multiple, int ok) {
  for (amsg **pp = &b->waiting; *pp;) {
    amsg *m = *pp;
    if (!m->pub_seq || (multiple ? m->pub_seq > tag : m->pub_seq != tag)) {
      pp = &m->next;
      continue;
    }
    *pp = m->next;
    if (!ok) {
      refused(b, m); /* back on the list with pub_seq 0: passed over below */
      continue;
    }
    finish(b, m, amqp_basic_ack(b->conn, CH, m->tag, 0) == 0);
  }
}

/* ---- the thread: commands and frames ---- */

uint64_t amqp_now_ms(void) { return uv_hrtime() / 1000000; }

uint64_t amqp_wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* A copy with x-idem-due is held until then only if that is at most the
 * longest idem puts a message off, plus this much for consumers' clocks
 * that disagree: a value further ahead is no due time of idem's (a
 * producer's, say), and would hold the message and a prefetch slot. */
#define HOLD_SKEW_MS 60000ULL

/* How long a stop waits for the confirms of the copies it made. */
#define STOP_WAIT_MS 5000

/* One settle asked by the loop. 0, or -1 when the connection failed. */
static int run_command(abroker *b, amsg *m) {
  if (!b->conn || m->gen != b->gen) {
    finish(b, m, 0); /* its connection is gone: the broker requeued it */
    return 0;
  }
  if (m->op == OP_ACK && !(m->reply_to && m->status)) {
    int rc = amqp_basic_ack(b->conn, CH, m->tag, 0);
    finish(b, m, rc == 0);
    return rc ? -1 : 0;
  }
  if (m->op == OP_LATER && m->due_ms > amqp_now_ms()) {
    wait_here(b, m, 0);
    return 0;
  }
  return publish_or_fail(b, m);
}

/* Publish the postponed messages (laters, and publishes refused) that are
 * due; the next due time. */
static int run_due(abroker *b, uint64_t *next_due) {
  uint64_t now = amqp_now_ms();
  *next_due = now + 1000;
  for (amsg **pp = &b->waiting; *pp;) {
    amsg *m = *pp;
    if (m->pub_seq || !m->due_ms) {
      pp = &m->next;
      continue;
    }
    if (m->due_ms > now) {
      if (m->due_ms < *next_due)
        *next_due = m->due_ms;
      pp = &m->next;
      continue;
    }
    *pp = m->next;
    m->due_wall = 0; /* due: the copy carries no x-idem-due */
    if (publish_or_fail(b, m))
      return -1;
  }
  return 0;
}

/* Stopping: the laters that wait here for their delay are published at
 * once, with x-idem-due, the wall-clock time they are due (a consumer
 * that gets the copy sooner holds it until then, see on_deliver), then
 * acked: a stop waits for no delay, and the copy counts the deliveries
 * the later would have. (A publish the server refused keeps its backoff.)
 * 0, or -1 when the connection failed. */
static int settle_postponed(abroker *b) {
  uint64_t now = amqp_now_ms(), wall = amqp_wall_ms();
  for (amsg **pp = &b->waiting; *pp;) {
    amsg *m = *pp;
    if (m->pub_seq || m->op != OP_LATER || m->refused || m->due_ms <= now) {
      pp = &m->next;
      continue;
    }
    *pp = m->next;
    m->due_wall = wall + (m->due_ms - now);
    m->due_ms = 0;
    if (publish_or_fail(b, m))
      return -1;
  }
  return 0;
}

/* Stopping: the consumer is cancelled (basic.cancel, its cancel-ok read
 * with the other frames), so that the acks of the drain free no prefetch
 * slot for a new delivery. */
static int cancel_consumer(abroker *b) {
  if (b->cancelled)
    return 0;
  b->cancelled = 1;
  amqp_basic_cancel_t c = {.consumer_tag = {b->ctag_len, b->ctag}, .nowait = 0};
  return amqp_send_method(b->conn, CH, AMQP_BASIC_CANCEL_METHOD, &c) ? -1 : 0;
}

static int on_deliver(abroker *b, const amqp_frame_t *f) {
  const amqp_basic_deliver_t *d = f->payload.method.decoded;
  uint64_t tag = d->delivery_tag;
  amqp_basic_deliver_t copy = *d;
  amqp_message_t msg;
  amqp_rpc_reply_t r = amqp_read_message(b->conn, f->channel, &msg, 0);
  if (r.reply_type != AMQP_RESPONSE_NORMAL)
    return -1;
  amsg *m = amqp_wrap(b, &copy, &msg);
  amqp_destroy_message(&msg);
  if (!m) /* out of memory: back to the queue */
    return amqp_basic_nack(b->conn, CH, tag, 0, 1) ? -1 : 0;
  /* a copy a stop published before it was due is held here, unacked,
   * until then, as the later that made it would have been */
  uint64_t wall = amqp_wall_ms();
  uint64_t hold_max = (uint64_t)b->base.o.max_delay_ms + HOLD_SKEW_MS;
  int hold = m->due_wall > wall && m->due_wall - wall <= hold_max;
  /* handed over only while the loop still takes deliveries: looked at
   * under the same lock, so none arrives once it has begun to close */
  uv_mutex_lock(&b->mu);
  int stopping = b->stop, taken = !stopping && !hold;
  if (taken) {
    m->next = b->inq;
    b->inq = m;
  }
  uv_mutex_unlock(&b->mu);
  if (taken) {
    uv_async_send(&b->async);
    return 0;
  }
  /* Sent before the server took the basic.cancel (or held, see above,
   * when the stop came). A nack with requeue
   * would bring it back flagged redelivered, a delivery counted that never
   * ran: it goes back as a copy (as a later that did not run), confirmed,
   * then the original acked. */
  m->internal = 1;
  m->op = OP_LATER;
  m->due_ms = 0;
  if (m->m.deliveries > 0)
    m->m.deliveries--;
  if (!stopping) { /* held until due, then published again (run_due) */
    m->due_ms = amqp_now_ms() + (m->due_wall - wall);
    wait_here(b, m, 0);
    return 0;
  }
  return publish_or_fail(b, m);
}

static int internal_pending(abroker *b) {
  for (amsg *m = b->waiting; m; m = m->next)
    if (m->internal)
      return 1;
  return 0;
}

/* Read every frame there is without waiting: 0, or -1 when the
 * connection failed or the server closed it (why says so). */
static int read_frames(abroker *b, char *why, size_t len) {
  for (;;) {
    amqp_frame_t f;
    struct timeval zero = {0, 0};
    int rc = amqp_simple_wait_frame_noblock(b->conn, &f, &zero);
    if (rc == AMQP_STATUS_TIMEOUT)
      break;
    if (rc != AMQP_STATUS_OK) {
      snprintf(why, len, "%s", amqp_error_string2(rc));
      return -1;
    }
    if (f.frame_type != AMQP_FRAME_METHOD)
      continue;
    amqp_method_number_t id = f.payload.method.id;
    if (id == AMQP_BASIC_DELIVER_METHOD) {
      if (on_deliver(b, &f))
        return snprintf(why, len, "reading a message failed"), -1;
    } else if (id == AMQP_BASIC_ACK_METHOD) {
      const amqp_basic_ack_t *a = f.payload.method.decoded;
      confirmed(b, a->delivery_tag, a->multiple, 1);
    } else if (id == AMQP_BASIC_NACK_METHOD) {
      const amqp_basic_nack_t *a = f.payload.method.decoded;
      confirmed(b, a->delivery_tag, a->multiple, 0);
    } else if (id == AMQP_CHANNEL_CLOSE_METHOD || id == AMQP_CONNECTION_CLOSE_METHOD ||
               id == AMQP_BASIC_CANCEL_METHOD) {
      return snprintf(why, len, "the server closed the channel or cancelled the consumer"), -1;
    }
  }
  amqp_maybe_release_buffers(b->conn);
  return 0;
}

/* Wait for the socket, the wake pipe or the next due time. */
static void wait_io(abroker *b, uint64_t next_due) {
  struct pollfd p[2] = {{.fd = b->wake_fd[0], .events = POLLIN}, {.fd = -1}};
  if (b->conn) {
    if (amqp_frames_enqueued(b->conn) || amqp_data_in_buffer(b->conn))
      return;
    p[1].fd = amqp_get_sockfd(b->conn);
    p[1].events = POLLIN;
  }
  uint64_t now = amqp_now_ms();
  int timeout = next_due > now ? (int)(next_due - now) : 0;
  poll(p, 2, timeout > 1000 ? 1000 : timeout);
  char buf[256];
  while (read(b->wake_fd[0], buf, sizeof buf) > 0) {
  }
}

static int take_stop(abroker *b, amsg **cmds) {
  uv_mutex_lock(&b->mu);
  int stop = b->stop;
  *cmds = b->cmdq;
  b->cmdq = NULL;
  uv_mutex_unlock(&b->mu);
  return stop;
}

static void note_down(abroker *b, const char *why, char *last, size_t len) {
  if (strcmp(why, last))
    fprintf(stderr, "idem consume: amqp broker %s:%d: %s; reconnecting\n", b->base.uri.host, b->base.uri.port,
            why);
  snprintf(last, len, "%s", why);
}

void amqp_thread_main(void *arg) {
  abroker *b = arg;
  char why[300], last[300] = "";
  int64_t backoff = 100;
  uint64_t stop_deadline = 0;
  for (;;) {
    amsg *cmds;
    int stop = take_stop(b, &cmds);
    int failed = 0;
    amsg *rev = NULL; /* oldest first: the queue is LIFO */
    while (cmds) {
      amsg *n = cmds->next;
      cmds->next = rev;
      rev = cmds;
      cmds = n;
    }
    for (amsg *m = rev, *next; m; m = next) {
      next = m->next;
      failed |= run_command(b, m);
    }
    if (stop == 2) {
      /* the copies of what came after the cancel are settled first (their
       * originals, requeued by a close, would count a delivery), for a
       * while */
      if (!stop_deadline)
        stop_deadline = amqp_now_ms() + STOP_WAIT_MS;
      if (!b->conn || !internal_pending(b) || amqp_now_ms() >= stop_deadline)
        break;
    }
    if (!b->conn) {
      if (stop) { /* nothing will come: what the loop still holds fails */
        wait_io(b, amqp_now_ms() + 100);
        continue;
      }
      if (connect_broker(b, why, sizeof why)) {
        note_down(b, why, last, sizeof last);
        teardown(b, 0);
        wait_io(b, amqp_now_ms() + (uint64_t)backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        continue;
      }
      if (last[0])
        fprintf(stderr, "idem consume: amqp broker %s:%d: connected again\n", b->base.uri.host,
                b->base.uri.port);
      last[0] = 0;
      backoff = 100;
      set_up(b, 1);
    }
    uint64_t next_due;
    snprintf(why, sizeof why, "publish failed");
    if (!failed && stop && cancel_consumer(b)) {
      snprintf(why, sizeof why, "basic.cancel failed");
      failed = 1;
    }
    if (failed || (stop && settle_postponed(b)) || run_due(b, &next_due) ||
        read_frames(b, why, sizeof why)) {
      note_down(b, why, last, sizeof last);
      teardown(b, 0);
      continue;
    }
    wait_io(b, next_due);
  }
  teardown(b, 1);
  uv_mutex_lock(&b->mu);
  b->thread_done = 1;
  uv_mutex_unlock(&b->mu);
  uv_async_send(&b->async);
}


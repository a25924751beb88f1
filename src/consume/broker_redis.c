/*
 * broker_redis.c - Redis Streams as a broker for `idem consume`:
 *
 *   redis://[user:pass@]host[:port][/db]?stream=NAME&group=NAME[&consumer=NAME]
 *
 * A consumer group (created at the stream's start with MKSTREAM when
 * missing, so entries already there are consumed). Two connections: one
 * blocks in XREADGROUP (COUNT bounded by the flow's free concurrency, BLOCK
 * one reclaim tick), the other carries the rest, so that acks never wait
 * behind a read.
 *
 * Every entry read stays in the group's pending list (PEL) until it is
 * settled:
 *   ack    XACK.
 *   later  the entry stays pending, and XCLAIM ... IDLE (lock-ttl - delay)
 *          JUSTID makes it look idle for (lock-ttl - delay): the reclaim
 *          below hands it out again once delay has passed, to whichever
 *          consumer gets there first, and a consumer that dies meanwhile
 *          loses nothing. JUSTID leaves the delivery counter alone, so it
 *          counts deliveries, not postponements. A delay is at most
 *          --lock-ttl here.
 *   keep   XCLAIM ... JUSTID to this consumer: idle 0 again (r_keep).
 *   dead   one Lua script: XADD NAME:dead (idem-reason, idem-id,
 *          idem-deliveries, then the entry's own fields), then XACK: both or
 *          neither, and neither for an entry no longer pending.
 * Reclaim: every lock-ttl/10 (50 ms to 1 s), XAUTOCLAIM takes over entries
 * idle longer than --lock-ttl (a dead consumer's, or postponed ones), and
 * XPENDING tells their delivery counts. The read and the reclaim share the
 * free window, never asking for more than it together: a reclaim that is
 * due and finds the window held by a blocking read runs when the read
 * returns (within a tick), before the next read, and asks for all that is
 * free; one that came back full is due again at once, so a dead consumer's
 * backlog is taken over as fast as the window frees, not a page a tick.
 * Close: once everything is settled, the consumer leaves the group unless
 * it still has entries pending (forget_script). One that was killed never
 * leaves; the others remove it once it has nothing pending (reap_script).
 *
 * Either connection lost: both go, and come back with backoff (100 ms to
 * 2 s); the host name is looked up again each time, off the loop. Settles
 * that cannot be sent fail (ok 0): the entry stays pending and comes again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consume/broker.h"
#include "consume/broker_uri.h"
#include "consume/redis_conn.h"
#include "idem/idem.h"
#include "store/lookup.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000

typedef struct rbroker rbroker;

typedef struct rmsg {
  cs_msg m;
  rbroker *b;
  cs_settled_cb cb;
  void *arg;
  struct rmsg *next; /* failq */
} rmsg;

struct rbroker {
  cs_broker base; /* its URI, options, and closing state */
  const char *stream, *group;
  char consumer[160];
  char *dead;
  /* the host's addresses: a connection that never got ready moves the
   * next attempt on to the next one (a "localhost" whose first address,
   * ::1, refuses), and one that did keeps its turn */
  idem_addr_text addrs[IDEM_LOOKUP_MAX];
  unsigned addr_turn;
  rconn *rd, *wr;
  int rd_ready, wr_ready, up, resolving;
  uv_timer_t backoff_timer, claim_timer, fail_timer;
  int timers_open;
  int64_t backoff_ms;
  char block_ms[24]; /* the read's BLOCK: one reclaim tick */
  unsigned free_slots;
  /* asked of Redis by the read and by the takeover in flight: each asks
   * for what the other left, so the two never bring more than the window */
  unsigned read_asked, claim_asked;
  int reading, claiming;
  /* A takeover is due after a tick, or at once after one that filled its
   * page (more may be waiting). The turn goes to the takeover when a read
   * is sent and to the read when a takeover is: a blocking read holds the
   * window nearly all the time, and a busy stream would take every slot
   * that frees, so whoever went last lets the other go first. */
  int claim_due, claim_turn;
  char cursor[64];
  rmsg *failq;
  size_t outstanding; /* delivered, not yet settled */
  size_t settling;    /* settles in flight */
  int reaping;        /* reap_script sent, not yet answered */
  uint64_t reaped_at; /* uv_now when reap_script was last sent */
  int reap_failed;    /* its refusal logged already */
  int leaving;        /* closing: forget_script sent, not yet answered */
  int left;           /* closing: forget_script done (or not possible) */
  char last_err[160];
};

/* An entry no longer pending (settled already, by another copy of it held
 * somewhere) gets no second dead letter; XADD comes before XACK, so that a
 * failed XADD (Redis does not roll a script back) leaves it pending. */
static const char dead_script[] =
    "if #redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then return 0 end\n"
    "redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))\n"
    "return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])\n";

/* A consumer that leaves with nothing pending is deleted from the group:
 * named HOST-PID by default, every restart is a new consumer, and the group
 * kept them all, for good. One with entries pending stays, so that they are
 * taken over (DELCONSUMER would drop them from the group's pending list). */
static const char forget_script[] =
    "if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end\n"
    "redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])\n"
    "return 1\n";

/* A consumer killed (SIGKILL, a crash, a lost host) never leaves, and
 * named HOST-PID, each one stayed in the group for good. So every consumer
 * now and then removes those with nothing pending that have not been heard
 * from for longer than --lock-ttl: their entries, taken over after that
 * long, are no longer theirs. A live consumer with nothing to do looks the
 * same (Redis 7.0 counts idle time from the last read that brought
 * something); removing it loses nothing, as the next entry handed to it
 * makes it again. Not logged: on a quiet stream that is every --lock-ttl.
 * ARGV: the group, the idle limit in ms, this consumer's name. */
static const char reap_script[] =
    "local n = 0\n"
    "for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do\n"
    "  local f = {}\n"
    "  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end\n"
    "  if f['pending'] == 0 and f['idle'] > tonumber(ARGV[2]) and f['name'] ~= ARGV[3] then\n"
    "    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])\n"
    "    n = n + 1\n"
    "  end\n"
    "end\n"
    "return n\n";

static void conn_start(rbroker *b);
static void maybe_done(rbroker *b);

/* ---- the URI ---- */

static const char *const r_params[] = {"stream", "group", "consumer", NULL};

static int r_check_uri(const cs_uri *u, char *err, size_t len) {
  const char *stream = cs_uri_param(u, "stream"), *group = cs_uri_param(u, "group");
  if (!stream || !*stream || !group || !*group)
    return snprintf(err, len, "a Redis broker needs ?stream=NAME&group=NAME"), -1;
  const char *consumer = cs_uri_param(u, "consumer");
  if (consumer && !*consumer) /* every process would share the name "" */
    return snprintf(err, len, "consumer= is empty: give a name, or leave it out for HOST-PID"), -1;
  for (const char *p = u->path; *p; p++)
    if (*p < '0' || *p > '9' || p - u->path > 4)
      return snprintf(err, len, "the path is the database number (e.g. /0), not '%s'",
                      u->path), -1;
  return 0;
}

/* ---- messages ---- */

static void msg_free(rmsg *m) {
  cs_msg_free_headers(&m->m);
  free(m->m.body);
  free(m);
}

/* An entry [id, [field, value, ...]] as a message; NULL for a deleted one
 * (its fields nil) or when out of memory. */
static rmsg *entry_msg(rbroker *b, const redisReply *e) {
  if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING ||
      e->element[1]->type != REDIS_REPLY_ARRAY)
    return NULL;
  const redisReply *f = e->element[1];
  rmsg *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->b = b;
  m->m.id = cs_dup(e->element[0]->str, e->element[0]->len);
  m->m.headers = calloc(f->elements / 2 + 1, sizeof *m->m.headers);
  int bad = !m->m.id || !m->m.headers;
  for (size_t i = 0; !bad && i + 1 < f->elements; i += 2) {
    const redisReply *k = f->element[i], *v = f->element[i + 1];
    if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
      continue;
    /* a name holding a NUL is no header's: read up to the NUL, it would
     * pass for another field's, to the handler and to --key header:NAME
     * (the dead letter still copies it, as every field) */
    if (memchr(k->str, 0, k->len))
      continue;
    if (k->len == 4 && !memcmp(k->str, "body", 4) && !m->m.body) {
      bad = !(m->m.body = cs_dup(v->str, v->len));
      m->m.body_len = v->len;
      continue;
    }
    cs_header *h = &m->m.headers[m->m.nheaders];
    h->name = cs_dup(k->str, k->len);
    h->value = cs_dup(v->str, v->len);
    h->value_len = v->len;
    bad = !h->name || !h->value;
    m->m.nheaders++;
    /* a field given twice counts as its first, as body does and as
     * --key header:NAME finds it */
    if (k->len == 10 && !memcmp(k->str, "message_id", 10)) {
      if (!m->m.message_id) {
        m->m.message_id = h->value;
        m->m.message_id_len = h->value_len;
      }
    } else if (k->len == 12 && !m->m.content_type &&
               (!strncasecmp(k->str, "content-type", 12) || !memcmp(k->str, "content_type", 12)))
      m->m.content_type = h->value;
  }
  if (!bad && !m->m.body)
    bad = !(m->m.body = cs_dup("", 0));
  if (bad) {
    msg_free(m);
    return NULL;
  }
  return m;
}

static void deliver(rbroker *b, rmsg *m, unsigned deliveries) {
  m->m.deliveries = deliveries ? deliveries : 1;
  b->outstanding++;
  if (b->free_slots)
    b->free_slots--;
  b->base.o.on_message(b->base.o.arg, &m->m);
}

/* ---- settling ---- */

static void settled(rmsg *m, int ok) {
  rbroker *b = m->b;
  if (m->cb)
    m->cb(m->arg, &m->m, ok);
  msg_free(m);
  b->outstanding--;
  maybe_done(b);
}

static void on_fail_timer(uv_timer_t *t) {
  rbroker *b = t->data;
  rmsg *q = b->failq;
  b->failq = NULL;
  while (q) {
    rmsg *next = q->next;
    settled(q, 0);
    q = next;
  }
}

static void on_settle_reply(redisAsyncContext *ac, void *reply, void *priv) {
  rmsg *m = priv;
  redisReply *r = reply;
  (void)ac;
  m->b->settling--;
  int ok = r && r->type != REDIS_REPLY_ERROR;
  if (r && !ok)
    fprintf(stderr, "idem consume: redis refused to settle entry %s: %.200s\n", m->m.id, r->str);
  settled(m, ok);
}

/* A settle that cannot go fails from the loop, never from inside the call
 * that asked for it. */
static void settle_fail(rmsg *m) {
  rbroker *b = m->b;
  m->next = b->failq;
  b->failq = m;
  uv_timer_start(&b->fail_timer, on_fail_timer, 0, 0);
}

static void settle_send(rmsg *m, int argc, const char **argv, const size_t *lens) {
  rbroker *b = m->b;
  if (b->up && !rconn_send(b->wr, argc, argv, lens, on_settle_reply, m)) {
    b->settling++;
    return;
  }
  settle_fail(m);
}

static void r_ack(cs_broker *base, cs_msg *msg, const cs_answer *answer, cs_settled_cb cb,
                  void *arg) {
  (void)answer;
  rbroker *b = (rbroker *)base;
  rmsg *m = (rmsg *)msg;
  m->cb = cb;
  m->arg = arg;
  const char *argv[] = {"XACK", b->stream, b->group, m->m.id};
  settle_send(m, 4, argv, NULL);
}

static void r_later(cs_broker *base, cs_msg *msg, int64_t delay_ms, int ran, cs_settled_cb cb,
                    void *arg) {
  (void)ran; /* Redis counts every delivery */
  rbroker *b = (rbroker *)base;
  rmsg *m = (rmsg *)msg;
  m->cb = cb;
  m->arg = arg;
  int64_t idle = b->base.o.lock_ttl_ms - delay_ms;
  char idle_s[24];
  snprintf(idle_s, sizeof idle_s, "%lld", (long long)(idle > 0 ? idle : 0));
  const char *argv[] = {"XCLAIM", b->stream, b->group, b->consumer, "0",
                        m->m.id, "IDLE", idle_s, "JUSTID"};
  settle_send(m, 9, argv, NULL);
}

static void r_dead(cs_broker *base, cs_msg *msg, const char *reason, cs_settled_cb cb,
                   void *arg) {
  rbroker *b = (rbroker *)base;
  rmsg *m = (rmsg *)msg;
  m->cb = cb;
  m->arg = arg;
  size_t n = 15 + 2 * m->m.nheaders;
  const char **argv = calloc(n, sizeof *argv);
  size_t *lens = calloc(n, sizeof *lens);
  if (!argv || !lens) {
    free(argv);
    free(lens);
    settle_fail(m); /* comes again */
    return;
  }
  char deliveries[16];
  snprintf(deliveries, sizeof deliveries, "%u", m->m.deliveries);
  const char *fixed[] = {"EVAL", dead_script, "2", b->dead, b->stream, b->group, m->m.id,
                         "idem-reason", reason, "idem-id", m->m.id, "idem-deliveries",
                         deliveries};
  size_t k = 0;
  for (; k < 13; k++) {
    argv[k] = fixed[k];
    lens[k] = strlen(fixed[k]);
  }
  for (size_t i = 0; i < m->m.nheaders; i++, k += 2) {
    argv[k] = m->m.headers[i].name;
    lens[k] = strlen(argv[k]);
    argv[k + 1] = m->m.headers[i].value;
    lens[k + 1] = m->m.headers[i].value_len;
  }
  argv[k] = "body";
  lens[k++] = 4;
  argv[k] = m->m.body;
  lens[k++] = m->m.body_len;
  settle_send(m, (int)k, argv, lens);
  free(argv);
  free(lens);
}

/* XCLAIM to this consumer with no IDLE sets the entry's idle time back to
 * 0, so the reclaim (here or in another consumer) leaves it alone for
 * another lock-ttl; JUSTID leaves its delivery counter as it is. */
static void r_keep(cs_broker *base, cs_msg *msg) {
  rbroker *b = (rbroker *)base;
  const char *argv[] = {"XCLAIM", b->stream, b->group, b->consumer, "0", msg->id, "JUSTID"};
  if (b->up)
    rconn_send(b->wr, 7, argv, NULL, NULL, NULL);
}

/* ---- reading new entries ---- */

static void kick(rbroker *b);

/* Deliver the entries of one stream's reply: [[stream, [entry, ...]]]. */
static void deliver_read(rbroker *b, const redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
    return;
  const redisReply *s = r->element[0];
  if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 || s->element[1]->type != REDIS_REPLY_ARRAY)
    return;
  const redisReply *entries = s->element[1];
  for (size_t i = 0; i < entries->elements; i++) {
    rmsg *m = entry_msg(b, entries->element[i]);
    if (m)
      deliver(b, m, 1);
    /* else out of memory: it stays pending and is reclaimed later */
  }
}

static void drop_all(rbroker *b, const char *why);

static void on_read(redisAsyncContext *ac, void *reply, void *priv) {
  rbroker *b = priv;
  redisReply *r = reply;
  (void)ac;
  b->reading = 0;
  b->read_asked = 0;
  if (!r) {
    maybe_done(b);
    return; /* the connection went: gone() reconnects */
  }
  if (r->type == REDIS_REPLY_ERROR) {
    char why[200];
    snprintf(why, sizeof why, "XREADGROUP refused: %.150s", r->str);
    drop_all(b, why); /* NOGROUP: the stream or group went; the reconnect recreates it */
    return;
  }
  deliver_read(b, r);
  kick(b);
  maybe_done(b);
}

static void kick_read(rbroker *b) {
  unsigned avail = b->free_slots > b->claim_asked ? b->free_slots - b->claim_asked : 0;
  if (!b->up || b->reading || b->base.closing || !avail)
    return;
  char count[16];
  snprintf(count, sizeof count, "%u", avail);
  const char *argv[] = {"XREADGROUP", "GROUP", b->group, b->consumer, "COUNT", count,
                        "BLOCK", b->block_ms, "STREAMS", b->stream, ">"};
  if (!rconn_send(b->rd, 11, argv, NULL, on_read, b)) {
    b->reading = 1;
    b->read_asked = avail;
    b->claim_turn = 1;
  }
}

/* ---- taking over idle entries ---- */

typedef struct {
  rbroker *b;
  int full; /* XAUTOCLAIM gave as many entries as it was asked for */
  size_t n;
  rmsg *v[];
} claim_batch;

static void batch_free(claim_batch *cb) {
  for (size_t i = 0; i < cb->n; i++)
    if (cb->v[i])
      msg_free(cb->v[i]);
  free(cb);
}

/* The takeover in flight is over; full: its page came back full, so more
 * idle entries may be waiting: it is due again, not at the next tick. */
static void claim_done(rbroker *b, int full) {
  b->claiming = 0;
  b->claim_asked = 0;
  if (full)
    b->claim_due = 1;
  kick(b);
  maybe_done(b);
}

/* XPENDING's reply: [[id, consumer, idle, deliveries], ...]. */
static void on_counts(redisAsyncContext *ac, void *reply, void *priv) {
  claim_batch *cb = priv;
  rbroker *b = cb->b;
  redisReply *r = reply;
  (void)ac;
  if (!r || r->type != REDIS_REPLY_ARRAY) {
    batch_free(cb); /* still pending: taken over again later */
    claim_done(b, 0);
    return;
  }
  for (size_t i = 0; i < cb->n; i++) {
    unsigned count = 1;
    for (size_t j = 0; j < r->elements; j++) {
      const redisReply *e = r->element[j];
      if (e->type == REDIS_REPLY_ARRAY && e->elements == 4 &&
          e->element[0]->type == REDIS_REPLY_STRING && !strcmp(e->element[0]->str, cb->v[i]->m.id)) {
        count = (unsigned)e->element[3]->integer;
        break;
      }
    }
    rmsg *m = cb->v[i];
    cb->v[i] = NULL;
    deliver(b, m, count);
  }
  int full = cb->full;
  free(cb);
  claim_done(b, full);
}

static void ask_counts(rbroker *b, claim_batch *cb) {
  const char *argv[] = {"XPENDING", b->stream, b->group, cb->v[0]->m.id, cb->v[cb->n - 1]->m.id,
                        "100000", b->consumer};
  if (rconn_send(b->wr, 7, argv, NULL, on_counts, cb)) {
    batch_free(cb);
    claim_done(b, 0);
  }
}

/* XAUTOCLAIM's reply: [cursor, [entry, ...], (deleted ids)]. */
static void on_autoclaim(redisAsyncContext *ac, void *reply, void *priv) {
  rbroker *b = priv;
  redisReply *r = reply;
  (void)ac;
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
    if (r && r->type == REDIS_REPLY_ERROR)
      fprintf(stderr, "idem consume: XAUTOCLAIM refused: %.200s\n", r->str);
    claim_done(b, 0);
    return;
  }
  snprintf(b->cursor, sizeof b->cursor, "%s", r->element[0]->str);
  const redisReply *entries = r->element[1];
  claim_batch *cb = calloc(1, sizeof *cb + entries->elements * sizeof cb->v[0]);
  if (cb) {
    cb->b = b;
    cb->full = entries->elements >= b->claim_asked;
    for (size_t i = 0; i < entries->elements; i++)
      if ((cb->v[cb->n] = entry_msg(b, entries->element[i])))
        cb->n++;
  }
  if (!cb || !cb->n) {
    int full = cb && cb->full; /* all deleted ones: more may follow */
    free(cb);
    claim_done(b, full);
    return;
  }
  ask_counts(b, cb);
}

/* A takeover that is due asks for what the read left; with nothing left
 * it stays due, for the read's return or the next credit. */
static void kick_claim(rbroker *b) {
  unsigned avail = b->free_slots > b->read_asked ? b->free_slots - b->read_asked : 0;
  if (!b->up || !b->claim_due || b->claiming || b->base.closing || !avail)
    return;
  char idle[24], count[16];
  snprintf(idle, sizeof idle, "%lld", (long long)b->base.o.lock_ttl_ms);
  snprintf(count, sizeof count, "%u", avail);
  const char *argv[] = {"XAUTOCLAIM", b->stream, b->group, b->consumer, idle,
                        b->cursor, "COUNT", count};
  if (!rconn_send(b->wr, 8, argv, NULL, on_autoclaim, b)) {
    b->claiming = 1;
    b->claim_asked = avail;
    b->claim_due = b->claim_turn = 0;
  }
}

static void on_reaped(redisAsyncContext *ac, void *reply, void *priv) {
  rbroker *b = priv;
  redisReply *r = reply;
  (void)ac;
  b->reaping = 0;
  if (r && r->type == REDIS_REPLY_ERROR && !b->reap_failed) {
    b->reap_failed = 1; /* an ACL without XINFO: said once, not every --lock-ttl */
    fprintf(stderr, "idem consume: cannot remove dead consumers of group %s: %.200s\n", b->group, r->str);
  }
  maybe_done(b);
}

/* At most once a --lock-ttl, and at once when connected. */
static void maybe_reap(rbroker *b) {
  uint64_t now = uv_now(b->base.o.loop);
  if (!b->up || b->reaping || b->base.closing ||
      (b->reaped_at && now - b->reaped_at < (uint64_t)b->base.o.lock_ttl_ms))
    return;
  char idle[24];
  snprintf(idle, sizeof idle, "%lld", (long long)b->base.o.lock_ttl_ms);
  const char *argv[] = {"EVAL", reap_script, "1", b->stream, b->group, idle, b->consumer};
  if (!rconn_send(b->wr, 7, argv, NULL, on_reaped, b)) {
    b->reaping = 1;
    b->reaped_at = now;
  }
}

static void on_claim_timer(uv_timer_t *t) {
  rbroker *b = t->data;
  b->claim_due = 1;
  kick_claim(b);
  maybe_reap(b);
}

/* Hand the free window out, first to whichever did not go last. */
static void kick(rbroker *b) {
  if (b->claim_turn) {
    kick_claim(b);
    kick_read(b);
  } else {
    kick_read(b);
    kick_claim(b);
  }
}

/* ---- the connections ---- */

static void set_up(rbroker *b, int up) {
  if (b->up == up)
    return;
  b->up = up;
  if (b->base.o.on_state)
    b->base.o.on_state(b->base.o.arg, up);
}

static void on_backoff(uv_timer_t *t) { conn_start(t->data); }

static void drop_all(rbroker *b, const char *why) {
  rconn *rd = b->rd, *wr = b->wr;
  if (!b->up)
    b->addr_turn++;
  b->rd = b->wr = NULL;
  b->rd_ready = b->wr_ready = 0;
  set_up(b, 0);
  if (why && strcmp(why, b->last_err)) {
    fprintf(stderr, "idem consume: redis broker %s:%d: %s; reconnecting\n", b->base.uri.host,
            b->base.uri.port, why);
    snprintf(b->last_err, sizeof b->last_err, "%s", why);
  }
  rconn_close(rd);
  rconn_close(wr);
  if (b->base.closing) {
    maybe_done(b);
    return;
  }
  uv_timer_start(&b->backoff_timer, on_backoff, (uint64_t)(b->backoff_ms / 2 + rand() % (b->backoff_ms / 2 + 1)), 0);
  b->backoff_ms = b->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b->backoff_ms * 2;
}

static void became_ready(rbroker *b) {
  if (!b->rd_ready || !b->wr_ready)
    return;
  b->backoff_ms = BACKOFF_MIN_MS;
  if (b->last_err[0]) {
    fprintf(stderr, "idem consume: redis broker %s:%d: connected again\n", b->base.uri.host,
            b->base.uri.port);
    b->last_err[0] = 0;
  }
  set_up(b, 1);
  kick(b);
  maybe_reap(b);
}

static void on_group(redisAsyncContext *ac, void *reply, void *priv) {
  rbroker *b = priv;
  redisReply *r = reply;
  (void)ac;
  if (!r)
    return;
  if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9)) {
    char why[200];
    snprintf(why, sizeof why, "XGROUP CREATE refused: %.150s", r->str);
    drop_all(b, why);
    return;
  }
  b->wr_ready = 1;
  became_ready(b);
}

static void conn_ready(void *arg, rconn *c) {
  rbroker *b = arg;
  if (c == b->rd) {
    b->rd_ready = 1;
    became_ready(b);
    return;
  }
  const char *argv[] = {"XGROUP", "CREATE", b->stream, b->group, "0", "MKSTREAM"};
  if (rconn_send(c, 6, argv, NULL, on_group, b))
    drop_all(b, "cannot send XGROUP CREATE");
}

static void conn_gone(void *arg, rconn *c, const char *why) {
  rbroker *b = arg;
  if (c == b->rd)
    b->rd = NULL;
  else if (c == b->wr)
    b->wr = NULL;
  else
    return;
  drop_all(b, why);
}

/* The credentials of the URI as Redis and the Redis store read them:
 * "user:pass@" is AUTH user pass, and "user:@" AUTH user "" (an ACL user
 * made with nopass); ":pass@" (no user) and a bare "pass@" (as redis-cli
 * takes it) are AUTH pass, the default user's password. */
static void redis_credentials(const cs_uri *u, const char **user, const char **password) {
  *user = u->user && *u->user && u->password ? u->user : NULL;
  *password = u->password ? u->password : u->user;
  if (*password && !**password && !*user)
    *password = NULL; /* "redis://:@host": nothing to send */
}

static void on_resolved(void *owner, int status, const struct addrinfo *ai) {
  rbroker *b = owner;
  b->resolving = 0;
  if (b->base.closing) {
    maybe_done(b);
    return;
  }
  int n = status ? 0 : idem_lookup_addresses(ai, b->addrs, IDEM_LOOKUP_MAX);
  if (n < 1) {
    char why[200];
    snprintf(why, sizeof why, "cannot resolve %.100s: %s", b->base.uri.host,
             status ? uv_strerror(status) : "no address");
    drop_all(b, why);
    return;
  }
  const char *user, *password;
  redis_credentials(&b->base.uri, &user, &password);
  rconn_opts o = {.addr = b->addrs[b->addr_turn % (unsigned)n], .port = b->base.uri.port, .user = user,
                  .password = password, .db = atoi(b->base.uri.path),
                  .connect_timeout_ms = 2000, .ready = conn_ready, .gone = conn_gone, .arg = b};
  const char *why = NULL;
  b->rd = rconn_open(b->base.o.loop, &o, &why);
  b->wr = b->rd ? rconn_open(b->base.o.loop, &o, &why) : NULL;
  if (!b->wr)
    drop_all(b, why);
}

static void conn_start(rbroker *b) {
  if (b->resolving || b->base.closing)
    return;
  if (idem_lookup_start(b->base.o.loop, b->base.uri.host, on_resolved, b) == 0)
    b->resolving = 1;
  else
    drop_all(b, "cannot start a host lookup");
}

/* ---- the table ---- */

static void r_credit(cs_broker *base, unsigned n) {
  rbroker *b = (rbroker *)base;
  b->free_slots = n;
  kick(b);
}

static int r_start(cs_broker *base, char **why) {
  rbroker *b = (rbroker *)base;
  const cs_broker_opts *o = &b->base.o;
  (void)why; /* nothing can fail here: connecting is retried */
  b->stream = cs_uri_param(&b->base.uri, "stream");
  b->group = cs_uri_param(&b->base.uri, "group");
  const char *consumer = cs_uri_param(&b->base.uri, "consumer");
  char host[64] = "host";
  gethostname(host, sizeof host - 1);
  if (consumer)
    snprintf(b->consumer, sizeof b->consumer, "%s", consumer);
  else
    snprintf(b->consumer, sizeof b->consumer, "%s-%ld", host, (long)getpid());
  if (asprintf(&b->dead, "%s:dead", b->stream) < 0)
    b->dead = NULL;
  snprintf(b->cursor, sizeof b->cursor, "0-0");
  b->backoff_ms = BACKOFF_MIN_MS;
  uv_timer_init(o->loop, &b->backoff_timer);
  uv_timer_init(o->loop, &b->claim_timer);
  uv_timer_init(o->loop, &b->fail_timer);
  b->backoff_timer.data = b->claim_timer.data = b->fail_timer.data = b;
  b->timers_open = 3;
  int64_t every = o->lock_ttl_ms / 10;
  every = every < 50 ? 50 : every > 1000 ? 1000 : every;
  snprintf(b->block_ms, sizeof b->block_ms, "%lld", (long long)every);
  uv_timer_start(&b->claim_timer, on_claim_timer, (uint64_t)every, (uint64_t)every);
  conn_start(b);
  return 0;
}

static void timer_closed(uv_handle_t *h) {
  rbroker *b = h->data;
  if (--b->timers_open)
    return;
  free(b->dead);
  cs_broker_free(&b->base);
}

static void on_forgotten(redisAsyncContext *ac, void *reply, void *priv) {
  rbroker *b = priv;
  redisReply *r = reply;
  (void)ac;
  if (r && r->type == REDIS_REPLY_ERROR)
    fprintf(stderr, "idem consume: redis kept consumer %s in group %s: %.200s\n", b->consumer,
            b->group, r->str);
  b->leaving = 0;
  maybe_done(b);
}

/* Closing ends once nothing is in flight: no read, no reclaim, no lookup,
 * and every delivered message settled; then this consumer leaves the group
 * (forget_script), and the connections close. */
static void maybe_done(rbroker *b) {
  if (!b->base.closing || b->reading || b->claiming || b->reaping || b->resolving || b->outstanding ||
      b->settling || b->failq || b->leaving || !b->timers_open || uv_is_closing((uv_handle_t *)&b->claim_timer))
    return;
  if (!b->left) {
    b->left = 1;
    const char *argv[] = {"EVAL", forget_script, "1", b->stream, b->group, b->consumer};
    if (b->up && !rconn_send(b->wr, 6, argv, NULL, on_forgotten, b)) {
      b->leaving = 1;
      return;
    }
  }
  rconn *rd = b->rd, *wr = b->wr;
  b->rd = b->wr = NULL;
  rconn_close(rd);
  rconn_close(wr);
  uv_close((uv_handle_t *)&b->backoff_timer, timer_closed);
  uv_close((uv_handle_t *)&b->claim_timer, timer_closed);
  uv_close((uv_handle_t *)&b->fail_timer, timer_closed);
}

static void r_close(cs_broker *base) {
  rbroker *b = (rbroker *)base;
  uv_timer_stop(&b->claim_timer);
  uv_timer_stop(&b->backoff_timer);
  maybe_done(b);
}

const cs_broker_vt cs_broker_redis = CS_BROKER_VT("redis", rbroker, 6379, r);


/*
 * broker_nats.c - NATS JetStream as a broker for `idem consume`:
 *
 *   nats://[user:pass@]host[:port]?stream=NAME&consumer=NAME
 *
 * A durable pull consumer on the stream (created when missing: explicit
 * acks, AckWait = --lock-ttl, no delivery limit of its own, every message
 * from the start). libnats is thread-safe and does its own I/O and
 * reconnection (forever, every 100 ms), so this file runs it on its own
 * threads rather than through its libuv adapter (which moves only socket
 * I/O to the loop; deliveries would still come from libnats' threads):
 *
 *   fetch thread   connect (with backoff while the server is away), bind
 *                  the subscription, then natsSubscription_Fetch with a
 *                  batch of the flow's free concurrency, 1 s at a time;
 *                  messages go to the loop through a queue and a uv_async.
 *   the loop       acks (natsMsg_Ack), keeps (natsMsg_InProgress), later
 *                  (natsMsg_NakWithDelay: the
 *                  server redelivers after the delay, counting it),
 *   thread pool    dead letters: published to <subject>.dead (or
 *                  idem-dead.<STREAM>: see dead_subject_of) with a
 *                  Nats-Msg-Id derived from the message's stream sequence
 *                  (so a retry after a crash stores it once), the publish
 *                  acknowledged by JetStream, then natsMsg_Term: the message
 *                  never comes back. The dead subject is kept by a stream
 *                  <STREAM>_DEAD, created when missing.
 * A message not acked within AckWait (a consumer that died) is redelivered
 * by the server to the next fetch: the takeover. A subscription whose
 * consumer is gone, or whose connection is torn down, is retired: the
 * messages still held from it are settled through nothing (they come
 * again), and it lives until the last of them is freed.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <nats/nats.h>

#include "consume/broker.h"
#include "consume/broker_uri.h"
#include "idem/idem.h"

#define FETCH_WAIT_MS 1000
#define CONSUMER_CHECK_MS 5000
#define BACKOFF_MAX_MS 2000

typedef struct nbroker nbroker;

/* A pull subscription and the messages fetched through it. libnats settles
 * a message through the subscription it came from (it reads it, its
 * connection and its JetStream context at every ack), so one that is
 * retired (its consumer gone, or its connection torn down) while messages
 * of it are held is destroyed only with the last of them. */
typedef struct nsub {
  natsSubscription *sub;
  atomic_uint refs; /* the broker's while it fetches through it, one a message */
  int retired;      /* under b->mu: settles no longer go through it */
} nsub;

typedef struct nmsg {
  cs_msg m;
  nbroker *b;
  natsMsg *nm;
  nsub *from;
  cs_settled_cb cb;
  void *arg;
  int ok;
  char reason[512];
  uv_work_t work;
  struct nmsg *next;
} nmsg;

struct nbroker {
  cs_broker base; /* its URI, options, and closing state */
  const char *stream, *consumer;
  char subject[256], dead_subject[300], dead_stream[300];
  /* shared with the fetch thread, under mu */
  uv_mutex_t mu;
  uv_cond_t cv;
  unsigned credit;   /* what the flow last said it can take */
  unsigned fetching; /* asked of the server by the fetch in flight */
  nmsg *inq, *inq_tail;  /* fetched, for the loop */
  unsigned inq_len;      /* so many: not yet the flow's, so not in its credit */
  /* a fetch asks for credit - inq_len - fetching: the window holds */
  int stop, thread_done;
  struct nats_cbs *cbs; /* the connection's callbacks' view of this broker */
  atomic_int up, up_seen;
  /* the fetch thread's */
  uv_thread_t thread;
  char step[700]; /* what fetch_setup was doing when it failed */
  /* nc, js and sub are the fetch thread's; a dead letter's publish (in the
   * thread pool) reads js under js_lock, which the teardown takes to write */
  uv_rwlock_t js_lock;
  natsConnection *nc;
  jsCtx *js;
  nsub *sub;
  /* the loop's */
  uv_async_t wake;
  uv_timer_t done_timer;
  nmsg *doneq;
  size_t outstanding, works;
  int handles;
};

static const char *const n_params[] = {"stream", "consumer", NULL};

static int n_check_uri(const cs_uri *u, char *err, size_t len) {
  const char *s = cs_uri_param(u, "stream"), *c = cs_uri_param(u, "consumer");
  if (!s || !*s || !c || !*c || strpbrk(c, ". *>") || strpbrk(s, ". *>"))
    return snprintf(err, len, "a NATS broker needs ?stream=NAME&consumer=NAME (names without "
                              "'.', '*', '>' or spaces)"), -1;
  if (*u->path)
    return snprintf(err, len, "a NATS URI has no path"), -1;
  return 0;
}


/* ---- subscriptions ---- */

static nsub *nsub_new(natsSubscription *sub) {
  nsub *s = calloc(1, sizeof *s);
  if (!s) {
    natsSubscription_Destroy(sub);
    return NULL;
  }
  s->sub = sub;
  atomic_init(&s->refs, 1);
  return s;
}

/* The last reference destroys the subscription (an unsubscribe, which fails
 * harmlessly on a closed connection): from the fetch thread, or from the
 * loop when a message of a retired one is freed. natsSubscription_Destroy,
 * unlike natsSubscription_Unsubscribe, never deletes the consumer (libnats
 * deletes one it made itself on an unsubscribe). */
static void nsub_unref(nsub *s) {
  if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
    natsSubscription_Destroy(s->sub);
    free(s);
  }
}

/* The fetch thread is done with b->sub: its consumer is gone, or its
 * connection is being torn down. No settle goes through it from here on
 * (send_settle says why); the messages still held keep it alive. */
static void retire_sub(nbroker *b) {
  nsub *s = b->sub;
  b->sub = NULL;
  if (!s)
    return;
  uv_mutex_lock(&b->mu);
  s->retired = 1;
  uv_mutex_unlock(&b->mu);
  nsub_unref(s);
}

/* ---- messages ---- */

static void msg_free(nmsg *m) {
  cs_msg_free_headers(&m->m);
  natsMsg_Destroy(m->nm);
  nsub_unref(m->from);
  free(m);
}

typedef enum { SETTLE_ACK, SETTLE_LATER, SETTLE_KEEP, SETTLE_TERM } settle_op;

/* Sends a settle through the subscription m came from, unless that was
 * retired. Then its consumer is gone, and the one made again under the same
 * name delivers the stream from its start, m with it (a replay once its
 * record is kept): a settle would reach no one, or that new consumer,
 * which would take it for a delivery of its own of the same stream
 * sequence. Or its connection was closed, and the server redelivers m
 * after AckWait. Either way it fails here: m comes again. Under b->mu, as
 * the retire is, so that no settle through a retired subscription is sent
 * once the fetch thread goes on to make the consumer again. */
static natsStatus send_settle(nmsg *m, settle_op op, int64_t delay_ms) {
  nbroker *b = m->b;
  natsStatus s = NATS_CONNECTION_CLOSED;
  uv_mutex_lock(&b->mu);
  if (!m->from->retired) {
    switch (op) {
    case SETTLE_ACK: s = natsMsg_Ack(m->nm, NULL); break;
    case SETTLE_LATER: s = natsMsg_NakWithDelay(m->nm, delay_ms, NULL); break;
    case SETTLE_KEEP: s = natsMsg_InProgress(m->nm, NULL); break;
    case SETTLE_TERM: s = natsMsg_Term(m->nm, NULL); break;
    }
  }
  uv_mutex_unlock(&b->mu);
  return s;
}

/* Room for one more header in m: 0, or -1 out of memory. Each name
 * usually comes once, so the first nkeys slots are made at once. */
static int header_room(nmsg *m, size_t *cap, int nkeys) {
  if (m->m.nheaders < *cap)
    return 0;
  size_t want = *cap ? *cap * 2 : (size_t)nkeys;
  cs_header *h = realloc(m->m.headers, (want + 1) * sizeof *h);
  if (!h)
    return -1;
  memset(h + *cap, 0, (want + 1 - *cap) * sizeof *h);
  m->m.headers = h;
  *cap = want;
  return 0;
}

/* Every value of every header, in order: a header given twice is passed
 * on, and dead-lettered, twice. Its first value is the one a key, the
 * message id or the Content-Type is read from. */
static void take_headers(nmsg *m, natsMsg *nm, const char **keys, int nkeys) {
  size_t cap = 0;
  for (int i = 0; i < nkeys; i++) {
    const char **vals = NULL;
    int n = 0;
    if (natsMsgHeader_Values(nm, keys[i], &vals, &n) != NATS_OK)
      n = 0;
    for (int k = 0; k < n && !header_room(m, &cap, nkeys); k++) {
      cs_header *h = &m->m.headers[m->m.nheaders++];
      h->name = strdup(keys[i]);
      h->value = strdup(vals[k] ? vals[k] : "");
      h->value_len = h->value ? strlen(h->value) : 0;
      if (k > 0)
        continue;
      if (!strcasecmp(keys[i], "Nats-Msg-Id")) {
        m->m.message_id = h->value;
        m->m.message_id_len = h->value_len;
      } else if (!strcasecmp(keys[i], "Content-Type"))
        m->m.content_type = h->value;
    }
    free((void *)vals);
  }
}

/* A fetched message as a cs_msg (the body stays in the natsMsg). */
static nmsg *wrap(nbroker *b, natsMsg *nm) {
  nmsg *m = calloc(1, sizeof *m);
  jsMsgMetaData *meta = NULL;
  const char **keys = NULL;
  int nkeys = 0;
  if (!m || natsMsg_GetMetaData(&meta, nm) != NATS_OK) {
    free(m);
    natsMsg_Nak(nm, NULL);
    natsMsg_Destroy(nm);
    return NULL;
  }
  m->b = b;
  m->nm = nm;
  m->from = b->sub; /* the fetch thread's, which holds a reference meanwhile */
  atomic_fetch_add(&m->from->refs, 1);
  m->m.body = (char *)natsMsg_GetData(nm);
  m->m.body_len = (size_t)natsMsg_GetDataLength(nm);
  if (!m->m.body)
    m->m.body = "";
  m->m.deliveries = (unsigned)meta->NumDelivered;
  if (asprintf(&m->m.id, "%s:%llu", b->stream, (unsigned long long)meta->Sequence.Stream) < 0)
    m->m.id = NULL;
  jsMsgMetaData_Destroy(meta);
  if (natsMsgHeader_Keys(nm, &keys, &nkeys) == NATS_OK && nkeys > 0)
    take_headers(m, nm, keys, nkeys);
  free((void *)keys);
  return m;
}

/* ---- the fetch thread ---- */

/* libnats calls a connection back from a thread of its own, and after a
 * close too: the closed callback is the last one. The callbacks reach the
 * broker through this, one per connection, which lets go of the broker
 * when the teardown stops waiting for the closed callback (5 s at most, so
 * that a stop cannot hang); whichever of the two comes last frees it. */
typedef struct nats_cbs {
  uv_mutex_t mu;
  uv_cond_t cv;
  nbroker *b; /* NULL once the teardown stopped waiting */
  int closed;
} nats_cbs;

static nats_cbs *cbs_new(nbroker *b) {
  nats_cbs *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  uv_mutex_init(&c->mu);
  uv_cond_init(&c->cv);
  c->b = b;
  return c;
}

static void cbs_free(nats_cbs *c) {
  uv_cond_destroy(&c->cv);
  uv_mutex_destroy(&c->mu);
  free(c);
}

static void set_up_from(nats_cbs *c, int up) {
  uv_mutex_lock(&c->mu);
  if (c->b) {
    atomic_store(&c->b->up, up);
    uv_async_send(&c->b->wake);
  }
  uv_mutex_unlock(&c->mu);
}

static void on_disconnected(natsConnection *nc, void *arg) {
  (void)nc;
  set_up_from(arg, 0);
}

static void on_reconnected(natsConnection *nc, void *arg) {
  (void)nc;
  set_up_from(arg, 1);
}

static void on_closed(natsConnection *nc, void *arg) {
  nats_cbs *c = arg;
  (void)nc;
  uv_mutex_lock(&c->mu);
  c->closed = 1;
  int orphan = !c->b;
  uv_cond_broadcast(&c->cv);
  uv_mutex_unlock(&c->mu);
  if (orphan)
    cbs_free(c);
}

/* Close the connection and wait (a while) for its last callback. */
static void close_connection(nbroker *b) {
  nats_cbs *c = b->cbs;
  b->cbs = NULL;
  if (b->nc)
    natsConnection_Close(b->nc);
  if (!c) {
    if (b->nc)
      natsConnection_Destroy(b->nc);
    return;
  }
  uv_mutex_lock(&c->mu);
  uint64_t deadline = uv_hrtime() + 5000000000ULL;
  while (b->nc && !c->closed && uv_hrtime() < deadline)
    uv_cond_timedwait(&c->cv, &c->mu, 100 * 1000000ULL);
  int closed = c->closed || !b->nc;
  c->b = NULL; /* a closed callback still to come frees c */
  uv_mutex_unlock(&c->mu);
  if (b->nc)
    natsConnection_Destroy(b->nc);
  if (closed)
    cbs_free(c);
}

static void fetch_teardown(nbroker *b) {
  uv_rwlock_wrlock(&b->js_lock);
  retire_sub(b);
  jsCtx_Destroy(b->js);
  close_connection(b);
  b->js = NULL;
  b->nc = NULL;
  uv_rwlock_wrunlock(&b->js_lock);
}

/* The length of the first token of subject s (up to a '.' or the end). */
static size_t token_len(const char *s) {
  const char *dot = strchr(s, '.');
  return dot ? (size_t)(dot - s) : strlen(s);
}

/* Whether the subject filter f ('*' one token, '>' one or more to the end)
 * takes in the subject s, which has no wildcards. */
static int filter_takes(const char *f, const char *s) {
  for (;;) {
    size_t fl = token_len(f), sl = token_len(s);
    if (fl == 1 && f[0] == '>')
      return 1;
    if (!(fl == 1 && f[0] == '*') && (fl != sl || memcmp(f, s, fl) != 0))
      return 0;
    if (!f[fl] || !s[sl])
      return !f[fl] && !s[sl];
    f += fl + 1;
    s += sl + 1;
  }
}

static int has_wildcard(const char *subject) {
  for (const char *t = subject;;) {
    size_t n = token_len(t);
    if (n == 1 && (t[0] == '*' || t[0] == '>'))
      return 1;
    if (!t[n])
      return 0;
    t += n + 1;
  }
}

/* The dead-letter subject: <first subject>.dead, unless that first subject
 * has wildcards (orders.> would take in orders.dead, and orders.*.new.dead
 * is no subject to publish to) or a subject of the stream takes it in;
 * then idem-dead.<STREAM>, out of the stream's way. */
static void dead_subject_of(nbroker *b, const jsStreamConfig *sc) {
  int own = !has_wildcard(b->subject);
  snprintf(b->dead_subject, sizeof b->dead_subject, "%s.dead", b->subject);
  for (int i = 0; own && sc && i < sc->SubjectsLen; i++)
    own = !filter_takes(sc->Subjects[i], b->dead_subject);
  if (!own)
    snprintf(b->dead_subject, sizeof b->dead_subject, "idem-dead.%s", b->stream);
}

/* The stream's subject (its first), the dead-letter subject and a stream
 * to keep it (created when missing). */
static natsStatus find_subjects(nbroker *b) {
  jsStreamInfo *si = NULL;
  snprintf(b->step, sizeof b->step, "stream '%s'", b->stream);
  natsStatus s = js_GetStreamInfo(&si, b->js, b->stream, NULL, NULL);
  if (s != NATS_OK)
    return s;
  const char *subj = si->Config && si->Config->SubjectsLen > 0 ? si->Config->Subjects[0] : b->stream;
  snprintf(b->subject, sizeof b->subject, "%s", subj);
  dead_subject_of(b, si->Config);
  jsStreamInfo_Destroy(si);
  si = NULL; /* the calls below leave it as it is when they fail */
  snprintf(b->dead_stream, sizeof b->dead_stream, "%s_DEAD", b->stream);
  if (js_GetStreamInfo(&si, b->js, b->dead_stream, NULL, NULL) == NATS_OK) {
    jsStreamInfo_Destroy(si);
    return NATS_OK;
  }
  si = NULL;
  snprintf(b->step, sizeof b->step, "creating the dead-letter stream '%s' for '%s'",
           b->dead_stream, b->dead_subject);
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  const char *subjects[] = {b->dead_subject};
  sc.Name = b->dead_stream;
  sc.Subjects = subjects;
  sc.SubjectsLen = 1;
  sc.Storage = js_FileStorage;
  s = js_AddStream(&si, b->js, &sc, NULL, NULL);
  jsStreamInfo_Destroy(si);
  return s;
}

static natsStatus ensure_consumer(nbroker *b) {
  jsConsumerInfo *ci = NULL;
  if (js_GetConsumerInfo(&ci, b->js, b->stream, b->consumer, NULL, NULL) == NATS_OK) {
    jsConsumerInfo_Destroy(ci);
    return NATS_OK;
  }
  ci = NULL;
  snprintf(b->step, sizeof b->step, "creating the consumer '%s' on stream '%s'", b->consumer,
           b->stream);
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = b->consumer;
  cc.AckPolicy = js_AckExplicit;
  cc.DeliverPolicy = js_DeliverAll;
  cc.AckWait = b->base.o.lock_ttl_ms * 1000000;
  cc.MaxDeliver = -1;
  cc.MaxAckPending = 20000;
  natsStatus s = js_AddConsumer(&ci, b->js, b->stream, &cc, NULL, NULL);
  jsConsumerInfo_Destroy(ci);
  return s;
}

/* The durable consumer (made when missing) and a pull subscription on it. */
static natsStatus subscribe(nbroker *b) {
  natsStatus s = ensure_consumer(b);
  if (s == NATS_OK) {
    snprintf(b->step, sizeof b->step, "subscribing to '%s'", b->subject);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = b->stream;
    so.Consumer = b->consumer;
    natsSubscription *sub = NULL;
    s = js_PullSubscribe(&sub, b->js, b->subject, b->consumer, NULL, &so, NULL);
    if (s == NATS_OK && !(b->sub = nsub_new(sub)))
      s = NATS_NO_MEMORY;
  }
  return s;
}

static natsStatus fetch_setup(nbroker *b) {
  natsOptions *opts = NULL;
  char url[600];
  snprintf(url, sizeof url, "nats://%s%s%s:%d", strchr(b->base.uri.host, ':') ? "[" : "", b->base.uri.host,
           strchr(b->base.uri.host, ':') ? "]" : "", b->base.uri.port);
  snprintf(b->step, sizeof b->step, "connecting");
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, url);
  if (s == NATS_OK && b->base.uri.user)
    s = natsOptions_SetUserInfo(opts, b->base.uri.user, b->base.uri.password ? b->base.uri.password : "");
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 100);
  if (s == NATS_OK && !(b->cbs = cbs_new(b)))
    s = NATS_NO_MEMORY;
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(opts, on_disconnected, b->cbs);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(opts, on_reconnected, b->cbs);
  if (s == NATS_OK) s = natsOptions_SetClosedCB(opts, on_closed, b->cbs);
  if (s == NATS_OK) s = natsConnection_Connect(&b->nc, opts);
  natsOptions_Destroy(opts);
  if (s == NATS_OK) s = natsConnection_JetStream(&b->js, b->nc, NULL);
  if (s == NATS_OK) s = find_subjects(b);
  if (s == NATS_OK) s = subscribe(b);
  return s;
}

/* The durable consumer went away (deleted, or the server lost its state)
 * while connected: fetches then only time out. Looked at every
 * CONSUMER_CHECK_MS of fetches that bring nothing; made again when gone. */
static void check_consumer(nbroker *b) {
  jsConsumerInfo *ci = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetConsumerInfo(&ci, b->js, b->stream, b->consumer, NULL, &jerr);
  jsConsumerInfo_Destroy(ci);
  if (s == NATS_OK || jerr != JSConsumerNotFoundErr)
    return; /* there, or the server not answering: libnats reconnects */
  fprintf(stderr, "idem consume: nats broker %s:%d: consumer '%s' of stream '%s' is gone; "
                  "making it again\n", b->base.uri.host, b->base.uri.port, b->consumer, b->stream);
  retire_sub(b); /* before the consumer is made again: see send_settle */
  s = subscribe(b);
  if (s != NATS_OK)
    fetch_teardown(b); /* the next turn sets up the whole connection again */
}

/* Wait for credit (or stop); returns how many to fetch (now counted as
 * fetching), 0 to stop. */
static unsigned wait_credit(nbroker *b) {
  uv_mutex_lock(&b->mu);
  while (!b->stop && b->credit <= b->inq_len + b->fetching)
    uv_cond_timedwait(&b->cv, &b->mu, 200 * 1000000ULL);
  unsigned n = b->stop ? 0 : b->credit - b->inq_len - b->fetching;
  b->fetching = n;
  uv_mutex_unlock(&b->mu);
  return n;
}

static void push_fetched(nbroker *b, natsMsgList *list) {
  for (int i = 0; i < list->Count; i++) {
    nmsg *m = wrap(b, list->Msgs[i]);
    list->Msgs[i] = NULL;
    if (!m)
      continue;
    uv_mutex_lock(&b->mu);
    if (b->inq_tail)
      b->inq_tail->next = m;
    else
      b->inq = m;
    b->inq_tail = m;
    b->inq_len++;
    uv_mutex_unlock(&b->mu);
  }
  natsMsgList_Destroy(list);
  uv_async_send(&b->wake);
}

static int stopping(nbroker *b) {
  uv_mutex_lock(&b->mu);
  int s = b->stop;
  uv_mutex_unlock(&b->mu);
  return s;
}

static void fetch_main(void *arg) {
  nbroker *b = arg;
  int64_t backoff = 100;
  uint64_t idle_since = uv_hrtime(); /* since a fetch last brought messages */
  char last[1024] = "";
  while (!stopping(b)) {
    if (!b->sub) {
      natsStatus s = fetch_setup(b);
      if (s != NATS_OK) {
        natsStatus last_s = s; /* nats_GetLastError writes its own status there */
        const char *err = nats_GetLastError(&last_s);
        char why[1024];
        snprintf(why, sizeof why, "%s: %s", b->step, err && *err ? err : natsStatus_GetText(s));
        if (strcmp(why, last))
          fprintf(stderr, "idem consume: nats broker %s:%d: %s; reconnecting\n", b->base.uri.host,
                  b->base.uri.port, why);
        snprintf(last, sizeof last, "%s", why);
        fetch_teardown(b);
        nats_Sleep(backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        continue;
      }
      backoff = 100;
      atomic_store(&b->up, 1);
      uv_async_send(&b->wake);
    }
    unsigned n = wait_credit(b);
    if (!n)
      break;
    natsMsgList list = {0};
    natsStatus s = natsSubscription_Fetch(&list, b->sub->sub, (int)n, FETCH_WAIT_MS, NULL);
    uv_mutex_lock(&b->mu);
    b->fetching = 0; /* what came is in inq_len from here on */
    uv_mutex_unlock(&b->mu);
    if (s == NATS_OK) {
      push_fetched(b, &list);
      idle_since = uv_hrtime();
      continue;
    }
    if (s != NATS_TIMEOUT)
      nats_Sleep(100); /* disconnected: libnats reconnects by itself */
    if (uv_hrtime() - idle_since >= CONSUMER_CHECK_MS * 1000000ULL) {
      idle_since = uv_hrtime();
      check_consumer(b);
    }
  }
  nats_ReleaseThreadMemory();
  uv_mutex_lock(&b->mu);
  b->thread_done = 1;
  uv_mutex_unlock(&b->mu);
  uv_async_send(&b->wake);
}

/* ---- the loop ---- */

static void maybe_done(nbroker *b);

static void on_done_timer(uv_timer_t *t) {
  nbroker *b = t->data;
  nmsg *q = b->doneq;
  b->doneq = NULL;
  while (q) {
    nmsg *next = q->next;
    if (q->cb)
      q->cb(q->arg, &q->m, q->ok);
    msg_free(q);
    b->outstanding--;
    q = next;
  }
  maybe_done(b);
}

/* Settled: the flow hears it from the loop, never inside the call. */
static void settled(nmsg *m, int ok) {
  nbroker *b = m->b;
  m->ok = ok;
  m->next = b->doneq;
  b->doneq = m;
  uv_timer_start(&b->done_timer, on_done_timer, 0, 0);
}

static void on_wake(uv_async_t *a) {
  nbroker *b = a->data;
  uv_mutex_lock(&b->mu);
  nmsg *q = b->inq;
  b->inq = b->inq_tail = NULL;
  /* the flow's credit counted none of these: until it says again */
  b->credit = b->credit > b->inq_len ? b->credit - b->inq_len : 0;
  b->inq_len = 0;
  uv_mutex_unlock(&b->mu);
  int up = atomic_load(&b->up);
  if (up != atomic_load(&b->up_seen)) {
    atomic_store(&b->up_seen, up);
    if (b->base.o.on_state)
      b->base.o.on_state(b->base.o.arg, up);
  }
  while (q) {
    nmsg *next = q->next;
    q->next = NULL;
    b->outstanding++;
    b->base.o.on_message(b->base.o.arg, &q->m);
    q = next;
  }
  maybe_done(b);
}

static void n_ack(cs_broker *base, cs_msg *msg, const cs_answer *answer, cs_settled_cb cb,
                  void *arg) {
  (void)answer;
  nmsg *m = (nmsg *)msg;
  (void)base;
  m->cb = cb;
  m->arg = arg;
  settled(m, send_settle(m, SETTLE_ACK, 0) == NATS_OK);
}

static void n_later(cs_broker *base, cs_msg *msg, int64_t delay_ms, int ran, cs_settled_cb cb,
                    void *arg) {
  (void)ran; /* JetStream counts every delivery */
  nmsg *m = (nmsg *)msg;
  (void)base;
  m->cb = cb;
  m->arg = arg;
  settled(m, send_settle(m, SETTLE_LATER, delay_ms > 0 ? delay_ms : 1) == NATS_OK);
}

/* +WPI: the server starts AckWait again, and does not count a delivery. */
static void n_keep(cs_broker *base, cs_msg *msg) {
  (void)base;
  send_settle((nmsg *)msg, SETTLE_KEEP, 0);
}

/* On the thread pool: publish the dead letter, wait for JetStream's ack,
 * then Term the message. */
static void dead_work(uv_work_t *w) {
  nmsg *m = w->data;
  nbroker *b = m->b;
  natsMsg *dm = NULL;
  char deliveries[16], msgid[320];
  snprintf(deliveries, sizeof deliveries, "%u", m->m.deliveries);
  snprintf(msgid, sizeof msgid, "idem-dead-%s", m->m.id ? m->m.id : "?");
  natsStatus s = natsMsg_Create(&dm, b->dead_subject, NULL, m->m.body, (int)m->m.body_len);
  if (s == NATS_OK) s = natsMsgHeader_Set(dm, "Idem-Reason", m->reason);
  if (s == NATS_OK) s = natsMsgHeader_Set(dm, "Idem-Id", m->m.id ? m->m.id : "");
  if (s == NATS_OK) s = natsMsgHeader_Set(dm, "Idem-Deliveries", deliveries);
  /* the server's own headers (Nats-Msg-Id, Nats-Expected-Stream,
   * Nats-Rollup...) would act on the dead letter's publish, or refuse it:
   * they go as Idem-<rest> */
  for (size_t i = 0; s == NATS_OK && i < m->m.nheaders; i++) {
    const char *name = m->m.headers[i].name;
    char renamed[300];
    if (!strncasecmp(name, "Nats-", 5)) {
      snprintf(renamed, sizeof renamed, "Idem-%s", name + 5);
      name = renamed;
    }
    s = natsMsgHeader_Add(dm, name, m->m.headers[i].value);
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MsgId = msgid;
  jsPubAck *pa = NULL;
  uv_rwlock_rdlock(&b->js_lock);
  if (s == NATS_OK && !b->js)
    s = NATS_CONNECTION_CLOSED; /* torn down meanwhile: it comes again */
  if (s == NATS_OK) {
    jsErrCode jerr = 0;
    s = js_PublishMsg(&pa, b->js, dm, &po, &jerr);
    if (s != NATS_OK) {
      natsStatus ls = s;
      const char *err = nats_GetLastError(&ls);
      fprintf(stderr, "idem consume: nats broker: the dead letter of %s could not be stored in "
                      "'%s': %s (error %d); it comes again after --lock-ttl\n",
              m->m.id ? m->m.id : "?", b->dead_stream, err && *err ? err : natsStatus_GetText(s),
              (int)jerr);
    }
  }
  uv_rwlock_rdunlock(&b->js_lock);
  jsPubAck_Destroy(pa);
  natsMsg_Destroy(dm);
  if (s == NATS_OK) s = send_settle(m, SETTLE_TERM, 0);
  m->ok = s == NATS_OK;
  nats_ReleaseThreadMemory();
}

static void dead_done(uv_work_t *w, int status) {
  nmsg *m = w->data;
  m->b->works--;
  settled(m, status == 0 && m->ok);
}

static void n_dead(cs_broker *base, cs_msg *msg, const char *reason, cs_settled_cb cb, void *arg) {
  nbroker *b = (nbroker *)base;
  nmsg *m = (nmsg *)msg;
  m->cb = cb;
  m->arg = arg;
  snprintf(m->reason, sizeof m->reason, "%s", reason);
  for (char *p = m->reason; *p; p++)
    if (*p == '\r' || *p == '\n')
      *p = ' ';
  m->work.data = m;
  /* js is looked at by dead_work, under js_lock: the loop never waits */
  if (!atomic_load(&b->up) || uv_queue_work(b->base.o.loop, &m->work, dead_work, dead_done)) {
    settled(m, 0); /* comes again after AckWait */
    return;
  }
  b->works++;
}

static void n_credit(cs_broker *base, unsigned n) {
  nbroker *b = (nbroker *)base;
  uv_mutex_lock(&b->mu);
  b->credit = n;
  uv_cond_signal(&b->cv);
  uv_mutex_unlock(&b->mu);
}

static void handle_closed(uv_handle_t *h) {
  nbroker *b = h->data;
  if (--b->handles)
    return;
  uv_mutex_destroy(&b->mu);
  uv_cond_destroy(&b->cv);
  uv_rwlock_destroy(&b->js_lock);
  nats_Close();
  cs_broker_free(&b->base);
}

static void maybe_done(nbroker *b) {
  if (!b->base.closing || b->outstanding || b->works || b->doneq || !b->handles ||
      uv_is_closing((uv_handle_t *)&b->wake))
    return;
  uv_mutex_lock(&b->mu);
  int finished = b->thread_done;
  nmsg *q = b->inq;
  uv_mutex_unlock(&b->mu);
  if (!finished || q)
    return; /* the thread's last fetch is still coming, or not delivered yet */
  uv_thread_join(&b->thread);
  fetch_teardown(b);
  uv_close((uv_handle_t *)&b->wake, handle_closed);
  uv_close((uv_handle_t *)&b->done_timer, handle_closed);
}

static void n_close(cs_broker *base) {
  nbroker *b = (nbroker *)base;
  uv_mutex_lock(&b->mu);
  b->stop = 1;
  uv_cond_signal(&b->cv);
  uv_mutex_unlock(&b->mu);
  maybe_done(b);
}

static int n_start(cs_broker *base, char **why) {
  nbroker *b = (nbroker *)base;
  const cs_broker_opts *o = &b->base.o;
  b->stream = cs_uri_param(&b->base.uri, "stream");
  b->consumer = cs_uri_param(&b->base.uri, "consumer");
  uv_mutex_init(&b->mu);
  uv_cond_init(&b->cv);
  uv_rwlock_init(&b->js_lock);
  uv_async_init(o->loop, &b->wake, on_wake);
  uv_timer_init(o->loop, &b->done_timer);
  b->wake.data = b->done_timer.data = b;
  b->handles = 2;
  if (uv_thread_create(&b->thread, fetch_main, b)) {
    *why = strdup("cannot start a thread");
    b->thread_done = 1; /* nothing to join: close below frees it */
    b->base.closing = 1;
    uv_close((uv_handle_t *)&b->wake, handle_closed);
    uv_close((uv_handle_t *)&b->done_timer, handle_closed);
    return IDEM_ENOMEM;
  }
  return 0;
}

const cs_broker_vt cs_broker_nats = CS_BROKER_VT("nats", nbroker, 4222, n);

/*
 * engine.c - the idempotency flow of one request (README.md, "What a
 * client sees"):
 *
 *   no semantics / no key ──────────────────────────► forward, answer
 *   claim ─ CLAIMED ─► forward with Idempotency-Fence ─┬ stored status ► complete ► answer
 *         │                                            ├ released status ► release ► answer
 *         │                                            ├ not sent ► release ► 502
 *         │                                            └ sent, no answer ► 502/504, lease kept
 *         ├ REPLAY ─► stored answer + Idempotent-Replayed: true
 *         ├ MISMATCH ─► 422
 *         ├ BUSY ─► 409 + Retry-After, or with --wait re-claim until the deadline
 *         └ store error ─► 503 + Retry-After, or forward (--on-store-error open)
 *
 * Each request gets its route once (route.h): its policy says which methods,
 * where the key is, the fingerprint, TTLs, stored statuses, replayed
 * headers and the mode. In mode shadow, what would be replayed, refused or
 * held is counted and logged, and forwarded instead (no record for it).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/gateway.h"
#include "http/metrics.h"
#include "http/policy.h"
#include "http/spool.h"
#include "http/store_handle.h"

enum { AFTER_UPSTREAM_ANSWER = 0, AFTER_502_UNREACHABLE };

static void forward(gw_exchange *ex);
static void claim(gw_exchange *ex);

/* How much of a request target a log line shows. */
static int log_len(const gw_request *r) { return (int)(r->target.len > 200 ? 200 : r->target.len); }

static uint64_t since_us(uint64_t ns) { return (uv_hrtime() - ns) / 1000; }

/* The policy of ex's route (engine.c sets ex->route first thing). */
static const gw_policy *pol(const gw_exchange *ex) { return &ex->route->policy; }

static int shadow(const gw_exchange *ex) { return pol(ex)->mode == GW_MODE_SHADOW; }

/* Mode shadow: enforce would have answered (what), so count it, log it
 * with its key, and let the request through with no record of its own. */
static void shadow_forward(gw_exchange *ex, gw_shadow would, const char *what) {
  const gw_request *r = ex->req;
  gw_metrics_shadow(would);
  fprintf(stderr, "idem serve: shadow: %s %.*s key '%s': enforce would have %s; forwarded\n",
          r->method, log_len(r), r->target.p, ex->idem.key[0] ? ex->idem.key : "", what);
  forward(ex);
}

/* The route of ex's request, from the worker's table: a reload (a new
 * generation) is picked up here, by the next request. */
static void find_route(gw_exchange *ex) {
  gw_worker *w = ex->w;
  unsigned gen = gw_routes_generation();
  if (gen != w->routes_gen) {
    gw_routes *t = gw_routes_current();
    if (t) {
      gw_routes_release(w->routes);
      w->routes = t;
      w->routes_gen = gen;
    }
  }
  ex->routes = gw_routes_hold(w->routes);
  ex->route = gw_routes_match(ex->routes, ex->req->method,
                              ex->req->target.p ? ex->req->target.p : "", ex->req->target.len);
}

/* ---- answers ---- */

/* The upstream answer's headers as they are kept and replayed into h: the
 * replayable ones, and a Date when it had none (RFC 9110 6.6.1: a recipient
 * with a clock that forwards an answer without one appends one, of when it
 * received it; kept, so a replay carries the Date the first client got).
 * 0, or -1 out of memory. */
static int kept_headers(const upstream_response *up, gw_buf *h) {
  if (policy_replayable_headers(&up->headers, h))
    return -1;
  if (gw_headers_get(&up->headers, "Date", NULL, NULL))
    return 0;
  return gw_buf_puts(h, gw_date_header());
}

static void answer_upstream(gw_exchange *ex, gw_outcome outcome) {
  gw_exchange_outcome(ex, outcome);
  upstream_response *up = &ex->up;
  gw_buf *h = &ex->stored_headers;
  unsigned flags = ex->req->is_head ? GW_RESP_OWN_CL : 0; /* see head_length */
  gw_conn_respond(ex, up->status, h->p, h->len, up->body.p, up->body.len, flags);
}

/* An answer to HEAD has no body, and its Content-Length is the one a GET
 * would get: the upstream's goes into the headers kept (and replayed) with
 * it, where other answers' framing is left out. Returns 0 or -1 (out of
 * memory). */
static int head_length(gw_exchange *ex) {
  size_t len = 0;
  const char *cl = gw_headers_get(&ex->up.headers, "Content-Length", &len, NULL);
  if (!ex->req->is_head || !cl)
    return 0;
  return gw_buf_header(&ex->stored_headers, "Content-Length", 14, cl, len);
}

static void problem(gw_exchange *ex, gw_outcome outcome, int status,
                    const char *slug, const char *title, const char *detail,
                    const char *extra) {
  gw_exchange_outcome(ex, outcome);
  gw_conn_problem(ex, status, slug, title, detail, extra, 0);
}

static const char *const up_kind_text[] = {
    [UP_OK] = "answered",
    [UP_CONNECT_FAILED] = "unreachable (not sent)",
    [UP_TIMEOUT] = "timed out",
    [UP_RESET] = "connection broke before a complete answer",
    [UP_BAD_RESPONSE] = "answer was not valid HTTP",
};

#define MAY_HAVE_RUN "; the request may have run, so the key stays locked until its lease ends"

/* What each upstream failure answers; the tail is added when a key was
 * claimed, and says what became of it. */
static const struct {
  gw_outcome outcome;
  int status;
  const char *slug, *title, *detail, *claimed_tail;
} up_failure[] = {
    [UP_TIMEOUT] = {GW_OUT_UPSTREAM_TIMEOUT, 504, "upstream-timeout", "Upstream timed out",
                    "the upstream did not answer in time", MAY_HAVE_RUN},
    [UP_CONNECT_FAILED] = {GW_OUT_UPSTREAM_ERROR, 502, "upstream-unreachable",
                           "Upstream unreachable", "the upstream could not be reached",
                           "; the request was not sent and the key was released, retry"},
    [UP_RESET] = {GW_OUT_UPSTREAM_ERROR, 502, "upstream-failed", "Upstream failed",
                  "the upstream connection broke before a complete answer", MAY_HAVE_RUN},
    /* what upstream.c refuses as UP_BAD_RESPONSE, besides broken framing */
    [UP_BAD_RESPONSE] = {GW_OUT_UPSTREAM_ERROR, 502, "upstream-bad-response",
                         "Upstream answer not HTTP",
                         "the upstream's answer was not valid HTTP (a malformed status line or "
                         "head, a Transfer-Encoding other than chunked alone, which the gateway "
                         "would drop with its coding, a status outside 100-599, or a 1xx other "
                         "than 100 and 103 as its answer)",
                         MAY_HAVE_RUN},
};

static void answer_upstream_failure(gw_exchange *ex) {
  const gw_request *r = ex->req;
  upstream_kind kind = ex->up.kind == UP_OK ? UP_RESET : ex->up.kind;
  if (ex->idem.claimed)
    fprintf(stderr,
            "idem serve: upstream %s %.*s: %s; key '%s' (fence %" PRIu64 ") %s\n",
            r->method, log_len(r), r->target.p, up_kind_text[kind], ex->idem.key,
            ex->idem.fence,
            kind == UP_CONNECT_FAILED ? "released" : "stays locked until its lease ends");
  else
    fprintf(stderr, "idem serve: upstream %s %.*s: %s\n", r->method, log_len(r), r->target.p,
            up_kind_text[kind]);
  char detail[400];
  snprintf(detail, sizeof detail, "%s%s", up_failure[kind].detail,
           ex->idem.claimed ? up_failure[kind].claimed_tail : "");
  problem(ex, up_failure[kind].outcome, up_failure[kind].status, up_failure[kind].slug,
          up_failure[kind].title, detail, NULL);
}

static void answer_replay(gw_exchange *ex, const idem_record *rec) {
  const idem_response *r = &rec->response;
  if (r->status < 200) {
    problem(ex, GW_OUT_STORE_ERROR, 500, "record-without-response",
            "Stored record has no response",
            "the key's record holds no replayable response", NULL);
    return;
  }
  /* rec lives only during the store's callback: copy what the answer needs
   * into the exchange's (reused) buffers */
  gw_buf *h = &ex->out_hdrs, *b = &ex->out_body;
  h->len = b->len = 0;
  if (gw_buf_append(h, r->headers, r->headers_len) ||
      gw_buf_puts(h, "Idempotent-Replayed: true\r\n") ||
      gw_buf_append(b, r->body, r->body_len)) {
    problem(ex, GW_OUT_STORE_ERROR, 503, "out-of-memory", "Service Unavailable",
            "the gateway ran out of memory", "Retry-After: 1\r\n");
    return;
  }
  gw_exchange_outcome(ex, GW_OUT_REPLAYED);
  /* a replay to HEAD (the key's first request was HEAD too) carries the
   * Content-Length kept with the answer */
  gw_conn_respond(ex, r->status, h->p, h->len, b->p, b->len, ex->req->is_head ? GW_RESP_OWN_CL : 0);
}

static void answer_mismatch(gw_exchange *ex) {
  problem(ex, GW_OUT_MISMATCH, 422, "key-reused", "Idempotency-Key reused with a different request",
          "this key was already used with a different method, target or body; use a new key "
          "for a new request",
          NULL);
}

/* ---- store failures ---- */

/* A store that is away fails every request's claim: one line a second per
 * worker, with the count it stood for, not one line per request. */
static void log_store_failure(gw_exchange *ex, const char *op, int err) {
  gw_worker *w = ex->w;
  uint64_t now = uv_now(&w->loop);
  if (now < w->store_log_next) {
    w->store_log_quiet++;
    return;
  }
  w->store_log_next = now + 1000;
  char more[96] = "";
  if (w->store_log_quiet)
    snprintf(more, sizeof more, " (and %u more store failures since the last such line)",
             w->store_log_quiet);
  w->store_log_quiet = 0;
  fprintf(stderr, "idem serve: store %s of key '%s' failed: %s%s\n", op, ex->idem.key,
          idem_strerror(err), more);
}

static void store_failed(gw_exchange *ex, const char *op, int err) {
  log_store_failure(ex, op, err);
  if (ex->w->cfg->fail_open || shadow(ex)) { /* shadow blocks nothing */
    ex->idem.bypass = 1;
    forward(ex);
    return;
  }
  problem(ex, GW_OUT_STORE_ERROR, 503, "store-unavailable", "Store unavailable",
          "the idempotency store could not be reached; the request was not run",
          "Retry-After: 1\r\n");
}

/* ---- once the answer is kept (keep.c) ---- */

/* Nothing could keep the answer: the client must not get it. A retry is
 * busy (409) until the lease ends, so that is when to come back. */
static void answer_not_kept(gw_exchange *ex) {
  uint64_t now = uv_hrtime(), end = ex->idem.lease_end_ns;
  uint64_t secs = end > now ? (end - now + 999999999u) / 1000000000u : 1;
  char extra[64];
  snprintf(extra, sizeof extra, "Retry-After: %llu\r\n", (unsigned long long)(secs ? secs : 1));
  problem(ex, GW_OUT_STORE_ERROR, 503, "answer-not-kept", "Answer not kept",
          "the request ran, but its answer could not be kept; the key stays locked "
          "until its lease ends",
          extra);
}

static void answer_executed(gw_exchange *ex, int kept) {
  if (kept)
    answer_upstream(ex, GW_OUT_EXECUTED);
  else
    answer_not_kept(ex);
}

static void answer_after_release(gw_exchange *ex) {
  if (ex->keep.after_release == AFTER_502_UNREACHABLE)
    answer_upstream_failure(ex);
  else
    answer_upstream(ex, GW_OUT_RELEASED);
}

static void release(gw_exchange *ex, int after) {
  ex->keep.after_release = after;
  gw_keep_release(ex, answer_after_release);
}

/* ---- upstream ---- */

/* ---- streamed pass-through answers ---- */

static void on_stream_head(void *arg, upstream_response *up) {
  gw_exchange *ex = arg;
  ex->up_head_ns = uv_hrtime();
  gw_request *r = ex->req;
  gw_buf *h = &ex->stored_headers;
  kept_headers(up, h); /* out of memory: fewer headers, still an answer */
  int status = up->status;
  int mode = GW_STREAM_RAW;
  size_t len = 0;
  const char *cl = gw_headers_get(&up->headers, "Content-Length", &len, NULL);
  int bodyless = r->is_head || status == 204 || status == 304 || status < 200;
  if (cl && (bodyless ? r->is_head : 1))
    gw_buf_header(h, "Content-Length", 14, cl, len);
  else if (!bodyless)
    mode = r->http_minor >= 1 ? GW_STREAM_CHUNKED : GW_STREAM_CLOSE;
  gw_conn_stream_begin(ex, status, h->p, h->len, mode);
}

static void on_stream_data(void *arg, const char *data, size_t len) {
  gw_exchange *ex = arg;
  gw_conn_stream_data(ex, data, len);
  if (!ex->up_paused && gw_conn_stream_backlog(ex) > GW_BACKLOG_HIGH) {
    ex->up_paused = 1;
    upstream_pause(&ex->up, 1);
  }
}

/* The client took the backlog of a streamed answer: read the upstream on. */
static void stream_proceed(gw_exchange *ex) {
  if (ex->up_paused) {
    ex->up_paused = 0;
    upstream_pause(&ex->up, 0);
  }
}

/* Nobody reads the rest: drop the upstream connection instead of reading
 * the answer to its end (a cancelled download of gigabytes). The request
 * ran either way; a keyed one is settled already (the stored 502). */
static void stream_stop(gw_exchange *ex) {
  if (!ex->upstream_cut) {
    ex->upstream_cut = 1;
    upstream_abort(&ex->up);
  }
}

static const upstream_stream stream_cbs = {on_stream_head, on_stream_data, 0};

/* The upstream is done with an answer that streams to the client. */
static void stream_upstream_done(gw_exchange *ex, upstream_kind kind) {
  /* cut by us because the client left: not an upstream failure */
  upstream_kind seen = ex->upstream_cut && kind == UP_RESET ? UP_OK : kind;
  gw_exchange_outcome(ex, seen != UP_OK ? (seen == UP_TIMEOUT ? GW_OUT_UPSTREAM_TIMEOUT
                                                             : GW_OUT_UPSTREAM_ERROR)
                          : ex->spill.released ? GW_OUT_RELEASED
                          : ex->idem.claimed   ? GW_OUT_EXECUTED
                          : ex->idem.bypass    ? GW_OUT_STORE_BYPASS
                                               : GW_OUT_PASSTHROUGH);
  if (seen != UP_OK)
    fprintf(stderr, "idem serve: upstream %s %.*s: %s midway; answer cut\n",
            ex->req->method, log_len(ex->req), ex->req->target.p, up_kind_text[kind]);
  gw_conn_stream_end(ex, kind == UP_OK && !ex->stream.failed);
}

/* ---- answers too large to keep ----
 *
 * A keyed answer that passes --max-response cannot be stored, but the
 * request ran: releasing the key would let a retry run it twice. So the key
 * is completed with a 502 that says so (what retries get), and only once
 * that is stored does this client get the real answer, streamed: the part
 * buffered so far, then the rest as it comes. The upstream is paused
 * meanwhile; what it had already sent waits in up.body. An answer whose
 * status the route does not keep (5xx, 429, ...) needs no marker: the key
 * is released, as for a small one, and then the answer streams. */

static void on_spill_kept(gw_exchange *ex, int kept) {
  if (!kept) {
    /* the client must not get an answer nobody kept: cut the upstream,
     * and answer 503 once it is gone (on_upstream) */
    ex->spill.refused = 1;
    if (ex->spill.ended)
      answer_not_kept(ex);
    else
      upstream_abort(&ex->up);
    return;
  }
  ex->spill.on = 0;
  on_stream_head(ex, &ex->up);
  gw_conn_stream_data(ex, ex->up.body.p, ex->up.body.len);
  ex->up.body.len = 0;
  if (ex->spill.ended)
    stream_upstream_done(ex, ex->spill.kind);
  else if (gw_conn_stream_backlog(ex) <= GW_BACKLOG_HIGH)
    stream_proceed(ex); /* resume reading */
}

/* A status the route does not keep (5xx, 429, ...) releases the key
 * whatever the answer's size: nothing is kept, so a retry runs again. */
static void on_spill_released(gw_exchange *ex) { on_spill_kept(ex, 1); }

static void on_spill_head(void *arg, upstream_response *up) {
  gw_exchange *ex = arg;
  ex->up_head_ns = uv_hrtime();
  ex->spill.on = 1;
  ex->up_paused = 1;
  upstream_pause(up, 1);
  if (!gw_policy_stores(pol(ex), up->status)) {
    ex->spill.released = 1;
    gw_keep_release(ex, on_spill_released);
    return;
  }
  fprintf(stderr,
          "idem serve: upstream %s %.*s: answer (status %d) passed --max-response; key "
          "'%s' (fence %" PRIu64 ") completed with a 502, the answer streams to this "
          "client only\n",
          ex->req->method, log_len(ex->req), ex->req->target.p, up->status, ex->idem.key,
          ex->idem.fence);
  gw_buf *h = &ex->out_hdrs, *b = &ex->out_body;
  h->len = b->len = 0;
  if (policy_not_kept(h, b, up->status, "was larger than the gateway's --max-response")) {
    gw_metrics_leases(-1);
    on_spill_kept(ex, 0); /* out of memory */
    return;
  }
  gw_keep(ex, 502, h, b, 1, on_spill_kept);
}

static void on_spill_data(void *arg, const char *data, size_t len) {
  gw_exchange *ex = arg;
  if (!ex->spill.on) {
    on_stream_data(arg, data, len);
    return;
  }
  /* the rest of the read that passed the limit: at most one read buffer */
  if (gw_buf_append(&ex->up.body, data, len))
    ex->stream.failed = 1; /* out of memory: the client will see it cut */
}

static const upstream_stream spill_cbs = {on_spill_head, on_spill_data, 1};

static void on_upstream(void *arg, upstream_response *up) {
  gw_exchange *ex = arg;
  if (!ex->up_head_ns && up->kind == UP_OK) /* a failure: no answer's head to time */
    ex->up_head_ns = up->head_ns ? up->head_ns : uv_hrtime();
  gw_metrics_observe(GW_HIST_UPSTREAM, since_us(ex->op_started_ns));
  if (ex->spill.on) { /* on_spill_kept ends it */
    ex->spill.ended = 1;
    ex->spill.kind = up->kind;
    if (ex->spill.refused)
      answer_not_kept(ex);
    return;
  }
  if (ex->stream.started) {
    /* an answer already on its way to the client */
    stream_upstream_done(ex, up->kind);
    return;
  }
  if (up->kind == UP_OK &&
      (kept_headers(up, &ex->stored_headers) || head_length(ex))) {
    up->kind = UP_BAD_RESPONSE; /* out of memory: cannot keep the answer */
  }
  /* what replays carry: the route's replay_headers drop some (the first
   * client gets them all) */
  if (up->kind == UP_OK && ex->idem.claimed && pol(ex)->ndrop &&
      policy_kept_headers(pol(ex), &ex->stored_headers, &ex->kept_headers))
    up->kind = UP_BAD_RESPONSE; /* out of memory, as above */
  if (!ex->idem.claimed) {
    if (up->kind == UP_OK)
      answer_upstream(ex, ex->idem.bypass ? GW_OUT_STORE_BYPASS : GW_OUT_PASSTHROUGH);
    else
      answer_upstream_failure(ex);
    return;
  }
  switch (up->kind) {
  case UP_OK:
    if (gw_policy_stores(pol(ex), up->status))
      gw_keep(ex, up->status, pol(ex)->ndrop ? &ex->kept_headers : &ex->stored_headers,
              &up->body, 0, answer_executed);
    else
      release(ex, AFTER_UPSTREAM_ANSWER);
    return;
  case UP_CONNECT_FAILED:
    release(ex, AFTER_502_UNREACHABLE);
    return;
  default:
    /* sent, no complete answer: the lease stays until it ends */
    gw_metrics_leases(-1);
    answer_upstream_failure(ex);
  }
}

static int method_retry_safe(const char *m) {
  return !strcmp(m, "GET") || !strcmp(m, "HEAD") || !strcmp(m, "OPTIONS") ||
         !strcmp(m, "PUT") || !strcmp(m, "DELETE") || !strcmp(m, "TRACE");
}

static void forward(gw_exchange *ex) {
  gw_request *r = ex->req;
  gw_buf *b = &ex->up_head;
  const gw_headers *h = &r->headers;
  gw_list conn; /* each of its lines names hop-by-hop fields (RFC 9110 7.6.1) */
  gw_headers_list(h, "Connection", &conn);
  int has_host = 0, had_framing = 0, err = 0;
  b->len = 0;
  err |= gw_buf_reserve(b, r->target.len + r->headers.text.len + 4 * r->headers.n + 160);
  err |= gw_buf_puts(b, r->method);
  err |= gw_buf_puts(b, " ");
  err |= gw_buf_append(b, r->target.p, r->target.len);
  err |= gw_buf_puts(b, " HTTP/1.1\r\n");
  for (size_t i = 0; i < h->n; i++) {
    const char *name = gw_header_name(h, i);
    size_t nlen = h->v[i].name_len;
    if (gw_ieq(name, nlen, "Content-Length") ||
        gw_ieq(name, nlen, "Transfer-Encoding"))
      had_framing = 1;
    if (policy_request_header_dropped(name, nlen))
      continue;
    if (gw_headers_list_has(&conn, name, nlen))
      continue; /* named by Connection: hop-by-hop too */
    if (gw_ieq(name, nlen, "Host"))
      has_host = 1;
    err |= gw_buf_header(b, name, nlen, gw_header_value(h, i), h->v[i].value_len);
  }
  if (!has_host) {
    const char *host = ex->w->cfg->upstream_authority;
    err |= gw_buf_header(b, "Host", 4, host, strlen(host));
  }
  if (ex->idem.claimed) {
    err |= gw_buf_puts(b, "Idempotency-Fence: ");
    err |= gw_buf_u64(b, ex->idem.fence);
    err |= gw_buf_puts(b, "\r\n");
  }
  if (r->body.len || had_framing) {
    err |= gw_buf_puts(b, "Content-Length: ");
    err |= gw_buf_u64(b, r->body.len);
    err |= gw_buf_puts(b, "\r\n");
  }
  err |= gw_buf_puts(b, "\r\n");
  if (err) {
    ex->up.kind = UP_CONNECT_FAILED;
    on_upstream(ex, &ex->up);
    return;
  }
  unsigned n = 1;
  ex->up_bufs[0] = uv_buf_init(b->p, (unsigned)b->len);
  if (r->body.len)
    n += gw_bufs_put(ex->up_bufs + n, r->body.p, r->body.len);
  ex->op_started_ns = ex->up_sent_ns = uv_hrtime();
  /* answers that will not be stored stream through, with no size limit;
   * keyed ones are kept whole, and stream only past --max-response */
  upstream_send(ex->w->pool, ex->up_bufs, n, r->is_head,
                !ex->idem.claimed && method_retry_safe(r->method),
                ex->idem.claimed ? &spill_cbs : &stream_cbs, &ex->up, on_upstream, ex);
}

/* ---- claim and wait ---- */

static void on_wait_timer(uv_timer_t *t) {
  gw_exchange *ex = t->data;
  uv_close((uv_handle_t *)t, (uv_close_cb)free);
  claim(ex);
}

static void on_claim(idem_store *st, const idem_result *res, void *arg) {
  gw_exchange *ex = arg;
  (void)st;
  gw_metrics_observe(GW_HIST_CLAIM, since_us(ex->op_started_ns));
  if (res->err) {
    store_failed(ex, "claim", res->err);
    return;
  }
  const gw_policy *p = pol(ex);
  if (p->mode == GW_MODE_SHADOW && res->outcome != IDEM_CLAIMED) {
    if (res->outcome == IDEM_REPLAY)
      shadow_forward(ex, GW_SHADOW_REPLAY, "replayed its stored answer");
    else if (res->outcome == IDEM_MISMATCH)
      shadow_forward(ex, GW_SHADOW_MISMATCH, "refused it (422: the key was used with another "
                                             "request)");
    else
      shadow_forward(ex, GW_SHADOW_CONFLICT, "held it (409: the key is in flight)");
    return;
  }
  switch (res->outcome) {
  case IDEM_CLAIMED:
    ex->idem.claimed = 1;
    ex->idem.fence = res->fence;
    ex->idem.lease_end_ns = uv_hrtime() + (uint64_t)pol(ex)->lock_ttl_ms * 1000000u;
    gw_metrics_leases(1);
    forward(ex);
    return;
  case IDEM_REPLAY:
    if (!res->record) {
      problem(ex, GW_OUT_STORE_ERROR, 500, "record-without-response",
              "Stored record has no response",
              "the store answered replay without a record", NULL);
      return;
    }
    answer_replay(ex, res->record);
    return;
  case IDEM_MISMATCH:
    answer_mismatch(ex);
    return;
  case IDEM_BUSY:
  default: {
    uint64_t now = uv_now(&ex->w->loop);
    if (p->wait_ms > 0) { /* also while stopping: it is in flight */
      if (!ex->idem.wait_deadline)
        ex->idem.wait_deadline = (int64_t)now + p->wait_ms;
      if ((int64_t)now < ex->idem.wait_deadline) {
        uint64_t backoff = 5u << (ex->idem.wait_round < 6 ? ex->idem.wait_round : 6);
        if (backoff > 250)
          backoff = 250;
        uint64_t left = (uint64_t)(ex->idem.wait_deadline - (int64_t)now);
        if (backoff > left)
          backoff = left;
        ex->idem.wait_round++;
        uv_timer_t *t = malloc(sizeof *t);
        if (t) {
          uv_timer_init(&ex->w->loop, t);
          t->data = ex;
          uv_timer_start(t, on_wait_timer, backoff, 0);
          return;
        }
      }
    }
    int64_t ms = res->retry_after_ms > 0 ? res->retry_after_ms : 1000;
    char extra[64];
    snprintf(extra, sizeof extra, "Retry-After: %lld\r\n",
             (long long)((ms + 999) / 1000));
    problem(ex, GW_OUT_CONFLICT, 409, "request-in-progress",
            "Request in progress",
            p->wait_ms > 0
                ? "a request with this Idempotency-Key is still being "
                  "processed and did not finish within the wait; retry later"
                : "a request with this Idempotency-Key is still being "
                  "processed; retry later",
            extra);
    return;
  }
  }
}

/* A key whose answer waits in this gateway's spool is answered from there:
 * the store, even once back, still holds its lease until the spool drains. */
static int replay_spooled(gw_exchange *ex) {
  idem_record rec;
  if (!ex->w->spool || !gw_spool_find(ex->w->spool, ex->idem.scope, ex->idem.key, &rec))
    return 0;
  int same = !memcmp(rec.fingerprint, ex->idem.fp, sizeof ex->idem.fp);
  if (shadow(ex))
    shadow_forward(ex, same ? GW_SHADOW_REPLAY : GW_SHADOW_MISMATCH,
                   same ? "replayed its answer from the spool" : "refused it (422)");
  else if (!same)
    answer_mismatch(ex);
  else
    answer_replay(ex, &rec);
  idem_record_clear(&rec);
  return 1;
}

static void claim(gw_exchange *ex) {
  if (replay_spooled(ex))
    return;
  gw_worker *w = ex->w;
  idem_store *st = gw_store_reopen(&w->loop, w->cfg->store_uri, w->cfg->cache_uri, "", &w->store,
                                   &w->store_retry_at);
  if (!st) {
    store_failed(ex, "open", IDEM_ESTORE);
    return;
  }
  idem_op op = {0};
  op.kind = IDEM_OP_CLAIM;
  op.scope = ex->idem.scope;
  op.key = ex->idem.key;
  memcpy(op.fingerprint, ex->idem.fp, sizeof ex->idem.fp);
  op.lease_ms = pol(ex)->lock_ttl_ms;
  op.ttl_ms = pol(ex)->ttl_ms;
  ex->op_started_ns = uv_hrtime();
  int rc = idem_store_submit(st, &op, on_claim, ex);
  if (rc)
    store_failed(ex, "claim", rc);
}

/* No usable key, or a scope sent twice: 400, or in shadow mode the count of
 * that 400. */
static void refuse_key(gw_exchange *ex, const char *slug, const char *title, const char *detail) {
  if (shadow(ex)) {
    char what[440];
    snprintf(what, sizeof what, "refused it (400: %.400s)", detail);
    shadow_forward(ex, GW_SHADOW_BAD_KEY, what);
    return;
  }
  problem(ex, GW_OUT_BAD_KEY, 400, slug, title, detail, NULL);
}

static void handle(gw_exchange *ex) {
  gw_request *r = ex->req;
  find_route(ex);
  const gw_policy *p = pol(ex);
  if (!policy_method_has_semantics(p, r->method)) {
    forward(ex);
    return;
  }
  char why[400];
  policy_key_result kr = policy_route_key(p, r, ex->idem.key, why, sizeof why);
  if (kr != POLICY_KEY_OK)
    ex->idem.key[0] = 0; /* none, or not one: logged as none (a refused scope keeps its key) */
  switch (kr) {
  case POLICY_KEY_NONE:
    if (p->require_key) {
      char src[300];
      policy_key_source_text(p, src, sizeof src);
      snprintf(why, sizeof why, "this gateway requires %s on this method", src);
      refuse_key(ex, "key-required", "Idempotency-Key required", why);
      return;
    }
    forward(ex);
    return;
  case POLICY_KEY_BAD:
    refuse_key(ex, "invalid-key", "Invalid Idempotency-Key", why);
    return;
  case POLICY_KEY_NOT_JSON:
    snprintf(why, sizeof why, "this route takes its key at %s in a JSON body, and this body is "
             "not JSON", p->key_arg);
    refuse_key(ex, "body-not-json", "Body is not JSON", why);
    return;
  case POLICY_KEY_OK:
    break;
  }
  int rc = policy_scope(ex->w->cfg, &r->headers, ex->idem.scope);
  if (rc == IDEM_EINVAL) {
    char what[400];
    snprintf(what, sizeof what, "the scope header %s was sent more than once",
             ex->w->cfg->scope_header);
    refuse_key(ex, "invalid-scope", "Invalid scope", what);
    return;
  }
  if (!rc)
    rc = policy_fingerprint(p, r, ex->idem.fp);
  if (rc == IDEM_EJSON) { /* a 400 for the body, counted as bad_key: in shadow too */
    refuse_key(ex, "body-not-json", "Body is not JSON",
               "this route fingerprints the JSON body, and this body is not JSON");
    return;
  }
  if (rc && shadow(ex)) {
    forward(ex); /* nothing to compare it with: let it through */
    return;
  }
  if (rc) {
    problem(ex, GW_OUT_BAD_KEY, 400, "bad-request", "Bad Request",
            idem_strerror(rc), NULL);
    return;
  }
  claim(ex);
}

const gw_handler gw_engine = {handle, stream_proceed, stream_stop};

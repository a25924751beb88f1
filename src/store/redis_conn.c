/*
 * redis_conn.c - the Redis store's connection: one hiredis async connection
 * per handle, on the handle's libuv loop, and the handle's lifetime.
 *
 *   DOWN ──backoff timer──► CONNECTING ──AUTH, SELECT, ROLE master, SCRIPT LOAD──► UP
 *     ▲                          │ refused, error, connect timeout        │
 *     └──────────────────────────┴──────── lost, command timeout ◄────────┘
 *
 * Reconnection backs off exponentially from 100ms to 2s, with jitter so
 * that a fleet does not reconnect in step (backoff.h). Reqs that waited for
 * a connection attempt start when it is UP (rs->start) and fail when it
 * fails; what happens to commands in flight is redis.c's rule, carried out
 * by hiredis calling each one back with no reply when the context is freed.
 *
 * CONNECTING starts with the host name's resolution on libuv's thread pool
 * (uv_getaddrinfo): hiredis would call getaddrinfo on the loop thread, and a
 * slow DNS server during an outage would then stall every request of that
 * loop, replays and pass-through included. hiredis gets the numeric address.
 * The name's addresses are tried in turn until one takes the connection;
 * one whose attempt timed out is tried after the others next time
 * (idem_slow_addrs), so a dead first address costs one connect timeout,
 * not every attempt.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_env.h"

void redis_note(rstore *rs, const char *fmt, const char *detail) {
  char line[sizeof rs->last_error];
  snprintf(line, sizeof line, fmt, detail ? detail : "");
  /* one line per change of situation, not one per attempt */
  if (strcmp(line, rs->last_error) != 0) {
    fprintf(stderr, "idem: redis %s:%d: %s\n", rs->uri.host, rs->uri.port, line);
    snprintf(rs->last_error, sizeof rs->last_error, "%s", line);
  }
}

void redis_req_done(rstore *rs, idem_req *req, int err) {
  rs->held--;
  if (rs->owner)
    rs->owner->done(rs, req, err);
  else if (err)
    idem_req_fail(req, err);
  else
    idem_req_finish(req);
  redis_maybe_teardown(rs);
}

static void fail_waiting(rstore *rs, int err) {
  idem_queue waiting;
  idem_req *req;
  idem_queue_move(&rs->waiting, &waiting);
  while ((req = idem_req_of(idem_queue_pop(&waiting))))
    redis_req_done(rs, req, err);
}

static void on_backoff(uv_timer_t *t) {
  rstore *rs = t->data;
  if (!rs->closing && rs->state == R_DOWN)
    redis_conn_start(rs);
}

static void schedule_reconnect(rstore *rs) {
  if (rs->closing) {
    redis_maybe_teardown(rs);
    return;
  }
  uv_timer_start(&rs->conn_timer, on_backoff, idem_backoff_next(&rs->backoff), 0);
}

/* Give up this connection: every command in flight gets a NULL reply
 * (hiredis calls them back from redisAsyncFree), reqs still waiting for a
 * connection fail, and a new attempt is scheduled. */
void redis_conn_drop(rstore *rs, const char *why) {
  redisAsyncContext *ac = rs->ac;
  rs->ac = NULL;
  rs->state = R_DOWN;
  uv_timer_stop(&rs->conn_timer);
  if (why)
    redis_note(rs, "%s; reconnecting", why);
  if (ac) {
    ac->data = NULL; /* its disconnect callback is ours to ignore now */
    redisAsyncFree(ac);
  }
  fail_waiting(rs, rs->closing ? IDEM_ECLOSED : IDEM_ESTORE);
  if (!rs->closing && rs->owner && rs->owner->dropped)
    rs->owner->dropped(rs);
  schedule_reconnect(rs);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  rstore *rs = ac->data;
  (void)status;
  if (rs == NULL || rs->ac != ac)
    return;
  /* hiredis frees ac after this; the pending callbacks have run */
  rs->ac = NULL;
  redis_conn_drop(rs, ac->errstr[0] ? ac->errstr : "connection closed");
}

static void connect_next(rstore *rs, const char *why);

static void on_connect(const redisAsyncContext *ac, int status) {
  rstore *rs = ac->data;
  if (rs == NULL || rs->ac != ac || status == REDIS_OK)
    return;
  /* hiredis frees ac after this, without a disconnect callback; the name's
   * next address, if any, gets a context of its own */
  rs->ac = NULL;
  connect_next(rs, ac->errstr[0] ? ac->errstr : "cannot connect");
}

static void on_connect_timeout(uv_timer_t *t) {
  rstore *rs = t->data;
  if (rs->state != R_CONNECTING)
    return;
  if (!rs->ac) {
    redis_conn_drop(rs, "connect timed out");
    return;
  }
  const char *addr = rs->addrs[rs->next_addr - 1];
  char why[120];
  snprintf(why, sizeof why, "connect to %s timed out", addr);
  idem_slow_addrs_note(&rs->slow, addr); /* the next attempt tries it last */
  redis_conn_drop(rs, why);
}

static void on_handshake(redisAsyncContext *ac, void *reply, void *privdata) {
  rstore *rs = ac->data;
  redisReply *r = reply;
  if (rs == NULL || rs->ac != ac || rs->state != R_CONNECTING || r == NULL)
    return; /* the drop is already under way */
  /* A user whose ACL allows only what idem runs may not ask ROLE or SCRIPT
   * LOAD: go on without (EVALSHA falls back to EVAL on NOSCRIPT). */
  int optional = strcmp(privdata, "ROLE") == 0 || strcmp(privdata, "SCRIPT LOAD") == 0;
  if (r->type == REDIS_REPLY_ERROR && !(optional && !strncmp(r->str, "NOPERM", 6))) {
    char why[120];
    snprintf(why, sizeof why, "%s refused: %.80s", (const char *)privdata, r->str);
    /* A server that refuses the store (a wrong password, a /db past its
     * databases) is one an operator fixes while it runs: its reason is
     * logged at each try, not once as an outage's is (README, --store). */
    rs->last_error[0] = '\0';
    redis_conn_drop(rs, why);
    return;
  }
  if (!strcmp(privdata, "ROLE") && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master")) {
    /* a replica takes no writes: back off until the name leads to a master */
    redis_conn_drop(rs, "server is a replica");
    return;
  }
  if (--rs->handshake_left > 0)
    return;
  rs->state = R_UP;
  idem_backoff_reset(&rs->backoff);
  idem_slow_addrs_forget(&rs->slow, rs->addrs[rs->next_addr - 1]);
  uv_timer_stop(&rs->conn_timer);
  if (rs->last_error[0]) { /* quiet on a first connect, loud on a recovery */
    fprintf(stderr, "idem: redis %s:%d: connected again\n", rs->uri.host, rs->uri.port);
    rs->last_error[0] = '\0';
  }
  idem_queue waiting;
  idem_req *req;
  idem_queue_move(&rs->waiting, &waiting);
  while ((req = idem_req_of(idem_queue_pop(&waiting))))
    rs->start(rs, req);
}

static void on_resolved(void *owner, int status, const struct addrinfo *addrs) {
  rstore *rs = owner;
  rs->resolves_open--;
  if (status == 0) {
    rs->naddrs = idem_lookup_addresses(addrs, rs->addrs, IDEM_LOOKUP_MAX);
    rs->next_addr = 0;
  }
  if (rs->state != R_CONNECTING || rs->ac) {
    /* its attempt timed out: the next one starts from these addresses */
    rs->addrs_ready = status == 0 && rs->naddrs > 0;
  } else if (rs->closing && idem_queue_empty(&rs->waiting)) {
    rs->state = R_DOWN; /* nothing waits for this connection */
    uv_timer_stop(&rs->conn_timer);
  } else if (status < 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot resolve %.100s: %s", rs->uri.host, uv_strerror(status));
    redis_conn_drop(rs, why);
  } else {
    connect_next(rs, "no address");
  }
  redis_maybe_teardown(rs);
}

/* DOWN -> CONNECTING: resolve the host (see the top), then connect_next. */
void redis_conn_start(rstore *rs) {
  uv_update_time(rs->loop); /* the connect timeout counts from now */
  rs->state = R_CONNECTING;
  uv_timer_start(&rs->conn_timer, on_connect_timeout, (uint64_t)rs->uri.connect_timeout_ms, 0);
  /* A DNS server slower than connect_timeout: the lookup of an attempt
   * that timed out answers the next attempt (still out: when it comes;
   * done: at once), so lookups never pile up and a slow one still counts. */
  if (rs->resolves_open > 0)
    return;
  if (rs->addrs_ready) {
    rs->addrs_ready = 0;
    rs->next_addr = 0;
    connect_next(rs, "no address");
    return;
  }
  int rc = idem_lookup_start(rs->loop, rs->uri.host, on_resolved, rs);
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot resolve %.100s: %s", rs->uri.host, uv_strerror(rc));
    redis_conn_drop(rs, why);
    return;
  }
  rs->resolves_open++;
}

/* Connect to the next address of this attempt: the first that answers
 * wins, as libpq does (hiredis alone would stop at the first that takes a
 * connect() call, and a refusal comes later). why: the last failure. */
static void connect_next(rstore *rs, const char *why) {
  char last[160];
  snprintf(last, sizeof last, "%s", why);
  if (rs->next_addr == 0) /* a new attempt */
    idem_slow_addrs_last(&rs->slow, rs->addrs, rs->naddrs);
  redisAsyncContext *ac = NULL;
  while (!ac && rs->next_addr < rs->naddrs) {
    ac = redisAsyncConnect(rs->addrs[rs->next_addr++], rs->uri.port);
    if (ac == NULL) {
      redis_conn_drop(rs, "out of memory");
      return;
    }
    if (ac->err) {
      snprintf(last, sizeof last, "cannot connect: %.100s", ac->errstr);
      redisAsyncFree(ac);
      ac = NULL;
    }
  }
  if (ac == NULL) {
    redis_conn_drop(rs, last);
    return;
  }
  if (redis_uv_attach(ac, rs->loop, NULL, NULL) != 0) {
    redisAsyncFree(ac);
    redis_conn_drop(rs, "cannot watch the socket");
    return;
  }
  ac->data = rs;
  rs->ac = ac;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);

  /* Pipelined behind the connect; the last reply makes the connection UP. */
  rs->handshake_left = 0;
  if (rs->uri.password) {
    if (rs->uri.user)
      redisAsyncCommand(ac, on_handshake, (char *)"AUTH", "AUTH %s %s", rs->uri.user, rs->uri.password);
    else
      redisAsyncCommand(ac, on_handshake, (char *)"AUTH", "AUTH %s", rs->uri.password);
    rs->handshake_left++;
  }
  if (rs->uri.db != 0) {
    redisAsyncCommand(ac, on_handshake, (char *)"SELECT", "SELECT %d", rs->uri.db);
    rs->handshake_left++;
  }
  if (!rs->owner || !rs->owner->any_role) {
    redisAsyncCommand(ac, on_handshake, (char *)"ROLE", "ROLE");
    rs->handshake_left++;
  }
  const char *argv[] = {"SCRIPT", "LOAD", idem_redis_script};
  size_t lens[] = {6, 4, idem_redis_script_len};
  redisAsyncCommandArgv(ac, on_handshake, (char *)"SCRIPT LOAD", 3, argv, lens);
  rs->handshake_left++;
}

static void on_timer_closed(uv_handle_t *h) {
  rstore *rs = h->data;
  if (--rs->timers_open > 0)
    return;
  idem_store *store = rs->store;
  const redis_owner *owner = rs->owner;
  void *owner_data = rs->owner_data;
  idem_redis_uri_clear(&rs->uri);
  free(rs);
  if (owner)
    owner->closed(owner_data);
  else
    idem_backend_closed(store);
}

/* Closing finishes once no req is held: in-flight commands are answered
 * (or time out) first, so an acknowledged completion is never cut off. */
void redis_maybe_teardown(rstore *rs) {
  if (!rs->closing || rs->held > 0 || rs->resolves_open > 0 || rs->timers_open == 0 ||
      uv_is_closing((uv_handle_t *)&rs->conn_timer))
    return;
  redisAsyncContext *ac = rs->ac;
  rs->ac = NULL;
  rs->state = R_DOWN;
  if (ac) {
    ac->data = NULL;
    redisAsyncFree(ac); /* deferred by hiredis when inside its callback */
  }
  uv_close((uv_handle_t *)&rs->conn_timer, on_timer_closed);
  uv_close((uv_handle_t *)&rs->cmd_timer, on_timer_closed);
  uv_close((uv_handle_t *)&rs->wait_prepare, on_timer_closed);
}

/*
 * consume_run.c - the consumer's life: open the handler's pool, the store,
 * the admin listener and the broker; run the loop; on SIGTERM or SIGINT
 * stop fetching, let the flow (consume.c) finish what it holds, and close
 * the parts one after the other.
 */
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consume/broker.h"
#include "consume/consume.h"
#include "consume/cs_admin.h"
#include "consume/flow.h"
#include "http/config.h"
#include "http/upstream.h"
#include "store/backend.h"

static void on_broker_state(void *arg, int up) {
  cs_flow *f = arg;
  if (up && !f->broker_up)
    fprintf(stderr, "idem consume: broker connected\n");
  f->broker_up = up;
}

static const char *not_ready(void *arg) {
  cs_flow *f = arg;
  if (f->stopping)
    return "stopping";
  if (!f->broker_up)
    return "broker not connected";
  if (!f->cfg->no_store && (!f->store || f->store_down))
    return "store unavailable";
  return NULL;
}

static unsigned inflight(void *arg) {
  cs_flow *f = arg;
  return f->njobs;
}

static idem_store *admin_store(void *arg) { return ((cs_flow *)arg)->store; }

static void handle_closed(uv_handle_t *h) { (void)h; }

static void close_handles(cs_flow *f) {
  uv_close((uv_handle_t *)&f->sigterm, handle_closed);
  uv_close((uv_handle_t *)&f->sigint, handle_closed);
  uv_close((uv_handle_t *)&f->keep_timer, handle_closed);
}

static void on_keep_timer(uv_timer_t *t) { cs_flow_keep_held(t->data); }

static void on_admin_stopped(void *arg) { (void)arg; }

static void on_store_closed(idem_store *st, void *arg) {
  cs_flow *f = arg;
  (void)st;
  f->store = NULL;
  if (f->admin)
    cs_admin_stop(f->admin, on_admin_stopped, f);
  f->admin = NULL;
  close_handles(f);
}

static void on_pool_closed(void *arg) {
  cs_flow *f = arg;
  f->pool = NULL;
  if (f->store) {
    idem_store_close(f->store, on_store_closed, f);
    return;
  }
  on_store_closed(NULL, f);
}

static void on_broker_closed(void *arg) {
  cs_flow *f = arg;
  f->broker = NULL;
  upstream_pool_close(f->pool, on_pool_closed, f);
}

/* SIGTERM: fetch no more; what is in flight, and what was fetched ahead,
 * finishes and is settled (a message waiting for the store is handed back,
 * not acked); then the broker, the handler's connections and the store
 * close. */
static void on_signal(uv_signal_t *s, int signum) {
  cs_flow *f = s->data;
  (void)signum;
  if (f->stopping)
    return;
  f->stopping = 1;
  fprintf(stderr, "idem consume: stopping: %u message(s) in flight\n", f->njobs);
  cs_flow_give_credit(f);
  cs_flow_hand_back_held(f);
  cs_broker_close(f->broker, on_broker_closed, f);
}

/* 0, or -1 (exit 1), or -2 for a malformed --store (exit 2). */
static int open_parts(cs_flow *f, const upstream_addrs *to) {
  const cs_config *cfg = f->cfg;
  upstream_options uo = {.max_response = cfg->max_response, .timeout_ms = cfg->handler_timeout_ms};
  f->pool = upstream_pool_new_opts(&f->loop, &uo, to);
  if (!f->pool)
    return -1;
  if (!cfg->no_store) {
    char *msg = NULL;
    int rc = idem_store_open(&f->loop, cfg->store_uri, &f->store, &msg);
    /* As for serve: a network store that is down is retried (messages
     * wait meanwhile); what will not heal, every message would wait on
     * for ever: refuse to start. */
    if (rc && !idem_store_open_may_heal(cfg->store_uri, rc)) {
      /* a malformed URI is a bad flag value (2), as for serve */
      fprintf(stderr, "idem consume: %s'%s': %s\n", rc == IDEM_EURI ? "--store " : "cannot open store ",
              cfg->store_uri, msg ? msg : idem_strerror(rc));
      free(msg);
      return rc == IDEM_EURI ? -2 : -1;
    }
    free(msg);
    f->store_retry_at = uv_now(&f->loop) + 1000;
  }
  if (cfg->has_admin) {
    cs_admin_hooks h = {
        .not_ready = not_ready, .inflight = inflight, .store = admin_store, .arg = f};
    int err = 0, port = cfg->admin.port; /* 0: the one the system picked, as serve says */
    char a[300];
    f->admin = cs_admin_start(&f->loop, cfg->admin.host, &port, &h, &err);
    gw_addr_format(cfg->admin.host, port, a, sizeof a);
    if (!f->admin) {
      fprintf(stderr, "idem consume: cannot listen on %s: %s\n", a, uv_strerror(err));
      return -1;
    }
    fprintf(stderr, "idem consume: admin listening on %s\n", a);
  }
  cs_broker_opts bo = {.loop = &f->loop, .window = (unsigned)(cfg->concurrency + cfg->prefetch),
                       .lock_ttl_ms = cfg->lock_ttl_ms,
                       .max_delay_ms = cfg->max_retry_delay_ms > cfg->lock_ttl_ms
                                           ? cfg->max_retry_delay_ms
                                           : cfg->lock_ttl_ms,
                       .on_message = cs_flow_on_message, .on_state = on_broker_state, .arg = f};
  char *why = NULL;
  if (cs_broker_open(cfg->from, &bo, &f->broker, &why)) {
    fprintf(stderr, "idem consume: --from: %s\n", why ? why : "cannot open the broker");
    free(why);
    return -1;
  }
  return 0;
}

int cs_run(const cs_config *cfg) {
  static cs_flow flow; /* lives as long as the loop */
  cs_flow *f = &flow;
  upstream_addrs to;
  signal(SIGPIPE, SIG_IGN);
  memset(f, 0, sizeof *f);
  f->cfg = cfg;
  idem_queue_init(&f->jobs);
  idem_queue_init(&f->ready);
  if (upstream_resolve(cfg->to_host, cfg->to_port, "idem consume: cannot resolve the handler's host",
                       &to) ||
      uv_loop_init(&f->loop))
    return 1;
  int rc = open_parts(f, &to);
  if (rc)
    return rc == -2 ? 2 : 1; /* the process exits: what was opened goes with it */
  uv_signal_init(&f->loop, &f->sigterm);
  uv_signal_init(&f->loop, &f->sigint);
  f->sigterm.data = f->sigint.data = f;
  uv_signal_start(&f->sigterm, on_signal, SIGTERM);
  uv_signal_start(&f->sigint, on_signal, SIGINT);
  uint64_t every = (uint64_t)cfg->lock_ttl_ms / 4;
  uv_timer_init(&f->loop, &f->keep_timer);
  f->keep_timer.data = f;
  uv_timer_start(&f->keep_timer, on_keep_timer, every ? every : 1, every ? every : 1);
  fprintf(stderr, "idem consume: consuming to http://%s%s, store %s\n", cfg->to_authority,
          cfg->to_path, cfg->no_store ? "none (benchmark forwarder)" : cfg->store_uri);
  cs_flow_give_credit(f);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  fprintf(stderr, "idem consume: stopped\n");
  return 0;
}

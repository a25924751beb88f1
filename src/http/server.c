/*
 * server.c - process shape of `idem serve`: N worker threads, each with its
 * own uv loop, store handle, upstream pool and listening socket (bound with
 * SO_REUSEPORT so the kernel spreads connections), and the main thread's loop
 * for signals and the admin listener. SIGTERM/SIGINT: stop accepting, answer
 * requests in flight, close pools and stores, exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/admin.h"
#include "http/gateway.h"
#include "http/metrics.h"
#include "http/store_handle.h"
#include "store/backend.h"

typedef struct {
  const gw_config *cfg;
  uv_loop_t loop;
  uv_signal_t sigterm, sigint, sighup, sigusr1;
  gw_worker *workers;
  int nworkers;
  gw_admin *admin;
  int *fds; /* each worker's listening socket, until it owns it */
  gw_spool *spool;
  uv_timer_t drain_deadline; /* SIGTERM + --drain-timeout: exit, whatever is left */
  uv_async_t finished;       /* a worker's loop is done */
  int stopping;
} gw_server;

/* A listening socket; port 0 picks one, written back to *port. */
static int listen_socket(const char *host, int *port, int reuseport) {
  struct sockaddr_storage ss;
  socklen_t sl;
  memset(&ss, 0, sizeof ss);
  if (strchr(host, ':')) {
    uv_ip6_addr(host, *port, (struct sockaddr_in6 *)&ss);
    sl = sizeof(struct sockaddr_in6);
  } else {
    uv_ip4_addr(host, *port, (struct sockaddr_in *)&ss);
    sl = sizeof(struct sockaddr_in);
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one)) {
    int e = errno;
    close(fd);
    return -e;
  }
  if (bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, 1024)) {
    int e = errno;
    close(fd);
    return -e;
  }
  if (*port == 0) {
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port = gw_sockaddr_port(&ss);
  }
  return fd;
}

/* ---- workers ---- */

/* Accepting pauses in two cases. Out of descriptors, libuv's accept loop
 * would spin (its reserve-fd trick is per loop, and the workers share one
 * descriptor table); at --max-conns open connections, the worker takes no
 * more. Closing the handle ends the accept loop; a dup of the socket keeps
 * it and its backlog alive (clients wait there, nobody is refused), and the
 * listener comes back from the dup: after a pause when out of descriptors,
 * when a connection closes at the limit. */
#define ACCEPT_PAUSE_MS 250

static void on_connection(uv_stream_t *l, int status);
static void relisten_later(uv_timer_t *t);
static void on_listener_paused(uv_handle_t *h);

static void relisten(gw_worker *w) {
  if (w->stopping || w->listener_open || w->listener_closing ||
      w->nconns >= (size_t)w->cfg->max_conns)
    return; /* at the limit, the next connection to close calls again */
  int fd = fcntl(w->listen_spare_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    uv_timer_start(&w->accept_timer, relisten_later, ACCEPT_PAUSE_MS, 0);
    return;
  }
  uv_tcp_init(&w->loop, &w->listener);
  w->listener.data = w;
  int opened = uv_tcp_open(&w->listener, fd) == 0;
  if (!opened)
    close(fd);
  if (!opened || uv_listen((uv_stream_t *)&w->listener, 1024, on_connection)) {
    w->listener_closing = 1;
    uv_timer_start(&w->accept_timer, relisten_later, ACCEPT_PAUSE_MS, 0);
    uv_close((uv_handle_t *)&w->listener, on_listener_paused);
    return;
  }
  w->listener_open = 1;
}

static void relisten_later(uv_timer_t *t) { relisten(t->data); }

/* The paused handle is closed: listen again now unless a timer will (out
 * of descriptors) or the limit still holds (relisten checks). */
static void on_listener_paused(uv_handle_t *h) {
  gw_worker *w = h->data;
  w->listener_closing = 0;
  if (!uv_is_active((uv_handle_t *)&w->accept_timer))
    relisten(w);
}

static void listener_pause(gw_worker *w) {
  w->listener_open = 0;
  w->listener_closing = 1;
  uv_close((uv_handle_t *)&w->listener, on_listener_paused);
}

static void worker_idle(gw_worker *w);

/* A client connection of w is gone: the last of a stopping worker lets its
 * pool and store go; otherwise accept again if --max-conns paused it. */
static void on_conn_closed(gw_worker *w) {
  if (w->stopping && w->nconns == 0)
    worker_idle(w);
  else if (!w->listener_open && !uv_is_active((uv_handle_t *)&w->accept_timer))
    relisten(w);
}

static void on_connection(uv_stream_t *l, int status) {
  gw_worker *w = l->data;
  if (status == UV_EMFILE || status == UV_ENFILE) {
    if (w->listener_open && !w->stopping) {
      fprintf(stderr,
              "idem serve: out of file descriptors (%s); accepting paused for "
              "%dms\n",
              uv_strerror(status), ACCEPT_PAUSE_MS);
      /* the timer fires in a later loop turn, after the handle's close */
      uv_timer_start(&w->accept_timer, relisten_later, ACCEPT_PAUSE_MS, 0);
      listener_pause(w);
    }
    return;
  }
  if (status < 0 || w->stopping)
    return;
  gw_conn_accept(w);
  if (w->listener_open && w->nconns >= (size_t)w->cfg->max_conns) {
    if (!w->limit_logged)
      fprintf(stderr,
              "idem serve: %zu client connections open on a worker "
              "(--max-conns); accepting paused until one closes (logged once)\n",
              w->nconns);
    w->limit_logged = 1;
    listener_pause(w);
  }
}

static void on_async_closed(uv_handle_t *h) { (void)h; }

static idem_store *worker_store(gw_worker *w) {
  return gw_store_reopen(&w->loop, w->cfg->store_uri, w->cfg->cache_uri, "", &w->store,
                         &w->store_retry_at);
}

/* ---- the spool's drain (worker 0) ----
 * Rounds run every DRAIN_EVERY_MS, one at a time; a round with an empty
 * spool is one read transaction. Stopping, worker 0 keeps draining until the
 * spool is empty; the main thread's --drain-timeout ends that. */
#define DRAIN_EVERY_MS 200

static void worker_close(gw_worker *w);

static void on_drain_round(void *arg, size_t failed) {
  gw_worker *w = arg;
  (void)failed; /* left in the spool: the next round tries again */
  w->draining = 0;
  if (w->stopped && !gw_spool_depth(w->spool))
    worker_close(w);
}

static void on_drain_tick(uv_timer_t *t) {
  gw_worker *w = t->data;
  if (w->draining)
    return;
  idem_store *st = worker_store(w);
  w->draining = 1;
  gw_spool_drain(w->spool, &w->loop, st, on_drain_round, w);
}

static void store_closed(idem_store *st, void *arg) {
  gw_worker *w = arg;
  (void)st;
  w->store = NULL;
  gw_access_buf_stop(&w->access); /* every line of this worker's requests is out */
  if (w->drain_on)
    uv_close((uv_handle_t *)&w->drain_timer, NULL);
  uv_close((uv_handle_t *)&w->stop_async, on_async_closed);
}

static void pool_closed(void *arg) {
  gw_worker *w = arg;
  w->pool = NULL;
  if (w->store)
    idem_store_close(w->store, store_closed, w);
  else
    store_closed(NULL, w);
}

static void worker_close(gw_worker *w) {
  if (w->pool_closing)
    return;
  w->pool_closing = 1;
  upstream_pool_close(w->pool, pool_closed, w);
}

/* Worker 0 empties the spool before it lets its store go. */
static void worker_idle(gw_worker *w) {
  if (w->stopped)
    return;
  w->stopped = 1;
  if (w->spool && w->id == 0 && (w->draining || gw_spool_depth(w->spool))) {
    fprintf(stderr, "idem serve: draining %zu spooled answers into the store before exiting\n",
            gw_spool_depth(w->spool));
    return; /* on_drain_round closes */
  }
  worker_close(w);
}

static void on_stop(uv_async_t *a) {
  gw_worker *w = a->data;
  if (w->stopping)
    return;
  w->stopping = 1;
  if (w->listener_open) {
    w->listener_open = 0;
    uv_close((uv_handle_t *)&w->listener, NULL);
  }
  uv_close((uv_handle_t *)&w->accept_timer, NULL);
  if (w->listen_spare_fd >= 0) {
    close(w->listen_spare_fd);
    w->listen_spare_fd = -1;
  }
  gw_conn_drain_all(w);
}

static void worker_main(void *arg) {
  gw_worker *w = arg;
  /* named for top -H, perf and the gateway bench's CPU accounting */
  pthread_setname_np(pthread_self(), "idem-loop");
  uv_run(&w->loop, UV_RUN_DEFAULT);
  atomic_store(&w->loop_done, 1);
  uv_async_send(w->finished);
}

/* Everything that can fail happens here, on the main thread, before any
 * thread starts: errors are reported once and the exit code is honest. */
static int worker_init(gw_worker *w, const gw_config *cfg, int fd,
                       const upstream_addrs *up, gw_server *srv) {
  w->cfg = cfg;
  w->routes_gen = gw_routes_generation();
  w->routes = gw_routes_current();
  idem_queue_init(&w->conns);
  w->handler = &gw_engine;
  w->conn_closed = on_conn_closed;
  w->finished = &srv->finished;
  w->listen_fd = fd;
  w->listen_spare_fd = -1;
  w->upstream_addrs = *up;
  if (uv_loop_init(&w->loop))
    return -1;
  uv_async_init(&w->loop, &w->stop_async, on_stop);
  w->stop_async.data = w;
  uv_timer_init(&w->loop, &w->accept_timer);
  w->accept_timer.data = w;
  uv_tcp_init(&w->loop, &w->listener);
  w->listener.data = w;
  w->listen_spare_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (w->listen_spare_fd < 0 || uv_tcp_open(&w->listener, fd) ||
      uv_listen((uv_stream_t *)&w->listener, 1024, on_connection)) {
    fprintf(stderr, "idem serve: cannot listen\n");
    return -1;
  }
  w->listener_open = 1;
  w->pool = upstream_pool_new(&w->loop, cfg, &w->upstream_addrs);
  if (!w->pool)
    return -1;
  char *msg = NULL;
  int rc = idem_store_open_cached(&w->loop, cfg->store_uri, cfg->cache_uri, &w->store, &msg);
  if (rc) {
    fprintf(stderr, "idem serve: %s %s: %s%s%s\n", rc == IDEM_EURI ? "--store" : "store",
            cfg->store_uri, idem_strerror(rc), msg ? ": " : "", msg ? msg : "");
    free(msg);
    w->store = NULL;
    /* A network store that is down is retried per request (503 or
     * pass-through meanwhile); what will not heal refuses to start. */
    if (!idem_store_open_may_heal(cfg->store_uri, rc))
      return rc == IDEM_EURI ? -2 : -1;
    w->store_retry_at = uv_now(&w->loop) + 1000;
  }
  gw_access_buf_start(&w->access, &w->loop);
  return 0;
}

/* The spool goes to every worker; worker 0 drains it. */
static void worker_take_spool(gw_worker *w, gw_spool *spool) {
  w->spool = spool;
  if (w->spool && w->id == 0) {
    uv_timer_init(&w->loop, &w->drain_timer);
    w->drain_timer.data = w;
    uv_timer_start(&w->drain_timer, on_drain_tick, 0, DRAIN_EVERY_MS);
    w->drain_on = 1;
  }
}

/* ---- main loop: signals ---- */

static void on_admin_stopped(void *arg) { (void)arg; }

/* Every answer that was handed out is in the store or the spool, both
 * durable: what is cut here was never acknowledged, and its lease holds. */
static void on_drain_deadline(uv_timer_t *t) {
  gw_server *srv = t->data;
  /* the lines of the requests answered so far: SIGTERM writes every one */
  for (int i = 0; i < srv->nworkers; i++)
    gw_access_buf_flush_now(&srv->workers[i].access);
  fprintf(stderr, "idem serve: --drain-timeout reached; exiting with %zu answers in the spool "
                  "(they drain at the next start) and requests still in flight cut\n",
          srv->spool ? gw_spool_depth(srv->spool) : 0);
  fflush(stderr);
  _exit(0);
}

static void on_worker_finished(uv_async_t *a) {
  gw_server *srv = a->data;
  int done = 0;
  for (int i = 0; i < srv->nworkers; i++)
    done += atomic_load(&srv->workers[i].loop_done);
  if (done < srv->nworkers)
    return;
  uv_close((uv_handle_t *)&srv->finished, NULL);
  uv_close((uv_handle_t *)&srv->drain_deadline, NULL);
  /* only now: a closed handle gives its signal back its default action,
   * and a second SIGTERM (or a logrotate's SIGUSR1) during the drain would
   * kill the process with requests in flight */
  uv_close((uv_handle_t *)&srv->sigterm, NULL);
  uv_close((uv_handle_t *)&srv->sigint, NULL);
  uv_close((uv_handle_t *)&srv->sighup, NULL);
  uv_close((uv_handle_t *)&srv->sigusr1, NULL);
}

static void on_signal(uv_signal_t *s, int signum) {
  gw_server *srv = s->data;
  if (srv->stopping) {
    fprintf(stderr, "idem serve: %s: already finishing requests in flight (--drain-timeout "
                    "ends it)\n", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    return;
  }
  srv->stopping = 1;
  fprintf(stderr, "idem serve: %s: finishing requests in flight, then exiting\n",
          signum == SIGTERM ? "SIGTERM" : "SIGINT");
  for (int i = 0; i < srv->nworkers; i++)
    uv_async_send(&srv->workers[i].stop_async);
  uv_timer_start(&srv->drain_deadline, on_drain_deadline, (uint64_t)srv->cfg->drain_timeout_ms, 0);
  if (srv->admin)
    gw_admin_stop(srv->admin, on_admin_stopped, srv);
}

/* SIGHUP: read the config file again. A good one applies to the requests
 * that start from now on (each worker takes the new table at its next
 * request; requests in flight finish under the old one, which goes when
 * the last of them does); a bad one changes nothing. */
static void on_sighup(uv_signal_t *s, int signum) {
  gw_server *srv = s->data;
  (void)signum;
  const gw_config *cfg = srv->cfg;
  if (srv->stopping) {
    fprintf(stderr, "idem serve: SIGHUP: stopping; the config file is not read again\n");
    return;
  }
  if (!cfg->config_file) {
    fprintf(stderr, "idem serve: SIGHUP: no --config file to reload; nothing changes\n");
    return;
  }
  char err[1024], changed[512];
  gw_routes *t = NULL;
  if (gw_config_reload(cfg, &t, changed, sizeof changed, err, sizeof err)) {
    gw_metrics_reload(0);
    fprintf(stderr, "idem serve: reload refused, the running policy stays: %s\n", err);
    return;
  }
  gw_metrics_reload(1);
  int n = t->n;
  fprintf(stderr, "idem serve: reloaded %s: %d route%s\n", cfg->config_file, n, n == 1 ? "" : "s");
  gw_config_warn_leases(cfg, t, "idem serve");
  gw_routes_publish(t);
  if (changed[0])
    fprintf(stderr, "idem serve: reload: %s changed in %s but cannot change while serve runs; "
                    "the running values stay until a restart\n", changed, cfg->config_file);
}

/* The spool, for every store that can fail: memory: cannot. */
static int open_spool(gw_server *srv) {
  const gw_config *cfg = srv->cfg;
  if (!cfg->spool_dir || !strncmp(cfg->store_uri, "memory:", 7))
    return 0;
  char err[512];
  if (gw_spool_open(cfg->spool_dir, cfg->store_uri, &srv->spool, err, sizeof err)) {
    fprintf(stderr, "idem serve: %s (--spool DIR, or --spool off)\n", err);
    return -1;
  }
  if (gw_spool_depth(srv->spool))
    fprintf(stderr, "idem serve: spool %s holds %zu answers from an earlier run; they drain "
                    "into the store now\n",
            cfg->spool_dir, gw_spool_depth(srv->spool));
  return 0;
}

/* Answers of megabytes (replays, kept answers) are malloc'd per exchange.
 * glibc serves blocks past M_MMAP_THRESHOLD with their own mmap, unmapped
 * on free, but it raises that threshold to the size of each such block
 * freed, after which later big answers come from the arenas and stay
 * resident once freed: measured, 200 clients stalled on a 4 MiB replay took
 * RSS from 27 MB to 855 MB, and 793 MB stayed after they were closed.
 * Fixing the threshold keeps every big answer in its own mapping, so the
 * memory goes back when its exchange ends. At 64 KiB it also covers each
 * connection's input buffer (conn.c reserves 64 KiB), which the arenas
 * otherwise kept, fragmented, after 200 connections closed: 15-20 MB above
 * an idle 14 MB at 256 KiB. A mapping per connection costs one mmap when it
 * opens, not one per request. */
#define BIG_ALLOC_BYTES (64 * 1024)

/* The largest upstream answer head read (http_parser's own default): an
 * upstream's headers are not the client's, whatever --max-header says. */
#define UPSTREAM_HEAD_MAX (80 * 1024)

/* A listening socket on addr (port 0: a free one, written back), or -1
 * after saying why. what: "" or " (admin)". */
static int listen_or_say(const gw_addr *addr, int *port, int reuseport, const char *what) {
  int fd = listen_socket(addr->host, port, reuseport);
  if (fd < 0) {
    char a[300];
    gw_addr_format(addr->host, *port, a, sizeof a);
    fprintf(stderr, "idem serve: cannot listen on %s%s: %s\n", a, what, strerror(-fd));
  }
  return fd;
}

/* One SO_REUSEPORT socket per worker in srv->fds, all on one port (written
 * back to *port). SO_REUSEPORT would let this process share a port another
 * process (say, a second idem serve) already listens on, splitting traffic
 * between them unnoticed: a plain probe makes sure the port is free first. */
static int listen_workers(gw_server *srv, int *port) {
  const gw_config *cfg = srv->cfg;
  if (*port != 0) {
    int probe_port = *port, probe = listen_or_say(&cfg->listen, &probe_port, 0, "");
    if (probe < 0)
      return -1;
    close(probe);
  }
  for (int i = 0; i < cfg->workers; i++)
    if ((srv->fds[i] = listen_or_say(&cfg->listen, port, 1, "")) < 0) {
      for (int k = 0; k < i; k++)
        close(srv->fds[k]);
      return -1;
    }
  return 0;
}

/* Tear down the workers built before a start-up failure; nothing ran yet. */
static void unbuild(gw_server *srv, int inited) {
  for (int i = 0; i < inited; i++) {
    gw_worker *w = &srv->workers[i];
    w->stopping = 1;
    if (!uv_is_closing((uv_handle_t *)&w->listener))
      uv_close((uv_handle_t *)&w->listener, NULL);
    if (!uv_is_closing((uv_handle_t *)&w->accept_timer))
      uv_close((uv_handle_t *)&w->accept_timer, NULL);
    if (w->listen_spare_fd >= 0)
      close(w->listen_spare_fd);
    w->stopped = 1;
    if (w->pool)
      worker_close(w);
    else
      uv_close((uv_handle_t *)&w->stop_async, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
  }
  for (int i = inited; i < srv->cfg->workers; i++)
    close(srv->fds[i]);
}

/* Everything that can fail, in order: the workers (store, pool), the
 * spool (after the store, so that a bad store URI leaves no spool
 * directory behind), the admin socket. 0, or 1/2 for the exit status (2: a
 * bad URI). */
static int build(gw_server *srv, const upstream_addrs *up, int *admin_fd,
                 int *admin_port) {
  const gw_config *cfg = srv->cfg;
  int rc = 0, inited = 0;
  for (int i = 0; i < cfg->workers && !rc; i++) {
    srv->workers[i].id = i;
    rc = worker_init(&srv->workers[i], cfg, srv->fds[i], up, srv);
    inited = i + 1;
  }
  if (!rc)
    rc = open_spool(srv);
  for (int i = 0; i < cfg->workers && !rc; i++)
    worker_take_spool(&srv->workers[i], srv->spool);
  if (!rc && cfg->has_admin && (*admin_fd = listen_or_say(&cfg->admin, admin_port, 0, " (admin)")) < 0)
    rc = -1;
  if (!rc)
    return 0;
  unbuild(srv, inited);
  gw_spool_close(srv->spool);
  return rc == -2 ? 2 : 1;
}

/* The main loop's handles: admin listener, drain deadline, signals. */
/* SIGUSR1: the access log's path again, for logrotate (after a move). */
static void on_sigusr1(uv_signal_t *s, int signum) {
  (void)s;
  (void)signum;
  if (gw_access_log_reopen())
    fprintf(stderr, "idem serve: cannot reopen the access log: %s\n", strerror(errno));
}

static void start_main_loop(gw_server *srv, int admin_fd) {
  if (admin_fd >= 0 && !(srv->admin = gw_admin_start(&srv->loop, srv->cfg, admin_fd)))
    fprintf(stderr, "idem serve: admin listener failed\n");
  uv_timer_init(&srv->loop, &srv->drain_deadline);
  srv->drain_deadline.data = srv;
  uv_async_init(&srv->loop, &srv->finished, on_worker_finished);
  srv->finished.data = srv;
  uv_signal_init(&srv->loop, &srv->sigterm);
  uv_signal_init(&srv->loop, &srv->sigint);
  uv_signal_init(&srv->loop, &srv->sighup);
  uv_signal_init(&srv->loop, &srv->sigusr1);
  srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv->sigusr1.data = srv;
  uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
  uv_signal_start(&srv->sigint, on_signal, SIGINT);
  uv_signal_start(&srv->sighup, on_sighup, SIGHUP);
  uv_signal_start(&srv->sigusr1, on_sigusr1, SIGUSR1);
}

static void say_ready(const gw_server *srv, int port, int admin_port) {
  char a[300];
  gw_addr_format(srv->cfg->listen.host, port, a, sizeof a);
  fprintf(stderr, "idem serve: listening on %s\n", a);
  if (srv->admin) {
    gw_addr_format(srv->cfg->admin.host, admin_port, a, sizeof a);
    fprintf(stderr, "idem serve: admin listening on %s\n", a);
  }
  fflush(stderr);
}

int gw_run(const gw_config *cfg) {
  mallopt(M_MMAP_THRESHOLD, BIG_ALLOC_BYTES);
  signal(SIGPIPE, SIG_IGN);
  /* http_parser's limit is one for the whole process: it bounds the
   * upstream's answer heads (and trailers) too, which --max-header does
   * not. Clients' heads are held to --max-header by reqparse.c itself. */
  uint64_t parser_max = cfg->max_header + 1024;
  http_parser_set_max_header_size((uint32_t)(parser_max > UPSTREAM_HEAD_MAX ? parser_max
                                                                            : UPSTREAM_HEAD_MAX));
  gw_server srv;
  memset(&srv, 0, sizeof srv);
  srv.cfg = cfg;
  char err[512];
  if (cfg->access_log && gw_access_log_open(cfg->access_log, err, sizeof err)) {
    fprintf(stderr, "idem serve: %s\n", err);
    return 2;
  }
  gw_routes_publish(gw_routes_hold(cfg->routes)); /* the table in force */
  upstream_addrs up;
  if (upstream_resolve(cfg->upstream_host, cfg->upstream_port, "idem serve: upstream host", &up))
    return 1;
  gw_config_warn_leases(cfg, cfg->routes, "idem serve");
  int n = cfg->workers, port = cfg->listen.port, admin_fd = -1, admin_port = cfg->admin.port;
  srv.fds = calloc((size_t)n, sizeof *srv.fds);
  srv.workers = calloc((size_t)n, sizeof *srv.workers);
  int rc = !srv.fds || !srv.workers ? (fprintf(stderr, "idem serve: out of memory\n"), 1)
           : listen_workers(&srv, &port)  ? 1
                                          : build(&srv, &up, &admin_fd, &admin_port);
  if (!rc) {
    uv_loop_init(&srv.loop);
    start_main_loop(&srv, admin_fd);
    for (int i = 0; i < n; i++)
      uv_thread_create(&srv.workers[i].thread, worker_main, &srv.workers[i]);
    srv.nworkers = n;
    say_ready(&srv, port, admin_port);
    uv_run(&srv.loop, UV_RUN_DEFAULT);
    for (int i = 0; i < n; i++) {
      uv_thread_join(&srv.workers[i].thread);
      uv_loop_close(&srv.workers[i].loop);
    }
    uv_loop_close(&srv.loop);
    gw_spool_close(srv.spool);
  }
  for (int i = 0; srv.workers && i < n; i++)
    gw_routes_release(srv.workers[i].routes);
  gw_routes_publish(NULL);
  gw_access_log_close();
  free(srv.fds);
  free(srv.workers);
  return rc;
}

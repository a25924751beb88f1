/* metrics.c - atomic counters and histograms, Prometheus text output. */
#include "http/metrics.h"

#include "store/lmdb.h"
#include "store/store_cache.h"

#include <stdatomic.h>

static const double bucket_le[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                   0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                   5,      10,    30};
#define NBUCKETS (sizeof bucket_le / sizeof bucket_le[0])

typedef struct {
  atomic_uint_fast64_t bucket[NBUCKETS]; /* non-cumulative */
  atomic_uint_fast64_t count;
  atomic_uint_fast64_t sum_us;
} histogram;

static atomic_uint_fast64_t outcomes[GW_OUT_COUNT];
static histogram hists[GW_HIST_COUNT];
static atomic_int_fast64_t leases, connections;
static atomic_uint_fast64_t complete_failed, release_failed;
static atomic_uint_fast64_t spool_writes, spool_drained;
static atomic_size_t spool_depth;
static atomic_uint_fast64_t shadows[GW_SHADOW_COUNT], reloads[2];

static const char *const shadow_names[] = {
#define GW_SHADOW_NAME(name, text) text,
    GW_SHADOWS(GW_SHADOW_NAME)
#undef GW_SHADOW_NAME
};

void gw_metrics_shadow(gw_shadow s) {
  atomic_fetch_add_explicit(&shadows[s], 1, memory_order_relaxed);
}
const char *gw_shadow_name(gw_shadow s) { return shadow_names[s]; }
void gw_metrics_reload(int ok) { atomic_fetch_add_explicit(&reloads[!!ok], 1, memory_order_relaxed); }

/* The counters shadow mode and reloads add. */
static int render_policy(gw_buf *out) {
  if (gw_buf_puts(out, "# HELP idem_shadow_total Requests a route in mode shadow let through "
                       "that enforce would have replayed, refused or held.\n"
                       "# TYPE idem_shadow_total counter\n"))
    return -1;
  for (int i = 0; i < GW_SHADOW_COUNT; i++)
    if (gw_buf_printf(out, "idem_shadow_total{would=\"%s\"} %llu\n", shadow_names[i],
                      (unsigned long long)atomic_load_explicit(&shadows[i], memory_order_relaxed)))
      return -1;
  return gw_buf_printf(out,
                       "# HELP idem_config_reloads_total Config file reloads (SIGHUP).\n"
                       "# TYPE idem_config_reloads_total counter\n"
                       "idem_config_reloads_total{result=\"ok\"} %llu\n"
                       "idem_config_reloads_total{result=\"failed\"} %llu\n",
                       (unsigned long long)atomic_load(&reloads[1]),
                       (unsigned long long)atomic_load(&reloads[0]));
}

static const char *const outcome_names[] = {
#define GW_OUTCOME_NAME(name, text) text,
    GW_OUTCOMES(GW_OUTCOME_NAME)
#undef GW_OUTCOME_NAME
};

const char *gw_metrics_outcome_name(gw_outcome o) { return outcome_names[o]; }

void gw_metrics_outcome(gw_outcome o) {
  atomic_fetch_add_explicit(&outcomes[o], 1, memory_order_relaxed);
}

void gw_metrics_observe(gw_hist h, uint64_t micros) {
  histogram *x = &hists[h];
  double s = (double)micros / 1e6;
  for (size_t i = 0; i < NBUCKETS; i++)
    if (s <= bucket_le[i]) {
      atomic_fetch_add_explicit(&x->bucket[i], 1, memory_order_relaxed);
      break;
    }
  atomic_fetch_add_explicit(&x->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&x->sum_us, micros, memory_order_relaxed);
}

void gw_metrics_leases(int delta) {
  atomic_fetch_add_explicit(&leases, delta, memory_order_relaxed);
}
void gw_metrics_connections(int delta) {
  atomic_fetch_add_explicit(&connections, delta, memory_order_relaxed);
}
void gw_metrics_complete_failed(void) {
  atomic_fetch_add_explicit(&complete_failed, 1, memory_order_relaxed);
}
void gw_metrics_release_failed(void) {
  atomic_fetch_add_explicit(&release_failed, 1, memory_order_relaxed);
}

void gw_metrics_spool_depth(size_t n) { atomic_store_explicit(&spool_depth, n, memory_order_relaxed); }
size_t gw_metrics_spool_depth_get(void) { return atomic_load_explicit(&spool_depth, memory_order_relaxed); }
void gw_metrics_spool_write(void) { atomic_fetch_add_explicit(&spool_writes, 1, memory_order_relaxed); }
void gw_metrics_spool_drained(void) {
  atomic_fetch_add_explicit(&spool_drained, 1, memory_order_relaxed);
}

/* label: "" or one pair such as op="claim". */
static int render_hist(gw_buf *out, const char *name, const char *label,
                       histogram *x) {
  const char *sep = *label ? "," : "";
  uint64_t cum = 0;
  for (size_t i = 0; i < NBUCKETS; i++) {
    cum += atomic_load_explicit(&x->bucket[i], memory_order_relaxed);
    if (gw_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, label, sep,
                      bucket_le[i], (unsigned long long)cum))
      return -1;
  }
  uint64_t count = atomic_load_explicit(&x->count, memory_order_relaxed);
  uint64_t sum = atomic_load_explicit(&x->sum_us, memory_order_relaxed);
  const char *open = *label ? "{" : "", *close = *label ? "}" : "";
  return gw_buf_printf(out,
                       "%s_bucket{%s%sle=\"+Inf\"} %llu\n%s_sum%s%s%s %.6f\n"
                       "%s_count%s%s%s %llu\n",
                       name, label, sep, (unsigned long long)count, name, open,
                       label, close, (double)sum / 1e6, name, open, label,
                       close, (unsigned long long)count);
}

int gw_metrics_render(gw_buf *out) {
  if (gw_buf_puts(out, "# HELP idem_requests_total Requests by outcome.\n"
                       "# TYPE idem_requests_total counter\n"))
    return -1;
  for (int i = 0; i < GW_OUT_COUNT; i++)
    if (gw_buf_printf(out, "idem_requests_total{outcome=\"%s\"} %llu\n",
                      outcome_names[i],
                      (unsigned long long)atomic_load_explicit(
                          &outcomes[i], memory_order_relaxed)))
      return -1;
  if (gw_buf_puts(out,
                  "# HELP idem_store_latency_seconds Store operation latency.\n"
                  "# TYPE idem_store_latency_seconds histogram\n") ||
      render_hist(out, "idem_store_latency_seconds", "op=\"claim\"",
                  &hists[GW_HIST_CLAIM]) ||
      render_hist(out, "idem_store_latency_seconds", "op=\"complete\"",
                  &hists[GW_HIST_COMPLETE]) ||
      render_hist(out, "idem_store_latency_seconds", "op=\"release\"",
                  &hists[GW_HIST_RELEASE]) ||
      gw_buf_puts(out, "# HELP idem_upstream_latency_seconds Upstream "
                       "request latency (connect to full answer).\n"
                       "# TYPE idem_upstream_latency_seconds histogram\n") ||
      render_hist(out, "idem_upstream_latency_seconds", "",
                  &hists[GW_HIST_UPSTREAM]) ||
      render_policy(out))
    return -1;
  return gw_buf_printf(
      out,
      "# HELP idem_inflight_leases Processing leases held by this gateway.\n"
      "# TYPE idem_inflight_leases gauge\nidem_inflight_leases %lld\n"
      "# HELP idem_client_connections Open client connections.\n"
      "# TYPE idem_client_connections gauge\nidem_client_connections %lld\n"
      "# HELP idem_store_complete_failures_total Completes the store failed or "
      "refused (the answer went to the spool, or its marker to the store).\n"
      "# TYPE idem_store_complete_failures_total counter\n"
      "idem_store_complete_failures_total %llu\n"
      "# HELP idem_store_release_failures_total Releases that failed (the "
      "lease runs out instead).\n"
      "# TYPE idem_store_release_failures_total counter\n"
      "idem_store_release_failures_total %llu\n"
      "# HELP idem_spool_entries Answers and releases in the spool, waiting "
      "for the store.\n"
      "# TYPE idem_spool_entries gauge\nidem_spool_entries %zu\n"
      "# HELP idem_spool_writes_total Entries written to the spool.\n"
      "# TYPE idem_spool_writes_total counter\nidem_spool_writes_total %llu\n"
      "# HELP idem_spool_drained_total Spool entries drained into the store.\n"
      "# TYPE idem_spool_drained_total counter\nidem_spool_drained_total %llu\n",
      (long long)atomic_load(&leases), (long long)atomic_load(&connections),
      (unsigned long long)atomic_load(&complete_failed),
      (unsigned long long)atomic_load(&release_failed), gw_metrics_spool_depth_get(),
      (unsigned long long)atomic_load(&spool_writes),
      (unsigned long long)atomic_load(&spool_drained));
}

static int render_cache(gw_buf *out, const idem_store *store) {
  uint64_t hits, misses;
  if (idem_store_cache_counts(store, &hits, &misses) != 0)
    return 0; /* no --cache */
  return gw_buf_printf(
      out,
      "# HELP idem_cache_hits_total Claims answered from the --cache (replays, mismatches).\n"
      "# TYPE idem_cache_hits_total counter\nidem_cache_hits_total %llu\n"
      "# HELP idem_cache_misses_total Claims the --cache could not answer (sent to the store).\n"
      "# TYPE idem_cache_misses_total counter\nidem_cache_misses_total %llu\n",
      (unsigned long long)hits, (unsigned long long)misses);
}

int gw_metrics_render_store(gw_buf *out, const idem_store *store) {
  idem_lmdb_stats s;
  if (!store || render_cache(out, store))
    return store ? -1 : 0;
  if (idem_lmdb_stats_get(store, &s) != 0)
    return 0; /* not an lmdb: store */
  return gw_buf_printf(
      out,
      "# HELP idem_lmdb_commits_total Durable write transactions (group commits).\n"
      "# TYPE idem_lmdb_commits_total counter\nidem_lmdb_commits_total %llu\n"
      "# HELP idem_lmdb_ops_written_total Operations applied by those commits.\n"
      "# TYPE idem_lmdb_ops_written_total counter\nidem_lmdb_ops_written_total %llu\n"
      "# HELP idem_lmdb_ops_read_total Operations answered from a read snapshot alone.\n"
      "# TYPE idem_lmdb_ops_read_total counter\nidem_lmdb_ops_read_total %llu\n"
      "# HELP idem_lmdb_commit_seconds_total Time inside those commits (page writes "
      "and device flushes).\n"
      "# TYPE idem_lmdb_commit_seconds_total counter\nidem_lmdb_commit_seconds_total %.6f\n"
      "# HELP idem_lmdb_max_batch Most operations in one commit so far.\n"
      "# TYPE idem_lmdb_max_batch gauge\nidem_lmdb_max_batch %llu\n"
      "# HELP idem_lmdb_swept_total Expired records deleted by the sweeper and gc.\n"
      "# TYPE idem_lmdb_swept_total counter\nidem_lmdb_swept_total %llu\n"
      "# HELP idem_lmdb_errors_total Operations refused: full (map or disk full) or "
      "store (I/O error, corrupt record).\n"
      "# TYPE idem_lmdb_errors_total counter\n"
      "idem_lmdb_errors_total{kind=\"full\"} %llu\n"
      "idem_lmdb_errors_total{kind=\"store\"} %llu\n"
      "# HELP idem_lmdb_overlay_keys Records in memory ahead of LMDB (in the log, "
      "not yet checkpointed).\n"
      "# TYPE idem_lmdb_overlay_keys gauge\nidem_lmdb_overlay_keys %llu\n"
      "# HELP idem_lmdb_overlay_bytes Bytes of those records.\n"
      "# TYPE idem_lmdb_overlay_bytes gauge\nidem_lmdb_overlay_bytes %llu\n",
      (unsigned long long)s.commits, (unsigned long long)s.ops_written,
      (unsigned long long)s.ops_read, (double)s.commit_us / 1e6,
      (unsigned long long)s.max_batch, (unsigned long long)s.swept,
      (unsigned long long)s.errors_full, (unsigned long long)s.errors_store,
      (unsigned long long)s.overlay_keys, (unsigned long long)s.overlay_bytes);
}

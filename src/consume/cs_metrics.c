/* cs_metrics.c - counters and histograms of `idem consume` (cs_metrics.h). */
#include "consume/cs_metrics.h"

static const double bucket_le[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                   0.25,   0.5,   1,      2.5,   5,    10,    30};
#define NBUCKETS (sizeof bucket_le / sizeof bucket_le[0])

typedef struct {
  uint64_t bucket[NBUCKETS];
  uint64_t count, sum_us;
} histogram;

static uint64_t outcomes[CS_OUT_COUNT];
static histogram hists[CS_HIST_COUNT];
static uint64_t settle_failed;

static const char *const outcome_names[] = {
#define CS_OUTCOME_NAME(name, text) text,
    CS_OUTCOMES(CS_OUTCOME_NAME)
#undef CS_OUTCOME_NAME
};

void cs_metrics_outcome(cs_outcome o) { outcomes[o]++; }
void cs_metrics_settle_failed(void) { settle_failed++; }

void cs_metrics_observe(cs_hist h, uint64_t micros) {
  histogram *x = &hists[h];
  double s = (double)micros / 1e6;
  for (size_t i = 0; i < NBUCKETS; i++)
    if (s <= bucket_le[i]) {
      x->bucket[i]++;
      break;
    }
  x->count++;
  x->sum_us += micros;
}

static int render_hist(gw_buf *out, const char *name, const char *label, const histogram *x) {
  const char *sep = *label ? "," : "";
  uint64_t cum = 0;
  for (size_t i = 0; i < NBUCKETS; i++) {
    cum += x->bucket[i];
    if (gw_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, label, sep, bucket_le[i],
                      (unsigned long long)cum))
      return -1;
  }
  const char *open = *label ? "{" : "", *close = *label ? "}" : "";
  return gw_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n%s_sum%s%s%s %.6f\n"
                            "%s_count%s%s%s %llu\n",
                       name, label, sep, (unsigned long long)x->count, name, open, label, close,
                       (double)x->sum_us / 1e6, name, open, label, close,
                       (unsigned long long)x->count);
}

int cs_metrics_render(gw_buf *out, unsigned inflight) {
  if (gw_buf_puts(out, "# HELP idem_messages_total Messages by outcome.\n"
                       "# TYPE idem_messages_total counter\n"))
    return -1;
  for (int i = 0; i < CS_OUT_COUNT; i++)
    if (gw_buf_printf(out, "idem_messages_total{outcome=\"%s\"} %llu\n", outcome_names[i],
                      (unsigned long long)outcomes[i]))
      return -1;
  if (gw_buf_puts(out, "# HELP idem_message_seconds From receipt to ack (or other settle).\n"
                       "# TYPE idem_message_seconds histogram\n") ||
      render_hist(out, "idem_message_seconds", "", &hists[CS_HIST_MESSAGE]) ||
      gw_buf_puts(out, "# HELP idem_handler_seconds Handler requests, connect to full answer.\n"
                       "# TYPE idem_handler_seconds histogram\n") ||
      render_hist(out, "idem_handler_seconds", "", &hists[CS_HIST_HANDLER]) ||
      gw_buf_puts(out, "# HELP idem_store_latency_seconds Store operation latency.\n"
                       "# TYPE idem_store_latency_seconds histogram\n") ||
      render_hist(out, "idem_store_latency_seconds", "op=\"claim\"", &hists[CS_HIST_CLAIM]) ||
      render_hist(out, "idem_store_latency_seconds", "op=\"complete\"", &hists[CS_HIST_COMPLETE]))
    return -1;
  return gw_buf_printf(out,
                       "# HELP idem_messages_in_flight Messages being handled now.\n"
                       "# TYPE idem_messages_in_flight gauge\nidem_messages_in_flight %u\n"
                       "# HELP idem_settle_failures_total Acks, redeliveries or dead letters "
                       "the broker did not take (the message comes again).\n"
                       "# TYPE idem_settle_failures_total counter\n"
                       "idem_settle_failures_total %llu\n",
                       inflight, (unsigned long long)settle_failed);
}

/*
 * lmdb.h - what the LMDB store offers beyond the store interface: counters
 * for metrics (the gateway's /metrics can export them).
 */
#ifndef IDEM_STORE_LMDB_H
#define IDEM_STORE_LMDB_H

#include <stdint.h>

#include "idem/idem.h"

typedef struct {
  uint64_t commits;      /* durable batches: log flushes, and direct LMDB commits */
  uint64_t ops_written;  /* operations applied by those commits */
  uint64_t ops_read;     /* operations answered from a read snapshot alone */
  uint64_t max_batch;    /* most operations in one commit so far */
  uint64_t commit_us;    /* time spent inside those commits (writes + fsyncs), us */
  uint64_t apply_us;     /* time the writer spent applying operations before them, us */
  uint64_t handback_us;  /* time it spent handing their results back to the loops, us */
  uint64_t swept;        /* expired records deleted by the sweeper and gc */
  uint64_t errors_full;  /* operations refused with IDEM_EFULL (map or disk full) */
  uint64_t errors_store; /* operations failed with IDEM_ESTORE or IDEM_ECORRUPT */
  uint64_t checkpoints;  /* LMDB commits copying the log's records in, behind it */
  uint64_t checkpoint_us; /* time spent in them, us */
  uint64_t log_resets;   /* times the log started over, LMDB holding all of it */
  uint64_t overlay_keys;  /* now: keys held in memory, flushed to the log and not yet
                             in LMDB, or staged for the next flush */
  uint64_t overlay_bytes; /* now: the bytes of their values */
  int logged;            /* 1: this store writes through the log (log=on) */
} idem_lmdb_stats;

/* Counters of the environment behind an lmdb: store handle (shared by every
 * handle on the same path in this process). IDEM_EINVAL when store is not an
 * LMDB store. Safe from any thread. */
int idem_lmdb_stats_get(const idem_store *store, idem_lmdb_stats *out);

#endif

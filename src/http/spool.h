/*
 * spool.h - where a keyed answer waits, durable, while the store is away.
 *
 * The gateway hands an answer to its client only once it is durable. Most of
 * the time that is the store's complete; when the store fails just then (a
 * Redis that restarts, a PostgreSQL failover), the completion goes here
 * first: an LMDB environment in the gateway's own directory (--spool), each
 * entry committed with fsync before the client sees the answer. Entries
 * drain into the store, with the fence they were claimed under, as soon as
 * it answers again; until then this process replays a spooled key from here,
 * while every other gateway still sees the key's lease.
 *
 * One spool per process, shared by every worker. Entries are keyed by the
 * store they belong to (a hash of its URI less credentials and options),
 * then scope and key, so gateways on different stores can share a
 * directory without mixing answers. Writes
 * run on libuv's thread pool (one durable LMDB commit each: the spool is
 * the rare path), reads on the caller's loop.
 */
#ifndef IDEM_HTTP_SPOOL_H
#define IDEM_HTTP_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "idem/idem.h"

typedef struct gw_spool gw_spool;

/* Open (creating) the spool directory dir for the store named by store_uri.
 * Returns 0, or -1 with a sentence in err. */
int gw_spool_open(const char *dir, const char *store_uri, gw_spool **out, char *err,
                  size_t errlen);
/* Only once no put, remove or drain is in flight. */
void gw_spool_close(gw_spool *sp);

/* Entries of this store waiting to drain (this process's view: refreshed
 * from the disk by every drain round, so other processes' entries show). */
size_t gw_spool_depth(const gw_spool *sp);

/* Keep op durably: an IDEM_OP_COMPLETE (fingerprint: the claim's, for
 * replays from the spool) or an IDEM_OP_RELEASE, on op->scope, op->key under
 * op->fence. op is copied before this returns; cb runs once on loop, with 0
 * once the entry is on disk, or an IDEM_E* code. A later put of the same key
 * replaces the entry. */
typedef void (*gw_spool_cb)(void *arg, int err);
int gw_spool_put(gw_spool *sp, uv_loop_t *loop, const idem_op *op, const uint8_t *fingerprint,
                 gw_spool_cb cb, void *arg);

/* A spooled completion of (scope, key), for a replay: 1 with a deep copy in
 * *rec (free with idem_record_clear), 0 when there is none (or only a
 * release). Cheap when the spool is empty: no read at all. */
int gw_spool_find(gw_spool *sp, const char *scope, const char *key, idem_record *rec);

/*
 * One drain round, run by one loop of the process: up to a batch of entries
 * are submitted to store, each removed from the spool once the store has it
 * (or has moved past its fence). A complete the store refuses as full is
 * replaced by the small marker that says the answer was not kept (retries
 * get a 502 and never run again). done runs on loop once the round is over,
 * with the number of entries that failed to drain (0: the round drained
 * everything it took).
 */
typedef void (*gw_spool_drain_cb)(void *arg, size_t failed);
void gw_spool_drain(gw_spool *sp, uv_loop_t *loop, idem_store *store, gw_spool_drain_cb done,
                    void *arg);

#endif

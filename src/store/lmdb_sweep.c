/*
 * lmdb_sweep.c - retention for the LMDB store.
 *
 * The expiry index (a DUPSORT database) maps each record's expires_at (8
 * bytes, big-endian, sign bit flipped so that byte order is time order) to
 * its scoped key: the time is the key and the scoped key a duplicate value,
 * because time + the longest scoped key would pass LMDB's 511-byte key limit.
 * The sweeper walks it from the front, so a pass touches only what has
 * expired, never the whole store. Every put and delete of a record updates
 * the index in the same write transaction, so the two never disagree after a
 * crash.
 */
#include <string.h>

#include "core/be64.h"
#include "core/scoped_key.h"
#include "store/lmdb_env.h"

/* The sign bit flipped, so that byte order is time order. */
static void expiry_key(int64_t at, unsigned char out[8]) {
  idem_be64_put(out, (uint64_t)at ^ (UINT64_C(1) << 63));
}

static int64_t expiry_time(const unsigned char *k) {
  return (int64_t)(idem_be64_get(k) ^ (UINT64_C(1) << 63));
}

int lmdb_expiry_update(lmdb_env *e, MDB_txn *txn, const unsigned char *skey,
                       size_t skey_len, int64_t old_at, int64_t new_at) {
  if (old_at == new_at)
    return 0;
  unsigned char t[8];
  MDB_val k = {8, t}, v = {skey_len, (void *)skey};
  if (old_at != INT64_MIN) {
    expiry_key(old_at, t);
    int rc = mdb_del(txn, e->expiry, &k, &v);
    if (rc && rc != MDB_NOTFOUND)
      return rc;
  }
  if (new_at != INT64_MIN) {
    expiry_key(new_at, t);
    return mdb_put(txn, e->expiry, &k, &v, 0);
  }
  return 0;
}

int lmdb_sweep(lmdb_env *e, MDB_txn *txn, int64_t now, size_t limit,
               size_t *deleted, int *more) {
  *deleted = 0;
  *more = 0;
  MDB_cursor *cur;
  int rc = mdb_cursor_open(txn, e->expiry, &cur);
  if (rc)
    return rc;
  MDB_val k, v;
  /* always the first entry: each pass of the loop removes the one before */
  while ((rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) == 0) {
    int64_t at = k.mv_size == 8 ? expiry_time(k.mv_data) : INT64_MIN; /* malformed: drop */
    if (at > now)
      break; /* nothing else has expired */
    if (*deleted == limit) {
      *more = 1;
      break;
    }
    unsigned char skey[IDEM_SCOPED_KEY_MAX];
    MDB_val rk = {v.mv_size < sizeof skey ? v.mv_size : sizeof skey, skey}, rv;
    memcpy(skey, v.mv_data, rk.mv_size); /* v points into a page about to change */
    rc = mdb_get(txn, e->records, &rk, &rv);
    if (rc == 0) {
      idem_record rec;
      /* only a record whose retention is this entry's goes; one that moved
       * on has another entry */
      if (idem_record_decode(rv.mv_data, rv.mv_size, &rec) == 0 && rec.expires_at == at) {
        if ((rc = mdb_del(txn, e->records, &rk, NULL)) != 0)
          break;
        ++*deleted;
      }
    } else if (rc != MDB_NOTFOUND) {
      break;
    }
    if ((rc = mdb_cursor_del(cur, 0)) != 0)
      break;
  }
  mdb_cursor_close(cur);
  return rc == MDB_NOTFOUND ? 0 : rc;
}

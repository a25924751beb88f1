/*
 * idem.h - the public API of libidem (the PostgreSQL in-transaction API is
 * in idem_pg.h, beside it).
 *
 * idem makes the effect of a retried request or a redelivered message happen
 * once. One record is kept per (scope, key):
 *
 *   unseen ──claim──► processing(fence=1)
 *   processing ──complete(fence)──► completed       (stale fence: refused)
 *   processing ──release(fence)──► unseen           (fence is kept)
 *   processing ──fail(fence)──► failed
 *   processing, lease over ──claim──► processing(fence+1)
 *   failed ──claim──► processing(fence+1)           (or replay, IDEM_CLAIM_REPLAY_FAILED)
 *   completed ──claim──► replay
 *   any, fingerprint differs ──claim──► mismatch
 *   any, expired ──claim──► as unseen, fence keeps counting up
 *
 * Conventions: functions return 0 or a negative IDEM_E* code, named by
 * idem_strerror(). Stores are asynchronous: every operation completes through
 * a callback on the libuv loop the store was opened on, never from inside the
 * call that submitted it. idem_sync_* is a blocking facade for simple callers.
 */
#ifndef IDEM_IDEM_H
#define IDEM_IDEM_H

#include <stddef.h>
#include <stdint.h>

/* libuv's loop (uv_loop_t). Declared, not included, so that this header
 * compiles under strict -std=c11 without libuv's POSIX requirements. */
struct uv_loop_s;

/* IDEM_API marks what libidem exports: it is built with hidden visibility,
 * so its shared library exports exactly the functions declared with
 * IDEM_API in <idem/idem.h> and <idem/idem_pg.h>, and nothing internal. */
#if defined(__GNUC__) || defined(__clang__)
#define IDEM_API __attribute__((visibility("default")))
#else
#define IDEM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define IDEM_VERSION_STRING "0.1.0"

/* ---- errors ------------------------------------------------------------ */

#define IDEM_ERRORS(X)                                                        \
  X(EINVAL, -1, "invalid argument")                                           \
  X(ENOMEM, -2, "out of memory")                                              \
  X(EKEY, -3, "invalid idempotency key")                                      \
  X(ECORRUPT, -4, "record is truncated or corrupt")                           \
  X(EVERSION, -5, "record has an unknown format version")                     \
  X(ESTALE, -6, "fence is stale: the lease was taken over or the record moved on") \
  X(ENOTFOUND, -7, "no such record")                                          \
  X(ESTORE, -8, "store unavailable or failed")                                \
  X(EURI, -9, "unknown or malformed store URI")                               \
  X(EFULL, -10, "store is full")                                              \
  X(ETIMEDOUT, -11, "store operation timed out")                              \
  X(ECLOSED, -12, "store is closing")                                         \
  X(ESCHEMA, -13, "store schema missing or outdated: run idem migrate")       \
  X(ENOTSTORE, -14, "not an idem store")                                      \
  X(EJSON, -15, "body is not valid JSON")                                     \
  X(ESCOPE, -16, "scope longer than 255 bytes, or not text the store keeps")   \
  X(ETOOBIG, -17, "answer larger than this store keeps")                     \
  X(ERETRY, -18, "serialization failure or deadlock: retry the transaction")

enum {
  IDEM_OK = 0,
#define IDEM_ERR_ENUM(name, code, text) IDEM_##name = (code),
  IDEM_ERRORS(IDEM_ERR_ENUM)
#undef IDEM_ERR_ENUM
};

/* A human sentence for an error code ("fence is stale: ..."). Never NULL. */
IDEM_API const char *idem_strerror(int err);
/* The code's name ("IDEM_ESTALE"). Never NULL. */
IDEM_API const char *idem_errname(int err);

/* ---- keys and scopes --------------------------------------------------- */

#define IDEM_KEY_MAX 255
#define IDEM_SCOPE_MAX 255

/*
 * Parse an Idempotency-Key header value: a Structured Field string ("..."
 * with \" and \\ escapes, may hold spaces) or a bare token (visible ASCII, no
 * spaces). Leading and trailing spaces/tabs are ignored. The key, unquoted,
 * must be 1..255 printable ASCII characters. On success writes the key and a
 * NUL into out (IDEM_KEY_MAX + 1 bytes) and returns its length; on failure
 * returns IDEM_EKEY and, when why is not NULL, points it at a sentence.
 */
IDEM_API int idem_key_parse(const char *value, size_t len, char *out,
                            const char **why);

/* Whether key is a valid stored key: 1..255 printable ASCII (0x20-0x7e). */
IDEM_API int idem_key_valid(const char *key, size_t len);

/* ---- fingerprints ------------------------------------------------------ */

#define IDEM_FINGERPRINT_LEN 32

/* Hash the body as canonical JSON: object keys sorted, insignificant
 * whitespace dropped. A body that is not JSON gives IDEM_EJSON. */
#define IDEM_FP_CANONICAL_JSON 1u

/*
 * SHA-256 over method, target and body, each length-prefixed so that no two
 * different triples collide by concatenation. NULL method or target count as
 * empty. flags: 0 or IDEM_FP_CANONICAL_JSON; any other bit is IDEM_EINVAL.
 */
IDEM_API int idem_fingerprint(const char *method, const char *target,
                              const void *body, size_t body_len, unsigned flags,
                              uint8_t out[IDEM_FINGERPRINT_LEN]);

/* Write the canonical form of a JSON text (sorted keys, no insignificant
 * whitespace, strings and numbers byte for byte as given) into *out, a
 * malloc'd buffer the caller frees. IDEM_EJSON when it is not JSON. */
IDEM_API int idem_json_canonical(const char *json, size_t len, char **out,
                                 size_t *out_len);

/* ---- the record -------------------------------------------------------- */

typedef enum {
  IDEM_STATE_UNSEEN = 0, /* released: kept only so the fence never goes back */
  IDEM_STATE_PROCESSING = 1,
  IDEM_STATE_COMPLETED = 2,
  IDEM_STATE_FAILED = 3
} idem_state;

IDEM_API const char *idem_state_name(idem_state state);

/* A stored response. headers is an opaque block chosen by the caller (the
 * gateway stores "Name: value\r\n" lines); body is raw bytes. Each of the
 * two holds at most IDEM_RESPONSE_PART_MAX bytes (more: IDEM_EINVAL); a
 * store may keep less, both together (more: IDEM_ETOOBIG): redis:// 512 MiB,
 * postgres:// 1023 MiB. */
#define IDEM_RESPONSE_PART_MAX ((size_t)1 << 30)
typedef struct {
  int status; /* 0 when none, else 100..999 (a submit refuses others: IDEM_EINVAL) */
  const char *headers;
  size_t headers_len;
  const char *body;
  size_t body_len;
} idem_response;

/* Times are Unix milliseconds on the store's clock. */
typedef struct {
  const char *scope; /* set in results of get and list */
  const char *key;
  idem_state state;
  uint8_t fingerprint[IDEM_FINGERPRINT_LEN];
  uint64_t fence;
  int64_t locked_until;
  int64_t expires_at;
  int64_t created_at;
  int64_t updated_at;
  idem_response response;
} idem_record;

/*
 * Versioned binary encoding of a record (scope and key travel beside it, as
 * the store's key). idem_record_encode writes idem_record_encoded_len() bytes
 * of a valid record (response status 0 or 100..999; stores check it at
 * submit): anything else is written as given, and decode refuses it.
 * idem_record_decode checks every byte and points rec's response into buf (no
 * copy): IDEM_ECORRUPT for truncated or garbage input, IDEM_EVERSION for an
 * unknown version.
 */
IDEM_API size_t idem_record_encoded_len(const idem_record *rec);
IDEM_API void idem_record_encode(const idem_record *rec, uint8_t *buf);
IDEM_API int idem_record_decode(const uint8_t *buf, size_t len,
                               idem_record *rec);

/* Deep copy of src into dst (every pointer malloc'd); free with
 * idem_record_clear. */
IDEM_API int idem_record_copy(idem_record *dst, const idem_record *src);
IDEM_API void idem_record_clear(idem_record *rec);

/* ---- operations -------------------------------------------------------- */

typedef enum {
  IDEM_OP_CLAIM = 1,
  IDEM_OP_COMPLETE,
  IDEM_OP_FAIL,
  IDEM_OP_RELEASE,
  IDEM_OP_GET,
  IDEM_OP_DELETE,
  IDEM_OP_LIST,
  IDEM_OP_GC
} idem_op_kind;

/* claim flag: a failed record replays instead of being taken over. */
#define IDEM_CLAIM_REPLAY_FAILED 1u

typedef struct {
  idem_op_kind kind;
  /* "" or NULL for none; list: NULL means every scope. At most 255 bytes;
   * on postgres:// also UTF-8 (a text column), else IDEM_ESCOPE */
  const char *scope;
  const char *key;   /* a valid key (idem_key_valid); list: resume after it */
  uint8_t fingerprint[IDEM_FINGERPRINT_LEN]; /* claim */
  uint64_t fence;        /* complete, fail, release */
  int64_t lease_ms;      /* claim: how long the processing lease lasts */
  int64_t ttl_ms;        /* claim, complete, fail: retention from now */
                         /* (both 1 ms..100 years, else IDEM_EINVAL) */
  unsigned flags;        /* claim: IDEM_CLAIM_* */
  idem_response response; /* complete, fail */
  size_t limit;          /* list: most records; gc: most deletions (0: 1000) */
} idem_op;

typedef enum {
  IDEM_CLAIMED = 1, /* yours: run the effect, then complete, fail or release */
  IDEM_REPLAY,      /* completed (or failed): record holds the response */
  IDEM_MISMATCH,    /* the key was used with another fingerprint */
  IDEM_BUSY         /* another worker holds the lease for retry_after_ms */
} idem_outcome;

IDEM_API const char *idem_outcome_name(idem_outcome outcome);

typedef struct {
  int err;              /* 0 or IDEM_E*; when set the rest is unset */
  idem_outcome outcome; /* claim */
  uint64_t fence;       /* claim: the fence you hold (CLAIMED) or the record's */
  int64_t retry_after_ms; /* claim, BUSY: time left on the lease */
  idem_record *record;  /* claim REPLAY and MISMATCH, get: the stored record */
  idem_record *records; /* list */
  size_t count;         /* list: records; gc, delete: records removed */
} idem_result;

/* Deep copy and release of results, for callers who keep one past its
 * callback (the blocking facade hands out copies). idem_result_copy: 0,
 * IDEM_ENOMEM (dst left cleared) or IDEM_EINVAL for a NULL argument. */
IDEM_API int idem_result_copy(idem_result *dst, const idem_result *src);
IDEM_API void idem_result_clear(idem_result *res);

/*
 * The transition logic, pure: no I/O, no clock, no allocation. Given the
 * stored record (NULL when the store has none), an operation of kind claim,
 * complete, fail, release or get, and the store's clock, it fills *res and
 * tells what to write: IDEM_WRITE_NONE, or IDEM_WRITE_PUT with *next to store
 * (next borrows memory from cur and op). A NULL op, next or res gives
 * IDEM_EINVAL (also in res->err when res is given) and nothing to write;
 * an operation of another kind, IDEM_WRITE_NONE with res->err IDEM_EINVAL.
 * The memory and LMDB stores run it;
 * the Redis Lua script and PostgreSQL statements mirror it.
 */
enum { IDEM_WRITE_NONE = 0, IDEM_WRITE_PUT = 1 };
IDEM_API int idem_transition(const idem_record *cur, const idem_op *op,
                             int64_t now_ms, idem_record *next,
                             idem_result *res);

/* ---- stores ------------------------------------------------------------ */

typedef struct idem_store idem_store;

/* Completion of one operation. res and everything it points to is valid only
 * during the call; copy what you keep (idem_result_copy). */
typedef void (*idem_cb)(idem_store *store, const idem_result *res, void *arg);
typedef void (*idem_close_cb)(idem_store *store, void *arg);

/*
 * Open a store by URI on loop:
 *   memory:[NAME]                      process-wide table; handles with the same NAME share it
 *   lmdb:PATH[?map_size=SIZE]          embedded, durable, group commit
 *   redis://[user:pass@]host:port[/db] shared by processes
 *   redis+cluster://[user:pass@]host:port[,host:port...]  a Redis Cluster
 *   postgres://... / postgresql://...  libpq URI
 * Several handles (one per loop) may be open on the same store at once.
 * Redis and PostgreSQL are optional at build time: a libidem built without
 * one (-DIDEM_REDIS=OFF, -DIDEM_POSTGRES=OFF) refuses its URIs with
 * IDEM_EURI and an errmsg saying that this build has no such support.
 * Errors: IDEM_EURI, IDEM_ESTORE, IDEM_ENOTSTORE, IDEM_ESCHEMA, IDEM_ENOMEM.
 * When errmsg is not NULL, a malloc'd sentence with detail is left there on
 * failure (free it). After a failure the loop must run once more (e.g.
 * uv_run(loop, UV_RUN_NOWAIT) or its normal run) to release what the attempt
 * left on it, before the loop is closed.
 */
IDEM_API int idem_store_open(struct uv_loop_s *loop, const char *uri,
                             idem_store **out, char **errmsg);

/*
 * The same, with a cache tier in front (cache_uri NULL: none, as
 * idem_store_open): memory:SIZE[?ttl=DUR], a per-process LRU of finished
 * records bounded in bytes, shared by every handle opened with the same
 * cache URI on the same store (one store never answers from another's
 * records: the store is named by what its URI reaches, whatever its
 * spelling). A claim that finds a finished record there is answered from it
 * (the replay of a completed record, or a mismatch) without the store; a
 * failed record's replay (IDEM_CLAIM_REPLAY_FAILED) asks the store, as a
 * claim elsewhere may take that record over; every other claim, and every other
 * operation, goes to the store, which fills the cache as it answers
 * (completes of claims made through these handles, replays). A delete
 * through any handle of the process on that store, with a cache or not,
 * clears the key. A record deleted or
 * replaced through another process is replayed from here for at most the
 * ttl (default 60s). Or redis://[user:pass@]host[:port][/db][?options]
 * (the Redis store's URI and options; not in a build without Redis): one
 * cache shared by every process pointed at it, its entries named by scope
 * and key alone, so give each store of record its own prefix=; a delete
 * through a handle that uses it clears it there too. IDEM_EURI for a
 * malformed cache URI, with errmsg.
 */
IDEM_API int idem_store_open_cached(struct uv_loop_s *loop, const char *uri,
                                    const char *cache_uri, idem_store **out,
                                    char **errmsg);

/* Submit one operation. The op and everything it points to is copied, so it
 * may go away at once. Returns 0 (cb will be called exactly once) or a
 * negative code for invalid input or a closing store (cb will not be called). */
IDEM_API int idem_store_submit(idem_store *store, const idem_op *op, idem_cb cb,
                               void *arg);

/* Begin closing: new submits fail with IDEM_ECLOSED, operations in flight
 * still get their callbacks, then close_cb runs and the handle is gone.
 * The loop must keep running until then. */
IDEM_API void idem_store_close(idem_store *store, idem_close_cb close_cb,
                               void *arg);

/* The URI scheme the store was opened with ("memory", "lmdb", ...). */
IDEM_API const char *idem_store_scheme(const idem_store *store);

/* ---- blocking facade --------------------------------------------------- */

typedef struct idem_sync idem_sync;

/* A store on a private loop, for the CLI and simple callers. One thread at a
 * time per idem_sync. */
IDEM_API int idem_sync_open(const char *uri, idem_sync **out, char **errmsg);
/* The same with a cache tier in front (idem_store_open_cached). */
IDEM_API int idem_sync_open_cached(const char *uri, const char *cache_uri,
                                   idem_sync **out, char **errmsg);
/* Run one operation to completion. On return res holds a deep copy (free with
 * idem_result_clear); the function returns res->err or a submit error. */
IDEM_API int idem_sync_run(idem_sync *sync, const idem_op *op,
                           idem_result *res);
IDEM_API void idem_sync_close(idem_sync *sync);

/* ---- time -------------------------------------------------------------- */

/* Local wall clock in Unix milliseconds: the store clock of memory and LMDB. */
IDEM_API int64_t idem_now_ms(void);

/* Parse "500ms", "30s", "5m", "24h", "7d" into milliseconds. IDEM_EINVAL when
 * malformed, zero or out of range. */
IDEM_API int idem_parse_duration(const char *text, int64_t *ms);
/* Parse "512", "64KiB", "1MiB", "1GiB" (also KB/MB/GB as powers of 1000,
 * k/K/M/G as powers of 1024) into bytes. IDEM_EINVAL when malformed. */
IDEM_API int idem_parse_size(const char *text, uint64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif /* IDEM_IDEM_H */

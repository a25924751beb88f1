/*
 * lmdb.c - the lmdb:PATH store: embedded, durable, the default.
 *
 * This file holds the URI, the process-wide registry of open environments
 * (LMDB allows one MDB_env per file per process; every handle on the same
 * directory shares one, with one writer thread), the handles, and the read
 * path: a claim that needs no write (replay, mismatch, busy), a get and a
 * list are answered from a read snapshot on the caller's thread without
 * waiting for the writer. Everything else goes to lmdb_writer.c.
 *
 * With the log, a claim or get is first looked up in the overlay (records
 * the log holds ahead of LMDB), and a list waits for LMDB to catch up; in a
 * process that does not own the log, everything goes to the writer.
 *
 * Layout of an environment (a directory holding data.mdb, lock.mdb and
 * idem.log, lmdb_log.c):
 *   meta     "format" -> "idem-lmdb" and a 4-byte big-endian format version;
 *            "logseq" -> the last log batch LMDB holds (8 bytes, big-endian)
 *   records  scoped key (core/scoped_key.h) -> idem_record_encode() bytes
 *   expiry   8-byte expires_at -> scoped keys, DUPSORT (lmdb_sweep.c)
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/scoped_key.h"
#include "store/lmdb_env.h"
#include "store/uri_options.h"

#define FORMAT_MAGIC "idem-lmdb"
#define FORMAT_VERSION 1u

static const lmdb_options default_options = {
    .map_size = UINT64_C(4) << 30, /* address space, not disk: the file grows as used */
    .batch_max = 4096,
    .sweep_interval_ms = 5000,
    .sweep_batch = 1000,
    .create = 1,
    .log = 1,
};

typedef struct {
  lmdb_env *env;
  MDB_txn *rtxn; /* this handle's read snapshot, reset between uses */
} lmdb_handle;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static idem_queue registry = {&registry, &registry}; /* lmdb_env.registered */

static lmdb_env *env_find(const char *real) {
  return idem_queue_find_key(&registry, offsetof(lmdb_env, registered), offsetof(lmdb_env, path),
                             real);
}

static int fail(char **errmsg, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char **errmsg, int err, const char *fmt, ...) {
  if (errmsg) {
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(errmsg, fmt, ap) < 0)
      *errmsg = NULL;
    va_end(ap);
  }
  return err;
}

/* ---- URI --------------------------------------------------------------- */

static int parse_count(const char *v, size_t min, size_t max, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-' || n < min || n > max)
    return -1;
  *out = (size_t)n;
  return 0;
}

/* value is on (1) or off (0), by those words: 0, or -1 for anything else. */
static int parse_switch(const char *value, const char *on, const char *off, int *out) {
  if (strcmp(value, on) && strcmp(value, off))
    return -1;
  *out = !strcmp(value, on);
  return 0;
}

/* One name=value of the URI; every refusal reads "lmdb: NAME 'VALUE': want ...". */
static int parse_option(const char *name, const char *value, lmdb_options *opt,
                        char **errmsg) {
  const char *want = NULL;
  if (!strcmp(name, "map_size")) {
    if (idem_parse_size(value, &opt->map_size) || opt->map_size < (UINT64_C(1) << 20))
      want = "a size of at least 1MiB, e.g. 4GiB";
  } else if (!strcmp(name, "batch")) {
    if (parse_count(value, 1, 65536, &opt->batch_max))
      want = "a number of operations per commit, 1..65536";
  } else if (!strcmp(name, "sweep_interval")) {
    if (!strcmp(value, "0") || !strcmp(value, "off"))
      opt->sweep_interval_ms = 0;
    else if (idem_parse_duration(value, &opt->sweep_interval_ms))
      want = "a duration like 5s, or off";
  } else if (!strcmp(name, "sweep_batch")) {
    if (parse_count(value, 1, 1000000, &opt->sweep_batch))
      want = "a number of deletions per transaction, 1..1000000";
  } else if (!strcmp(name, "create")) {
    if (parse_switch(value, "yes", "no", &opt->create))
      want = "yes or no";
  } else if (!strcmp(name, "log")) {
    if (parse_switch(value, "on", "off", &opt->log))
      want = "on or off";
  } else {
    return fail(errmsg, IDEM_EURI,
                "lmdb: unknown option '%s' (known: map_size, batch, sweep_interval, sweep_batch, "
                "create, log)",
                name);
  }
  return want ? fail(errmsg, IDEM_EURI, "lmdb: %s '%s': want %s", name, value, want) : 0;
}

static int parse_options(const char *query, lmdb_options *opt, char **errmsg) {
  idem_uri_options o;
  int err = idem_uri_options_parse(query, &o);
  const char *twice = err ? NULL : idem_uri_options_repeated(&o);
  if (twice)
    err = fail(errmsg, IDEM_EURI, "lmdb: option '%s' given twice", twice);
  for (size_t i = 0; i < o.n && !err; i++) {
    const idem_uri_option *item = &o.items[i];
    if (!item->value)
      err = fail(errmsg, IDEM_EURI, "lmdb: option '%.*s' has no value (want name=value)",
                 (int)item->text_len, item->text);
    else
      err = parse_option(item->name, item->value, opt, errmsg);
  }
  idem_uri_options_free(&o);
  return err;
}

/* "lmdb:PATH[?name=value&...]"; "lmdb:///abs" is accepted for "lmdb:/abs". */
static int parse_uri(const char *uri, char **path, lmdb_options *opt, char **errmsg) {
  const char *rest = uri + strlen("lmdb:");
  if (!strncmp(rest, "///", 3))
    rest += 2;
  const char *q = strchr(rest, '?');
  size_t path_len = q ? (size_t)(q - rest) : strlen(rest);
  if (path_len == 0)
    return fail(errmsg, IDEM_EURI, "lmdb: no directory given (want lmdb:PATH, e.g. lmdb:./idem-data)");
  *opt = default_options;
  int err = q ? parse_options(q + 1, opt, errmsg) : 0;
  if (err)
    return err;
  if (!(*path = strndup(rest, path_len)))
    return IDEM_ENOMEM;
  return 0;
}

/* ---- the directory ----------------------------------------------------- */

/* Create the directory if missing (and create is set); refuse what is not
 * (or cannot become) a store, before LMDB litters a directory that holds
 * something else. */
static int prepare_dir(const char *path, int create, char **errmsg) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno != ENOENT)
      return fail(errmsg, IDEM_ESTORE, "lmdb: cannot use '%s': %s", path, strerror(errno));
    if (!create)
      return fail(errmsg, IDEM_ENOTSTORE, "lmdb: no store at '%s' (no such directory)", path);
    if (mkdir(path, 0700) == 0)
      return 0;
    /* another process made it since the stat (two gateways started at once
     * on a new path): check it as any existing one */
    int e = errno;
    if (e != EEXIST || stat(path, &st) != 0)
      return fail(errmsg, IDEM_ESTORE, "lmdb: cannot create store directory '%s': %s", path,
                  strerror(e));
  }
  if (!S_ISDIR(st.st_mode))
    return fail(errmsg, IDEM_ENOTSTORE,
                "lmdb: '%s' is not a directory, so not an idem store (lmdb:PATH names a directory)",
                path);
  DIR *dir = opendir(path);
  if (!dir)
    return fail(errmsg, IDEM_ESTORE, "lmdb: cannot read directory '%s': %s", path, strerror(errno));
  int has_data = 0, has_other = 0;
  struct dirent *d;
  while ((d = readdir(dir)) != NULL) {
    if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, "..") || !strcmp(d->d_name, "lock.mdb") ||
        !strcmp(d->d_name, "idem.log"))
      continue;
    if (!strcmp(d->d_name, "data.mdb")) {
      /* empty: an open that died before LMDB wrote its first pages */
      struct stat dst;
      has_data = fstatat(dirfd(dir), "data.mdb", &dst, 0) != 0 || dst.st_size > 0;
    } else
      has_other = 1;
  }
  closedir(dir);
  if (!has_data && has_other)
    return fail(errmsg, IDEM_ENOTSTORE,
                "lmdb: '%s' is not an idem store: it holds other files and no data.mdb "
                "(use a new or empty directory)", path);
  if (!has_data && !create)
    return fail(errmsg, IDEM_ENOTSTORE,
                "lmdb: no store at '%s' (the directory holds no data.mdb, or an empty one)", path);
  return 0;
}

/* ---- environments ------------------------------------------------------ */

static int check_format(MDB_txn *txn, lmdb_env *e, char **errmsg) {
  MDB_val k = {6, "format"}, v;
  int rc = mdb_get(txn, e->meta, &k, &v);
  if (rc == MDB_NOTFOUND)
    return fail(errmsg, IDEM_ENOTSTORE, "lmdb: '%s' is not an idem store (no format record)", e->path);
  if (rc)
    return fail(errmsg, IDEM_ESTORE, "lmdb: '%s': %s", e->path, mdb_strerror(rc));
  const size_t mlen = sizeof FORMAT_MAGIC - 1;
  if (v.mv_size != mlen + 4 || memcmp(v.mv_data, FORMAT_MAGIC, mlen))
    return fail(errmsg, IDEM_ENOTSTORE, "lmdb: '%s' is not an idem store (bad format record)", e->path);
  const unsigned char *p = (const unsigned char *)v.mv_data + mlen;
  uint32_t version = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
  if (version != FORMAT_VERSION)
    return fail(errmsg, IDEM_ENOTSTORE,
                "lmdb: '%s' has store format %u; this idem reads format %u", e->path,
                (unsigned)version, FORMAT_VERSION);
  return 0;
}

static int write_format(MDB_txn *txn, lmdb_env *e) {
  unsigned char buf[sizeof FORMAT_MAGIC - 1 + 4];
  memcpy(buf, FORMAT_MAGIC, sizeof FORMAT_MAGIC - 1);
  unsigned char *p = buf + sizeof FORMAT_MAGIC - 1;
  p[0] = (unsigned char)(FORMAT_VERSION >> 24);
  p[1] = (unsigned char)(FORMAT_VERSION >> 16);
  p[2] = (unsigned char)(FORMAT_VERSION >> 8);
  p[3] = (unsigned char)FORMAT_VERSION;
  MDB_val k = {6, "format"}, v = {sizeof buf, buf};
  return mdb_put(txn, e->meta, &k, &v, 0);
}

/* Open the sub-databases; on a fresh environment create them and the format
 * record; refuse an LMDB environment that some other program wrote. */
static int open_dbs(lmdb_env *e, char **errmsg) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(e->env, NULL, 0, &txn);
  if (rc)
    return fail(errmsg, IDEM_ESTORE, "lmdb: '%s': cannot begin a write transaction: %s", e->path,
                mdb_strerror(rc));
  int err = 0;
  rc = mdb_dbi_open(txn, "meta", 0, &e->meta);
  if (rc == MDB_NOTFOUND) {
    MDB_dbi main_db;
    MDB_stat st;
    if ((rc = mdb_dbi_open(txn, NULL, 0, &main_db)) == 0 && (rc = mdb_stat(txn, main_db, &st)) == 0 &&
        st.ms_entries != 0) {
      err = fail(errmsg, IDEM_ENOTSTORE,
                 "lmdb: '%s' holds an LMDB database that is not an idem store", e->path);
      goto out;
    }
    if (rc == 0 && !e->opt.create) { /* a creation that died before its first commit */
      err = fail(errmsg, IDEM_ENOTSTORE, "lmdb: no store at '%s' (data.mdb holds no records yet)",
                 e->path);
      goto out;
    }
    if (rc == 0 && (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &e->meta)) == 0)
      rc = write_format(txn, e);
  } else if (rc == MDB_INCOMPATIBLE) {
    err = fail(errmsg, IDEM_ENOTSTORE,
               "lmdb: '%s' holds an LMDB database that is not an idem store", e->path);
    goto out;
  } else if (rc == 0) {
    if ((err = check_format(txn, e, errmsg)) != 0)
      goto out;
  }
  if (rc == 0)
    rc = mdb_dbi_open(txn, "records", MDB_CREATE, &e->records);
  if (rc == 0)
    rc = mdb_dbi_open(txn, "expiry", MDB_CREATE | MDB_DUPSORT, &e->expiry);
  if (rc == 0) {
    rc = mdb_txn_commit(txn);
    txn = NULL;
  }
  if (rc)
    err = fail(errmsg, rc == MDB_MAP_FULL ? IDEM_EFULL : rc == MDB_INCOMPATIBLE ? IDEM_ENOTSTORE : IDEM_ESTORE,
               "lmdb: '%s': cannot set up the store: %s", e->path, mdb_strerror(rc));
out:
  if (txn)
    mdb_txn_abort(txn);
  return err;
}

static void env_free(lmdb_env *e) {
  lmdb_log_close(e);
  if (e->env)
    mdb_env_close(e->env);
  pthread_rwlock_destroy(&e->map_lock);
  free(e->path);
  free(e);
}

static int env_open(const char *real, const lmdb_options *opt, lmdb_env **out, char **errmsg) {
  lmdb_env *e = calloc(1, sizeof *e);
  if (!e || !(e->path = strdup(real)) || lmdb_map_lock_init(&e->map_lock)) {
    if (e)
      free(e->path);
    free(e);
    return IDEM_ENOMEM;
  }
  e->opt = *opt;
  e->log_fd = -1;
  int rc = mdb_env_create(&e->env);
  if (rc) {
    e->env = NULL;
    env_free(e);
    return IDEM_ENOMEM;
  }
  mdb_env_set_maxdbs(e->env, 4);
  mdb_env_set_mapsize(e->env, (size_t)opt->map_size);
  /* MDB_NOTLS: a handle's read snapshot is not tied to a thread */
  rc = mdb_env_open(e->env, real, MDB_NOTLS, 0600);
  int err = 0;
  if (rc == MDB_INVALID)
    err = fail(errmsg, IDEM_ENOTSTORE, "lmdb: '%s/data.mdb' is not an LMDB file, so not an idem store", real);
  else if (rc == MDB_VERSION_MISMATCH)
    err = fail(errmsg, IDEM_ENOTSTORE, "lmdb: '%s' was written by an incompatible LMDB version", real);
  else if (rc)
    err = fail(errmsg, IDEM_ESTORE, "lmdb: cannot open the store in '%s': %s", real, mdb_strerror(rc));
  if (!err) {
    int dead;
    mdb_reader_check(e->env, &dead); /* slots of processes that died holding a snapshot */
    err = open_dbs(e, errmsg);
  }
  if (!err)
    err = lmdb_log_open(e, errmsg);
  if (!err && (err = lmdb_writer_start(e)) != 0)
    fail(errmsg, err, "lmdb: '%s': cannot start the writer thread", real);
  if (err) {
    env_free(e);
    return err;
  }
  *out = e;
  return 0;
}

/* ---- the backend ------------------------------------------------------- */

static int lmdb_check(const char *uri, char **errmsg) {
  char *path = NULL;
  lmdb_options opt;
  int err = parse_uri(uri, &path, &opt, errmsg);
  free(path);
  return err;
}

static int lmdb_open(idem_store *store, const char *uri, char **errmsg) {
  char *path = NULL;
  lmdb_options opt;
  int err = parse_uri(uri, &path, &opt, errmsg);
  if (err)
    return err;
  lmdb_handle *h = calloc(1, sizeof *h);
  if (!h) {
    free(path);
    return IDEM_ENOMEM;
  }
  char real[PATH_MAX];
  pthread_mutex_lock(&registry_lock);
  if ((err = prepare_dir(path, opt.create, errmsg)) == 0 && !realpath(path, real))
    err = fail(errmsg, IDEM_ESTORE, "lmdb: cannot resolve '%s': %s", path, strerror(errno));
  if (!err) {
    lmdb_env *e = env_find(real);
    if (!e && (err = env_open(real, &opt, &e, errmsg)) == 0)
      idem_queue_insert_tail(&registry, &e->registered);
    if (!err) {
      e->refs++;
      h->env = e;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  free(path);
  if (err) {
    free(h);
    return err;
  }
  store->impl = h;
  return 0;
}

static void lmdb_close(idem_store *store) {
  lmdb_handle *h = store->impl;
  lmdb_env *e = h->env;
  if (h->rtxn)
    mdb_txn_abort(h->rtxn);
  /* held while the writer drains, so a new open of the same path waits for
   * the old environment to be gone (LMDB: one MDB_env per file) */
  pthread_mutex_lock(&registry_lock);
  if (--e->refs == 0) {
    idem_queue_remove(&e->registered);
    lmdb_writer_stop(e);
    env_free(e);
  }
  pthread_mutex_unlock(&registry_lock);
  free(h);
  store->impl = NULL;
  idem_backend_closed(store);
}

static int read_begin(lmdb_handle *h) {
  if (h->rtxn) {
    int rc = mdb_txn_renew(h->rtxn);
    if (rc == 0)
      return 0;
    mdb_txn_abort(h->rtxn);
    h->rtxn = NULL;
  }
  return mdb_txn_begin(h->env->env, NULL, MDB_RDONLY, &h->rtxn);
}

static int is_live(const idem_record *rec, int64_t now) {
  return rec->state != IDEM_STATE_UNSEEN && now < rec->expires_at;
}

/* Claim or get against the record stored as v (NULL: none). Returns 1 when
 * answered, 0 when the writer must decide (a claim that writes). */
static int read_record(lmdb_env *e, idem_req *req, const MDB_val *v) {
  const idem_op *op = &req->op;
  idem_result *res = &req->result;
  idem_record cur, *curp = NULL;
  if (v) {
    int err = idem_record_decode(v->mv_data, v->mv_size, &cur);
    if (err) {
      atomic_fetch_add(&e->errors_store, 1);
      res->err = err;
      return 1;
    }
    curp = &cur;
  }
  idem_record next;
  int write = idem_transition(curp, op, idem_now_ms(), &next, res);
  if (write == IDEM_WRITE_PUT && !res->err) {
    memset(res, 0, sizeof *res);
    return 0;
  }
  if (res->record) {
    const idem_record *shown = res->record;
    res->record = NULL;
    if (idem_result_set_record(res, shown, op->scope, op->key)) {
      idem_result_clear(res);
      memset(res, 0, sizeof *res);
      res->err = IDEM_ENOMEM;
    }
  }
  return 1;
}

/* Claim or get from the snapshot: read_record's answer, or an MDB error. */
static int read_one(lmdb_handle *h, idem_req *req) {
  const idem_op *op = &req->op;
  unsigned char skey[IDEM_SCOPED_KEY_MAX];
  MDB_val k = {idem_scoped_key_encode(op->scope, op->key, skey), skey}, v;
  int rc = mdb_get(h->rtxn, h->env->records, &k, &v);
  if (rc && rc != MDB_NOTFOUND)
    return rc;
  return read_record(h->env, req, rc ? NULL : &v);
}

/* The overlay's answer for a claim or get (the log holds the key ahead of
 * LMDB): 1 answered, 0 for the writer, -1 when the overlay lacks the key. */
static int read_overlay(lmdb_env *e, idem_req *req) {
  unsigned char skey[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(req->op.scope, req->op.key, skey);
  lmdb_blob *b = lmdb_overlay_get(&e->ov, skey, klen);
  if (!b)
    return -1;
  MDB_val v = {b->len, b->data};
  int rc = read_record(e, req, b->del ? NULL : &v);
  lmdb_blob_unref(b);
  return rc;
}

/* Live records in scoped-key order after (op.scope, op.key), as memory: does. */
int lmdb_read_list(lmdb_env *e, MDB_txn *txn, idem_req *req) {
  const idem_op *op = &req->op;
  idem_result *res = &req->result;
  MDB_cursor *cur;
  int rc = mdb_cursor_open(txn, e->records, &cur);
  if (rc)
    return rc;
  unsigned char start[IDEM_SCOPED_KEY_MAX];
  size_t scope_len = op->scope ? strlen(op->scope) : 0;
  MDB_val k = {0, start}, v;
  MDB_cursor_op how = MDB_SET_RANGE;
  if (op->key)
    k.mv_size = idem_scoped_key_encode(op->scope, op->key, start);
  else if (op->scope)
    k.mv_size = idem_scoped_key_encode(op->scope, "", start);
  else
    how = MDB_FIRST;
  unsigned char pivot[IDEM_SCOPED_KEY_MAX];
  size_t pivot_len = k.mv_size;
  memcpy(pivot, start, pivot_len);
  int64_t now = idem_now_ms();
  int err = 0;
  for (rc = mdb_cursor_get(cur, &k, &v, how); rc == 0 && res->count < op->limit;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    const unsigned char *kp = k.mv_data;
    if (op->scope && (k.mv_size <= 1 + scope_len || kp[0] != scope_len ||
                      memcmp(kp + 1, op->scope, scope_len)))
      break; /* past the scope: its records are contiguous */
    if (op->key && k.mv_size == pivot_len && !memcmp(kp, pivot, pivot_len))
      continue; /* resume after, not at */
    char scope[256], key[256];
    idem_record rec;
    if (idem_scoped_key_decode(kp, k.mv_size, scope, key) ||
        idem_record_decode(v.mv_data, v.mv_size, &rec)) {
      atomic_fetch_add(&e->errors_store, 1); /* shown by keys get as corrupt */
      continue;
    }
    if (is_live(&rec, now) && (err = idem_result_add_record(res, &rec, scope, key)) != 0)
      break;
  }
  mdb_cursor_close(cur);
  if (err) {
    idem_result_clear(res);
    memset(res, 0, sizeof *res);
    res->err = err;
    return 0;
  }
  return rc == MDB_NOTFOUND ? 0 : rc;
}

static void lmdb_submit(idem_store *store, idem_req *req) {
  lmdb_handle *h = store->impl;
  lmdb_env *e = h->env;
  idem_op_kind kind = req->op.kind;
  int mode = atomic_load(&e->mode);
  /* a guest's snapshot may miss what the owning process's log holds */
  if ((kind != IDEM_OP_CLAIM && kind != IDEM_OP_GET && kind != IDEM_OP_LIST) ||
      mode == LMDB_GUEST) {
    lmdb_writer_enqueue(e, req);
    return;
  }
  int rc = -1;
  if (mode == LMDB_OWNER && kind != IDEM_OP_LIST)
    rc = read_overlay(e, req);
  else if (mode == LMDB_OWNER && lmdb_ckpt_sync(e) != 0) {
    lmdb_writer_enqueue(e, req); /* LMDB cannot catch up: the writer fails it */
    return;
  }
  if (rc < 0) { /* not in the overlay (a miss there means LMDB has it) */
    lmdb_map_hold(e);
    rc = read_begin(h);
    if (rc == MDB_MAP_RESIZED && (rc = lmdb_map_adopt(e)) == 0)
      rc = read_begin(h);
    if (rc == 0) {
      rc = kind == IDEM_OP_LIST ? lmdb_read_list(e, h->rtxn, req) : read_one(h, req);
      if (kind == IDEM_OP_LIST && rc == 0)
        rc = 1;
      mdb_txn_reset(h->rtxn);
    }
    lmdb_map_release(e);
  }
  if (rc == 0) {
    lmdb_writer_enqueue(e, req); /* a claim that writes: the writer re-reads */
  } else if (rc == 1) {
    atomic_fetch_add(&e->ops_read, 1);
    idem_req_finish(req); /* delivered on the loop, not from inside submit */
  } else {
    idem_req_fail(req, lmdb_error(e, rc));
  }
}

int idem_lmdb_stats_get(const idem_store *store, idem_lmdb_stats *out) {
  if (!store || !out || store->backend != &idem_backend_lmdb || !store->impl)
    return IDEM_EINVAL;
  lmdb_env *e = ((const lmdb_handle *)store->impl)->env;
#define LMDB_COUNTER_COPY(name) out->name = atomic_load(&e->name);
  LMDB_COUNTERS(LMDB_COUNTER_COPY)
#undef LMDB_COUNTER_COPY
  out->logged = e->log_fd >= 0;
  lmdb_overlay_size(&e->ov, &out->overlay_keys, &out->overlay_bytes);
  return 0;
}

const idem_backend idem_backend_lmdb = {"lmdb", lmdb_check, lmdb_open, lmdb_submit, lmdb_close, 0};

/*
 * keys.c - idem keys get|delete|list: inspect records in any store.
 *
 * Generic over store URIs through the blocking facade. Records print as JSON
 * (one object per line for list, so the output pipes into jq or grep).
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "core/settings.h"
#include "idem/idem.h"

#define DEFAULT_STORE "lmdb:./idem-data"

static const char usage[] =
    "usage: idem keys get KEY    [--store URI] [--scope S]\n"
    "       idem keys delete KEY [--store URI] [--scope S]\n"
    "       idem keys list [AFTER] [--store URI] [--scope S] [--limit N]\n"
    "\n"
    "Inspect idempotency records. get and list print JSON: state, fence,\n"
    "timestamps (UTC and Unix ms), response status and sizes. list prints one\n"
    "record per line in key order, live records only (AFTER: start after that key).\n"
    "\n"
    "options:\n";

/* ---- JSON output ------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (1..4), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  size_t len;
  uint32_t min, c;
  if (p[0] < 0x80)
    return 1;
  if ((p[0] & 0xe0) == 0xc0) len = 2, min = 0x80, c = p[0] & 0x1f;
  else if ((p[0] & 0xf0) == 0xe0) len = 3, min = 0x800, c = p[0] & 0x0f;
  else if ((p[0] & 0xf8) == 0xf0) len = 4, min = 0x10000, c = p[0] & 0x07;
  else return 0;
  if (len > n)
    return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    c = c << 6 | (p[i] & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
    return 0;
  return len;
}

/* A JSON string. Bytes that are not UTF-8 become U+FFFD: the output stays
 * valid JSON whatever a scope holds. */
static void json_string(FILE *out, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  fputc('"', out);
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      fputc('\\', out);
      fputc(c, out);
      i++;
    } else if (c < 0x20 || c == 0x7f) {
      static const char *named[0x20] = {['\b'] = "\\b", ['\f'] = "\\f", ['\n'] = "\\n",
                                        ['\r'] = "\\r", ['\t'] = "\\t"};
      if (c < 0x20 && named[c])
        fputs(named[c], out);
      else
        fprintf(out, "\\u%04x", c);
      i++;
    } else {
      size_t len = utf8_len(p + i, n - i);
      if (len) {
        fwrite(p + i, 1, len, out);
        i += len;
      } else {
        fputs("\\ufffd", out);
        i++;
      }
    }
  }
  fputc('"', out);
}

static void json_time(FILE *out, const char *name, int64_t ms) {
  fprintf(out, ",\"%s\":", name);
  if (ms <= 0) {
    fprintf(out, "null,\"%s_ms\":null", name);
    return;
  }
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  char buf[32];
  if (gmtime_r(&secs, &tm) && strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm))
    fprintf(out, "\"%s.%03dZ\"", buf, (int)(ms % 1000));
  else
    fputs("null", out);
  fprintf(out, ",\"%s_ms\":%lld", name, (long long)ms);
}

static void print_record(FILE *out, const idem_record *rec) {
  fputs("{\"scope\":", out);
  json_string(out, rec->scope ? rec->scope : "");
  fputs(",\"key\":", out);
  json_string(out, rec->key ? rec->key : "");
  fprintf(out, ",\"state\":\"%s\",\"fence\":%llu", idem_state_name(rec->state),
          (unsigned long long)rec->fence);
  json_time(out, "created_at", rec->created_at);
  json_time(out, "updated_at", rec->updated_at);
  json_time(out, "locked_until", rec->locked_until);
  json_time(out, "expires_at", rec->expires_at);
  fputs(",\"response\":", out);
  if (rec->response.status)
    fprintf(out, "{\"status\":%d,\"headers_bytes\":%zu,\"body_bytes\":%zu}", rec->response.status,
            rec->response.headers_len, rec->response.body_len);
  else
    fputs("null", out);
  fputs("}\n", out);
}

/* ---- options ----------------------------------------------------------- */

typedef struct {
  const char *action;
  const char *key;
  const char *store;
  const char *scope;
  int limit; /* 0: all */
  settings_words words; /* ACTION [KEY] */
} keys_args;

static const setting keys_settings[] = {
    {"store", "URI", SETTING_STRING, offsetof(keys_args, store), DEFAULT_STORE, 0, 0, NULL,
     "store to use"},
    {"scope", "S", SETTING_STRING, offsetof(keys_args, scope), NULL, 0, 0, NULL,
     "tenant scope (default: none; list: every scope unless given)"},
    {"limit", "N", SETTING_COUNT, offsetof(keys_args, limit), NULL, 1, INT_MAX, NULL,
     "list at most N records"},
};
static const setting_table keys_table = {"keys", keys_settings,
                                         sizeof keys_settings / sizeof keys_settings[0]};

/* 0, 1 for --help (printed), or the usage error's exit code */
static int parse_args(int argc, char **argv, keys_args *a) {
  memset(a, 0, sizeof *a);
  a->words.max = 3;
  int rc = cli_parse(&keys_table, a, argc, argv, &a->words, usage, NULL);
  if (rc)
    return rc;
  if (a->words.n == 0)
    return cli_usage_error("keys", "missing action: get, delete or list");
  a->action = a->words.words[0];
  int is_list = !strcmp(a->action, "list");
  if (!is_list && strcmp(a->action, "get") && strcmp(a->action, "delete"))
    return cli_usage_error("keys", "unknown action '%s' (get, delete, list)", a->action);
  if (a->words.n > 2)
    return cli_usage_error("keys", "too many arguments");
  a->key = a->words.n == 2 ? a->words.words[1] : NULL;
  if (!is_list && !a->key)
    return cli_usage_error("keys", "%s needs a KEY", a->action);
  if (a->key && !idem_key_valid(a->key, strlen(a->key)))
    return cli_usage_error("keys", "'%s' is not a valid key (1-255 printable ASCII characters)", a->key);
  if (a->scope && strlen(a->scope) > IDEM_SCOPE_MAX)
    return cli_usage_error("keys", "--scope is longer than %d bytes", IDEM_SCOPE_MAX);
  if (a->limit && !is_list)
    return cli_usage_error("keys", "--limit applies to list only");
  return 0;
}

/* ---- actions ----------------------------------------------------------- */

/* "idem keys get: scope/key: why", naming only what the command named. */
static int fail_op(const keys_args *a, int err) {
  int scoped = a->scope && a->scope[0];
  fprintf(stderr, "idem keys %s: %s%s%s%s%s (%s)\n", a->action, scoped ? a->scope : "",
          scoped && a->key ? "/" : "", a->key ? a->key : "", scoped || a->key ? ": " : "",
          idem_strerror(err), idem_errname(err));
  return 1;
}

static int run_list(idem_sync *sync, const keys_args *a) {
  /* Within one scope, page through in key order. Across every scope there
   * is no resume point in the API (a key alone does not say which scope),
   * so that list is one operation. */
  size_t want = a->limit ? (size_t)a->limit : SIZE_MAX;
  size_t page = a->scope ? 1000 : want;
  char after[IDEM_KEY_MAX + 1] = "";
  if (a->key)
    snprintf(after, sizeof after, "%s", a->key);
  size_t shown = 0;
  for (;;) {
    idem_op op = {.kind = IDEM_OP_LIST, .scope = a->scope, .key = after[0] ? after : NULL};
    op.limit = want - shown < page ? want - shown : page;
    idem_result res;
    int err = idem_sync_run(sync, &op, &res);
    if (err) {
      idem_result_clear(&res);
      return fail_op(a, err);
    }
    for (size_t i = 0; i < res.count; i++)
      print_record(stdout, &res.records[i]);
    shown += res.count;
    int more = a->scope && res.count == op.limit && shown < want;
    if (more)
      snprintf(after, sizeof after, "%s", res.records[res.count - 1].key);
    idem_result_clear(&res);
    if (!more)
      break;
  }
  return cli_flush_stdout("keys");
}

int cmd_keys(int argc, char **argv) {
  keys_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc)
    return rc == 1 ? 0 : rc; /* 1: --help was printed */

  idem_sync *sync;
  if ((rc = cli_open_existing_store("keys", a.store, &sync)) != 0)
    return rc;
  if (!strcmp(a.action, "list")) {
    rc = run_list(sync, &a);
  } else {
    int del = !strcmp(a.action, "delete");
    idem_op op = {.kind = del ? IDEM_OP_DELETE : IDEM_OP_GET, .scope = a.scope, .key = a.key};
    idem_result res;
    int err = idem_sync_run(sync, &op, &res);
    if (err) {
      rc = fail_op(&a, err);
    } else if (del) {
      fputs("{\"scope\":", stdout);
      json_string(stdout, a.scope ? a.scope : "");
      fputs(",\"key\":", stdout);
      json_string(stdout, a.key);
      printf(",\"deleted\":%zu}\n", res.count);
    } else if (res.record) {
      print_record(stdout, res.record);
    }
    idem_result_clear(&res);
    if (!rc)
      rc = cli_flush_stdout("keys");
  }
  idem_sync_close(sync);
  return rc;
}

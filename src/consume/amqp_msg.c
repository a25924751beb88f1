/* amqp_msg.c - an AMQP delivery as a cs_msg, and its end (amqp_int.h):
 * properties, headers as text, the delivery count idem keeps. Used by the
 * connection's thread (amqp_thread.c), which wraps what it receives, and
 * the loop (broker_amqp.c), which frees what it settled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "consume/amqp_int.h"

static char *prop_str(const amqp_basic_properties_t *p, amqp_flags_t flag, amqp_bytes_t v) {
  return (p->_flags & flag) ? cs_dup(v.bytes, v.len) : NULL;
}

void amqp_msg_free(amsg *m) {
  empty_amqp_pool(&m->pool);
  cs_msg_free_headers(&m->m);
  free(m->m.body);
  free((char *)m->m.message_id);
  free((char *)m->m.content_type);
  free(m->reply_to);
  free(m->correlation_id);
  free(m->answer);
  free(m);
}

/* ---- a deep copy of the properties, in the message's pool ---- */

static int copy_bytes(amqp_pool_t *pool, amqp_bytes_t *b) {
  if (!b->len)
    return 0;
  void *p = amqp_pool_alloc(pool, b->len);
  if (!p)
    return -1;
  memcpy(p, b->bytes, b->len);
  b->bytes = p;
  return 0;
}

static int copy_table(amqp_pool_t *pool, amqp_table_t *t);

static int copy_value(amqp_pool_t *pool, amqp_field_value_t *v) {
  switch (v->kind) {
  case AMQP_FIELD_KIND_UTF8:
  case AMQP_FIELD_KIND_BYTES:
    return copy_bytes(pool, &v->value.bytes);
  case AMQP_FIELD_KIND_TABLE:
    return copy_table(pool, &v->value.table);
  case AMQP_FIELD_KIND_ARRAY: {
    amqp_array_t *a = &v->value.array;
    if (a->num_entries <= 0)
      return 0;
    amqp_field_value_t *e = amqp_pool_alloc(pool, (size_t)a->num_entries * sizeof *e);
    if (!e)
      return -1;
    memcpy(e, a->entries, (size_t)a->num_entries * sizeof *e);
    a->entries = e;
    for (int i = 0; i < a->num_entries; i++)
      if (copy_value(pool, &e[i]))
        return -1;
    return 0;
  }
  default:
    return 0; /* held by value */
  }
}

static int copy_table(amqp_pool_t *pool, amqp_table_t *t) {
  if (t->num_entries <= 0)
    return 0;
  amqp_table_entry_t *e = amqp_pool_alloc(pool, (size_t)t->num_entries * sizeof *e);
  if (!e)
    return -1;
  memcpy(e, t->entries, (size_t)t->num_entries * sizeof *e);
  t->entries = e;
  for (int i = 0; i < t->num_entries; i++)
    if (copy_bytes(pool, &e[i].key) || copy_value(pool, &e[i].value))
      return -1;
  return 0;
}

/* *out = a copy of *in that lives as long as pool. 0, or -1 out of memory. */
static int copy_properties(amqp_pool_t *pool, const amqp_basic_properties_t *in,
                           amqp_basic_properties_t *out) {
  *out = *in;
  amqp_bytes_t *fields[] = {&out->content_type, &out->content_encoding, &out->correlation_id,
                            &out->reply_to,     &out->expiration,       &out->message_id,
                            &out->type,         &out->user_id,          &out->app_id,
                            &out->cluster_id};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (copy_bytes(pool, fields[i]))
      return -1;
  if (!(out->_flags & AMQP_BASIC_HEADERS_FLAG))
    out->headers = amqp_empty_table;
  return copy_table(pool, &out->headers);
}

/* A float as the shortest decimal text that reads back as the same value
 * (0.1, not 0.10000000000000001): what its producer wrote, in most cases. */
static void float_text(char *buf, size_t len, double v, int f32) {
  for (int digits = 1; digits <= (f32 ? 9 : 17); digits++) {
    snprintf(buf, len, "%.*g", digits, v);
    if (f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
      return;
  }
}

/* An AMQP decimal (a count of units and the digits after the point) as
 * decimal text: 12345 with 2 is 123.45, 5 with 3 is 0.005. */
static void decimal_text(char *buf, size_t len, amqp_decimal_t d) {
  char digits[16];
  int n = snprintf(digits, sizeof digits, "%u", (unsigned)d.value), k = d.decimals;
  if (!k)
    snprintf(buf, len, "%s", digits);
  else if (n > k)
    snprintf(buf, len, "%.*s.%s", n - k, digits, digits + n - k);
  else {
    size_t at = (size_t)snprintf(buf, len, "0.");
    for (int i = n; i < k && at + 1 < len; i++)
      buf[at++] = '0';
    snprintf(buf + at, len - at, "%s", digits);
  }
}

/* A header value as text: strings as they are, numbers in decimal. */
static char *field_text(const amqp_field_value_t *v, size_t *len) {
  char buf[300]; /* a decimal may put its point 255 digits in */
  switch (v->kind) {
  case AMQP_FIELD_KIND_UTF8:
  case AMQP_FIELD_KIND_BYTES:
    *len = v->value.bytes.len;
    return cs_dup(v->value.bytes.bytes, v->value.bytes.len);
  case AMQP_FIELD_KIND_BOOLEAN: snprintf(buf, sizeof buf, "%s", v->value.boolean ? "true" : "false"); break;
  case AMQP_FIELD_KIND_I8: snprintf(buf, sizeof buf, "%d", v->value.i8); break;
  case AMQP_FIELD_KIND_U8: snprintf(buf, sizeof buf, "%u", v->value.u8); break;
  case AMQP_FIELD_KIND_I16: snprintf(buf, sizeof buf, "%d", v->value.i16); break;
  case AMQP_FIELD_KIND_U16: snprintf(buf, sizeof buf, "%u", v->value.u16); break;
  case AMQP_FIELD_KIND_I32: snprintf(buf, sizeof buf, "%d", v->value.i32); break;
  case AMQP_FIELD_KIND_U32: snprintf(buf, sizeof buf, "%u", v->value.u32); break;
  case AMQP_FIELD_KIND_I64: snprintf(buf, sizeof buf, "%lld", (long long)v->value.i64); break;
  case AMQP_FIELD_KIND_U64: snprintf(buf, sizeof buf, "%llu", (unsigned long long)v->value.u64); break;
  case AMQP_FIELD_KIND_F32: float_text(buf, sizeof buf, (double)v->value.f32, 1); break;
  case AMQP_FIELD_KIND_F64: float_text(buf, sizeof buf, v->value.f64, 0); break;
  case AMQP_FIELD_KIND_DECIMAL: decimal_text(buf, sizeof buf, v->value.decimal); break;
  case AMQP_FIELD_KIND_TIMESTAMP: snprintf(buf, sizeof buf, "%llu", (unsigned long long)v->value.u64); break;
  default: return NULL; /* tables, arrays, void: not passed on */
  }
  *len = strlen(buf);
  return cs_dup(buf, *len);
}

static const char *header(const amsg *m, const char *name) {
  for (size_t i = 0; i < m->m.nheaders; i++)
    if (!strcasecmp(m->m.headers[i].name, name))
      return m->m.headers[i].value;
  return NULL;
}

/* The deliveries idem counted before this one: its x-idem-deliveries, on
 * a retry's copy. A dead letter sent back to the queue (a redrive) starts
 * over: it carries x-idem-reason, and the count that dead-lettered it. A
 * value that is not a plain count is none; a count of seven digits or more
 * (no count of idem's) is COUNTED_MAX, the ceiling of --max-deliveries, so
 * this delivery is past any: a producer cannot buy its message more runs. */
#define COUNTED_MAX 1000000u
static unsigned counted_before(const amsg *m) {
  const char *v = header(m, "x-idem-deliveries");
  size_t n = v ? strlen(v) : 0;
  if (!n || header(m, "x-idem-reason") || strspn(v, "0123456789") != n)
    return 0;
  if (n > 6)
    return COUNTED_MAX;
  return (unsigned)strtoul(v, NULL, 10);
}

/* x-idem-due: ms since the epoch, digits only; 0 when none. */
static uint64_t due_wall(const amsg *m) {
  const char *v = header(m, "x-idem-due");
  if (!v || !*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 15)
    return 0;
  return strtoull(v, NULL, 10);
}

amsg *amqp_wrap(abroker *b, const amqp_basic_deliver_t *d, const amqp_message_t *msg) {
  amsg *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  const amqp_basic_properties_t *p = &msg->properties;
  init_amqp_pool(&m->pool, 4096);
  m->b = b;
  m->tag = d->delivery_tag;
  m->gen = b->gen;
  m->m.body = cs_dup(msg->body.bytes, msg->body.len);
  m->m.body_len = msg->body.len;
  m->m.message_id = prop_str(p, AMQP_BASIC_MESSAGE_ID_FLAG, p->message_id);
  m->m.message_id_len = m->m.message_id ? p->message_id.len : 0;
  m->m.content_type = prop_str(p, AMQP_BASIC_CONTENT_TYPE_FLAG, p->content_type);
  m->reply_to = prop_str(p, AMQP_BASIC_REPLY_TO_FLAG, p->reply_to);
  m->correlation_id = prop_str(p, AMQP_BASIC_CORRELATION_ID_FLAG, p->correlation_id);
  int n = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? p->headers.num_entries : 0;
  m->m.headers = calloc((size_t)n + 1, sizeof *m->m.headers);
  for (int i = 0; m->m.headers && i < n; i++) {
    const amqp_table_entry_t *e = &p->headers.entries[i];
    /* a name holding a NUL is no header's: read up to the NUL, it would
     * pass for another one (a dead letter or a copy keeps it: props) */
    if (e->key.len && memchr(e->key.bytes, 0, e->key.len))
      continue;
    size_t vlen = 0;
    char *v = field_text(&e->value, &vlen);
    if (!v)
      continue;
    cs_header *h = &m->m.headers[m->m.nheaders++];
    h->name = cs_dup(e->key.bytes, e->key.len);
    h->value = v;
    h->value_len = vlen;
  }
  m->m.deliveries = counted_before(m) + 1 + (d->redelivered ? 1 : 0);
  m->due_wall = due_wall(m);
  if (asprintf(&m->m.id, "%s#%llu", b->queue, (unsigned long long)d->delivery_tag) < 0)
    m->m.id = NULL;
  if (!m->m.body || !m->m.headers || !m->m.id || copy_properties(&m->pool, p, &m->props)) {
    amqp_msg_free(m);
    return NULL;
  }
  return m;
}

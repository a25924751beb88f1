/* msg_key.c - a message's idempotency key (msg_key.h). */
#include "consume/msg_key.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/json_pointer.h"
#include "core/sha256.h"

int cs_key_source_parse(const char *text, cs_key_source *out, char *err, size_t len) {
  memset(out, 0, sizeof *out);
  if (!strcmp(text, "message-id")) {
    out->kind = KEY_MESSAGE_ID;
    return 0;
  }
  if (!strcmp(text, "body-sha256")) {
    out->kind = KEY_BODY_SHA256;
    return 0;
  }
  if (!strncmp(text, "header:", 7) && text[7] && strlen(text + 7) < sizeof out->arg) {
    out->kind = KEY_HEADER;
    snprintf(out->arg, sizeof out->arg, "%s", text + 7);
    return 0;
  }
  if (!strncmp(text, "json:", 5) && text[5] == '/' && strlen(text + 5) < sizeof out->arg &&
      json_pointer_valid(text + 5, strlen(text + 5))) {
    out->kind = KEY_JSON;
    snprintf(out->arg, sizeof out->arg, "%s", text + 5);
    return 0;
  }
  snprintf(err, len, "--key: '%s' is not a key source; use message-id, header:NAME, "
                     "json:/POINTER (RFC 6901, e.g. json:/order/id) or body-sha256", text);
  return -1;
}

static int take(const char *v, size_t n, const char *what, char *out, char *why, size_t len) {
  if (!idem_key_valid(v, n)) {
    snprintf(why, len, "%s is not a valid key (1 to 255 printable ASCII characters)", what);
    return -1;
  }
  memcpy(out, v, n);
  out[n] = 0;
  return 0;
}

static int key_json(const cs_key_source *s, const cs_msg *m, char *out, char *why, size_t len) {
  char *v = NULL;
  size_t n = 0;
  json_ptr_type t;
  int rc = json_pointer_get(m->body, m->body_len, s->arg, strlen(s->arg), &v, &n, &t);
  if (rc == IDEM_EJSON)
    snprintf(why, len, "the body is not JSON, so json:%s finds no key", s->arg);
  else if (rc == IDEM_ENOTFOUND)
    snprintf(why, len, "the JSON body has nothing at %s", s->arg);
  else if (rc)
    snprintf(why, len, "json:%s: %s", s->arg, idem_strerror(rc));
  else if (t != JSON_PTR_STRING && t != JSON_PTR_NUMBER) {
    snprintf(why, len, "the value at %s is not a string or a number", s->arg);
    rc = -1;
  } else {
    char what[300];
    snprintf(what, sizeof what, "the value at %s", s->arg);
    rc = take(v, n, what, out, why, len);
  }
  free(v);
  return rc ? -1 : 0;
}

static int key_sha256(const cs_msg *m, char *out, char *why, size_t len) {
  if (idem_sha256_hex(m->body, m->body_len, out)) {
    snprintf(why, len, "cannot hash the body");
    return -1;
  }
  return 0;
}

int cs_msg_key(const cs_key_source *s, const cs_msg *m, char out[IDEM_KEY_MAX + 1], char *why,
               size_t len) {
  switch (s->kind) {
  case KEY_MESSAGE_ID:
    if (!m->message_id) {
      snprintf(why, len, "the message has no message id");
      return -1;
    }
    return take(m->message_id, m->message_id_len, "its message id", out, why, len);
  case KEY_HEADER:
    for (size_t i = 0; i < m->nheaders; i++)
      if (!strcasecmp(m->headers[i].name, s->arg)) {
        char what[300];
        snprintf(what, sizeof what, "header '%s'", s->arg);
        return take(m->headers[i].value, m->headers[i].value_len, what, out, why, len);
      }
    snprintf(why, len, "the message has no header '%s'", s->arg);
    return -1;
  case KEY_JSON:
    return key_json(s, m, out, why, len);
  case KEY_BODY_SHA256:
    return key_sha256(m, out, why, len);
  }
  return -1;
}

/*
 * msg_key.h - where a message's idempotency key comes from (--key):
 *
 *   message-id     the broker's message id (AMQP message_id, NATS
 *                  Nats-Msg-Id, the Redis field message_id)
 *   header:NAME    a header (AMQP header, NATS header, Redis field), by name,
 *                  case-insensitive
 *   json:/POINTER  an RFC 6901 pointer into a JSON body: a string or a number
 *   body-sha256    the SHA-256 of the body, in hex: the same bytes are the
 *                  same message
 *
 * A key must be 1 to 255 printable ASCII characters, as over HTTP.
 */
#ifndef IDEM_CONSUME_MSG_KEY_H
#define IDEM_CONSUME_MSG_KEY_H

#include <stddef.h>

#include "consume/broker.h"
#include "idem/idem.h"

typedef enum { KEY_MESSAGE_ID, KEY_HEADER, KEY_JSON, KEY_BODY_SHA256 } cs_key_kind;

typedef struct {
  cs_key_kind kind;
  char arg[256]; /* header name, or JSON pointer */
} cs_key_source;

/* 0, or -1 with a sentence in err naming the forms accepted. */
int cs_key_source_parse(const char *text, cs_key_source *out, char *err, size_t len);

/* The key of m into out: 0, or -1 with the reason in why (for the dead
 * letter: "no header 'x-id'", "...is not a valid key..."). */
int cs_msg_key(const cs_key_source *s, const cs_msg *m, char out[IDEM_KEY_MAX + 1], char *why,
               size_t len);

#endif

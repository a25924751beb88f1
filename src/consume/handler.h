/*
 * handler.h - what `idem consume` sends its handler and keeps of the answer.
 *
 * The handler gets, for each message it runs:
 *   POST PATH HTTP/1.1
 *   Host: HOST:PORT
 *   Content-Type: the message's content type (application/octet-stream when
 *                 it has none)
 *   Idempotency-Key: the key (a Structured Field string when it holds a
 *                 space or starts with a quote, a bare token otherwise)
 *   Idempotency-Fence: N (1 the first time, one more at each takeover)
 *   X-Idem-Message-Id: the broker's id of the message
 *   X-Idem-Deliveries: how many times the broker has handed it out
 *   X-Idem-Header-NAME: VALUE for each header (field) of the message whose
 *                 name is a token and whose value holds no CR, LF or NUL
 *   the body, as is, with its Content-Length
 */
#ifndef IDEM_CONSUME_HANDLER_H
#define IDEM_CONSUME_HANDLER_H

#include <stdint.h>

#include "consume/broker.h"
#include "consume/consume.h"
#include "http/msg.h"
#include "http/upstream.h"

/* The request head for m into out (appended). fence 0: none (no record, as
 * with --on-store-error open). 0 or -1 when out of memory. */
int cs_handler_head(const cs_config *cfg, const cs_msg *m, const char *key, uint64_t fence,
                    gw_buf *out);

/* The replayable headers of an answer, "Name: value\r\n" as serve stores
 * them: all but hop-by-hop headers, those its Connection header names, and
 * framing. 0 or -1 when out of memory. */
int cs_handler_kept_headers(const upstream_response *r, gw_buf *out);

#endif

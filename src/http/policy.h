/*
 * policy.h - the gateway's pure decisions: no I/O, no state. Which requests
 * have idempotency semantics, how a key and a scope are read from headers,
 * which upstream answers are kept, which headers are replayable, and the
 * problem+json (RFC 9457) bodies of the gateway's own answers.
 */
#ifndef IDEM_HTTP_POLICY_H
#define IDEM_HTTP_POLICY_H

#include <stddef.h>

#include "http/config.h"
#include "http/msg.h"
#include "http/request.h"
#include "http/route.h"
#include "idem/idem.h"

/* Whether method (case-sensitive, as on the wire) is in the route's
 * methods, and the route's mode is not off. */
int policy_method_has_semantics(const gw_policy *p, const char *method);

typedef enum {
  POLICY_KEY_NONE = 0, /* no Idempotency-Key header */
  POLICY_KEY_OK,       /* key parsed into out */
  POLICY_KEY_BAD,      /* malformed, empty, too long, or sent twice */
  POLICY_KEY_NOT_JSON  /* key: json:, and a non-empty body that is not JSON */
} policy_key_result;

/* Read Idempotency-Key from headers into out (IDEM_KEY_MAX + 1 bytes). On
 * POLICY_KEY_BAD, *why points at a sentence for the problem detail. */
policy_key_result policy_key(const gw_headers *h, char *out, const char **why);

/* The key of r where the route's key source says (key: header:NAME,
 * json:/POINTER, query:NAME) into out (IDEM_KEY_MAX + 1 bytes). NONE when
 * the source holds nothing (no such header or parameter; a body that is not
 * JSON or has nothing at the pointer); BAD, with a sentence in why, when
 * what it holds is not a key (malformed, sent twice, a JSON value other
 * than a string or a number). */
policy_key_result policy_route_key(const gw_policy *p, const gw_request *r, char *out,
                                   char *why, size_t whylen);

/* What the route's key source is called in a problem detail:
 * "an Idempotency-Key header", "a JSON body member at /order_id", ... */
void policy_key_source_text(const gw_policy *p, char *out, size_t len);

/* The request's fingerprint under the route's fingerprint setting: method,
 * target and the body's bytes (raw), its canonical JSON (json), or the
 * canonical JSON of only the listed members (json:/A,/B; a member that is
 * absent counts as absent). 0, or IDEM_EJSON when a json fingerprint meets
 * a non-empty body that is not JSON, or IDEM_ENOMEM. */
int policy_fingerprint(const gw_policy *p, const gw_request *r, uint8_t out[IDEM_FINGERPRINT_LEN]);

/* The record scope: SHA-256 (lowercase hex) of the --scope-header value, so a
 * secret such as an Authorization header never reaches the store; "" when no
 * scope header is configured or the request has none. out: 65 bytes.
 * 0; IDEM_EINVAL when the request has the header more than once (which
 * value names the tenant cannot be known: a proxy may have appended the
 * real one after a forged one); IDEM_ENOMEM when OpenSSL cannot hash. */
int policy_scope(const gw_config *cfg, const gw_headers *h, char out[65]);

/* Whether an upstream status is stored (1: 2xx, 3xx, deterministic 4xx) or
 * releases the key so that a retry runs again (0: 408, 409, 425, 429, 5xx,
 * and anything outside 200-499). */
int policy_status_stored(int status);

/* Headers that never travel across the gateway (RFC 9110 7.6.1), plus the
 * framing headers the gateway recomputes. */
int policy_hop_header(const char *name, size_t len);

/* Request headers the client may not send upstream: hop-by-hop, framing,
 * Expect (answered by the gateway) and Idempotency-Fence (only the gateway
 * sets it). */
int policy_request_header_dropped(const char *name, size_t len);

/* The replayable headers of an answer, as "Name: value\r\n" lines into out
 * (emptied first): all but hop-by-hop ones, those its Connection header
 * names, and framing. 0, or -1 out of memory. */
int policy_replayable_headers(const gw_headers *h, gw_buf *out);

/* The header block of an answer as kept for replay under the route
 * (replay_headers: drop: [...]): block (replayable headers, "Name:
 * value\r\n" lines) less the dropped names, into out (emptied first).
 * 0, or -1 out of memory. */
int policy_kept_headers(const gw_policy *p, const gw_buf *block, gw_buf *out);

/* Reason phrase for a status ("Conflict"); "Unknown" when unknown. */
const char *policy_reason(int status);

/* Append a problem+json body to out: {"type","title","status","detail"}.
 * slug names the problem type (urn:idem:problem:SLUG). Returns 0 or -1. */
int policy_problem(gw_buf *out, int status, const char *slug, const char *title,
                   const char *detail);

/* The record kept in place of an answer that could not be: a 502 problem
 * (upstream-response-not-stored) saying that the request ran once, that the
 * upstream answered status, and why its answer was not kept ("was larger
 * than ..."). Retries replay it and never run the request again. Appends
 * to headers and body; returns 0 or -1. */
int policy_not_kept(gw_buf *headers, gw_buf *body, int status, const char *why);

/* Why an answer the store refused with err is kept as that 502 marker
 * instead ("did not fit in the store, which is full"), or NULL when err
 * is no reason to (the store failed: spool the answer, or try again). */
const char *policy_not_kept_why(int err);

/* Append s as a JSON string (quotes included) to out. */
int policy_json_string(gw_buf *out, const char *s, size_t len);
/* The same, with every byte from 0x80 written \u00XX: valid JSON whatever
 * the bytes (a request target, a key), read back as Latin-1. */
int policy_json_ascii(gw_buf *out, const char *s, size_t len);

#endif

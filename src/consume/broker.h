/*
 * broker.h - what `idem consume` needs of a message broker, behind one table
 * of functions (one file per broker: broker_redis.c, ...). The flow
 * (consume.c) never names a broker; a broker never names the flow: it hands
 * messages to the on_message callback it was opened with, and hears back
 * through ack, later and dead, each of which settles one message.
 *
 * Ownership: a message belongs to the broker. The flow reads it from
 * on_message until it settles it (exactly once: ack, later or dead); the
 * settle's callback is the last time the flow sees it, and the broker frees
 * it afterwards. A settle that fails (the broker went away) leaves the
 * message to be delivered again by the broker, never lost.
 *
 * Everything runs on the loop the broker was opened on.
 */
#ifndef IDEM_CONSUME_BROKER_H
#define IDEM_CONSUME_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "consume/broker_uri.h"

typedef struct {
  char *name;
  char *value;
  size_t value_len;
} cs_header;

typedef struct cs_msg {
  char *id;             /* the broker's id for this message, for logs */
  char *body;           /* may hold any bytes; NUL-terminated for convenience */
  size_t body_len;
  cs_header *headers;   /* every other field or header, as received */
  size_t nheaders;
  const char *message_id;   /* the broker's own message id, or NULL */
  size_t message_id_len;    /* its length: it may hold a NUL (not a valid key) */
  const char *content_type; /* or NULL */
  unsigned deliveries;      /* 1 the first time the broker hands it out */
} cs_msg;

typedef struct cs_broker cs_broker;

/* The answer kept for a message, handed to ack for brokers that send it
 * back (AMQP reply_to). Valid during the call only. */
typedef struct {
  int status;
  const char *body;
  size_t body_len;
  int replayed; /* it came from the record, not from the handler now */
} cs_answer;

/* A settle is done: ok 0 when the broker could not take it (the message
 * will come again). m is valid during the call only. */
typedef void (*cs_settled_cb)(void *arg, cs_msg *m, int ok);

typedef struct {
  uv_loop_t *loop;
  unsigned window;     /* --concurrency: the most messages the flow holds */
  int64_t lock_ttl_ms; /* how long a message may stay with a consumer that
                          said nothing before others take it over */
  int64_t max_delay_ms; /* the longest idem puts a message off: the larger of
                           --max-retry-delay and --lock-ttl */
  void (*on_message)(void *arg, cs_msg *m);
  void (*on_state)(void *arg, int up); /* connected (1) or lost (0) */
  void *arg;
} cs_broker_opts;

typedef struct {
  const char *scheme;
  size_t size; /* of the broker's own struct, which starts with a cs_broker */
  const char *const *params; /* the ?name=... it takes, NULL-terminated */
  int default_port;
  /* The broker's own rules for a parsed URI of its scheme (parameters
   * known, port defaulted): 0, or -1 with a sentence naming what is wrong
   * and the accepted form. */
  int (*check_uri)(const cs_uri *u, char *err, size_t len);
  /* b is zeroed but for its cs_broker (URI, options). 0, or an error with
   * a sentence in *why (malloc'd) after which the broker frees b itself
   * (at once, or once its handles are closed). */
  int (*start)(cs_broker *b, char **why);
  /* The flow can take credit more messages (its free concurrency). */
  void (*credit)(cs_broker *b, unsigned credit);
  /* Done with m for good: it must not come again. answer (may be NULL) is
   * what the store keeps for it. */
  void (*ack)(cs_broker *b, cs_msg *m, const cs_answer *answer, cs_settled_cb cb, void *arg);
  /* Deliver m again, to any consumer, no sooner than delay_ms from now.
   * ran: whether this delivery reached the handler. One that did not (a
   * busy key, a store away) is not counted again where idem keeps the
   * count itself (RabbitMQ); Redis and NATS count every delivery. */
  void (*later)(cs_broker *b, cs_msg *m, int64_t delay_ms, int ran, cs_settled_cb cb,
                void *arg);
  /* Move m to the dead letters with reason (and its headers), then ack it:
   * both or neither. */
  void (*dead)(cs_broker *b, cs_msg *m, const char *reason, cs_settled_cb cb, void *arg);
  /* m stays here, unsettled, for another --lock-ttl: the broker must not
   * hand it to a consumer (this one included) in the meantime, nor count a
   * delivery. Best effort: a broker that is away hears nothing. */
  void (*keep)(cs_broker *b, cs_msg *m);
  /* Stop fetching; messages not yet settled stay with the broker (they come
   * again). Called after b->closing, b->done and b->done_arg are set; the
   * broker calls cs_broker_free once every handle is closed. Settles
   * submitted before close still complete first. */
  void (*close)(cs_broker *b);
} cs_broker_vt;

/* A broker's table from its functions' prefix: P_params, P_check_uri, P_start, ... */
#define CS_BROKER_VT(name, type, port, P)                                            \
  {.scheme = name, .size = sizeof(type), .params = P##_params, .default_port = port,  \
   .check_uri = P##_check_uri, .start = P##_start, .credit = P##_credit, .ack = P##_ack, \
   .later = P##_later, .dead = P##_dead, .keep = P##_keep, .close = P##_close}

/* What every broker has: the first member of each broker's struct. */
struct cs_broker {
  const cs_broker_vt *vt;
  cs_broker_opts o;
  cs_uri uri;
  int closing;
  void (*done)(void *arg); /* once closed */
  void *done_arg;
};

/* The broker for uri's scheme (redis://, ...): IDEM_EURI with a sentence in
 * *why (malloc'd) when the scheme is unknown or the URI is malformed. */
int cs_broker_open(const char *uri, const cs_broker_opts *o, cs_broker **out, char **why);

/* Just the check of uri (for flag parsing): 0, or -1 with a sentence. */
int cs_broker_check(const char *uri, char *err, size_t errlen);

/* Stop fetching; done(arg) runs on the loop once every handle is closed. */
void cs_broker_close(cs_broker *b, void (*done)(void *arg), void *arg);

/* n bytes of p as a NUL-terminated copy (malloc'd), or NULL. */
char *cs_dup(const void *p, size_t n);

/* Free m's id and headers (a broker frees the rest of what it owns). */
void cs_msg_free_headers(cs_msg *m);

/* A broker's last step: frees b (its URI too), then calls its done. */
void cs_broker_free(cs_broker *b);

extern const cs_broker_vt cs_broker_redis;
extern const cs_broker_vt cs_broker_nats;
extern const cs_broker_vt cs_broker_amqp;

#endif

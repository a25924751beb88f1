/*
 * amqp_int.h - what broker_amqp.c (the loop's side) and amqp_thread.c (the
 * thread that owns the librabbitmq connection) share. Internal.
 */
#ifndef IDEM_CONSUME_AMQP_INT_H
#define IDEM_CONSUME_AMQP_INT_H

#include <stdint.h>

#include <amqp.h>
#include <uv.h>

#include "consume/broker.h"
#include "consume/broker_uri.h"

#define CH 1
#define BACKOFF_MAX_MS 2000

enum { OP_ACK = 1, OP_LATER, OP_DEAD };

typedef struct abroker abroker;

typedef struct amsg {
  cs_msg m;
  abroker *b;
  uint64_t tag;
  unsigned gen; /* the connection it came on */
  char *reply_to, *correlation_id;
  /* the delivery's properties and headers as they came (every field and
   * type), in pool: a retry or a dead letter is published with them */
  amqp_pool_t pool;
  amqp_basic_properties_t props;
  int op;
  uint64_t due_ms; /* when to publish (a later, or a publish refused), 0: now */
  /* a later's due time on the wall clock (ms since the epoch), 0: none:
   * from the header x-idem-due of the copy a stop published before it was
   * due, or set by that stop */
  uint64_t due_wall;
  unsigned refused; /* publishes of it the broker nacked, in a row */
  char reason[512];
  int status, replayed;
  char *answer;
  size_t answer_len;
  uint64_t pub_seq; /* the publish awaiting its confirm, 0 when none */
  /* the thread's own, never the loop's: a delivery that came after the
   * consumer was cancelled, sent back to the queue as a copy (freed by the
   * thread once settled) */
  int internal;
  cs_settled_cb cb;
  void *arg;
  int ok;
  struct amsg *next;
} amsg;

struct abroker {
  cs_broker base; /* its URI, options, and closing state */
  const char *queue;
  char dead_queue[300];
  unsigned prefetch;
  /* shared, under mu */
  uv_mutex_t mu;
  amsg *cmdq, *inq, *doneq; /* loop->thread, thread->loop, thread->loop */
  int stop;                 /* 1: no more deliveries, 2: close and exit */
  int thread_done;
  int up, up_seen;
  int wake_fd[2];
  /* the thread's */
  uv_thread_t thread;
  amqp_connection_state_t conn;
  unsigned gen;
  uint64_t next_seq;
  amsg *waiting; /* delayed or awaiting a confirm */
  char ctag[256]; /* the consumer's tag on this connection */
  size_t ctag_len;
  int cancelled; /* basic.cancel sent on this connection */
  /* the loop's */
  uv_async_t async;
  size_t outstanding;
};

/* amqp_msg.c */
/* A delivery as a message of b's (NULL when out of memory). */
amsg *amqp_wrap(abroker *b, const amqp_basic_deliver_t *d, const amqp_message_t *msg);
void amqp_msg_free(amsg *m);

/* amqp_thread.c */
void amqp_thread_main(void *arg);
void amqp_push(abroker *b, amsg **q, amsg *m);
void amqp_wake_thread(abroker *b);
uint64_t amqp_now_ms(void);
uint64_t amqp_wall_ms(void);

#endif

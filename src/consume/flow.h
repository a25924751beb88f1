/*
 * flow.h - the flow of messages (consume.c) as the consumer's life
 * (consume_run.c) drives it: it owns the flow's state, hands the broker
 * cs_flow_on_message, and on stop asks for what is held back. The flow
 * never calls back into the life.
 */
#ifndef IDEM_CONSUME_FLOW_H
#define IDEM_CONSUME_FLOW_H

#include <uv.h>

#include "core/queue.h"
#include "consume/broker.h"
#include "consume/consume.h"
#include "consume/cs_admin.h"
#include "http/upstream.h"
#include "idem/idem.h"

typedef struct cs_flow {
  const cs_config *cfg;
  uv_loop_t loop;
  idem_store *store;
  uint64_t store_retry_at;
  int store_down;
  cs_broker *broker;
  int broker_up;
  upstream_pool *pool;
  cs_admin *admin;
  uv_signal_t sigterm, sigint;
  int stopping;
  idem_queue jobs;     /* the messages taken from the broker, not yet settled */
  unsigned njobs;      /* (at most --concurrency plus --prefetch: the credit) */
  idem_queue ready;    /* of them, those due at the handler, for a free slot */
  unsigned at_handler; /* from the handler request to a durable answer: at most --concurrency */
  int starting_handlers; /* start_handlers is running (consume.c) */
  unsigned nparked;   /* jobs parked behind a duplicate: most often none */
  uv_timer_t keep_timer; /* cs_flow_keep_held, every quarter --lock-ttl */
} cs_flow;

/* The broker's on_message: m's claim starts at once; the handler gets it
 * when one of the --concurrency slots is free. */
void cs_flow_on_message(void *arg, cs_msg *m);
/* Tell the broker how many more messages the flow can take. */
void cs_flow_give_credit(cs_flow *f);
/* Tell the broker which messages held here without a lease stay here. */
void cs_flow_keep_held(cs_flow *f);
/* Stopping: messages held for the store or behind a duplicate go back. */
void cs_flow_hand_back_held(cs_flow *f);

#endif

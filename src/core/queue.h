/*
 * queue.h - the one intrusive queue of idem, after libuv's
 * src/queue.h: a circular doubly linked list whose node lives inside the
 * queued object, so queuing never allocates and an object leaves any
 * queue in O(1). Every list of pending work in src/store is one of these:
 * completions waiting for the loop (store.c), the LMDB writer's queues,
 * PostgreSQL's pending and solo operations and sent batches, Redis's
 * requests waiting for a connection and commands in flight; and so are the
 * process-wide registries of memory: tables and LMDB environments, and the
 * gateway's lists of client, admin and idle upstream connections.
 *
 * A queue is a node that stands for its own head: initialise it with
 * idem_queue_init (or, static, as {&q, &q}) before use (a zeroed one is
 * not empty, it is broken), and
 * do not copy it while it holds anything. Not thread-safe: whoever shares
 * one between threads holds a lock around it.
 */
#ifndef IDEM_CORE_QUEUE_H
#define IDEM_CORE_QUEUE_H

#include <stddef.h>
#include <string.h>

typedef struct idem_queue idem_queue;
struct idem_queue {
  idem_queue *next;
  idem_queue *prev;
};

/* The object of the given type whose member field is the node ptr. */
#define IDEM_QUEUE_DATA(ptr, type, field) ((type *)((char *)(ptr) - offsetof(type, field)))

/* Visit every node of q, first to last. The body must not remove node
 * (use idem_queue_pop, or idem_queue_move and pop from the copy). */
#define IDEM_QUEUE_FOREACH(node, q) for ((node) = (q)->next; (node) != (q); (node) = (node)->next)

static inline void idem_queue_init(idem_queue *q) { q->next = q->prev = q; }

static inline int idem_queue_empty(const idem_queue *q) { return q->next == q; }

/* The first node, or NULL when q is empty. */
static inline idem_queue *idem_queue_head(const idem_queue *q) {
  return q->next == q ? NULL : q->next;
}

static inline void idem_queue_insert_tail(idem_queue *q, idem_queue *node) {
  node->next = q;
  node->prev = q->prev;
  node->prev->next = node;
  q->prev = node;
}

static inline void idem_queue_insert_head(idem_queue *q, idem_queue *node) {
  node->next = q->next;
  node->prev = q;
  node->next->prev = node;
  q->next = node;
}

/* Take node out of whatever queue holds it. */
static inline void idem_queue_remove(idem_queue *node) {
  node->prev->next = node->next;
  node->next->prev = node->prev;
  node->next = node->prev = node;
}

/* Remove and return the first node, or NULL when q is empty. */
static inline idem_queue *idem_queue_pop(idem_queue *q) {
  idem_queue *node = idem_queue_head(q);
  if (node)
    idem_queue_remove(node);
  return node;
}

/* Everything in from goes to the (initialised, empty) queue to, in order;
 * from is left empty. */
static inline void idem_queue_move(idem_queue *from, idem_queue *to) {
  if (idem_queue_empty(from)) {
    idem_queue_init(to);
    return;
  }
  to->next = from->next;
  to->prev = from->prev;
  to->next->prev = to;
  to->prev->next = to;
  idem_queue_init(from);
}

/* In q, whose nodes sit at node_off in their objects, the first object
 * whose char * at key_off equals key (a registry looked up by name), or
 * NULL. */
static inline void *idem_queue_find_key(const idem_queue *q, size_t node_off, size_t key_off,
                                        const char *key) {
  for (const idem_queue *n = q->next; n != q; n = n->next) {
    char *obj = (char *)n - node_off;
    if (!strcmp(*(char **)(void *)(obj + key_off), key))
      return obj;
  }
  return NULL;
}

#endif

/*
 * redis.h - internals of the Redis store shared by redis.c, redis_uri.c,
 * redis_scripts.c and their unit tests. Not installed.
 */
#ifndef IDEM_STORE_REDIS_H
#define IDEM_STORE_REDIS_H

#include <stddef.h>
#include <stdint.h>

#define IDEM_REDIS_DEFAULT_PORT 6379
#define IDEM_REDIS_CONNECT_TIMEOUT_MS 2000
#define IDEM_REDIS_COMMAND_TIMEOUT_MS 5000
#define IDEM_REDIS_WAIT_TIMEOUT_MS 1000

/*
 * redis://[user:password@]host[:port][/db][?option=value&...]
 *
 * user and password are percent-decoded; a password alone ("redis://:pw@h")
 * authenticates with the one-argument AUTH of Redis before 6. host may be an
 * IPv6 literal in brackets. Options:
 *   timeout=DURATION          each command (default 5s)
 *   connect_timeout=DURATION  connect + AUTH + SELECT + SCRIPT LOAD (default 2s)
 *   prefix=TEXT               key prefix (default "idem"), so that several
 *                             deployments can share one database
 *   wait_replicas=N           after a claim, complete, fail or release, WAIT
 *                             for N replicas to have it before answering
 *                             (default 0: the primary's word is enough)
 *   wait_timeout=DURATION     how long that WAIT may take (default 1s, less
 *                             than timeout); fewer replicas by then: IDEM_ESTORE
 */
/* A node of a Cluster: a seed of the URI, or one the cluster names. */
typedef struct {
  char *host;
  int port;
} idem_redis_node;

typedef struct {
  char *user;     /* NULL when absent */
  char *password; /* NULL when absent */
  char *host;
  int port;
  int db;
  int64_t timeout_ms;
  int64_t connect_timeout_ms;
  char *prefix;
  int wait_replicas;
  int64_t wait_timeout_ms;
  /* redis+cluster:// only: the seed nodes (host and port are the first's) */
  idem_redis_node *seeds;
  size_t nseeds;
} idem_redis_uri;

/* Parse uri into out (every string malloc'd; free with idem_redis_uri_clear).
 * IDEM_EURI when malformed, with a malloc'd sentence in *why when why is not
 * NULL; IDEM_ENOMEM. */
int idem_redis_uri_parse(const char *uri, idem_redis_uri *out, char **why);
void idem_redis_uri_clear(idem_redis_uri *u);

/*
 * redis+cluster://[user:password@]host:port[,host:port...][?option=value&...]
 *
 * The seed nodes of a Redis Cluster, any of its nodes: the cluster names
 * the rest. Options as for redis://; no /db (a Cluster has database 0
 * only). Errors as idem_redis_uri_parse.
 */
int idem_redis_cluster_uri_parse(const char *uri, idem_redis_uri *out, char **why);
/* dst: the options and credentials of src, for the node host:port (no
 * seeds). IDEM_ENOMEM. */
int idem_redis_uri_for_node(const idem_redis_uri *src, const char *host, int port,
                            idem_redis_uri *dst);

/*
 * Redis key of a record: "<prefix>:{<scope length>:<scope>:<key>}". The
 * whole record name is the hash tag (one record, one Cluster slot) and the
 * length prefix keeps (scope, key) pairs apart whatever bytes they hold.
 * Returns a malloc'd string (length in *len) or NULL when out of memory.
 */
char *idem_redis_key(const char *prefix, const char *scope, const char *key,
                     size_t *len);
/* The Cluster slot of a Redis key: CRC16 of its hash tag (the bytes
 * between the first '{' and the next '}', when any), mod 16384. */
#define IDEM_REDIS_SLOTS 16384
unsigned idem_redis_slot(const char *name, size_t len);
/* A Cluster's redirection, "MOVED 3999 127.0.0.1:6381" or "ASK ...": the
 * slot, and the node to go to (host "" when the reply names none: the
 * answering node's own). 0, or -1 when the text is not one. */
int idem_redis_redirect_parse(const char *reply, unsigned *slot, char *host,
                              size_t host_size, int *port);
/* Split a Redis key made by idem_redis_key. Points *scope and *key into buf, which
 * it modifies (NULs). Returns 0, or -1 when name is not one of ours. */
int idem_redis_key_split(const char *prefix, char *buf, size_t len,
                         const char **scope, const char **key);
/* SCAN MATCH pattern for every record of scope (NULL: of every scope),
 * with glob characters of the prefix and scope escaped. malloc'd. */
char *idem_redis_match(const char *prefix, const char *scope);

/* The Lua script that runs every transition, and its SHA-1 in hex. */
extern const char idem_redis_script[];
extern const size_t idem_redis_script_len;
const char *idem_redis_script_sha(void);

#endif

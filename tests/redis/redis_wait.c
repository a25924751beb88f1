/*
 * redis_wait.c - wait_replicas=N on a real primary and replica: a
 * transition is answered only once the replica has it; too few replicas (or
 * one that stopped answering) make it a store error, and the lease it wrote
 * still holds the key.
 *
 * Run by with-redis.sh (the primary); the replica is started here, on a
 * free loopback port in a temporary directory, and stopped by PID.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "idem/idem.h"
#include "store/redis.h"

#define DEADLINE_MS 20000

static const char *base_uri;
static idem_redis_uri primary;
static pid_t replica_pid;
static redisContext *replica;
static char replica_dir[64] = "/tmp/idem-replica.XXXXXX";

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len))
    return -1;
  close(fd);
  return ntohs(a.sin_port);
}

/* field of INFO replication on c, as text (static buffer) */
static const char *info_field(redisContext *c, const char *field) {
  static char value[64];
  value[0] = 0;
  redisReply *r = redisCommand(c, "INFO replication");
  if (r && r->type == REDIS_REPLY_STRING) {
    const char *at = strstr(r->str, field);
    if (at)
      sscanf(at + strlen(field), "%63[^\r\n]", value);
  }
  freeReplyObject(r);
  return value;
}

static int start_replica(void) {
  int port = free_port();
  if (port < 0 || !mkdtemp(replica_dir))
    return -1;
  char portarg[16], master[16];
  snprintf(portarg, sizeof portarg, "%d", port);
  snprintf(master, sizeof master, "%d", primary.port);
  replica_pid = fork();
  if (replica_pid == 0) {
    execlp("redis-server", "redis-server", "--port", portarg, "--bind", "127.0.0.1",
           "--dir", replica_dir, "--save", "", "--appendonly", "no",
           "--replicaof", "127.0.0.1", master, (char *)NULL);
    _exit(127);
  }
  int64_t deadline = idem_now_ms() + DEADLINE_MS;
  while (idem_now_ms() < deadline) {
    if (!replica) {
      replica = redisConnect("127.0.0.1", port);
      if (replica && replica->err) {
        redisFree(replica);
        replica = NULL;
      }
    }
    if (replica && !strcmp(info_field(replica, "master_link_status:"), "up"))
      return 0;
    usleep(20 * 1000);
  }
  return -1;
}

static void stop_replica(void) {
  if (replica_pid > 0) {
    kill(replica_pid, SIGCONT);
    kill(replica_pid, SIGTERM);
    waitpid(replica_pid, NULL, 0);
  }
  if (replica)
    redisFree(replica);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", replica_dir);
  if (system(rm) != 0)
    fprintf(stderr, "redis_wait: could not remove %s\n", replica_dir);
}

static const char *uri_with(const char *options) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%s?%s", base_uri, options);
  return buf;
}

static idem_op claim_op(const char *key) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = "", .key = key, .lease_ms = 60000,
                .ttl_ms = 3600000};
  idem_fingerprint("POST", "/wait", "a", 1, 0, op.fingerprint);
  return op;
}

/* The record's state field as the replica has it ("" when it has none). */
static const char *state_on_replica(const char *key) {
  static char state[8];
  size_t len;
  char *name = idem_redis_key("idem", "", key, &len);
  redisReply *r = redisCommand(replica, "HGET %s state", name);
  snprintf(state, sizeof state, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
  freeReplyObject(r);
  free(name);
  return state;
}

static idem_sync *open_store(const char *uri) {
  idem_sync *db = NULL;
  assert_int_equal(idem_sync_open(uri, &db, NULL), 0);
  return db;
}

/* With wait_replicas=1 the replica has each write by the time it is
 * answered: read there at once, it is never behind. */
static void each_transition_is_on_the_replica_when_answered(void **state) {
  (void)state;
  idem_sync *db = open_store(uri_with("wait_replicas=1"));
  idem_result res;
  for (int i = 0; i < 50; i++) {
    char key[32];
    snprintf(key, sizeof key, "waited-%d", i);
    idem_op claim = claim_op(key);
    assert_int_equal(idem_sync_run(db, &claim, &res), 0);
    assert_int_equal(res.outcome, IDEM_CLAIMED);
    assert_string_equal(state_on_replica(key), "1");
    idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "", .key = key, .fence = res.fence,
                    .ttl_ms = 3600000, .response = {.status = 201}};
    assert_int_equal(idem_sync_run(db, &done, &res), 0);
    assert_string_equal(state_on_replica(key), "2");
  }
  idem_sync_close(db);
}

/* Two replicas asked of one: WAIT times out short, the claim is a store
 * error, and the lease it wrote on the primary keeps the key busy (a retry
 * meanwhile never runs the effect a second time). */
static void too_few_replicas_is_a_store_error_and_the_lease_holds(void **state) {
  (void)state;
  idem_sync *waiting = open_store(uri_with("wait_replicas=2&wait_timeout=200ms"));
  idem_sync *plain = open_store(base_uri);
  idem_result res;
  idem_op claim = claim_op("too-few");
  assert_int_equal(idem_sync_run(waiting, &claim, &res), IDEM_ESTORE);
  assert_int_equal(idem_sync_run(plain, &claim, &res), 0);
  assert_int_equal(res.outcome, IDEM_BUSY);
  assert_int_equal(res.fence, 1);
  idem_result_clear(&res);
  idem_sync_close(waiting);
  idem_sync_close(plain);
}

/* A replica that stops answering: transitions fail after wait_timeout; once
 * it is back they are answered again, on the same handle. */
static void stopped_replica_fails_writes_until_it_is_back(void **state) {
  (void)state;
  idem_sync *db = open_store(uri_with("wait_replicas=1&wait_timeout=300ms"));
  idem_result res;
  idem_op claim = claim_op("replica-stopped");
  kill(replica_pid, SIGSTOP);
  assert_int_equal(idem_sync_run(db, &claim, &res), IDEM_ESTORE);
  kill(replica_pid, SIGCONT);
  claim = claim_op("replica-back");
  int64_t deadline = idem_now_ms() + DEADLINE_MS;
  int err;
  while ((err = idem_sync_run(db, &claim, &res)) != 0) {
    assert_int_equal(err, IDEM_ESTORE);
    assert_true(idem_now_ms() < deadline);
    usleep(50 * 1000);
  }
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
  idem_sync_close(db);
}

int main(int argc, char **argv) {
  if (argc != 2 || idem_redis_uri_parse(argv[1], &primary, NULL) != 0) {
    fprintf(stderr, "usage: redis_wait redis://127.0.0.1:PORT\n");
    return 2;
  }
  base_uri = argv[1];
  if (start_replica()) {
    fprintf(stderr, "redis_wait: the replica did not come up\n");
    stop_replica();
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(each_transition_is_on_the_replica_when_answered),
      cmocka_unit_test(too_few_replicas_is_a_store_error_and_the_lease_holds),
      cmocka_unit_test(stopped_replica_fails_writes_until_it_is_back),
  };
  int rc = cmocka_run_group_tests_name("redis wait_replicas", tests, NULL, NULL);
  stop_replica();
  idem_redis_uri_clear(&primary);
  return rc;
}

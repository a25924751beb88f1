/* claim_once.c - libidem in twenty lines: run an effect once per key.
 *
 *   cc claim_once.c $(pkg-config --cflags --libs idem) -o claim_once
 *   ./claim_once lmdb:/tmp/idem-example order-7   # runs the effect
 *   ./claim_once lmdb:/tmp/idem-example order-7   # replays it
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idem/idem.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: claim_once STORE_URI KEY\n");
    return 2;
  }
  idem_sync *db;
  char *msg = NULL;
  int err = idem_sync_open(argv[1], &db, &msg);
  if (err) {
    fprintf(stderr, "claim_once: %s: %s\n", idem_strerror(err), msg ? msg : argv[1]);
    free(msg);
    return 1;
  }
  const char *payload = "charge 10 EUR";
  idem_op claim = {.kind = IDEM_OP_CLAIM, .key = argv[2], .lease_ms = 30000,
                   .ttl_ms = 86400000};
  idem_fingerprint("POST", "/charge", payload, strlen(payload), 0, claim.fingerprint);
  idem_result res;
  err = idem_sync_run(db, &claim, &res);
  if (!err && res.outcome == IDEM_CLAIMED) {
    const char *receipt = "charged 10 EUR"; /* the effect, done once */
    idem_op done = {.kind = IDEM_OP_COMPLETE, .key = argv[2], .fence = res.fence,
                    .ttl_ms = 86400000,
                    .response = {.status = 200, .body = receipt, .body_len = strlen(receipt)}};
    idem_result ack;
    err = idem_sync_run(db, &done, &ack);
    idem_result_clear(&ack);
    if (!err)
      printf("ran: %s (fence %llu)\n", receipt, (unsigned long long)res.fence);
  } else if (!err && res.outcome == IDEM_REPLAY) {
    printf("replayed: %.*s\n", (int)res.record->response.body_len, res.record->response.body);
  } else if (!err) {
    printf("refused: %s\n", idem_outcome_name(res.outcome));
  }
  if (err)
    fprintf(stderr, "claim_once: %s\n", idem_strerror(err));
  idem_result_clear(&res);
  idem_sync_close(db);
  return err ? 1 : 0;
}

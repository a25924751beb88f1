/* fuzz_consume_input.c - what `idem consume` parses: --from URIs
 * (broker_uri.c), --key sources and a message's key from its id, a header
 * or a JSON body (msg_key.c). Any bytes give a URI or -1 with a sentence,
 * a key source or -1 with a sentence, and a valid key or -1 with the
 * reason; never a crash or a leak.
 *
 * The input is split at its first three newlines: URI, key source, body,
 * and the rest is both the message id and the value of its one header. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "idem/idem.h"

#include "../../src/consume/broker_uri.c"
#include "../../src/consume/msg_key.c"

static const char *const known[] = {"stream", "group", "consumer", "queue", "prefetch", NULL};

/* The next part of *s up to a newline (cut there), or the rest. */
static char *next_part(char **s) {
  char *part = *s, *nl = strchr(part, '\n');
  if (nl) {
    *nl = '\0';
    *s = nl + 1;
  } else {
    *s = part + strlen(part);
  }
  return part;
}

static void check_uri(const char *text) {
  cs_uri u;
  char err[256] = "";
  if (cs_uri_parse(text, &u, err, sizeof err)) {
    if (!err[0])
      abort(); /* every refusal says why */
    return;
  }
  if (!u.host || !u.path || u.port < 0 || u.port > 65535 || u.nparams > CS_URI_MAX_PARAMS)
    abort();
  for (size_t i = 0; i < u.nparams; i++)
    if (!u.names[i] || !u.values[i] || cs_uri_param(&u, u.names[i]) == NULL)
      abort();
  err[0] = '\0';
  if (cs_uri_known(&u, known, err, sizeof err) && !err[0])
    abort();
  cs_uri_clear(&u);
}

static void check_key(const char *source, const char *body, const char *rest) {
  cs_key_source ks;
  char err[512] = "";
  if (cs_key_source_parse(source, &ks, err, sizeof err)) {
    if (!err[0])
      abort();
    return;
  }
  cs_header h = {.name = "X-Id", .value = (char *)rest, .value_len = strlen(rest)};
  cs_msg m = {.id = (char *)rest, .body = (char *)body, .body_len = strlen(body),
              .headers = &h, .nheaders = 1, .message_id = rest, .message_id_len = strlen(rest)};
  char key[IDEM_KEY_MAX + 1], why[512] = "";
  if (cs_msg_key(&ks, &m, key, why, sizeof why) == 0) {
    if (!idem_key_valid(key, strlen(key)))
      abort();
  } else if (!why[0]) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  if (!s)
    return 0;
  char *cur = s;
  char *uri = next_part(&cur), *source = next_part(&cur), *body = next_part(&cur);
  check_uri(uri);
  check_key(source, body, cur);
  free(s);
  return 0;
}

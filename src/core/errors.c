/* errors.c - names and sentences for the IDEM_E* codes, from the one list
 * in idem.h (IDEM_ERRORS). */
#include "idem/idem.h"

typedef struct {
  int code;
  const char *name, *text;
} error_entry;

static const error_entry errors[] = {
    {IDEM_OK, "IDEM_OK", "success"},
#define IDEM_ERR_ENTRY(name, code, text) {IDEM_##name, "IDEM_" #name, text},
    IDEM_ERRORS(IDEM_ERR_ENTRY)
#undef IDEM_ERR_ENTRY
};

static const error_entry *find(int err) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == err)
      return &errors[i];
  return NULL;
}

const char *idem_strerror(int err) {
  const error_entry *e = find(err);
  return e ? e->text : "unknown error";
}

const char *idem_errname(int err) {
  const error_entry *e = find(err);
  return e ? e->name : "IDEM_EUNKNOWN";
}

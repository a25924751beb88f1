/* errors.c - names and sentences for the IDEM_E* codes. */
#include "idem/idem.h"

const char *idem_strerror(int err) {
  switch (err) {
  case IDEM_OK:
    return "success";
#define IDEM_ERR_TEXT(name, code, text) \
  case IDEM_##name:                     \
    return text;
    IDEM_ERRORS(IDEM_ERR_TEXT)
#undef IDEM_ERR_TEXT
  }
  return "unknown error";
}

const char *idem_errname(int err) {
  switch (err) {
  case IDEM_OK:
    return "IDEM_OK";
#define IDEM_ERR_NAME(name, code, text) \
  case IDEM_##name:                     \
    return "IDEM_" #name;
    IDEM_ERRORS(IDEM_ERR_NAME)
#undef IDEM_ERR_NAME
  }
  return "IDEM_EUNKNOWN";
}

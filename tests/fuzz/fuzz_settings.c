/* fuzz_settings.c - settings_parse_argv (src/core/settings.c) on arbitrary
 * command lines: the input split at NUL bytes into argv words.
 * Properties: it returns 0, 1 (--help) or -1; on -1 the refusal is a
 * non-empty sentence; on 0 every value lies within its row's bounds, and a
 * string field points into argv. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the fields of a command's config, one of each kind */
typedef struct {
  int count;
  int on;
  uint64_t size;
  int64_t wait_ms;
  const char *name;
} cfg_t;

static const setting rows[] = {
    {"on", NULL, SETTING_SWITCH, offsetof(cfg_t, on), NULL, 0, 0, NULL, "switch"},
    {"name", "TEXT", SETTING_STRING, offsetof(cfg_t, name), "anon", 0, 0, NULL, "name"},
    {"wait", "DUR", SETTING_DURATION, offsetof(cfg_t, wait_ms), "0", 0, 86400000, NULL, "wait"},
    {"size", "SIZE", SETTING_SIZE, offsetof(cfg_t, size), "1KiB", 1024, 1 << 20, NULL, "size"},
    {"count", "N", SETTING_COUNT, offsetof(cfg_t, count), "3", 1, 64, NULL, "count"},
};
static const setting_table table = {"fuzz", rows, sizeof rows / sizeof rows[0]};

static int take(void *arg, const char *word, char *err, size_t len) {
  (void)arg;
  (void)err;
  (void)len;
  (void)word;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char *text = malloc(size + 1);
  char *argv[256];
  int argc = 0;
  memcpy(text, data, size);
  text[size] = 0;
  argv[argc++] = "cmd";
  for (size_t i = 0; i <= size && argc < 255;) {
    argv[argc++] = text + i;
    i += strlen(text + i) + 1;
  }
  cfg_t c;
  char err[256] = "";
  memset(&c, 0, sizeof c);
  if (settings_defaults(&table, &c, err, sizeof err))
    abort();
  int rc = settings_parse_argv(&table, &c, argc, argv, size % 2 ? take : NULL, NULL, err,
                               sizeof err);
  if (rc == -1 && !err[0])
    abort();
  if (rc == 0 && (c.wait_ms < 0 || c.wait_ms > 86400000 || c.size < 1024 || c.size > (1 << 20) ||
                  c.count < 1 || c.count > 64 || (c.on != 0 && c.on != 1) ||
                  (strcmp(c.name, "anon") && (c.name < text || c.name > text + size))))
    abort();
  if (rc != 0 && rc != 1 && rc != -1)
    abort();
  free(text);
  return 0;
}

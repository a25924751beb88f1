/* settings.c - table-driven flags, defaults and --help (see settings.h). */
#include "core/settings.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "idem/idem.h"

static const setting *find(const setting_table *t, const char *name, size_t len) {
  for (size_t i = 0; i < t->n; i++)
    if (strlen(t->rows[i].name) == len && !strncmp(t->rows[i].name, name, len))
      return &t->rows[i];
  return NULL;
}

/* "4GiB", "1MiB", "64KiB" or "512B": the largest unit that divides it. */
static void size_text(uint64_t v, char *out, size_t len) {
  static const char *const unit[] = {"GiB", "MiB", "KiB"};
  for (int i = 0; i < 3; i++) {
    uint64_t u = 1ull << (10 * (3 - i));
    if (v && v % u == 0) {
      snprintf(out, len, "%llu%s", (unsigned long long)(v / u), unit[i]);
      return;
    }
  }
  snprintf(out, len, "%lluB", (unsigned long long)v);
}

void settings_duration_text(int64_t ms, char *out, size_t len) {
  static const struct { int64_t ms; const char *unit; } units[] = {
      {86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
  if (!ms) {
    snprintf(out, len, "0");
    return;
  }
  for (size_t i = ms == units[0].ms; i < sizeof units / sizeof units[0]; i++)
    if (ms % units[i].ms == 0) {
      snprintf(out, len, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
      return;
    }
  snprintf(out, len, "%lldms", (long long)ms);
}

/* Digits and then a unit that "1" takes too: a number of that unit, written
 * right, whose parse failed on its size alone ("0s", "99999999d", "0",
 * "20TiB", a number past 64 bits). Such a value is out of range, which the
 * refusal says, rather than "not a duration" or "not a size". */
static int number_of_a_unit(const char *v, int is_size) {
  size_t digits = strspn(v, "0123456789");
  char one[8];
  if (!digits || strlen(v + digits) >= sizeof one - 1)
    return 0;
  snprintf(one, sizeof one, "1%s", v + digits);
  int64_t ms;
  uint64_t bytes;
  return is_size ? !idem_parse_size(one, &bytes) : !idem_parse_duration(one, &ms);
}

static int set_duration(const setting *s, int64_t *field, const char *v, char *err, size_t len) {
  int64_t ms;
  int zero_ok = s->min == 0;
  /* "0", and zero with a unit ("0s", as a config file may say it) */
  if (zero_ok && v[0] == '0' &&
      (!v[1] || !strcmp(v + 1, "ms") || (strchr("smhd", v[1]) && !v[2]))) {
    *field = 0;
    return 0;
  }
  int parsed = !idem_parse_duration(v, &ms);
  if (!parsed && !number_of_a_unit(v, 0)) {
    idem_errf(err, len,
            "--%s: '%s' is not a duration; use a number and a unit: ms, s, m, h or d "
            "(e.g. 500ms, 30s, 24h)%s",
            s->name, v, zero_ok ? ", or 0" : "");
    return -1;
  }
  if (!parsed || ms < s->min || ms > s->max) {
    char lo[32], hi[32];
    settings_duration_text(s->min, lo, sizeof lo);
    settings_duration_text(s->max, hi, sizeof hi);
    idem_errf(err, len, "--%s: '%s' is out of range; use a duration from %s to %s", s->name, v,
            zero_ok ? "0" : lo, hi);
    return -1;
  }
  *field = ms;
  return 0;
}

static int set_size(const setting *s, uint64_t *field, const char *v, char *err, size_t len) {
  uint64_t bytes;
  char lo[32], hi[32];
  size_text((uint64_t)s->max, hi, sizeof hi);
  int parsed = !idem_parse_size(v, &bytes);
  if (!parsed && !number_of_a_unit(v, 1)) {
    idem_errf(err, len,
            "--%s: '%s' is not a size; use bytes or a unit such as KiB, MiB (e.g. 64KiB, "
            "1MiB), at most %s",
            s->name, v, hi);
    return -1;
  }
  if (!parsed || bytes < (uint64_t)s->min || bytes > (uint64_t)s->max) {
    size_text((uint64_t)s->min, lo, sizeof lo);
    idem_errf(err, len, "--%s: '%s' is out of range; use a size from %s to %s (e.g. %s)", s->name,
            v, lo, hi, s->def ? s->def : hi);
    return -1;
  }
  *field = bytes;
  return 0;
}

static int set_count(const setting *s, int *field, const char *v, char *err, size_t len) {
  char *end;
  /* digits only: strtoll would also take leading blanks and a sign */
  long long n = strtoll(v, &end, 10);
  if (!isdigit((unsigned char)v[0]) || *end || n < s->min || n > s->max) {
    idem_errf(err, len, "--%s: '%s' is not a number from %lld to %lld", s->name, v,
            (long long)s->min, (long long)s->max);
    return -1;
  }
  *field = (int)n;
  return 0;
}

static int apply_value(const setting *s, void *cfg, const char *v, char *err, size_t len) {
  char *field = (char *)cfg + s->offset;
  switch (s->kind) {
  case SETTING_SWITCH:
    if (v && strcmp(v, "true") && strcmp(v, "false")) {
      idem_errf(err, len, "--%s: '%s' is not true or false", s->name, v);
      return -1;
    }
    *(int *)(void *)field = !v || !strcmp(v, "true");
    return 0;
  case SETTING_STRING:
    *(const char **)(void *)field = v;
    return 0;
  case SETTING_DURATION:
    return set_duration(s, (int64_t *)(void *)field, v, err, len);
  case SETTING_SIZE:
    return set_size(s, (uint64_t *)(void *)field, v, err, len);
  case SETTING_COUNT:
    return set_count(s, (int *)(void *)field, v, err, len);
  case SETTING_CUSTOM:
    return s->parse(cfg, s, v, err, len);
  }
  return -1;
}

/* The parsers' sentences quote the value whole ("--key: '...' is not a
 * key source; use ..."): a value of thousands of characters would push
 * the reason out of err. So a long value is parsed with room for its whole
 * sentence, and the sentence is cut to its first QUOTE_MAX characters. */
#define QUOTE_MAX 64

static int apply(const setting *s, void *cfg, const char *v, char *err, size_t len) {
  size_t vlen = v ? strlen(v) : 0, cap = vlen + 1024;
  char *room = vlen > QUOTE_MAX ? malloc(cap) : NULL;
  if (!room)
    return apply_value(s, cfg, v, err, len);
  int rc = apply_value(s, cfg, v, room, cap);
  if (rc) {
    const char *at = strstr(room, v);
    if (at)
      snprintf(err, len, "%.*s%.*s...%s", (int)(at - room), room, QUOTE_MAX, v, at + vlen);
    else
      snprintf(err, len, "%s", room);
  }
  free(room);
  return rc;
}

int settings_defaults(const setting_table *t, void *cfg, char *err, size_t errlen) {
  for (size_t i = 0; i < t->n; i++)
    if (t->rows[i].def && apply(&t->rows[i], cfg, t->rows[i].def, err, errlen))
      return -1;
  return 0;
}

const setting *settings_find(const setting_table *t, const char *name) {
  return find(t, name, strlen(name));
}

int settings_set(const setting_table *t, void *cfg, const char *name, const char *value,
                 char *err, size_t errlen) {
  const setting *s = find(t, name, strlen(name));
  if (!s) {
    idem_errf(err, errlen, "unknown option '--%s'", name);
    return -1;
  }
  return apply(s, cfg, value, err, errlen);
}

/* One "--name[=value]" at argv[*i]; a value may come from argv[*i + 1]. */
static int parse_flag(const setting_table *t, void *cfg, int argc, char **argv, int *i,
                      char *err, size_t errlen) {
  const char *arg = argv[*i] + 2;
  const char *eq = strchr(arg, '=');
  size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
  const setting *s = find(t, arg, nlen);
  if (!s) {
    idem_errf(err, errlen, "unknown option '--%.*s'", (int)nlen, arg);
    return -1;
  }
  if (s->kind == SETTING_SWITCH) {
    if (eq) {
      idem_errf(err, errlen, "--%s takes no value", s->name);
      return -1;
    }
    return apply(s, cfg, NULL, err, errlen);
  }
  if (eq)
    return apply(s, cfg, eq + 1, err, errlen);
  const char *next = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!next || !strncmp(next, "--", 2)) {
    /* "--store --ttl 1s" is a forgotten value, not a store named --ttl */
    idem_errf(err, errlen, "--%s needs a value%s%s%s", s->name, next ? "; got the flag '" : "",
            next ? next : "",
            next ? "' (write --flag=VALUE for a value that starts with --)" : "");
    return -1;
  }
  ++*i;
  return apply(s, cfg, next, err, errlen);
}

int settings_parse_argv(const setting_table *t, void *cfg, int argc, char **argv,
                        int (*positional)(void *arg, const char *word, char *err, size_t errlen),
                        void *arg, char *err, size_t errlen) {
  int only_words = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int is_flag = !only_words && a[0] == '-' && a[1] != '\0';
    if (is_flag && (!strcmp(a, "--help") || !strcmp(a, "-h")))
      return 1;
    if (is_flag && !strcmp(a, "--")) {
      only_words = 1;
      continue;
    }
    if (is_flag && a[1] == '-') {
      if (parse_flag(t, cfg, argc, argv, &i, err, errlen))
        return -1;
      continue;
    }
    if (is_flag || !positional) {
      idem_errf(err, errlen, is_flag ? "unknown option '%s'" : "unexpected argument '%s'", a);
      return -1;
    }
    if (positional(arg, a, err, errlen))
      return -1;
  }
  return 0;
}

#define HELP_COLUMN 28

void settings_usage(const setting_table *t, FILE *out) {
  for (size_t i = 0; i < t->n; i++) {
    const setting *s = &t->rows[i];
    int w = fprintf(out, "  --%s%s%s", s->name, s->form ? " " : "", s->form ? s->form : "");
    for (const char *h = s->help; *h;) {
      size_t len = strcspn(h, "\n");
      fprintf(out, "%*s%.*s", w < HELP_COLUMN ? HELP_COLUMN - w : 1, "", (int)len, h);
      h += len;
      if (!*h && s->def && s->kind != SETTING_SWITCH)
        fprintf(out, " (default %s)", s->def);
      fputc('\n', out);
      if (*h)
        h++;
      w = 0;
    }
  }
}

int settings_take_word(void *arg, const char *word, char *err, size_t errlen) {
  settings_words *w = arg;
  if (w->n >= w->max || w->n >= SETTINGS_MAX_WORDS)
    return idem_errf(err, errlen, "too many arguments");
  w->words[w->n++] = word;
  return 0;
}

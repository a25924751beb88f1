/*
 * settings.h - one table of settings drives a command's flags, its --help
 * and its defaults (and, for serve, the keys of a config file), so that a
 * setting is written once: name, form, default, bounds, help. Internal to
 * the idem binary; not part of libidem's public API.
 *
 * A table row names a field of the command's config struct by offset and
 * says how its text becomes a value. Values are parsed the same way from
 * "--name VALUE", "--name=VALUE" and a default, with one refusal sentence
 * per kind that names the flag and the form it accepts.
 */
#ifndef IDEM_CORE_SETTINGS_H
#define IDEM_CORE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  SETTING_SWITCH,   /* int: 1 when given; takes no value */
  SETTING_STRING,   /* const char *: the text itself, "" too (argv outlives it) */
  SETTING_DURATION, /* int64_t ms: 500ms, 30s, 24h, 7d (and "0" when min is 0) */
  SETTING_SIZE,     /* uint64_t bytes: 512, 64KiB, 1MiB */
  SETTING_COUNT,    /* int: a whole number */
  SETTING_CUSTOM    /* parse() decides */
} setting_kind;

typedef struct setting setting;
struct setting {
  const char *name;    /* "lock-ttl": flag --lock-ttl */
  const char *form;    /* what the value looks like, for --help: "DUR" */
  setting_kind kind;
  size_t offset;       /* of the field in the config struct */
  const char *def;     /* default as text; NULL: none (the field stays as is) */
  int64_t min, max;    /* DURATION (ms), SIZE (bytes), COUNT: inclusive bounds */
  /* CUSTOM: store value in cfg; 0, or -1 with a sentence in err that names
   * the flag (s->name) and the accepted form */
  int (*parse)(void *cfg, const setting *s, const char *value, char *err, size_t errlen);
  const char *help;    /* one or more lines, "\n" between them */
};

typedef struct {
  const char *command; /* "serve" */
  const setting *rows;
  size_t n;
} setting_table;

/* Every default of the table into cfg. 0, or -1 with err (a bad table). */
int settings_defaults(const setting_table *t, void *cfg, char *err, size_t errlen);

/* Set the setting named name (no leading dashes) from text: 0, or -1 with a
 * sentence in err. A SWITCH takes NULL (or "true"/"false", as a config
 * file gives it). */
int settings_set(const setting_table *t, void *cfg, const char *name, const char *value,
                 char *err, size_t errlen);

/* The row called name, or NULL. */
const setting *settings_find(const setting_table *t, const char *name);

/*
 * Parse argv[1..argc-1]: "--name VALUE", "--name=VALUE", "--switch", and
 * "--help"/"-h" (returns 1). Other words are positional: handed to
 * positional(arg, word) when given, refused otherwise; "--" makes every
 * later word positional. A flag is never taken as the value of the flag
 * before it ("--store --ttl 1s": "--store needs a value"). Returns 0, 1 for
 * help, or -1 with a sentence in err.
 */
int settings_parse_argv(const setting_table *t, void *cfg, int argc, char **argv,
                        int (*positional)(void *arg, const char *word, char *err, size_t errlen),
                        void *arg, char *err, size_t errlen);

/* Positional words, for settings_parse_argv's positional callback
 * (settings_take_word, with the settings_words as its arg): up to max, then
 * "too many arguments". */
#define SETTINGS_MAX_WORDS 8
typedef struct {
  const char *words[SETTINGS_MAX_WORDS];
  int n, max; /* max <= SETTINGS_MAX_WORDS */
} settings_words;
int settings_take_word(void *words, const char *word, char *err, size_t errlen);

/* ms as a duration flag takes it: "7d", "90s", "1500ms" (the largest unit
 * that divides it), "0", and one day as "24h" (the default --ttl, as the
 * README and --help write it). */
void settings_duration_text(int64_t ms, char *out, size_t len);

/* The options section of --help: one "  --name FORM   help" entry per row,
 * help lines aligned, "(default X)" appended where the row has one. */
void settings_usage(const setting_table *t, FILE *out);

#endif

/* fuzz_config.c - the serve config file parser (src/http/config_file.c on
 * libyaml) and the route settings over it (src/http/config.c, route.c) on
 * arbitrary bytes. Properties: no crash, leak or UB; a refusal is a
 * "FILE:LINE: reason" sentence; an accepted file gives a route table whose
 * routes each match their own path glob's literal text, and whose every
 * setting prints and parses back to the same value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/config.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const setting_table serve = {"serve", serve_settings,
                                    sizeof serve_settings / sizeof serve_settings[0]};

/* Each setting's value printed and parsed again gives the same text. */
static void round_trip(const gw_policy *p) {
  for (size_t k = 0; k < gw_policy_table.n; k++) {
    const char *name = gw_policy_table.rows[k].name;
    char v[4096], again[4096], err[512];
    gw_policy q = *p;
    gw_policy_value(p, name, v, sizeof v);
    if (settings_set(&gw_policy_table, &q, name, v, err, sizeof err))
      abort();
    gw_policy_value(&q, name, again, sizeof again);
    if (strcmp(v, again))
      abort();
  }
}

static void check_table(const gw_routes *t) {
  round_trip(&t->defaults.policy);
  for (int i = 0; i < t->n; i++) {
    const gw_route *r = &t->routes[i];
    round_trip(&r->policy);
    /* a glob without wildcards matches its own text */
    if (r->path[0] && !strpbrk(r->path, "*?") && !gw_glob_match(r->path, r->path, strlen(r->path)))
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 65536)
    return 0;
  cf_doc *d = NULL;
  char err[1024] = "";
  if (cf_parse((const char *)data, size, "f", &serve, &gw_policy_table, &d, err, sizeof err)) {
    if (strncmp(err, "f:", 2) || !err[2])
      abort();
    return 0;
  }
  /* the settings and routes over the defaults, as serve builds them */
  gw_config cfg;
  gw_config_init(&cfg);
  cfg.doc = d;
  cfg.config_file = "f";
  int ok = 1;
  for (int i = 0; i < d->ntop && ok; i++) {
    char msg[512];
    ok = !settings_set(&serve, &cfg, d->top[i].name, d->top[i].value, msg, sizeof msg);
  }
  if (ok && !build_routes(&cfg, err, sizeof err))
    check_table(cfg.routes);
  else if (ok && strncmp(err, "f:", 2))
    abort();
  gw_config_free(&cfg);
  return 0;
}

/* serve.c - `idem serve`: parse the flags, hand them to the gateway. */
#include <stdio.h>

#include "cli/commands.h"
#include "http/config.h"
#include "http/gateway.h"

int cmd_serve(int argc, char **argv) {
  static gw_config cfg; /* lives as long as the gateway's threads */
  char err[512];
  gw_config_init(&cfg);
  int rc = gw_config_parse(&cfg, argc, argv, err, sizeof err);
  if (rc == 1) {
    gw_config_free(&cfg);
    gw_config_usage(stdout);
    return 0;
  }
  if (rc < 0) {
    gw_config_free(&cfg);
    return cli_usage_error("serve", "%s", err);
  }
  rc = gw_run(&cfg);
  gw_config_free(&cfg);
  return rc;
}

/* serve.c - `idem serve`: parse the flags, hand them to the gateway. */
#include <signal.h>
#include <stdio.h>

#include "cli/commands.h"
#include "http/config.h"
#include "http/gateway.h"

int cmd_serve(int argc, char **argv) {
  static gw_config cfg; /* lives as long as the gateway's threads */
  char err[512];
  /* A reload (SIGHUP) or a logrotate (SIGUSR1) that comes while the gateway
   * starts would kill it (their default action) before its loop handles
   * them; until then they change nothing, as the start reads the file and
   * opens the log anyway. */
  signal(SIGHUP, SIG_IGN);
  signal(SIGUSR1, SIG_IGN);
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

/* config.c - `idem config check FILE` and `idem config openapi FILE`: read
 * a serve config file as `idem serve --config FILE` would (flags after FILE
 * too), then print its effective policy per route, or its OpenAPI 3.1
 * fragment. Exit 0; 1 with "FILE:LINE: reason" on a bad file; 2 on usage. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "http/config.h"
#include "http/route_dump.h"

static const char usage[] =
    "usage: idem config check FILE [serve flags]\n"
    "       idem config openapi FILE [serve flags]\n"
    "\n"
    "check    validate a serve config file and print the effective policy of\n"
    "         each route (exit 1 with FILE:LINE and the reason on a bad file)\n"
    "openapi  print an OpenAPI 3.1 document of the file's idempotency policy:\n"
    "         the key parameter and the 400/409/422 answers per route\n"
    "\n"
    "Serve flags after FILE override it, as with idem serve --config FILE.\n";

static int print_openapi(const gw_routes *t) {
  gw_buf b = {0};
  int rc = gw_routes_openapi(t, &b);
  if (!rc)
    fwrite(b.p, 1, b.len, stdout);
  gw_buf_free(&b);
  if (rc)
    fprintf(stderr, "idem config: out of memory\n");
  return rc ? 1 : 0;
}

int cmd_config(int argc, char **argv) {
  int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
  if (argc == 3 && (!strcmp(argv[1], "check") || !strcmp(argv[1], "openapi")))
    help = !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"); /* "config check --help" */
  if (help) {
    fputs(usage, stdout);
    return 0;
  }
  int check = argc >= 2 && !strcmp(argv[1], "check");
  if (argc < 3 || (!check && strcmp(argv[1], "openapi")) || !strncmp(argv[2], "--", 2)) {
    fputs(usage, stderr);
    return 2;
  }
  /* serve's own parse: "serve --config FILE [flags...]" */
  char *args[argc + 1];
  args[0] = "serve";
  args[1] = "--config";
  args[2] = argv[2];
  for (int i = 3; i < argc; i++)
    args[i] = argv[i];
  args[argc] = NULL;
  gw_config cfg;
  char err[1024];
  gw_config_init(&cfg);
  int rc = gw_config_parse_file_only(&cfg, argc, args, err, sizeof err);
  if (rc) {
    gw_config_free(&cfg);
    if (rc == 1) {
      fputs(usage, stdout);
      return 0;
    }
    /* a file's own errors start with its name; others are about a flag */
    int file_err = !strncmp(err, argv[2], strlen(argv[2]));
    fprintf(stderr, "idem config: %s\n", err);
    return file_err ? 1 : 2;
  }
  if (check) {
    printf("%s: ok, %d route%s\n", argv[2], cfg.routes->n, cfg.routes->n == 1 ? "" : "s");
    gw_routes_print(cfg.routes, stdout);
    gw_config_warn_leases(&cfg, cfg.routes, "idem config"); /* as serve warns at start */
  } else {
    rc = print_openapi(cfg.routes);
  }
  gw_config_free(&cfg);
  if (!rc)
    rc = cli_flush_stdout("config");
  return rc;
}

/* temp_root.h - a directory of a test group's own (root) under $TMPDIR:
 * temp_root_setup and temp_root_teardown are the group's cmocka fixtures,
 * the second removing it with all it holds. Header-only. */
#ifndef IDEM_TESTS_TEMP_ROOT_H
#define IDEM_TESTS_TEMP_ROOT_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[256];

/* Remove path and, for a directory, all it holds. */
static void rm_rf(const char *path) {
  DIR *d = opendir(path);
  if (!d) {
    unlink(path);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      rm_rf(sub);
    }
  closedir(d);
  rmdir(path);
}

static int temp_root_setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/idem-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(root) ? 0 : -1;
}

static int temp_root_teardown(void **state) {
  (void)state;
  rm_rf(root);
  return 0;
}

#endif

/* repository_admin.c - the repository's loads and unloads as the protocols
 * ask for them (HTTP's and gRPC's repository extension): each on a detached
 * thread, its outcome handed to the caller's function (repository.h). */
#include "api/repository.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/thread.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct admin_op {
  gs_repository *repo;
  bool load;
  gs_load_override *override;
  gs_repository_admin_done done;
  void *arg;
  char name[]; /* NUL-terminated */
} admin_op;

static void *admin_main(void *p) {
  admin_op *op = p;
  gs_repository *repo = op->repo;
  int rc = op->load ? gs_repository_load_with(repo, op->name, op->override)
                    : gs_repository_unload(repo, op->name);
  gs_load_override_free(op->override);
  if (rc < 0) {
    char msg[700];
    snprintf(msg, sizeof msg, "%s model '%s': %s", op->load ? "cannot load" : "cannot unload",
             op->name, gs_error_detail());
    /* The model's fault (or the request's) is 400; the server's (memory,
     * disk, a full repository) is not. */
    op->done(op->arg, rc == GS_ENOENT                      ? 404
                      : rc == GS_ENOMEM || rc == GS_EIO ? 500
                      : rc == GS_ERANGE                 ? 507
                                                        : 400,
             msg);
  } else {
    op->done(op->arg, 200, "");
  }
  free(op);
  atomic_fetch_sub(&repo->admin_running, 1);
  return NULL;
}

int gs_repository_admin_async(gs_repository *repo, const char *name, bool load,
                              gs_load_override *ov, gs_repository_admin_done done, void *arg) {
  size_t len = strlen(name);
  admin_op *op = malloc(sizeof *op + len + 1);
  if (!op) {
    gs_load_override_free(ov);
    return gs_error(GS_ENOMEM, "out of memory starting a model %s", load ? "load" : "unload");
  }
  *op = (admin_op){.repo = repo, .load = load, .override = ov, .done = done, .arg = arg};
  memcpy(op->name, name, len + 1);
  atomic_fetch_add(&repo->admin_running, 1);
  if (!gs_run_detached(admin_main, op))
    admin_main(op); /* no thread to spare: here, then */
  return GS_OK;
}

void gs_repository_admin_wait(gs_repository *repo) {
  while (atomic_load(&repo->admin_running) > 0)
    gs_sleep_ns(10 * 1000 * 1000);
}

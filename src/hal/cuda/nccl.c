/* nccl.c - loads NCCL (nccl.h). */
#include "hal/cuda/nccl.h"

#include "hal/cuda/dl_table.h"

#include <dlfcn.h>
#include <string.h>

int gs_nccl_load(gs_nccl *n) {
  memset(n, 0, sizeof *n);
#define GS__NCCL_ENTRY(field, symbol, args) {symbol, (void **)&n->field},
  const gs_dl_entry entries[] = {GS_NCCL_FUNCS(GS__NCCL_ENTRY){"ncclGetErrorString",
                                                               (void **)&n->error_string}};
#undef GS__NCCL_ENTRY
  int rc = gs_dl_load("libnccl.so.2", "NCCL", entries, (int)(sizeof entries / sizeof entries[0]),
                      &n->library);
  if (rc < 0)
    memset(n, 0, sizeof *n);
  return rc;
}

void gs_nccl_unload(gs_nccl *n) {
  if (n->library)
    dlclose(n->library);
  memset(n, 0, sizeof *n);
}

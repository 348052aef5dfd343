/* nccl.c - loads NCCL (nccl.h). */
#include "hal/cuda/nccl.h"

#include "base/error.h"

#include <dlfcn.h>
#include <string.h>

int gs_nccl_load(gs_nccl *n) {
  memset(n, 0, sizeof *n);
  n->library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!n->library)
    return gs_error(GS_ENOENT, "NCCL (libnccl.so.2) cannot be loaded: %s", dlerror());
  const char *missing = NULL;
#define GS__NCCL_LOOKUP(field, symbol, args)                               \
  if (!missing && !(*(void **)&n->field = dlsym(n->library, symbol)))    \
    missing = symbol;
  GS_NCCL_FUNCS(GS__NCCL_LOOKUP)
#undef GS__NCCL_LOOKUP
  if (!missing && !(*(void **)&n->error_string = dlsym(n->library, "ncclGetErrorString")))
    missing = "ncclGetErrorString";
  if (missing) {
    dlclose(n->library);
    memset(n, 0, sizeof *n);
    return gs_error(GS_ENOENT, "NCCL lacks %s (a version too old)", missing);
  }
  return GS_OK;
}

void gs_nccl_unload(gs_nccl *n) {
  if (n->library)
    dlclose(n->library);
  memset(n, 0, sizeof *n);
}

/* nvml.c - loads NVML (nvml.h). */
#include "hal/cuda/nvml.h"

#include "base/error.h"

#include <dlfcn.h>
#include <string.h>

int gs_nvml_load(gs_nvml *n) {
  memset(n, 0, sizeof *n);
  n->library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->library)
    return gs_error(GS_ENOENT, "NVML (libnvidia-ml.so.1) cannot be loaded: %s", dlerror());
  const char *missing = NULL;
#define GS__NVML_LOOKUP(field, symbol, ret, args)                          \
  if (!missing && !(*(void **)&n->field = dlsym(n->library, symbol)))    \
    missing = symbol;
  GS_NVML_FUNCS(GS__NVML_LOOKUP)
#undef GS__NVML_LOOKUP
  if (missing) {
    dlclose(n->library);
    memset(n, 0, sizeof *n);
    return gs_error(GS_ENOENT, "NVML lacks %s (a driver too old for these calls)", missing);
  }
  gs_nvml_return rc = n->init();
  if (rc != GS_NVML_SUCCESS) {
    int code = rc == GS_NVML_ERROR_LIB_RM_VERSION_MISMATCH ? GS_EVERSION : GS_ENOENT;
    const char *why = n->error_string(rc);
    dlclose(n->library);
    memset(n, 0, sizeof *n);
    if (code == GS_EVERSION)
      return gs_error(code, "the NVIDIA driver library and its kernel module are different "
                            "versions (NVML_ERROR_LIB_RM_VERSION_MISMATCH: %s); reboot, or "
                            "reload the nvidia kernel module", why);
    return gs_error(code, "NVML cannot start: %s", why);
  }
  return GS_OK;
}

void gs_nvml_unload(gs_nvml *n) {
  if (n->library) {
    n->shutdown();
    dlclose(n->library);
  }
  memset(n, 0, sizeof *n);
}

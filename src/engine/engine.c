/* engine.c - start-up of the compute engine (it needs the CPU backend, whose
 * kernels fold constants and stand in for a device's missing ones); the
 * names of precisions. */
#include "engine/engine.h"

#include "base/error.h"

#include <string.h>

int gs_engine_init(void) {
  gs_backend_t *cpu = gs_hal_backend_by_name("cpu");
  if (!cpu)
    return gs_error(GS_ENOENT, "the cpu backend is not loaded (GPUSRV_BACKENDS?); the engine "
                               "needs it for its own work");
  return GS_OK;
}

const char *const gs_precision_names[] = {
    [GS_PRECISION_FP32] = "fp32", [GS_PRECISION_FP16] = "fp16", [GS_PRECISION_BF16] = "bf16",
    [GS_PRECISION_FP64] = "fp64", [GS_PRECISION_FP64 + 1] = NULL};
#define PRECISIONS (GS_PRECISION_FP64 + 1)

const char *gs_precision_name(gs_precision p) {
  return (unsigned)p < PRECISIONS ? gs_precision_names[p] : "?";
}

bool gs_precision_from_name(const char *name, gs_precision *out) {
  for (int i = 0; i < PRECISIONS; i++)
    if (name && strcmp(name, gs_precision_names[i]) == 0) {
      *out = (gs_precision)i;
      return true;
    }
  return false;
}

/* engine.c - start-up of the compute engine: registers each backend's
 * kernels for the engine's ops; the names of precisions. */
#include "engine/engine.h"

#include "base/error.h"
#include "engine/cpu/kernels.h"

#include <string.h>

int gs__cpu_register_table(gs_backend_t *be, const gs_cpu_kernel_entry *table, size_t count) {
  for (size_t i = 0; i < count; i++) {
    int rc = gs__backend_register_kernel(be, table[i].name, &table[i].kernel);
    if (rc < 0)
      return rc;
  }
  return 0;
}

int gs_engine_init(void) {
  gs_backend_t *cpu = gs_hal_backend_by_name("cpu");
  if (!cpu)
    return gs_error(GS_ENOENT, "the cpu backend is not loaded (GPUSRV_BACKENDS?); the engine "
                               "needs it for its own work");
  int rc = gs__cpu_register_elementwise(cpu);
  if (rc == 0)
    rc = gs__cpu_register_nn(cpu);
  if (rc == 0)
    rc = gs__cpu_register_reduce(cpu);
  if (rc == 0)
    rc = gs__cpu_register_shape(cpu);
  return rc;
}

static const char *const precision_names[] = {
    [GS_PRECISION_FP32] = "fp32", [GS_PRECISION_FP16] = "fp16", [GS_PRECISION_BF16] = "bf16"};

const char *gs_precision_name(gs_precision p) {
  return (unsigned)p < 3 ? precision_names[p] : "?";
}

bool gs_precision_from_name(const char *name, gs_precision *out) {
  for (int i = 0; i < 3; i++)
    if (name && strcmp(name, precision_names[i]) == 0) {
      *out = (gs_precision)i;
      return true;
    }
  return false;
}

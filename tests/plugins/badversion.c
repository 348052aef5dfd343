/* badversion.c - a test plugin built for another HAL API version. */
#include "hal/hal_impl.h"

const uint32_t gs_plugin_api_version = GS_HAL_API_VERSION + 41;

int gs_plugin_init(const gs_backend_iface **out) {
  *out = &gs__cpu_backend_iface;
  return GS_OK;
}

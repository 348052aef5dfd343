/* nodevice.c - a test plugin whose hardware is absent: its init fails with a
 * reason, as a CUDA plugin does on a machine without a driver. */
#include "hal/hal_impl.h"

const uint32_t gs_plugin_api_version = GS_HAL_API_VERSION;

int gs_plugin_init(const gs_backend_iface **out) {
  (void)out;
  return gs_error(GS_ENOENT, "libfake.so.1 not found (no fake driver installed)");
}

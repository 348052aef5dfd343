/* testcpu.c - a test plugin that offers the CPU backend's implementation
 * under the name "testcpu", so that the plugin path (dlopen, version check,
 * symbols resolved from the host executable) runs the conformance suite.
 * It registers none of the op kernels: plans on testcpu0 run every op
 * through the CPU fallback, as on a backend that lacks kernels. */
#include "hal/hal_impl.h"

const uint32_t gs_plugin_api_version = GS_HAL_API_VERSION;

static gs_backend_iface iface;

int gs_plugin_init(const gs_backend_iface **out) {
  iface = gs__cpu_backend_iface;
  iface.name = "testcpu";
  iface.init = gs__cpu_init_devices;
  *out = &iface;
  return GS_OK;
}

/* noinit.c - a test plugin that exports a version but no init function. */
#include "hal/hal_impl.h"

const uint32_t gs_plugin_api_version = GS_HAL_API_VERSION;

/* nvml.h - the few NVML functions the CUDA plugin uses, declared here
 * (the toolkit does not always ship nvml.h) and reached through
 * dlopen("libnvidia-ml.so.1"), by their versioned symbol names. Values
 * and layouts are NVML's. */
#ifndef GS_HAL_CUDA_NVML_H
#define GS_HAL_CUDA_NVML_H

#include <stdint.h>

typedef int gs_nvml_return;
enum {
  GS_NVML_SUCCESS = 0,
  GS_NVML_ERROR_NOT_SUPPORTED = 3,
  GS_NVML_ERROR_INSUFFICIENT_SIZE = 7,
  GS_NVML_ERROR_DRIVER_NOT_LOADED = 9,
  GS_NVML_ERROR_GPU_IS_LOST = 15,
  GS_NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
};
typedef struct gs_nvml_device_st *gs_nvml_device;
typedef struct gs_nvml_event_set_st *gs_nvml_event_set;

#define GS_NVML_EVENT_XID_CRITICAL 0x8ULL /* nvmlEventTypeXidCriticalError */

typedef struct { /* nvmlEventData_t, as nvmlEventSetWait_v2 fills it */
  gs_nvml_device device;
  unsigned long long type;
  unsigned long long data; /* the Xid; 999: unknown */
  unsigned int gpu_instance_id, compute_instance_id;
} gs_nvml_event;

typedef struct {
  unsigned int gpu, memory; /* percent of the last sample period */
} gs_nvml_utilization;

typedef struct {
  unsigned long long total, free, used;
} gs_nvml_memory;

typedef struct { /* nvmlProcessInfo_v2_t, which _v3 of the call fills */
  unsigned int pid;
  unsigned long long used_gpu_memory; /* ~0ULL: not available */
  unsigned int gpu_instance_id, compute_instance_id;
} gs_nvml_process;

enum { GS_NVML_TEMPERATURE_GPU = 0 };
enum { GS_NVML_CLOCK_GRAPHICS = 0, GS_NVML_CLOCK_SM = 1, GS_NVML_CLOCK_MEM = 2 };
enum { GS_NVML_ECC_CORRECTED = 0, GS_NVML_ECC_UNCORRECTED = 1 };
enum { GS_NVML_VOLATILE_ECC = 0 };

#define GS_NVML_FUNCS(X)                                                                     \
  X(init, "nvmlInit_v2", gs_nvml_return, (void))                                            \
  X(shutdown, "nvmlShutdown", gs_nvml_return, (void))                                       \
  X(error_string, "nvmlErrorString", const char *, (gs_nvml_return))                        \
  X(by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2", gs_nvml_return,                      \
    (const char *, gs_nvml_device *))                                                       \
  X(utilization, "nvmlDeviceGetUtilizationRates", gs_nvml_return,                           \
    (gs_nvml_device, gs_nvml_utilization *))                                                \
  X(memory, "nvmlDeviceGetMemoryInfo", gs_nvml_return, (gs_nvml_device, gs_nvml_memory *))  \
  X(temperature, "nvmlDeviceGetTemperature", gs_nvml_return,                                \
    (gs_nvml_device, int, unsigned int *))                                                  \
  X(power, "nvmlDeviceGetPowerUsage", gs_nvml_return, (gs_nvml_device, unsigned int *))     \
  X(power_limit, "nvmlDeviceGetEnforcedPowerLimit", gs_nvml_return,                         \
    (gs_nvml_device, unsigned int *))                                                       \
  X(clock, "nvmlDeviceGetClockInfo", gs_nvml_return, (gs_nvml_device, int, unsigned int *)) \
  X(pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration", gs_nvml_return,                        \
    (gs_nvml_device, unsigned int *))                                                       \
  X(pcie_width, "nvmlDeviceGetCurrPcieLinkWidth", gs_nvml_return,                           \
    (gs_nvml_device, unsigned int *))                                                       \
  X(pcie_max_width, "nvmlDeviceGetMaxPcieLinkWidth", gs_nvml_return,                        \
    (gs_nvml_device, unsigned int *))                                                       \
  X(ecc_errors, "nvmlDeviceGetTotalEccErrors", gs_nvml_return,                              \
    (gs_nvml_device, int, int, unsigned long long *))                                       \
  X(processes, "nvmlDeviceGetComputeRunningProcesses_v3", gs_nvml_return,                   \
    (gs_nvml_device, unsigned int *, gs_nvml_process *))                                    \
  X(event_set_create, "nvmlEventSetCreate", gs_nvml_return, (gs_nvml_event_set *))          \
  X(register_events, "nvmlDeviceRegisterEvents", gs_nvml_return,                            \
    (gs_nvml_device, unsigned long long, gs_nvml_event_set))                                \
  X(event_set_wait, "nvmlEventSetWait_v2", gs_nvml_return,                                  \
    (gs_nvml_event_set, gs_nvml_event *, unsigned int))                                     \
  X(event_set_free, "nvmlEventSetFree", gs_nvml_return, (gs_nvml_event_set))

typedef struct gs_nvml {
  void *library;
#define GS__NVML_FIELD(field, symbol, ret, args) ret(*field) args;
  GS_NVML_FUNCS(GS__NVML_FIELD)
#undef GS__NVML_FIELD
} gs_nvml;

/* Opens libnvidia-ml.so.1, finds the functions and initialises NVML.
 * GS_ENOENT: no NVML (telemetry is then "not available"); GS_EVERSION:
 * the driver and its kernel module disagree
 * (NVML_ERROR_LIB_RM_VERSION_MISMATCH), which stops the plugin. */
int gs_nvml_load(gs_nvml *n);
void gs_nvml_unload(gs_nvml *n);

#endif

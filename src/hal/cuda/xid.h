/* xid.h - what an NVIDIA Xid error (the driver's numbered fault reports,
 * which NVML delivers as events) means for a device's health, and a
 * device's record of the ones seen. Plain C, without the driver: tested on
 * its own. */
#ifndef GS_HAL_CUDA_XID_H
#define GS_HAL_CUDA_XID_H

#include "hal/hal.h"

#include <stdint.h>
#include <time.h>

/* GS_HEALTH_UNHEALTHY: the GPU needs a reset or service (lost, ECC that
 * could not be contained, firmware failures); GS_HEALTH_DEGRADED: a fault
 * that may recur or that an application caused; GS_HEALTH_HEALTHY for an
 * Xid that says nothing of the hardware. *meaning: a few words. */
gs_health gs_xid_severity(unsigned xid, const char **meaning);

/* Degraded faults count for this long after the last one. */
#define GS_XID_DEGRADED_SECONDS 600

typedef struct gs_xid_record {
  uint64_t count;     /* every Xid seen since the plugin started */
  unsigned last_xid;  /* the latest, 0: none */
  unsigned worst_xid; /* the most severe (ties: the latest), 0: none */
  gs_health worst;
  time_t worst_at;
} gs_xid_record;

void gs_xid_note(gs_xid_record *r, unsigned xid, time_t at);
/* The record's verdict now: an unhealthy Xid stays until the plugin
 * restarts (the driver needs a reset); a degraded one for
 * GS_XID_DEGRADED_SECONDS. Writes the reason when not healthy. */
gs_health gs_xid_health(const gs_xid_record *r, time_t now, char *reason, size_t cap);

#endif

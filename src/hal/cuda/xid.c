/* xid.c - the Xid errors a GPU server acts on, from NVIDIA's Xid catalogue
 * (the driver's documentation): which mean the GPU must be reset or
 * serviced, which mean a fault to watch, and which an application caused. */
#include "hal/cuda/xid.h"

#include <stdio.h>

typedef struct xid_kind {
  unsigned xid;
  gs_health health;
  const char *meaning;
} xid_kind;

static const xid_kind kinds[] = {
    {13, GS_HEALTH_DEGRADED, "graphics engine exception (often the application)"},
    {31, GS_HEALTH_DEGRADED, "GPU memory page fault (often the application)"},
    {43, GS_HEALTH_DEGRADED, "GPU stopped processing (often the application)"},
    {45, GS_HEALTH_HEALTHY, "preemptive cleanup after a process ended"},
    {48, GS_HEALTH_UNHEALTHY, "double-bit ECC error"},
    {61, GS_HEALTH_UNHEALTHY, "internal micro-controller breakpoint"},
    {62, GS_HEALTH_UNHEALTHY, "internal micro-controller halt"},
    {63, GS_HEALTH_DEGRADED, "ECC page retirement or row remapping recorded"},
    {64, GS_HEALTH_UNHEALTHY, "ECC page retirement or row remapping failed"},
    {68, GS_HEALTH_DEGRADED, "video processor exception"},
    {74, GS_HEALTH_UNHEALTHY, "NVLink error"},
    {79, GS_HEALTH_UNHEALTHY, "GPU has fallen off the bus"},
    {92, GS_HEALTH_DEGRADED, "high single-bit ECC error rate"},
    {94, GS_HEALTH_DEGRADED, "contained ECC error (the affected application stopped)"},
    {95, GS_HEALTH_UNHEALTHY, "uncontained ECC error"},
    {119, GS_HEALTH_UNHEALTHY, "GSP firmware RPC timeout"},
    {120, GS_HEALTH_UNHEALTHY, "GSP firmware error"},
};

gs_health gs_xid_severity(unsigned xid, const char **meaning) {
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (kinds[i].xid == xid) {
      *meaning = kinds[i].meaning;
      return kinds[i].health;
    }
  /* Not in the list (999: NVML could not tell which): worth watching. */
  *meaning = xid == 999 ? "an Xid NVML could not identify" : "an Xid error";
  return GS_HEALTH_DEGRADED;
}

void gs_xid_note(gs_xid_record *r, unsigned xid, time_t at) {
  const char *meaning;
  gs_health h = gs_xid_severity(xid, &meaning);
  r->count++;
  r->last_xid = xid;
  /* The worst so far stays, unless it was a degraded one that has aged out. */
  bool aged = r->worst == GS_HEALTH_DEGRADED && at - r->worst_at > GS_XID_DEGRADED_SECONDS;
  if (r->worst_xid == 0 || aged || h >= r->worst) {
    r->worst_xid = xid;
    r->worst = h;
    r->worst_at = at;
  }
}

gs_health gs_xid_health(const gs_xid_record *r, time_t now, char *reason, size_t cap) {
  if (!r->worst_xid || r->worst == GS_HEALTH_HEALTHY ||
      (r->worst == GS_HEALTH_DEGRADED && now - r->worst_at > GS_XID_DEGRADED_SECONDS))
    return GS_HEALTH_HEALTHY;
  const char *meaning;
  gs_xid_severity(r->worst_xid, &meaning);
  struct tm tm;
  char when[32] = "?";
  if (gmtime_r(&r->worst_at, &tm))
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  snprintf(reason, cap, "Xid %u at %s: %s%s (%llu Xid errors since start)", r->worst_xid, when,
           meaning, r->worst == GS_HEALTH_UNHEALTHY ? "; reset the GPU or reboot" : "",
           (unsigned long long)r->count);
  return r->worst;
}

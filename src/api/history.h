/* history.h - the daemon's memory of its devices' telemetry: a thread
 * samples every device every `interval` seconds and keeps the newest
 * samples in a ring (an hour by default), for the dashboard's charts, and
 * the changes of each device's health as events; no database outside the
 * daemon. */
#ifndef GS_API_HISTORY_H
#define GS_API_HISTORY_H

#include <jansson.h>

typedef struct gs_history gs_history;

/* Starts sampling the HAL's devices every interval_s seconds, keeping the
 * last `keep` samples of each. *out is freed by gs_history_stop. */
int gs_history_start(double interval_s, int keep, gs_history **out);
/* Stops the thread and frees the history (NULL: nothing). */
void gs_history_stop(gs_history *h);

/* {"interval": s, "devices": [{"id", "name", "samples": [[time, utilization,
 * memory_used, temperature_c, power_w], ...]}]}, oldest sample first, times
 * in Unix seconds, null where a device does not measure a field. The caller
 * decrefs it. */
json_t *gs_history_json(gs_history *h);

/* {"events": [{"time", "device", "health", "previous", "reason"}, ...]}: each
 * change of a device's health seen by the samples (a device found degraded
 * or unhealthy at the first sample counts as one, from "healthy"), oldest
 * first, the newest GS_HISTORY_EVENTS kept. The caller decrefs it. */
#define GS_HISTORY_EVENTS 256
json_t *gs_history_events_json(gs_history *h);

#endif

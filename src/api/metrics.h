/* metrics.h - GET /metrics in the Prometheus text format. */
#ifndef GS_API_METRICS_H
#define GS_API_METRICS_H

#include "api/kserve.h"
#include "sched/sched.h"

/* The models' counters, the devices' gauges (also under dcgm-exporter's
 * names), the pools, bookings, and the jobs the front desk `fd` holds (NULL:
 * none) by tenant and state. */
int gs_metrics_render(gs_repository *repo, gs_frontdesk *fd, gs_http_reply *r);

#endif

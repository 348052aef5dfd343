/* metrics.h - GET /metrics in the Prometheus text format. */
#ifndef GS_API_METRICS_H
#define GS_API_METRICS_H

#include "api/kserve.h"

int gs_metrics_render(gs_repository *repo, gs_http_reply *r);

#endif

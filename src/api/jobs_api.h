/* jobs_api.h - the front desk's REST routes under /api/v1: jobs, their
 * logs, tenants, devices, bookings and usage (docs/api.md). */
#ifndef GS_API_JOBS_API_H
#define GS_API_JOBS_API_H

#include "api/kserve.h"
#include "sched/sched.h"

#include <stdbool.h>

/* Query parameters the routes read. */
typedef struct gs_jobs_query {
  const char *all, *tenant, *since, *stream, *offset;
} gs_jobs_query;

/* Answers `method url` for `who` into `r`; false if the route is not one
 * of these (the caller answers 404). */
bool gs_jobs_api_route(gs_frontdesk *fd, const gs_principal *who, const char *method,
                       const char *url, const gs_jobs_query *q, const char *body, size_t len,
                       gs_http_reply *r);

#endif

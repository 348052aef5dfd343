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

/* A job's body (POST /api/v1/jobs) read into req, whose strings point into
 * the parsed JSON that b holds: free with gs_job_body_free. A client mistake
 * fills err (400 naming the field) and leaves nothing to free. */
typedef struct gs_job_body {
  gs_job_request req;
  json_t *json;
  const char **argv, **env, **mounts;
} gs_job_body;
int gs_job_body_parse(const char *body, size_t len, gs_job_body *b, gs_http_reply *err);
void gs_job_body_free(gs_job_body *b);

/* A tenant's body (POST /api/v1/tenants) into t (nothing to free). */
int gs_tenant_body_parse(const char *body, size_t len, gs_tenant *t, gs_http_reply *err);

/* Answers `method url` for `who` into `r`; false if the route is not one
 * of these (the caller answers 404). */
bool gs_jobs_api_route(gs_frontdesk *fd, const gs_principal *who, const char *method,
                       const char *url, const gs_jobs_query *q, const char *body, size_t len,
                       gs_http_reply *r);

#endif

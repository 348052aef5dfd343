/* jobs_json.h - the front desk's reports (sched.h's C structs) as the job
 * API's JSON. Each returns a new reference. */
#ifndef GS_API_JOBS_JSON_H
#define GS_API_JOBS_JSON_H

#include "sched/sched.h"

#include <jansson.h>

/* A job; with "events" when it carries its audit trail (gs_job_get). */
json_t *gs_job_json(const gs_job_info *job);
json_t *gs_jobs_json(const gs_job_info *jobs, int n);
json_t *gs_tenants_json(const gs_tenant_info *tenants, int n);
json_t *gs_usage_json(const gs_usage_row *rows, int n);
/* The devices jobs may book, with what is booked; with `all` every device
 * of the daemon, those jobs may not book marked "bookable": false. */
json_t *gs_devices_json(const gs_frontdesk_device *devices, int n, bool all);
/* Every booking the ledger holds. */
json_t *gs_bookings_json(gs_ledger *ledger);

#endif

/* store.h - the front desk's durable state in SQLite (WAL): tenants, token
 * hashes, jobs, every change of a job's state with its time (the audit
 * trail), and per-job accounting. Each call is one transaction; a call that
 * returned has been written to disk. Internal to src/sched. */
#ifndef GS_SCHED_STORE_H
#define GS_SCHED_STORE_H

#include "sched/job.h"

typedef struct gs_store gs_store;

/* Opens (creating) the database at `path`. The caller closes it. */
int gs_store_open(const char *path, gs_store **out);
void gs_store_close(gs_store *st);

/* Adds a tenant under a new serial (never given before), set in t->serial. */
int gs_store_tenant_insert(gs_store *st, gs_tenant *t);
int gs_store_tenant_delete(gs_store *st, const char *name);
/* Every tenant, into a malloc'd array the caller frees. */
int gs_store_tenants_load(gs_store *st, gs_tenant **out, int *n);

/* A token's salted hash; `id` comes back (it is part of the token's text). */
int gs_store_token_insert(gs_store *st, const char *tenant, const uint8_t salt[16],
                          const uint8_t hash[32], int64_t *id);
/* Looks a token up by id: its tenant, salt and hash. GS_ENOENT if none. */
int gs_store_token_get(gs_store *st, int64_t id, char tenant[64], uint8_t salt[16],
                       uint8_t hash[32]);
int gs_store_token_count(gs_store *st, int64_t *n);

/* Inserts a new job (sets j->id) with its first event. */
int gs_store_job_insert(gs_store *st, gs_job *j);
/* Writes the job's mutable fields; with `event`, also a row in the audit
 * trail (its state and reason now). */
int gs_store_job_update(gs_store *st, const gs_job *j, bool event);
/* Jobs PENDING or RUNNING, oldest first, into a malloc'd array of
 * malloc'd jobs (gs_job_free each, then free the array). */
int gs_store_jobs_active(gs_store *st, gs_job ***out, int *n);
/* One job; GS_ENOENT if none. The caller gs_job_free()s it. */
int gs_store_job_get(gs_store *st, int64_t id, gs_job **out);
/* Ended jobs (newest first, at most `limit`) of `tenant` (NULL: everyone's)
 * and of tenant serial `serial` (0: any), in a new list *list of *n; the
 * caller frees it with gs_job_infos_free. */
int gs_store_jobs_ended(gs_store *st, const char *tenant, int64_t serial, int limit,
                        gs_job_info **list, int *n);
/* The ids of jobs that ended at `from` or later and before `to` (Unix
 * seconds): *ids, which the caller frees. */
int gs_store_jobs_ended_between(gs_store *st, double from, double to, int64_t **ids, int *n);
/* The audit trail of one job, oldest first: *out (the caller frees it). */
int gs_store_job_events(gs_store *st, int64_t id, gs_job_event **out, int *n);
/* Accounting per tenant of jobs that ended since `since` (Unix seconds):
 * *out (the caller frees it). */
int gs_store_usage(gs_store *st, const char *tenant, int64_t serial, double since,
                   gs_usage_row **out, int *n);

/* The highest job id handed out so far (0: none), and making the next one
 * come after `id` (so that job directories of a lost database are never
 * reused). */
int gs_store_job_last_id(gs_store *st, int64_t *out);
int gs_store_job_ids_after(gs_store *st, int64_t id);

/* The job as the front desk reports it (argv copied; gs_job_info_free). */
int gs_job_fill_info(const gs_job *j, gs_job_info *out);

#endif

/* slurm_rest.h - a client of slurmrestd (Slurm's REST API, OpenAPI plugin
 * v0.0.38, as Slurm 22.05 serves it), through which the front desk hands
 * multi-node jobs to Slurm, asks their state and cancels them.
 *
 * Authentication is slurmrestd's JWT mode: each call carries a token for the
 * Unix user the job runs as, signed here (HS256) with the cluster's JWT key,
 * the file slurm.conf names in AuthAltParameters=jwt_key=. So jobs run as
 * their tenants' users, as `scontrol token username=U` would allow. */
#ifndef GS_SCHED_SLURM_REST_H
#define GS_SCHED_SLURM_REST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gs_slurm_rest gs_slurm_rest;

/* `url`: "http://HOST:PORT" or "unix:/PATH" (slurmrestd's socket);
 * `jwt_key_file`: the key, read now (it must not be readable by others).
 * GS_EINVAL with why. The caller closes it. */
int gs_slurm_rest_open(const char *url, const char *jwt_key_file, gs_slurm_rest **out);
void gs_slurm_rest_close(gs_slurm_rest *r);

/* A token for `user`, valid `lifetime_s` seconds: header.payload.signature
 * in base64url, the payload {"iat", "exp", "sun": user}. */
int gs_slurm_jwt(const uint8_t *key, size_t key_len, const char *user, int64_t now,
                 int lifetime_s, char *out, size_t cap);

/* Submits `job` (a v0.0.38 job submission: {"script", "job": {...}}, borrowed)
 * as `user`. GS_EINVAL with Slurm's own message when it refuses (an unknown
 * partition, more nodes than it has, ...), GS_EIO when slurmrestd cannot be
 * reached or answers nonsense. */
int gs_slurm_rest_submit(gs_slurm_rest *r, const char *user, json_t *job, int64_t *job_id);

/* What Slurm says of a job. */
typedef struct gs_slurm_status {
  char state[32];     /* Slurm's job_state: "PENDING", "RUNNING", "NODE_FAIL", ... */
  char reason[128];   /* state_reason ("None" is left out) */
  char nodes[256];    /* "gsn[1-2]" */
  int exit_code;      /* of the batch script, -1 if none */
  int signal;         /* that ended it, 0 if none */
  double start_time, end_time; /* Unix seconds, 0 if not yet */
  int restarts;       /* how often Slurm requeued it */
} gs_slurm_status;

/* GS_ENOENT when Slurm no longer knows the job (purged after
 * MinJobAge), GS_EIO when slurmrestd cannot be reached. */
int gs_slurm_rest_status(gs_slurm_rest *r, const char *user, int64_t job_id,
                         gs_slurm_status *out);
/* scancel, through REST. GS_ENOENT for a job Slurm does not know. */
int gs_slurm_rest_cancel(gs_slurm_rest *r, const char *user, int64_t job_id);

#endif

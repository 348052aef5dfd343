/* slurm_jobs.h - the GPUs Slurm gave its jobs on this node, booked in the
 * front desk's ledger for each job's lifetime (owner "slurm job N (user)"),
 * so that model instances and local jobs never take what Slurm gave away.
 * `gpusrv slurm prolog|epilog` book and release them through the job API.
 * The bookings are kept in STATE_DIR/slurm-jobs.json: a restarted daemon
 * books them again, then drops those of jobs Slurm no longer lists
 * (squeue), keeping all of them when squeue cannot answer. */
#ifndef GS_SCHED_SLURM_JOBS_H
#define GS_SCHED_SLURM_JOBS_H

#include "sched/sched.h"

#include <stdint.h>

typedef struct gs_slurm_jobs gs_slurm_jobs;

/* Loads the kept bookings and books them again; `squeue` names the command
 * that lists Slurm's jobs (NULL: "squeue" on PATH). The caller closes it;
 * close releases the bookings and keeps the file. */
int gs_slurm_jobs_open(gs_ledger *ledger, const char *state_dir, const char *squeue,
                       gs_slurm_jobs **out);
void gs_slurm_jobs_close(gs_slurm_jobs *s);

/* Books what is left of each of Slurm's GPUs `gpus` (indices as in
 * gs_slurm_gpus) for job `job_id` of `user`: all of its compute share and
 * memory not booked yet. Booking a job that is already booked changes
 * nothing. GS_EINVAL for an index the node does not have. */
int gs_slurm_job_book(gs_slurm_jobs *s, int64_t job_id, const char *user, const int *gpus,
                      int n_gpus);
/* Releases a job's booking; GS_ENOENT when it has none. */
int gs_slurm_job_release(gs_slurm_jobs *s, int64_t job_id);

#endif

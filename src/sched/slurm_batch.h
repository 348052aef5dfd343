/* slurm_batch.h - a multi-node job as Slurm gets it: the batch script and
 * job properties of a v0.0.38 submission (slurm_rest.h), and Slurm's job
 * states in the front desk's terms.
 *
 * The batch script starts the command once per task with srun (PMIx for
 * MPI programs), each task with the rendezvous variables that torchrun,
 * DeepSpeed, Horovod and NCCL read: MASTER_ADDR (the job's first node),
 * MASTER_PORT (from the job id, so that jobs sharing a node differ),
 * WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE and NODE_RANK. */
#ifndef GS_SCHED_SLURM_BATCH_H
#define GS_SCHED_SLURM_BATCH_H

#include "sched/job.h"

#include <jansson.h>
#include <stddef.h>

/* Checks what a job request asks of Slurm; GS_EINVAL with why. */
int gs_slurm_batch_check(const gs_job_request *req);

/* Where a job's logs go and as whom it runs (borrowed strings). */
typedef struct gs_slurm_batch_place {
  const char *user;        /* the tenant's Unix user */
  const char *account;     /* Slurm account to charge */
  const char *stdout_path; /* may hold Slurm's %j */
  const char *stderr_path;
  const char *workdir;     /* the job's directory when req->chdir names none */
} gs_slurm_batch_place;

/* The submission for `req` ({"script", "job"}); NULL when out of memory.
 * The caller decrefs it. */
json_t *gs_slurm_batch_submission(const gs_job_request *req, const gs_slurm_batch_place *place);

/* The front desk's state (a gs_job_state) for Slurm's `slurm_state` (its
 * job_state), GS_JOB_PENDING or GS_JOB_RUNNING for those not ended; -1 for
 * a state this table does not know. */
int gs_slurm_batch_state(const char *slurm_state);

#endif

/* job.h - a process job as the front desk keeps it (in memory and in the
 * store), and its states in the manner of Slurm. Internal to src/sched. */
#ifndef GS_SCHED_JOB_H
#define GS_SCHED_JOB_H

#include "sched/policy.h"
#include "sched/sched.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define GS_JOB_STATES(X)                                                      \
  X(PENDING) X(RUNNING) X(COMPLETED) X(FAILED) X(CANCELLED) X(TIMEOUT)        \
  X(PREEMPTED) X(OUT_OF_MEMORY) X(LOST) X(NODE_FAIL)

typedef enum {
#define GS__JOB_STATE_ENUM(name) GS_JOB_##name,
  GS_JOB_STATES(GS__JOB_STATE_ENUM)
#undef GS__JOB_STATE_ENUM
} gs_job_state;

const char *gs_job_state_name(gs_job_state s);
/* -1 if `name` is no state. */
int gs_job_state_from_name(const char *name);

typedef struct gs_job {
  int64_t id;
  char tenant[64];
  int64_t tenant_serial; /* the tenant's serial: a later tenant of its name is another */
  char name[128];
  json_t *argv;   /* array of strings */
  json_t *env;    /* array of "K=V" */
  char chdir[512]; /* "" : the job's own directory */
  gs_sched_need need;
  int64_t time_limit_s; /* 0: none */
  int priority;
  bool requeue;
  /* A job in a container (container.h): {"image": "...", "mounts":
   * ["SRC:DST[:ro]", ...]}; NULL: a plain process job. */
  json_t *container;
  /* A job handed to Slurm (slurm_batch.h): {"job_id", "user", "nodes",
   * "gpus_per_node", "ntasks_per_node", "partition", "mpi", "account",
   * "stdout", "stderr", "node_list"}; NULL: a job of this machine. */
  json_t *slurm;

  gs_job_state state;
  char reason[256];
  double submit_time, start_time, end_time; /* Unix seconds; 0 if not yet */
  pid_t pid;             /* the job's supervisor (shim) */
  uint64_t pid_start;    /* its start time in clock ticks, against pid reuse */
  int exit_code;         /* -1 if none */
  int signal;            /* the signal that ended it, 0 if none */
  char devices[256];     /* "cuda0,cuda1" as booked */
  int runs;              /* how many times it started (requeues) */
  double cpu_seconds, device_seconds, device_mem_byte_seconds;

  /* daemon-side only */
  gs_booking *booking;
  gs_sched_placement placement;
  bool cancel_requested, timed_out;
  bool unsaved;          /* its state is newer than the store's: written again until it takes */
  int64_t preempted_by;  /* stopped to make room for this job (0: not preempted) */
  char over_memory[200]; /* why it is being stopped for device memory ("" if not) */
  double term_sent_at; /* when SIGTERM went to it; SIGKILL follows after the grace */
  int slurm_unknown;   /* Slurm's "no such job" answers in a row (a Slurm job) */
} gs_job;

void gs_job_free(gs_job *j);

#endif

/* frontdesk_internal.h - what the front desk's own files share: the desk,
 * its list of unfinished jobs, and the helpers both use. frontdesk.c keeps
 * tenants, the local queue and the scheduler; frontdesk_slurm.c the jobs
 * handed to Slurm. Nothing else includes this. */
#ifndef GS_SCHED_FRONTDESK_INTERNAL_H
#define GS_SCHED_FRONTDESK_INTERNAL_H

#include "sched/holds.h"
#include "sched/sched.h"
#include "sched/slurm_accounts.h"
#include "sched/slurm_rest.h"
#include "sched/store.h"

#include <limits.h>
#include <pthread.h>
#include <sys/types.h>

#define GS_FD_MAX_ACTIVE 100000 /* unfinished jobs at most */

typedef struct active_job {
  gs_job *job;
  int pidfd; /* RUNNING: readable once its supervisor is gone; -1 otherwise */
} active_job;

struct gs_frontdesk {
  gs_frontdesk_settings set;
  gs_store *store;
  /* Token checks read through a connection of their own, and the tenants
   * under a lock of their own, so that no request waits on the scheduler
   * (which holds `lock` across spawns and synced writes). */
  gs_store *auth_store;
  pthread_rwlock_t tenants_lock;
  pthread_mutex_t lock;
  pthread_t thread;
  bool thread_started, stop;
  int wake_fd;
  char admin_token_path[600];
  char shim_path[PATH_MAX]; /* gpusrv-job-shim */

  gs_tenant *tenants;
  int n_tenants;
  active_job *active;
  int n_active, cap_active;

  /* what jobs may book */
  int n_devices;
  gs_device_t *devices[GS_SCHED_MAX_DEVICES];
  gs_sched_free total;

  gs_holds *holds; /* the GPUs outside schedulers' jobs (Slurm's) hold on this node */
  /* Jobs on several nodes: slurmrestd (NULL: none set up), and the thread
   * that follows their states there (slurm_follower), woken through
   * slurm_cond (under `lock`) after a submission or a cancel. */
  gs_slurm_rest *rest;
  gs_slurm_accounts *accounts; /* tenants' Slurm accounts (with rest) */
  pthread_t slurm_thread;
  bool slurm_thread_started;
  pthread_cond_t slurm_cond;
  double last_slurm_submit; /* Unix seconds: followed more closely just after */
};


/* The Unix identity a tenant's jobs run as, or why there is none. */
typedef struct identity {
  uid_t uid;
  gid_t gid;
  char user[64];
  char home[512];
  char shell[256];
} identity;

/* ---- frontdesk.c -------------------------------------------------------------------------- */

/* Wakes the scheduler thread for a pass. */
void gs_fd_wake(gs_frontdesk *fd);
/* With fd->lock held: the tenant named so, or NULL. */
gs_tenant *gs_fd_find_tenant(gs_frontdesk *fd, const char *name);
int gs_fd_resolve_identity(const gs_tenant *t, identity *id);
/* With fd->lock held: room for one more active job; then appends j (the
 * list owns it from then on). */
int gs_fd_reserve_active(gs_frontdesk *fd);
int gs_fd_add_active(gs_frontdesk *fd, gs_job *j);
active_job *gs_fd_find_active(gs_frontdesk *fd, int64_t id);
/* With fd->lock held: sets and writes a job's state (kept in memory,
 * marked unsaved, when the write fails); returns the write's result. */
int gs_fd_set_state(gs_frontdesk *fd, gs_job *j, gs_job_state state, const char *reason);
/* Whether a job still takes part in scheduling (PENDING or RUNNING). */
bool gs_fd_in_queue(const gs_job *j);
/* A new PENDING job of `who` from the request (the caller frees it with
 * gs_job_free unless the active list takes it); NULL with the error. */
gs_job *gs_fd_new_job(const gs_principal *who, const gs_job_request *req);

/* ---- frontdesk_slurm.c -------------------------------------------------------------------- */

/* The thread that follows jobs handed to Slurm (arg: the desk). */
void *gs_fd_slurm_follower(void *arg);
/* The follower, told to look soon (fd->lock held). */
void gs_fd_follow_slurm_closely(gs_frontdesk *fd);
/* A job on several nodes, handed to Slurm at once, then recorded. */
int gs_fd_submit_to_slurm(gs_frontdesk *fd, const gs_principal *who, const gs_job_request *req,
                          int64_t *id);
/* scancel of job id, a Slurm job (without fd->lock held). */
int gs_fd_cancel_in_slurm(gs_frontdesk *fd, int64_t id);
/* At open: says why Slurm jobs of an earlier run are not followed now. */
void gs_fd_warn_unfollowed_slurm_jobs(gs_frontdesk *fd);

#endif

/* frontdesk_slurm.c - the front desk's jobs on several nodes, handed to
 * Slurm through slurmrestd (slurm_rest.h): submitted at once so that
 * Slurm's refusal reaches the caller, followed by a thread of their own,
 * cancelled with scancel, their logs Slurm's output files. */
#include "sched/frontdesk_internal.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/fileutil.h"
#include "base/log.h"
#include "sched/slurm_batch.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- jobs handed to Slurm ------------------------------------------------------------------ */

/* How often slurmrestd is asked, and how often in the first seconds after
 * a submission or a cancel (when a job usually starts or ends: `gpusrv
 * job` should say so soon). */
#define SLURM_POLL_S 2.0
#define SLURM_POLL_FRESH_S 0.25
#define SLURM_FRESH_S 30.0
/* Answers in a row that Slurm does not know a job before it is LOST (one
 * can be a controller that has just restarted). */
#define SLURM_UNKNOWN_LIMIT 3

/* The runs, start and end of job j from what Slurm says (a pass can miss a
 * whole run: PENDING, then already COMPLETED). A job that never got nodes
 * (cancelled while pending) never started, whatever Slurm's start time. */
static void take_slurm_times(gs_job *j, gs_job_state state, const gs_slurm_status *st) {
  bool ended = state != GS_JOB_PENDING && state != GS_JOB_RUNNING;
  bool ran = st->nodes[0] && st->start_time > 0;
  if (state == GS_JOB_RUNNING || (ended && ran)) {
    j->start_time = st->start_time > 0 ? st->start_time : gs_wall_s();
    j->runs = st->restarts + 1;
  } else if (state == GS_JOB_PENDING) {
    j->runs = st->restarts;
  }
  if (ended) {
    j->end_time = st->end_time > 0 ? st->end_time : gs_wall_s();
    j->exit_code = ran ? st->exit_code : -1;
    j->signal = ran ? st->signal : 0;
  }
}

/* What Slurm said of job j, into its record: a change of state is written
 * with an event; a pending job's reason is kept in memory, as the queue's. */
static void apply_slurm_status(gs_frontdesk *fd, gs_job *j, const gs_slurm_status *st) {
  int mapped = gs_slurm_batch_state(st->state);
  json_object_set_new(j->slurm, "node_list", json_string(st->nodes));
  j->slurm_unknown = 0;
  if (mapped < 0) { /* a state newer than our table: no change, but say it */
    snprintf(j->reason, sizeof j->reason, "Slurm says %s", st->state);
    return;
  }
  gs_job_state state = (gs_job_state)mapped;
  /* Requeues seen so far: a pending job's runs count them, a running or
   * ended one's count its first run too. */
  int seen = j->state == GS_JOB_PENDING ? j->runs : (j->runs > 0 ? j->runs - 1 : 0);
  bool requeued = st->restarts > seen;
  /* Slurm's own state where ours names it otherwise (BOOT_FAIL is FAILED
   * here), and its reason. */
  bool same_name = strcmp(gs_job_state_name(state), st->state) == 0;
  char reason[256];
  /* Waiting again after a requeue says so for as long as it waits. */
  snprintf(reason, sizeof reason, "%s%s%s%s", same_name ? "" : st->state,
           !same_name && st->reason[0] ? ": " : "", st->reason,
           state == GS_JOB_PENDING && st->restarts > 0 ? " (requeued by Slurm)" : "");
  if (state == j->state && !requeued) {
    if (state == GS_JOB_PENDING || strcmp(j->reason, reason) != 0)
      snprintf(j->reason, sizeof j->reason, "%s", reason); /* SUSPENDED, COMPLETING: said */
    return;
  }
  take_slurm_times(j, state, st);
  gs_fd_set_state(fd, j, state, reason);
}

/* Slurm does not know job j (purged after MinJobAge, or a controller that
 * lost its state): LOST after SLURM_UNKNOWN_LIMIT such answers in a row. */
static void slurm_job_unknown(gs_frontdesk *fd, gs_job *j) {
  if (++j->slurm_unknown < SLURM_UNKNOWN_LIMIT)
    return;
  j->end_time = gs_wall_s();
  gs_fd_set_state(fd, j, GS_JOB_LOST, "Slurm no longer knows the job");
}

/* One pass: asks slurmrestd the state of every unfinished job handed to
 * Slurm, without the lock (each call can take seconds); called and
 * returning with it held. A pass stops at the first answer that is not
 * about the job (slurmrestd down: the others would wait as long); the
 * jobs not asked keep their states. */
static void poll_slurm(gs_frontdesk *fd) {
  typedef struct asked {
    int64_t id, slurm_id;
    char user[64];
    gs_slurm_status st;
    int rc;
    bool asked;
  } asked;
  int n = 0;
  for (int i = 0; i < fd->n_active; i++)
    n += fd->active[i].job->slurm && gs_fd_in_queue(fd->active[i].job);
  asked *q = n ? calloc((size_t)n, sizeof *q) : NULL;
  if (!q)
    return;
  n = 0;
  for (int i = 0; i < fd->n_active; i++) {
    const gs_job *j = fd->active[i].job;
    if (!j->slurm || !gs_fd_in_queue(j))
      continue;
    q[n].id = j->id;
    q[n].slurm_id = json_integer_value(json_object_get(j->slurm, "job_id"));
    snprintf(q[n].user, sizeof q[n].user, "%s",
             json_string_value(json_object_get(j->slurm, "user")) ?: "");
    n++;
  }
  pthread_mutex_unlock(&fd->lock);
  for (int k = 0; k < n; k++) {
    q[k].asked = true;
    q[k].rc = q[k].slurm_id > 0 ? gs_slurm_rest_status(fd->rest, q[k].user, q[k].slurm_id,
                                                       &q[k].st)
                                : gs_error(GS_ENOENT, "its Slurm job id was lost");
    if (q[k].rc < 0 && q[k].rc != GS_ENOENT) {
      GS_LOGW("sched", "job %lld (Slurm's %lld): %s", (long long)q[k].id,
              (long long)q[k].slurm_id, gs_error_detail());
      break;
    }
  }
  pthread_mutex_lock(&fd->lock);
  for (int k = 0; k < n && q[k].asked; k++) {
    active_job *a = gs_fd_find_active(fd, q[k].id); /* the array may have moved meanwhile */
    if (!a || !gs_fd_in_queue(a->job))
      continue;
    if (q[k].rc == 0)
      apply_slurm_status(fd, a->job, &q[k].st);
    else if (q[k].rc == GS_ENOENT)
      slurm_job_unknown(fd, a->job);
  }
  free(q);
}

/* The thread that follows jobs handed to Slurm, closely in the seconds after
 * a submission or a cancel. Apart from the scheduler's, so that a slow or
 * absent slurmrestd never delays local jobs, limits or shutdown. */
void *gs_fd_slurm_follower(void *arg) {
  gs_frontdesk *fd = arg;
  pthread_mutex_lock(&fd->lock);
  while (!fd->stop) {
    poll_slurm(fd);
    if (fd->stop)
      break;
    double wait = gs_wall_s() - fd->last_slurm_submit < SLURM_FRESH_S ? SLURM_POLL_FRESH_S
                                                                    : SLURM_POLL_S;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = until.tv_nsec + (long long)(wait * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&fd->slurm_cond, &fd->lock, &until);
  }
  pthread_mutex_unlock(&fd->lock);
  return NULL;
}

/* The follower, told to look soon (fd->lock held). */
void gs_fd_follow_slurm_closely(gs_frontdesk *fd) {
  fd->last_slurm_submit = gs_wall_s();
  pthread_cond_signal(&fd->slurm_cond);
}


/* The directory a tenant's Slurm jobs write their logs into: STATE/slurm/
 * SERIAL, its user's alone. On a cluster it must be on a filesystem the
 * nodes share, since the first node of each job writes there. */
static int slurm_log_dir(gs_frontdesk *fd, int64_t serial, const identity *id, char *dir,
                         size_t cap) {
  char parent[600];
  snprintf(parent, sizeof parent, "%s/slurm", fd->set.state_dir);
  snprintf(dir, cap, "%s/%lld", parent, (long long)serial);
  /* The parent traversable (the daemon's umask is 077), as jobs/ is. */
  if (gs_mkdir_p(dir) < 0 || chmod(parent, 0711) < 0 || chown(dir, id->uid, id->gid) < 0 ||
      chmod(dir, 0700) < 0)
    return gs_error(GS_EIO, "cannot prepare %s for the job's logs: %s", dir, strerror(errno));
  return GS_OK;
}

/* "%j" in a Slurm path, replaced by the job id. */
static json_t *slurm_path(const char *pattern, int64_t slurm_id) {
  const char *at = strstr(pattern, "%j");
  char out[700];
  snprintf(out, sizeof out, "%.*s%lld%s", (int)(at - pattern), pattern, (long long)slurm_id,
           at + 2);
  return json_string(out);
}

/* A job on several nodes: handed to Slurm at once (so that Slurm's refusal
 * reaches the caller), then recorded; if the record cannot be written, the
 * Slurm job is cancelled again. */
int gs_fd_submit_to_slurm(gs_frontdesk *fd, const gs_principal *who, const gs_job_request *req,
                           int64_t *id) {
  if (!fd->rest)
    return gs_error(GS_EINVAL, "this daemon hands no jobs to Slurm (not set up: it needs "
                               "--slurm-rest-url and --slurm-jwt-key)");
  if (gs_slurm_batch_check(req) < 0)
    return gs_error_code();
  pthread_mutex_lock(&fd->lock);
  gs_tenant *t = gs_fd_find_tenant(fd, who->tenant);
  identity ident;
  int rc = t ? gs_fd_resolve_identity(t, &ident)
             : gs_error(GS_EPERM, "no tenant '%s'", who->tenant);
  if (rc == 0 && req->priority > t->max_priority)
    rc = gs_error(GS_EPERM, "tenant '%s' may submit at priority %d at most, not %d", t->name,
                  t->max_priority, req->priority);
  /* Root in a job Slurm runs is root on every node it gets. */
  if (rc == 0 && ident.uid == 0)
    rc = gs_error(GS_EPERM, "tenant '%s' maps to root, and jobs on several nodes never run as "
                            "root", t->name);
  int64_t serial = rc == 0 ? t->serial : 0;
  double weight = rc == 0 ? t->weight : 1;
  pthread_mutex_unlock(&fd->lock);
  char dir[600], out_path[700], err_path[700], account[64];
  if (rc == 0)
    rc = gs_slurm_account_for(fd->accounts, who->tenant, ident.user, weight, account,
                              sizeof account);
  if (rc == 0)
    rc = slurm_log_dir(fd, serial, &ident, dir, sizeof dir);
  if (rc < 0)
    return rc;
  snprintf(out_path, sizeof out_path, "%s/slurm-%%j.out", dir);
  snprintf(err_path, sizeof err_path, "%s/slurm-%%j.err", dir);
  gs_slurm_batch_place place = {.user = ident.user, .account = account, .stdout_path = out_path,
                                .stderr_path = err_path, .workdir = dir};
  json_t *sub = gs_slurm_batch_submission(req, &place);
  if (!sub)
    return gs_error(GS_ENOMEM, "out of memory for a Slurm job");
  int64_t slurm_id = 0;
  rc = gs_slurm_rest_submit(fd->rest, ident.user, sub, &slurm_id);
  json_decref(sub);
  if (rc < 0)
    return rc;
  gs_job *j = gs_fd_new_job(who, req);
  if (j) {
    j->tenant_serial = serial;
    snprintf(j->reason, sizeof j->reason, "submitted to Slurm as job %lld", (long long)slurm_id);
    j->slurm = json_pack("{s:I, s:s, s:i, s:i, s:i, s:s, s:b, s:s, s:o, s:o, s:s}", "job_id",
                         (json_int_t)slurm_id, "user", ident.user, "nodes", req->nodes,
                         "gpus_per_node", req->gpus_per_node, "ntasks_per_node",
                         req->ntasks_per_node > 0 ? req->ntasks_per_node : 1, "partition",
                         req->partition ? req->partition : "", "mpi", req->mpi, "account",
                         account, "stdout", slurm_path(out_path, slurm_id), "stderr",
                         slurm_path(err_path, slurm_id), "node_list", "");
  }
  if (!j)
    rc = gs_error_code();
  else if (!j->slurm)
    rc = gs_error(GS_ENOMEM, "out of memory for a Slurm job");
  pthread_mutex_lock(&fd->lock);
  /* The lock was let go for Slurm's answer: the tenant may be gone. */
  t = gs_fd_find_tenant(fd, who->tenant);
  if (rc == 0 && (!t || t->serial != serial))
    rc = gs_error(GS_EPERM, "tenant '%s' was removed meanwhile", who->tenant);
  if (rc == 0 && fd->n_active >= GS_FD_MAX_ACTIVE)
    rc = gs_error(GS_EBUSY, "the queue is full (%d unfinished jobs)", GS_FD_MAX_ACTIVE);
  if (rc == 0)
    rc = gs_fd_reserve_active(fd);
  if (rc == 0)
    rc = gs_store_job_insert(fd->store, j);
  if (rc == 0) {
    *id = j->id;
    gs_fd_add_active(fd, j);
    gs_fd_follow_slurm_closely(fd);
  }
  pthread_mutex_unlock(&fd->lock);
  if (rc < 0) {
    char why[300];
    snprintf(why, sizeof why, "%s", gs_error_detail());
    gs_job_free(j);
    if (gs_slurm_rest_cancel(fd->rest, ident.user, slurm_id) < 0)
      GS_LOGW("sched", "Slurm job %lld, which could not be recorded, was not cancelled: %s",
              (long long)slurm_id, gs_error_detail());
    return gs_error(rc, "%s", why);
  }
  GS_LOGI("sched", "job %lld: handed to Slurm as job %lld (%d nodes, user %s)", (long long)*id,
          (long long)slurm_id, req->nodes, ident.user);
  gs_fd_wake(fd);
  return GS_OK;
}


int gs_fd_cancel_in_slurm(gs_frontdesk *fd, int64_t id) {
  pthread_mutex_lock(&fd->lock);
  active_job *a = gs_fd_find_active(fd, id);
  int64_t slurm_id = a ? json_integer_value(json_object_get(a->job->slurm, "job_id")) : 0;
  char user[64];
  snprintf(user, sizeof user, "%s",
           a ? json_string_value(json_object_get(a->job->slurm, "user")) ?: "" : "");
  pthread_mutex_unlock(&fd->lock);
  if (!fd->rest)
    return gs_error(GS_EINVAL, "job %lld is Slurm's job %lld, and this daemon is not set up to "
                               "reach Slurm (--slurm-rest-url): scancel it there",
                    (long long)id, (long long)slurm_id);
  if (slurm_id <= 0)
    return gs_error(GS_ESTATE, "job %lld has already ended", (long long)id);
  int rc = gs_slurm_rest_cancel(fd->rest, user, slurm_id);
  pthread_mutex_lock(&fd->lock);
  gs_fd_follow_slurm_closely(fd);
  pthread_mutex_unlock(&fd->lock);
  return rc;
}


/* Jobs handed to Slurm by an earlier run that this one cannot follow (no
 * --slurm-rest-url now): they stay as they were, saying why. */
void gs_fd_warn_unfollowed_slurm_jobs(gs_frontdesk *fd) {
  if (fd->rest)
    return;
  for (int i = 0; i < fd->n_active; i++) {
    gs_job *j = fd->active[i].job;
    if (!j->slurm || !gs_fd_in_queue(j))
      continue;
    snprintf(j->reason, sizeof j->reason, "not followed: this daemon has no --slurm-rest-url");
    GS_LOGW("sched", "job %lld is Slurm's job %lld, which this daemon cannot follow without "
            "--slurm-rest-url", (long long)j->id,
            (long long)json_integer_value(json_object_get(j->slurm, "job_id")));
  }
}


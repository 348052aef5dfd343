/* policy.h - the front desk's queue policy as a pure function: given what is
 * free, what tenants hold and which jobs wait, decide which jobs start now
 * and where, and why the others wait. Priority first, then weighted dominant
 * resource fairness (DRF) across tenants, then submission order; EASY
 * backfill: a later job may start only when that cannot delay the expected
 * start of the job at the head of the queue. No I/O, no locks: frontdesk.c
 * feeds it a snapshot, and the unit tests drive it directly. */
#ifndef GS_SCHED_POLICY_H
#define GS_SCHED_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define GS_SCHED_MAX_DEVICES 64
#define GS_SCHED_NO_END INT64_MAX

/* What one job asks for. Devices are either `gpus` whole devices (all their
 * memory and compute), or a slice of one device (`gpu_mem` bytes and
 * `gpu_share` percent of its compute), or none. */
typedef struct gs_sched_need {
  int gpus;
  uint64_t gpu_mem;
  int gpu_share;
  double cpus;
  uint64_t host_mem;
} gs_sched_need;

/* Free (or total) resources: per device memory and compute percent, and the
 * host's cores and memory. */
typedef struct gs_sched_free {
  int n_devices;
  uint64_t dev_mem[GS_SCHED_MAX_DEVICES];
  int dev_share[GS_SCHED_MAX_DEVICES];
  double cpus;
  uint64_t host_mem;
} gs_sched_free;

/* A tenant's weight, quotas (0: no limit) and what its running jobs hold. */
typedef struct gs_sched_tenant {
  double weight;
  double max_devices; /* whole devices, a slice counting as its share */
  uint64_t max_device_mem;
  int max_jobs;
  double max_cpus;
  uint64_t max_host_mem;
  /* in use (filled from the running jobs by gs_sched_plan) */
  double used_devices;
  uint64_t used_device_mem;
  int used_jobs;
  double used_cpus;
  uint64_t used_host_mem;
} gs_sched_tenant;

/* Where a job runs: bit d set for each device d it books. */
typedef uint64_t gs_sched_placement;

typedef struct gs_sched_job {
  int64_t id;
  int tenant;     /* index into the tenants array */
  int priority;   /* higher first */
  int64_t seq;    /* submission order, lower first */
  int64_t end_s;  /* running jobs: expected end (start + time limit), GS_SCHED_NO_END if none */
  int64_t limit_s; /* pending jobs: time limit in seconds, 0 if none */
  gs_sched_need need;
  gs_sched_placement placement; /* running: where it is; pending: set when it starts */
  bool leaving;  /* running: already being stopped (cancelled, timed out, preempted) */
  /* decided for pending jobs */
  bool start;
  const char *reason; /* why it waits: "Resources", "Priority", "QuotaExceeded" */
} gs_sched_job;

/* What a job holds on the host and the devices at a placement, as the
 * ledger books it: a whole device means all of `total`'s memory and 100%. */
void gs_sched_take(gs_sched_free *free_now, const gs_sched_free *total, const gs_sched_need *need,
                   gs_sched_placement placement);
void gs_sched_give(gs_sched_free *free_now, const gs_sched_free *total, const gs_sched_need *need,
                   gs_sched_placement placement);
/* Finds a placement for `need` in `free_now`; false if it does not fit. */
bool gs_sched_fit(const gs_sched_free *free_now, const gs_sched_free *total,
                  const gs_sched_need *need, gs_sched_placement *placement);
/* True when `need` could ever fit in `total` (else it can never start). */
bool gs_sched_possible(const gs_sched_free *total, const gs_sched_need *need);

/* True when `need` fits tenant `t`'s quotas with nothing else of it
 * running (its used_* figures are ignored); else it can never start. */
bool gs_sched_within_quota_alone(const gs_sched_tenant *t, const gs_sched_free *total,
                                 const gs_sched_need *need);

/* One scheduling pass at time `now_s`. `free_now` is what is free now
 * (updated for the jobs started); `total` is all there is (for shares and
 * whole devices). Sets start/placement or reason on each pending job, and
 * returns how many start. */
int gs_sched_plan(gs_sched_free *free_now, const gs_sched_free *total, gs_sched_tenant *tenants,
                  int n_tenants, const gs_sched_job *running, int n_running,
                  gs_sched_job *pending, int n_pending, int64_t now_s);

/* Preemption: which running jobs of lower priority than `head` to stop
 * (victim[i] set) so that it can start once they are gone — the lowest
 * priority first, and among equals the one that started last (least work
 * lost). Jobs already leaving count as gone and are not chosen again.
 * Returns how many it chose; 0 when the head can start without stopping
 * more (it waits for those leaving) or cannot start even so. */
int gs_sched_victims(const gs_sched_free *free_now, const gs_sched_free *total,
                     const gs_sched_job *running, int n_running, const gs_sched_job *head,
                     bool *victim);

#endif

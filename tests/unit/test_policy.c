/* test_policy.c - the queue policy: the DRF paper's example, weighted shares
 * converging, backfill that never delays the head job, whole-device gangs,
 * slices placed best-fit, quotas and priorities. */
#include "harness.h"

#include "sched/policy.h"

#include <stdlib.h>

#define GB (1024ull * 1024 * 1024)

static gs_sched_job job(int64_t id, int tenant, int priority, double cpus, uint64_t mem) {
  return (gs_sched_job){.id = id, .tenant = tenant, .priority = priority, .seq = id,
                        .need = {.cpus = cpus, .host_mem = mem}};
}

static int started_of(const gs_sched_job *jobs, int n, int tenant) {
  int k = 0;
  for (int i = 0; i < n; i++)
    k += jobs[i].start && jobs[i].tenant == tenant;
  return k;
}

/* Ghodsi et al. (NSDI 2011): 9 CPUs and 18 GB; A's tasks need <1 CPU, 4 GB>,
 * B's <3 CPUs, 1 GB>. DRF runs 3 of A's and 2 of B's. */
static void drf_paper_example(void) {
  gs_sched_free total = {.cpus = 9, .host_mem = 18 * GB};
  gs_sched_free free_now = total;
  gs_sched_tenant tenants[2] = {{.weight = 1}, {.weight = 1}};
  gs_sched_job pending[20];
  for (int i = 0; i < 10; i++) {
    pending[2 * i] = job(2 * i, 0, 0, 1, 4 * GB);
    pending[2 * i + 1] = job(2 * i + 1, 1, 0, 3, 1 * GB);
  }
  int n = gs_sched_plan(&free_now, &total, tenants, 2, NULL, 0, pending, 20, 0);
  CHECK_EQ(n, 5);
  CHECK_EQ(started_of(pending, 20, 0), 3);
  CHECK_EQ(started_of(pending, 20, 1), 2);
  CHECK(free_now.cpus < 1e-9);
  CHECK_EQ(free_now.host_mem, 4 * GB);
  /* The head waits for Resources, the rest behind it for Priority. */
  int resources = 0;
  for (int i = 0; i < 20; i++)
    resources += !pending[i].start && strcmp(pending[i].reason, "Resources") == 0;
  CHECK_EQ(resources, 1);
}

/* Two tenants with weights 1 and 2, always with work queued, jobs of random
 * lengths: the CPU time they get converges to 1:2 within 10%. */
static void weighted_shares_converge(void) {
  srand(7);
  gs_sched_free total = {.cpus = 12, .host_mem = 64 * GB};
  gs_sched_tenant tenants[2] = {{.weight = 1}, {.weight = 2}};
  enum { QUEUED = 40, MAXRUN = 64 };
  gs_sched_job pending[2 * QUEUED], running[MAXRUN];
  int n_running = 0;
  int64_t next_id = 0;
  for (int i = 0; i < 2 * QUEUED; i++)
    pending[i] = job(next_id++, i % 2, 0, 1, GB);
  double cpu_time[2] = {0, 0};
  for (int64_t now = 0; now < 2000; now++) {
    /* Jobs that end now leave. */
    gs_sched_free free_now = total;
    int kept = 0;
    for (int i = 0; i < n_running; i++)
      if (running[i].end_s > now)
        running[kept++] = running[i];
    n_running = kept;
    for (int i = 0; i < n_running; i++)
      gs_sched_take(&free_now, &total, &running[i].need, running[i].placement);
    for (int i = 0; i < 2 * QUEUED; i++)
      pending[i].limit_s = 1 + rand() % 5;
    gs_sched_plan(&free_now, &total, tenants, 2, running, n_running, pending, 2 * QUEUED, now);
    for (int i = 0; i < 2 * QUEUED; i++) {
      if (!pending[i].start)
        continue;
      CHECK(n_running < MAXRUN);
      running[n_running] = pending[i];
      running[n_running].end_s = now + pending[i].limit_s;
      n_running++;
      /* Replace it with a new job of the same tenant: the queue never empties. */
      int t = pending[i].tenant;
      pending[i] = job(next_id++, t, 0, 1, GB);
    }
    for (int i = 0; i < n_running; i++)
      cpu_time[running[i].tenant] += running[i].need.cpus;
  }
  double ratio = cpu_time[1] / cpu_time[0];
  CHECK_MSG(ratio > 1.8 && ratio < 2.2, "weight 2 : weight 1 got %.3f (cpu time %.0f vs %.0f)",
            ratio, cpu_time[1], cpu_time[0]);
}

/* The earliest time `head` fits, given what is free now and the jobs that
 * hold resources with their ends. */
static int64_t earliest_start(gs_sched_free free_now, const gs_sched_free *total,
                              const gs_sched_job *holders, int n, const gs_sched_need *head,
                              int64_t now) {
  gs_sched_placement p;
  if (gs_sched_fit(&free_now, total, head, &p))
    return now;
  /* release in order of end */
  int done[256] = {0};
  for (;;) {
    int next = -1;
    for (int i = 0; i < n; i++)
      if (!done[i] && (next < 0 || holders[i].end_s < holders[next].end_s))
        next = i;
    if (next < 0 || holders[next].end_s == GS_SCHED_NO_END)
      return GS_SCHED_NO_END;
    done[next] = 1;
    gs_sched_give(&free_now, total, &holders[next].need, holders[next].placement);
    if (gs_sched_fit(&free_now, total, head, &p))
      return holders[next].end_s;
  }
}

/* Random queues on random machines: whatever backfill starts, the head job
 * can still start when it could have without those jobs; and backfill does
 * start jobs often enough for that to mean something. */
static void backfill_never_delays_head(void) {
  srand(11);
  int trials_with_backfill = 0;
  for (int trial = 0; trial < 2000; trial++) {
    gs_sched_free total = {.n_devices = 4, .cpus = 16, .host_mem = 64 * GB};
    for (int d = 0; d < 4; d++) {
      total.dev_mem[d] = 80 * GB;
      total.dev_share[d] = 100;
    }
    gs_sched_free free_now = total;
    gs_sched_tenant tenant = {.weight = 1};
    gs_sched_job running[8], pending[24];
    int n_running = 0;
    for (int i = 0; i < 8; i++) {
      gs_sched_job j = job(100 + i, 0, 0, 1 + rand() % 6, (uint64_t)(rand() % 16) * GB);
      if (rand() % 2)
        j.need.gpus = 1 + rand() % 2;
      else if (rand() % 2) {
        j.need.gpu_mem = (uint64_t)(10 + rand() % 60) * GB;
        j.need.gpu_share = 10 * (1 + rand() % 9);
      }
      gs_sched_placement p;
      if (!gs_sched_fit(&free_now, &total, &j.need, &p))
        continue;
      j.placement = p;
      j.end_s = rand() % 8 == 0 ? GS_SCHED_NO_END : 1 + rand() % 100;
      gs_sched_take(&free_now, &total, &j.need, p);
      running[n_running++] = j;
    }
    for (int i = 0; i < 24; i++) {
      pending[i] = job(i, 0, rand() % 3, 1 + rand() % 8, (uint64_t)(rand() % 24) * GB);
      if (rand() % 3 == 0)
        pending[i].need.gpus = 1 + rand() % 4;
      else if (rand() % 2) {
        pending[i].need.gpu_mem = (uint64_t)(10 + rand() % 70) * GB;
        pending[i].need.gpu_share = 10 * (1 + rand() % 10);
      }
      pending[i].limit_s = rand() % 6 == 0 ? 0 : 1 + rand() % 120;
    }
    gs_sched_free after = free_now;
    gs_sched_plan(&after, &total, &tenant, 1, running, n_running, pending, 24, 0);
    /* The head: the one job waiting for Resources. */
    int head = -1;
    for (int i = 0; i < 24; i++)
      if (!pending[i].start && strcmp(pending[i].reason, "Resources") == 0) {
        CHECK_MSG(head < 0, "two head jobs in trial %d", trial);
        head = i;
      }
    if (head < 0)
      continue;
    /* In queue order (priority, then submission), jobs after the head that
     * started are backfill; those before it started in order. */
    gs_sched_job with[32], without[32];
    int n_with = 0, n_without = 0, backfilled = 0;
    gs_sched_free free_without = free_now;
    for (int i = 0; i < n_running; i++)
      with[n_with++] = without[n_without++] = running[i];
    for (int i = 0; i < 24; i++) {
      if (!pending[i].start)
        continue;
      gs_sched_job r = pending[i];
      r.end_s = r.limit_s > 0 ? r.limit_s : GS_SCHED_NO_END;
      with[n_with++] = r;
      bool after_head = r.priority < pending[head].priority ||
                        (r.priority == pending[head].priority && r.seq > pending[head].seq);
      if (after_head) {
        backfilled++;
      } else {
        without[n_without++] = r;
        gs_sched_take(&free_without, &total, &r.need, r.placement);
      }
    }
    int64_t t_with = earliest_start(after, &total, with, n_with, &pending[head].need, 0);
    int64_t t_without =
        earliest_start(free_without, &total, without, n_without, &pending[head].need, 0);
    CHECK_MSG(t_with <= t_without, "trial %d: backfill moved the head from %lld to %lld", trial,
              (long long)t_without, (long long)t_with);
    trials_with_backfill += backfilled > 0;
  }
  CHECK_MSG(trials_with_backfill > 100, "backfill started jobs in only %d trials",
            trials_with_backfill);
}

/* A gang of whole devices starts on devices wholly free, all or nothing. */
static void gangs_take_whole_devices(void) {
  gs_sched_free total = {.n_devices = 3, .cpus = 8, .host_mem = 8 * GB};
  for (int d = 0; d < 3; d++) {
    total.dev_mem[d] = 40 * GB;
    total.dev_share[d] = 100;
  }
  gs_sched_free free_now = total;
  /* A slice on device 1 leaves devices 0 and 2 whole. */
  free_now.dev_mem[1] -= GB;
  free_now.dev_share[1] -= 10;
  gs_sched_tenant t = {.weight = 1};
  gs_sched_job pending[2] = {job(1, 0, 0, 1, 0), job(2, 0, 0, 1, 0)};
  pending[0].need.gpus = 3;
  pending[1].need.gpus = 2;
  pending[1].priority = -1;
  gs_sched_plan(&free_now, &total, &t, 1, NULL, 0, pending, 2, 0);
  CHECK(!pending[0].start);
  CHECK_STR(pending[0].reason, "Resources");
  /* The head can never start (the slice has no end): backfill may take what
   * it would not need anyway, which is everything here except device 1. */
  CHECK(pending[1].start);
  CHECK_EQ(pending[1].placement, 0x5);
  CHECK_EQ(free_now.dev_share[0], 0);
  CHECK_EQ(free_now.dev_share[2], 0);
  CHECK_EQ(free_now.dev_share[1], 90);
}

/* Slices go to the device where they fit most tightly. */
static void slices_best_fit(void) {
  gs_sched_free total = {.n_devices = 2, .cpus = 8, .host_mem = 8 * GB};
  for (int d = 0; d < 2; d++) {
    total.dev_mem[d] = 40 * GB;
    total.dev_share[d] = 100;
  }
  gs_sched_free free_now = total;
  free_now.dev_mem[1] = 12 * GB;
  free_now.dev_share[1] = 50;
  gs_sched_tenant t = {.weight = 1};
  gs_sched_job pending[2] = {job(1, 0, 0, 1, 0), job(2, 0, 0, 1, 0)};
  pending[0].need.gpu_mem = 10 * GB;
  pending[0].need.gpu_share = 25;
  pending[1].need.gpu_mem = 30 * GB;
  pending[1].need.gpu_share = 25;
  CHECK_EQ(gs_sched_plan(&free_now, &total, &t, 1, NULL, 0, pending, 2, 0), 2);
  CHECK_EQ(pending[0].placement, 0x2);
  CHECK_EQ(pending[1].placement, 0x1);
  CHECK_EQ(free_now.dev_mem[1], 2 * GB);
  CHECK_EQ(free_now.dev_share[0], 75);
}

/* Quotas hold jobs back with QuotaExceeded without blocking other tenants;
 * a higher priority goes first whatever the shares. */
static void quotas_and_priorities(void) {
  gs_sched_free total = {.cpus = 4, .host_mem = 8 * GB};
  gs_sched_free free_now = total;
  gs_sched_tenant tenants[2] = {{.weight = 1, .max_jobs = 1}, {.weight = 1}};
  gs_sched_job pending[4] = {job(1, 0, 0, 1, 0), job(2, 0, 0, 1, 0), job(3, 1, 0, 1, 0),
                             job(4, 1, 5, 4, 0)};
  gs_sched_plan(&free_now, &total, tenants, 2, NULL, 0, pending, 4, 0);
  /* Job 4 (priority 5) takes every core; the rest wait behind it. */
  CHECK(pending[3].start);
  CHECK(!pending[0].start && !pending[1].start && !pending[2].start);
  free_now = total;
  pending[3].priority = -5;
  pending[3].start = false;
  gs_sched_plan(&free_now, &total, tenants, 2, NULL, 0, pending, 4, 0);
  CHECK(pending[0].start);
  CHECK(!pending[1].start);
  CHECK_STR(pending[1].reason, "QuotaExceeded");
  CHECK(pending[2].start);
  CHECK(!pending[3].start);
}

/* Preemption stops the fewest, cheapest lower-priority jobs, never a job
 * of the head's priority or above, and none while enough is leaving. */
static void preemption_victims(void) {
  gs_sched_free total = {.cpus = 12, .host_mem = 8 * GB};
  gs_sched_free free_now = total;
  gs_sched_job running[3] = {job(1, 0, 0, 4, 0), job(2, 0, 0, 4, 0), job(3, 0, 5, 4, 0)};
  running[0].end_s = 10;
  running[1].end_s = 20; /* started later: less work lost */
  running[2].end_s = 30;
  for (int i = 0; i < 3; i++)
    gs_sched_take(&free_now, &total, &running[i].need, running[i].placement);
  bool victim[3];
  gs_sched_job head = job(9, 0, 3, 4, 0);
  CHECK_EQ(gs_sched_victims(&free_now, &total, running, 3, &head, victim), 1);
  CHECK(!victim[0] && victim[1] && !victim[2]);
  /* Two needed: both of the lower priority; the priority-5 job never. */
  head.need.cpus = 8;
  CHECK_EQ(gs_sched_victims(&free_now, &total, running, 3, &head, victim), 2);
  CHECK(victim[0] && victim[1] && !victim[2]);
  /* More than the lower-priority jobs hold: nobody is stopped. */
  head.need.cpus = 12;
  CHECK_EQ(gs_sched_victims(&free_now, &total, running, 3, &head, victim), 0);
  CHECK(!victim[0] && !victim[1] && !victim[2]);
  /* One already leaving makes room: wait for it, stop nobody else. */
  head.need.cpus = 4;
  running[0].leaving = true;
  CHECK_EQ(gs_sched_victims(&free_now, &total, running, 3, &head, victim), 0);
  /* Devices: a whole device for the head, where one device holds a slice
   * and the other a whole-device job: stopping one of them is enough. */
  gs_sched_free dev_total = {.n_devices = 2, .cpus = 8, .host_mem = 8 * GB};
  for (int d = 0; d < 2; d++) {
    dev_total.dev_mem[d] = 40 * GB;
    dev_total.dev_share[d] = 100;
  }
  gs_sched_free dev_free = dev_total;
  gs_sched_job held[2] = {job(1, 0, 0, 1, 0), job(2, 0, 0, 1, 0)};
  held[0].need.gpu_mem = GB;
  held[0].need.gpu_share = 10;
  held[0].placement = 0x1;
  held[0].end_s = 50;
  held[1].need.gpus = 1;
  held[1].placement = 0x2;
  held[1].end_s = 40;
  for (int i = 0; i < 2; i++)
    gs_sched_take(&dev_free, &dev_total, &held[i].need, held[i].placement);
  gs_sched_job big = job(9, 0, 1, 1, 0);
  big.need.gpus = 1;
  CHECK_EQ(gs_sched_victims(&dev_free, &dev_total, held, 2, &big, victim), 1);
  /* Equal priorities: the one with the later end goes first, and suffices. */
  CHECK(victim[0] && !victim[1]);
}

int main(int argc, char **argv) {
  static const gs_test tests[] = {
      {"drf_paper_example", drf_paper_example},
      {"weighted_shares_converge", weighted_shares_converge},
      {"backfill_never_delays_head", backfill_never_delays_head},
      {"gangs_take_whole_devices", gangs_take_whole_devices},
      {"slices_best_fit", slices_best_fit},
      {"quotas_and_priorities", quotas_and_priorities},
      {"preemption_victims", preemption_victims},
      {NULL, NULL},
  };
  gs_test_suite suite = {.name = "policy", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}

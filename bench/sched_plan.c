/* sched_plan.c - the time of one scheduling decision (one pass of the
 * policy over the whole queue) with 1,000, 10,000 and 100,000 pending jobs
 * from 16 tenants on a machine of 8 devices and 64 cores, 200 jobs running:
 * whole devices, slices and CPU-only jobs mixed, with time limits, so that
 * the pass reserves for the head and backfills behind it. Prints the median
 * of several passes beside the goal of one pass well inside the daemon's
 * submit-to-running budget (10 ms). */
#include "sched/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GB (1024ull * 1024 * 1024)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static gs_sched_need random_need(void) {
  gs_sched_need n = {.cpus = 1 + rand() % 8, .host_mem = (uint64_t)(1 + rand() % 32) * GB};
  int kind = rand() % 4;
  if (kind == 0)
    n.gpus = 1 + rand() % 4;
  else if (kind == 1) {
    n.gpu_mem = (uint64_t)(5 + rand() % 70) * GB;
    n.gpu_share = 10 * (1 + rand() % 9);
  }
  return n;
}

int main(void) {
  srand(1);
  gs_sched_free total = {.n_devices = 8, .cpus = 64, .host_mem = 512 * GB};
  for (int d = 0; d < 8; d++) {
    total.dev_mem[d] = 141 * GB;
    total.dev_share[d] = 100;
  }
  enum { TENANTS = 16, RUNNING = 200 };
  gs_sched_tenant tenants[TENANTS];
  for (int t = 0; t < TENANTS; t++)
    tenants[t] = (gs_sched_tenant){.weight = 1 + t % 3, .max_jobs = 64};
  /* Running jobs: a random stream, until about two thirds of the cores are
   * taken, so that the pass both starts jobs and reserves for a head. */
  gs_sched_free busy = total;
  static gs_sched_job running[RUNNING];
  int n_running = 0;
  for (int tries = 0; tries < 10000 && n_running < RUNNING && busy.cpus > 24; tries++) {
    gs_sched_job j = {.id = n_running, .tenant = rand() % TENANTS, .need = random_need(),
                      .end_s = 1 + rand() % 3600};
    if (gs_sched_fit(&busy, &total, &j.need, &j.placement)) {
      gs_sched_take(&busy, &total, &j.need, j.placement);
      running[n_running++] = j;
    }
  }
  printf("bench/sched_plan: one scheduling pass (priority, weighted DRF, EASY backfill)\n");
  printf("machine: 8 devices x 141 GiB, 64 cores, 512 GiB; %d jobs running, %d tenants\n",
         n_running, TENANTS);
  printf("%10s %12s %12s %10s\n", "pending", "median ms", "per job us", "started");
  const int sizes[] = {1000, 10000, 100000};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    int n = sizes[s];
    gs_sched_job *pending = calloc((size_t)n, sizeof *pending);
    for (int i = 0; i < n; i++)
      pending[i] = (gs_sched_job){.id = 100000 + i, .tenant = rand() % TENANTS,
                                  .priority = rand() % 3, .seq = i, .need = random_need(),
                                  .limit_s = rand() % 5 ? 60 + rand() % 7200 : 0};
    double times[9];
    int started = 0;
    for (int r = 0; r < 9; r++) {
      gs_sched_free free_now = busy;
      double t0 = now_ms();
      started = gs_sched_plan(&free_now, &total, tenants, TENANTS, running, n_running, pending,
                              n, 0);
      times[r] = now_ms() - t0;
    }
    qsort(times, 9, sizeof times[0], cmp_double);
    printf("%10d %12.3f %12.3f %10d\n", n, times[4], times[4] * 1e3 / n, started);
    free(pending);
  }
  printf("goal: a pass with 10,000 pending well under the 10 ms submit-to-running budget\n");
  return 0;
}

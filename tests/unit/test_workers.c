/* test_workers.c - gs_workers: each item run once, in order on one thread,
 * spread over several, what is queued at the stop still run, and bad
 * thread counts refused. */
#include "harness.h"

#include "base/error.h"
#include "base/workers.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct item {
  gs_work work; /* first: run() gets the item's address */
  int index;
  atomic_int runs;
  pthread_t ran_on;
} item;

static int order[64];
static atomic_int n_order;

static void note(gs_work *w) {
  item *it = (item *)w;
  atomic_fetch_add(&it->runs, 1);
  it->ran_on = pthread_self();
  order[atomic_fetch_add(&n_order, 1)] = it->index;
}

static void one_thread_runs_them_in_order(void) {
  static item items[64];
  atomic_store(&n_order, 0);
  gs_workers *ws = gs_workers_start(1);
  CHECK(ws != NULL);
  for (int i = 0; i < 64; i++) {
    items[i] = (item){.work = {.run = note}, .index = i};
    gs_workers_queue(ws, &items[i].work);
  }
  gs_workers_stop(ws); /* runs what is still queued */
  CHECK_EQ(atomic_load(&n_order), 64);
  for (int i = 0; i < 64; i++) {
    CHECK_EQ(order[i], i);
    CHECK_EQ(atomic_load(&items[i].runs), 1);
    CHECK(!pthread_equal(items[i].ran_on, pthread_self()));
  }
}

/* Items that wait for each other (10 s at most): all four meet only when
 * four threads run them at once. */
static atomic_int arrived;

static void meet(gs_work *w) {
  atomic_fetch_add(&arrived, 1);
  time_t deadline = time(NULL) + 10;
  while (atomic_load(&arrived) < 4 && time(NULL) < deadline)
    sched_yield();
  if (atomic_load(&arrived) >= 4)
    atomic_fetch_add(&((item *)w)->runs, 1);
}

static void several_threads_run_at_once(void) {
  static item items[4];
  atomic_store(&arrived, 0);
  gs_workers *ws = gs_workers_start(4);
  CHECK(ws != NULL);
  for (int i = 0; i < 4; i++) {
    items[i] = (item){.work = {.run = meet}, .index = i};
    gs_workers_queue(ws, &items[i].work);
  }
  gs_workers_stop(ws);
  for (int i = 0; i < 4; i++)
    CHECK_EQ(atomic_load(&items[i].runs), 1);
}

static void bad_counts_are_refused(void) {
  CHECK(gs_workers_start(0) == NULL);
  CHECK_EQ(gs_error_code(), GS_EINVAL);
  CHECK(gs_workers_start(257) == NULL);
  gs_workers_stop(NULL);
}

static const gs_test tests[] = {
    {"one_thread_runs_them_in_order", one_thread_runs_them_in_order},
    {"several_threads_run_at_once", several_threads_run_at_once},
    {"bad_counts_are_refused", bad_counts_are_refused},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "workers", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}

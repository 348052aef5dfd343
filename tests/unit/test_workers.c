/* test_workers.c - gs_workers: each item run once, in order on one thread,
 * spread over several, what is queued at the stop still run, and bad
 * thread counts refused; gs_serial: its items one at a time and in order
 * on several threads, taking turns with other work, and refusing an item
 * while idle when asked. */
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

/* ---- gs_serial ---- */

static atomic_int inside;    /* the serial's items running now */
static atomic_int overlaps;  /* times one started while another ran */
static atomic_int busy_count; /* busy(true) calls less busy(false) calls */

static void serial_busy(gs_serial *s, bool busy) {
  (void)s;
  atomic_fetch_add(&busy_count, busy ? 1 : -1);
}

static void note_alone(gs_work *w) {
  if (atomic_fetch_add(&inside, 1) != 0)
    atomic_fetch_add(&overlaps, 1);
  for (volatile int spin = 0; spin < 20000; spin++)
    ;
  note(w);
  atomic_fetch_sub(&inside, 1);
}

static void a_serial_runs_one_at_a_time_in_order(void) {
  static item items[64];
  atomic_store(&n_order, 0);
  atomic_store(&overlaps, 0);
  atomic_store(&busy_count, 0);
  gs_workers *ws = gs_workers_start(4);
  CHECK(ws != NULL);
  gs_serial s;
  gs_serial_init(&s, ws, serial_busy);
  for (int i = 0; i < 64; i++) {
    items[i] = (item){.work = {.run = note_alone}, .index = i};
    CHECK(gs_serial_queue(&s, &items[i].work, false));
  }
  gs_workers_stop(ws); /* a serial's turn queues the next before it ends */
  CHECK_EQ(atomic_load(&n_order), 64);
  CHECK_EQ(atomic_load(&overlaps), 0);
  for (int i = 0; i < 64; i++)
    CHECK_EQ(order[i], i);
  CHECK_EQ(atomic_load(&busy_count), 0);
  gs_serial_destroy(&s);
}

/* An item that holds the one worker until let go, so that a test can lay
 * out the queue first. */
static atomic_bool let_go;

static void gate(gs_work *w) {
  (void)w;
  time_t deadline = time(NULL) + 10;
  while (!atomic_load(&let_go) && time(NULL) < deadline)
    sched_yield();
}

/* One worker, the counters reset, and a serial on it. */
static gs_workers *one_worker_serial(gs_serial *s) {
  atomic_store(&n_order, 0);
  atomic_store(&let_go, false);
  atomic_store(&busy_count, 0);
  gs_workers *ws = gs_workers_start(1);
  CHECK(ws != NULL);
  gs_serial_init(s, ws, serial_busy);
  return ws;
}

static void a_serial_takes_turns_with_other_work(void) {
  static item items[4];
  static gs_work held = {.run = gate};
  gs_serial s;
  gs_workers *ws = one_worker_serial(&s);
  gs_workers_queue(ws, &held);
  for (int i = 0; i < 3; i++) {
    items[i] = (item){.work = {.run = note}, .index = i};
    CHECK(gs_serial_queue(&s, &items[i].work, false));
  }
  CHECK_EQ(atomic_load(&busy_count), 1); /* once, for the first item */
  items[3] = (item){.work = {.run = note}, .index = 3};
  gs_workers_queue(ws, &items[3].work);
  atomic_store(&let_go, true);
  gs_workers_stop(ws);
  /* The serial's first item, then the other work, then the serial's rest. */
  CHECK_EQ(atomic_load(&n_order), 4);
  CHECK_EQ(order[0], 0);
  CHECK_EQ(order[1], 3);
  CHECK_EQ(order[2], 1);
  CHECK_EQ(order[3], 2);
  CHECK_EQ(atomic_load(&busy_count), 0);
  gs_serial_destroy(&s);
}

static void an_idle_serial_refuses_when_asked(void) {
  static item items[2];
  gs_serial s;
  gs_workers *ws = one_worker_serial(&s);
  items[0] = (item){.work = {.run = note}, .index = 0};
  CHECK(!gs_serial_queue(&s, &items[0].work, true)); /* idle: the caller runs it */
  CHECK_EQ(atomic_load(&busy_count), 0);
  static gs_work held = {.run = gate};
  gs_workers_queue(ws, &held);
  CHECK(gs_serial_queue(&s, &items[0].work, false));
  items[1] = (item){.work = {.run = note}, .index = 1};
  CHECK(gs_serial_queue(&s, &items[1].work, true)); /* item 0 has not run: behind it */
  atomic_store(&let_go, true);
  gs_workers_stop(ws);
  CHECK_EQ(atomic_load(&n_order), 2);
  CHECK_EQ(order[0], 0);
  CHECK_EQ(order[1], 1);
  CHECK_EQ(atomic_load(&busy_count), 0);
  gs_serial_destroy(&s);
}

static const gs_test tests[] = {
    {"one_thread_runs_them_in_order", one_thread_runs_them_in_order},
    {"several_threads_run_at_once", several_threads_run_at_once},
    {"bad_counts_are_refused", bad_counts_are_refused},
    {"a_serial_runs_one_at_a_time_in_order", a_serial_runs_one_at_a_time_in_order},
    {"a_serial_takes_turns_with_other_work", a_serial_takes_turns_with_other_work},
    {"an_idle_serial_refuses_when_asked", an_idle_serial_refuses_when_asked},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "workers", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}

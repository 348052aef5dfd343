/* test_pipeline.c - the engine's pipeline: order kept and nothing lost or
 * duplicated under back-pressure with several threads per stage, the end
 * of the input found by several source threads, cancellation mid-run, an
 * error in one stage stopping the rest, and the slowest stage named. */
#include "harness.h"

#include "engine/pipeline.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SLOTS = 4, N = 2000 };

typedef struct test_ctx {
  int64_t slot_seq[16]; /* what each slot holds (up to 16 slots) */
  int64_t total;           /* items the source has */
  int64_t next_expected;   /* the sink's check of order */
  int64_t seen;
  bool disorder;
  int64_t fail_at;         /* the middle stage fails here (-1: never) */
  int64_t cancel_at;
  atomic_bool cancel;
  int64_t sink_max;
  unsigned sleep_us_mid;
} test_ctx;

static void pause_us(unsigned us) {
  if (us) {
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
  }
}

static int source(void *p, int slot, int64_t seq) {
  test_ctx *c = p;
  if (seq >= c->total)
    return 1;
  c->slot_seq[slot] = seq;
  pause_us((unsigned)(rand() % 50));
  return 0;
}

static int middle(void *p, int slot, int64_t seq) {
  test_ctx *c = p;
  if (c->slot_seq[slot] != seq)
    c->disorder = true;
  if (seq == c->fail_at)
    return gs_error(GS_EIO, "disk on fire at item %lld", (long long)seq);
  if (seq == c->cancel_at)
    atomic_store(&c->cancel, true);
  pause_us(c->sleep_us_mid ? c->sleep_us_mid : (unsigned)(rand() % 200));
  return 0;
}

static int sink(void *p, int slot, int64_t seq) {
  test_ctx *c = p;
  if (seq != c->next_expected || c->slot_seq[slot] != seq)
    c->disorder = true;
  c->next_expected = seq + 1;
  c->seen++;
  if (seq > c->sink_max)
    c->sink_max = seq;
  return 0;
}

static test_ctx *new_ctx(void) {
  test_ctx *c = calloc(1, sizeof *c);
  c->total = N;
  c->fail_at = c->cancel_at = -1;
  c->sink_max = -1;
  atomic_init(&c->cancel, false);
  return c;
}

static void order_kept_under_back_pressure(void) {
  srand(3);
  test_ctx *c = new_ctx();
  gs_pipeline_stage stages[] = {{"ingest", 1, source, c, false}, {"preprocess", 4, middle, c, false},
                                {"write", 1, sink, c, false}};
  gs_pipeline_result r;
  CHECK_OK(gs_pipeline_run(stages, 3, SLOTS, NULL, &r));
  CHECK(!c->disorder);
  CHECK_EQ(c->seen, N);
  CHECK_EQ(r.items, N);
  for (int k = 0; k < 3; k++)
    CHECK_EQ(r.stages[k].items, N);
  CHECK_STR(r.stages[1].name, "preprocess");
  CHECK(r.failed_stage == -1 && !r.cancelled);
  free(c);
}

static void several_sources_find_the_end(void) {
  srand(4);
  test_ctx *c = new_ctx();
  c->total = 777;
  gs_pipeline_stage stages[] = {{"read", 3, source, c, false}, {"work", 2, middle, c, false},
                                {"write", 1, sink, c, false}};
  gs_pipeline_result r;
  CHECK_OK(gs_pipeline_run(stages, 3, 8, NULL, &r));
  CHECK(!c->disorder);
  CHECK_EQ(c->seen, 777);
  CHECK_EQ(r.items, 777);
  /* An empty input is a run of nothing. */
  c->total = 0;
  c->seen = 0;
  c->next_expected = 0;
  CHECK_OK(gs_pipeline_run(stages, 3, 8, NULL, &r));
  CHECK_EQ(r.items, 0);
  CHECK_EQ(c->seen, 0);
  free(c);
}

static void cancel_stops_mid_run(void) {
  test_ctx *c = new_ctx();
  c->total = 1000000; /* would take minutes */
  c->cancel_at = 100;
  c->sleep_us_mid = 100;
  gs_pipeline_stage stages[] = {{"ingest", 1, source, c, false}, {"work", 2, middle, c, false},
                                {"write", 1, sink, c, false}};
  gs_pipeline_result r;
  CHECK_ERR(gs_pipeline_run(stages, 3, SLOTS, &c->cancel, &r), GS_ECANCELED);
  CHECK(r.cancelled);
  CHECK(r.items >= 90 && r.items < 1000);
  CHECK(!c->disorder);
  free(c);
}

static void error_stops_every_stage(void) {
  test_ctx *c = new_ctx();
  c->fail_at = 50;
  gs_pipeline_stage stages[] = {{"ingest", 2, source, c, false}, {"preprocess", 3, middle, c, false},
                                {"write", 1, sink, c, false}};
  gs_pipeline_result r;
  CHECK_ERR(gs_pipeline_run(stages, 3, SLOTS, NULL, &r), GS_EIO);
  CHECK_EQ(r.failed_stage, 1);
  CHECK_MSG(strstr(r.error, "preprocess: disk on fire at item 50"), "error: %s", r.error);
  CHECK_MSG(strstr(gs_error_detail(), "disk on fire"), "detail: %s", gs_error_detail());
  CHECK(c->sink_max < 50); /* nothing after the failed item reached the end */
  CHECK(!c->disorder);
  free(c);
}

static void slowest_stage_is_named(void) {
  test_ctx *c = new_ctx();
  c->total = 200;
  c->sleep_us_mid = 1000;
  gs_pipeline_stage stages[] = {{"ingest", 1, source, c, false}, {"compute", 1, middle, c, false},
                                {"write", 1, sink, c, false}};
  gs_pipeline_result r;
  CHECK_OK(gs_pipeline_run(stages, 3, SLOTS, NULL, &r));
  CHECK_EQ(gs_pipeline_slowest(&r), 1);
  /* The others waited on it: the source for free slots, the sink for items. */
  CHECK(r.stages[0].wait_in_ns > r.stages[0].busy_ns);
  CHECK(r.stages[2].wait_in_ns > r.stages[2].busy_ns);
  free(c);
}

/* run_through: stages of one thread that the thread before them may run
 * when idle. Three source threads race to hand items on; the middle stage
 * must still run one item at a time, in order, and the sink see them all
 * in order. With a slow source and nothing else in flight, items cross on
 * the source's thread. */
typedef struct through_ctx {
  test_ctx base;
  atomic_int in_middle;
  bool overlapped;
  int64_t middle_next;
  pthread_t source_thread[16];
  int64_t same_thread;
  unsigned source_sleep_us;
} through_ctx;

static int through_source(void *p, int slot, int64_t seq) {
  through_ctx *t = p;
  if (seq >= t->base.total)
    return 1;
  t->base.slot_seq[slot] = seq;
  t->source_thread[slot] = pthread_self();
  pause_us(t->source_sleep_us ? t->source_sleep_us : (unsigned)(rand() % 50));
  return 0;
}

static int through_middle(void *p, int slot, int64_t seq) {
  through_ctx *t = p;
  if (atomic_fetch_add(&t->in_middle, 1) != 0)
    t->overlapped = true;
  if (seq != t->middle_next || t->base.slot_seq[slot] != seq)
    t->base.disorder = true;
  t->middle_next = seq + 1;
  if (pthread_equal(t->source_thread[slot], pthread_self()))
    t->same_thread++;
  pause_us((unsigned)(rand() % 30));
  atomic_fetch_sub(&t->in_middle, 1);
  return 0;
}

static void run_through_keeps_order_and_one_at_a_time(void) {
  srand(5);
  through_ctx *t = calloc(1, sizeof *t);
  t->base.total = N;
  t->base.fail_at = t->base.cancel_at = -1;
  atomic_init(&t->in_middle, 0);
  gs_pipeline_stage stages[] = {{"read", 3, through_source, t, false},
                                {"work", 1, through_middle, t, true},
                                {"write", 1, sink, &t->base, true}};
  gs_pipeline_result r;
  CHECK_OK(gs_pipeline_run(stages, 3, 8, NULL, &r));
  CHECK(!t->overlapped);
  CHECK(!t->base.disorder);
  CHECK_EQ(t->base.seen, N);
  CHECK_EQ(r.items, N);
  for (int k = 0; k < 3; k++)
    CHECK_EQ(r.stages[k].items, N);
  /* A slow single source: the pipeline is idle whenever an item comes. */
  memset(t, 0, sizeof *t);
  t->base.total = 50;
  t->base.fail_at = t->base.cancel_at = -1;
  t->source_sleep_us = 300;
  stages[0].threads = 1;
  CHECK_OK(gs_pipeline_run(stages, 3, 4, NULL, &r));
  CHECK(!t->base.disorder && t->base.seen == 50);
  CHECK_MSG(t->same_thread > 0, "no item ran through on the source's thread");
  free(t);
}

static void bad_arguments(void) {
  test_ctx *c = new_ctx();
  gs_pipeline_stage stages[] = {{"a", 0, source, c, false}};
  gs_pipeline_result r;
  CHECK_ERR(gs_pipeline_run(stages, 1, 4, NULL, &r), GS_EINVAL);
  stages[0].threads = 1;
  CHECK_ERR(gs_pipeline_run(stages, 1, 0, NULL, &r), GS_EINVAL);
  CHECK_ERR(gs_pipeline_run(stages, 0, 4, NULL, &r), GS_EINVAL);
  free(c);
}

int main(int argc, char **argv) {
  static const gs_test tests[] = {
      {"order_kept_under_back_pressure", order_kept_under_back_pressure},
      {"run_through_keeps_order_and_one_at_a_time", run_through_keeps_order_and_one_at_a_time},
      {"several_sources_find_the_end", several_sources_find_the_end},
      {"cancel_stops_mid_run", cancel_stops_mid_run},
      {"error_stops_every_stage", error_stops_every_stage},
      {"slowest_stage_is_named", slowest_stage_is_named},
      {"bad_arguments", bad_arguments},
      {NULL, NULL},
  };
  gs_test_suite suite = {.name = "pipeline", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}

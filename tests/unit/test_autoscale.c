/* test_autoscale.c - the instance-count policy of "count": "auto"
 * (src/api/autoscale.c), tick by tick on made-up samples. */
#include "harness.h"

#include "api/autoscale.h"

#define TICK 250000000ull
#define MS 1000000ull

static gs_autoscale policy(int min, int max) {
  gs_autoscale a = {.cfg = {.min = min, .max = max, .budget_ns = 2 * MS, .down_ns = 1000 * MS}};
  return a;
}

/* Tick number t: `waited` requests whose runs began, each after `wait_us`;
 * instances busy `busy_ms` in all. */
static int tick(gs_autoscale *a, int t, int active, uint64_t waited, uint64_t wait_us,
                uint64_t busy_ms) {
  gs_autoscale_sample s = {.now_ns = 10000 * MS + (uint64_t)t * TICK, .tick_ns = TICK,
                           .waited = waited, .waited_ns = waited * wait_us * 1000,
                           .busy_ns = busy_ms * MS};
  return gs_autoscale_step(a, &s, active);
}

static void one_slow_tick_is_noise_two_add_one(void) {
  gs_autoscale a = policy(1, 4);
  CHECK_EQ(tick(&a, 1, 1, 10, 5000, 250), 0);  /* over budget once */
  CHECK_EQ(tick(&a, 2, 1, 10, 1000, 250), 0);  /* under: the count starts again */
  CHECK_EQ(tick(&a, 3, 1, 10, 5000, 250), 0);
  CHECK_EQ(tick(&a, 4, 1, 10, 5000, 250), 1);  /* twice in a row */
  /* Just added: two ticks to show what it does before the next. */
  CHECK_EQ(tick(&a, 5, 2, 10, 5000, 500), 0);
  CHECK_EQ(tick(&a, 6, 2, 10, 5000, 500), 1);
}

static void never_past_max(void) {
  gs_autoscale a = policy(1, 2);
  for (int t = 1; t < 20; t++)
    CHECK_EQ(tick(&a, t, 2, 10, 50000, 500), 0);
}

static void a_light_load_for_the_window_takes_one_away(void) {
  gs_autoscale a = policy(1, 4);
  /* Three instances busy 300 ms a tick in all: two would be busy 60% of
   * the time, which is not light. */
  for (int t = 1; t < 10; t++)
    CHECK_EQ(tick(&a, t, 3, 10, 0, 300), 0);
  /* 200 ms in all: two would be busy 40%: light; after the 1 s window, one goes. */
  int t = 10, step = 0;
  for (; t < 20 && !step; t++)
    step = tick(&a, t, 3, 10, 0, 200);
  CHECK_EQ(step, -1);
  CHECK_EQ(t, 14); /* ticks 10..13: light since tick 10 began, 1 s at tick 13 */
  /* The next waits a whole window again. */
  CHECK_EQ(tick(&a, 14, 2, 10, 0, 50), 0);
  CHECK_EQ(tick(&a, 15, 2, 10, 0, 50), 0);
  CHECK_EQ(tick(&a, 16, 2, 10, 0, 50), 0);
  CHECK_EQ(tick(&a, 17, 2, 10, 0, 50), -1);
  /* At min: stays. */
  for (int k = 18; k < 30; k++)
    CHECK_EQ(tick(&a, k, 1, 0, 0, 0), 0);
}

static void waits_past_half_the_budget_are_not_light(void) {
  gs_autoscale a = policy(1, 4);
  for (int t = 1; t < 20; t++) /* 1.5 ms of a 2 ms budget: neither over nor light */
    CHECK_EQ(tick(&a, t, 2, 10, 1500, 10), 0);
}

static void to_none_only_when_nothing_arrives_and_back_at_once(void) {
  gs_autoscale a = policy(0, 2);
  for (int t = 1; t < 20; t++)
    CHECK_EQ(tick(&a, t, 1, 1, 0, 1), 0); /* a request a tick keeps the last one */
  int step = 0;
  for (int t = 20; t < 30 && !step; t++)
    step = tick(&a, t, 1, 0, 0, 0);
  CHECK_EQ(step, -1);
  /* None running, one request queued: up, without waiting for a trend. */
  gs_autoscale_sample s = {.now_ns = 20000 * MS, .tick_ns = TICK, .oldest_ns = 1};
  CHECK_EQ(gs_autoscale_step(&a, &s, 0), 1);
}

static void a_refused_step_pauses_the_next_tries(void) {
  gs_autoscale a = policy(1, 4);
  CHECK_EQ(tick(&a, 1, 1, 10, 5000, 250), 0);
  CHECK_EQ(tick(&a, 2, 1, 10, 5000, 250), 1);
  gs_autoscale_refused(&a, 10000 * MS + 2 * TICK);
  /* Two seconds of no tries, however long the waits. */
  for (int t = 3; t < 10; t++)
    CHECK_EQ(tick(&a, t, 1, 10, 50000, 250), 0);
  int step = 0, t = 10;
  for (; t < 20 && !step; t++)
    step = tick(&a, t, 1, 10, 50000, 250);
  CHECK_EQ(step, 1);
  CHECK(t - 1 <= 12);
}

static const gs_test tests[] = {
    {"one_slow_tick_is_noise_two_add_one", one_slow_tick_is_noise_two_add_one},
    {"never_past_max", never_past_max},
    {"a_light_load_for_the_window_takes_one_away", a_light_load_for_the_window_takes_one_away},
    {"waits_past_half_the_budget_are_not_light", waits_past_half_the_budget_are_not_light},
    {"to_none_only_when_nothing_arrives_and_back_at_once",
     to_none_only_when_nothing_arrives_and_back_at_once},
    {"a_refused_step_pauses_the_next_tries", a_refused_step_pauses_the_next_tries},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "autoscale", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}

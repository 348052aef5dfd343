/* test_plan_profile.c - a plan's profile (engine.h: gs_plan_profile_start,
 * gs_plan_profile): nothing before it starts, then every run adds each
 * kernel's time, in run order, named by op and node. */
#include "harness.h"

#include "engine/engine.h"
#include "hal/hal.h"

#include <stdlib.h>

static gs_model *model;
static gs_plan *plan;
static float pixels[64], probs[10];

static void setup(void) {
  CHECK(gs_hal_init() == 0);
  CHECK(gs_engine_init() == 0);
  CHECK(gs_model_load(GS_ROOT "/models/digits/1/model.onnx", &model) == 0);
  gs_shape shape = {.rank = 2, .dims = {1, 64}};
  gs_plan_options po = {.threads = 1};
  CHECK(gs_plan_create(model, &shape, &po, &plan) == 0);
}

static void teardown(void) {
  gs_plan_destroy(plan);
  gs_model_free(model);
  gs_hal_shutdown();
}

static void run_once(void) {
  const void *in[] = {pixels};
  void *out[] = {probs};
  CHECK(gs_plan_run(plan, in, out) == 0);
}

static void test_no_profile_until_started(void) {
  run_once();
  uint64_t runs = 99;
  CHECK(gs_plan_profile(plan, NULL, 0, &runs) == 0);
  CHECK(runs == 0);
}

static void test_each_run_adds_each_kernels_time(void) {
  CHECK(gs_plan_profile_start(plan) == 0);
  for (int i = 0; i < 3; i++)
    run_once();
  gs_plan_report r;
  gs_plan_get_report(plan, &r);
  uint64_t runs = 0;
  int n = gs_plan_profile(plan, NULL, 0, &runs);
  CHECK(n >= r.steps && r.steps > 0);
  CHECK(runs == 3);
  gs_plan_step_time *t = calloc((size_t)n, sizeof *t);
  CHECK(t && gs_plan_profile(plan, t, n, &runs) == n);
  uint64_t total = 0;
  bool gemm = false;
  for (int s = 0; s < n; s++) {
    CHECK(t[s].op_type && t[s].node_name);
    gemm = gemm || strcmp(t[s].op_type, "Gemm") == 0;
    total += t[s].ns;
  }
  CHECK_MSG(gemm, "the digits MLP's Gemm kernels are named");
  CHECK(total > 0);
  /* Starting again keeps what was summed; a fourth run adds to it. */
  CHECK(gs_plan_profile_start(plan) == 0);
  run_once();
  uint64_t total4 = 0;
  CHECK(gs_plan_profile(plan, t, n, &runs) == n && runs == 4);
  for (int s = 0; s < n; s++)
    total4 += t[s].ns;
  CHECK(total4 > total);
  free(t);
}

static const gs_test tests[] = {
    {"no_profile_until_started", test_no_profile_until_started},
    {"each_run_adds_each_kernels_time", test_each_run_adds_each_kernels_time},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {"plan_profile", tests, setup, teardown, 60};
  return gs_test_run(&suite, argc, argv);
}

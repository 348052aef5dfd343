/* test_plan_placement.c - sections of a plan placed off its device
 * (engine.h: gs_plan_options.host_sections, device_sections): the digits
 * model composed twice side by side, steps "a" and "b", each reading the
 * pixels. Placed or not, the outputs are the same; the report counts what
 * crosses, and a host section's weights stay in host memory. */
#include "harness.h"

#include "engine/engine.h"
#include "engine/model_compose.h"
#include "hal/hal.h"

#include <stdlib.h>

#define ROWS 3

static float pixels[ROWS * 64];
static const char *const sections_b[] = {"b"};

static void setup(void) {
  CHECK(gs_hal_init() == 0);
  CHECK(gs_engine_init() == 0);
  for (int i = 0; i < ROWS * 64; i++)
    pixels[i] = (float)((i * 7) % 17);
}

static void teardown(void) { gs_hal_shutdown(); }

/* pixels -> a -> P1, pixels -> b -> P2. The caller frees it. */
static gs_model *two_steps(void) {
  static const char *const from[] = {"pixels", "probs"};
  static const char *const to_a[] = {"pixels", "P1"}, *const to_b[] = {"pixels", "P2"};
  static const char *const inputs[] = {"pixels"}, *const outputs[] = {"P1", "P2"};
  gs_model *a, *b, *whole;
  CHECK_OK(gs_model_load(GS_ROOT "/models/digits/1/model.onnx", &a));
  CHECK_OK(gs_model_load(GS_ROOT "/models/digits/1/model.onnx", &b));
  gs_compose_step steps[] = {{.model = a, .name = "a", .n_map = 2, .from = from, .to = to_a},
                             {.model = b, .name = "b", .n_map = 2, .from = from, .to = to_b}};
  CHECK_OK(gs_model_compose(steps, 2, inputs, 1, outputs, 2, "two", &whole));
  return whole;
}

/* Both outputs of one run, and the plan's report. */
static void run(gs_model *m, const gs_plan_options *opt, float out[2][ROWS * 10],
                gs_plan_report *r) {
  gs_shape shape = {.rank = 2, .dims = {ROWS, 64}};
  gs_plan *plan;
  CHECK_OK(gs_plan_create(m, &shape, opt, &plan));
  const void *in[] = {pixels};
  void *outs[] = {out[0], out[1]};
  CHECK_OK(gs_plan_run(plan, in, outs));
  gs_buffer_t *dev_in, *dev_out[2];
  gs_pool_t *pool = gs_device_pool(gs_plan_device(plan), GS_MEM_DEVICE);
  CHECK_OK(gs_pool_alloc(pool, sizeof pixels, NULL, &dev_in));
  for (int k = 0; k < 2; k++)
    CHECK_OK(gs_pool_alloc(pool, ROWS * 10 * sizeof(float), NULL, &dev_out[k]));
  gs_stream_t *s;
  CHECK_OK(gs_stream_create_ex(gs_plan_device(plan), GS_STREAM_INLINE, &s));
  CHECK_OK(gs_stream_copy_h2d(s, dev_in, 0, pixels, sizeof pixels));
  CHECK_OK(gs_stream_synchronize(s));
  CHECK_OK(gs_plan_run_buffers(plan, &dev_in, dev_out)); /* the same from device buffers */
  float again[ROWS * 10];
  for (int k = 0; k < 2; k++) {
    CHECK_OK(gs_stream_copy_d2h(s, again, dev_out[k], 0, sizeof again));
    CHECK_OK(gs_stream_synchronize(s));
    CHECK(memcmp(again, out[k], sizeof again) == 0);
    gs_buffer_free(dev_out[k], NULL);
  }
  gs_buffer_free(dev_in, NULL);
  gs_stream_destroy(s);
  gs_plan_get_report(plan, r);
  gs_plan_destroy(plan);
}

static void check_close(const float *x, const float *y, int n) {
  for (int i = 0; i < n; i++)
    CHECK_MSG(x[i] - y[i] < 1e-5f && y[i] - x[i] < 1e-5f, "output %d: %g and %g", i,
              (double)x[i], (double)y[i]);
}

static void test_a_section_on_another_device_is_a_chain(void) {
  gs_device_t *cpu = gs_hal_device_find("cpu0"), *other = gs_hal_device_find("testcpu0");
  CHECK_MSG(cpu && other, "cpu0 and testcpu0 (GPUSRV_PLUGIN_PATH names the test plugins)");
  gs_model *m = two_steps();
  float one[2][ROWS * 10], split[2][ROWS * 10];
  gs_plan_report r1, r2;
  run(m, &(gs_plan_options){.device = cpu, .threads = 1}, one, &r1);
  gs_device_t *const devices[] = {other};
  run(m, &(gs_plan_options){.device = cpu, .threads = 1, .device_sections = sections_b,
                            .section_devices = devices, .n_device_sections = 1},
      split, &r2);
  CHECK(r1.chain_parts == 0 && r2.chain_parts == 2);
  CHECK(r2.other_devices_bytes > 0);
  /* What it holds on testcpu0, for the ledger. */
  gs_shape shape = {.rank = 2, .dims = {ROWS, 64}};
  gs_plan *plan;
  CHECK_OK(gs_plan_create(m, &shape,
                          &(gs_plan_options){.device = cpu, .threads = 1,
                                             .device_sections = sections_b,
                                             .section_devices = devices, .n_device_sections = 1},
                          &plan));
  gs_device_t *held[2] = {NULL, NULL};
  uint64_t bytes[2] = {0, 0};
  CHECK_EQ(gs_plan_other_devices(plan, held, bytes, 2), 1);
  CHECK(held[0] == other && bytes[0] == r2.other_devices_bytes);
  gs_plan_destroy(plan);
  CHECK(r2.weights_bytes < r1.weights_bytes); /* b's weights are on testcpu0 */
  for (int k = 0; k < 2; k++)
    check_close(split[k], one[k], ROWS * 10);
  /* Placed on the plan's own device: no chain. */
  gs_device_t *const same[] = {cpu};
  run(m, &(gs_plan_options){.device = cpu, .threads = 1, .device_sections = sections_b,
                            .section_devices = same, .n_device_sections = 1},
      split, &r2);
  CHECK(r2.chain_parts == 0);
  gs_model_free(m);
}

static void test_a_host_section_runs_on_the_host_and_keeps_its_weights_there(void) {
  gs_device_t *dev = gs_hal_device_find("opencl0");
  if (!dev) {
    printf("  (skipped: no opencl0, a device whose memory is not the host's)\n");
    return;
  }
  gs_model *m = two_steps();
  float on_device[2][ROWS * 10], on_host[2][ROWS * 10];
  gs_plan_report r1, r2;
  run(m, &(gs_plan_options){.device = dev}, on_device, &r1);
  run(m, &(gs_plan_options){.device = dev, .host_sections = sections_b, .n_host_sections = 1},
      on_host, &r2);
  CHECK(r1.host_steps == 0 && r2.host_steps > 1 && r2.cpu_fallback == 0);
  /* The pixels go down once, P2 up once; b's values between its steps stay. */
  CHECK_EQ(r2.host_copies[1], 1);
  CHECK_EQ(r2.host_copies[0], 1);
  CHECK(r2.weights_bytes < r1.weights_bytes); /* b's weights stay on the host */
  CHECK(r2.arena_bytes < r1.arena_bytes);     /* and the values between its steps */
  for (int k = 0; k < 2; k++)
    check_close(on_host[k], on_device[k], ROWS * 10);
  gs_model_free(m);
}

static const gs_test tests[] = {
    {"a_section_on_another_device_is_a_chain", test_a_section_on_another_device_is_a_chain},
    {"a_host_section_runs_on_the_host_and_keeps_its_weights_there",
     test_a_host_section_runs_on_the_host_and_keeps_its_weights_there},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {"plan_placement", tests, setup, teardown, 120};
  return gs_test_run(&suite, argc, argv);
}

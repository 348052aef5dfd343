/* models.c - `gs-bench-models MODEL.onnx [--batch N] [--iters K] [--seconds S] [--device ID]
 * [--threads T] [--precision P] [--profile] [--bound]`:
 * runs a model through gpusrv's engine (on the first device, or ID) on
 * random inputs and prints one JSON
 * line with the latency percentiles and throughput of whole runs (input
 * copy in, every kernel, output copy out). With --bound the inputs and
 * outputs stay in buffers of the device (gs_plan_run_buffers), and a run is
 * its kernels alone, as a library's own product is timed. bench/models.py
 * runs it beside onnxruntime. Symbolic dimensions take the batch size. */
#include "base/clock.h"
#include "engine/engine.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int by_ns_desc(const void *a, const void *b) {
  uint64_t x = ((const gs_plan_step_time *)a)->ns, y = ((const gs_plan_step_time *)b)->ns;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* --profile, on stderr: the time per run of each op type (kernels summed),
 * then of the slowest kernels. */
static void print_profile(gs_plan *plan) {
  uint64_t runs;
  int n = gs_plan_profile(plan, NULL, 0, &runs);
  gs_plan_step_time *steps = malloc(sizeof *steps * (size_t)(n + 1));
  gs_plan_step_time *ops = calloc((size_t)n + 1, sizeof *ops); /* one per op type */
  if (!steps || !ops || runs == 0 || n == 0) {
    free(steps);
    free(ops);
    return;
  }
  gs_plan_profile(plan, steps, n, &runs);
  int n_ops = 0;
  uint64_t total = 0;
  for (int s = 0; s < n; s++) {
    int k = 0;
    while (k < n_ops && strcmp(ops[k].op_type, steps[s].op_type))
      k++;
    if (k == n_ops)
      ops[n_ops++] = (gs_plan_step_time){.op_type = steps[s].op_type, .node_name = ""};
    ops[k].ns += steps[s].ns;
    total += steps[s].ns;
  }
  if (total == 0)
    total = 1; /* shares of nothing: 0%, not NaN */
  qsort(ops, (size_t)n_ops, sizeof *ops, by_ns_desc);
  qsort(steps, (size_t)n, sizeof *steps, by_ns_desc);
  fprintf(stderr, "profile over %llu runs: kernels %.1f us per run\n", (unsigned long long)runs,
          (double)total / (double)runs / 1e3);
  for (int k = 0; k < n_ops; k++)
    fprintf(stderr, "  %-24s %10.1f us  %5.1f%%\n", ops[k].op_type,
            (double)ops[k].ns / (double)runs / 1e3, 100.0 * (double)ops[k].ns / (double)total);
  fprintf(stderr, "slowest kernels:\n");
  for (int s = 0; s < n && s < (getenv("GS_PROFILE_ALL") ? n : 12); s++)
    fprintf(stderr, "  %-24s %-32s %10.1f us\n", steps[s].op_type, steps[s].node_name,
            (double)steps[s].ns / (double)runs / 1e3);
  free(steps);
  free(ops);
}

/* --bound: buffers of the plan's device for its inputs (their values copied
 * in) and outputs. Returns 0 or a GS_E code. */
static int bind_buffers(gs_plan *plan, void *const *inputs, gs_buffer_t **in_buf,
                        gs_buffer_t **out_buf) {
  gs_device_t *dev = gs_plan_device(plan);
  gs_pool_t *pool = gs_device_pool(dev, GS_MEM_DEVICE);
  gs_stream_t *s = NULL;
  int rc = gs_stream_create(dev, &s);
  for (int i = 0; rc == 0 && i < gs_plan_input_count(plan); i++) {
    gs_plan_value_info v;
    gs_plan_input(plan, i, &v);
    rc = gs_pool_alloc(pool, v.bytes ? v.bytes : 1, NULL, &in_buf[i]);
    if (rc == 0 && v.bytes)
      rc = gs_stream_copy_h2d(s, in_buf[i], 0, inputs[i], v.bytes);
  }
  for (int i = 0; rc == 0 && i < gs_plan_output_count(plan); i++) {
    gs_plan_value_info v;
    gs_plan_output(plan, i, &v);
    rc = gs_pool_alloc(pool, v.bytes ? v.bytes : 1, NULL, &out_buf[i]);
  }
  if (rc == 0)
    rc = gs_stream_synchronize(s);
  if (s)
    gs_stream_destroy(s);
  return rc;
}

/* One timed run: whole (copies in and out) or on bound buffers. */
static int run_once(gs_plan *plan, int n_outputs, void *const *inputs, gs_buffer_t *const *in_buf,
                    gs_buffer_t *const *out_buf, bool bound) {
  if (bound)
    return gs_plan_run_buffers(plan, in_buf, out_buf);
  void *outputs[16] = {0};
  gs_plan_value_info out_info[16];
  int rc = gs_plan_run_alloc(plan, (const void *const *)inputs, outputs, out_info);
  for (int i = 0; i < n_outputs; i++)
    free(outputs[i]);
  return rc;
}

int main(int argc, char **argv) {
  const char *path = NULL, *device_id = NULL, *precision = "fp32";
  int batch = 1, iters = 200, threads = 0;
  bool profile = false, bound = false;
  double seconds = 3.0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--profile"))
      profile = true;
    else if (!strcmp(argv[i], "--bound"))
      bound = true;
    else if (!strcmp(argv[i], "--device") && i + 1 < argc)
      device_id = argv[++i];
    else if (!strcmp(argv[i], "--precision") && i + 1 < argc)
      precision = argv[++i];
    else if (argv[i][0] != '-' && !path)
      path = argv[i];
    else {
      fprintf(stderr, "usage: gs-bench-models MODEL.onnx [--batch N] [--iters K] [--seconds S] "
                      "[--device ID] [--threads T] [--precision P] [--profile] [--bound]\n");
      return 2;
    }
  }
  if (!path || batch < 1 || iters < 1 || iters > 1000000 || threads < 0) {
    fprintf(stderr, "gs-bench-models: need a model, a positive batch and 1..1000000 iterations\n");
    return 2;
  }
  gs_model *m = NULL;
  gs_plan *plan = NULL;
  if (gs_hal_init() < 0 || gs_engine_init() < 0 || gs_model_load(path, &m) < 0) {
    fprintf(stderr, "gs-bench-models: %s\n", gs_error_detail());
    return 1;
  }
  gs_shape shapes[16];
  void *inputs[16] = {0};
  if (m->n_inputs > 16 || m->n_outputs > 16) {
    fprintf(stderr, "gs-bench-models: at most 16 inputs and outputs\n");
    return 1;
  }
  for (int i = 0; i < m->n_inputs; i++) {
    shapes[i].rank = m->inputs[i].rank;
    for (int d = 0; d < shapes[i].rank; d++)
      shapes[i].dims[d] = m->inputs[i].dims[d] >= 0 ? m->inputs[i].dims[d] : batch;
  }
  gs_plan_options po = {.threads = threads};
  if (!gs_precision_from_name(precision, &po.precision)) {
    fprintf(stderr, "gs-bench-models: no precision %s\n", precision);
    return 2;
  }
  for (int d = 0; device_id && d < gs_hal_device_count(); d++)
    if (!strcmp(gs_device_get_info(gs_hal_device(d))->id, device_id))
      po.device = gs_hal_device(d);
  if (device_id && !po.device) {
    fprintf(stderr, "gs-bench-models: no device %s here\n", device_id);
    return 1;
  }
  srand(1);
  for (int i = 0; i < m->n_inputs; i++) {
    size_t bytes = (size_t)gs_shape_numel(&shapes[i]) * gs_dtype_size(m->inputs[i].dtype);
    inputs[i] = malloc(bytes + 1);
    for (size_t b = 0; inputs[i] && b + 4 <= bytes; b += 4) {
      float v = (float)rand() / (float)RAND_MAX - 0.5f;
      memcpy((char *)inputs[i] + b, &v, 4);
    }
  }
  /* With the inputs' values: a model whose output sizes depend on them is
   * planned in stages, and each run sizes (allocates) its outputs. */
  po.input_values = (const void *const *)inputs;
  if (gs_plan_create(m, shapes, &po, &plan) < 0) {
    fprintf(stderr, "gs-bench-models: %s\n", gs_error_detail());
    return 1;
  }
  gs_buffer_t *in_buf[16] = {0}, *out_buf[16] = {0};
  if (bound && bind_buffers(plan, inputs, in_buf, out_buf) < 0) {
    fprintf(stderr, "gs-bench-models: %s\n", gs_error_detail());
    return 1;
  }
  for (int w = 0; w < 5; w++) {
    if (run_once(plan, m->n_outputs, inputs, in_buf, out_buf, bound) < 0) {
      fprintf(stderr, "gs-bench-models: %s\n", gs_error_detail());
      return 1;
    }
  }
  if (profile && gs_plan_profile_start(plan) < 0) {
    fprintf(stderr, "gs-bench-models: %s\n", gs_error_detail());
    return 1;
  }
  uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)iters);
  int done = 0;
  uint64_t start = gs_now_ns(), budget = (uint64_t)(seconds * 1e9);
  while (done < iters && (done < 10 || gs_now_ns() - start < budget)) {
    uint64_t t0 = gs_now_ns();
    if (run_once(plan, m->n_outputs, inputs, in_buf, out_buf, bound) < 0) {
      fprintf(stderr, "gs-bench-models: %s\n", gs_error_detail());
      return 1;
    }
    lat[done++] = gs_now_ns() - t0;
  }
  uint64_t total = gs_now_ns() - start;
  qsort(lat, (size_t)done, sizeof *lat, cmp_u64);
  gs_plan_report r;
  gs_plan_get_report(plan, &r);
  printf("{\"batch\": %d, \"runs\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f, "
         "\"samples_per_s\": %.1f, \"kernels\": %d, \"arena_bytes\": %llu, \"naive_bytes\": %llu}\n",
         batch, done, (double)lat[done / 2] / 1e3, (double)lat[(size_t)(done * 0.99)] / 1e3,
         (double)batch * done / ((double)total / 1e9), r.steps,
         (unsigned long long)r.arena_bytes, (unsigned long long)r.naive_bytes);
  free(lat);
  if (profile)
    print_profile(plan);
  for (int i = 0; i < 16; i++) {
    free(inputs[i]);
    gs_buffer_free(in_buf[i], NULL);
    gs_buffer_free(out_buf[i], NULL);
  }
  gs_plan_destroy(plan);
  gs_model_free(m);
  gs_hal_shutdown();
  return 0;
}

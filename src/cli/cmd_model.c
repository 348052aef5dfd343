/* cmd_model.c - `gpusrv model inspect` and `gpusrv model run`: what an ONNX
 * file holds and whether gpusrv can run it, and one run of it on .npy inputs. */
#include "cli/cli.h"
#include "cli/model_tune.h"
#include "engine/engine.h"
#include "base/fileutil.h"
#include "engine/npy.h"
#include "engine/op.h"
#include "engine/quantize.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct model_opts {
  bool json, report, deterministic, per_channel, write;
  double latency_budget_ms, seconds;
  uint64_t memory_budget;
  gs_cli_list inputs, calibrate;
  const char *outdir, *device, *precision, *method;
  long long threads;
} model_opts;

static const gs_cli_option model_options[] = {
    GS_CLI_OPT("json", GS_OPT_BOOL, model_opts, json, NULL, "inspect: print JSON"),
    {"input", 'i', GS_OPT_LIST, offsetof(model_opts, inputs), "NAME=FILE",
     "run: a .npy file for the model input NAME (one per input)", 0, 0},
    {"output", 'o', GS_OPT_STRING, offsetof(model_opts, outdir), "PATH",
     "run: the directory the outputs go to (created if missing); quantize: the file to write",
     0, 0},
    GS_CLI_OPT("calibrate", GS_OPT_LIST, model_opts, calibrate, "[NAME=]FILE",
               "quantize: a .npy of calibration samples (along its first dimension) for input "
               "NAME; the name may be left out for a model of one input"),
    GS_CLI_OPT("per-channel", GS_OPT_BOOL, model_opts, per_channel, NULL,
               "quantize: a weight scale per output channel (default: one per tensor)"),
    GS_CLI_OPT("method", GS_OPT_STRING, model_opts, method, "M",
               "quantize: how the activations' ranges are chosen: minmax (default), percentile "
               "(99.999%), entropy (least KL divergence)"),
    GS_CLI_OPT("device", GS_OPT_STRING, model_opts, device, "ID",
               "run, tune: the device, as `gpusrv smi` names it (default: the first)"),
    GS_CLI_OPT_RANGE("latency-budget", GS_OPT_REAL, model_opts, latency_budget_ms, "MS",
                     "tune: the p99 a run may take, in milliseconds (default: none)", 0.001,
                     3.6e6),
    GS_CLI_OPT("memory-budget", GS_OPT_BYTES, model_opts, memory_budget, "BYTES",
               "tune: the device memory the model's instances may hold, such as 2G "
               "(default: none)"),
    GS_CLI_OPT_RANGE("seconds", GS_OPT_REAL, model_opts, seconds, "S",
                     "tune: how long each configuration runs (default 0.5)", 0.05, 600),
    GS_CLI_OPT("write", GS_OPT_BOOL, model_opts, write, NULL,
               "tune: write the best configuration into MODEL_DIR/config.json"),
    GS_CLI_OPT("precision", GS_OPT_STRING, model_opts, precision, "P",
               "run: fp32 (default), fp16 or bf16: weights and tensors kept in 16 bits where the "
               "device allows (the CPU computes each op in float32); fp64: kept and computed in "
               "float64. Outputs declared float32 stay float32"),
    GS_CLI_OPT_RANGE("threads", GS_OPT_INT, model_opts, threads, "N",
                     "run: threads the kernels use on the CPU (default: the cores this "
                     "process may run on)", 1, 4096),
    GS_CLI_OPT("deterministic", GS_OPT_BOOL, model_opts, deterministic, NULL,
               "run: the same bits from every run whatever the threads (the CPU's kernels on "
               "one thread; docs/precision.md says what it costs)"),
    GS_CLI_OPT("report", GS_OPT_BOOL, model_opts, report, NULL,
               "run: print the plan: kernels, folded and fused nodes, and the arena's peak bytes "
               "beside the sum of all intermediate tensors"),
    GS_CLI_OPTIONS_END,
};

/* ---- inspect -------------------------------------------------------------------- */

static json_t *shape_json(const gs_value_info *v) {
  if (v->rank < 0)
    return json_null();
  json_t *a = json_array();
  for (int d = 0; d < v->rank; d++)
    json_array_append_new(a, v->dims[d] >= 0    ? json_integer(v->dims[d])
                             : v->dim_params[d] ? json_string(v->dim_params[d])
                                                : json_null());
  return a;
}

static void shape_text(const gs_value_info *v, char *buf, size_t cap) {
  if (v->rank < 0) {
    snprintf(buf, cap, "(unknown)");
    return;
  }
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < v->rank && n < cap; d++) {
    if (v->dims[d] >= 0)
      n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)v->dims[d]);
    else
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", d ? ", " : "",
                            v->dim_params[d] ? v->dim_params[d] : "?");
  }
  if (n < cap)
    snprintf(buf + n, cap - n, "]");
}

typedef struct op_count {
  const char *name;
  int count;
} op_count;

static int count_ops(const gs_model *m, op_count *out, int max) {
  int n = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    int j = 0;
    while (j < n && strcmp(out[j].name, m->nodes[i].op_type) != 0)
      j++;
    if (j == n) {
      if (n == max)
        continue;
      out[n++] = (op_count){m->nodes[i].op_type, 0};
    }
    out[j].count++;
  }
  return n;
}

static int inspect(const char *path, const model_opts *opts) {
  bool json = opts->json;
  gs_model *m;
  if (gs_model_load_ex(path, false, &m) < 0) {
    gs_cli_error("model inspect: %s", gs_error_detail());
    return GS_EXIT_FAILED;
  }
  int support = gs_model_check_support(m);
  char unsupported[1200];
  snprintf(unsupported, sizeof unsupported, "%s", support < 0 ? gs_error_detail() : "");
  uint64_t params = 0, bytes = 0;
  for (int i = 0; i < m->n_inits; i++) {
    params += (uint64_t)gs_shape_numel(&m->inits[i].shape);
    bytes += m->inits[i].bytes;
  }
  op_count ops[256];
  int n_ops = count_ops(m, ops, 256);
  if (json) {
    json_t *o = json_object(), *ins = json_array(), *outs = json_array(), *oc = json_object();
    json_object_set_new(o, "path", json_string(path));
    json_object_set_new(o, "ir_version", json_integer(m->ir_version));
    json_object_set_new(o, "opset", json_integer(m->opset));
    json_object_set_new(o, "producer", m->producer ? json_string(m->producer) : json_null());
    for (int pass = 0; pass < 2; pass++) {
      const gs_value_info *vs = pass ? m->outputs : m->inputs;
      int n = pass ? m->n_outputs : m->n_inputs;
      for (int i = 0; i < n; i++) {
        json_t *v = json_object();
        json_object_set_new(v, "name", json_string(vs[i].name));
        json_object_set_new(v, "dtype", json_string(gs_dtype_name(vs[i].dtype)));
        json_object_set_new(v, "shape", shape_json(&vs[i]));
        json_array_append_new(pass ? outs : ins, v);
      }
    }
    json_object_set_new(o, "inputs", ins);
    json_object_set_new(o, "outputs", outs);
    json_object_set_new(o, "nodes", json_integer(m->n_nodes));
    for (int i = 0; i < n_ops; i++)
      json_object_set_new(oc, ops[i].name, json_integer(ops[i].count));
    json_object_set_new(o, "ops", oc);
    json_object_set_new(o, "parameters", json_integer((json_int_t)params));
    json_object_set_new(o, "parameter_bytes", json_integer((json_int_t)bytes));
    json_object_set_new(o, "initializers", json_integer(m->n_inits));
    json_object_set_new(o, "supported", json_boolean(support == 0));
    json_object_set_new(o, "unsupported", support ? json_string(unsupported) : json_null());
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(o);
  } else {
    printf("Model       %s\n", path);
    printf("Format      ONNX IR %lld, opset %lld%s%s%s\n", (long long)m->ir_version,
           (long long)m->opset, m->producer ? ", made by \"" : "", m->producer ? m->producer : "",
           m->producer ? "\"" : "");
    for (int pass = 0; pass < 2; pass++) {
      const gs_value_info *vs = pass ? m->outputs : m->inputs;
      int n = pass ? m->n_outputs : m->n_inputs;
      for (int i = 0; i < n; i++) {
        char shape[256];
        shape_text(&vs[i], shape, sizeof shape);
        printf("%-11s %-20s %-9s %s\n", i ? "" : pass ? "Outputs" : "Inputs", vs[i].name,
               gs_dtype_name(vs[i].dtype), shape);
      }
    }
    printf("Parameters  %llu in %d initializers (%.1f KiB)\n", (unsigned long long)params,
           m->n_inits, (double)bytes / 1024.0);
    printf("Ops         %d nodes:", m->n_nodes);
    for (int i = 0; i < n_ops; i++)
      printf("%s %s x%d", i ? "," : "", ops[i].name, ops[i].count);
    printf("\nSupported   %s\n", support == 0 ? "yes, every op" : "no (see below)");
  }
  gs_model_free(m);
  if (support < 0) {
    gs_cli_error("model inspect: %s", unsupported);
    return GS_EXIT_FAILED;
  }
  return GS_EXIT_OK;
}

/* ---- run ------------------------------------------------------------------------------ */

#define MAX_INPUTS 64

static void list_inputs(const gs_model *m) {
  fprintf(stderr, "The model's inputs:");
  for (int i = 0; i < m->n_inputs; i++) {
    char shape[256];
    shape_text(&m->inputs[i], shape, sizeof shape);
    fprintf(stderr, "%s %s (%s %s)", i ? "," : "", m->inputs[i].name,
            gs_dtype_name(m->inputs[i].dtype), shape);
  }
  fputc('\n', stderr);
}

static int run(const char *path, const model_opts *opts) {
  bool report = opts->report;
  const char *const *specs = opts->inputs.items, *outdir = opts->outdir, *device_id = opts->device;
  int n_specs = opts->inputs.n;
  gs_precision precision = GS_PRECISION_FP32;
  if (n_specs > MAX_INPUTS)
    return gs_cli_usage_error(&gs_cli_model, "run: at most %d inputs", MAX_INPUTS);
  for (int i = 0; i < n_specs; i++)
    if (!strchr(specs[i], '=') || specs[i][0] == '=')
      return gs_cli_usage_error(&gs_cli_model, "run: -i wants NAME=FILE.npy, got '%s'", specs[i]);
  if (opts->precision && !gs_precision_from_name(opts->precision, &precision))
    return gs_cli_usage_error(&gs_cli_model, "run: --precision is fp32, fp16, bf16 or fp64, not '%s'",
                              opts->precision);
  if (!outdir)
    return gs_cli_usage_error(&gs_cli_model, "run: -o OUTDIR is required");

  int status = GS_EXIT_FAILED;
  gs_model *m = NULL;
  gs_plan *plan = NULL;
  gs_npy inputs[MAX_INPUTS] = {{0}};
  void *outputs[MAX_INPUTS] = {0};
  const void *in_ptrs[MAX_INPUTS];
  gs_shape shapes[MAX_INPUTS];
  if (gs_hal_init() < 0 || gs_engine_init() < 0) {
    gs_cli_error("model run: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  gs_device_t *dev = device_id ? gs_hal_device_find(device_id) : gs_hal_device(0);
  if (!dev) {
    gs_cli_error("model run: no device '%s' (run 'gpusrv smi' to list them)", device_id);
    goto done;
  }
  if (gs_model_load(path, &m) < 0) {
    gs_cli_error("model run: %s", gs_error_detail());
    goto done;
  }
  if (m->n_inputs > MAX_INPUTS || m->n_outputs > MAX_INPUTS) {
    gs_cli_error("model run: the model has more than %d inputs or outputs", MAX_INPUTS);
    goto done;
  }
  /* Every -i names an input, and every input has one -i. */
  for (int s = 0; s < n_specs; s++) {
    size_t len = (size_t)(strchr(specs[s], '=') - specs[s]);
    int found = -1;
    for (int i = 0; i < m->n_inputs; i++)
      if (strlen(m->inputs[i].name) == len && strncmp(m->inputs[i].name, specs[s], len) == 0)
        found = i;
    if (found < 0) {
      gs_cli_error("model run: the model has no input '%.*s'", (int)len, specs[s]);
      list_inputs(m);
      status = GS_EXIT_USAGE;
      goto done;
    }
    if (inputs[found].data) {
      gs_cli_error("model run: input '%s' is given twice", m->inputs[found].name);
      status = GS_EXIT_USAGE;
      goto done;
    }
    if (gs_npy_read(specs[s] + len + 1, &inputs[found]) < 0) {
      gs_cli_error("model run: input '%s': %s", m->inputs[found].name, gs_error_detail());
      goto done;
    }
    if (inputs[found].dtype == GS_DT_UINT16 && m->inputs[found].dtype == GS_DT_BFLOAT16)
      inputs[found].dtype = GS_DT_BFLOAT16; /* bfloat16 comes as its bits in a .npy */
    if (inputs[found].dtype != m->inputs[found].dtype) {
      gs_cli_error("model run: input '%s' must be %s, %s holds %s", m->inputs[found].name,
                   gs_dtype_name(m->inputs[found].dtype), specs[s] + len + 1,
                   gs_dtype_name(inputs[found].dtype));
      goto done;
    }
  }
  for (int i = 0; i < m->n_inputs; i++) {
    if (!inputs[i].data) {
      gs_cli_error("model run: input '%s' is missing (-i %s=FILE.npy)", m->inputs[i].name,
                   m->inputs[i].name);
      list_inputs(m);
      status = GS_EXIT_USAGE;
      goto done;
    }
    shapes[i] = inputs[i].shape;
    in_ptrs[i] = inputs[i].data;
  }
  gs_plan_options opt = {.device = dev, .precision = precision, .threads = (int)opts->threads,
                         .input_values = (const void *const *)in_ptrs,
                         .deterministic = opts->deterministic};
  if (gs_plan_create(m, shapes, &opt, &plan) < 0) {
    gs_cli_error("model run: %s", gs_error_detail());
    goto done;
  }
  if (report) {
    gs_plan_report r;
    gs_plan_get_report(plan, &r);
    printf("plan: %d nodes -> %d kernels (%d folded while planning, %d fused); arena %llu bytes "
           "(naive sum %llu); weights %llu bytes; on %s\n",
           r.nodes, r.steps, r.folded, r.fused, (unsigned long long)r.arena_bytes,
           (unsigned long long)r.naive_bytes, (unsigned long long)r.weights_bytes,
           gs_device_get_info(dev)->id);
    if (r.in_place)
      printf("plan: reshapes that copy nothing (the output takes the input's memory): %d\n",
             r.in_place - r.slice_views);
    if (r.slice_views)
      printf("plan: slices read in place (a contiguous part of the input): %d\n",
             r.slice_views);
    if (r.overwritten)
      printf("plan: elementwise steps that write over an input dying there: %d\n",
             r.overwritten);
    if (r.packed)
      printf("plan: %d products read their constant weights packed in panels\n", r.packed);
    if (r.squeeze_excite)
      printf("plan: %d squeeze-excitation blocks (GlobalAveragePool, Conv, Conv, gate, Mul) "
             "run as one kernel each\n", r.squeeze_excite);
    if (r.attention)
      printf("plan: %d attention blocks (MatMul, scale, mask, Softmax, MatMul) run as one "
             "kernel each\n", r.attention);
    if (r.kept_blocked)
      printf("plan: %d values between convolutions stay in oneDNN's blocked layout (blocks "
             "of %d channels)\n",
             r.kept_blocked, gs_device_get_caps(dev)->conv_channel_block);
    if (r.cpu_fallback)
      printf("plan: %d kernels run on the CPU instead, with copies, because %s lacks them: %s\n",
             r.cpu_fallback, gs_device_get_info(dev)->id, r.fallback_ops);
    if (r.cpu_fallback || r.host_steps)
      printf("plan: values copied around them per run: %d to the host, %d to the device "
             "(%.1f KiB); those between them stay on the host, in %.1f KiB of staging "
             "(%.1f KiB unshared)\n",
             r.host_copies[1], r.host_copies[0],
             (double)(r.host_copy_bytes[0] + r.host_copy_bytes[1]) / 1024,
             (double)r.host_staging_bytes / 1024, (double)r.host_staging_naive_bytes / 1024);
    if (r.staged)
      printf("plan: in stages (a node's output size depends on computed values): the figures "
             "are of the first stage; the rest is planned while running\n");
  }
  gs_plan_value_info out_info[MAX_INPUTS];
  if (gs_plan_run_alloc(plan, in_ptrs, outputs, out_info) < 0) {
    gs_cli_error("model run: %s", gs_error_detail());
    goto done;
  }
  if (gs_mkdir_p(outdir) < 0) {
    gs_cli_error("model run: cannot create %s: %s", outdir, strerror(errno));
    goto done;
  }
  for (int i = 0; i < m->n_outputs; i++) {
    const gs_plan_value_info *info = &out_info[i];
    char name[256], file[4400];
    gs_file_name_of(info->name, name, sizeof name);
    snprintf(file, sizeof file, "%s/%s.npy", outdir, name);
    if (gs_npy_write(file, info->dtype, &info->shape, outputs[i]) < 0) {
      gs_cli_error("model run: %s", gs_error_detail());
      goto done;
    }
  }
  status = GS_EXIT_OK;
done:
  for (int i = 0; i < MAX_INPUTS; i++) {
    free(inputs[i].data);
    free(outputs[i]);
  }
  gs_plan_destroy(plan);
  gs_model_free(m);
  gs_hal_shutdown();
  return status;
}

/* ---- tune ---------------------------------------------------------------------------- */

static int tune(const char *dir, const model_opts *opts) {
  gs_tune_options o = {.device = opts->device, .latency_budget_ms = opts->latency_budget_ms,
                       .memory_budget = opts->memory_budget, .seconds = opts->seconds,
                       .write = opts->write};
  return gs_cli_model_tune(dir, &o);
}

/* ---- quantize ------------------------------------------------------------------------ */

/* The calibration files in the model's input order into data[]; a usage
 * error or a failure is said, and returned as an exit status. */
static int read_calibration(const gs_model *m, const gs_cli_list *specs, gs_npy *data) {
  for (int s = 0; s < specs->n; s++) {
    const char *spec = specs->items[s], *eq = strchr(spec, '=');
    int found = -1;
    if (!eq && m->n_inputs == 1 && specs->n == 1)
      found = 0;
    for (int i = 0; eq && i < m->n_inputs; i++)
      if (strlen(m->inputs[i].name) == (size_t)(eq - spec) &&
          strncmp(m->inputs[i].name, spec, (size_t)(eq - spec)) == 0)
        found = i;
    if (found < 0) {
      gs_cli_error("model quantize: --calibrate %s names no input of the model%s", spec,
                   eq ? "" : " (give NAME=FILE.npy: the model has several)");
      list_inputs(m);
      return GS_EXIT_USAGE;
    }
    if (data[found].data) {
      gs_cli_error("model quantize: input '%s' is calibrated twice", m->inputs[found].name);
      return GS_EXIT_USAGE;
    }
    if (gs_npy_read(eq ? eq + 1 : spec, &data[found]) < 0) {
      gs_cli_error("model quantize: %s", gs_error_detail());
      return GS_EXIT_FAILED;
    }
  }
  for (int i = 0; i < m->n_inputs; i++)
    if (!data[i].data) {
      gs_cli_error("model quantize: no calibration data for input '%s' (--calibrate %s=FILE.npy)",
                   m->inputs[i].name, m->inputs[i].name);
      return GS_EXIT_USAGE;
    }
  return GS_EXIT_OK;
}

static int quantize(const char *path, const model_opts *opts) {
  gs_calib_method method = GS_CALIB_MINMAX;
  if (opts->method && !gs_calib_method_from_name(opts->method, &method))
    return gs_cli_usage_error(&gs_cli_model,
                              "quantize: --method is minmax, percentile or entropy, not '%s'",
                              opts->method);
  if (!opts->outdir)
    return gs_cli_usage_error(&gs_cli_model, "quantize: -o OUT.onnx is required");
  if (!opts->calibrate.n)
    return gs_cli_usage_error(&gs_cli_model, "quantize: --calibrate FILE.npy is required (static "
                                             "quantisation measures the activations on it)");
  int status = GS_EXIT_FAILED;
  gs_model *m = NULL;
  gs_npy data[MAX_INPUTS] = {{0}};
  if (gs_hal_init() < 0 || gs_engine_init() < 0) {
    gs_cli_error("model quantize: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  gs_device_t *dev = opts->device ? gs_hal_device_find(opts->device) : gs_hal_device(0);
  if (!dev) {
    gs_cli_error("model quantize: no device '%s' (run 'gpusrv smi' to list them)", opts->device);
    goto done;
  }
  if (gs_model_load(path, &m) < 0) {
    gs_cli_error("model quantize: %s", gs_error_detail());
    goto done;
  }
  if (m->n_inputs > MAX_INPUTS) {
    gs_cli_error("model quantize: the model has more than %d inputs", MAX_INPUTS);
    goto done;
  }
  if ((status = read_calibration(m, &opts->calibrate, data)) != GS_EXIT_OK)
    goto done;
  status = GS_EXIT_FAILED;
  gs_quantize_options qo = {.device = dev, .method = method, .per_channel = opts->per_channel,
                            .calibration = data, .threads = (int)opts->threads};
  gs_quantize_report r;
  if (gs_model_quantize(path, opts->outdir, &qo, &r) < 0) {
    gs_cli_error("model quantize: %s", gs_error_detail());
    goto done;
  }
  printf("quantized %d nodes (Conv, MatMul, Gemm) and %d activations, calibrated on %lld samples "
         "in %d runs (%s); weights %llu bytes in int8, %llu in float32; wrote %s\n",
         r.nodes, r.tensors, (long long)r.samples, r.runs, opts->method ? opts->method : "minmax",
         (unsigned long long)r.int8_weight_bytes, (unsigned long long)r.float_weight_bytes,
         opts->outdir);
  status = GS_EXIT_OK;
done:
  for (int i = 0; i < MAX_INPUTS; i++)
    free(data[i].data);
  gs_model_free(m);
  gs_hal_shutdown();
  return status;
}

static int model_run(int argc, char **argv) {
  model_opts o = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_model, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  const char *action = args.words[0];
  static const struct {
    const char *name;
    int (*fn)(const char *path, const model_opts *opts);
  } actions[] = {{"inspect", inspect}, {"run", run}, {"quantize", quantize}, {"tune", tune}};
  for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++) {
    if (strcmp(action, actions[i].name) != 0)
      continue;
    if (args.n < 2)
      return gs_cli_usage_error(&gs_cli_model, "%s: which model? (FILE.onnx)", action);
    return actions[i].fn(args.words[1], &o);
  }
  return gs_cli_usage_error(&gs_cli_model,
                            "unknown action '%s' (inspect, run, quantize or tune)", action);
}

const gs_cli_command gs_cli_model = {
    .name = "model",
    .usage = "gpusrv model inspect FILE.onnx [--json]\n"
             "gpusrv model run FILE.onnx -i NAME=FILE.npy [-i ...] -o OUTDIR [--device ID]\n"
             "                 [--precision fp32|fp16|bf16|fp64] [--threads N] [--deterministic] [--report]\n"
             "gpusrv model quantize FILE.onnx -o OUT.onnx --calibrate [NAME=]FILE.npy [...]\n"
             "                 [--per-channel] [--method minmax|percentile|entropy] [--device ID]\n"
             "gpusrv model tune MODEL_DIR [--device ID] [--latency-budget MS]\n"
             "                 [--memory-budget BYTES] [--seconds S] [--write]",
    .about = "inspect  Shows the model's inputs and outputs (name, type, shape), its ops and how\n"
             "         often each occurs, its parameters, its opset, and whether gpusrv supports\n"
             "         every op. Exits 1 and lists what is unsupported if not.\n"
             "run      Runs the model once on the given inputs and writes each output to\n"
             "         OUTDIR/<output name>.npy (characters other than letters, digits, '.', '-'\n"
             "         and '_' in the name become '_').\n"
             "quantize Writes a QDQ model (uint8 activations, int8 weights, int32 biases around\n"
             "         its Conv, MatMul and Gemm nodes) calibrated on the samples given, which\n"
             "         gpusrv runs as integer ops and onnxruntime runs too.\n"
             "tune     Measures a model of a repository (MODEL_DIR holds <n>/model.onnx) on the\n"
             "         device: batch sizes 1, 2, 4, ... up to its max_batch_size (default 64)\n"
             "         with 1, 2, ... instances, each running back to back on its share of the\n"
             "         cores. Prints rows/s, p50 and p99 per run and the device memory held,\n"
             "         names the fastest within the budgets, and with --write puts it into\n"
             "         MODEL_DIR/config.json (preferred_batch_size, max_queue_delay_microseconds\n"
             "         as a tenth of that batch's run, instance_group). The server's queue and HTTP\n"
             "         are not part of the measurement.",
    .options = model_options,
    .min_args = 1,
    .max_args = 2,
    .run = model_run,
};

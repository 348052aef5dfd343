/* model_tune.c - `gpusrv model tune MODEL_DIR`, in the manner of Triton's
 * Model Analyzer but in place: the model's newest version is planned on the
 * device for batch sizes 1, 2, 4, ... up to its max_batch_size, with 1, 2,
 * ... instances (plans sharing one weight set, as the server's instances
 * do), each instance running its plan back to back on its share of the
 * cores, for a fixed time. The table gives rows per second, each run's p50
 * and p99 and the device memory held; the best is the fastest within the
 * budgets (a configuration within 3% of it with a lower p99 wins: this
 * machine's noise is that large). A batch size stops growing when two sizes
 * in a row gain less than 5%, one runs past the latency budget, or memory
 * runs out.
 *
 * Then the best is served through the server's own queue at rising
 * concurrency for a few max_queue_delay values (tune_queue.c), and the
 * delay that holds throughput up best within the budget is the one --write
 * sets. Where none keeps every p99 within the budget, --write falls back to
 * a tenth of the best batch's run (within what the budget leaves): long
 * enough for requests that come together to meet, short enough that one
 * client alone waits little (a whole run's delay made a lone client's
 * ShuffleNet requests take three times as long). */
#include "cli/model_tune.h"

#include "cli/cli.h"
#include "cli/table.h"
#include "cli/tune_queue.h"
#include "base/clock.h"
#include "base/error.h"
#include "engine/engine.h"
#include "engine/weight_set.h"

#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_SECONDS 0.5
#define DEFAULT_MAX_BATCH 64
#define MAX_INSTANCES 4
#define MAX_IO 16
#define MAX_LATENCIES 200000
#define GAIN_TO_GO_ON 1.05 /* a larger batch must give 5% more rows/s */
#define NEAR_BEST 0.97

typedef struct point {
  int batch, instances;
  double rows_per_s, p50_ms, p99_ms;
  uint64_t bytes;
  const char *note; /* why it is not a candidate, or NULL */
} point;

/* ---- the model directory --------------------------------------------------------------- */

/* MODEL_DIR/<highest version>/model.onnx into path; false when none. */
static bool newest_version(const char *dir, char *path, size_t cap) {
  DIR *d = opendir(dir);
  long long best = -1;
  for (struct dirent *de; d && (de = readdir(d));) {
    char *end;
    long long v = strtoll(de->d_name, &end, 10);
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s/model.onnx", dir, de->d_name);
    if (!*end && end != de->d_name && v > best && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
      best = v;
      snprintf(path, cap, "%s", p);
    }
  }
  if (d)
    closedir(d);
  return best >= 0;
}

/* MODEL_DIR/config.json, or an empty object where there is none; NULL
 * after saying why when it cannot be read. */
static json_t *read_config(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  if (access(path, F_OK) != 0)
    return json_object();
  json_error_t err;
  json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!j || !json_is_object(j)) {
    gs_cli_error("model tune: %s, line %d: %s", path, err.line,
                 j ? "not a JSON object" : err.text);
    json_decref(j);
    return NULL;
  }
  return j;
}

/* ---- one measurement ------------------------------------------------------------------ */

typedef struct runner {
  const gs_model *model;
  gs_device_t *device;
  gs_weight_set *set;
  const gs_shape *shapes;
  int threads;
  gs_plan *plan;
  const void *in[MAX_IO];
  void *out[MAX_IO];
  bool alloc_outputs; /* sizes known only at run time */
  double seconds;
  uint64_t t_start, t_end; /* the timed runs */
  double *lat_ms;
  int n_lat, cap_lat;
  long long runs;
  int status;
} runner;

static int run_once(runner *r) {
  if (!r->alloc_outputs)
    return gs_plan_run(r->plan, r->in, r->out);
  void *outs[MAX_IO] = {0};
  gs_plan_value_info info[MAX_IO];
  int rc = gs_plan_run_alloc(r->plan, r->in, outs, info);
  for (int i = 0; i < MAX_IO; i++)
    free(outs[i]);
  return rc;
}

/* The plan and its outputs, made on the runner's own thread. */
static int prepare(runner *r) {
  gs_plan_options opt = {.device = r->device, .weights = r->set, .threads = r->threads};
  int rc = gs_plan_create(r->model, r->shapes, &opt, &r->plan);
  if (rc < 0)
    return rc;
  r->alloc_outputs = gs_plan_sizes_at_run(r->plan);
  for (int i = 0; !r->alloc_outputs && i < r->model->n_outputs; i++) {
    gs_plan_value_info info;
    gs_plan_output(r->plan, i, &info);
    if (!(r->out[i] = malloc(info.bytes ? info.bytes : 1)))
      return gs_error(GS_ENOMEM, "out of memory for a plan's outputs");
  }
  if (!(r->lat_ms = malloc((size_t)r->cap_lat * sizeof(double))))
    return gs_error(GS_ENOMEM, "out of memory for the latencies");
  return GS_OK;
}

/* One instance: everything on its own thread, as the server's compute
 * thread does it. Planning and running lead an OpenMP team on the calling
 * thread, and libgomp cuts its threads' spinning short once a process
 * holds more OpenMP threads than cores: a second team on this process's
 * main thread would slow every run. One untimed run first, for planning's
 * lazy work (a library's first call), which a warmed-up instance has done. */
static void *run_instance(void *arg) {
  runner *r = arg;
  int rc = prepare(r);
  if (rc == 0)
    rc = run_once(r);
  r->t_start = gs_now_ns();
  uint64_t until = r->t_start + (uint64_t)(r->seconds * 1e9);
  while (rc == 0 && gs_now_ns() < until) {
    uint64_t t0 = gs_now_ns();
    rc = run_once(r);
    if (rc == 0 && r->n_lat < r->cap_lat)
      r->lat_ms[r->n_lat++] = (double)(gs_now_ns() - t0) / 1e6;
    r->runs += rc == 0;
  }
  r->t_end = gs_now_ns();
  r->status = rc;
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Zeros for each input of a batch of `batch` rows, shared by the runners. */
static int make_inputs(const gs_model *m, int batch, gs_shape *shapes, void **inputs) {
  for (int i = 0; i < m->n_inputs; i++) {
    const gs_value_info *v = &m->inputs[i];
    shapes[i].rank = v->rank;
    for (int d = 0; d < v->rank; d++)
      shapes[i].dims[d] = d == 0 ? batch : v->dims[d];
    size_t bytes = (size_t)gs_shape_numel(&shapes[i]) * gs_dtype_size(v->dtype);
    if (!(inputs[i] = calloc(1, bytes ? bytes : 1)))
      return gs_error(GS_ENOMEM, "out of memory for a batch of %d", batch);
  }
  return GS_OK;
}

/* The runs' p50 and p99, and rows per second summed over the instances. */
static int summarise(runner *rs, int n, int batch, point *p) {
  int n_lat = 0;
  for (int k = 0; k < n; k++)
    n_lat += rs[k].n_lat;
  double *all = malloc((size_t)(n_lat ? n_lat : 1) * sizeof(double));
  if (!all)
    return gs_error(GS_ENOMEM, "out of memory sorting the latencies");
  int at = 0;
  p->rows_per_s = 0;
  for (int k = 0; k < n; k++) {
    memcpy(all + at, rs[k].lat_ms, (size_t)rs[k].n_lat * sizeof(double));
    at += rs[k].n_lat;
    double s = (double)(rs[k].t_end - rs[k].t_start) / 1e9;
    p->rows_per_s += s > 0 ? (double)rs[k].runs * batch / s : 0;
  }
  qsort(all, (size_t)n_lat, sizeof(double), cmp_double);
  p->p50_ms = n_lat ? all[n_lat / 2] : 0;
  p->p99_ms = n_lat ? all[(int)((n_lat - 1) * 0.99)] : 0;
  free(all);
  return GS_OK;
}

/* Plans `n` instances of `batch` rows sharing one weight set, runs them
 * together for `seconds`, and fills p. Returns 0, or the error that stopped
 * it (GS_ENOMEM: memory ran out). */
static int measure(const gs_model *m, gs_device_t *dev, int batch, int n, double seconds,
                   point *p) {
  gs_shape shapes[MAX_IO];
  void *inputs[MAX_IO] = {0};
  runner rs[MAX_INSTANCES];
  memset(rs, 0, sizeof rs);
  gs_weight_set *set = NULL;
  int cores = gs_device_get_info(dev)->compute_units;
  int rc = make_inputs(m, batch, shapes, inputs);
  if (rc == 0)
    rc = gs_weight_set_create(dev, &set);
  pthread_t threads[MAX_INSTANCES];
  int started = 0;
  for (int k = 0; rc == 0 && k < n; k++) {
    rs[k] = (runner){.model = m, .device = dev, .set = set, .shapes = shapes,
                     .threads = cores / n > 0 ? cores / n : 1, .seconds = seconds,
                     .cap_lat = MAX_LATENCIES / n};
    for (int i = 0; i < m->n_inputs; i++)
      rs[k].in[i] = inputs[i];
    if (pthread_create(&threads[k], NULL, run_instance, &rs[k]) != 0)
      rc = gs_error(GS_ENOMEM, "cannot start a thread for instance %d", k);
    else
      started++;
  }
  for (int k = 0; k < started; k++)
    pthread_join(threads[k], NULL);
  for (int k = 0; k < started && rc == 0; k++)
    rc = rs[k].status;
  if (rc == 0)
    rc = summarise(rs, n, batch, p);
  if (rc == 0) {
    p->bytes = gs_weight_set_bytes(set);
    for (int k = 0; k < n; k++)
      p->bytes += gs_plan_device_bytes(rs[k].plan);
  }
  for (int k = 0; k < n; k++) {
    gs_plan_destroy(rs[k].plan);
    for (int i = 0; i < MAX_IO; i++)
      free(rs[k].out[i]);
    free(rs[k].lat_ms);
  }
  gs_weight_set_destroy(set);
  for (int i = 0; i < MAX_IO; i++)
    free(inputs[i]);
  return rc;
}

/* ---- the sweep ------------------------------------------------------------------------ */

/* Whether every input has a batch dimension first and fixed ones after. */
static bool batchable(const gs_model *m) {
  if (m->n_inputs > MAX_IO || m->n_outputs > MAX_IO)
    return false;
  for (int i = 0; i < m->n_inputs; i++) {
    if (m->inputs[i].rank < 1)
      return false;
    for (int d = 1; d < m->inputs[i].rank; d++)
      if (m->inputs[i].dims[d] < 0)
        return false;
  }
  return true;
}

/* Measures batch sizes for `n` instances into pts (growing *count); false
 * after saying why when an error other than running out of memory stopped
 * it. */
static bool sweep_instances(const gs_model *m, gs_device_t *dev, int n, int max_batch,
                            const gs_tune_options *o, point *pts, int *count) {
  double seconds = o->seconds > 0 ? o->seconds : DEFAULT_SECONDS;
  double budget_ms = o->latency_budget_ms;
  double best = 0;
  int misses = 0; /* sizes in a row that gained too little over the best before them */
  for (int b = 1; b <= max_batch; b = b * 2 > max_batch && b < max_batch ? max_batch : b * 2) {
    point *p = &pts[(*count)++];
    *p = (point){.batch = b, .instances = n};
    int rc = measure(m, dev, b, n, seconds, p);
    if (rc == GS_ENOMEM) {
      p->note = "memory ran out";
      return true;
    }
    if (rc < 0) {
      gs_cli_error("model tune: batch %d on %d instance(s): %s", b, n, gs_error_detail());
      return false;
    }
    printf("  %d instance(s), batch %d: %.0f rows/s, p99 %.2f ms\n", n, b, p->rows_per_s,
           p->p99_ms);
    fflush(stdout);
    if (o->memory_budget && p->bytes > o->memory_budget) {
      p->note = "over the memory budget";
      return true;
    }
    if (budget_ms > 0 && p->p99_ms > budget_ms) {
      p->note = "over the latency budget";
      return true;
    }
    /* More batch gives no more: twice in a row, since one size may gain
     * little where the next gains much (a product's kernel changes with the
     * rows). */
    if (best > 0 && p->rows_per_s < best * GAIN_TO_GO_ON) {
      if (++misses == 2)
        return true;
    } else {
      misses = 0;
    }
    if (p->rows_per_s > best)
      best = p->rows_per_s;
  }
  return true;
}

/* The best candidate: the most rows/s, or within NEAR_BEST of it with a
 * lower p99. NULL when none qualifies. */
static const point *best_of(const point *pts, int n) {
  const point *fastest = NULL, *best = NULL;
  for (int i = 0; i < n; i++)
    if (!pts[i].note && (!fastest || pts[i].rows_per_s > fastest->rows_per_s))
      fastest = &pts[i];
  for (int i = 0; fastest && i < n; i++)
    if (!pts[i].note && pts[i].rows_per_s >= NEAR_BEST * fastest->rows_per_s &&
        (!best || pts[i].p99_ms < best->p99_ms))
      best = &pts[i];
  return best;
}

static void print_table(const point *pts, int n, const point *best) {
  static const char *const heads[] = {"instances", "batch", "rows/s", "p50 ms", "p99 ms",
                                      "memory MiB", ""};
  static const bool right[] = {true, true, true, true, true, true, false};
  gs_table_t *t = gs_table_new(7, heads, right);
  for (int i = 0; t && i < n; i++) {
    char c[6][32];
    snprintf(c[0], 32, "%d", pts[i].instances);
    snprintf(c[1], 32, "%d", pts[i].batch);
    snprintf(c[2], 32, "%.0f", pts[i].rows_per_s);
    snprintf(c[3], 32, "%.3f", pts[i].p50_ms);
    snprintf(c[4], 32, "%.3f", pts[i].p99_ms);
    snprintf(c[5], 32, "%.1f", (double)pts[i].bytes / (1 << 20));
    const char *row[] = {c[0], c[1], c[2], c[3], c[4], c[5],
                         &pts[i] == best ? "best" : pts[i].note};
    if (pts[i].rows_per_s == 0) /* not measured: memory ran out while planning */
      row[2] = row[3] = row[4] = row[5] = "-";
    gs_table_add_row(t, row);
  }
  if (t)
    gs_table_print(t, stdout);
  gs_table_free(t);
}

/* ---- writing the best ------------------------------------------------------------------- */

/* MODEL_DIR/config.json with the best's batch size, queue delay and
 * instances, the rest of the file kept; through a temporary file, so that
 * a failure leaves the old one whole. */
static int write_config(const char *dir, json_t *config, const point *best, int max_batch,
                        gs_device_t *dev, int64_t delay_us) {
  double delay_ms = (double)delay_us / 1000;
  if (!json_integer_value(json_object_get(config, "max_batch_size")))
    json_object_set_new(config, "max_batch_size", json_integer(max_batch));
  json_t *db = json_object_get(config, "dynamic_batching");
  if (!json_is_object(db)) {
    db = json_object();
    json_object_set_new(config, "dynamic_batching", db);
  }
  json_object_set_new(db, "preferred_batch_size", json_pack("[i]", best->batch));
  json_object_set_new(db, "max_queue_delay_microseconds",
                      json_integer((json_int_t)(delay_ms * 1000)));
  const gs_device_info *info = gs_device_get_info(dev);
  json_object_set_new(config, "instance_group",
                      json_pack("[{s:i, s:s, s:[s]}]", "count", best->instances, "kind",
                                info->backend, "devices", info->id));
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tune-%d", path, (int)getpid());
  if (json_dump_file(config, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
      rename(tmp, path) != 0) {
    unlink(tmp);
    gs_cli_error("model tune: cannot write %s", path);
    return GS_EXIT_FAILED;
  }
  printf("wrote %s: preferred_batch_size [%d], max_queue_delay_microseconds %lld, %d instance(s) "
         "on %s\n", path, best->batch, (long long)(delay_ms * 1000), best->instances, info->id);
  return GS_EXIT_OK;
}

/* The delay where the queue sweep found none within the budget: a tenth of
 * the best batch's run (see the top of this file), less where the budget
 * leaves less after its p99. */
static int64_t fallback_delay_us(const point *best, double budget_ms) {
  double delay_ms = best->p50_ms / 10;
  if (budget_ms > 0 && budget_ms - best->p99_ms < delay_ms)
    delay_ms = budget_ms - best->p99_ms > 0 ? budget_ms - best->p99_ms : 0;
  return (int64_t)(delay_ms * 1000);
}

/* The best's max_queue_delay through the server's queue, or where the
 * sweep found none (or failed, saying why) the fallback. */
static int64_t tune_delay(const char *model_file, int max_batch, const point *best,
                          gs_device_t *dev, const gs_tune_options *o) {
  int64_t delay_us = 0;
  gs_tune_queue_args qa = {.model_file = model_file, .max_batch = max_batch,
                           .batch = best->batch, .instances = best->instances, .device = dev,
                           .run_p50_ms = best->p50_ms, .budget_ms = o->latency_budget_ms,
                           .seconds = o->seconds > 0 ? o->seconds : DEFAULT_SECONDS};
  if (gs_tune_queue(&qa, &delay_us) == 0)
    return delay_us;
  /* The compute table stands; the delay falls back to the rule of thumb. */
  delay_us = fallback_delay_us(best, o->latency_budget_ms);
  printf("max_queue_delay: %lld us, a tenth of the batch's run\n", (long long)delay_us);
  return delay_us;
}

/* ---- the command ------------------------------------------------------------------------ */

static int tune_model(const char *dir, const char *model_file, const gs_model *m,
                      gs_device_t *dev, json_t *config, const gs_tune_options *o) {
  json_int_t configured = json_integer_value(json_object_get(config, "max_batch_size"));
  int max_batch = configured > 0 ? (int)configured : DEFAULT_MAX_BATCH;
  int cores = gs_device_get_info(dev)->compute_units;
  bool host = gs_device_get_info(dev)->type == GS_DEVICE_CPU;
  /* On the host, more instances than cores only take turns. */
  int max_instances = host ? (cores < MAX_INSTANCES ? cores : MAX_INSTANCES) : MAX_INSTANCES;
  if (max_instances < 1)
    max_instances = 1;
  int cap = max_instances * 32;
  point *pts = calloc((size_t)cap, sizeof *pts);
  if (!pts) {
    gs_cli_error("model tune: out of memory");
    return GS_EXIT_FAILED;
  }
  printf("tuning %s on %s: batch sizes up to %d, 1 to %d instance(s)\n", dir,
         gs_device_get_info(dev)->id, max_batch, max_instances);
  int n = 0;
  bool ok = true;
  for (int k = 1; ok && k <= max_instances; k++)
    ok = sweep_instances(m, dev, k, max_batch, o, pts, &n);
  int status = ok ? GS_EXIT_OK : GS_EXIT_FAILED;
  const point *best = ok ? best_of(pts, n) : NULL;
  if (ok) {
    print_table(pts, n, best);
    if (!best) {
      gs_cli_error("model tune: no configuration fits the budgets");
      status = GS_EXIT_FAILED;
    } else {
      printf("best: batch %d on %d instance(s): %.0f rows/s, p99 %.3f ms, %.1f MiB\n",
             best->batch, best->instances, best->rows_per_s, best->p99_ms,
             (double)best->bytes / (1 << 20));
      int64_t delay_us = tune_delay(model_file, max_batch, best, dev, o);
      if (o->write)
        status = write_config(dir, config, best, max_batch, dev, delay_us);
    }
  }
  free(pts);
  return status;
}

int gs_cli_model_tune(const char *dir, const gs_tune_options *o) {
  char path[4096], pbtxt[4096];
  if (!newest_version(dir, path, sizeof path)) {
    gs_cli_error("model tune: %s has no version directory with a model.onnx (<n>/model.onnx)",
                 dir);
    return GS_EXIT_FAILED;
  }
  snprintf(pbtxt, sizeof pbtxt, "%s/config.pbtxt", dir);
  bool has_pbtxt = access(pbtxt, F_OK) == 0;
  snprintf(pbtxt, sizeof pbtxt, "%s/config.json", dir);
  if (o->write && has_pbtxt && access(pbtxt, F_OK) != 0) {
    gs_cli_error("model tune: %s has a config.pbtxt; --write writes config.json, which the "
                 "server would read in its place: run without --write and apply the table "
                 "to config.pbtxt", dir);
    return GS_EXIT_FAILED;
  }
  json_t *config = read_config(dir);
  if (!config)
    return GS_EXIT_FAILED;
  int status = GS_EXIT_FAILED;
  gs_model *m = NULL;
  if (gs_hal_init() < 0 || gs_engine_init() < 0) {
    gs_cli_error("model tune: %s", gs_error_detail());
    goto done;
  }
  gs_device_t *dev = o->device ? gs_hal_device_find(o->device) : gs_hal_device(0);
  if (!dev) {
    gs_cli_error("model tune: no device '%s' (run 'gpusrv smi' to list them)", o->device);
    goto done;
  }
  if (json_object_get(config, "max_batch_size") &&
      json_integer_value(json_object_get(config, "max_batch_size")) == 0) {
    gs_cli_error("model tune: %s/config.json has max_batch_size 0 (no batching): nothing to "
                 "tune", dir);
    goto done;
  }
  if (gs_model_load(path, &m) < 0) {
    gs_cli_error("model tune: %s", gs_error_detail());
    goto done;
  }
  if (!batchable(m)) {
    gs_cli_error("model tune: %s: every input needs a batch dimension first and fixed ones "
                 "after it (at most %d inputs and outputs)", path, MAX_IO);
    goto done;
  }
  status = tune_model(dir, path, m, dev, config, o);
done:
  gs_model_free(m);
  json_decref(config);
  gs_hal_shutdown();
  return status;
}

/* tune_queue.c - `gpusrv model tune`'s sweep of max_queue_delay through the
 * server's own queue (tune_queue.h).
 *
 * The model is served from a repository of one entry made in a temporary
 * directory (its model.onnx linked, config.json written for each delay) by
 * the same repository, batcher and pipelines `gpusrv serve` runs, and its
 * clients submit to the batcher as the HTTP front end does, without HTTP.
 * Each client sends one row and its next on the reply, so concurrency c
 * keeps c requests in flight: what a batch can gather is what the clients
 * have sent while the instances were busy, and the delay decides how long
 * a batch waits for more. */
#include "cli/tune_queue.h"

#include "api/batcher.h"
#include "api/infer_request.h"
#include "api/repository.h"
#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "cli/table.h"
#include "sched/sched.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODEL_NAME "tune"
#define N_DELAYS 4
#define N_LEVELS 4
#define MAX_CLIENTS 64
#define LAT_PER_CLIENT 20000
#define NEAR_BEST 0.97

static const int levels[N_LEVELS] = {1, 4, 16, 64};

typedef struct level_result {
  double per_s, p50_ms, p99_ms;
} level_result;

/* ---- the repository of one entry ---------------------------------------------------- */

static int write_entry_config(const char *dir, const gs_tune_queue_args *a, int64_t delay_us) {
  const gs_device_info *info = gs_device_get_info(a->device);
  json_t *c = json_pack("{s:I, s:{s:[i], s:I}, s:[{s:i, s:s, s:[s]}]}", "max_batch_size",
                        (json_int_t)a->max_batch, "dynamic_batching", "preferred_batch_size",
                        a->batch, "max_queue_delay_microseconds", (json_int_t)delay_us,
                        "instance_group", "count", a->instances, "kind", info->backend,
                        "devices", info->id);
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/" MODEL_NAME "/config.json", dir);
  int rc = c && json_dump_file(c, path, 0) == 0 ? GS_OK
                                                  : gs_error(GS_EIO, "cannot write %s", path);
  json_decref(c);
  return rc;
}

/* DIR/tune/1, a link to the directory of the model measured (which may
 * hold its external data beside it); *made once DIR is. */
static int make_entry(char *dir, size_t cap, const gs_tune_queue_args *a, bool *made) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, cap, "%s/gpusrv-tune-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!(*made = mkdtemp(dir) != NULL))
    return gs_error(GS_EIO, "cannot make a temporary directory under %s",
                    tmp && *tmp ? tmp : "/tmp");
  char path[PATH_MAX + 64], target[PATH_MAX];
  snprintf(path, sizeof path, "%s/" MODEL_NAME, dir);
  int ok = mkdir(path, 0700) == 0;
  /* The version directory as the server sees it: its model.onnx may itself
   * be a link to a file of another name. */
  char version_dir[PATH_MAX];
  snprintf(version_dir, sizeof version_dir, "%s", a->model_file);
  char *slash = strrchr(version_dir, '/');
  if (slash)
    *slash = '\0';
  snprintf(path, sizeof path, "%s/" MODEL_NAME "/1", dir);
  ok = ok && realpath(slash ? version_dir : ".", target) && symlink(target, path) == 0;
  return ok ? GS_OK : gs_error(GS_EIO, "cannot link the directory of %s into %s", a->model_file,
                               dir);
}

/* What make_entry made. Never anything under the link: that is the user's. */
static void remove_entry(const char *dir) {
  static const char *const files[] = {MODEL_NAME "/1", MODEL_NAME "/config.json", MODEL_NAME,
                                      ""};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (unlink(path) != 0)
      rmdir(path);
  }
}

/* ---- the clients ---------------------------------------------------------------------- */

typedef struct client {
  gs_served_model *m;
  gs_served_version *v;
  const gs_shape *shapes;
  const void *const *inputs;
  uint64_t until;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool answered;
  gs_infer_request req;
  double lat_ms[LAT_PER_CLIENT];
  int n_lat;
  long long done;
  int status;
  char error[600];
} client;

static void on_done(gs_infer_request *r, void *ctx) {
  client *c = ctx;
  pthread_mutex_lock(&c->lock);
  c->answered = true;
  if (r->status != 200 && !c->status) {
    c->status = r->status;
    snprintf(c->error, sizeof c->error, "%s", r->error);
  }
  pthread_cond_signal(&c->cond);
  pthread_mutex_unlock(&c->lock);
}

static void *client_main(void *arg) {
  client *c = arg;
  while (gs_now_ns() < c->until) {
    memset(&c->req, 0, sizeof c->req);
    c->req.model = c->m;
    c->req.version = c->v;
    c->req.batch = 1;
    for (int i = 0; i < c->v->model->n_inputs; i++) {
      c->req.shapes[i] = c->shapes[i];
      c->req.inputs[i] = c->inputs[i];
    }
    c->req.done = on_done;
    c->req.ctx = c;
    c->answered = false;
    uint64_t t0 = gs_now_ns();
    if (gs_batcher_submit(c->m->batcher, &c->req) < 0) {
      c->status = 503;
      snprintf(c->error, sizeof c->error, "%s", gs_error_detail());
      break;
    }
    pthread_mutex_lock(&c->lock);
    while (!c->answered)
      pthread_cond_wait(&c->cond, &c->lock);
    bool failed = c->status != 0;
    pthread_mutex_unlock(&c->lock);
    gs_infer_request_clear(&c->req);
    if (failed)
      break;
    if (c->n_lat < LAT_PER_CLIENT)
      c->lat_ms[c->n_lat++] = (double)(gs_now_ns() - t0) / 1e6;
    c->done++;
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* n clients for `seconds`: requests answered per second, p50 and p99. */
static int drive(gs_served_model *m, const gs_shape *shapes, const void *const *inputs, int n,
                 double seconds, level_result *out) {
  client *cs = calloc((size_t)n, sizeof *cs);
  pthread_t threads[MAX_CLIENTS];
  if (!cs)
    return gs_error(GS_ENOMEM, "out of memory for %d clients", n);
  uint64_t t0 = gs_now_ns(), until = t0 + (uint64_t)(seconds * 1e9);
  int started = 0, rc = GS_OK;
  for (int k = 0; k < n; k++) {
    cs[k] = (client){.m = m, .v = gs_served_version_find(m, NULL), .shapes = shapes,
                     .inputs = inputs, .until = until};
    pthread_mutex_init(&cs[k].lock, NULL);
    pthread_cond_init(&cs[k].cond, NULL);
  }
  for (int k = 0; k < n; k++) {
    if (pthread_create(&threads[k], NULL, client_main, &cs[k]) != 0) {
      rc = gs_error(GS_ENOMEM, "cannot start client %d", k);
      break;
    }
    started++;
  }
  for (int k = 0; k < started; k++)
    pthread_join(threads[k], NULL);
  double elapsed = (double)(gs_now_ns() - t0) / 1e9;
  int total = 0;
  long long done = 0;
  for (int k = 0; k < started; k++) {
    total += cs[k].n_lat;
    done += cs[k].done;
    if (rc == 0 && cs[k].status)
      rc = gs_error(GS_EIO, "a request failed (%d): %s", cs[k].status, cs[k].error);
  }
  double *all = rc == 0 ? malloc((size_t)(total ? total : 1) * sizeof(double)) : NULL;
  if (rc == 0 && !all)
    rc = gs_error(GS_ENOMEM, "out of memory sorting latencies");
  for (int k = 0, at = 0; all && k < started; at += cs[k].n_lat, k++)
    memcpy(all + at, cs[k].lat_ms, (size_t)cs[k].n_lat * sizeof(double));
  if (all) {
    qsort(all, (size_t)total, sizeof(double), cmp_double);
    *out = (level_result){.per_s = elapsed > 0 ? (double)done / elapsed : 0,
                          .p50_ms = total ? all[total / 2] : 0,
                          .p99_ms = total ? all[(int)((total - 1) * 0.99)] : 0};
  }
  free(all);
  for (int k = 0; k < n; k++) {
    pthread_mutex_destroy(&cs[k].lock);
    pthread_cond_destroy(&cs[k].cond);
  }
  free(cs);
  return rc;
}

/* ---- the sweep ------------------------------------------------------------------------ */

/* None, and a tenth, half and all of the batch's run, below the budget. */
static int delays_to_try(const gs_tune_queue_args *a, int64_t *out) {
  double fractions[N_DELAYS] = {0, 0.1, 0.5, 1};
  int n = 0;
  for (int i = 0; i < N_DELAYS; i++) {
    int64_t us = (int64_t)(a->run_p50_ms * fractions[i] * 1000);
    if (a->budget_ms > 0 && us >= (int64_t)(a->budget_ms * 1000))
      continue;
    if (n == 0 || us > out[n - 1])
      out[n++] = us;
  }
  return n;
}

/* The model loaded with this delay: READY, or an error with its reason.
 * The first delay's configuration was written before the repository
 * opened, and its loader thread loads it. */
static gs_served_model *serve_with(gs_repository *repo, const char *dir,
                                   const gs_tune_queue_args *a, int64_t delay_us, bool first) {
  if (!first && (write_entry_config(dir, a, delay_us) < 0 ||
                 gs_repository_load(repo, MODEL_NAME) < 0))
    return NULL;
  gs_served_model *m = gs_repository_find(repo, MODEL_NAME);
  while (m && atomic_load(&m->state) == GS_MODEL_LOADING)
    gs_sleep_ns(10000000);
  if (!m || !gs_served_ready(m) || !m->batcher) {
    gs_error(GS_EINVAL, "the model did not load: %s", m ? m->reason : "not found");
    return NULL;
  }
  return m;
}

/* How many concurrency levels, from the lowest, delay d keeps every p99
 * within the budget at. */
static int levels_within(const level_result *r, double budget_ms) {
  int l = 0;
  while (l < N_LEVELS && (budget_ms <= 0 || r[l].p99_ms <= budget_ms))
    l++;
  return l;
}

/* The delay to choose: among those that keep every p99 within the budget
 * up to the highest concurrency any delay does (past it, a model that
 * cannot keep up queues past any budget, whatever the delay), the one with
 * the best mean, over those concurrencies, of its requests/s as a share of
 * the best delay's there: a delay that lifts four clients' throughput but
 * halves a lone client's is no gain. Within NEAR_BEST of that, the one a
 * lone client waits least with. -1 when no delay keeps even one client
 * within the budget; *counted: how many concurrencies counted. */
static int best_delay(level_result (*r)[N_LEVELS], int n, double budget_ms, int *counted) {
  int top = 0, best = -1;
  for (int d = 0; d < n; d++)
    if (levels_within(r[d], budget_ms) > top)
      top = levels_within(r[d], budget_ms);
  *counted = top;
  if (top == 0)
    return -1;
  double most[N_LEVELS] = {0}, score[N_DELAYS] = {0}, high = 0;
  for (int d = 0; d < n; d++)
    for (int l = 0; l < top; l++)
      most[l] = r[d][l].per_s > most[l] ? r[d][l].per_s : most[l];
  for (int d = 0; d < n; d++) {
    if (levels_within(r[d], budget_ms) < top)
      continue;
    for (int l = 0; l < top; l++)
      score[d] += most[l] > 0 ? r[d][l].per_s / most[l] / top : 0;
    high = score[d] > high ? score[d] : high;
  }
  for (int d = 0; d < n; d++)
    if (levels_within(r[d], budget_ms) == top && score[d] >= NEAR_BEST * high &&
        (best < 0 || r[d][0].p50_ms < r[best][0].p50_ms))
      best = d;
  return best;
}

static void print_results(const int64_t *delays, level_result (*r)[N_LEVELS], int n, int best,
                          int counted) {
  static const char *const heads[] = {"max_queue_delay us", "clients", "requests/s", "p50 ms",
                                      "p99 ms", ""};
  static const bool right[] = {true, true, true, true, true, false};
  gs_table_t *t = gs_table_new(6, heads, right);
  for (int d = 0; t && d < n; d++)
    for (int l = 0; l < N_LEVELS; l++) {
      char c[5][32];
      snprintf(c[0], 32, "%lld", (long long)delays[d]);
      snprintf(c[1], 32, "%d", levels[l]);
      snprintf(c[2], 32, "%.0f", r[d][l].per_s);
      snprintf(c[3], 32, "%.3f", r[d][l].p50_ms);
      snprintf(c[4], 32, "%.3f", r[d][l].p99_ms);
      const char *row[] = {c[0], c[1], c[2], c[3], c[4],
                           d == best && l < counted ? "best" : ""};
      gs_table_add_row(t, row);
    }
  if (t)
    gs_table_print(t, stdout);
  gs_table_free(t);
}

/* Every delay at every concurrency, into r; the number of delays measured. */
static int sweep(gs_repository *repo, const char *dir, const gs_tune_queue_args *a,
                 const int64_t *delays, int n, level_result (*r)[N_LEVELS]) {
  gs_served_model *m = NULL;
  const gs_model *model = NULL;
  gs_shape shapes[GS_REQ_MAX_IO];
  void *inputs[GS_REQ_MAX_IO] = {0};
  int rc = GS_OK, d = 0;
  for (; rc == 0 && d < n; d++) {
    if (!(m = serve_with(repo, dir, a, delays[d], d == 0))) {
      rc = GS_EINVAL;
      break;
    }
    if (!model) /* one row of zeros for each input, shared by the clients */
      model = gs_served_version_find(m, NULL)->model;
    for (int i = 0; !inputs[0] && rc == 0 && i < model->n_inputs; i++) {
      const gs_value_info *v = &model->inputs[i];
      shapes[i].rank = v->rank;
      for (int k = 0; k < v->rank; k++)
        shapes[i].dims[k] = k == 0 ? 1 : v->dims[k];
      size_t bytes = (size_t)gs_shape_numel(&shapes[i]) * gs_dtype_size(v->dtype);
      if (!(inputs[i] = calloc(1, bytes ? bytes : 1)))
        rc = gs_error(GS_ENOMEM, "out of memory for a request's input");
    }
    for (int l = 0; rc == 0 && l < N_LEVELS; l++) {
      rc = drive(m, shapes, (const void *const *)inputs, levels[l], a->seconds, &r[d][l]);
      if (rc == 0)
        printf("  max_queue_delay %lld us, %d client(s): %.0f requests/s, p99 %.2f ms\n",
               (long long)delays[d], levels[l], r[d][l].per_s, r[d][l].p99_ms);
      fflush(stdout);
    }
  }
  for (int i = 0; i < GS_REQ_MAX_IO; i++)
    free(inputs[i]);
  return rc < 0 ? rc : d;
}

int gs_tune_queue(const gs_tune_queue_args *a, int64_t *delay_us) {
  int64_t delays[N_DELAYS];
  level_result r[N_DELAYS][N_LEVELS];
  int n = delays_to_try(a, delays);
  if (n == 0) {
    gs_cli_error("model tune: a latency budget of %.3f ms leaves no max_queue_delay to try",
                 a->budget_ms);
    return GS_ERANGE;
  }
  char dir[PATH_MAX];
  printf("through the server's queue: batch %d on %d instance(s), clients sending one row each\n",
         a->batch, a->instances);
  bool made = false;
  int rc = make_entry(dir, sizeof dir, a, &made);
  gs_ledger *ledger = NULL;
  if (rc == 0)
    rc = write_entry_config(dir, a, delays[0]);
  if (rc == 0)
    rc = gs_ledger_create(&ledger);
  gs_repository repo;
  bool opened = rc == 0 && (rc = gs_repository_open(&repo, dir, ledger, 0)) == 0;
  int measured = rc == 0 ? sweep(&repo, dir, a, delays, n, r) : rc;
  if (opened)
    gs_repository_close(&repo);
  gs_ledger_free(ledger);
  if (made)
    remove_entry(dir);
  if (measured < 0) {
    gs_cli_error("model tune: through the queue: %s", gs_error_detail());
    return measured;
  }
  int counted = 0, best = best_delay(r, measured, a->budget_ms, &counted);
  print_results(delays, r, measured, best, counted);
  if (best < 0) {
    printf("through the queue, no max_queue_delay kept one client's p99 within %.3f ms\n",
           a->budget_ms);
    return GS_ERANGE;
  }
  *delay_us = delays[best];
  printf("best max_queue_delay: %lld us (over 1 to %d clients: %.0f to %.0f requests/s, p50 "
         "%.3f ms alone)\n", (long long)delays[best], levels[counted - 1], r[best][0].per_s,
         r[best][counted - 1].per_s, r[best][0].p50_ms);
  return GS_OK;
}

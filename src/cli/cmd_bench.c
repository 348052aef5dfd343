/* cmd_bench.c - `gpusrv bench`: each stage of the six-stage data flow
 * measured alone on this machine (storage read, CPU preprocessing, H2D and
 * D2H pinned and pageable, compute as GEMM FLOP/s and the demo model,
 * exchange between devices), then whole pipelines, each as a fraction of
 * its slowest stage measured alone: the limit. */
#include "cli/cli.h"

#include "base/clock.h"
#include "base/error.h"
#include "engine/batch.h"
#include "engine/npy.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_opts {
  const char *device, *dir;
  long long mib;
  bool json;
} bench_opts;

static const gs_cli_option bench_options[] = {
    {"device", 'd', GS_OPT_STRING, offsetof(bench_opts, device), "ID",
     "Device to measure (default: the first)", 0, 0},
    GS_CLI_OPT("dir", GS_OPT_STRING, bench_opts, dir, "DIR",
               "Where the temporary files go (default: /var/tmp)"),
    GS_CLI_OPT_RANGE("size", GS_OPT_INT, bench_opts, mib, "MiB",
                     "Size of the storage test file (default 256)", 4, 1 << 20),
    GS_CLI_OPT("json", GS_OPT_BOOL, bench_opts, json, NULL, "Print the figures as JSON"),
    GS_CLI_OPTIONS_END,
};

static double seconds_since(uint64_t t0) { return (double)(gs_now_ns() - t0) / 1e9; }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- storage ------------------------------------------------------------------------------ */

static int storage_read(const char *dir, size_t mib, double *gbps, const char **how) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/gpusrv-bench-XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0)
    return gs_error(GS_EIO, "cannot create a file in %s: %s", dir, strerror(errno));
  unlink(path); /* gone when closed, whatever happens */
  const size_t chunk = 4 << 20;
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, chunk) != 0) {
    close(fd);
    return gs_error(GS_ENOMEM, "out of memory");
  }
  memset(buf, 0x5a, chunk);
  int rc = GS_OK;
  for (size_t done = 0; done < mib << 20 && rc == 0; done += chunk)
    if (write(fd, buf, chunk) != (ssize_t)chunk)
      rc = gs_error(GS_EIO, "cannot write %zu MiB in %s: %s", mib, dir, strerror(errno));
  if (rc == 0 && fsync(fd) != 0)
    rc = gs_error(GS_EIO, "fsync: %s", strerror(errno));
  int rfd = -1;
  if (rc == 0) {
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    rfd = open(self, O_RDONLY | O_DIRECT);
    *how = "O_DIRECT";
    if (rfd < 0) { /* tmpfs and some others refuse O_DIRECT */
      rfd = open(self, O_RDONLY);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      *how = "page cache dropped";
    }
    if (rfd < 0)
      rc = gs_error(GS_EIO, "cannot reopen the test file: %s", strerror(errno));
  }
  if (rc == 0) {
    uint64_t t0 = gs_now_ns();
    size_t total = 0;
    ssize_t got;
    while ((got = read(rfd, buf, chunk)) > 0)
      total += (size_t)got;
    double s = seconds_since(t0);
    if (got < 0)
      rc = gs_error(GS_EIO, "cannot read the test file: %s", strerror(errno));
    *gbps = s > 0 ? (double)total / s / 1e9 : 0;
  }
  if (rfd >= 0)
    close(rfd);
  close(fd);
  free(buf);
  return rc;
}

/* ---- copies -------------------------------------------------------------------------------- */

typedef struct copy_figures {
  double h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable; /* GB/s */
} copy_figures;

/* One copy to time: H2D or D2H between `buf` and `host`, or a peer copy
 * into `buf` from `peer_buf`; queued on `s`. */
typedef struct timed_copy {
  enum { COPY_H2D, COPY_D2H, COPY_PEER } kind;
  gs_stream_t *s;
  gs_buffer_t *buf, *peer_buf;
  void *host;
  size_t bytes;
} timed_copy;

/* The copy five times, each waited for: GB/s of the median. */
static int copy_rate(const timed_copy *c, double *gbps) {
  double t[5] = {0};
  int rc = 0;
  for (int r = 0; rc == 0 && r < 5; r++) {
    uint64_t t0 = gs_now_ns();
    switch (c->kind) {
    case COPY_H2D: rc = gs_stream_copy_h2d(c->s, c->buf, 0, c->host, c->bytes); break;
    case COPY_D2H: rc = gs_stream_copy_d2h(c->s, c->host, c->buf, 0, c->bytes); break;
    case COPY_PEER: rc = gs_stream_copy_peer(c->s, c->buf, 0, c->peer_buf, 0, c->bytes); break;
    }
    if (rc == 0)
      rc = gs_stream_synchronize(c->s);
    t[r] = seconds_since(t0);
  }
  qsort(t, 5, sizeof t[0], cmp_double);
  *gbps = (double)c->bytes / t[2] / 1e9;
  return rc;
}

static int copies(gs_device_t *dev, copy_figures *f) {
  const size_t bytes = 64 << 20;
  gs_stream_t *s = NULL;
  gs_buffer_t *d = NULL, *p = NULL;
  void *pageable = malloc(bytes);
  int rc = pageable ? gs_stream_create(dev, &s) : gs_error(GS_ENOMEM, "out of memory");
  if (rc == 0)
    rc = gs_pool_alloc(gs_device_pool(dev, GS_MEM_DEVICE), bytes, NULL, &d);
  if (rc == 0)
    rc = gs_pool_alloc(gs_device_pool(dev, GS_MEM_PINNED_HOST), bytes, NULL, &p);
  if (rc == 0) {
    memset(pageable, 1, bytes);
    memset(gs_buffer_host_ptr(p), 1, bytes);
  }
  double *out[4] = {&f->h2d_pinned, &f->h2d_pageable, &f->d2h_pinned, &f->d2h_pageable};
  for (int kind = 0; rc == 0 && kind < 4; kind++) {
    timed_copy c = {.kind = kind < 2 ? COPY_H2D : COPY_D2H, .s = s, .buf = d, .bytes = bytes,
                    .host = kind % 2 == 0 ? gs_buffer_host_ptr(p) : pageable};
    rc = copy_rate(&c, out[kind]);
  }
  gs_buffer_free(d, NULL);
  gs_buffer_free(p, NULL);
  if (s)
    gs_stream_destroy(s);
  free(pageable);
  return rc;
}

/* The exchange between devices: 64 MiB from `dev` to a peer of the same
 * backend and back (gs_stream_copy_peer: P2P where the backend has it,
 * staged through host memory otherwise), median of 5 each way, GB/s. */
static int exchange(gs_device_t *dev, gs_device_t *peer, double *to_peer, double *from_peer) {
  const size_t bytes = 64 << 20;
  gs_stream_t *s = NULL, *t = NULL;
  gs_buffer_t *a = NULL, *b = NULL;
  int rc = gs_stream_create(dev, &s);
  if (rc == 0)
    rc = gs_stream_create(peer, &t);
  if (rc == 0)
    rc = gs_pool_alloc(gs_device_pool(dev, GS_MEM_DEVICE), bytes, NULL, &a);
  if (rc == 0)
    rc = gs_pool_alloc(gs_device_pool(peer, GS_MEM_DEVICE), bytes, NULL, &b);
  if (rc == 0)
    rc = gs_stream_memset(s, a, 0, 1, bytes);
  if (rc == 0)
    rc = gs_stream_synchronize(s);
  if (rc == 0) {
    timed_copy there = {.kind = COPY_PEER, .s = t, .buf = b, .peer_buf = a, .bytes = bytes};
    rc = copy_rate(&there, to_peer);
  }
  if (rc == 0) {
    timed_copy back = {.kind = COPY_PEER, .s = s, .buf = a, .peer_buf = b, .bytes = bytes};
    rc = copy_rate(&back, from_peer);
  }
  if (s) /* (destroying waits for what is queued) */
    gs_stream_destroy(s);
  if (t)
    gs_stream_destroy(t);
  gs_buffer_free(a, NULL);
  gs_buffer_free(b, NULL);
  return rc;
}

/* ---- GEMM: an ONNX MatMul model made here --------------------------------------------------- */

typedef struct pb {
  unsigned char *b;
  size_t n, cap;
} pb;

static void put(pb *o, const void *data, size_t n) {
  if (o->n + n > o->cap) {
    o->cap = (o->n + n) * 2 + 64;
    o->b = realloc(o->b, o->cap); /* tiny; out of memory aborts below */
  }
  if (o->b) {
    memcpy(o->b + o->n, data, n);
    o->n += n;
  }
}

static void varint(pb *o, uint64_t v) {
  unsigned char c[10];
  int k = 0;
  do {
    c[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(o, c, (size_t)k);
}

static void field_varint(pb *o, int field, uint64_t v) {
  varint(o, (uint64_t)field << 3);
  varint(o, v);
}

static void field_bytes(pb *o, int field, const void *data, size_t n) {
  varint(o, (uint64_t)field << 3 | 2);
  varint(o, n);
  put(o, data, n);
}

static void field_msg(pb *o, int field, pb *msg) {
  field_bytes(o, field, msg->b, msg->n);
  free(msg->b);
  *msg = (pb){0};
}

/* ValueInfoProto of a float32 matrix `name` [n, n]. */
static void matrix_info(pb *o, int field, const char *name, int64_t n) {
  pb dim = {0}, shape = {0}, tensor = {0}, type = {0}, info = {0};
  for (int i = 0; i < 2; i++) {
    field_varint(&dim, 1, (uint64_t)n);
    field_msg(&shape, 1, &dim);
  }
  field_varint(&tensor, 1, 1); /* FLOAT */
  field_msg(&tensor, 2, &shape);
  field_msg(&type, 1, &tensor);
  field_bytes(&info, 1, name, strlen(name));
  field_msg(&info, 2, &type);
  field_msg(o, field, &info);
}

static pb matmul_model(int64_t n) {
  pb node = {0}, graph = {0}, opset = {0}, model = {0};
  field_bytes(&node, 1, "A", 1);
  field_bytes(&node, 1, "B", 1);
  field_bytes(&node, 2, "C", 1);
  field_bytes(&node, 4, "MatMul", 6);
  field_msg(&graph, 1, &node);
  field_bytes(&graph, 2, "gemm", 4);
  matrix_info(&graph, 11, "A", n);
  matrix_info(&graph, 11, "B", n);
  matrix_info(&graph, 12, "C", n);
  field_varint(&model, 1, 8); /* ir_version */
  field_varint(&opset, 2, 17);
  field_msg(&model, 8, &opset);
  field_msg(&model, 7, &graph);
  return model;
}

/* The operands stay on the device (copied there once), so the figure is the
 * product alone, comparable with the device library's own GEMM; the copies
 * have their figures above. */
static int time_gemm_runs(gs_plan *plan, gs_buffer_t *const *in, gs_buffer_t *const *out,
                          int64_t n, double *gflops) {
  double t[7];
  int rc = gs_plan_run_buffers(plan, in, out); /* the first run sets up the device library */
  for (int r = 0; rc == 0 && r < 7; r++) {
    uint64_t t0 = gs_now_ns();
    rc = gs_plan_run_buffers(plan, in, out);
    t[r] = seconds_since(t0);
  }
  if (rc == 0) {
    qsort(t, 7, sizeof t[0], cmp_double);
    *gflops = 2.0 * (double)n * (double)n * (double)n / t[3] / 1e9;
  }
  return rc;
}

static int gemm(gs_device_t *dev, int64_t n, double *gflops) {
  pb bytes = matmul_model(n);
  if (!bytes.b)
    return gs_error(GS_ENOMEM, "out of memory");
  gs_model *m = NULL;
  gs_plan *plan = NULL;
  int rc = gs_model_load_bytes(bytes.b, bytes.n, NULL, &m);
  free(bytes.b);
  gs_shape shapes[2] = {{2, {n, n}}, {2, {n, n}}};
  gs_plan_options po = {.device = dev};
  if (rc == 0)
    rc = gs_plan_create(m, shapes, &po, &plan);
  size_t sz = (size_t)(n * n) * sizeof(float);
  float *host = malloc(sz);
  gs_buffer_t *buf[3] = {NULL, NULL, NULL}; /* A, B, C */
  gs_stream_t *s = NULL;
  if (rc == 0 && !host)
    rc = gs_error(GS_ENOMEM, "out of memory");
  if (rc == 0)
    rc = gs_stream_create(dev, &s);
  for (int i = 0; rc == 0 && i < 3; i++)
    rc = gs_pool_alloc(gs_device_pool(dev, GS_MEM_DEVICE), sz, NULL, &buf[i]);
  for (int k = 0; rc == 0 && k < 2; k++) {
    for (int64_t i = 0; i < n * n; i++)
      host[i] = (float)(i % (7 - 2 * k)) * 0.1f;
    rc = gs_stream_copy_h2d(s, buf[k], 0, host, sz);
    if (rc == 0)
      rc = gs_stream_synchronize(s);
  }
  if (rc == 0)
    rc = time_gemm_runs(plan, buf, buf + 2, n, gflops);
  for (int i = 0; i < 3; i++)
    gs_buffer_free(buf[i], NULL);
  if (s)
    gs_stream_destroy(s);
  free(host);
  gs_plan_destroy(plan);
  gs_model_free(m);
  return rc;
}

/* ---- a synthetic pipeline ------------------------------------------------------------------ */

typedef struct synthetic {
  int64_t items;
  long us; /* this stage's work per item */
} synthetic;

static int synthetic_stage(void *ctx, int slot, int64_t seq) {
  (void)slot;
  const synthetic *s = ctx;
  if (seq >= s->items)
    return 1;
  struct timespec ts = {0, s->us * 1000};
  nanosleep(&ts, NULL); /* the stage waits on its device or storage */
  return 0;
}

/* Six stages of different lengths, each timed alone, then together. */
static int synthetic_pipeline(double *alone_min, double *whole, const char **slowest) {
  static const char *const names[6] = {"ingest", "preprocess", "h2d", "compute", "d2h", "write"};
  static const long us[6] = {300, 400, 250, 600, 250, 200};
  synthetic st[6];
  gs_pipeline_stage stages[6];
  for (int k = 0; k < 6; k++) {
    st[k] = (synthetic){.items = 1000, .us = us[k]};
    stages[k] = (gs_pipeline_stage){names[k], 1, synthetic_stage, &st[k], false};
  }
  *alone_min = 0;
  for (int k = 0; k < 6; k++) {
    gs_pipeline_result r;
    int rc = gs_pipeline_run(&stages[k], 1, 4, NULL, &r);
    if (rc < 0)
      return rc;
    double rate = (double)r.items / ((double)r.wall_ns / 1e9);
    if (*alone_min == 0 || rate < *alone_min) {
      *alone_min = rate;
      *slowest = names[k];
    }
  }
  gs_pipeline_result r;
  int rc = gs_pipeline_run(stages, 6, 6, NULL, &r);
  *whole = rc == 0 ? (double)r.items / ((double)r.wall_ns / 1e9) : 0;
  return rc;
}

/* ---- the digits pipeline over a data set on disk --------------------------------------------- */

static atomic_bool interrupted;
static void on_interrupt(int sig) {
  (void)sig;
  atomic_store(&interrupted, true);
}

/* Removes our work directory: its files, its output directory's files. */
static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) != 0 && errno == EISDIR)
      remove_tree(path);
  }
  if (d)
    closedir(d);
  rmdir(dir);
}

static double rate_of(const gs_pipeline_result *r) {
  return r->wall_ns ? (double)r->items / ((double)r->wall_ns / 1e9) : 0;
}

static int slowest_alone(const double *alone, int n) {
  int slowest = 0;
  for (int k = 1; k < n; k++)
    if (alone[k] < alone[slowest])
      slowest = k;
  return slowest;
}

/* A pipeline's limit with the stages that share one resource added up
 * before it is taken (DESIGN.md), in items per second: on CPU devices every
 * stage but ingest (which waits on storage) runs on the same cores; on
 * accelerators, preprocess and write share the host's. Never above the
 * slowest stage alone. */
static double shared_cpu_limit(const gs_pipeline_result *whole, const double *alone,
                               bool cpu_devices) {
  double cpu_time = 0;
  for (int k = 1; k < whole->n_stages; k++)
    if (cpu_devices || strcmp(whole->stages[k].name, "preprocess") == 0 ||
        strcmp(whole->stages[k].name, "write") == 0)
      cpu_time += alone[k] > 0 ? 1.0 / alone[k] : 0;
  double slowest = alone[slowest_alone(alone, whole->n_stages)];
  return cpu_time > 0 && 1.0 / cpu_time < slowest ? 1.0 / cpu_time : slowest;
}

/* The digits model over 262,144 rows through gs_batch_profile, on one
 * device, or cut into parts on several. */
static int digits_pipeline(gs_device_t *const *devs, int n_devs, const char *dir,
                           double alone[GS_PIPELINE_MAX_STAGES], gs_pipeline_result *whole,
                           int64_t *rows, int *batch) {
  char model[PATH_MAX], data[PATH_MAX], out[PATH_MAX];
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash)
    *slash = '\0';
  /* The demo model: beside the build tree, or installed. */
  const char *const places[] = {"/../models/digits/1/model.onnx",
                                "/../share/gpusrv/models/digits/1/model.onnx"};
  model[0] = '\0';
  for (int i = 0; i < 2; i++) {
    char candidate[PATH_MAX + 64];
    snprintf(candidate, sizeof candidate, "%s%s", exe, places[i]);
    if (access(candidate, R_OK) == 0) {
      snprintf(model, sizeof model, "%s", candidate);
      break;
    }
  }
  if (!model[0] && access("models/digits/1/model.onnx", R_OK) == 0)
    snprintf(model, sizeof model, "models/digits/1/model.onnx");
  if (!model[0])
    return gs_error(GS_ENOENT, "cannot find the digits demo model (models/digits/1/model.onnx)");
  /* 262,144 rows of 64 float32: 64 MiB on disk, in a directory of our own
   * (made with mkdtemp: nobody else's names or links in it). */
  char work[PATH_MAX];
  snprintf(work, sizeof work, "%s/gpusrv-bench-XXXXXX", dir);
  if (!mkdtemp(work))
    return gs_error(GS_EIO, "cannot make a directory in %s: %s", dir, strerror(errno));
  snprintf(data, sizeof data, "%s/digits.npy", work);
  snprintf(out, sizeof out, "%s/out", work);
  const int64_t count = 262144;
  gs_shape shape = {2, {count, 64}};
  float *x = malloc((size_t)count * 64 * sizeof *x);
  if (!x)
    return gs_error(GS_ENOMEM, "out of memory");
  for (int64_t i = 0; i < count * 64; i++)
    x[i] = (float)((i * 2654435761u) % 17);
  int rc = gs_npy_write(data, GS_DT_FLOAT32, &shape, x);
  free(x);
  gs_batch_options o = {.model_path = model, .input = data, .output_dir = out, .batch = 4096,
                        .n_devices = n_devs, .slots = 4, .cancel = &interrupted};
  gs_prep_defaults(&o.prep);
  memcpy(o.devices, devs, sizeof *devs * (size_t)n_devs);
  memset(whole, 0, sizeof *whole);
  if (rc == 0)
    rc = gs_batch_profile(&o, alone, whole, rows);
  *batch = o.batch;
  remove_tree(work);
  return rc;
}

/* The digits model cut in two, on `dev` and `peer`, the exchange between
 * them a stage: the whole as a fraction of its slowest stage alone. Fills
 * `text`; returns the figures as JSON, or NULL (text says why). */
static json_t *split_pipeline(gs_device_t *dev, gs_device_t *peer, const char *dir, char *text,
                              size_t size) {
  gs_device_t *pair[2] = {dev, peer};
  double alone[GS_PIPELINE_MAX_STAGES] = {0};
  gs_pipeline_result whole = {0};
  int64_t rows = 0;
  int batch = 0;
  if (digits_pipeline(pair, 2, dir, alone, &whole, &rows, &batch) < 0) {
    snprintf(text, size, "failed: %s", gs_error_detail());
    return NULL;
  }
  int worst = slowest_alone(alone, whole.n_stages), xchg = -1;
  for (int k = 0; k < whole.n_stages; k++)
    if (strncmp(whole.stages[k].name, "exchange", 8) == 0)
      xchg = k;
  double rate = rate_of(&whole) * batch, limit = alone[worst] * batch;
  double fraction = limit > 0 ? rate / limit : 0;
  double exchange_alone = xchg >= 0 ? alone[xchg] * batch : 0;
  const char *exchange_name = xchg >= 0 ? whole.stages[xchg].name : "exchange";
  bool cpu_devices = gs_device_get_info(dev)->type == GS_DEVICE_CPU &&
                     gs_device_get_info(peer)->type == GS_DEVICE_CPU;
  double shared = shared_cpu_limit(&whole, alone, cpu_devices) * batch;
  snprintf(text, size,
           "%.0f rows/s  = %3.0f%% of %s alone (%.0f rows/s), %3.0f%% of the limit with the "
           "stages that share the CPU added up (%.0f rows/s); %s alone %.0f rows/s",
           rate, 100 * fraction, whole.stages[worst].name, limit,
           shared > 0 ? 100 * rate / shared : 0, shared, exchange_name, exchange_alone);
  return json_pack("{s:[s,s], s:f, s:f, s:f, s:s, s:f}", "devices", gs_device_get_info(dev)->id,
                   gs_device_get_info(peer)->id, "rows_per_s", rate, "fraction", fraction,
                   "fraction_of_shared_limit", shared > 0 ? rate / shared : 0.0, "slowest",
                   whole.stages[worst].name, "exchange_rows_per_s_alone", exchange_alone);
}

/* ---- the command ------------------------------------------------------------------------------ */

static int bench_run(int argc, char **argv) {
  const gs_cli_command *me = &gs_cli_bench;
  bench_opts o = {.dir = "/var/tmp", .mib = 256};
  gs_cli_args args;
  int parsed = gs_cli_parse(me, argc, argv, &o, &args);
  if (parsed != GS_EXIT_OK)
    return parsed;
  const char *device = o.device, *dir = o.dir;
  long mib = (long)o.mib;
  bool json_out = o.json;
  if (gs_hal_init() < 0 || gs_engine_init() < 0) {
    gs_cli_error("bench: %s", gs_error_detail());
    return GS_EXIT_FAILED;
  }
  gs_device_t *dev = device ? gs_hal_device_find(device) : gs_hal_device(0);
  if (!dev) {
    gs_cli_error("bench: no device '%s' (gpusrv smi lists them)", device ? device : "0");
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  bool tty = isatty(STDERR_FILENO) && !json_out;
  atomic_init(&interrupted, false);
  struct sigaction sa = {.sa_handler = on_interrupt};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  double storage = 0, gflops = 0, synth_alone = 0, synth_whole = 0, digits_whole = 0;
  double alone[GS_PIPELINE_MAX_STAGES] = {0};
  const char *storage_how = "", *synth_slowest = "";
  copy_figures cp = {0};
  int64_t rows = 0;
  int batch = 0, rc;
  if (tty)
    fprintf(stderr, "gpusrv bench: storage...\r");
  rc = storage_read(dir, (size_t)mib, &storage, &storage_how);
  if (rc == 0 && tty)
    fprintf(stderr, "gpusrv bench: copies... \r");
  if (rc == 0)
    rc = copies(dev, &cp);
  if (rc == 0 && tty)
    fprintf(stderr, "gpusrv bench: GEMM...   \r");
  if (rc == 0)
    rc = gemm(dev, 1024, &gflops);
  if (rc == 0 && tty)
    fprintf(stderr, "gpusrv bench: pipelines...\r");
  if (rc == 0)
    rc = synthetic_pipeline(&synth_alone, &synth_whole, &synth_slowest);
  gs_pipeline_result whole = {0};
  if (rc == 0)
    rc = digits_pipeline(&dev, 1, dir, alone, &whole, &rows, &batch);
  digits_whole = rate_of(&whole);
  if (tty)
    fprintf(stderr, "                          \r");
  if (rc < 0) {
    gs_cli_error("bench: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  static const char *const names[6] = {"ingest", "preprocess", "h2d", "compute", "d2h", "write"};
  int slowest = slowest_alone(alone, 6);
  gs_device_t *peer = NULL; /* another device of the same backend, for the exchange */
  for (int i = 0; !peer && i < gs_hal_device_count(); i++)
    if (gs_hal_device(i) != dev && strcmp(gs_device_get_info(gs_hal_device(i))->backend,
                                          gs_device_get_info(dev)->backend) == 0)
      peer = gs_hal_device(i);
  double to_peer = 0, from_peer = 0;
  char exchange_text[300] = "n/a (no other device of this backend)";
  if (peer && exchange(dev, peer, &to_peer, &from_peer) < 0)
    snprintf(exchange_text, sizeof exchange_text, "failed: %s", gs_error_detail());
  else if (peer)
    snprintf(exchange_text, sizeof exchange_text, "%.2f GB/s to %s, %.2f GB/s back (64 MiB)",
             to_peer, gs_device_get_info(peer)->id, from_peer);
  char split_text[400] = "n/a (no other device of this backend)";
  json_t *split_json = NULL;
  if (peer) {
    if (tty)
      fprintf(stderr, "gpusrv bench: split pipeline...\r");
    split_json = split_pipeline(dev, peer, dir, split_text, sizeof split_text);
    if (tty)
      fprintf(stderr, "                               \r");
  }
  const gs_device_info *info = gs_device_get_info(dev);
  double shared_limit = shared_cpu_limit(&whole, alone, info->type == GS_DEVICE_CPU);
  if (json_out) {
    json_t *st = json_object();
    for (int k = 0; k < 6; k++)
      json_object_set_new(st, names[k], json_real(alone[k] * batch));
    json_t *j = json_pack(
        "{s:s, s:{s:f, s:s}, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:{s:f, s:f, s:f, s:s}, "
        "s:{s:o, s:f, s:f, s:s, s:I}}",
        "device", info->id, "storage_read", "GBps", storage, "method", storage_how,
        "h2d_pinned_GBps", cp.h2d_pinned, "h2d_pageable_GBps", cp.h2d_pageable, "d2h_pinned_GBps",
        cp.d2h_pinned, "d2h_pageable_GBps", cp.d2h_pageable, "gemm_gflops", gflops,
        "digits_rows_per_s", alone[3] * batch, "exchange", exchange_text, "synthetic_pipeline",
        "items_per_s", synth_whole, "slowest_alone_per_s", synth_alone, "fraction",
        synth_alone > 0 ? synth_whole / synth_alone : 0.0, "slowest", synth_slowest,
        "digits_pipeline", "rows_per_s_alone", st, "rows_per_s", digits_whole * batch, "fraction",
        alone[slowest] > 0 ? digits_whole / alone[slowest] : 0.0, "slowest", names[slowest],
        "rows", (json_int_t)rows);
    json_object_set_new(json_object_get(j, "digits_pipeline"), "fraction_of_shared_limit",
                        json_real(shared_limit > 0 ? digits_whole / shared_limit : 0.0));
    json_object_set_new(j, "split_pipeline", split_json ? json_incref(split_json)
                                                        : json_string(split_text));
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(j);
  } else {
    printf("gpusrv bench on %s (%s)\n\n", info->id, info->name);
    printf("Each stage alone\n");
    printf("  storage read        %8.2f GB/s   (%s, %ld MiB in %s)\n", storage, storage_how, mib,
           dir);
    printf("  preprocess          %8.0f rows/s (digits rows, float32, %s)\n", alone[1] * batch,
           "all cores");
    printf("  H2D pinned          %8.2f GB/s   pageable %.2f GB/s\n", cp.h2d_pinned,
           cp.h2d_pageable);
    printf("  D2H pinned          %8.2f GB/s   pageable %.2f GB/s\n", cp.d2h_pinned,
           cp.d2h_pageable);
    printf("  compute GEMM        %8.1f GFLOP/s (fp32 1024 x 1024 x 1024, operands on the device)\n", gflops);
    printf("  compute digits      %8.0f rows/s (batch %d)\n", alone[3] * batch, batch);
    printf("  exchange            %s\n", exchange_text);
    printf("\nPipelines, as a fraction of their slowest stage alone (the limit)\n");
    printf("  synthetic           %8.0f items/s = %3.0f%% of %s alone (%.0f/s)\n", synth_whole,
           synth_alone > 0 ? 100 * synth_whole / synth_alone : 0, synth_slowest, synth_alone);
    printf("  digits, %lld rows   %8.0f rows/s  = %3.0f%% of %s alone (%.0f rows/s)\n",
           (long long)rows, digits_whole * batch,
           alone[slowest] > 0 ? 100 * digits_whole / alone[slowest] : 0, names[slowest],
           alone[slowest] * batch);
    printf("    %-18s %8.0f rows/s  = %3.0f%% of the limit with the stages that share the %s "
           "added up (%.0f rows/s)\n", "", digits_whole * batch,
           shared_limit > 0 ? 100 * digits_whole / shared_limit : 0,
           info->type == GS_DEVICE_CPU ? "CPU (all but ingest here)" : "host CPU",
           shared_limit * batch);
    printf("    stages alone (rows/s):");
    for (int k = 0; k < 6; k++)
      printf(" %s %.0f%s", names[k], alone[k] * batch, k < 5 ? "," : "\n");
    printf("  digits in two parts %s\n", split_text);
  }
  json_decref(split_json);
  gs_hal_shutdown();
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_bench = {
    .name = "bench",
    .usage = "gpusrv bench [--device ID] [--dir DIR] [--size MiB] [--json]",
    .about = "Measures each stage of the data flow alone on this machine: storage read (O_DIRECT\n"
             "on a temporary file, or with the page cache dropped), CPU preprocessing, H2D and\n"
             "D2H from pinned and pageable memory, compute (fp32 GEMM FLOP/s and the digits demo\n"
             "model), and exchange with another device of the same backend (n/a with none); then\n"
             "the whole pipeline, synthetic and with the digits model over a data set on disk, as\n"
             "a fraction of its slowest stage.",
    .options = bench_options,
    .run = bench_run,
};

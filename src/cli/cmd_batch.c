/* cmd_batch.c - `gpusrv batch`: batch inference over a data set, in this
 * process, as the six-stage pipeline (engine/batch.h), with a progress bar
 * on a terminal and each stage's throughput and busy fraction at the end. */
#include "cli/cli.h"
#include "cli/daemon.h"

#include "base/clock.h"
#include "base/error.h"
#include "engine/batch.h"

#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct batch_opts {
  const char *input, *output, *device, *precision, *preprocess;
  long long batch, slots, readers, workers, gpus;
  double cpus;
  bool json;
  gs_cli_daemon_opts daemon;
} batch_opts;

static const gs_cli_option batch_options[] = {
    {"input", 'i', GS_OPT_STRING, offsetof(batch_opts, input), "PATH",
     "The data set (.npy, a directory of .npy, or .csv), or images: a directory of JPEG and "
     "PNG files (subdirectories too), a .txt list of their paths, or a .csv whose first column "
     "is their paths", 0, 0},
    {"output", 'o', GS_OPT_STRING, offsetof(batch_opts, output), "DIR",
     "Where the outputs go (made if missing)", 0, 0},
    {"batch", 'b', GS_OPT_INT, offsetof(batch_opts, batch), "N",
     "Rows per batch (default 64; a model's fixed batch size wins)", 1, 1 << 20},
    {"device", 'd', GS_OPT_STRING, offsetof(batch_opts, device), "ID[,ID]",
     "Device to run on (default: the first). With several, the model is cut into that many "
     "consecutive parts, one per device in that order, of about equal weight; what a part "
     "computes is copied to the next part's device in an exchange stage", 0, 0},
    GS_CLI_OPT("precision", GS_OPT_STRING, batch_opts, precision, "P", "fp32 (default), fp16, bf16 or fp64"),
    GS_CLI_OPT("preprocess", GS_OPT_STRING, batch_opts, preprocess, "SPEC",
               "KEY=VALUE,...: each value becomes (x*scale - mean)/std (scale=X, mean=M, std=S; "
               "fractions allowed: scale=1/255). Images also take resize=N (the shorter edge) or "
               "HxW, center_crop=N or HxW, interpolation=bilinear|bicubic|nearest (as Pillow "
               "resizes, antialiased), layout=nchw|nhwc (default: the model input's), a mean "
               "and std per channel: mean=0.485:0.456:0.406, and finish=auto|cpu|device: where "
               "type, layout and normalisation run (auto: on a GPU, which then gets uint8; the "
               "CPU where the device shares its cores)"),
    GS_CLI_OPT_RANGE("slots", GS_OPT_INT, batch_opts, slots, "N", "Batches in flight (default 4)",
                     1, 64),
    GS_CLI_OPT_RANGE("readers", GS_OPT_INT, batch_opts, readers, "N",
                     "Reader threads (default 2, at most 16)", 1, 1 << 20),
    GS_CLI_OPT_RANGE("workers", GS_OPT_INT, batch_opts, workers, "N",
                     "Preprocessing threads (default: the cores, at most 32; where the CPU "
                     "computes, a quarter of them, and its kernels take the rest)",
                     1, 1 << 20),
    GS_CLI_OPT("json", GS_OPT_BOOL, batch_opts, json, NULL, "Print the figures as JSON"),
    GS_CLI_DAEMON_ROWS(batch_opts),
    GS_CLI_OPT_RANGE("cpus", GS_OPT_REAL, batch_opts, cpus, "N",
                     "With --url: the CPU cores to book (default: --workers, else 1)", 0.001, 4096),
    GS_CLI_OPT_RANGE("gpus", GS_OPT_INT, batch_opts, gpus, "N",
                     "With --url: whole devices to book", 0, 64),
    GS_CLI_OPTIONS_END,
};

typedef struct progress_state {
  bool tty;
  uint64_t start_ns, last_ns;
} progress_state;

static void show_progress(int64_t done, int64_t total, void *ctx) {
  progress_state *p = ctx;
  uint64_t now = gs_now_ns();
  if (!p->tty || (now - p->last_ns < 100000000 && done < total))
    return;
  p->last_ns = now;
  double secs = (double)(now - p->start_ns) / 1e9, rate = secs > 0 ? (double)done / secs : 0;
  double eta = rate > 0 ? (double)(total - done) / rate : 0;
  int width = 30, filled = total ? (int)((double)done / (double)total * width) : width;
  char bar[64];
  for (int i = 0; i < width; i++)
    bar[i] = i < filled ? '#' : '.';
  bar[width] = '\0';
  fprintf(stderr, "\r[%s] %lld/%lld rows  %.0f rows/s  ETA %.0fs ", bar, (long long)done,
          (long long)total, rate, eta);
  if (done >= total)
    fputc('\n', stderr);
}

static atomic_bool interrupted;
static void on_interrupt(int sig) {
  (void)sig;
  atomic_store(&interrupted, true);
}

/* MODEL as given, or the highest version's model.onnx in a model directory. */
static int resolve_model(const char *arg, char *out, size_t cap) {
  size_t len = strlen(arg);
  if (len > 5 && strcmp(arg + len - 5, ".onnx") == 0) {
    snprintf(out, cap, "%s", arg);
    return GS_OK;
  }
  for (int v = 1000; v >= 1; v--) {
    snprintf(out, cap, "%s/%d/model.onnx", arg, v);
    if (access(out, R_OK) == 0)
      return GS_OK;
  }
  return gs_error(GS_ENOENT, "%s is neither a .onnx file nor a directory of <version>/model.onnx",
                  arg);
}

/* --url: the same command, with absolute paths, as a job of the daemon;
 * waits for it and passes its output on; exits 0 when it completed, else 1
 * (the job's state and reason said). */
/* The first part of `path` that users other than its owner cannot reach (a
 * directory without o+x, or the file without o+r, or o+x when `exec`), or
 * NULL; into `out`. A job runs as its tenant's Unix user, often another. */
static const char *unreachable_by_others(const char *path, bool exec, char *out, size_t cap) {
  snprintf(out, cap, "%s", path);
  for (char *slash = strchr(out + 1, '/');; slash = strchr(slash + 1, '/')) {
    if (slash)
      *slash = '\0';
    struct stat sb;
    bool dir = slash != NULL;
    mode_t need = dir ? S_IXOTH : exec ? (S_IROTH | S_IXOTH) : S_IROTH;
    if (stat(out, &sb) == 0 && (sb.st_mode & need) != need)
      return out;
    if (!slash)
      return NULL;
    *slash = '/';
  }
}

/* After a job that failed: says which of its files its user may not reach. */
static void explain_unreachable(const char *exe, const char *model, const char *input) {
  const char *paths[] = {exe, model, input};
  for (int i = 0; i < 3; i++) {
    char part[PATH_MAX];
    if (unreachable_by_others(paths[i], i == 0, part, sizeof part))
      fprintf(stderr, "gpusrv: batch: note: the job runs as its tenant's Unix user, and %s is "
                      "not open to other users (so %s may be out of its reach): install gpusrv "
                      "(make install), or keep the build, model and data where that user can "
                      "read them\n", part, paths[i]);
  }
}

static int run_as_job(const char *url, const char *token, json_t *forward, const char *model,
                      const char *input, const char *output, double cpus, int gpus) {
  char exe[PATH_MAX], abs_model[PATH_MAX], abs_in[PATH_MAX], abs_out[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  const char *bad = n <= 0 ? "this executable" : !realpath(model, abs_model) ? model
                    : !realpath(input, abs_in)                              ? input
                                                                            : NULL;
  if (bad) {
    gs_cli_error("batch: cannot resolve %s: %s", bad, strerror(errno));
    return GS_EXIT_FAILED;
  }
  exe[n] = '\0';
  if (output[0] == '/')
    snprintf(abs_out, sizeof abs_out, "%s", output);
  else {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
      gs_cli_error("batch: %s", strerror(errno));
      return GS_EXIT_FAILED;
    }
    snprintf(abs_out, sizeof abs_out, "%s/%s", cwd, output);
  }
  /* The command: this executable's batch, with the options that shape the
   * run itself, as parsed (never the token). */
  size_t n_forward = json_array_size(forward);
  const char **argv = calloc(n_forward + 8, sizeof *argv);
  gs_client *client = argv ? gs_cli_client("batch", url, token) : NULL;
  if (!client) {
    if (!argv)
      gs_cli_error("batch: out of memory");
    free(argv);
    return GS_EXIT_FAILED;
  }
  const char *fixed[] = {exe, "batch", abs_model, "--input", abs_in, "--output", abs_out};
  size_t argc = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    argv[argc++] = fixed[i];
  for (size_t i = 0; i < n_forward; i++)
    argv[argc++] = json_string_value(json_array_get(forward, i));
  gs_client_job_spec spec = {.argv = argv, .name = "batch", .cpus = cpus, .gpus = gpus};
  int64_t id = 0;
  int rc = gs_client_job_submit(client, &spec, &id, NULL);
  free(argv);
  if (rc != GS_OK) {
    gs_cli_error("batch: %s", gs_client_last_error(client));
    gs_client_close(client);
    return GS_EXIT_FAILED;
  }
  fprintf(stderr, "gpusrv: batch: job %lld queued\n", (long long)id);
  json_t *job;
  if (!(job = gs_cli_await_job("batch", url, token, id))) {
    gs_client_close(client);
    return GS_EXIT_FAILED;
  }
  /* Its output, then its errors, as the job logged them. */
  for (int stream = 0; stream < 2; stream++)
    if (gs_client_job_logs(client, id, stream == 1, false, gs_cli_write_to,
                           stream ? stderr : stdout) != GS_OK)
      gs_cli_error("batch: job %lld's %s: %s", (long long)id, stream ? "errors" : "output",
                   gs_client_last_error(client));
  gs_client_close(client);
  const char *state = json_string_value(json_object_get(job, "state"));
  const char *reason = json_string_value(json_object_get(job, "reason"));
  int exit_code = state && strcmp(state, "COMPLETED") == 0 ? GS_EXIT_OK : GS_EXIT_FAILED;
  if (exit_code != GS_EXIT_OK) {
    gs_cli_error("batch: job %lld %s%s%s", (long long)id, state ? state : "ended oddly",
                 reason && reason[0] ? ": " : "", reason ? reason : "");
    explain_unreachable(exe, abs_model, abs_in);
  }
  json_decref(job);
  return exit_code;
}

static void print_summary(const gs_pipeline_result *r, int64_t rows, int n_devices,
                          bool prep_on_device, int64_t resized_on_device, int64_t h2d_bytes,
                          bool json_out) {
  const char *prep_where = prep_on_device ? "cpu+device" : "cpu";
  double wall = (double)r->wall_ns / 1e9;
  int slowest = gs_pipeline_slowest(r);
  char exchange[160] = "n/a (one device)";
  if (n_devices > 1)
    snprintf(exchange, sizeof exchange,
             "the model in %d parts, one per device; the exchange> stages copy between them",
             n_devices);
  if (json_out) {
    json_t *stages = json_array();
    for (int k = 0; k < r->n_stages; k++) {
      const gs_pipeline_stage_stats *s = &r->stages[k];
      double busy = (double)s->busy_ns / 1e9 / s->threads;
      json_array_append_new(
          stages, json_pack("{s:s, s:i, s:I, s:f, s:f, s:f}", "stage", s->name, "threads",
                            s->threads, "batches", (json_int_t)s->items, "busy_fraction",
                            wall > 0 ? busy / wall : 0.0, "batches_per_s_alone",
                            busy > 0 ? (double)s->items / busy : 0.0, "waiting_s",
                            (double)(s->wait_in_ns + s->wait_out_ns) / 1e9 / s->threads));
    }
    json_t *j = json_pack("{s:I, s:I, s:f, s:f, s:o, s:s, s:s, s:s, s:o, s:I}", "rows",
                          (json_int_t)rows,
                          "batches", (json_int_t)r->items, "seconds", wall, "rows_per_s",
                          wall > 0 ? (double)rows / wall : 0.0, "stages", stages, "bottleneck",
                          slowest >= 0 ? r->stages[slowest].name : "", "exchange", exchange,
                          "preprocess_on", prep_where, "resized_on_device",
                          resized_on_device >= 0 ? json_integer(resized_on_device) : json_null(),
                          "h2d_bytes", (json_int_t)h2d_bytes);
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(j);
    return;
  }
  printf("%lld rows in %lld batches, %.3f s: %.0f rows/s\n", (long long)rows,
         (long long)r->items, wall, wall > 0 ? (double)rows / wall : 0);
  printf("%-18s %7s %10s %13s %12s\n", "stage", "threads", "busy", "alone", "waiting");
  for (int k = 0; k < r->n_stages; k++) {
    const gs_pipeline_stage_stats *s = &r->stages[k];
    double busy = (double)s->busy_ns / 1e9 / s->threads;
    printf("%-18s %7d %9.0f%% %8.0f b/s %11.3fs%s\n", s->name, s->threads,
           wall > 0 ? 100 * busy / wall : 0, busy > 0 ? (double)s->items / busy : 0,
           (double)(s->wait_in_ns + s->wait_out_ns) / 1e9 / s->threads,
           k == slowest ? "  <- bottleneck" : "");
  }
  printf("exchange: %s\n", exchange);
  if (h2d_bytes == 0 && rows > 0)
    printf("to the device: nothing copied (the host writes the device's memory in place)\n");
  else
    printf("to the device: %.1f MiB, %.0f KiB a row\n", (double)h2d_bytes / (1 << 20),
           rows > 0 ? (double)h2d_bytes / 1024 / (double)rows : 0.0);
  if (resized_on_device >= 0)
    printf("preprocess: decode on the CPU; resize and crop on the device (the resize stage) "
           "for %lld of %lld images, the rest on the CPU; type, layout and normalisation on "
           "the device, in the plan (uint8 crosses the bus)\n",
           (long long)resized_on_device, (long long)rows);
  else if (prep_on_device)
    printf("preprocess: decode, resize and crop on the CPU; type, layout and normalisation on "
           "the device, in the plan (uint8 crosses the bus)\n");
  else
    printf("preprocess: on the CPU\n");
}

/* "cuda0,cuda1": the devices, in order. */
static int parse_devices(const char *list, gs_batch_options *o) {
  int count = 1;
  for (const char *c = list; *c; c++)
    count += *c == ',';
  if (count > GS_BATCH_MAX_DEVICES)
    return gs_error(GS_EINVAL, "--device names at most %d devices, not %d", GS_BATCH_MAX_DEVICES,
                    count);
  for (const char *at = list;; at++) {
    size_t len = strcspn(at, ",");
    char id[64];
    if (len == 0 || len >= sizeof id)
      return gs_error(GS_EINVAL, "--device takes device ids separated by commas, not '%s'", list);
    memcpy(id, at, len);
    id[len] = '\0';
    gs_device_t *dev = gs_hal_device_find(id);
    if (!dev)
      return gs_error(GS_ENOENT, "no device '%s' (gpusrv smi lists them)", id);
    for (int i = 0; i < o->n_devices; i++)
      if (o->devices[i] == dev)
        return gs_error(GS_EINVAL, "--device names %s twice", id);
    o->devices[o->n_devices++] = dev;
    at += len;
    if (!*at)
      return GS_OK;
  }
}

/* For --url: the options that shape the run itself, as parsed (never the
 * token), for the job's command line. New reference. */
static json_t *forwarded_options(const gs_cli_args *args, const batch_opts *b) {
  const gs_cli_command *me = &gs_cli_batch;
  json_t *f = json_array();
  const struct {
    const char *name;
    const char *text;
    long long number;
  } rows[] = {{"batch", NULL, b->batch},           {"device", b->device, 0},
              {"precision", b->precision, 0},      {"preprocess", b->preprocess, 0},
              {"slots", NULL, b->slots},           {"readers", NULL, b->readers},
              {"workers", NULL, b->workers}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (!gs_cli_given(me, args, rows[i].name))
      continue;
    char flag[32], number[32];
    snprintf(flag, sizeof flag, "--%s", rows[i].name);
    snprintf(number, sizeof number, "%lld", rows[i].number);
    json_array_append_new(f, json_string(flag));
    json_array_append_new(f, json_string(rows[i].text ? rows[i].text : number));
  }
  if (b->json)
    json_array_append_new(f, json_string("--json"));
  return f;
}

static int batch_run_cmd(int argc, char **argv) {
  const gs_cli_command *me = &gs_cli_batch;
  batch_opts b = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(me, argc, argv, &b, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  int64_t failed = 0;
  bool prep_on_device = false;
  int64_t resized_on_device = -1, h2d_bytes = 0;
  gs_batch_options o = {.input = b.input, .failed = &failed, .prep_on_device = &prep_on_device,
                        .resized_on_device = &resized_on_device, .h2d_bytes = &h2d_bytes,
                        .output_dir = b.output, .batch = (int)b.batch, .slots = (int)b.slots,
                        .readers = b.readers > 16 ? 16 : (int)b.readers,
                        .workers = b.workers > 32 ? 32 : (int)b.workers};
  const char *precision = b.precision ? b.precision : "fp32", *device = b.device;
  gs_prep_defaults(&o.prep);
  if (b.preprocess && gs_prep_parse(b.preprocess, &o.prep) < 0)
    return gs_cli_usage_error(me, "%s", gs_error_detail());
  if (!o.input || !o.output_dir)
    return gs_cli_usage_error(me, "--input and --output are required");
  if (!gs_precision_from_name(precision, &o.precision))
    return gs_cli_usage_error(me, "--precision is fp32, fp16, bf16 or fp64, not '%s'", precision);
  char model[4096];
  if (resolve_model(args.words[0], model, sizeof model) < 0) {
    gs_cli_error("batch: %s", gs_error_detail());
    return GS_EXIT_FAILED;
  }
  o.model_path = model;
  if (b.daemon.url) {
    json_t *forward = forwarded_options(&args, &b);
    rc = run_as_job(b.daemon.url, b.daemon.token, forward, model, o.input, o.output_dir,
                    b.cpus > 0 ? b.cpus : o.workers > 0 ? o.workers : 1, (int)b.gpus);
    json_decref(forward);
    return rc;
  }
  bool json_out = b.json;
  if (gs_hal_init() < 0 || gs_engine_init() < 0) {
    gs_cli_error("batch: %s", gs_error_detail());
    return GS_EXIT_FAILED;
  }
  if (device && parse_devices(device, &o) < 0) {
    gs_cli_error("batch: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  progress_state prog = {.tty = isatty(STDERR_FILENO), .start_ns = gs_now_ns()};
  o.progress = show_progress;
  o.progress_ctx = &prog;
  atomic_init(&interrupted, false);
  o.cancel = &interrupted;
  struct sigaction sa = {.sa_handler = on_interrupt};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  /* Preprocessing threads take and free blocks of a few hundred KiB per
   * image; glibc would hand each back to the kernel (its threads' arenas
   * trim above 128 KiB) and fault the pages in again for the next. Keep
   * them: 5-20% more images a second on one core. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  int64_t rows = 0;
  gs_pipeline_result r;
  rc = gs_batch_run(&o, &rows, &r);
  if (rc < 0) {
    gs_cli_error("batch: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  print_summary(&r, rows, o.n_devices, prep_on_device, resized_on_device, h2d_bytes,
                json_out);
  if (failed)
    fprintf(stderr, "gpusrv: batch: %lld image%s could not be read; %s zeros: %s/failed.txt "
                    "says which and why\n", (long long)failed, failed == 1 ? "" : "s",
            failed == 1 ? "its row is" : "their rows are", o.output_dir);
  gs_hal_shutdown();
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_batch = {
    .name = "batch",
    .usage = "gpusrv batch MODEL --input PATH --output DIR [OPTIONS]",
    .about = "Runs MODEL (a model.onnx, or a model directory of <version>/model.onnx) over every\n"
             "row of a data set and writes DIR/<output name>.npy, rows in input order. The data\n"
             "set is a .npy file (rows along its first dimension), a directory of .npy files\n"
             "(taken in name order, each one row or several) or a CSV file (one row per line; a\n"
             "header line is skipped). Storage is read ahead by reader threads, rows are\n"
             "converted and normalised on a CPU thread pool into pinned staging buffers, then\n"
             "copied to the device, computed and copied back, overlapped batch by batch. At the\n"
             "end it prints each stage's throughput and busy fraction and names the bottleneck.\n"
             "The results equal `gpusrv model run`'s.\n"
             "\n"
             "With --url it runs as a job of that daemon, under a booking of the front desk (its\n"
             "tenant's user must be able to read the model and the data set and write DIR); it\n"
             "waits, then prints the job's output.",
    .options = batch_options,
    .min_args = 1,
    .max_args = 1,
    .run = batch_run_cmd,
};

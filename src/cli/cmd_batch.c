/* cmd_batch.c - `gpusrv batch`: batch inference over a data set, in this
 * process, as the six-stage pipeline (engine/batch.h), with a progress bar
 * on a terminal and each stage's throughput and busy fraction at the end. */
#include "cli/cli.h"
#include "cli/daemon.h"

#include "base/clock.h"
#include "base/error.h"
#include "engine/batch.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char batch_help[] =
    "Usage: gpusrv batch MODEL --input PATH --output DIR [OPTIONS]\n"
    "\n"
    "Runs MODEL (a model.onnx, or a model directory of <version>/model.onnx) over every row\n"
    "of a data set and writes DIR/<output name>.npy, rows in input order. The data set is a\n"
    ".npy file (rows along its first dimension), a directory of .npy files (taken in name\n"
    "order, each one row or several) or a CSV file (one row per line; a header line is\n"
    "skipped). Storage is read ahead by reader threads, rows are converted and normalised on\n"
    "a CPU thread pool into pinned staging buffers, then copied to the device, computed and\n"
    "copied back, overlapped batch by batch. At the end it prints each stage's throughput\n"
    "and busy fraction and names the bottleneck. The results equal `gpusrv model run`'s.\n"
    "\n"
    "Options:\n"
    "  -i, --input PATH       The data set (.npy, a directory of .npy, or .csv)\n"
    "  -o, --output DIR       Where the outputs go (made if missing)\n"
    "  -b, --batch N          Rows per batch (default 64; a model's fixed batch size wins)\n"
    "  -d, --device ID[,ID]   Device to run on (default: the first). With several, the model\n"
    "                         is cut into that many consecutive parts, one per device in\n"
    "                         that order, of about equal weight; what a part computes is\n"
    "                         copied to the next part's device in an exchange stage\n"
    "      --precision P      fp32 (default), fp16 or bf16\n"
    "      --preprocess SPEC  scale=X,mean=M,std=S: each value becomes (x*X - M)/S\n"
    "                         (fractions allowed: scale=1/255)\n"
    "      --slots N          Batches in flight (default 4)\n"
    "      --readers N        Reader threads (default 2)\n"
    "      --workers N        Preprocessing threads (default: the cores)\n"
    "      --json             Print the figures as JSON\n"
    "      --url URL          Run it as a job of that daemon, under a booking of the front\n"
    "                         desk (its tenant's user must be able to read the model and the\n"
    "                         data set and write DIR); it waits, then prints the job's output\n"
    "      --token TOKEN      Bearer token for --url (default: GPUSRV_TOKEN)\n"
    "      --cpus N           With --url: the CPU cores to book (default: --workers, else 1)\n"
    "      --gpus N           With --url: whole devices to book\n";

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
  if (exit_code != GS_EXIT_OK)
    gs_cli_error("batch: job %lld %s%s%s", (long long)id, state ? state : "ended oddly",
                 reason && reason[0] ? ": " : "", reason ? reason : "");
  json_decref(job);
  return exit_code;
}

static void print_summary(const gs_pipeline_result *r, int64_t rows, int n_devices,
                          bool json_out) {
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
    json_t *j = json_pack("{s:I, s:I, s:f, s:f, s:o, s:s, s:s}", "rows", (json_int_t)rows,
                          "batches", (json_int_t)r->items, "seconds", wall, "rows_per_s",
                          wall > 0 ? (double)rows / wall : 0.0, "stages", stages, "bottleneck",
                          slowest >= 0 ? r->stages[slowest].name : "", "exchange", exchange);
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

/* A usage error, once the forwarded options are let go. */
#define USAGE_ERROR(...)                                                                     \
  do {                                                                                         \
    json_decref(forward);                                                                      \
    return gs_cli_usage_error(me, __VA_ARGS__);                                                \
  } while (0)

static int batch_run_cmd(int argc, char **argv) {
  const gs_cli_command *me = &gs_cli_batch;
  gs_batch_options o = {.scale = 1, .mean = 0, .std = 1};
  const char *precision = "fp32", *device = NULL, *url = NULL, *token = NULL;
  double cpus = 0;
  int gpus = 0;
  json_t *forward = json_array(); /* for --url: the run's own options, normalised */
  bool json_out = false;
  static const struct option opts[] = {
      {"input", required_argument, NULL, 'i'},   {"output", required_argument, NULL, 'o'},
      {"batch", required_argument, NULL, 'b'},   {"device", required_argument, NULL, 'd'},
      {"precision", required_argument, NULL, 'p'}, {"preprocess", required_argument, NULL, 'P'},
      {"slots", required_argument, NULL, 's'},   {"readers", required_argument, NULL, 'r'},
      {"workers", required_argument, NULL, 'w'}, {"json", no_argument, NULL, 'j'},
      {"url", required_argument, NULL, 'u'},     {"token", required_argument, NULL, 't'},
      {"cpus", required_argument, NULL, 'c'},    {"gpus", required_argument, NULL, 'g'},
      {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "i:o:b:d:", opts, NULL)) != -1) {
    char *end = NULL;
    long n = 0;
    if (strchr("bsrw", c)) {
      n = strtol(optarg, &end, 10);
      if (end == optarg || *end || n < 1 || n > 1 << 20)
        USAGE_ERROR("bad number '%s'", optarg);
    }
    static const char *const forwarded[] = {['b'] = "--batch", ['d'] = "--device",
                                            ['p'] = "--precision", ['P'] = "--preprocess",
                                            ['s'] = "--slots", ['r'] = "--readers",
                                            ['w'] = "--workers"};
    if (c > 0 && c < (int)(sizeof forwarded / sizeof forwarded[0]) && forwarded[c]) {
      json_array_append_new(forward, json_string(forwarded[c]));
      json_array_append_new(forward, json_string(optarg));
    } else if (c == 'j') {
      json_array_append_new(forward, json_string("--json"));
    }
    switch (c) {
    case 'i': o.input = optarg; break;
    case 'o': o.output_dir = optarg; break;
    case 'b': o.batch = (int)n; break;
    case 'd': device = optarg; break;
    case 'p': precision = optarg; break;
    case 'P':
      if (gs_batch_parse_preprocess(optarg, &o) < 0)
        USAGE_ERROR("%s", gs_error_detail());
      break;
    case 's':
      if (n > 64)
        USAGE_ERROR("--slots is 1 to 64");
      o.slots = (int)n;
      break;
    case 'r': o.readers = n > 16 ? 16 : (int)n; break;
    case 'w': o.workers = n > 32 ? 32 : (int)n; break;
    case 'j': json_out = true; break;
    case 'u': url = optarg; break;
    case 't': token = optarg; break;
    case 'c':
      cpus = strtod(optarg, &end);
      if (end == optarg || *end || !(cpus > 0) || cpus > 4096)
        USAGE_ERROR("bad --cpus '%s'", optarg);
      break;
    case 'g':
      gpus = (int)strtol(optarg, &end, 10);
      if (end == optarg || *end || gpus < 0 || gpus > 64)
        USAGE_ERROR("bad --gpus '%s'", optarg);
      break;
    default:
      USAGE_ERROR("unknown or incomplete option '%s'", argv[optind - 1]);
    }
  }
  if (optind != argc - 1)
    USAGE_ERROR("give one MODEL");
  if (!o.input || !o.output_dir)
    USAGE_ERROR("--input and --output are required");
  if (!gs_precision_from_name(precision, &o.precision))
    USAGE_ERROR("--precision is fp32, fp16 or bf16, not '%s'", precision);
  char model[4096];
  if (resolve_model(argv[optind], model, sizeof model) < 0) {
    gs_cli_error("batch: %s", gs_error_detail());
    json_decref(forward);
    return GS_EXIT_FAILED;
  }
  o.model_path = model;
  if (url) {
    int rc = run_as_job(url, token, forward, model, o.input, o.output_dir,
                        cpus > 0 ? cpus : o.workers > 0 ? o.workers : 1, gpus);
    json_decref(forward);
    return rc;
  }
  json_decref(forward);
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
  int64_t rows = 0;
  gs_pipeline_result r;
  int rc = gs_batch_run(&o, &rows, &r);
  if (rc < 0) {
    gs_cli_error("batch: %s", gs_error_detail());
    gs_hal_shutdown();
    return GS_EXIT_FAILED;
  }
  print_summary(&r, rows, o.n_devices, json_out);
  gs_hal_shutdown();
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_batch = {
    .name = "batch",
    .summary = "Run a model over a data set as an overlapped pipeline",
    .help = batch_help,
    .run = batch_run_cmd,
};

/* metrics.c - GET /metrics in the Prometheus text format: per model request
 * counts and durations under Triton's nv_inference_* names (so existing
 * dashboards work), and per device telemetry, pool statistics and a batch
 * size histogram under gpusrv_* names. */
#include "api/metrics.h"
#include "api/batcher.h"
#include "api/header_cache.h"

#include "base/error.h"
#include "hal/hal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct text {
  char *buf;
  size_t len, cap;
  bool failed;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (t->failed)
    return;
  if (!t->buf && !(t->buf = malloc(t->cap = 16384))) {
    t->failed = true;
    return;
  }
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 16384;
    char *grown = realloc(t->buf, cap);
    if (!grown || n < 0) {
      t->failed = true;
      return;
    }
    t->buf = grown;
    t->cap = cap;
  }
}

static void header(text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef enum { F_SUCCESS, F_FAIL, F_COUNT, F_EXEC, F_REQ_US, F_QUEUE_US, F_IN_US, F_INFER_US,
               F_OUT_US } model_field;

static uint64_t field(const gs_model_stats *s, model_field f) {
  switch (f) {
  case F_SUCCESS: return s->success.count;
  case F_FAIL: return s->fail.count;
  case F_COUNT: return s->inference_count;
  case F_EXEC: return s->execution_count;
  case F_REQ_US: return (s->success.ns + s->fail.ns) / 1000;
  case F_QUEUE_US: return s->queue.ns / 1000;
  case F_IN_US: return s->compute_input.ns / 1000;
  case F_INFER_US: return s->compute_infer.ns / 1000;
  case F_OUT_US: return s->compute_output.ns / 1000;
  }
  return 0;
}

/* A label's value: backslashes and quotes escaped, line breaks made spaces. */
static void label_value(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (const char *c = in; *c && o + 2 < cap; c++) {
    if (*c == '\\' || *c == '"')
      out[o++] = '\\';
    out[o++] = *c == '\n' ? ' ' : *c;
  }
  out[o] = '\0';
}

/* Every booking in the ledger (model instances, jobs, Slurm's jobs on this
 * node), per device: its memory and compute share, labelled with its owner
 * as /api/v1/bookings names it ("slurm job 4242 (alice)"). */
typedef struct booking_lines {
  text *t;
  bool share; /* the share family, else the memory one */
} booking_lines;

static void put_booking(const char *owner, const gs_booking_part *parts, int n, void *ctx) {
  booking_lines *b = ctx; /* under the ledger's lock: text only */
  char who[300];
  label_value(owner, who, sizeof who);
  for (int i = 0; i < n; i++) {
    const char *id = gs_device_get_info(parts[i].device)->id;
    if (b->share)
      put(b->t, "gpusrv_booking_compute_share_percent{device=\"%s\",owner=\"%s\"} %d\n", id,
          who, parts[i].share);
    else
      put(b->t, "gpusrv_booking_memory_bytes{device=\"%s\",owner=\"%s\"} %llu\n", id, who,
          (unsigned long long)parts[i].bytes);
  }
}

static void put_bookings(text *t, gs_ledger *ledger) {
  header(t, "gpusrv_booking_memory_bytes", "gauge",
         "Device memory each booking holds (model instances, jobs, Slurm's jobs)");
  gs_ledger_each(ledger, put_booking, &(booking_lines){.t = t, .share = false});
  header(t, "gpusrv_booking_compute_share_percent", "gauge",
         "Percent of a device's compute each booking holds");
  gs_ledger_each(ledger, put_booking, &(booking_lines){.t = t, .share = true});
}

/* A device figure in /metrics: which telemetry bit it needs, and its value. */
typedef struct tm_metric {
  uint32_t bit;
  const char *name, *type, *help;
  double (*value)(const gs_telemetry *);
} tm_metric;

static double tm_util(const gs_telemetry *x) { return x->utilization_percent; }
static double tm_used(const gs_telemetry *x) { return (double)x->memory_used_bytes; }
static double tm_total(const gs_telemetry *x) { return (double)x->memory_total_bytes; }
static double tm_used_mib(const gs_telemetry *x) { return (double)(x->memory_used_bytes >> 20); }
static double tm_free_mib(const gs_telemetry *x) { return (double)(x->memory_free_bytes >> 20); }
static double tm_temp(const gs_telemetry *x) { return x->temperature_c; }
static double tm_power(const gs_telemetry *x) { return x->power_w; }
static double tm_sm_clock(const gs_telemetry *x) { return x->sm_clock_mhz; }
static double tm_mem_clock(const gs_telemetry *x) { return x->memory_clock_mhz; }
static double tm_pcie_gen(const gs_telemetry *x) { return x->pcie_generation; }
static double tm_pcie_width(const gs_telemetry *x) { return x->pcie_width; }
static double tm_ecc_fixed(const gs_telemetry *x) { return (double)x->ecc_corrected; }
static double tm_ecc_lost(const gs_telemetry *x) { return (double)x->ecc_uncorrected; }
static double tm_health(const gs_telemetry *x) { return x->health; }
static double tm_xid(const gs_telemetry *x) { return x->last_xid; }

/* The GPUs' gauges again under dcgm-exporter's names and labels (gpu,
 * UUID, device, modelName, Hostname), so that its published Grafana
 * dashboard works unchanged. Only devices that are GPUs: a CPU under
 * DCGM_FI_DEV_GPU_UTIL would read as a GPU there. What a device does not
 * report is left out. */
static void render_dcgm(text *t, const gs_telemetry *tm, int nd) {
  static const tm_metric dcgm[] = {
      {GS_TM_UTILIZATION, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", tm_util},
      {GS_TM_MEMORY, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
       tm_used_mib},
      {GS_TM_MEMORY, "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
       tm_free_mib},
      {GS_TM_TEMPERATURE, "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", tm_temp},
      {GS_TM_POWER, "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", tm_power},
      {GS_TM_CLOCKS, "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
       tm_sm_clock},
      {GS_TM_CLOCKS, "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
       tm_mem_clock},
      {GS_TM_ECC, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
       "Total number of single-bit volatile ECC errors.", tm_ecc_fixed},
      {GS_TM_ECC, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
       "Total number of double-bit volatile ECC errors.", tm_ecc_lost},
      {GS_TM_XID, "DCGM_FI_DEV_XID_ERRORS", "gauge",
       "Value of the last XID error encountered.", tm_xid},
  };
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0)
    host[0] = '\0';
  for (size_t k = 0; k < sizeof dcgm / sizeof dcgm[0]; k++) {
    bool any = false;
    for (int d = 0, gpu = 0; d < nd; d++) {
      const gs_device_info *info = gs_device_get_info(gs_hal_device(d));
      if (info->type != GS_DEVICE_GPU)
        continue;
      int index = gpu++;
      const gs_telemetry *x = &tm[d];
      if (!(x->valid & dcgm[k].bit))
        continue;
      if (!any)
        header(t, dcgm[k].name, dcgm[k].type, dcgm[k].help);
      any = true;
      char model[2 * sizeof info->name];
      label_value(info->name, model, sizeof model);
      put(t, "%s{gpu=\"%d\",UUID=\"%s\",device=\"%s\",modelName=\"%s\",Hostname=\"%s\"} %.17g\n",
          dcgm[k].name, index, info->uuid, info->id, model, host, dcgm[k].value(x));
    }
  }
}

/* Unfinished jobs by tenant and state, and each running job's booked
 * device memory, labelled with its job id and tenant. */
static void render_jobs(text *t, gs_frontdesk *fd) {
  gs_principal everyone = {.admin = true};
  gs_job_info *jobs = NULL;
  int n = 0;
  if (gs_jobs_list(fd, &everyone, false, NULL, &jobs, &n) < 0)
    return; /* left out of this scrape; the front desk logs why */
  header(t, "gpusrv_jobs", "gauge", "Jobs not ended, by tenant and state");
  for (int i = 0; i < n; i++) {
    bool seen = false; /* one series per (tenant, state): count it at its first job */
    for (int k = 0; k < i && !seen; k++)
      seen = !strcmp(jobs[k].tenant, jobs[i].tenant) && !strcmp(jobs[k].state, jobs[i].state);
    if (seen)
      continue;
    int count = 0;
    for (int k = i; k < n; k++)
      count += !strcmp(jobs[k].tenant, jobs[i].tenant) && !strcmp(jobs[k].state, jobs[i].state);
    char tenant[2 * sizeof jobs[i].tenant];
    label_value(jobs[i].tenant, tenant, sizeof tenant);
    put(t, "gpusrv_jobs{tenant=\"%s\",state=\"%s\"} %d\n", tenant, jobs[i].state, count);
  }
  header(t, "gpusrv_job_device_memory_bytes", "gauge",
         "Device memory each running job booked, per job and tenant");
  for (int i = 0; i < n; i++) {
    if (strcmp(jobs[i].state, "RUNNING") != 0)
      continue;
    char tenant[2 * sizeof jobs[i].tenant], devices[2 * sizeof jobs[i].devices];
    label_value(jobs[i].tenant, tenant, sizeof tenant);
    label_value(jobs[i].devices, devices, sizeof devices);
    put(t, "gpusrv_job_device_memory_bytes{job=\"%lld\",tenant=\"%s\",devices=\"%s\"} %llu\n",
        (long long)jobs[i].id, tenant, devices, (unsigned long long)jobs[i].need.gpu_mem);
  }
  gs_job_infos_free(jobs, n);
  /* Per process, as NVML reports them (nvidia-smi's compute apps), with the
   * job and tenant each belongs to ("" for a process outside the jobs). */
  gs_device_process *procs = NULL;
  int np = 0;
  if (gs_frontdesk_processes(fd, &procs, &np) == 0 && np > 0) {
    header(t, "gpusrv_process_device_memory_bytes", "gauge",
           "Device memory each process uses, with its job and tenant where it is a job's");
    for (int i = 0; i < np; i++) {
      char name[2 * sizeof procs[i].name], tenant[2 * sizeof procs[i].tenant], job[24] = "";
      label_value(procs[i].name, name, sizeof name);
      label_value(procs[i].tenant, tenant, sizeof tenant);
      if (procs[i].job)
        snprintf(job, sizeof job, "%lld", (long long)procs[i].job);
      put(t, "gpusrv_process_device_memory_bytes{device=\"%s\",pid=\"%d\",process=\"%s\","
             "job=\"%s\",tenant=\"%s\"} %llu\n", gs_device_get_info(procs[i].device)->id,
          procs[i].pid, name, job, tenant, (unsigned long long)procs[i].memory_bytes);
    }
  }
  free(procs);
}

/* Whether model i has series of its own: one that did not load has none. */
static bool listed(gs_repository *repo, int i) {
  return atomic_load(&repo->models[i].state) != GS_MODEL_UNAVAILABLE;
}

/* Each model's loads and unloads by reason, the time requests waited for a
 * load on demand (idle.c), and its instances now: also for a model unloaded
 * (by an admin, or while idle). */
static void model_lifecycle_metrics(gs_repository *repo, text *t) {
  static const char *const load_reasons[GS_LOAD_REASONS] = {"startup", "admin", "demand"};
  static const char *const unload_reasons[GS_UNLOAD_REASONS] = {"admin", "idle"};
  int n = atomic_load(&repo->n_models);
  header(t, "gpusrv_model_loads_total", "counter", "Loads of each model, by what asked for them");
  for (int i = 0; i < n; i++)
    for (int k = 0; listed(repo, i) && k < GS_LOAD_REASONS; k++)
      put(t, "gpusrv_model_loads_total{model=\"%s\",reason=\"%s\"} %llu\n", repo->models[i].name,
          load_reasons[k], (unsigned long long)atomic_load(&repo->models[i].loads[k]));
  header(t, "gpusrv_model_unloads_total", "counter",
         "Unloads of each model: by an admin, or after idle_unload_seconds without requests");
  for (int i = 0; i < n; i++)
    for (int k = 0; listed(repo, i) && k < GS_UNLOAD_REASONS; k++)
      put(t, "gpusrv_model_unloads_total{model=\"%s\",reason=\"%s\"} %llu\n",
          repo->models[i].name, unload_reasons[k],
          (unsigned long long)atomic_load(&repo->models[i].unloads[k]));
  header(t, "gpusrv_model_load_wait_seconds", "summary",
         "Time requests waited for a model unloaded while idle to load again");
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    if (!listed(repo, i))
      continue;
    put(t, "gpusrv_model_load_wait_seconds_sum{model=\"%s\"} %.9f\n", m->name,
        (double)atomic_load(&m->load_wait_ns) / 1e9);
    put(t, "gpusrv_model_load_wait_seconds_count{model=\"%s\"} %llu\n", m->name,
        (unsigned long long)atomic_load(&m->load_waits));
  }
  header(t, "gpusrv_model_instances", "gauge", "Instances each model has loaded now");
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    if (!listed(repo, i) || !gs_served_try_use(m))
      continue; /* loading or unloading: left out of this scrape */
    put(t, "gpusrv_model_instances{model=\"%s\"} %d\n", m->name,
        gs_served_ready(m) ? atomic_load(&m->active_instances) : 0);
    gs_served_release(m);
  }
  header(t, "gpusrv_model_images_resized_on_device_total", "counter",
         "Images that went through a model's devices' resize and crop (its recipe with "
         "finish=device and a batcher); the CPU resized the others");
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    if (!listed(repo, i) || !gs_served_try_use(m))
      continue;
    if (m->resize_on_device)
      put(t, "gpusrv_model_images_resized_on_device_total{model=\"%s\"} %llu\n", m->name,
          (unsigned long long)atomic_load(&m->device_resizes));
    gs_served_release(m);
  }
  header(t, "gpusrv_model_instance_steps_total", "counter",
         "Steps of autoscaled models' instance counts (\"count\": \"auto\"): up, down, "
         "and up refused (no room in the ledger, or the instance could not start)");
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    if (!listed(repo, i) || !gs_served_try_use(m))
      continue;
    if (gs_served_autoscaled(m)) {
      const char *names[] = {"up", "down", "refused"};
      uint64_t counts[] = {atomic_load(&m->scale_ups), atomic_load(&m->scale_downs),
                           atomic_load(&m->scale_refusals)};
      for (int k = 0; k < 3; k++)
        put(t, "gpusrv_model_instance_steps_total{model=\"%s\",step=\"%s\"} %llu\n", m->name,
            names[k], (unsigned long long)counts[k]);
    }
    gs_served_release(m);
  }
  header(t, "gpusrv_batch_adaptive_wait_seconds", "gauge",
         "How long an adaptive batcher waits for each next request, as learnt "
         "(dynamic_batching.adaptive)");
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    if (!gs_served_try_use(m))
      continue;
    if (gs_served_ready(m) && m->adaptive_batching && m->batcher)
      put(t, "gpusrv_batch_adaptive_wait_seconds{model=\"%s\"} %.9f\n", m->name,
          (double)gs_batcher_adaptive_wait_ns(m->batcher) / 1e9);
    gs_served_release(m);
  }
}

int gs_metrics_render(gs_repository *repo, gs_frontdesk *fd, gs_http_reply *r) {
  text t = {0};
  static const struct {
    model_field f;
    const char *name, *help;
  } model_metrics[] = {
      {F_SUCCESS, "nv_inference_request_success", "Number of successful inference requests"},
      {F_FAIL, "nv_inference_request_failure", "Number of failed inference requests"},
      {F_COUNT, "nv_inference_count", "Number of inferences performed (batch rows)"},
      {F_EXEC, "nv_inference_exec_count", "Number of model executions (batches)"},
      {F_REQ_US, "nv_inference_request_duration_us", "Cumulative request duration, microseconds"},
      {F_QUEUE_US, "nv_inference_queue_duration_us", "Cumulative time in the queue, microseconds"},
      {F_IN_US, "nv_inference_compute_input_duration_us", "Cumulative input time, microseconds"},
      {F_INFER_US, "nv_inference_compute_infer_duration_us", "Cumulative compute time, microseconds"},
      {F_OUT_US, "nv_inference_compute_output_duration_us", "Cumulative output time, microseconds"},
  };
  int n_models = atomic_load(&repo->n_models);
  gs_model_stats *snap = calloc((size_t)n_models + 1, sizeof *snap);
  int64_t *version = calloc((size_t)n_models + 1, sizeof *version);
  if (!snap || !version) {
    free(snap);
    free(version);
    return gs_http_reply_error(r, 500, "out of memory rendering metrics");
  }
  /* A consistent snapshot: the ready models, their serving version, their counters. */
  for (int i = 0; i < n_models; i++) {
    gs_served_model *m = &repo->models[i];
    version[i] = -1;
    if (!gs_served_try_use(m))
      continue; /* loading: left out of this scrape rather than waited for */
    gs_served_version *v = gs_served_ready(m) ? gs_served_version_find(m, NULL) : NULL;
    version[i] = v ? v->number : -1;
    pthread_mutex_lock(&m->stats_lock);
    snap[i] = m->stats;
    pthread_mutex_unlock(&m->stats_lock);
    gs_served_release(m);
  }
  for (size_t k = 0; k < sizeof model_metrics / sizeof model_metrics[0]; k++) {
    header(&t, model_metrics[k].name, "counter", model_metrics[k].help);
    for (int i = 0; i < n_models; i++) {
      if (version[i] < 0)
        continue;
      put(&t, "%s{model=\"%s\",version=\"%lld\"} %llu\n", model_metrics[k].name,
          repo->models[i].name, (long long)version[i],
          (unsigned long long)field(&snap[i], model_metrics[k].f));
    }
  }
  /* Batch sizes the batcher formed, as a histogram per model. */
  static const int bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  header(&t, "gpusrv_batch_size", "histogram", "Sizes of the batches each model ran");
  for (int i = 0; i < n_models; i++) {
    gs_served_model *m = &repo->models[i];
    if (version[i] < 0)
      continue;
    uint64_t cum = 0, sum = 0;
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
      for (int s = b ? bounds[b - 1] + 1 : 1; s <= bounds[b]; s++) {
        cum += snap[i].batch[s][1].count;
        sum += snap[i].batch[s][1].count * (uint64_t)s;
      }
      put(&t, "gpusrv_batch_size_bucket{model=\"%s\",le=\"%d\"} %llu\n", m->name, bounds[b],
          (unsigned long long)cum);
    }
    put(&t, "gpusrv_batch_size_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", m->name,
        (unsigned long long)snap[i].execution_count);
    put(&t, "gpusrv_batch_size_sum{model=\"%s\"} %llu\n", m->name, (unsigned long long)sum);
    put(&t, "gpusrv_batch_size_count{model=\"%s\"} %llu\n", m->name,
        (unsigned long long)snap[i].execution_count);
  }
  /* Successful requests' latency, as a histogram per model (percentiles in
   * Prometheus through histogram_quantile), and the requests waiting now
   * under Triton's name for them. */
  header(&t, "gpusrv_request_duration_seconds", "histogram",
         "Latency of each model's successful requests, arrival to reply");
  for (int i = 0; i < n_models; i++) {
    gs_served_model *m = &repo->models[i];
    if (version[i] < 0)
      continue;
    uint64_t cum = 0;
    for (int b = 0; b < GS_LATENCY_BUCKETS - 1; b++) {
      cum += snap[i].latency[b];
      put(&t, "gpusrv_request_duration_seconds_bucket{model=\"%s\",le=\"%g\"} %llu\n", m->name,
          gs_latency_bound_us(b) / 1e6, (unsigned long long)cum);
    }
    put(&t, "gpusrv_request_duration_seconds_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", m->name,
        (unsigned long long)snap[i].success.count);
    put(&t, "gpusrv_request_duration_seconds_sum{model=\"%s\"} %.9g\n", m->name,
        (double)snap[i].success.ns / 1e9);
    put(&t, "gpusrv_request_duration_seconds_count{model=\"%s\"} %llu\n", m->name,
        (unsigned long long)snap[i].success.count);
  }
  header(&t, "nv_inference_pending_request_count", "gauge",
         "Instantaneous number of pending requests awaiting execution per-model.");
  for (int i = 0; i < n_models; i++)
    if (version[i] >= 0)
      put(&t, "nv_inference_pending_request_count{model=\"%s\",version=\"%lld\"} %lld\n",
          repo->models[i].name, (long long)version[i],
          (long long)atomic_load(&repo->models[i].queue_length));
  free(snap);
  free(version);
  model_lifecycle_metrics(repo, &t);
  /* Each instance's batch pipeline (models with dynamic batching): how long
   * each stage worked, waited for a batch, and waited to hand one on. */
  static const char *const stage_metrics[][2] = {
      {"gpusrv_batch_stage_busy_seconds_total", "Time each batch pipeline stage worked"},
      {"gpusrv_batch_stage_wait_input_seconds_total", "Time each stage waited for a batch"},
      {"gpusrv_batch_stage_wait_output_seconds_total", "Time each stage waited to hand on"},
      {"gpusrv_batch_stage_batches_total", "Batches each stage has passed on"},
  };
  for (size_t k = 0; k < sizeof stage_metrics / sizeof stage_metrics[0]; k++) {
    header(&t, stage_metrics[k][0], "counter", stage_metrics[k][1]);
    for (int i = 0; i < n_models; i++) {
      gs_served_model *m = &repo->models[i];
      if (!gs_served_try_use(m))
        continue;
      int active = atomic_load(&m->active_instances);
      for (int n = 0; gs_served_ready(m) && m->dynamic_batching && n < active; n++) {
        gs_pipeline_result live;
        gs_pipeline_read_stats(&m->instances[n].pipeline, &live);
        for (int st = 0; st < live.n_stages; st++) {
          const gs_pipeline_stage_stats *f = &live.stages[st];
          uint64_t ns = k == 0 ? f->busy_ns : k == 1 ? f->wait_in_ns : f->wait_out_ns;
          if (k == 3)
            put(&t, "%s{model=\"%s\",instance=\"%d\",stage=\"%s\"} %lld\n", stage_metrics[k][0],
                m->name, n, f->name, (long long)f->items);
          else
            put(&t, "%s{model=\"%s\",instance=\"%d\",stage=\"%s\"} %.9f\n", stage_metrics[k][0],
                m->name, n, f->name, (double)ns / 1e9);
        }
      }
      gs_served_release(m);
    }
  }
  /* Devices: what their backends expose; a figure that is not available is
   * left out, never reported as 0. */
  static const tm_metric dev_metrics[] = {
      {GS_TM_UTILIZATION, "gpusrv_device_utilization_percent", "gauge", "Device utilization",
       tm_util},
      {GS_TM_MEMORY, "gpusrv_device_memory_used_bytes", "gauge", "Device memory in use", tm_used},
      {GS_TM_MEMORY, "gpusrv_device_memory_total_bytes", "gauge", "Device memory in all",
       tm_total},
      {GS_TM_TEMPERATURE, "gpusrv_device_temperature_celsius", "gauge", "Device temperature",
       tm_temp},
      {GS_TM_POWER, "gpusrv_device_power_watts", "gauge", "Device power draw", tm_power},
      /* What GPUs add: clocks, the PCIe link, ECC and Xid errors, and health */
      {GS_TM_CLOCKS, "gpusrv_device_sm_clock_mhz", "gauge", "SM clock", tm_sm_clock},
      {GS_TM_CLOCKS, "gpusrv_device_memory_clock_mhz", "gauge", "Memory clock", tm_mem_clock},
      {GS_TM_PCIE, "gpusrv_device_pcie_generation", "gauge", "PCIe link generation now",
       tm_pcie_gen},
      {GS_TM_PCIE, "gpusrv_device_pcie_width", "gauge", "PCIe link width now", tm_pcie_width},
      {GS_TM_ECC, "gpusrv_device_ecc_errors_corrected_total", "counter",
       "Corrected ECC errors since the driver loaded", tm_ecc_fixed},
      {GS_TM_ECC, "gpusrv_device_ecc_errors_uncorrected_total", "counter",
       "Uncorrectable ECC errors since the driver loaded", tm_ecc_lost},
      {GS_TM_XID, "gpusrv_device_last_xid", "gauge",
       "The number of the device's latest Xid error (0: none since gpusrv started)", tm_xid},
      /* 0 healthy, 1 degraded, 2 unhealthy; the reason as a label */
      {GS_TM_HEALTH, "gpusrv_device_health", "gauge", "0 healthy, 1 degraded, 2 unhealthy",
       tm_health},
  };
  int nd = gs_hal_device_count();
  gs_telemetry *tm = calloc((size_t)nd + 1, sizeof *tm);
  for (int d = 0; tm && d < nd; d++)
    gs_device_telemetry(gs_hal_device(d), &tm[d]);
  for (size_t k = 0; tm && k < sizeof dev_metrics / sizeof dev_metrics[0]; k++) {
    const tm_metric *m = &dev_metrics[k];
    header(&t, m->name, m->type, m->help); /* declared even with no device measuring it */
    for (int d = 0; d < nd; d++) {
      const gs_telemetry *x = &tm[d];
      if (!(x->valid & m->bit))
        continue;
      const gs_device_info *info = gs_device_get_info(gs_hal_device(d));
      if (m->bit == GS_TM_HEALTH) {
        char reason[2 * sizeof x->health_reason];
        label_value(x->health_reason, reason, sizeof reason);
        put(&t, "%s{device=\"%s\",backend=\"%s\",reason=\"%s\"} %.17g\n", m->name, info->id,
            info->backend, reason, m->value(x));
      } else {
        put(&t, "%s{device=\"%s\",backend=\"%s\"} %.17g\n", m->name, info->id, info->backend,
            m->value(x));
      }
    }
  }
  if (tm)
    render_dcgm(&t, tm, nd);
  free(tm);
  if (fd)
    render_jobs(&t, fd);
  static const char *const pool_names[] = {"allocated", "reserved", "peak_allocated"};
  for (int k = 0; k < 3; k++) {
    char name[64];
    snprintf(name, sizeof name, "gpusrv_pool_%s_bytes", pool_names[k]);
    header(&t, name, "gauge", "Caching pool statistics per device and memory kind");
    for (int d = 0; d < nd; d++)
      for (int kind = 0; kind < GS_MEM_KIND_COUNT; kind++) {
        gs_pool_stats st;
        gs_pool_get_stats(gs_device_pool(gs_hal_device(d), (gs_mem_kind)kind), &st);
        uint64_t v = k == 0 ? st.allocated_bytes : k == 1 ? st.reserved_bytes : st.peak_allocated_bytes;
        put(&t, "%s{device=\"%s\",pool=\"%s\"} %llu\n", name,
            gs_device_get_info(gs_hal_device(d))->id, kind ? "pinned" : "device",
            (unsigned long long)v);
      }
  }
  /* Copies between host and device memory: what served models (an
   * ensemble's steps included) send over the bus. */
  static const char *const copy_names[] = {"gpusrv_device_copies_total",
                                           "gpusrv_device_copy_bytes_total"};
  for (int k = 0; k < 2; k++) {
    header(&t, copy_names[k], "counter",
           k ? "Bytes copied between host and device memory" : "Copies between host and device memory");
    for (int d = 0; d < nd; d++) {
      gs_device_copy_stats cs;
      gs_device_get_copy_stats(gs_hal_device(d), &cs);
      const char *id = gs_device_get_info(gs_hal_device(d))->id;
      put(&t, "%s{device=\"%s\",direction=\"h2d\"} %llu\n", copy_names[k], id,
          (unsigned long long)(k ? cs.h2d_bytes : cs.h2d));
      put(&t, "%s{device=\"%s\",direction=\"d2h\"} %llu\n", copy_names[k], id,
          (unsigned long long)(k ? cs.d2h_bytes : cs.d2h));
    }
  }
  header(&t, "gpusrv_http_inference_headers_reused_total", "counter",
         "Inference requests whose JSON header repeated one already parsed, byte for byte");
  put(&t, "gpusrv_http_inference_headers_reused_total %llu\n",
      (unsigned long long)gs_header_cache_hits());
  if (repo->ledger) {
    static const char *const ledger_names[] = {"booked", "bookable"};
    for (int k = 0; k < 2; k++) {
      char name[64];
      snprintf(name, sizeof name, "gpusrv_device_memory_%s_bytes", ledger_names[k]);
      header(&t, name, "gauge",
             k ? "Device memory the ledger hands out" : "Device memory booked by model plans");
      for (int d = 0; d < nd; d++) {
        gs_device_t *dev = gs_hal_device(d);
        uint64_t v = k ? gs_ledger_capacity(repo->ledger, dev) : gs_ledger_booked(repo->ledger, dev);
        put(&t, "%s{device=\"%s\"} %llu\n", name, gs_device_get_info(dev)->id,
            (unsigned long long)v);
      }
    }
  }
  if (repo->ledger)
    put_bookings(&t, repo->ledger);
  if (t.failed) {
    free(t.buf);
    return gs_http_reply_error(r, 500, "out of memory rendering metrics");
  }
  r->status = 200;
  r->body = t.buf ? t.buf : strdup("");
  r->len = t.len;
  r->header_len = 0;
  snprintf(r->content_type, sizeof r->content_type, "text/plain; version=0.0.4");
  return GS_OK;
}

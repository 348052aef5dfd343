/* batch.c - batch inference over a data set on the pipeline (batch.h):
 * slots of host, pinned and device buffers allocated once, six stages, and
 * outputs written with pwrite at each batch's place, so that they come out
 * in input order. */
#include "engine/batch.h"

#include "base/error.h"
#include "base/fileutil.h"
#include "engine/cpu/kernels.h" /* gs_ld, gs_st */
#include "engine/dataset.h"
#include "engine/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_OUTPUTS 8

typedef struct slot {
  void *raw;                       /* rows as the data set holds them */
  gs_buffer_t *staged_in;          /* pinned: the model's input type */
  gs_buffer_t *dev_in;
  gs_buffer_t *dev_out[MAX_OUTPUTS];
  gs_buffer_t *staged_out[MAX_OUTPUTS]; /* pinned */
  int64_t rows;                    /* real rows in this batch (the last may be short) */
} slot;

typedef struct batch_run {
  const gs_batch_options *o;
  gs_model *model;
  gs_plan *plan;
  gs_dataset *ds;
  gs_device_t *device;
  gs_stream_t *h2d, *d2h;
  int batch;
  int64_t rows, row_elems;
  gs_plan_value_info in;
  int n_out;
  gs_plan_value_info out[MAX_OUTPUTS];
  size_t out_row_bytes[MAX_OUTPUTS];
  int out_fd[MAX_OUTPUTS];
  size_t out_data_offset[MAX_OUTPUTS];
  slot *slots;
  int n_slots;
  atomic_llong written;
} batch_run;

/* ---- stages ---------------------------------------------------------------------------- */

static int ingest(void *ctx, int s, int64_t seq) {
  batch_run *b = ctx;
  int64_t first = seq * b->batch;
  if (first >= b->rows)
    return 1;
  int64_t count = b->rows - first < b->batch ? b->rows - first : b->batch;
  b->slots[s].rows = count;
  return gs_dataset_read(b->ds, first, count, b->slots[s].raw);
}

/* Type conversion and normalisation into pinned staging; a short last
 * batch is padded with zeros (its rows are not written out). */
static int preprocess(void *ctx, int s, int64_t seq) {
  (void)seq;
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  void *dst = gs_buffer_host_ptr(sl->staged_in);
  gs_dtype from = gs_dataset_dtype(b->ds), to = b->in.dtype;
  int64_t n = sl->rows * b->row_elems, total = (int64_t)b->batch * b->row_elems;
  const double scale = b->o->scale, mean = b->o->mean, inv_std = 1.0 / b->o->std;
  if (from == GS_DT_FLOAT32 && to == GS_DT_FLOAT32) { /* the common case, vectorisable */
    const float *src = sl->raw;
    float *out = dst;
    const float fs = (float)(scale * inv_std), fm = (float)(mean * inv_std);
    for (int64_t i = 0; i < n; i++)
      out[i] = src[i] * fs - fm;
  } else if (from == GS_DT_UINT8 && to == GS_DT_FLOAT32) {
    const uint8_t *src = sl->raw;
    float *out = dst;
    const float fs = (float)(scale * inv_std), fm = (float)(mean * inv_std);
    for (int64_t i = 0; i < n; i++)
      out[i] = (float)src[i] * fs - fm;
  } else {
    for (int64_t i = 0; i < n; i++)
      gs_st(to, dst, i, (gs_ld(from, sl->raw, i) * scale - mean) * inv_std); /* saturating */
  }
  if (n < total)
    memset((char *)dst + (size_t)n * gs_dtype_size(to), 0,
           (size_t)(total - n) * gs_dtype_size(to));
  return GS_OK;
}

static int h2d(void *ctx, int s, int64_t seq) {
  (void)seq;
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  int rc = gs_stream_copy_h2d(b->h2d, sl->dev_in, 0, gs_buffer_host_ptr(sl->staged_in),
                              b->in.bytes);
  int sync = gs_stream_synchronize(b->h2d);
  return rc < 0 ? rc : sync;
}

static int compute(void *ctx, int s, int64_t seq) {
  (void)seq;
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  return gs_plan_run_buffers(b->plan, &sl->dev_in, sl->dev_out);
}

static int d2h(void *ctx, int s, int64_t seq) {
  (void)seq;
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  int rc = GS_OK;
  for (int i = 0; rc == 0 && i < b->n_out; i++)
    rc = gs_stream_copy_d2h(b->d2h, gs_buffer_host_ptr(sl->staged_out[i]), sl->dev_out[i], 0,
                            b->out[i].bytes);
  int sync = gs_stream_synchronize(b->d2h);
  return rc < 0 ? rc : sync;
}

static int write_out(void *ctx, int s, int64_t seq) {
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  for (int i = 0; i < b->n_out; i++) {
    size_t bytes = (size_t)sl->rows * b->out_row_bytes[i];
    off_t at = (off_t)(b->out_data_offset[i] + (size_t)seq * (size_t)b->batch *
                                                   b->out_row_bytes[i]);
    const char *src = gs_buffer_host_ptr(sl->staged_out[i]);
    for (size_t done = 0; done < bytes;) {
      ssize_t put = pwrite(b->out_fd[i], src + done, bytes - done, at + (off_t)done);
      if (put <= 0)
        return gs_error(GS_EIO, "cannot write %s's rows: %s", b->out[i].name, strerror(errno));
      done += (size_t)put;
    }
  }
  int64_t done = atomic_fetch_add(&b->written, sl->rows) + sl->rows;
  if (b->o->progress)
    b->o->progress(done, b->rows, b->o->progress_ctx);
  return GS_OK;
}

/* ---- set-up ------------------------------------------------------------------------------ */

static void teardown(batch_run *b) {
  for (int s = 0; b->slots && s < b->n_slots; s++) {
    slot *sl = &b->slots[s];
    free(sl->raw);
    gs_buffer_free(sl->staged_in, NULL);
    gs_buffer_free(sl->dev_in, NULL);
    for (int i = 0; i < MAX_OUTPUTS; i++) {
      gs_buffer_free(sl->dev_out[i], NULL);
      gs_buffer_free(sl->staged_out[i], NULL);
    }
  }
  free(b->slots);
  for (int i = 0; i < b->n_out; i++)
    if (b->out_fd[i] >= 0)
      close(b->out_fd[i]);
  if (b->h2d)
    gs_stream_destroy(b->h2d);
  if (b->d2h)
    gs_stream_destroy(b->d2h);
  gs_plan_destroy(b->plan);
  gs_dataset_close(b->ds);
  gs_model_free(b->model);
}

static int open_outputs(batch_run *b) {
  if (gs_mkdir_p(b->o->output_dir) < 0)
    return gs_error(GS_EIO, "cannot create %s: %s", b->o->output_dir, strerror(errno));
  for (int i = 0; i < b->n_out; i++) {
    gs_shape shape = b->out[i].shape;
    shape.dims[0] = b->rows; /* the batch dimension becomes the data set's rows */
    unsigned char header[640];
    size_t hlen;
    int rc = gs_npy_format_header(b->out[i].dtype, &shape, header, sizeof header, &hlen);
    if (rc < 0)
      return rc;
    char name[200], path[4096];
    gs_file_name_of(b->out[i].name, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s.npy", b->o->output_dir, name);
    b->out_fd[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (b->out_fd[i] < 0 || pwrite(b->out_fd[i], header, hlen, 0) != (ssize_t)hlen)
      return gs_error(GS_EIO, "cannot write %s: %s", path, strerror(errno));
    b->out_data_offset[i] = hlen;
  }
  return GS_OK;
}

static int prepare(batch_run *b) {
  const gs_batch_options *o = b->o;
  int rc = gs_model_load(o->model_path, &b->model);
  if (rc < 0)
    return rc;
  if (b->model->n_inputs != 1)
    return gs_error(GS_ENOTSUP, "%s has %d inputs; batch runs models with one input",
                    o->model_path, b->model->n_inputs);
  if (b->model->n_outputs > MAX_OUTPUTS)
    return gs_error(GS_ENOTSUP, "%s has %d outputs; batch writes at most %d", o->model_path,
                    b->model->n_outputs, MAX_OUTPUTS);
  const gs_value_info *in = &b->model->inputs[0];
  if (in->rank < 1)
    return gs_error(GS_EINVAL, "%s: input %s has no declared shape with a batch dimension",
                    o->model_path, in->name);
  gs_shape shape = {.rank = in->rank};
  b->row_elems = 1;
  for (int d = 1; d < in->rank; d++) {
    if (in->dims[d] <= 0)
      return gs_error(GS_ENOTSUP, "%s: input %s has a dynamic dimension %d; batch needs fixed "
                                  "row shapes", o->model_path, in->name, d);
    shape.dims[d] = in->dims[d];
    b->row_elems *= in->dims[d];
  }
  b->batch = in->dims[0] > 0 ? (int)in->dims[0] : o->batch > 0 ? o->batch : 64;
  shape.dims[0] = b->batch;
  if ((rc = gs_dataset_open(o->input, b->row_elems, &b->ds)) < 0)
    return rc;
  b->rows = gs_dataset_rows(b->ds);
  gs_plan_options po = {.device = o->device, .precision = o->precision};
  if ((rc = gs_plan_create(b->model, &shape, &po, &b->plan)) < 0)
    return rc;
  b->device = gs_plan_device(b->plan);
  gs_plan_input(b->plan, 0, &b->in);
  b->n_out = gs_plan_output_count(b->plan);
  for (int i = 0; i < MAX_OUTPUTS; i++)
    b->out_fd[i] = -1;
  for (int i = 0; i < b->n_out; i++) {
    gs_plan_output(b->plan, i, &b->out[i]);
    if (b->out[i].shape.rank < 1 || b->out[i].shape.dims[0] != b->batch)
      return gs_error(GS_ENOTSUP, "%s: output %s does not keep the batch dimension first",
                      o->model_path, b->out[i].name);
    b->out_row_bytes[i] = b->out[i].bytes / (size_t)b->batch;
  }
  if ((rc = gs_stream_create(b->device, &b->h2d)) < 0 ||
      (rc = gs_stream_create(b->device, &b->d2h)) < 0)
    return rc;
  b->n_slots = o->slots > 0 ? o->slots : 4;
  b->slots = calloc((size_t)b->n_slots, sizeof *b->slots);
  if (!b->slots)
    return gs_error(GS_ENOMEM, "out of memory for %d slots", b->n_slots);
  gs_pool_t *pinned = gs_device_pool(b->device, GS_MEM_PINNED_HOST),
            *dev = gs_device_pool(b->device, GS_MEM_DEVICE);
  size_t raw_bytes = (size_t)b->batch * (size_t)b->row_elems * gs_dtype_size(gs_dataset_dtype(b->ds));
  for (int s = 0; s < b->n_slots; s++) {
    slot *sl = &b->slots[s];
    if (!(sl->raw = malloc(raw_bytes ? raw_bytes : 1)))
      return gs_error(GS_ENOMEM, "out of memory for a batch of %zu bytes", raw_bytes);
    if ((rc = gs_pool_alloc(pinned, b->in.bytes, NULL, &sl->staged_in)) < 0 ||
        (rc = gs_pool_alloc(dev, b->in.bytes, NULL, &sl->dev_in)) < 0)
      return rc;
    for (int i = 0; i < b->n_out; i++)
      if ((rc = gs_pool_alloc(dev, b->out[i].bytes, NULL, &sl->dev_out[i])) < 0 ||
          (rc = gs_pool_alloc(pinned, b->out[i].bytes, NULL, &sl->staged_out[i])) < 0)
        return rc;
  }
  return open_outputs(b);
}

/* Each output exactly its header and rows long (a stage run alone may have
 * written a whole last batch). */
static int trim_outputs(batch_run *b) {
  for (int i = 0; i < b->n_out; i++)
    if (ftruncate(b->out_fd[i], (off_t)(b->out_data_offset[i] +
                                        (size_t)b->rows * b->out_row_bytes[i])) != 0)
      return gs_error(GS_EIO, "cannot size the output %s: %s", b->out[i].name, strerror(errno));
  return GS_OK;
}

/* A source that only counts batches, for running one stage alone. */
static int count_batches(void *ctx, int s, int64_t seq) {
  batch_run *b = ctx;
  if (seq * b->batch >= b->rows)
    return 1;
  b->slots[s].rows = b->rows - seq * b->batch < b->batch ? b->rows - seq * b->batch : b->batch;
  return 0;
}

static void stages_of(batch_run *b, gs_pipeline_stage stages[6]) {
  const gs_batch_options *o = b->o;
  int readers = o->readers > 0 ? o->readers : 2;
  /* Preprocessing threads: the cores, within the pipeline's thread limit. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int workers = o->workers > 0 ? o->workers : cores > 0 ? (int)cores : 1;
  int room = GS_PIPELINE_MAX_THREADS - readers - 4;
  if (workers > room)
    workers = room > 0 ? room : 1;
  gs_pipeline_stage all[6] = {
      {"ingest", readers, ingest, b, false},
      {"preprocess", workers, preprocess, b, false},
      {"h2d", 1, h2d, b, false},
      {"compute", 1, compute, b, false},
      {"d2h", 1, d2h, b, false},
      {"write", 1, write_out, b, false},
  };
  memcpy(stages, all, sizeof all);
}

int gs_batch_profile(const gs_batch_options *o, double alone[6], gs_pipeline_result *whole,
                     int64_t *rows) {
  batch_run b = {.o = o};
  atomic_init(&b.written, 0);
  memset(whole, 0, sizeof *whole);
  int rc = prepare(&b);
  gs_pipeline_stage stages[6];
  stages_of(&b, stages);
  /* One untimed run first: a device library's first call may compile its
   * kernels (CLBlast does), which is not the stage's throughput. */
  if (rc == 0)
    rc = compute(&b, 0, 0);
  int64_t batches = (b.rows + b.batch - 1) / (b.batch ? b.batch : 1);
  for (int k = 0; rc == 0 && k < 6; k++) {
    gs_pipeline_result r;
    gs_dataset_drop_cache(b.ds);
    if (k == 0) {
      rc = gs_pipeline_run(&stages[0], 1, b.n_slots, o->cancel, &r);
    } else {
      gs_pipeline_stage pair[2] = {{"count", 1, count_batches, &b, false}, stages[k]};
      rc = gs_pipeline_run(pair, 2, b.n_slots, o->cancel, &r);
    }
    alone[k] = r.wall_ns ? (double)batches / ((double)r.wall_ns / 1e9) : 0;
  }
  if (rc == 0) {
    atomic_store(&b.written, 0);
    gs_dataset_drop_cache(b.ds);
    rc = gs_pipeline_run(stages, 6, b.n_slots, o->cancel, whole);
  }
  if (rc == 0)
    rc = trim_outputs(&b);
  *rows = atomic_load(&b.written);
  teardown(&b);
  return rc;
}

int gs_batch_run(const gs_batch_options *o, int64_t *rows, gs_pipeline_result *stats) {
  if (!(o->std != 0) || !isfinite(o->scale) || !isfinite(o->mean) || !isfinite(o->std))
    return gs_error(GS_EINVAL, "preprocessing needs finite scale and mean and a non-zero std");
  batch_run b = {.o = o};
  atomic_init(&b.written, 0);
  memset(stats, 0, sizeof *stats);
  int rc = prepare(&b);
  if (rc == 0) {
    gs_pipeline_stage stages[6];
    stages_of(&b, stages);
    rc = gs_pipeline_run(stages, 6, b.n_slots, o->cancel, stats);
  }
  if (rc == 0)
    rc = trim_outputs(&b);
  *rows = atomic_load(&b.written);
  teardown(&b);
  return rc;
}

static int parse_number(const char *text, size_t n, double *out) {
  char buf[64];
  if (n == 0 || n >= sizeof buf)
    return GS_EINVAL;
  memcpy(buf, text, n);
  buf[n] = '\0';
  char *end;
  double num = strtod(buf, &end), den = 1;
  if (end == buf)
    return GS_EINVAL;
  if (*end == '/') {
    char *start = end + 1;
    den = strtod(start, &end);
    if (end == start || den == 0)
      return GS_EINVAL;
  }
  if (*end)
    return GS_EINVAL;
  *out = num / den;
  return isfinite(*out) ? GS_OK : GS_EINVAL;
}

int gs_batch_parse_preprocess(const char *spec, gs_batch_options *o) {
  for (const char *p = spec; *p;) {
    const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    double v = 0;
    if (!eq || parse_number(eq + 1, (size_t)(end - eq - 1), &v) < 0)
      return gs_error(GS_EINVAL, "preprocess '%.*s' is not KEY=NUMBER (scale, mean, std)",
                      (int)(end - p), p);
    size_t klen = (size_t)(eq - p);
    if (klen == 5 && !strncmp(p, "scale", 5))
      o->scale = v;
    else if (klen == 4 && !strncmp(p, "mean", 4))
      o->mean = v;
    else if (klen == 3 && !strncmp(p, "std", 3)) {
      if (v == 0)
        return gs_error(GS_EINVAL, "preprocess std cannot be 0");
      o->std = v;
    } else
      return gs_error(GS_EINVAL, "unknown preprocess key '%.*s' (scale, mean, std)", (int)klen, p);
    p = comma ? comma + 1 : end;
  }
  return GS_OK;
}

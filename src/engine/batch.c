/* batch.c - batch inference over a data set on the pipeline (batch.h):
 * slots of host, pinned and device buffers allocated once, six stages, and
 * outputs written with pwrite at each batch's place, so that they come out
 * in input order. */
#include "engine/batch.h"

#include "base/error.h"
#include "base/fileutil.h"
#include "hal/cpu/ops/kernels.h" /* gs_ld, gs_st */
#include "engine/dataset.h"
#include "engine/model_split.h"
#include "engine/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_VALUES 8 /* a part's inputs or outputs */
#define MAX_PARTS GS_BATCH_MAX_DEVICES
_Static_assert(MAX_PARTS <= GS_SPLIT_MAX_PARTS, "every device gets a part");
_Static_assert(MAX_VALUES >= GS_SPLIT_MAX_CROSSING, "a slot holds every value crossing a cut");
_Static_assert(4 + 2 * MAX_PARTS <= GS_PIPELINE_MAX_STAGES, "every part's stages fit a pipeline");

/* The model on one device: the whole model, or with several devices one
 * part of it (model_split.h), which takes what the part before computed. */
typedef struct part {
  struct batch_run *run;
  int index;
  gs_model *model; /* a part of run->model; NULL: run->model itself */
  gs_plan *plan;
  gs_device_t *device;
  gs_stream_t *in_stream; /* part 0: the H2D copies; else the exchange into this device */
  int n_in, n_out;
  gs_plan_value_info in[MAX_VALUES], out[MAX_VALUES];
  int src_out[MAX_VALUES]; /* in[i] is output src_out[i] of the part before */
} part;

typedef struct slot {
  void *raw;                               /* rows as the data set holds them */
  gs_buffer_t *staged_in;                  /* pinned: the model's input type */
  gs_buffer_t *in[MAX_PARTS][MAX_VALUES];  /* each part's inputs, on its device */
  gs_buffer_t *out[MAX_PARTS][MAX_VALUES]; /* each part's outputs, on its device */
  gs_buffer_t *staged_out[MAX_VALUES];     /* pinned: the model's outputs */
  int64_t rows;                            /* real rows in this batch (the last may be short) */
} slot;

typedef struct batch_run {
  const gs_batch_options *o;
  gs_model *model;
  int n_parts;
  part parts[MAX_PARTS];
  gs_dataset *ds;
  gs_stream_t *d2h; /* on the last part's device */
  int batch;
  int64_t rows, row_elems;
  gs_plan_value_info in;                 /* the model's input */
  int n_out;
  gs_plan_value_info out[MAX_VALUES];    /* the model's outputs */
  size_t out_row_bytes[MAX_VALUES];
  int out_fd[MAX_VALUES];
  size_t out_data_offset[MAX_VALUES];
  slot *slots;
  int n_slots;
  atomic_llong written;
  char stage_names[GS_PIPELINE_MAX_STAGES][32];
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
  gs_stream_t *stream = b->parts[0].in_stream;
  int rc = gs_stream_copy_h2d(stream, sl->in[0][0], 0, gs_buffer_host_ptr(sl->staged_in),
                              b->in.bytes);
  int sync = gs_stream_synchronize(stream);
  return rc < 0 ? rc : sync;
}

static int compute(void *ctx, int s, int64_t seq) {
  (void)seq;
  part *p = ctx;
  slot *sl = &p->run->slots[s];
  return gs_plan_run_buffers(p->plan, sl->in[p->index], sl->out[p->index]);
}

/* What the part before computed, copied to this part's device. */
static int exchange(void *ctx, int s, int64_t seq) {
  (void)seq;
  part *p = ctx;
  slot *sl = &p->run->slots[s];
  int rc = GS_OK;
  for (int i = 0; rc == 0 && i < p->n_in; i++)
    rc = gs_stream_copy_peer(p->in_stream, sl->in[p->index][i], 0,
                             sl->out[p->index - 1][p->src_out[i]], 0, p->in[i].bytes);
  int sync = gs_stream_synchronize(p->in_stream);
  return rc < 0 ? rc : sync;
}

static int d2h(void *ctx, int s, int64_t seq) {
  (void)seq;
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  int rc = GS_OK, last = b->n_parts - 1;
  for (int i = 0; rc == 0 && i < b->n_out; i++)
    rc = gs_stream_copy_d2h(b->d2h, gs_buffer_host_ptr(sl->staged_out[i]), sl->out[last][i], 0,
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
    for (int k = 0; k < MAX_PARTS; k++)
      for (int i = 0; i < MAX_VALUES; i++) {
        gs_buffer_free(sl->in[k][i], NULL);
        gs_buffer_free(sl->out[k][i], NULL);
      }
    for (int i = 0; i < MAX_VALUES; i++)
      gs_buffer_free(sl->staged_out[i], NULL);
  }
  free(b->slots);
  for (int i = 0; i < b->n_out; i++)
    if (b->out_fd[i] >= 0)
      close(b->out_fd[i]);
  if (b->d2h)
    gs_stream_destroy(b->d2h);
  for (int k = MAX_PARTS - 1; k >= 0; k--) { /* a part may hold data of the plan before */
    part *p = &b->parts[k];
    if (p->in_stream)
      gs_stream_destroy(p->in_stream);
    gs_plan_destroy(p->plan);
    gs_model_part_free(p->model);
  }
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

/* ---- threads ------------------------------------------------------------------------------ */

/* The cores this process may run on (its cpuset). */
static int cores_here(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (int)cores : 1;
}

static bool computes_on_cpu(const gs_batch_options *o) {
  if (o->n_devices == 0)
    return gs_device_get_info(gs_hal_device(0))->type == GS_DEVICE_CPU;
  for (int k = 0; k < o->n_devices; k++)
    if (gs_device_get_info(o->devices[k])->type == GS_DEVICE_CPU)
      return true;
  return false;
}

/* Preprocessing threads: the caller's, else the cores; where the CPU also
 * computes, a quarter of them, the rest going to the kernels
 * (compute_threads), so that the two stages never run more threads than
 * there are cores. */
static int preprocess_threads(const gs_batch_options *o) {
  int cores = cores_here();
  if (o->workers > 0)
    return o->workers;
  return computes_on_cpu(o) ? (cores / 4 > 0 ? cores / 4 : 1) : cores;
}

/* The kernels' threads where a part computes on the CPU. */
static int compute_threads(const gs_batch_options *o) {
  int left = cores_here() - preprocess_threads(o);
  return left > 0 ? left : 1;
}

/* Plans part k on its device: part 0 for the model's input shape, a later
 * one for what the part before hands it. */
static int plan_part(batch_run *b, int k, const gs_shape *input_shape) {
  part *p = &b->parts[k];
  const gs_model *model = p->model ? p->model : b->model;
  gs_shape shapes[MAX_VALUES];
  p->run = b;
  p->index = k;
  p->n_in = model->n_inputs;
  p->n_out = model->n_outputs;
  if (p->n_in > MAX_VALUES || p->n_out > MAX_VALUES)
    return gs_error(GS_ENOTSUP, "%s: %s has %d inputs and %d outputs; batch handles at most %d",
                    b->o->model_path, k == 0 && !p->model ? "the model" : "a part of the model",
                    p->n_in, p->n_out, MAX_VALUES);
  if (k == 0) {
    shapes[0] = *input_shape;
  } else { /* a value crossing the cut: its type and shape as the part before computes it */
    const part *before = &b->parts[k - 1];
    for (int i = 0; i < p->model->n_inputs;) {
      const gs_plan_value_info *src = NULL;
      for (int j = 0; j < before->n_out; j++)
        if (strcmp(before->out[j].name, p->model->inputs[i].name) == 0)
          src = &before->out[j], p->src_out[i] = j;
      if (!src)
        return gs_error(GS_EINVAL, "splitting the model: %s comes from no earlier part",
                        p->model->inputs[i].name);
      p->model->inputs[i].dtype = src->dtype;
      shapes[i] = src->shape;
      /* Known while planning the part before (a shape): a weight of this
       * part then, which its plan can read while planning. */
      int rc = src->data ? gs_model_part_set_constant(p->model, i, &src->shape, src->data,
                                                       src->bytes)
                         : 0;
      if (rc < 0)
        return rc;
      if (!src->data)
        i++;
    }
    p->n_in = p->model->n_inputs;
  }
  gs_plan_options po = {.device = b->o->devices[k], .precision = b->o->precision,
                        .threads = compute_threads(b->o)};
  int rc = gs_plan_create(model, shapes, &po, &p->plan);
  if (rc < 0)
    return rc;
  p->device = gs_plan_device(p->plan);
  for (int i = 0; i < p->n_in; i++)
    gs_plan_input(p->plan, i, &p->in[i]);
  for (int i = 0; i < p->n_out; i++)
    gs_plan_output(p->plan, i, &p->out[i]);
  return gs_stream_create(p->device, &p->in_stream);
}

static int alloc_slots(batch_run *b) {
  b->n_slots = b->o->slots > 0 ? b->o->slots : 4;
  b->slots = calloc((size_t)b->n_slots, sizeof *b->slots);
  if (!b->slots)
    return gs_error(GS_ENOMEM, "out of memory for %d slots", b->n_slots);
  const part *first = &b->parts[0], *last = &b->parts[b->n_parts - 1];
  gs_pool_t *pinned_in = gs_device_pool(first->device, GS_MEM_PINNED_HOST),
            *pinned_out = gs_device_pool(last->device, GS_MEM_PINNED_HOST);
  size_t raw_bytes =
      (size_t)b->batch * (size_t)b->row_elems * gs_dtype_size(gs_dataset_dtype(b->ds));
  int rc = GS_OK;
  for (int s = 0; rc == 0 && s < b->n_slots; s++) {
    slot *sl = &b->slots[s];
    if (!(sl->raw = malloc(raw_bytes ? raw_bytes : 1)))
      return gs_error(GS_ENOMEM, "out of memory for a batch of %zu bytes", raw_bytes);
    rc = gs_pool_alloc(pinned_in, b->in.bytes, NULL, &sl->staged_in);
    for (int k = 0; rc == 0 && k < b->n_parts; k++) {
      const part *p = &b->parts[k];
      gs_pool_t *dev = gs_device_pool(p->device, GS_MEM_DEVICE);
      for (int i = 0; rc == 0 && i < p->n_in; i++)
        rc = gs_pool_alloc(dev, p->in[i].bytes, NULL, &sl->in[k][i]);
      for (int i = 0; rc == 0 && i < p->n_out; i++)
        rc = gs_pool_alloc(dev, p->out[i].bytes, NULL, &sl->out[k][i]);
    }
    for (int i = 0; rc == 0 && i < b->n_out; i++)
      rc = gs_pool_alloc(pinned_out, b->out[i].bytes, NULL, &sl->staged_out[i]);
  }
  return rc;
}

static int prepare(batch_run *b) {
  const gs_batch_options *o = b->o;
  int rc = gs_model_load(o->model_path, &b->model);
  if (rc < 0)
    return rc;
  if (b->model->n_inputs != 1)
    return gs_error(GS_ENOTSUP, "%s has %d inputs; batch runs models with one input",
                    o->model_path, b->model->n_inputs);
  if (b->model->n_outputs > MAX_VALUES)
    return gs_error(GS_ENOTSUP, "%s has %d outputs; batch writes at most %d", o->model_path,
                    b->model->n_outputs, MAX_VALUES);
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
  b->n_parts = o->n_devices > 1 ? o->n_devices : 1;
  if (b->n_parts > MAX_PARTS)
    return gs_error(GS_EINVAL, "batch runs on at most %d devices, not %d", MAX_PARTS,
                    b->n_parts);
  if (b->n_parts > 1) {
    gs_model *split[MAX_PARTS];
    if ((rc = gs_model_split(b->model, b->n_parts, split)) < 0)
      return rc;
    for (int k = 0; k < b->n_parts; k++)
      b->parts[k].model = split[k];
  }
  for (int k = 0; rc == 0 && k < b->n_parts; k++)
    rc = plan_part(b, k, &shape);
  if (rc < 0)
    return rc;
  const part *last = &b->parts[b->n_parts - 1];
  b->in = b->parts[0].in[0];
  b->n_out = last->n_out;
  for (int i = 0; i < MAX_VALUES; i++)
    b->out_fd[i] = -1;
  for (int i = 0; i < b->n_out; i++) {
    b->out[i] = last->out[i];
    if (b->out[i].shape.rank < 1 || b->out[i].shape.dims[0] != b->batch)
      return gs_error(GS_ENOTSUP, "%s: output %s does not keep the batch dimension first",
                      o->model_path, b->out[i].name);
    b->out_row_bytes[i] = b->out[i].bytes / (size_t)b->batch;
  }
  if ((rc = gs_stream_create(last->device, &b->d2h)) < 0 || (rc = alloc_slots(b)) < 0)
    return rc;
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

/* ingest, preprocess, h2d, compute, d2h, write; with several devices the
 * compute of each part, an exchange before every part but the first. */
static int stages_of(batch_run *b, gs_pipeline_stage stages[GS_PIPELINE_MAX_STAGES]) {
  const gs_batch_options *o = b->o;
  int readers = o->readers > 0 ? o->readers : 2;
  /* Within the pipeline's thread limit. */
  int workers = preprocess_threads(o);
  int room = GS_PIPELINE_MAX_THREADS - readers - 2 - 2 * b->n_parts;
  if (workers > room)
    workers = room > 0 ? room : 1;
  int n = 0;
  stages[n++] = (gs_pipeline_stage){"ingest", readers, ingest, b, false};
  stages[n++] = (gs_pipeline_stage){"preprocess", workers, preprocess, b, false};
  stages[n++] = (gs_pipeline_stage){"h2d", 1, h2d, b, false};
  for (int k = 0; k < b->n_parts; k++) {
    part *p = &b->parts[k];
    const char *id = gs_device_get_info(p->device)->id;
    if (k > 0) {
      char *name = b->stage_names[n];
      snprintf(name, sizeof b->stage_names[n], "exchange>%s", id);
      stages[n++] = (gs_pipeline_stage){name, 1, exchange, p, false};
    }
    char *name = b->stage_names[n];
    if (b->n_parts > 1)
      snprintf(name, sizeof b->stage_names[n], "compute@%s", id);
    else
      snprintf(name, sizeof b->stage_names[n], "compute");
    stages[n++] = (gs_pipeline_stage){name, 1, compute, p, false};
  }
  stages[n++] = (gs_pipeline_stage){"d2h", 1, d2h, b, false};
  stages[n++] = (gs_pipeline_stage){"write", 1, write_out, b, false};
  return n;
}

int gs_batch_profile(const gs_batch_options *o, double alone[GS_PIPELINE_MAX_STAGES],
                     gs_pipeline_result *whole, int64_t *rows) {
  batch_run b = {.o = o};
  atomic_init(&b.written, 0);
  memset(whole, 0, sizeof *whole);
  int rc = prepare(&b), n = 0;
  gs_pipeline_stage stages[GS_PIPELINE_MAX_STAGES];
  if (rc == 0)
    n = stages_of(&b, stages);
  /* One untimed run first, on zeros: a device library's first call may
   * compile its kernels (CLBlast does), which is not the stage's throughput. */
  if (rc == 0) {
    gs_stream_t *zero = b.parts[0].in_stream;
    rc = gs_stream_memset(zero, b.slots[0].in[0][0], 0, 0, b.in.bytes);
    int sync = gs_stream_synchronize(zero);
    rc = rc < 0 ? rc : sync;
  }
  for (int k = 0; rc == 0 && k < b.n_parts; k++) {
    if (k > 0)
      rc = exchange(&b.parts[k], 0, 0);
    if (rc == 0)
      rc = compute(&b.parts[k], 0, 0);
  }
  int64_t batches = (b.rows + b.batch - 1) / (b.batch ? b.batch : 1);
  for (int k = 0; rc == 0 && k < n; k++) {
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
    rc = gs_pipeline_run(stages, n, b.n_slots, o->cancel, whole);
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
    gs_pipeline_stage stages[GS_PIPELINE_MAX_STAGES];
    int n = stages_of(&b, stages);
    rc = gs_pipeline_run(stages, n, b.n_slots, o->cancel, stats);
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

/* batch.c - batch inference over a data set on the pipeline (batch.h):
 * slots of host, pinned and device buffers allocated once, six stages, and
 * outputs written with pwrite at each batch's place, so that they come out
 * in input order. */
#include "engine/batch.h"

#include "base/error.h"
#include "base/fileutil.h"
#include "base/log.h"
#include "hal/cpu/ops/kernels.h" /* gs_ld, gs_st */
#include "engine/dataset.h"
#include "engine/image_pack.h"
#include "engine/image_set.h"
#include "engine/model_split.h"
#include "engine/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_VALUES 8 /* a part's inputs or outputs */
#define MAX_PARTS GS_BATCH_MAX_DEVICES
_Static_assert(MAX_PARTS <= GS_SPLIT_MAX_PARTS, "every device gets a part");
_Static_assert(MAX_VALUES >= GS_SPLIT_MAX_CROSSING, "a slot holds every value crossing a cut");
_Static_assert(5 + 2 * MAX_PARTS <= GS_PIPELINE_MAX_STAGES, "every part's stages fit a pipeline");

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

/* An image file's bytes as ingest read them, or why it could not. */
typedef struct image_file {
  uint8_t *bytes;
  size_t size, cap;
  char why[256]; /* "" when read */
} image_file;

typedef struct slot {
  void *raw;                               /* rows as the data set holds them */
  image_file *files;                       /* or each row's image file */
  gs_buffer_t *staged_in;                  /* pinned: the model's input type, or the pack;
                                            * NULL where direct_in */
  gs_image_pack *pack;                     /* images resized on the device: packed for it */
  gs_buffer_t *packed;                     /* ... and its staging on part 0's device */
  gs_buffer_t *in[MAX_PARTS][MAX_VALUES];  /* each part's inputs, on its device */
  gs_buffer_t *out[MAX_PARTS][MAX_VALUES]; /* each part's outputs, on its device */
  gs_buffer_t *staged_out[MAX_VALUES];     /* pinned: the model's outputs; NULL where direct_out */
  int64_t rows;                            /* real rows in this batch (the last may be short) */
} slot;

typedef struct batch_run {
  const gs_batch_options *o;
  gs_model *model;
  int n_parts;
  part parts[MAX_PARTS];
  gs_dataset *ds;
  gs_image_set *images; /* instead of ds */
  int image_h, image_w;
  bool nchw;
  gs_prep cpu_prep;     /* what the CPU does of the recipe: all of it, or resize and crop */
  bool prep_on_device;  /* the rest in the plan (gs_prep_graph) */
  bool resize_on_device; /* resize and crop too, in the resize stage (image_pack.h) */
  gs_stream_t *resize_stream; /* on part 0's device */
  gs_buffer_t *resize_mid;    /* the horizontal passes' output, one for the stage */
  atomic_llong resized_there; /* images the resize stage resized (not rows the CPU made) */
  atomic_llong h2d_bytes;     /* what the h2d stage copied */
  /* A device whose memory the host reads and writes (the CPU's): the
   * preprocess stage writes part 0's input in place and the write stage
   * reads the last part's outputs in place, so h2d and d2h copy nothing. */
  bool direct_in, direct_out;
  pthread_mutex_t failed_lock;
  int failed_fd;        /* output_dir/failed.txt, made at the first failure */
  atomic_llong failed;
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

/* An encoded image larger than this is refused unread. */
#define IMAGE_FILE_MAX ((size_t)256 << 20)

/* Reads a whole image file into f; a failure is the row's, said in f->why. */
static void read_image_file(const char *path, image_file *f) {
  f->why[0] = '\0';
  f->size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) < 0) {
    snprintf(f->why, sizeof f->why, "cannot open it: %s", strerror(errno));
    if (fd >= 0)
      close(fd);
    return;
  }
  size_t want = (size_t)sb.st_size;
  if (!S_ISREG(sb.st_mode) || want > IMAGE_FILE_MAX) {
    snprintf(f->why, sizeof f->why, S_ISREG(sb.st_mode) ? "a file of %zu bytes, over 256 MiB"
                                                         : "not a regular file", want);
    close(fd);
    return;
  }
  if (want > f->cap) {
    uint8_t *grown = realloc(f->bytes, want);
    if (!grown) {
      snprintf(f->why, sizeof f->why, "out of memory for %zu bytes", want);
      close(fd);
      return;
    }
    f->bytes = grown;
    f->cap = want;
  }
  while (f->size < want) {
    ssize_t got = pread(fd, f->bytes + f->size, want - f->size, (off_t)f->size);
    if (got < 0) {
      snprintf(f->why, sizeof f->why, "cannot read it: %s", strerror(errno));
      break;
    }
    if (got == 0)
      break; /* it got shorter: the decoder says what is missing */
    f->size += (size_t)got;
  }
  close(fd);
}

static int ingest(void *ctx, int s, int64_t seq) {
  batch_run *b = ctx;
  int64_t first = seq * b->batch;
  if (first >= b->rows)
    return 1;
  int64_t count = b->rows - first < b->batch ? b->rows - first : b->batch;
  slot *sl = &b->slots[s];
  sl->rows = count;
  if (!b->images)
    return gs_dataset_read(b->ds, first, count, sl->raw);
  for (int64_t r = 0; r < count; r++)
    read_image_file(gs_image_set_path(b->images, first + r), &sl->files[r]);
  return GS_OK;
}

/* Says in failed.txt that `row` is zeros, and why; made at the first. */
static int note_failed_row(batch_run *b, int64_t row, const char *why) {
  atomic_fetch_add(&b->failed, 1);
  char line[1024 + PATH_MAX];
  int n = snprintf(line, sizeof line, "%lld\t%s\t%s\n", (long long)row,
                   gs_image_set_path(b->images, row), why);
  if (n < 0 || (size_t)n >= sizeof line) { /* cut short, its line ended */
    n = (int)sizeof line - 1;
    line[n - 1] = '\n';
  }
  pthread_mutex_lock(&b->failed_lock);
  if (b->failed_fd < 0) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/failed.txt", b->o->output_dir);
    b->failed_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  }
  bool written = b->failed_fd >= 0 && write(b->failed_fd, line, (size_t)n) == n;
  pthread_mutex_unlock(&b->failed_lock);
  return written ? GS_OK
                 : gs_error(GS_EIO, "cannot write %s/failed.txt: %s", b->o->output_dir,
                            strerror(errno));
}

/* Each image of the batch decoded and made a row by the recipe; one that
 * cannot be is a row of zeros, said in failed.txt. */
static int preprocess_images(batch_run *b, slot *sl, int64_t seq, void *dst) {
  size_t row_bytes = (size_t)b->row_elems * gs_dtype_size(b->in.dtype);
  for (int64_t r = 0; r < sl->rows; r++) {
    image_file *f = &sl->files[r];
    void *row = (char *)dst + (size_t)r * row_bytes;
    int rc = f->why[0] ? GS_EINVAL
                       : gs_prep_encoded(&b->cpu_prep, f->bytes, f->size, b->image_h,
                                         b->image_w, b->nchw, b->in.dtype, row);
    if (rc < 0) {
      memset(row, 0, row_bytes);
      if (note_failed_row(b, seq * b->batch + r, f->why[0] ? f->why : gs_error_detail()) < 0)
        return GS_EIO;
    }
  }
  return GS_OK;
}

/* The same where the device resizes: each image decoded and packed for
 * the resize stage (image_pack.h) into `staging`. */
static int pack_images(batch_run *b, slot *sl, int64_t seq, void *staging) {
  gs_image_pack_begin(sl->pack, staging);
  for (int64_t r = 0; r < sl->rows; r++) {
    image_file *f = &sl->files[r];
    int rc = GS_EINVAL;
    if (f->why[0])
      gs_image_pack_zeros(sl->pack);
    else
      rc = gs_image_pack_encoded(sl->pack, f->bytes, f->size);
    if (rc < 0 &&
        note_failed_row(b, seq * b->batch + r, f->why[0] ? f->why : gs_error_detail()) < 0)
      return GS_EIO;
  }
  atomic_fetch_add(&b->resized_there, gs_image_pack_on_device(sl->pack));
  return GS_OK;
}

/* Type conversion and normalisation into pinned staging; a short last
 * batch is padded with zeros (its rows are not written out; where the
 * device resizes they keep the last batch's bytes, equally unwritten). */
static int preprocess(void *ctx, int s, int64_t seq) {
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  void *dst = gs_buffer_host_ptr(b->direct_in ? sl->in[0][0] : sl->staged_in);
  gs_dtype to = b->in.dtype;
  int64_t n = sl->rows * b->row_elems, total = (int64_t)b->batch * b->row_elems;
  int rc = b->resize_on_device ? pack_images(b, sl, seq, dst)
           : b->images        ? preprocess_images(b, sl, seq, dst)
                              : GS_OK;
  gs_dtype from = b->images ? to : gs_dataset_dtype(b->ds);
  const double scale = b->o->prep.scale, mean = b->o->prep.mean[0];
  const double inv_std = 1.0 / b->o->prep.std[0];
  if (b->images) {
    /* made by the recipe */
  } else if (from == GS_DT_FLOAT32 && to == GS_DT_FLOAT32) { /* the common case, vectorisable */
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
  if (n < total && !b->resize_on_device) /* packed images: the rows past them stay as they were */
    memset((char *)dst + (size_t)n * gs_dtype_size(to), 0,
           (size_t)(total - n) * gs_dtype_size(to));
  return rc;
}

static int h2d(void *ctx, int s, int64_t seq) {
  (void)seq;
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  if (b->direct_in)
    return GS_OK;
  gs_stream_t *stream = b->parts[0].in_stream;
  size_t bytes = b->resize_on_device ? gs_image_pack_used(sl->pack) : b->in.bytes;
  int rc = gs_stream_copy_h2d(stream, b->resize_on_device ? sl->packed : sl->in[0][0], 0,
                              gs_buffer_host_ptr(sl->staged_in), bytes);
  atomic_fetch_add(&b->h2d_bytes, (long long)bytes);
  int sync = gs_stream_synchronize(stream);
  return rc < 0 ? rc : sync;
}

/* The packed images resized and cropped into the model's input rows. */
static int resize(void *ctx, int s, int64_t seq) {
  (void)seq;
  batch_run *b = ctx;
  slot *sl = &b->slots[s];
  int rc = gs_image_pack_launch(sl->pack, b->resize_stream, sl->packed, b->resize_mid,
                                sl->in[0][0]);
  int sync = gs_stream_synchronize(b->resize_stream);
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
  if (b->direct_out)
    return GS_OK;
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
    const char *src = gs_buffer_host_ptr(b->direct_out ? sl->out[b->n_parts - 1][i]
                                                      : sl->staged_out[i]);
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
    for (int r = 0; sl->files && r < b->batch; r++)
      free(sl->files[r].bytes);
    free(sl->files);
    gs_buffer_free(sl->staged_in, NULL);
    gs_buffer_free(sl->packed, NULL);
    gs_image_pack_free(sl->pack);
    for (int k = 0; k < MAX_PARTS; k++)
      for (int i = 0; i < MAX_VALUES; i++) {
        gs_buffer_free(sl->in[k][i], NULL);
        gs_buffer_free(sl->out[k][i], NULL);
      }
    for (int i = 0; i < MAX_VALUES; i++)
      gs_buffer_free(sl->staged_out[i], NULL);
  }
  free(b->slots);
  gs_buffer_free(b->resize_mid, NULL);
  if (b->resize_stream)
    gs_stream_destroy(b->resize_stream);
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
  gs_image_set_close(b->images);
  if (b->failed_fd >= 0)
    close(b->failed_fd);
  pthread_mutex_destroy(&b->failed_lock);
  gs_model_free(b->model);
}

/* DIR/inputs.txt: each row's image, a line each, so that rows of the
 * outputs can be traced to their files. A failed.txt of an earlier run goes. */
static int list_inputs(batch_run *b) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/failed.txt", b->o->output_dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/inputs.txt", b->o->output_dir);
  FILE *f = fopen(path, "w");
  if (!f)
    return gs_error(GS_EIO, "cannot write %s: %s", path, strerror(errno));
  for (int64_t i = 0; i < b->rows; i++)
    fprintf(f, "%s\n", gs_image_set_path(b->images, i));
  if (fclose(f) != 0)
    return gs_error(GS_EIO, "cannot write %s: %s", path, strerror(errno));
  return GS_OK;
}

static int open_outputs(batch_run *b) {
  if (gs_mkdir_p(b->o->output_dir) < 0)
    return gs_error(GS_EIO, "cannot create %s: %s", b->o->output_dir, strerror(errno));
  int listed = b->images ? list_inputs(b) : GS_OK;
  if (listed < 0)
    return listed;
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

/* Writes zeros over a part's input buffers once, so that their first
 * touch (on a host device, page faults; in a VM, memory the host hands out
 * slowly) is paid while setting up, not by the first batches. */
static int touch_inputs(const part *p, gs_buffer_t *const in[MAX_VALUES]) {
  int rc = GS_OK;
  for (int i = 0; rc == 0 && i < p->n_in; i++)
    rc = gs_stream_memset(p->in_stream, in[i], 0, 0, p->in[i].bytes);
  int sync = gs_stream_synchronize(p->in_stream);
  return rc < 0 ? rc : sync;
}

/* Each slot's image pack with its staging, pinned and on part 0's device,
 * and the resize stage's buffer. Where memory runs short the CPU resizes
 * instead, and the log says so. */
static int alloc_packs(batch_run *b) {
  gs_device_t *first = b->parts[0].device;
  gs_pool_t *dev = gs_device_pool(first, GS_MEM_DEVICE);
  gs_pool_t *pinned = gs_device_pool(first, GS_MEM_PINNED_HOST);
  int rc = GS_OK;
  for (int s = 0; rc == 0 && s < b->n_slots; s++) {
    slot *sl = &b->slots[s];
    size_t staging, mid;
    rc = gs_image_pack_create(&b->cpu_prep, b->batch, b->image_h, b->image_w, &sl->pack,
                              &staging, &mid);
    if (rc == 0)
      rc = gs_pool_alloc(dev, staging, NULL, &sl->packed);
    if (rc == 0)
      rc = gs_pool_alloc(pinned, staging, NULL, &sl->staged_in);
    if (rc == 0 && !b->resize_mid)
      rc = gs_pool_alloc(dev, mid, NULL, &b->resize_mid);
  }
  if (rc != GS_ENOMEM)
    return rc;
  GS_LOGW("engine", "batch: no memory for the device's resize (%s); the CPU resizes",
          gs_error_detail());
  for (int s = 0; s < b->n_slots; s++) {
    slot *sl = &b->slots[s];
    gs_image_pack_free(sl->pack);
    gs_buffer_free(sl->packed, NULL);
    gs_buffer_free(sl->staged_in, NULL);
    sl->pack = NULL;
    sl->packed = sl->staged_in = NULL;
  }
  gs_buffer_free(b->resize_mid, NULL);
  b->resize_mid = NULL;
  b->resize_on_device = false;
  return GS_OK;
}

/* touch_inputs for the resize stage's buffers: the slot's, and with the
 * first slot the one the stage shares. */
static int touch_pack(batch_run *b, slot *sl) {
  gs_stream_t *s = b->parts[0].in_stream;
  int rc = gs_stream_memset(s, sl->packed, 0, 0, gs_buffer_size(sl->packed));
  if (rc == 0 && sl == &b->slots[0])
    rc = gs_stream_memset(s, b->resize_mid, 0, 0, gs_buffer_size(b->resize_mid));
  int sync = gs_stream_synchronize(s);
  return rc < 0 ? rc : sync;
}

static int alloc_slots(batch_run *b) {
  b->n_slots = b->o->slots > 0 ? b->o->slots : 4;
  b->slots = calloc((size_t)b->n_slots, sizeof *b->slots);
  if (!b->slots)
    return gs_error(GS_ENOMEM, "out of memory for %d slots", b->n_slots);
  const part *first = &b->parts[0], *last = &b->parts[b->n_parts - 1];
  gs_pool_t *pinned_in = gs_device_pool(first->device, GS_MEM_PINNED_HOST),
            *pinned_out = gs_device_pool(last->device, GS_MEM_PINNED_HOST);
  size_t raw_bytes = b->images ? 0
                                : (size_t)b->batch * (size_t)b->row_elems *
                                      gs_dtype_size(gs_dataset_dtype(b->ds));
  int rc = b->resize_on_device ? alloc_packs(b) : GS_OK;
  b->direct_in = !b->resize_on_device &&
                 gs_device_get_caps(first->device)->host_visible_device_memory;
  b->direct_out = gs_device_get_caps(last->device)->host_visible_device_memory;
  for (int s = 0; rc == 0 && s < b->n_slots; s++) {
    slot *sl = &b->slots[s];
    if (!(sl->raw = malloc(raw_bytes ? raw_bytes : 1)))
      return gs_error(GS_ENOMEM, "out of memory for a batch of %zu bytes", raw_bytes);
    if (b->images && !(sl->files = calloc((size_t)b->batch, sizeof *sl->files)))
      return gs_error(GS_ENOMEM, "out of memory for a batch of %d images", b->batch);
    if (!sl->staged_in && !b->direct_in) /* where the device resizes, alloc_packs made it */
      rc = gs_pool_alloc(pinned_in, b->in.bytes, NULL, &sl->staged_in);
    for (int k = 0; rc == 0 && k < b->n_parts; k++) {
      const part *p = &b->parts[k];
      gs_pool_t *dev = gs_device_pool(p->device, GS_MEM_DEVICE);
      for (int i = 0; rc == 0 && i < p->n_in; i++)
        rc = gs_pool_alloc(dev, p->in[i].bytes, NULL, &sl->in[k][i]);
      for (int i = 0; rc == 0 && i < p->n_out; i++)
        rc = gs_pool_alloc(dev, p->out[i].bytes, NULL, &sl->out[k][i]);
    }
    for (int i = 0; rc == 0 && !b->direct_out && i < b->n_out; i++)
      rc = gs_pool_alloc(pinned_out, b->out[i].bytes, NULL, &sl->staged_out[i]);
    for (int k = 0; rc == 0 && k < b->n_parts; k++)
      rc = touch_inputs(&b->parts[k], sl->in[k]);
    if (rc == 0 && b->resize_on_device)
      rc = touch_pack(b, sl);
  }
  return rc;
}

/* Images: the model's input must be one image a row, 3 channels first or
 * last (the recipe's layout, or the one the shape allows). */
static int image_geometry(batch_run *b, const gs_value_info *in) {
  const gs_batch_options *o = b->o;
  bool first = in->rank == 4 && in->dims[1] == 3, last = in->rank == 4 && in->dims[3] == 3;
  gs_image_layout layout = o->prep.layout;
  if (layout == GS_LAYOUT_AUTO)
    layout = first ? GS_LAYOUT_NCHW : last ? GS_LAYOUT_NHWC : GS_LAYOUT_AUTO;
  if ((layout == GS_LAYOUT_NCHW && !first) || (layout == GS_LAYOUT_NHWC && !last) ||
      layout == GS_LAYOUT_AUTO)
    return gs_error(GS_EINVAL, "%s: input %s is not [N, 3, H, W] or [N, H, W, 3]%s; images "
                               "need one of them", o->model_path, in->name,
                    o->prep.layout == GS_LAYOUT_NCHW   ? " (layout=nchw: [N, 3, H, W])"
                    : o->prep.layout == GS_LAYOUT_NHWC ? " (layout=nhwc: [N, H, W, 3])"
                                                       : "");
  b->nchw = layout == GS_LAYOUT_NCHW;
  b->image_h = (int)in->dims[b->nchw ? 2 : 1];
  b->image_w = (int)in->dims[b->nchw ? 3 : 2];
  return GS_OK;
}

/* The data set of numbers, or the images. */
static int open_input(batch_run *b, const gs_value_info *in) {
  const gs_batch_options *o = b->o;
  int rc = gs_image_set_open(o->input, &b->images);
  if (rc < 0)
    return rc;
  if (b->images) {
    b->rows = gs_image_set_count(b->images);
    return image_geometry(b, in);
  }
  if (gs_prep_has_geometry(&o->prep) || o->prep.n_mean > 1 || o->prep.n_std > 1 ||
      o->prep.layout != GS_LAYOUT_AUTO)
    return gs_error(GS_EINVAL, "%s is not images (.jpg, .jpeg, .png, or a list of them): "
                               "resize, center_crop, layout and a mean or std per channel apply "
                               "to images", o->input);
  if ((rc = gs_dataset_open(o->input, b->row_elems, &b->ds)) < 0)
    return rc;
  b->rows = gs_dataset_rows(b->ds);
  return GS_OK;
}

/* Images for a float32 model on a GPU (or with finish=device, any device
 * with memory of its own): the CPU decodes, resizes and crops to uint8, and
 * the recipe's last steps (type, layout, normalisation) join the model as a
 * graph the device runs (gs_prep_graph), so that a quarter of float32's
 * bytes cross the bus. Elsewhere the CPU does the whole recipe: an OpenCL
 * CPU device's kernels would take the same cores, slower (bench/images). */
static int place_prep(batch_run *b, gs_shape *shape) {
  const gs_batch_options *o = b->o;
  gs_device_t *first = o->n_devices ? o->devices[0] : gs_hal_device(0);
  b->cpu_prep = o->prep;
  if (!gs_prep_finishes_on(&o->prep, &first, first ? 1 : 0) ||
      b->model->inputs[0].dtype != GS_DT_FLOAT32)
    return GS_OK;
  /* auto leaves a model the recipe cannot join to the CPU; device says why */
  if (o->prep.finish == GS_FINISH_AUTO && gs_prep_can_compose(b->model) < 0)
    return GS_OK;
  gs_model *whole;
  int rc = gs_prep_compose(&o->prep, b->model, 0, b->image_h, b->image_w, b->nchw,
                           o->model_path, &whole);
  b->model = NULL; /* taken by the composition, whatever it returns */
  if (rc < 0)
    return rc;
  b->model = whole;
  b->prep_on_device = true;
  b->nchw = false;
  gs_prep_geometry_only(&b->cpu_prep);
  /* resize and crop as well, where the device has their kernel */
  b->resize_on_device =
      gs_prep_has_geometry(&o->prep) && gs_device_supports_op(first, GS_IMAGE_TAPS_OP);
  *shape = (gs_shape){4, {shape->dims[0], b->image_h, b->image_w, 3}};
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
  if ((rc = open_input(b, in)) < 0)
    return rc;
  if (b->images && (rc = place_prep(b, &shape)) < 0)
    return rc;
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
  if ((rc = gs_stream_create(last->device, &b->d2h)) < 0 ||
      (b->resize_on_device && (rc = gs_stream_create(b->parts[0].device, &b->resize_stream)) < 0) ||
      (rc = alloc_slots(b)) < 0)
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
 * compute of each part, an exchange before every part but the first; with
 * images resized on the device, resize after h2d. */
static int stages_of(batch_run *b, gs_pipeline_stage stages[GS_PIPELINE_MAX_STAGES]) {
  const gs_batch_options *o = b->o;
  int readers = o->readers > 0 ? o->readers : 2;
  /* Within the pipeline's thread limit. */
  int workers = preprocess_threads(o);
  int room = GS_PIPELINE_MAX_THREADS - readers - 2 - 2 * b->n_parts - b->resize_on_device;
  if (workers > room)
    workers = room > 0 ? room : 1;
  int n = 0;
  stages[n++] = (gs_pipeline_stage){"ingest", readers, ingest, b, false};
  stages[n++] = (gs_pipeline_stage){"preprocess", workers, preprocess, b, false};
  stages[n++] = (gs_pipeline_stage){"h2d", 1, h2d, b, false};
  if (b->resize_on_device)
    stages[n++] = (gs_pipeline_stage){"resize", 1, resize, b, false};
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

static void run_init(batch_run *b, const gs_batch_options *o) {
  memset(b, 0, sizeof *b);
  b->o = o;
  b->failed_fd = -1;
  pthread_mutex_init(&b->failed_lock, NULL);
  atomic_init(&b->written, 0);
  atomic_init(&b->failed, 0);
  atomic_init(&b->resized_there, 0);
  atomic_init(&b->h2d_bytes, 0);
}

int gs_batch_profile(const gs_batch_options *o, double alone[GS_PIPELINE_MAX_STAGES],
                     gs_pipeline_result *whole, int64_t *rows) {
  batch_run b;
  run_init(&b, o);
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
    if (b.ds)
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
    if (b.ds)
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
  for (int c = 0; c < 3; c++)
    if (!(o->prep.std[c] != 0) || !isfinite(o->prep.scale) || !isfinite(o->prep.mean[c]) ||
        !isfinite(o->prep.std[c]))
      return gs_error(GS_EINVAL, "preprocessing needs finite scale and mean and a non-zero std");
  batch_run b;
  run_init(&b, o);
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
  if (o->failed)
    *o->failed = atomic_load(&b.failed);
  if (o->prep_on_device)
    *o->prep_on_device = b.prep_on_device;
  if (o->h2d_bytes)
    *o->h2d_bytes = atomic_load(&b.h2d_bytes);
  if (o->resized_on_device)
    *o->resized_on_device = b.resize_on_device ? atomic_load(&b.resized_there) : -1;
  teardown(&b);
  return rc;
}

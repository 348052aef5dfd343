/* image_pack.c - a batch's images resized and cropped on a device
 * (image_pack.h). The staging holds, in order: the horizontal passes'
 * records (one per image of a full batch), the vertical passes' records,
 * then each image's block: its pixels (rows x cols x 3), its horizontal
 * taps, its vertical taps, each 8-aligned. */
#include "engine/image_pack.h"

#include "base/error.h"
#include "hal/op/op_attrs.h"

#include <stdlib.h>
#include <string.h>

struct gs_image_pack {
  gs_prep prep; /* resize and crop only */
  int batch, out_h, out_w;
  size_t out_bytes;   /* a row: out_h x out_w x 3 */
  size_t row_block;   /* staging for a row the CPU made, with its taps */
  size_t capacity, mid_capacity;
  gs_resize_taps same_x, same_y; /* taps that leave a row as it is */
  /* the batch being packed */
  uint8_t *staging;
  size_t used, mid_used;
  int64_t h_elements;
  int n, on_device;
  /* the launches' calls, which a stream may read after queueing */
  gs_image_taps_attrs attrs[2];
  gs_op_call calls[2];
  const gs_op_call *call_ptrs[2];
};

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

static size_t taps_bytes(const gs_resize_taps *t) {
  return align8((size_t)t->n * (2 + (size_t)t->ksize) * sizeof(int32_t));
}

static size_t table_bytes(int batch) { return 2 * (size_t)batch * sizeof(gs_image_taps_pass); }

void gs_image_pack_free(gs_image_pack *pk) {
  if (!pk)
    return;
  gs_resize_taps_free(&pk->same_x);
  gs_resize_taps_free(&pk->same_y);
  free(pk);
}

int gs_image_pack_create(const gs_prep *prep, int batch, int out_h, int out_w,
                         gs_image_pack **out, size_t *staging_bytes, size_t *mid_bytes) {
  *out = NULL;
  if (batch <= 0 || out_h <= 0 || out_w <= 0)
    return gs_error(GS_EINVAL, "an image pack of %d rows of %dx%d", batch, out_w, out_h);
  gs_image_pack *pk = calloc(1, sizeof *pk);
  if (!pk)
    return gs_error(GS_ENOMEM, "out of memory for an image pack");
  pk->prep = *prep;
  gs_prep_geometry_only(&pk->prep);
  pk->batch = batch;
  pk->out_h = out_h;
  pk->out_w = out_w;
  pk->out_bytes = (size_t)out_h * out_w * 3;
  int rc = gs_image_resize_taps(out_w, out_w, 0, out_w, GS_FILTER_BILINEAR, &pk->same_x);
  if (rc == 0)
    rc = gs_image_resize_taps(out_h, out_h, 0, out_h, GS_FILTER_BILINEAR, &pk->same_y);
  if (rc < 0) {
    gs_image_pack_free(pk);
    return rc;
  }
  pk->row_block = align8(pk->out_bytes) + taps_bytes(&pk->same_x) + taps_bytes(&pk->same_y);
  size_t per_image = pk->row_block > GS_IMAGE_PACK_BUDGET ? pk->row_block : GS_IMAGE_PACK_BUDGET;
  size_t per_mid = pk->out_bytes > GS_IMAGE_PACK_BUDGET ? align8(pk->out_bytes)
                                                        : GS_IMAGE_PACK_BUDGET;
  pk->capacity = table_bytes(batch) + (size_t)batch * per_image;
  pk->mid_capacity = (size_t)batch * per_mid;
  *staging_bytes = pk->capacity;
  *mid_bytes = pk->mid_capacity;
  *out = pk;
  return GS_OK;
}

void gs_image_pack_begin(gs_image_pack *pk, void *staging) {
  pk->staging = staging;
  pk->used = table_bytes(pk->batch);
  pk->mid_used = 0;
  pk->h_elements = 0;
  pk->n = pk->on_device = 0;
}

size_t gs_image_pack_used(const gs_image_pack *pk) { return pk->used; }
int gs_image_pack_on_device(const gs_image_pack *pk) { return pk->on_device; }

/* Writes taps at staging offset `at`, their starts counted from `base`. */
static void put_taps(gs_image_pack *pk, size_t at, const gs_resize_taps *t, int base) {
  int32_t *dst = (int32_t *)(pk->staging + at);
  for (int i = 0; i < t->n; i++) {
    dst[i] = t->start[i] - base;
    dst[t->n + i] = t->count[i];
  }
  memcpy(dst + 2 * t->n, t->k, (size_t)t->n * (size_t)t->ksize * sizeof(int32_t));
}

/* Whether a block of these sizes fits, leaving room for a row the CPU
 * makes for every image after this one. */
static bool fits(const gs_image_pack *pk, size_t block, size_t mid) {
  size_t later = (size_t)(pk->batch - pk->n - 1);
  return pk->used + block + later * pk->row_block <= pk->capacity &&
         pk->mid_used + mid + later * align8(pk->out_bytes) <= pk->mid_capacity;
}

/* Reserves the next image's block: rows x cols pixels, read through tx
 * (from column col_lo) and ty (from row row_lo); records both passes.
 * Returns where its pixels go. The caller has checked that it fits. */
static uint8_t *add_block(gs_image_pack *pk, int rows, int cols, const gs_resize_taps *tx,
                          int col_lo, const gs_resize_taps *ty, int row_lo) {
  size_t pixels = pk->used, taps_x = pixels + align8((size_t)rows * cols * 3);
  size_t taps_y = taps_x + taps_bytes(tx);
  put_taps(pk, taps_x, tx, col_lo);
  put_taps(pk, taps_y, ty, row_lo);
  gs_image_taps_pass *passes = (gs_image_taps_pass *)pk->staging;
  passes[pk->n] = (gs_image_taps_pass){
      .first = pk->h_elements, .x_at = (int64_t)pixels, .y_at = (int64_t)pk->mid_used,
      .taps_at = (int64_t)taps_x, .n_out = tx->n, .inner = 3, .in_tap = 3,
      .in_line = (int64_t)cols * 3, .ksize = tx->ksize};
  int64_t row_at = (int64_t)((size_t)pk->n * pk->out_bytes); /* rows are dense */
  passes[pk->batch + pk->n] = (gs_image_taps_pass){
      .first = row_at, .x_at = (int64_t)pk->mid_used, .y_at = row_at, .taps_at = (int64_t)taps_y,
      .n_out = ty->n, .inner = (int64_t)tx->n * 3, .in_tap = (int64_t)tx->n * 3, .in_line = 0,
      .ksize = ty->ksize};
  size_t mid = (size_t)rows * tx->n * 3;
  pk->h_elements += (int64_t)mid;
  pk->mid_used += align8(mid);
  pk->used = taps_y + taps_bytes(ty);
  pk->n++;
  return pk->staging + pixels;
}

/* A row made by the CPU (or zeros), which the passes copy. */
static uint8_t *add_row(gs_image_pack *pk) {
  return add_block(pk, pk->out_h, pk->out_w, &pk->same_x, 0, &pk->same_y, 0);
}

void gs_image_pack_row(gs_image_pack *pk, const uint8_t *row) {
  if (pk->n < pk->batch)
    memcpy(add_row(pk), row, pk->out_bytes);
}

void gs_image_pack_zeros(gs_image_pack *pk) {
  if (pk->n < pk->batch)
    memset(add_row(pk), 0, pk->out_bytes);
}

/* The device's passes for an image whose window needs no padding, where
 * its pixels fit; false (nothing packed) where they do not. */
static int pack_for_device(gs_image_pack *pk, const gs_image *img, const gs_prep_geometry *g,
                           bool *packed) {
  gs_resize_taps tx, ty = {0};
  gs_image_filter mode = pk->prep.interpolation;
  int rc = gs_image_resize_taps(img->width, g->rw, g->x0, g->ww, mode, &tx);
  if (rc == 0)
    rc = gs_image_resize_taps(img->height, g->rh, g->y0, g->wh, mode, &ty);
  *packed = false;
  if (rc == 0) {
    int col_lo = tx.start[0], col_hi = tx.start[tx.n - 1] + tx.count[tx.n - 1];
    int row_lo = ty.start[0], row_hi = ty.start[ty.n - 1] + ty.count[ty.n - 1];
    int rows = row_hi - row_lo, cols = col_hi - col_lo;
    bool held = col_lo >= img->x0 && col_hi <= img->x0 + img->w && row_lo >= img->y0 &&
                row_hi <= img->y0 + img->h;
    size_t block = align8((size_t)rows * cols * 3) + taps_bytes(&tx) + taps_bytes(&ty);
    if (held && fits(pk, block, align8((size_t)rows * g->ww * 3))) {
      uint8_t *dst = add_block(pk, rows, cols, &tx, col_lo, &ty, row_lo);
      const uint8_t *src = img->rgb + (size_t)(row_lo - img->y0) * img->stride +
                           (size_t)(col_lo - img->x0) * 3;
      for (int y = 0; y < rows; y++)
        memcpy(dst + (size_t)y * cols * 3, src + (size_t)y * img->stride, (size_t)cols * 3);
      pk->on_device++;
      *packed = true;
    }
  }
  gs_resize_taps_free(&tx);
  gs_resize_taps_free(&ty);
  return rc;
}

/* GS_EINVAL where the pack holds its batch already. */
static int room_left(const gs_image_pack *pk) {
  return pk->n < pk->batch ? GS_OK
                           : gs_error(GS_EINVAL, "an image pack of %d images is full", pk->batch);
}

int gs_image_pack_image(gs_image_pack *pk, const gs_image *img) {
  if (room_left(pk) < 0)
    return GS_EINVAL;
  gs_prep_geometry g;
  gs_prep_geometry_of(&pk->prep, img->width, img->height, &g);
  int rc = gs_prep_check_geometry(&g, img->width, img->height, pk->out_h, pk->out_w);
  bool packed = false, padded = g.ww < g.cw || g.wh < g.ch;
  if (rc == 0 && !padded)
    rc = pack_for_device(pk, img, &g, &packed);
  if (rc == 0 && !packed) {
    uint8_t *row = add_row(pk);
    rc = gs_prep_image(&pk->prep, img, pk->out_h, pk->out_w, false, GS_DT_UINT8, row);
    if (rc < 0)
      memset(row, 0, pk->out_bytes);
  } else if (rc < 0) {
    gs_image_pack_zeros(pk);
  }
  return rc;
}

int gs_image_pack_encoded(gs_image_pack *pk, const void *data, size_t size) {
  if (room_left(pk) < 0) /* before decoding */
    return GS_EINVAL;
  gs_image img;
  int rc = gs_prep_decode(&pk->prep, data, size, &img);
  if (rc < 0) {
    gs_image_pack_zeros(pk);
    return rc;
  }
  rc = gs_image_pack_image(pk, &img);
  gs_image_free(&img);
  return rc;
}

/* The call of one pass: x, the table (the staging), y. */
static const gs_op_call *pass_call(gs_image_pack *pk, int k, size_t x_bytes, size_t y_bytes,
                                   int64_t elements) {
  pk->attrs[k] = (gs_image_taps_attrs){
      .images = pk->n, .passes_at = (int64_t)(k * (size_t)pk->batch * sizeof(gs_image_taps_pass)),
      .elements = elements};
  gs_op_call *c = &pk->calls[k];
  memset(c, 0, sizeof *c);
  c->op_type = GS_IMAGE_TAPS_OP;
  c->node_name = k == 0 ? "image resize, horizontal" : "image resize, vertical";
  c->n_in = 2;
  c->n_out = 1;
  c->in[0] = (gs_tensor_desc){GS_DT_UINT8, {1, {(int64_t)x_bytes}}};
  c->in[1] = (gs_tensor_desc){GS_DT_UINT8, {1, {(int64_t)pk->capacity}}};
  c->out[0] = (gs_tensor_desc){GS_DT_UINT8, {1, {(int64_t)y_bytes}}};
  c->attrs = &pk->attrs[k];
  pk->call_ptrs[k] = c;
  return c;
}

int gs_image_pack_launch(gs_image_pack *pk, gs_stream_t *s, gs_buffer_t *staged, gs_buffer_t *mid,
                         gs_buffer_t *rows) {
  if (pk->n == 0)
    return GS_OK;
  pass_call(pk, 0, pk->capacity, pk->mid_capacity, pk->h_elements);
  pass_call(pk, 1, pk->mid_capacity, (size_t)pk->batch * pk->out_bytes,
            (int64_t)((size_t)pk->n * pk->out_bytes));
  gs_kernel_args h = {.buffer_count = 3, .buffers = {staged, staged, mid},
                      .params_size = sizeof pk->call_ptrs[0], .params = &pk->call_ptrs[0]};
  gs_kernel_args v = {.buffer_count = 3, .buffers = {mid, staged, rows},
                      .params_size = sizeof pk->call_ptrs[1], .params = &pk->call_ptrs[1]};
  int rc = gs_stream_launch(s, GS_IMAGE_TAPS_OP, &h);
  return rc < 0 ? rc : gs_stream_launch(s, GS_IMAGE_TAPS_OP, &v);
}

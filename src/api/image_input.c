/* image_input.c - images sent to a served model with a recipe
 * (image_input.h). */
#include "api/image_input.h"

#include "base/error.h"
#include "engine/image_pack.h" /* GS_IMAGE_PACK_BUDGET */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gs_image_input_find(const gs_served_model *m, const gs_model *model, bool *nchw, int *h,
                        int *w) {
  /* A model that finishes the recipe itself takes uint8 pixels, h x w x 3. */
  gs_image_layout layout = m->prep_on_device ? GS_LAYOUT_NHWC : m->prep.layout;
  for (int i = 0; i < model->n_inputs; i++) {
    const gs_value_info *in = &model->inputs[i];
    bool first = in->rank == 4 && in->dims[1] == 3 && in->dims[2] > 0 && in->dims[3] > 0;
    bool last = in->rank == 4 && in->dims[3] == 3 && in->dims[1] > 0 && in->dims[2] > 0;
    if (layout == GS_LAYOUT_NCHW ? !first : layout == GS_LAYOUT_NHWC ? !last : !first && !last)
      continue;
    if (m->prep_on_device && in->dtype != GS_DT_UINT8)
      continue;
    *nchw = layout == GS_LAYOUT_NCHW || (layout == GS_LAYOUT_AUTO && first);
    *h = (int)in->dims[*nchw ? 2 : 1];
    *w = (int)in->dims[*nchw ? 3 : 2];
    return i;
  }
  gs_error(GS_EINVAL, "preprocess takes images into an input of [N, 3, H, W] or [N, H, W, 3]%s, "
                     "and the model has none",
           m->prep.layout == GS_LAYOUT_NCHW   ? " (layout=nchw: the first)"
           : m->prep.layout == GS_LAYOUT_NHWC ? " (layout=nhwc: the second)"
                                              : "");
  return -1;
}

bool gs_image_input_form(const gs_served_model *m, const gs_model *model, int idx, gs_dtype given,
                         int rank, const int64_t *dims) {
  bool nchw;
  int h, w;
  if (!m->has_prep || m->max_batch_size <= 0 || gs_image_input_find(m, model, &nchw, &h, &w) != idx)
    return false;
  if (given == GS_DT_BYTES)
    return rank == 1 || (rank == 2 && dims[1] == 1);
  bool pixels = given == GS_DT_UINT8 && rank == 4 && dims[3] == 3 && dims[1] > 0 && dims[2] > 0 &&
                dims[1] <= 65536 && dims[2] <= 65536;
  /* A model that takes pixels itself takes those of its size as its tensor
   * where the recipe would leave them as they are; others go through it,
   * as they do where the CPU finishes the recipe. */
  return pixels && !(m->prep_on_device && dims[1] == h && dims[2] == w &&
                     gs_prep_keeps_size(&m->prep, w, h));
}

/* UINT8 pixels as an "image" the recipe reads: nothing to decode. */
static int prep_pixels(const gs_prep *p, const uint8_t *rgb, int ih, int iw, int h, int w,
                       bool nchw, gs_dtype dtype, void *row) {
  gs_image img = {.width = iw, .height = ih, .w = iw, .h = ih, .stride = (size_t)iw * 3,
                  .rgb = (uint8_t *)rgb};
  return gs_prep_image(p, &img, h, w, nchw, dtype, row);
}

/* An image too large to hold while its request waits (the pack would
 * leave it to the CPU anyway): made its h x w row now, which the device
 * copies as it is. */
static int row_now(const gs_prep *recipe, gs_request_image *e, int h, int w) {
  if (e->img.h * e->img.stride <= GS_IMAGE_PACK_BUDGET)
    return GS_OK;
  gs_prep geometry = *recipe;
  gs_prep_geometry_only(&geometry);
  uint8_t *row = malloc((size_t)h * w * 3);
  if (!row)
    return gs_error(GS_ENOMEM, "out of memory for a %dx%d row", w, h);
  int rc = gs_prep_image(&geometry, &e->img, h, w, false, GS_DT_UINT8, row);
  if (rc < 0) {
    free(row);
    return rc;
  }
  if (e->owned)
    gs_image_free(&e->img);
  *e = (gs_request_image){.img = {.width = w, .height = h, .w = w, .h = h,
                                  .stride = (size_t)w * 3, .rgb = row},
                          .as_is = true, .owned = true};
  return GS_OK;
}

/* Where the device resizes: input idx's images decoded (or, for pixels,
 * seen where they are) and checked against the recipe, for the batcher to
 * pack (infer_request.h's decoded). */
static int decode_images(gs_infer_request *r, int idx, int h, int w, char *why, size_t whylen) {
  const gs_value_info *in = &r->version->model->inputs[idx];
  const gs_shape *given = &r->shapes[idx];
  const gs_prep *recipe = &r->model->prep;
  int64_t n = given->dims[0];
  bool files = r->given[idx] == GS_DT_BYTES;
  gs_request_image *imgs = calloc((size_t)(n > 0 ? n : 1), sizeof *imgs);
  if (!imgs) {
    snprintf(why, whylen, "out of memory for %lld images of input '%s'", (long long)n, in->name);
    return 500;
  }
  size_t pixels = files ? 0 : (size_t)given->dims[1] * given->dims[2] * 3;
  int rc = GS_OK;
  int64_t i = 0;
  for (; rc == 0 && i < n; i++) {
    gs_request_image *e = &imgs[i];
    if (files) {
      const gs_bytes_ref *file = &((const gs_bytes_ref *)r->inputs[idx])[i];
      rc = gs_prep_decode(recipe, file->data, file->len, &e->img);
      e->owned = rc == 0;
    } else {
      int iw = (int)given->dims[2], ih = (int)given->dims[1];
      e->img = (gs_image){.width = iw, .height = ih, .w = iw, .h = ih,
                          .stride = (size_t)iw * 3,
                          .rgb = (uint8_t *)r->inputs[idx] + (size_t)i * pixels};
    }
    gs_prep_geometry g;
    if (rc == 0) {
      gs_prep_geometry_of(recipe, e->img.width, e->img.height, &g);
      rc = gs_prep_check_geometry(&g, e->img.width, e->img.height, h, w);
    }
    if (rc == 0)
      rc = row_now(recipe, e, h, w);
  }
  r->decoded[idx] = imgs; /* freed with the request, also on failure */
  r->n_decoded[idx] = i;
  if (rc < 0) {
    snprintf(why, whylen, "input '%s': image %lld: %s", in->name, (long long)(i - 1),
             gs_error_detail());
    return rc == GS_ENOMEM ? 500 : 400;
  }
  r->given[idx] = in->dtype;
  r->image[idx] = false;
  r->shapes[idx] = (gs_shape){.rank = 4, .dims = {n, h, w, 3}};
  return 0;
}

int gs_image_input_convert(gs_infer_request *r, int idx, char *why, size_t whylen) {
  const gs_served_model *m = r->model;
  const gs_value_info *in = &r->version->model->inputs[idx];
  bool nchw;
  int h, w;
  gs_image_input_find(m, r->version->model, &nchw, &h, &w);
  if (m->resize_on_device)
    return decode_images(r, idx, h, w, why, whylen);
  gs_prep recipe = m->prep;
  if (m->prep_on_device) /* the model does the rest */
    gs_prep_geometry_only(&recipe);
  int64_t n = r->shapes[idx].dims[0];
  size_t row_bytes = (size_t)3 * h * w * gs_dtype_size(in->dtype);
  char *rows = malloc(row_bytes * (size_t)n);
  if (!rows) {
    snprintf(why, whylen, "out of memory for %lld images of input '%s'", (long long)n, in->name);
    return 500;
  }
  const gs_shape *given = &r->shapes[idx];
  size_t pixels = r->given[idx] == GS_DT_UINT8 ? (size_t)given->dims[1] * given->dims[2] * 3 : 0;
  for (int64_t i = 0; i < n; i++) {
    int rc;
    if (r->given[idx] == GS_DT_BYTES) {
      const gs_bytes_ref *file = &((const gs_bytes_ref *)r->inputs[idx])[i];
      rc = gs_prep_encoded(&recipe, file->data, file->len, h, w, nchw, in->dtype,
                           rows + (size_t)i * row_bytes);
    } else {
      rc = prep_pixels(&recipe, (const uint8_t *)r->inputs[idx] + (size_t)i * pixels,
                       (int)given->dims[1], (int)given->dims[2], h, w, nchw, in->dtype,
                       rows + (size_t)i * row_bytes);
    }
    if (rc < 0) {
      snprintf(why, whylen, "input '%s': image %lld: %s", in->name, (long long)i,
               gs_error_detail());
      free(rows);
      return rc == GS_ENOMEM ? 500 : 400;
    }
  }
  free(r->owned[idx]);
  r->owned[idx] = rows;
  r->inputs[idx] = rows;
  r->given[idx] = in->dtype;
  r->image[idx] = false;
  r->shapes[idx] = (gs_shape){.rank = 4, .dims = {n, nchw ? 3 : h, nchw ? h : w, nchw ? w : 3}};
  return 0;
}

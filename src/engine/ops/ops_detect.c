/* ops_detect.c - definitions of the ops detection models use whose output
 * sizes are known while planning: RoiAlign. (NonZero and
 * NonMaxSuppression size their outputs at run time: not supported yet.) */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <string.h>

static int check_roi_align(const gs_node *n) {
  const char *mode = gs_attr_string(n, "mode", "avg");
  if (strcmp(mode, "avg") && strcmp(mode, "max"))
    return gs_error(GS_ENOTSUP, "mode=\"%s\" (expected avg or max)", mode);
  const char *ct = gs_attr_string(n, "coordinate_transformation_mode", "half_pixel");
  if (strcmp(ct, "half_pixel") && strcmp(ct, "output_half_pixel"))
    return gs_error(GS_ENOTSUP, "coordinate_transformation_mode=\"%s\"", ct);
  return GS_OK;
}

/* X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] -> [R, C, oh, ow]. */
static int infer_roi_align(gs_op_call *c, const gs_node *n) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM(c->in[0].dtype));
  if (rc == 0)
    rc = gs_op_want_dtype(c, 2, GS_DTM(GS_DT_INT64) | GS_DTM(GS_DT_INT32));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape, *r = &c->in[1].shape, *b = &c->in[2].shape;
  if (x->rank != 4 || r->rank != 2 || r->dims[1] != 4 || b->rank != 1 || b->dims[0] != r->dims[0])
    return gs_op_fail(c, "X must be [N, C, H, W], rois [R, 4] and batch_indices [R]");
  if (x->dims[2] < 1 || x->dims[3] < 1)
    return gs_op_fail(c, "X has no pixels to sample");
  gs_roi_align_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->max_mode = !strcmp(gs_attr_string(n, "mode", "avg"), "max");
  a->half_pixel = !strcmp(gs_attr_string(n, "coordinate_transformation_mode", "half_pixel"),
                          "half_pixel");
  a->out_h = gs_attr_int(n, "output_height", 1);
  a->out_w = gs_attr_int(n, "output_width", 1);
  a->sampling_ratio = gs_attr_int(n, "sampling_ratio", 0);
  a->spatial_scale = gs_attr_float(n, "spatial_scale", 1.0f);
  if (a->out_h < 1 || a->out_w < 1 || a->out_h > 4096 || a->out_w > 4096 ||
      a->sampling_ratio < 0 || a->sampling_ratio > 1024)
    return gs_op_fail(c, "output_height, output_width and sampling_ratio are out of range");
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = (gs_shape){.rank = 4, .dims = {r->dims[0], x->dims[1], a->out_h, a->out_w}};
  return GS_OK;
}

static const char *const roi_align_attrs[] = {"coordinate_transformation_mode", "mode",
                                              "output_height", "output_width", "sampling_ratio",
                                              "spatial_scale", NULL};

const gs_op_def gs__ops_detect[] = {
    {.name = "RoiAlign", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = roi_align_attrs, .check = check_roi_align, .infer = infer_roi_align},
    {.name = NULL},
};

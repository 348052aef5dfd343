/* ops_detect.c - definitions of the ops detection models use: RoiAlign,
 * and NonZero and NonMaxSuppression, whose output sizes are their results.
 * Those two need their inputs' values to infer: the planner then plans the
 * graph in stages (plan_stages.c), and computes them on the host between
 * the stage before them and the stage after. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <math.h>
#include <stdlib.h>
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

/* NonZero: [rank, count] int64 coordinates of the non-zero elements (a
 * scalar counts as one element of a list, as onnxruntime does). */
static int infer_nonzero(gs_op_call *c, const gs_node *n) {
  (void)n;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_ALL);
  if (rc == 0)
    rc = gs_op_need_values(c, 0);
  if (rc < 0)
    return rc;
  int64_t numel = gs_shape_numel(&c->in[0].shape), count = 0;
  for (int64_t i = 0; i < numel; i++)
    count += gs_elem_as_double(c->in[0].dtype, c->in_data[0], i) != 0; /* NaN counts */
  int rank = c->in[0].shape.rank;
  c->out[0].dtype = GS_DT_INT64;
  c->out[0].shape = (gs_shape){.rank = 2, .dims = {rank > 0 ? rank : 1, count}};
  return GS_OK;
}

/* ---- NonMaxSuppression ---------------------------------------------------------- */

typedef struct scored {
  float score;
  int64_t box;
} scored;

/* Higher scores first; equal scores by box index (onnxruntime's order). */
static int by_score(const void *pa, const void *pb) {
  const scored *a = pa, *b = pb;
  if (a->score != b->score)
    return a->score > b->score ? -1 : 1;
  return (a->box > b->box) - (a->box < b->box);
}

typedef struct corners {
  float y1, x1, y2, x2;
} corners;

static corners box_corners(gs_dtype dt, const void *boxes, int64_t at, bool center) {
  float v[4];
  for (int k = 0; k < 4; k++)
    v[k] = (float)gs_elem_as_double(dt, boxes, at + k);
  if (center) /* [x_center, y_center, width, height] */
    return (corners){v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2, v[0] + v[2] / 2};
  /* Any diagonal pair of corners, [y1, x1, y2, x2]. */
  return (corners){fminf(v[0], v[2]), fminf(v[1], v[3]), fmaxf(v[0], v[2]), fmaxf(v[1], v[3])};
}

/* The boxes a class keeps so far, by coordinate (so that the test of a
 * candidate against all of them compiles to vector code: torchvision's
 * batched NMS keeps tens of thousands in one class). */
#define NMS_BLOCK 16

typedef struct kept_boxes {
  float *y1, *x1, *y2, *x2, *area;
  int64_t n;
} kept_boxes;

static float area_of(const corners *b) { return (b->y2 - b->y1) * (b->x2 - b->x1); }

/* Whether a kept box overlaps b by more than `threshold` intersection over
 * union (onnxruntime's test: no overlap, or an empty box, never suppresses). */
static bool suppressed(const kept_boxes *k, const corners *b, float threshold) {
  float area_b = area_of(b);
  if (!(area_b > 0))
    return false;
  /* Whole blocks, past n too: the arrays are zeroed to a whole block, and
   * a box of area 0 never suppresses. */
  for (int64_t from = 0; from < k->n; from += NMS_BLOCK) {
    int hit = 0;
    for (int64_t j = from; j < from + NMS_BLOCK; j++) {
      float ih = (k->y2[j] < b->y2 ? k->y2[j] : b->y2) - (k->y1[j] > b->y1 ? k->y1[j] : b->y1);
      float iw = (k->x2[j] < b->x2 ? k->x2[j] : b->x2) - (k->x1[j] > b->x1 ? k->x1[j] : b->x1);
      float inter = (ih > 0 ? ih : 0) * (iw > 0 ? iw : 0);
      float uni = k->area[j] + area_b - inter;
      hit |= (inter > 0) & (k->area[j] > 0) & (uni > 0) & (inter / uni > threshold);
    }
    if (hit)
      return true;
  }
  return false;
}

static void keep_box(kept_boxes *k, const corners *b) {
  k->y1[k->n] = b->y1, k->x1[k->n] = b->x1, k->y2[k->n] = b->y2, k->x2[k->n] = b->x2;
  k->area[k->n++] = area_of(b);
}

typedef struct nms_params {
  int64_t batches, classes, boxes, max_per_class;
  float iou, score;
  bool has_score, center;
} nms_params;

/* The optional scalar input i, or `dflt` when omitted. */
static int optional_scalar(gs_op_call *c, int i, double dflt, double *out, bool *given) {
  *out = dflt;
  if (given)
    *given = false;
  if (i >= c->n_in || c->in[i].dtype == GS_DT_INVALID)
    return GS_OK;
  if (given)
    *given = true;
  return gs_op_const_scalar(c, i, out);
}

static int nms_read_params(gs_op_call *c, const gs_node *n, nms_params *p) {
  const gs_shape *b = &c->in[0].shape, *s = &c->in[1].shape;
  int rc = gs_op_want_dtype(c, 0, GS_DTM_FLOATS);
  if (rc == 0)
    rc = gs_op_want_dtype(c, 1, GS_DTM_FLOATS);
  if (rc < 0)
    return rc;
  if (b->rank != 3 || b->dims[2] != 4 || s->rank != 3 || s->dims[0] != b->dims[0] ||
      s->dims[2] != b->dims[1])
    return gs_op_fail(c, "boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]");
  double max_out, iou, score;
  if ((rc = optional_scalar(c, 2, 0, &max_out, NULL)) < 0 ||
      (rc = optional_scalar(c, 3, 0, &iou, NULL)) < 0 ||
      (rc = optional_scalar(c, 4, 0, &score, &p->has_score)) < 0)
    return rc;
  if (!(iou >= 0 && iou <= 1))
    return gs_op_fail(c, "iou_threshold %g is not in [0, 1]", iou);
  if (p->has_score && isnan(score))
    return gs_op_fail(c, "score_threshold is NaN");
  int64_t center = gs_attr_int(n, "center_point_box", 0);
  if (center != 0 && center != 1)
    return gs_op_fail(c, "center_point_box is %lld (expected 0 or 1)", (long long)center);
  p->batches = b->dims[0];
  p->classes = s->dims[1];
  p->boxes = b->dims[1];
  p->max_per_class = max_out > (double)p->boxes ? p->boxes : max_out > 0 ? (int64_t)max_out : 0;
  p->iou = (float)iou;
  p->score = (float)score;
  p->center = center == 1;
  return GS_OK;
}

/* One class of one batch: appends its selection to a->selected. */
static void nms_class(gs_op_call *c, const nms_params *p, int64_t batch, int64_t cls,
                      scored *cand, kept_boxes *kept, gs_nms_attrs *a) {
  const void *scores = c->in_data[1];
  int64_t base = (batch * p->classes + cls) * p->boxes, n = 0;
  for (int64_t i = 0; i < p->boxes; i++) {
    float sc = (float)gs_elem_as_double(c->in[1].dtype, scores, base + i);
    if (!isnan(sc) && (!p->has_score || sc > p->score))
      cand[n++] = (scored){sc, i};
  }
  qsort(cand, (size_t)n, sizeof *cand, by_score);
  memset(kept->area, 0, sizeof(float) * (size_t)kept->n); /* the last class's, now empty */
  kept->n = 0;
  for (int64_t k = 0; k < n && kept->n < p->max_per_class; k++) {
    corners box = box_corners(c->in[0].dtype, c->in_data[0],
                              (batch * p->boxes + cand[k].box) * 4, p->center);
    if (suppressed(kept, &box, p->iou))
      continue;
    keep_box(kept, &box);
    int64_t *row = &a->selected[a->count++ * 3];
    row[0] = batch, row[1] = cls, row[2] = cand[k].box;
  }
}

/* The selection is the output's size: computed here, written by the kernel. */
static int infer_nms(gs_op_call *c, const gs_node *n) {
  nms_params p = {0};
  int rc = nms_read_params(c, n, &p);
  if (rc == 0)
    rc = gs_op_need_values(c, 0);
  if (rc == 0)
    rc = gs_op_need_values(c, 1);
  if (rc < 0)
    return rc;
  int64_t most = p.batches * p.classes * p.max_per_class; /* each bounded by the inputs' sizes */
  gs_nms_attrs *a = gs_op_attrs(c, sizeof *a + sizeof(int64_t) * 3 * (size_t)(most ? most : 1));
  scored *cand = malloc(sizeof *cand * (size_t)(p.boxes ? p.boxes : 1));
  size_t room = ((size_t)p.boxes + NMS_BLOCK) / NMS_BLOCK * NMS_BLOCK;
  float *coords = calloc(5 * room, sizeof(float));
  kept_boxes kept = {coords, coords + room, coords + 2 * room, coords + 3 * room,
                     coords + 4 * room, 0};
  if (!a || !cand || !coords)
    rc = gs_error(GS_ENOMEM, "out of memory for node %s", c->node_name);
  for (int64_t b = 0; rc == 0 && b < p.batches; b++)
    for (int64_t k = 0; k < p.classes; k++)
      nms_class(c, &p, b, k, cand, &kept, a);
  free(cand);
  free(coords);
  if (rc < 0)
    return rc;
  c->out[0].dtype = GS_DT_INT64;
  c->out[0].shape = (gs_shape){.rank = 2, .dims = {a->count, 3}};
  return GS_OK;
}

static const char *const roi_align_attrs[] = {"coordinate_transformation_mode", "mode",
                                              "output_height", "output_width", "sampling_ratio",
                                              "spatial_scale", NULL};

static const char *const nms_attrs[] = {"center_point_box", NULL};

const gs_op_def gs__ops_detect[] = {
    {.name = "RoiAlign", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = roi_align_attrs, .check = check_roi_align, .infer = infer_roi_align},
    {.name = "NonZero", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .infer = infer_nonzero},
    {.name = "NonMaxSuppression", .min_in = 2, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = nms_attrs, .infer = infer_nms},
    {.name = NULL},
};

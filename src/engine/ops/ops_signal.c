/* ops_signal.c - definitions of the signal ops: the window functions
 * HannWindow, HammingWindow and BlackmanWindow, DFT and STFT (computed by
 * FFTW on the CPU), and MelWeightMatrix. */
#include "engine/op.h"
#include "hal/op/op_attrs.h"
#include "engine/ops/ops.h"

#include "base/error.h"

#include <limits.h>
#include <stdbool.h>

static int infer_window(gs_op_call *c, const gs_node *n) {
  int64_t size;
  int rc = gs_op_const_ints(c, 0, &size, 1);
  if (rc < 0)
    return rc;
  if (rc != 1 || size < 0 || size > (1ll << 32))
    return gs_op_fail(c, "size must be one value from 0 to 2^32");
  gs_dtype dt = gs_dtype_from_onnx((int)gs_attr_int(n, "output_datatype", 1));
  if (dt == GS_DT_INVALID || dt == GS_DT_BYTES || dt == GS_DT_BOOL)
    return gs_op_fail(c, "output_datatype %lld is not supported",
                      (long long)gs_attr_int(n, "output_datatype", 1));
  gs_index_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->periodic = gs_attr_int(n, "periodic", 1) != 0;
  c->out[0].dtype = dt;
  c->out[0].shape = (gs_shape){.rank = 1, .dims = {size}};
  return GS_OK;
}

/* A known one-value integer input (a length, a step, an axis). */
static int const_int(gs_op_call *c, int i, const char *what, int64_t *out) {
  int rc = gs_op_const_ints(c, i, out, 1);
  if (rc < 0)
    return rc;
  if (rc != 1)
    return gs_op_fail(c, "%s must be one value", what);
  return GS_OK;
}

static int want_signal(gs_op_call *c) {
  int rc = gs_op_want_dtype(c, 0, GS_DTM(GS_DT_FLOAT32) | GS_DTM(GS_DT_FLOAT64));
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  char buf[160];
  if (x->rank < 2 || (x->dims[x->rank - 1] != 1 && x->dims[x->rank - 1] != 2))
    return gs_op_fail(c, "the input must have rank 2 or more and end in a dimension of 1 (real) "
                         "or 2 (real, imaginary), got %s", gs_shape_str(x, buf, sizeof buf));
  return GS_OK;
}

/* DFT: opset 17 takes the axis as an attribute (default 1), opset 20 as
 * input 2 (default -2); either counts the input's dims, the last (real,
 * imaginary) one excluded from the range. */
static int infer_dft(gs_op_call *c, const gs_node *n) {
  int rc = want_signal(c);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  int64_t axis = gs_attr_int(n, "axis", n->opset >= 20 ? -2 : 1);
  if (gs_op_given(c, 2) && (rc = const_int(c, 2, "axis", &axis)) < 0)
    return rc;
  if (axis < 0)
    axis += x->rank;
  if (axis < 0 || axis > x->rank - 2)
    return gs_op_fail(c, "axis %lld is out of range for an input of rank %d (the last "
                         "dimension holds the complex parts)", (long long)axis, x->rank);
  gs_dft_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  a->in_len = x->dims[axis];
  a->length = a->in_len;
  if (gs_op_given(c, 1) && (rc = const_int(c, 1, "dft_length", &a->length)) < 0)
    return rc;
  if (a->length < 1 || a->length > INT_MAX) /* FFTW's lengths are ints */
    return gs_op_fail(c, "dft_length %lld is out of range (1 to 2^31 - 1)", (long long)a->length);
  a->inverse = gs_attr_int(n, "inverse", 0) != 0;
  bool onesided = gs_attr_int(n, "onesided", 0) != 0;
  a->out_len = onesided ? a->length / 2 + 1 : a->length;
  a->complex_in = x->dims[x->rank - 1] == 2;
  if (onesided && (a->complex_in || a->inverse))
    return gs_op_fail(c, "onesided=1 is for the forward transform of a real signal (a complex "
                         "input's spectrum has no symmetry to drop)");
  a->outer = a->inner = 1;
  for (int d = 0; d < axis; d++)
    a->outer *= x->dims[d];
  for (int d = (int)axis + 1; d < x->rank - 1; d++)
    a->inner *= x->dims[d];
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = *x;
  c->out[0].shape.dims[axis] = a->out_len;
  c->out[0].shape.dims[x->rank - 1] = 2;
  return GS_OK;
}

/* STFT: signal [batch, length, 1 or 2], frame_step, window [W] (optional),
 * frame_length (optional: W, else the signal's length). Frames are
 * 1 + (length - frame_length) / frame_step, as torch counts them. */
static int infer_stft(gs_op_call *c, const gs_node *n) {
  int rc = want_signal(c);
  if (rc < 0)
    return rc;
  const gs_shape *x = &c->in[0].shape;
  if (x->rank != 3)
    return gs_op_fail(c, "the signal must be [batch, length, 1 or 2], got rank %d", x->rank);
  gs_dft_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  if ((rc = const_int(c, 1, "frame_step", &a->step)) < 0)
    return rc;
  a->has_window = gs_op_given(c, 2);
  if (a->has_window) {
    if (c->in[2].shape.rank != 1 || c->in[2].dtype != c->in[0].dtype)
      return gs_op_fail(c, "the window must be 1-D, of the signal's type");
    a->window = c->in[2].shape.dims[0];
  }
  a->length = a->has_window ? a->window : x->dims[1];
  if (gs_op_given(c, 3) && (rc = const_int(c, 3, "frame_length", &a->length)) < 0)
    return rc;
  if (!a->has_window)
    a->window = a->length;
  if (a->window != a->length)
    return gs_op_fail(c, "the window has %lld values and frame_length is %lld: they must be "
                         "the same", (long long)a->window, (long long)a->length);
  if (a->step < 1 || a->length < 1 || a->length > x->dims[1] || a->window < 1)
    return gs_op_fail(c, "frame_step (%lld) and frame_length (%lld) must be at least 1, the "
                         "frame no longer than the signal (%lld)%s", (long long)a->step,
                      (long long)a->length, (long long)x->dims[1],
                      a->window < 1 ? ", and the window not empty" : "");
  if (a->length > INT_MAX) /* FFTW's lengths are ints */
    return gs_op_fail(c, "frame_length %lld is out of range (at most 2^31 - 1)",
                      (long long)a->length);
  a->frames = 1 + (x->dims[1] - a->length) / a->step;
  a->out_len = gs_attr_int(n, "onesided", 1) ? a->length / 2 + 1 : a->length;
  a->complex_in = x->dims[2] == 2;
  a->outer = x->dims[0];
  a->inner = 1;
  a->in_len = x->dims[1];
  c->out[0].dtype = c->in[0].dtype;
  c->out[0].shape = (gs_shape){.rank = 4, .dims = {x->dims[0], a->frames, a->out_len, 2}};
  return GS_OK;
}

/* MelWeightMatrix: num_mel_bins and dft_length fix the shape; the rates
 * and edges are read when it runs. */
static int infer_mel(gs_op_call *c, const gs_node *n) {
  gs_mel_attrs *a = gs_op_attrs(c, sizeof *a);
  if (!a)
    return GS_ENOMEM;
  int rc;
  if ((rc = const_int(c, 0, "num_mel_bins", &a->mel_bins)) < 0 ||
      (rc = const_int(c, 1, "dft_length", &a->dft_length)) < 0)
    return rc;
  if (a->mel_bins < 1 || a->mel_bins > 65536 || a->dft_length < 1 || a->dft_length > (1 << 24))
    return gs_op_fail(c, "num_mel_bins (%lld) must be 1 to 65536 and dft_length (%lld) 1 to "
                         "2^24", (long long)a->mel_bins, (long long)a->dft_length);
  for (int i = 2; i < 5; i++) {
    if ((rc = gs_op_want_dtype(c, i, GS_DTM_NUMERIC)) < 0)
      return rc;
    if (gs_shape_numel(&c->in[i].shape) != 1)
      return gs_op_fail(c, "input %d must be one value", i);
  }
  gs_dtype dt = gs_dtype_from_onnx((int)gs_attr_int(n, "output_datatype", 1));
  if (dt == GS_DT_INVALID || dt == GS_DT_BYTES)
    return gs_op_fail(c, "output_datatype %lld is not supported",
                      (long long)gs_attr_int(n, "output_datatype", 1));
  c->out[0].dtype = dt;
  c->out[0].shape = (gs_shape){.rank = 2, .dims = {a->dft_length / 2 + 1, a->mel_bins}};
  return GS_OK;
}

static const char *const window_attrs[] = {"output_datatype", "periodic", NULL};
static const char *const dft_attrs[] = {"axis", "inverse", "onesided", NULL};
static const char *const stft_attrs[] = {"onesided", NULL};
static const char *const mel_attrs[] = {"output_datatype", NULL};

#define WINDOW(op) \
  {.name = op, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = window_attrs, \
   .infer = infer_window}

const gs_op_def gs__ops_signal[] = {
    WINDOW("HannWindow"),
    WINDOW("HammingWindow"),
    WINDOW("BlackmanWindow"),
    {.name = "DFT", .min_in = 1, .max_in = 3, .min_out = 1, .max_out = 1, .attrs = dft_attrs,
     .infer = infer_dft},
    {.name = "STFT", .min_in = 2, .max_in = 4, .min_out = 1, .max_out = 1, .attrs = stft_attrs,
     .infer = infer_stft},
    {.name = "MelWeightMatrix", .min_in = 5, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = mel_attrs, .infer = infer_mel},
    {.name = NULL},
};

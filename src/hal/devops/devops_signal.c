/* devops_signal.c - DFT and STFT on kernel-compiling devices: a kernel lays
 * the transforms' inputs out in the scratch buffer (cut, zero-padded and
 * windowed as the CPU's k_fft_lines.h does), the backend's FFT library
 * transforms them there, and a kernel writes the bins out. The attributes
 * are ops_signal.c's gs_dft_attrs. */
#include "hal/devops/devops_internal.h"
#include "hal/op/op_attrs.h"

#include "base/error.h"

#include <limits.h>

/* op_kernels.h's dft_geom, field for field (longs as int64_t). */
typedef struct dk_dft {
  int64_t lines, n, out_len, inner, in_len, parts, take, frames, step;
  int32_t stft, has_window, inverse, pad_;
} dk_dft;
_Static_assert(sizeof(dk_dft) == 88, "dk_dft must match op_kernels.h's dft_geom");

bool gs_devops_needs_fft(const gs_devop *op) { return op->run == gs__devops_run_dft; }

/* The transforms the FFT is asked for: the lines rounded up to a power of
 * two, so that a server's changing batch sizes make a few FFT plans, not
 * one per size (a plan is costly to make: VkFFT compiles kernels for it);
 * the extra lines are zeros, transformed and never read. The scratch buffer
 * then holds up to twice the transforms' values. */
static int64_t planned_lines(int64_t lines) {
  int64_t p = 1;
  while (p < lines)
    p *= 2;
  return p;
}

static int64_t lines_of(const gs_dft_attrs *a, bool stft) {
  return stft ? a->outer * a->frames : a->outer * a->inner;
}

/* Sizes the FFT libraries take (int counts, and at most INT_MAX complex
 * values in all: cuFFT's plain plans index them with ints): larger ones run
 * on the CPU. */
bool gs__devops_dft_supports(const gs_devop *op, const gs_op_call *c) {
  gs_dtype dt = c->in[0].dtype;
  const gs_dft_attrs *a = c->attrs;
  if (!a || c->n_out != 1 || (dt != GS_DT_FLOAT32 && dt != GS_DT_FLOAT64) ||
      c->out[0].dtype != dt || a->length > INT_MAX || a->length < 0)
    return false;
  int64_t lines = planned_lines(lines_of(a, op->variant == 1));
  return lines <= INT_MAX && (a->length == 0 || lines <= INT_MAX / a->length);
}

/* variant 0: DFT, 1: STFT. */
int gs__devops_run_dft(const gs_devop *op, const gs_devops_target *t) {
  const gs_op_call *c = t->call;
  const gs_dft_attrs *a = c->attrs;
  bool stft = op->variant == 1;
  dk_dft g = {.n = a->length, .out_len = a->out_len, .inner = a->inner, .in_len = a->in_len,
              .parts = a->complex_in ? 2 : 1, .frames = a->frames, .step = a->step,
              .stft = stft, .has_window = stft && a->has_window, .inverse = a->inverse};
  g.lines = lines_of(a, stft);
  int64_t take = stft ? a->window : a->in_len;
  g.take = take < g.n ? take : g.n;
  if (g.lines == 0 || g.out_len == 0)
    return GS_OK;
  if (!t->fft || !t->scratch)
    return gs_error(GS_ENOTSUP, "%s: this backend has no FFT", op->name);
  bool f64 = c->in[0].dtype == GS_DT_FLOAT64;
  size_t es = f64 ? sizeof(double) : sizeof(float);
  int64_t planned = planned_lines(g.lines);
  uint64_t items = (uint64_t)(planned * g.n);
  int rc = t->scratch(t->ctx, (size_t)items * 2 * es);
  if (rc == 0)
    rc = LAUNCH(t, GS_DK_dft_pack_fp, items, BUF(0, es), BUF(g.has_window ? 2 : 0, es),
                BUF(GS_DK_SCRATCH, es), VAL(g), VAL(items));
  if (rc == 0 && g.n > 1) /* one point is its own transform (and VkFFT refuses the size) */
    rc = t->fft(t->ctx, &(gs_devops_fft){.n = g.n, .batch = planned, .inverse = a->inverse,
                                         .f64 = f64});
  if (rc == 0)
    rc = LAUNCH(t, GS_DK_dft_unpack_fp, (uint64_t)(g.lines * g.out_len), BUF(GS_DK_SCRATCH, es),
                BUF(c->n_in, es), VAL(g));
  return rc;
}

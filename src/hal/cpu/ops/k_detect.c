/* k_detect.c - the CPU kernels of the detection ops (engine/ops/ops_detect.c).
 * RoiAlign: each output bin averages (or takes the largest of) bilinear
 * samples on a regular grid inside it, as onnxruntime and torchvision
 * compute them. NonZero writes coordinates; NonMaxSuppression writes the
 * selection its inference made (its size is the output's). */
#include "hal/cpu/ops/kernels.h"

#include "base/error.h"

/* The four corners' weights and offsets of a sample at (y, x) in an h x w
 * plane; false when it falls outside (it counts as 0). */
static bool bilinear(double y, double x, int64_t h, int64_t w, int64_t off[4], double wt[4]) {
  if (y < -1.0 || y > (double)h || x < -1.0 || x > (double)w)
    return false;
  y = y < 0 ? 0 : y;
  x = x < 0 ? 0 : x;
  int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
  if (y0 >= h - 1) {
    y1 = y0 = h - 1;
    y = (double)y0;
  } else {
    y1 = y0 + 1;
  }
  if (x0 >= w - 1) {
    x1 = x0 = w - 1;
    x = (double)x0;
  } else {
    x1 = x0 + 1;
  }
  double ly = y - (double)y0, lx = x - (double)x0, hy = 1 - ly, hx = 1 - lx;
  off[0] = y0 * w + x0, off[1] = y0 * w + x1, off[2] = y1 * w + x0, off[3] = y1 * w + x1;
  wt[0] = hy * hx, wt[1] = hy * lx, wt[2] = ly * hx, wt[3] = ly * lx;
  return true;
}

static int k_roi_align(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_roi_align_attrs *a = c->attrs;
  gs_dtype dt = c->in[0].dtype;
  const gs_shape *xs = &c->in[0].shape;
  int64_t N = xs->dims[0], C = xs->dims[1], H = xs->dims[2], W = xs->dims[3];
  int64_t R = c->in[1].shape.dims[0];
  double offset = a->half_pixel ? 0.5 : 0.0;
  for (int64_t r = 0; r < R; r++) {
    int64_t b = gs_ldi(c->in[2].dtype, k->ptr[2], r);
    if (b < 0 || b >= N)
      return gs_error(GS_EINVAL, "node %s (RoiAlign): batch index %lld is not in [0, %lld)",
                      c->node_name, (long long)b, (long long)N);
    double x1 = gs_ld(dt, k->ptr[1], r * 4) * a->spatial_scale - offset;
    double y1 = gs_ld(dt, k->ptr[1], r * 4 + 1) * a->spatial_scale - offset;
    double x2 = gs_ld(dt, k->ptr[1], r * 4 + 2) * a->spatial_scale - offset;
    double y2 = gs_ld(dt, k->ptr[1], r * 4 + 3) * a->spatial_scale - offset;
    double rw = x2 - x1, rh = y2 - y1;
    /* A roi is data: a huge or non-finite one would sample without end. */
    if (!isfinite(x1) || !isfinite(y1) || !isfinite(rw) || !isfinite(rh) ||
        fabs(rw) > 64.0 * (double)(W + 1) || fabs(rh) > 64.0 * (double)(H + 1))
      return gs_error(GS_EINVAL, "node %s (RoiAlign): roi %lld (%g, %g, %g, %g) is not finite "
                                 "or far larger than the %lld x %lld feature map",
                      c->node_name, (long long)r, x1, y1, x1 + rw, y1 + rh, (long long)H,
                      (long long)W);
    if (!a->half_pixel) { /* the legacy mode keeps every roi at least one pixel */
      rw = rw > 1 ? rw : 1;
      rh = rh > 1 ? rh : 1;
    }
    double bh = rh / (double)a->out_h, bw = rw / (double)a->out_w;
    int64_t gh = a->sampling_ratio > 0 ? a->sampling_ratio : (int64_t)ceil(rh / (double)a->out_h);
    int64_t gw = a->sampling_ratio > 0 ? a->sampling_ratio : (int64_t)ceil(rw / (double)a->out_w);
    gh = gh > 0 ? gh : 0;
    gw = gw > 0 ? gw : 0;
    double count = (double)(gh * gw > 1 ? gh * gw : 1);
    for (int64_t ch = 0; ch < C; ch++) {
      int64_t plane = (b * C + ch) * H * W;
      for (int64_t ph = 0; ph < a->out_h; ph++)
        for (int64_t pw = 0; pw < a->out_w; pw++) {
          double acc = 0, best = -INFINITY;
          bool any = false;
          for (int64_t iy = 0; iy < gh; iy++)
            for (int64_t ix = 0; ix < gw; ix++) {
              double y = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
              double x = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
              int64_t off[4];
              double wt[4];
              if (!bilinear(y, x, H, W, off, wt)) {
                best = best > 0 ? best : 0; /* an outside sample is 0 */
                any = true;
                continue;
              }
              for (int q = 0; q < 4; q++) {
                double v = wt[q] * gs_ld(dt, k->ptr[0], plane + off[q]);
                acc += v;
                best = v > best ? v : best; /* max mode: the largest weighted corner */
              }
              any = true;
            }
          double out = a->max_mode ? (any ? best : 0) : acc / count;
          gs_st(dt, k->ptr[3], ((r * C + ch) * a->out_h + ph) * a->out_w + pw, out);
        }
    }
  }
  return 0;
}

static int k_nonzero(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_shape *s = &c->in[0].shape;
  int64_t numel = gs_shape_numel(s), count = c->out[0].shape.dims[1], at = 0;
  int64_t *out = k->ptr[1];
  int rank = s->rank;
  int64_t idx[GS_MAX_DIMS] = {0};
  for (int64_t i = 0; i < numel && at < count; i++) {
    if (gs_ld(c->in[0].dtype, k->ptr[0], i) != 0) {
      for (int d = 0; d < rank; d++)
        out[d * count + at] = idx[d];
      if (rank == 0)
        out[at] = 0;
      at++;
    }
    for (int d = rank - 1; d >= 0 && ++idx[d] == s->dims[d]; d--)
      idx[d] = 0;
  }
  return 0;
}

static int k_nms(const gs_cpu_kernel_call *k) {
  const gs_op_call *c = gs_kcall(k);
  const gs_nms_attrs *a = c->attrs;
  if (a->count != c->out[0].shape.dims[0])
    return gs_error(GS_EINVAL, "node %s (NonMaxSuppression): planned for %lld boxes, selected %lld",
                    c->node_name, (long long)c->out[0].shape.dims[0], (long long)a->count);
  memcpy(k->ptr[c->n_in], a->selected, sizeof(int64_t) * 3 * (size_t)a->count);
  return 0;
}

static const gs_cpu_kernel_entry kernels[] = {GS_CPU_KERNEL("RoiAlign", k_roi_align),
                                              GS_CPU_KERNEL("NonZero", k_nonzero),
                                              GS_CPU_KERNEL("NonMaxSuppression", k_nms)};

int gs__cpu_register_detect(gs_backend_t *be) {
  return gs__cpu_register_table(be, kernels, sizeof kernels / sizeof kernels[0]);
}

/* nn_geom.h - the window arithmetic that the CPU's convolutions and pools
 * share, in float32 (k_nn.c) and float64 (k_nn_f64.c): spatial geometry
 * padded to three dims, and which taps of a window fall inside the input. */
#ifndef GS_HAL_CPU_OPS_NN_GEOM_H
#define GS_HAL_CPU_OPS_NN_GEOM_H

#include <stdbool.h>
#include <stdint.h>

/* Spatial geometry padded to three dims (depth, height, width). */
typedef struct geom {
  int64_t in[3], out[3], k[3], s[3], d[3], p[3];
  int64_t in_size, out_size, k_size;
} geom;

static inline void make_geom(geom *g, int spatial, const int64_t *in_dims,
                             const int64_t *out_dims, const int64_t *kernel,
                             const int64_t *stride, const int64_t *dilation,
                             const int64_t *pad_begin) {
  int off = 3 - spatial;
  for (int i = 0; i < 3; i++) {
    bool real = i >= off;
    g->in[i] = real ? in_dims[i - off] : 1;
    g->out[i] = real ? out_dims[i - off] : 1;
    g->k[i] = real ? kernel[i - off] : 1;
    g->s[i] = real ? stride[i - off] : 1;
    g->d[i] = real ? dilation[i - off] : 1;
    g->p[i] = real ? pad_begin[i - off] : 0;
  }
  g->in_size = g->in[0] * g->in[1] * g->in[2];
  g->out_size = g->out[0] * g->out[1] * g->out[2];
  g->k_size = g->k[0] * g->k[1] * g->k[2];
}

/* The outputs o in [lo, hi) whose input position o*stride + shift lies in
 * [0, in): the rest read padding. */
static inline void valid_range(int64_t out, int64_t stride, int64_t shift, int64_t in,
                               int64_t *lo, int64_t *hi) {
  int64_t l = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
  int64_t h = in - shift <= 0 ? 0 : (in - shift + stride - 1) / stride;
  *lo = l < out ? l : out;
  *hi = h < out ? h : out;
  if (*hi < *lo)
    *hi = *lo;
}

/* Window taps [lo, hi) of output position o along one dim that fall inside
 * the input (taps step by the dilation), and how many fall inside the
 * padded input (for count_include_pad). */
static inline void window(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t dil,
                          int64_t in, int64_t pad_end, int64_t *lo, int64_t *hi,
                          int64_t *padded) {
  int64_t start = o * stride - pad;
  int64_t l = start >= 0 ? 0 : (-start + dil - 1) / dil;
  int64_t h = in - start <= 0 ? 0 : (in - start + dil - 1) / dil;
  int64_t hp = in + pad_end - start <= 0 ? 0 : (in + pad_end - start + dil - 1) / dil;
  *lo = l < k ? l : k;
  *hi = h < k ? h : k;
  if (*hi < *lo)
    *hi = *lo;
  *padded = hp < k ? hp : k;
}

#endif

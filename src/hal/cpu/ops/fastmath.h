/* fastmath.h - exp, erf, tanh and sigmoid for float32 written so that the
 * compiler vectorises the loops that call them (libm's scalar calls stop
 * it). Relative error of exp about 2e-7; erf: a Taylor series below 0.5,
 * Abramowitz and Stegun 7.1.26 with the exp below above it (absolute error
 * under 2e-7). docs/precision.md has each one's error in ULPs. */
#ifndef GS_ENGINE_CPU_FASTMATH_H
#define GS_ENGINE_CPU_FASTMATH_H

#include <stdint.h>
#include <string.h>

static inline float gs_fast_expf(float arg) {
  /* exp(x) = 2^n * exp(r), x = n ln2 + r, |r| <= ln2/2; the clamps keep
   * 2^n a normal float. */
  float x = arg < -87.0f ? -87.0f : arg > 88.0f ? 88.0f : arg;
  /* Round to nearest by adding and removing 1.5 * 2^23: plain SSE2, unlike
   * roundf, so that the loop still vectorises on the baseline target. */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;   /* ln2, split so that n*hi is exact */
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* NaN passes the clamp and stays in p; its exponent must still convert. */
  int32_t bits = ((int32_t)(n == n ? n : 0.0f) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, 4);
  /* Below -87, exp is under 1.7e-38: 0, so that a masked score (-inf,
   * -1e9) weighs nothing in a softmax, as in exact arithmetic; a clamped
   * 1.6e-38 there, scaled by 1/sum, made subnormals that slowed the
   * product after it six hundred times. */
  return arg < -87.0f ? 0.0f : p * scale;
}

static inline float gs_fast_erff(float x) {
  float a = __builtin_fabsf(x);
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
               t * (-1.453152027f + t * 1.061405429f))));
  float y = 1.0f - poly * gs_fast_expf(-a * a);
  /* Below 0.5 the formula's absolute error is a large relative one (near 0
   * it is all error): there, erf's Taylor series to x^13, whose first
   * term left out is under 1e-9 of the value. Both are computed and one
   * chosen, so that the loop stays vectorised. */
  float s = a * a;
  float small = a * (1.128379167f + s * (-0.3761263890f + s * (0.1128379167f +
                s * (-0.02686617064f + s * (0.005223977625f + s * (-0.0008548327023f +
                s * 0.0001205533298f))))));
  return __builtin_copysignf(a < 0.5f ? small : y, x);
}

static inline float gs_fast_tanhf(float x) {
  /* tanh(x) = 1 - 2 / (exp(2x) + 1); the clamp keeps exp finite. */
  float c = x < -9.0f ? -9.0f : x > 9.0f ? 9.0f : x;
  return 1.0f - 2.0f / (gs_fast_expf(2.0f * c) + 1.0f);
}

static inline float gs_fast_sigmoidf(float x) { return 1.0f / (1.0f + gs_fast_expf(-x)); }

#endif

/* parallel.h - spreading a kernel's loop over the threads its stream was
 * given (gs_stream_set_threads): the calling thread's OpenMP team, the
 * one oneDNN's GEMM and convolutions use too, so that a stream never runs
 * more threads than it was given. */
#ifndef GS_HAL_CPU_OPS_PARALLEL_H
#define GS_HAL_CPU_OPS_PARALLEL_H

#include <omp.h>
#include <stdint.h>

/* Elements of simple elementwise work below which a second thread costs
 * more than it saves (waking a team takes a few microseconds). */
#define GS_PARALLEL_GRAIN 16384

/* Arithmetic below which a GEMM or a convolution runs on one thread: a
 * team's barrier costs microseconds, and far more where the team's
 * threads wait for cores (a busy server), while 1 MFLOP takes some 10 us
 * on one core. At 4 MFLOP, MobileNetV3 and EfficientNet-B0 at batch 1 ran
 * 14% and 8% slower on two threads (bench/RESULTS.md, issue 27's scaling):
 * most of their convolutions are smaller than that. */
#define GS_PARALLEL_MIN_FLOPS 1e6

/* Makes the calling thread's team one thread for work of `flops` below
 * GS_PARALLEL_MIN_FLOPS; returns what gs_parallel_restore() needs. */
static inline int gs_parallel_small(double flops) {
  int threads = omp_get_max_threads();
  if (flops >= GS_PARALLEL_MIN_FLOPS || threads == 1)
    return 0;
  omp_set_num_threads(1);
  return threads;
}

static inline void gs_parallel_restore(int saved) {
  if (saved)
    omp_set_num_threads(saved);
}

/* Pieces to cut n units of work into, each of at least `grain` units: one
 * per thread of the team at most, 1 when the work is small. */
static inline int64_t gs_parallel_pieces(int64_t n, int64_t grain) {
  int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t pieces = grain > 0 ? n / grain : n;
  return pieces < 1 ? 1 : pieces > threads ? threads : pieces;
}

/* Piece p of n units cut into `pieces` near-equal ranges: [*lo, *hi). */
static inline void gs_parallel_range(int64_t n, int64_t pieces, int64_t p, int64_t *lo,
                                     int64_t *hi) {
  int64_t q = n / pieces, r = n % pieces;
  *lo = p * q + (p < r ? p : r);
  *hi = *lo + q + (p < r);
}

/* Runs BODY for [LO, HI) ranges that cover [0, n) once, in parallel when
 * there is enough work. BODY must not return or jump out; it sees LO and
 * HI as int64_t. Keep the vectorised loops in a function of their own
 * (GS_VECTOR_CLONES), called from BODY: OpenMP's outlined copy of the
 * loop is compiled for the baseline instruction set only. One piece runs
 * without entering OpenMP at all: a parallel region whose if() is false
 * still allocates a team, which cost a served request of a small model
 * more than its kernels did. */
#define GS_PARALLEL_RANGES(n, grain, LO, HI, BODY)                            \
  do {                                                                        \
    int64_t gs_n_ = (n);                                                      \
    int64_t gs_pieces_ = gs_parallel_pieces(gs_n_, (grain));                  \
    if (gs_pieces_ == 1) {                                                    \
      int64_t LO = 0, HI = gs_n_;                                             \
      BODY;                                                                   \
    } else {                                                                  \
      _Pragma("omp parallel for schedule(static)")                            \
      for (int64_t gs_p_ = 0; gs_p_ < gs_pieces_; gs_p_++) {                  \
        int64_t LO, HI;                                                       \
        gs_parallel_range(gs_n_, gs_pieces_, gs_p_, &LO, &HI);                \
        BODY;                                                                 \
      }                                                                       \
    }                                                                         \
  } while (0)

#endif

/* k_fft_lines.h - the DFT and STFT loops of k_signal.c for one precision.
 * k_signal.c includes it twice: with REAL float, FFTW(name) fftwf_##name
 * and SUFFIX _f32, then with double, fftw_##name and _f64. */

#define FN_(name, suffix) name##suffix
#define FN2_(name, suffix) FN_(name, suffix)
#define FN(name) FN2_(name, SUFFIX)

/* A plan for transforms of `length` points, run later on other buffers of
 * the same alignment (FFTW's new-array interface). FFTW_ESTIMATE: planning
 * takes microseconds, where FFTW_MEASURE would time candidates for seconds
 * at every new shape. FFTW's planner is not thread-safe: fft_lock. */
static FFTW(plan) FN(make_plan)(int64_t length, int sign) {
  FFTW(complex) *a = FFTW(alloc_complex)((size_t)length), *b = FFTW(alloc_complex)((size_t)length);
  FFTW(plan) plan = NULL;
  pthread_mutex_lock(&fft_lock);
  if (a && b)
    plan = FFTW(plan_dft_1d)((int)length, a, b, sign, FFTW_ESTIMATE);
  pthread_mutex_unlock(&fft_lock);
  FFTW(free)(a);
  FFTW(free)(b);
  return plan;
}

/* The same for the forward transform of real input: n reals to n / 2 + 1
 * bins (half the work of a complex transform; the other bins are their
 * mirrors' conjugates). */
static FFTW(plan) FN(make_plan_real)(int64_t length) {
  REAL *a = FFTW(alloc_real)((size_t)length);
  FFTW(complex) *b = FFTW(alloc_complex)((size_t)length / 2 + 1);
  FFTW(plan) plan = NULL;
  pthread_mutex_lock(&fft_lock);
  if (a && b)
    plan = FFTW(plan_dft_r2c_1d)((int)length, a, b, FFTW_ESTIMATE);
  pthread_mutex_unlock(&fft_lock);
  FFTW(free)(a);
  FFTW(free)(b);
  return plan;
}

/* Whether the op's transforms take the real path (make_plan_real). */
static bool FN(real_path)(const gs_dft_attrs *a) { return !a->complex_in && !a->inverse; }

/* Transforms [lo, hi) of the op: DFT lines (outer x inner) or STFT frames
 * (batch x frames), each copied into `in` (zero-padded or cut to the
 * length), transformed, and written out. -1 when out of memory. */
static int FN(transform_range)(const gs_dft_attrs *a, bool stft, FFTW(plan) plan,
                               const REAL *x, const REAL *window, REAL *y, int64_t lo,
                               int64_t hi) {
  int64_t n = a->length, parts = a->complex_in ? 2 : 1;
  FFTW(complex) *in = FFTW(alloc_complex)((size_t)n), *out = FFTW(alloc_complex)((size_t)n);
  if (!in || !out) {
    FFTW(free)(in);
    FFTW(free)(out);
    return -1;
  }
  REAL scale = a->inverse ? (REAL)1 / (REAL)n : (REAL)1;
  for (int64_t t = lo; t < hi; t++) {
    const REAL *xs;
    REAL *ys;
    int64_t take, stride = a->inner * parts, out_stride = a->inner * 2;
    if (stft) { /* batch b, frame f */
      int64_t b = t / a->frames, start = (t % a->frames) * a->step;
      xs = x + (b * a->in_len + start) * parts;
      take = a->window < n ? a->window : n;
      if (take > a->in_len - start)
        take = a->in_len - start; /* the window runs past the signal: zeros */
      ys = y + t * a->out_len * 2;
    } else { /* outer o, inner j */
      int64_t o = t / a->inner, j = t % a->inner;
      xs = x + (o * a->in_len * a->inner + j) * parts;
      take = a->in_len < n ? a->in_len : n;
      ys = y + (o * a->out_len * a->inner + j) * 2;
    }
    if (FN(real_path)(a)) { /* reals in `in`'s first n / 2 + 1 slots, bins to out */
      REAL *r = (REAL *)in;
      for (int64_t i = 0; i < take; i++)
        r[i] = xs[i * stride] * (window ? window[i] : (REAL)1);
      for (int64_t i = take; i < n; i++)
        r[i] = 0;
      FFTW(execute_dft_r2c)(plan, r, out);
      for (int64_t k = 0; k < a->out_len; k++) {
        bool mirrored = k > n / 2; /* X[k] = conj(X[n - k]) */
        const REAL *bin = out[mirrored ? n - k : k];
        ys[k * out_stride] = bin[0];
        ys[k * out_stride + 1] = mirrored ? -bin[1] : bin[1];
      }
      continue;
    }
    for (int64_t i = 0; i < take; i++) {
      const REAL *v = xs + i * stride;
      REAL w = window ? window[i] : (REAL)1;
      in[i][0] = v[0] * w;
      in[i][1] = parts == 2 ? v[1] * w : (REAL)0;
    }
    for (int64_t i = take; i < n; i++)
      in[i][0] = in[i][1] = 0;
    FFTW(execute_dft)(plan, in, out);
    for (int64_t k = 0; k < a->out_len; k++) {
      ys[k * out_stride] = out[k][0] * scale;
      ys[k * out_stride + 1] = out[k][1] * scale;
    }
  }
  FFTW(free)(in);
  FFTW(free)(out);
  return 0;
}

/* The op over the stream's threads, one plan shared by them. */
static int FN(run_transform)(const gs_op_call *c, void *const *ptr, bool stft) {
  const gs_dft_attrs *a = c->attrs;
  int64_t count = stft ? a->outer * a->frames : a->outer * a->inner;
  if (count == 0)
    return 0;
  FFTW(plan) plan = FN(real_path)(a) ? FN(make_plan_real)(a->length)
                                      : FN(make_plan)(a->length, a->inverse ? FFTW_BACKWARD
                                                                            : FFTW_FORWARD);
  if (!plan)
    return gs_error(GS_ENOMEM, "out of memory planning the FFT of node %s", c->node_name);
  const REAL *x = ptr[0], *window = stft && a->has_window ? ptr[2] : NULL;
  REAL *y = ptr[c->n_in];
  /* Some 5 n log2 n flops a transform: a second thread pays from ~GRAIN of them. */
  int64_t grain = GS_PARALLEL_GRAIN / (a->length * 8 + 1) + 1;
  atomic_int failed = 0;
  GS_PARALLEL_RANGES(count, grain, lo, hi,
                     if (FN(transform_range)(a, stft, plan, x, window, y, lo, hi) < 0)
                       failed = 1);
  pthread_mutex_lock(&fft_lock);
  FFTW(destroy_plan)(plan);
  pthread_mutex_unlock(&fft_lock);
  return failed ? gs_error(GS_ENOMEM, "out of memory in node %s", c->node_name) : 0;
}

#undef FN
#undef FN2_
#undef FN_

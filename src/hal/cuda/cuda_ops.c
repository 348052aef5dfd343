/* cuda_ops.c - the engine's ops on CUDA: devops.c's ops (their kernels are
 * hal/devops/op_kernels.h, compiled into the plugin's two fatbins, float32
 * and float64) queued through this plugin's gs_devops_target, whose GEMM
 * (MatMul, Gemm, Conv; float32, float16 and float64) is cuBLAS's and FFT
 * (DFT, STFT) cuFFT's where they loaded. Each kernel says which launches it runs
 * (kernel_supports); the plan runs the others on the CPU.
 * A launch receives its node's gs_op_call, as the CPU's kernels do. */
#include "hal/cuda/cuda_internal.h"

#include <limits.h>

/* ---- the launch target --------------------------------------------------------------------- */

typedef struct launch {
  const cu_kernel *k;
  cu_stream *s;
  const gs_kernel_args *a;
} launch;

/* An operand's device address, checked against its element size. */
static int operand_ptr(const launch *l, int i, size_t size, CUdeviceptr *out) {
  if (i < 0 || i >= l->a->buffer_count || !l->a->buffers[i])
    return gs_error(GS_EINVAL, "%s: operand %d is missing", l->k->name, i);
  int rc = gs__cu_device_ptr(l->a->buffers[i], l->a->offsets[i], out);
  if (rc == 0 && *out % size)
    rc = gs_error(GS_EINVAL, "%s: operand %d is not aligned to its %zu-byte elements",
                  l->k->name, i, size);
  return rc;
}

/* An operand is passed as its address, with the offset folded in, and an
 * offset of 0: the kernels' (buffer, offset) pairs are OpenCL's shape. */
static int target_launch(void *ctx, gs_devk kernel, uint64_t n, int nargs, const gs_dk_arg *args) {
  const launch *l = ctx;
  enum { MAX_ARGS = 32 };
  CUdeviceptr ptrs[MAX_ARGS];
  static const uint64_t zero = 0;
  void *params[2 * MAX_ARGS];
  if (nargs > MAX_ARGS)
    return gs_error(GS_EINVAL, "%s: %d kernel arguments", l->k->name, nargs);
  uint64_t tags[MAX_ARGS];
  int at = 0;
  for (int i = 0; i < nargs; i++) {
    if (args[i].operand == GS_DK_STATUS) { /* the status buffer, and a tag naming the node */
      cu_stream *s = l->s;
      const gs_op_call *c = gs_launch_call(l->a->params, l->a->params_size);
      pthread_mutex_lock(&s->lock);
      tags[i] = gs_devops_tag(&s->tags, c);
      pthread_mutex_unlock(&s->lock);
      ptrs[i] = s->status;
      params[at++] = &ptrs[i];
      params[at++] = &tags[i];
      continue;
    }
    if (args[i].operand == GS_DK_SCRATCH) {
      if (!l->s->scratch)
        return gs_error(GS_EINTERNAL, "%s: no scratch buffer", l->k->name);
      ptrs[i] = l->s->scratch;
      params[at++] = &ptrs[i];
      params[at++] = (void *)&zero;
      continue;
    }
    if (args[i].operand < 0) {
      params[at++] = (void *)args[i].value;
      continue;
    }
    int rc = operand_ptr(l, args[i].operand, args[i].size, &ptrs[i]);
    if (rc < 0)
      return rc;
    params[at++] = &ptrs[i];
    params[at++] = (void *)&zero;
  }
  const gs_op_call *call = gs_launch_call(l->a->params, l->a->params_size);
  bool f64 = call && gs_devops_needs_f64(l->k->dop, call); /* from the float64 module */
  return gs__cu_launch_1d(l->s, f64 ? l->s->d->ops64[kernel] : l->s->d->ops[kernel], n, params);
}

static int target_copy(void *ctx, int src, size_t src_off, int dst, size_t dst_off, size_t bytes) {
  const launch *l = ctx;
  CUdeviceptr x = 0, y = 0;
  int rc = operand_ptr(l, src, 1, &x);
  if (rc == 0)
    rc = operand_ptr(l, dst, 1, &y);
  if (rc < 0)
    return rc;
  x += src_off;
  y += dst_off;
  if (bytes == 0 || x == y)
    return GS_OK;
  CUresult r = gs__cu.cuMemcpyDtoDAsync(y, x, bytes, l->s->s);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, l->k->name);
}

static int target_gemm(void *ctx, const gs_devops_gemm *g);
static int target_fft(void *ctx, const gs_devops_fft *f);
static int target_scratch(void *ctx, size_t bytes);

static gs_devops_target target_of(const launch *l, const gs_op_call *c) {
  return (gs_devops_target){.ctx = (void *)l, .call = c, .launch = target_launch,
                            .copy = target_copy, .gemm = gs__have_cublas ? target_gemm : NULL,
                            .fft = gs__have_cufft ? target_fft : NULL,
                            .scratch = target_scratch, .row_groups = true};
}

/* ---- devops.c's ops ----------------------------------------------------------------------- */

bool gs__cuda_every_device_fp64 = true;

static bool devop_supports(const cu_kernel *k, const void *params, size_t size) {
  const gs_op_call *c = gs_launch_call(params, size);
  return c && (gs__cuda_every_device_fp64 || !gs_devops_needs_f64(k->dop, c)) &&
         k->dop->supports(k->dop, c);
}

static int devop_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !devop_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "%s on CUDA: not for these types or shapes", k->name);
  launch l = {k, s, a};
  gs_devops_target t = target_of(&l, c);
  pthread_mutex_lock(&s->ops_lock);
  int rc = k->dop->run(k->dop, &t);
  pthread_mutex_unlock(&s->ops_lock);
  return rc;
}

/* ---- GEMM through cuBLAS, and the scratch buffer --------------------------------------------------- */

static int blas_fail(cublasStatus_t st, const char *what) {
  return gs_error(st == CUBLAS_STATUS_ALLOC_FAILED ? GS_ENOMEM : GS_EDEVICE,
                  "%s: cuBLAS status %d", what, (int)st);
}

/* The stream's cuBLAS handle, made on first use and bound to the stream. */
static int blas_handle(cu_stream *s) {
  pthread_mutex_lock(&s->lock); /* one handle per stream, bound to it or none */
  cublasStatus_t made = CUBLAS_STATUS_SUCCESS;
  const char *what = "cublasCreate";
  if (!s->blas) {
    made = gs__cublas.cublasCreate(&s->blas);
    /* Without atomics (cuBLAS's default, set here in case a library changes
     * it), cuBLAS gives the same bits on every run on one GPU model, as a
     * deterministic model needs. */
    if (made == CUBLAS_STATUS_SUCCESS &&
        ((made = gs__cublas.cublasSetStream(s->blas, (cudaStream_t)s->s)) !=
             CUBLAS_STATUS_SUCCESS ||
         (made = gs__cublas.cublasSetAtomicsMode(s->blas, CUBLAS_ATOMICS_NOT_ALLOWED)) !=
             CUBLAS_STATUS_SUCCESS)) {
      what = "cublasSetStream or cublasSetAtomicsMode";
      gs__cublas.cublasDestroy(s->blas);
    }
    if (made != CUBLAS_STATUS_SUCCESS)
      s->blas = NULL;
  }
  pthread_mutex_unlock(&s->lock);
  return made == CUBLAS_STATUS_SUCCESS ? GS_OK : blas_fail(made, what);
}

/* An operand, or the stream's scratch buffer, as a device address. */
static int gemm_operand(const launch *l, int i, size_t es, CUdeviceptr *out) {
  if (i != GS_DK_SCRATCH)
    return operand_ptr(l, i, es, out);
  if (!l->s->scratch)
    return gs_error(GS_EINTERNAL, "%s: no scratch buffer", l->k->name);
  *out = l->s->scratch;
  return GS_OK;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
 * gets B first, each operand's stored layout read as its transpose. */
static int target_gemm(void *ctx, const gs_devops_gemm *g) {
  const launch *l = ctx;
  if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->batch > INT32_MAX ||
      g->lda > INT32_MAX || g->ldb > INT32_MAX || g->ldc > INT32_MAX)
    return gs_error(GS_ENOTSUP, "%s: a GEMM dimension over 2^31 for cuBLAS", l->k->name);
  size_t es = g->half ? 2 : g->f64 ? sizeof(double) : sizeof(float);
  CUdeviceptr A = 0, B = 0, C = 0;
  int rc = gemm_operand(l, g->a, es, &A);
  if (rc == 0)
    rc = gemm_operand(l, g->b, es, &B);
  if (rc == 0)
    rc = gemm_operand(l, g->c, es, &C);
  if (rc == 0)
    rc = blas_handle(l->s);
  if (rc < 0)
    return rc;
  float alpha = g->alpha, beta = g->beta;
  cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st;
  if (g->half || g->f64) { /* float16 with float32 accumulation (tensor cores), or float64 */
    cudaDataType_t type = g->f64 ? CUDA_R_64F : CUDA_R_16F;
    cublasComputeType_t compute = g->f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    double alpha64 = g->alpha, beta64 = g->beta; /* the scalars are of the compute type */
    const void *pa = g->f64 ? (const void *)&alpha64 : &alpha;
    const void *pb = g->f64 ? (const void *)&beta64 : &beta;
    const void *a = (const char *)(uintptr_t)A + (size_t)g->a_off * es;
    const void *b = (const char *)(uintptr_t)B + (size_t)g->b_off * es;
    void *c = (char *)(uintptr_t)C + (size_t)g->c_off * es;
    st = g->batch == 1
             ? gs__cublas.cublasGemmEx(l->s->blas, tb, ta, (int)g->n, (int)g->m, (int)g->k, pa, b,
                                       type, (int)g->ldb, a, type, (int)g->lda, pb, c, type,
                                       (int)g->ldc, compute, CUBLAS_GEMM_DEFAULT)
             : gs__cublas.cublasGemmStridedBatchedEx(
                   l->s->blas, tb, ta, (int)g->n, (int)g->m, (int)g->k, pa, b, type, (int)g->ldb,
                   g->stride_b, a, type, (int)g->lda, g->stride_a, pb, c, type, (int)g->ldc,
                   g->stride_c, (int)g->batch, compute, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? GS_OK : blas_fail(st, "cublasGemmEx");
  }
  const float *a = (const float *)(uintptr_t)A + g->a_off;
  const float *b = (const float *)(uintptr_t)B + g->b_off;
  float *c = (float *)(uintptr_t)C + g->c_off;
  st = g->batch == 1
           ? gs__cublas.cublasSgemm(l->s->blas, tb, ta, (int)g->n, (int)g->m, (int)g->k, &alpha, b,
                                    (int)g->ldb, a, (int)g->lda, &beta, c, (int)g->ldc)
           : gs__cublas.cublasSgemmStridedBatched(
                 l->s->blas, tb, ta, (int)g->n, (int)g->m, (int)g->k, &alpha, b, (int)g->ldb,
                 g->stride_b, a, (int)g->lda, g->stride_a, &beta, c, (int)g->ldc, g->stride_c,
                 (int)g->batch);
  return st == CUBLAS_STATUS_SUCCESS ? GS_OK : blas_fail(st, "cublasSgemm");
}

/* ---- FFT through cuFFT ------------------------------------------------------------------------------ */

static int fft_fail(cufftResult r, const char *what, const gs_devops_fft *f) {
  return gs_error(r == CUFFT_ALLOC_FAILED ? GS_ENOMEM : GS_EDEVICE,
                  "%s for %lld transforms of %lld points: cuFFT status %d", what,
                  (long long)f->batch, (long long)f->n, (int)r);
}

/* The stream's plan for f's size, made (replacing the least recently used)
 * where it has none; bound to the stream. */
static int fft_plan(cu_stream *s, const gs_devops_fft *f, cufftHandle *out) {
  cu_fft_plan *p = &s->fft[0];
  for (int i = 0; i < GS_CUDA_FFT_PLANS; i++) {
    cu_fft_plan *q = &s->fft[i];
    if (q->made && q->n == f->n && q->batch == f->batch && q->f64 == f->f64) {
      q->used = ++s->fft_clock;
      *out = q->handle;
      return GS_OK;
    }
    if (!q->made || q->used < p->used)
      p = q;
  }
  if (p->made) {
    /* Queued transforms may still use the plan's work area, and cuFFT does
     * not say that destroying a plan waits for them. */
    CUresult cr = gs__cu.cuStreamSynchronize(s->s);
    if (cr != CUDA_SUCCESS)
      return gs__cu_fail(cr, "cuStreamSynchronize");
    gs__cufft.cufftDestroy(p->handle);
  }
  *p = (cu_fft_plan){.n = f->n, .batch = f->batch, .f64 = f->f64};
  int n = (int)f->n; /* devops_signal.c's supports keeps counts to ints */
  cufftResult r = gs__cufft.cufftPlanMany(&p->handle, 1, &n, NULL, 1, n, NULL, 1, n,
                                          f->f64 ? CUFFT_Z2Z : CUFFT_C2C, (int)f->batch);
  if (r != CUFFT_SUCCESS)
    return fft_fail(r, "cufftPlanMany", f);
  if ((r = gs__cufft.cufftSetStream(p->handle, (cudaStream_t)s->s)) != CUFFT_SUCCESS) {
    gs__cufft.cufftDestroy(p->handle);
    return fft_fail(r, "cufftSetStream", f);
  }
  p->made = true;
  p->used = ++s->fft_clock;
  *out = p->handle;
  return GS_OK;
}

static int target_fft(void *ctx, const gs_devops_fft *f) {
  const launch *l = ctx;
  if (!l->s->scratch)
    return gs_error(GS_EINTERNAL, "%s: no scratch buffer", l->k->name);
  if (f->batch > INT_MAX || f->n > INT_MAX)
    return gs_error(GS_ENOTSUP, "%s: %lld transforms of %lld points (cuFFT takes ints)",
                    l->k->name, (long long)f->batch, (long long)f->n);
  /* Under the stream's ops_lock (devop_launch), which may be held while a
   * replaced plan waits for the stream; not under its lock. */
  cufftHandle h = 0;
  int rc = fft_plan(l->s, f, &h);
  if (rc == 0) {
    int dir = f->inverse ? CUFFT_INVERSE : CUFFT_FORWARD;
    void *data = (void *)(uintptr_t)l->s->scratch;
    cufftResult r = f->f64 ? gs__cufft.cufftExecZ2Z(h, data, data, dir)
                           : gs__cufft.cufftExecC2C(h, data, data, dir);
    if (r != CUFFT_SUCCESS)
      rc = fft_fail(r, "cufftExec", f);
  }
  return rc;
}

/* Grows the stream's scratch buffer; the one it replaces may still be read
 * by queued kernels, so the stream is drained first (rare: a larger need). */
static int target_scratch(void *ctx, size_t bytes) {
  const launch *l = ctx;
  cu_stream *s = l->s;
  if (bytes <= s->scratch_bytes)
    return GS_OK;
  CUresult r = CUDA_SUCCESS;
  if (s->scratch) {
    r = gs__cu.cuStreamSynchronize(s->s);
    if (r != CUDA_SUCCESS) /* the old one may still be in use: keep it */
      return gs__cu_fail(r, "cuStreamSynchronize");
    gs__cu.cuMemFree(s->scratch);
    s->scratch = 0;
    s->scratch_bytes = 0;
  }
  if (r == CUDA_SUCCESS)
    r = gs__cu.cuMemAlloc(&s->scratch, bytes);
  if (r != CUDA_SUCCESS) {
    s->scratch = 0;
    return gs__cu_fail(r, "cuMemAlloc(scratch)");
  }
  s->scratch_bytes = bytes;
  return GS_OK;
}

/* ---- registration ----------------------------------------------------------------------------------- */

static cu_kernel devop_kernels[GS_DEVOPS_MAX];

int gs__cuda_register_ops(gs_backend_t *backend) {
  size_t count;
  const gs_devop *dops = gs_devops(&count);
  if (count > GS_DEVOPS_MAX)
    return gs_error(GS_EINTERNAL, "CUDA: %zu ops for %d slots", count, GS_DEVOPS_MAX);
  for (size_t i = 0; i < count; i++) {
    if (gs_devops_needs_fft(&dops[i]) && !gs__have_cufft)
      continue; /* DFT and STFT run on the CPU */
    devop_kernels[i] = (cu_kernel){dops[i].name, &dops[i], devop_supports, devop_launch};
    int rc = gs__backend_register_kernel(backend, dops[i].name, &devop_kernels[i]);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

int gs__cuda_find_op_functions(cu_device *d) {
  for (int i = 0; i < GS_DK_COUNT; i++) {
    CUresult r = gs__cu.cuModuleGetFunction(&d->ops[i], d->module, gs_devk_names[i]);
    if (r == CUDA_SUCCESS && d->module64)
      r = gs__cu.cuModuleGetFunction(&d->ops64[i], d->module64, gs_devk_names[i]);
    if (r != CUDA_SUCCESS)
      return gs__cu_fail(r, gs_devk_names[i]);
  }
  return GS_OK;
}

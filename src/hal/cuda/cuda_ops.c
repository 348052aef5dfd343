/* cuda_ops.c - the engine's ops on CUDA: float32 unary ops (Relu,
 * LeakyRelu, Sigmoid, Tanh, Gelu, Erf, Sqrt, Exp, Log, Neg, Abs), Add, Sub,
 * Mul and Div with NumPy broadcasting, Softmax, LogSoftmax, Transpose and
 * LayerNormalization (kernels.cu); Identity and the reshapes as copies of
 * any type; MatMul and Gemm (with the plan's fused bias and Relu) through
 * cuBLAS. Each kernel says
 * which launches it runs (kernel_supports); the plan runs the others, and
 * every op without a kernel here, on the CPU. A launch receives its node's
 * gs_op_call, as the CPU's kernels do. */
#include "hal/cuda/cuda_internal.h"

#include "engine/op_launch.h"

#include <string.h>

enum { /* as kernels.cu numbers them */
  UNARY_RELU, UNARY_SIGMOID, UNARY_TANH, UNARY_LEAKY, UNARY_GELU_ERF, UNARY_GELU_TANH,
  UNARY_ERF, UNARY_SQRT, UNARY_EXP, UNARY_LOG, UNARY_NEG, UNARY_ABS
};
enum { BINARY_ADD, BINARY_SUB, BINARY_MUL, BINARY_DIV };

typedef struct broadcast { /* kernels.cu's struct broadcast (int, then long longs) */
  int rank;
  int64_t dims[8];
  int64_t a_strides[8], b_strides[8];
} broadcast;

/* ---- unary ----------------------------------------------------------------------------- */

static bool unary_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->n_in == 1 && c->n_out == 1 && gs_launch_all_f32(c);
}

static int unary_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !unary_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "%s on CUDA: float32 only", k->name);
  CUdeviceptr x = 0, y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &x);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &y);
  if (rc < 0)
    return rc;
  unsigned long long n = (unsigned long long)gs_launch_numel(&c->out[0].shape);
  /* Only LeakyRelu and Gelu have unary attributes (the others' block is empty). */
  const gs_unary_attrs *at = c->attrs;
  int op = k->op == UNARY_GELU_ERF && at && at->gelu_tanh ? UNARY_GELU_TANH : k->op;
  float alpha = k->op == UNARY_LEAKY && at ? at->alpha : 0.0f;
  void *params[] = {&x, &y, &n, &op, &alpha};
  return gs__cu_launch_1d(s, s->d->unary, n, params);
}

/* ---- data movement --------------------------------------------------------------------- */

/* Identity and the reshapes: the bytes as they are, any type. */
static bool copy_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->n_out == 1 && gs_launch_element_size(c->out[0].dtype) > 0;
}

static int copy_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !copy_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "%s on CUDA: one output of a known type only", k->name);
  CUdeviceptr x = 0, y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &x);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[c->n_in], a->offsets[c->n_in], &y);
  if (rc < 0)
    return rc;
  size_t bytes = (size_t)gs_launch_numel(&c->out[0].shape) * gs_launch_element_size(c->out[0].dtype);
  if (bytes == 0 || x == y)
    return GS_OK;
  CUresult r = gs__cu.cuMemcpyDtoDAsync(y, x, bytes, s->s);
  return r == CUDA_SUCCESS ? GS_OK : gs__cu_fail(r, k->name);
}

/* ---- binary ----------------------------------------------------------------------------- */

static bool binary_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->n_in == 2 && c->n_out == 1 && gs_launch_all_f32(c) && c->out[0].shape.rank <= 8 &&
         c->in[0].dtype == GS_DT_FLOAT32 && c->in[1].dtype == GS_DT_FLOAT32;
}

static int binary_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !binary_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "%s on CUDA: float32 of rank 8 or less only", k->name);
  CUdeviceptr x = 0, z = 0, y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &x);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &z);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[2], a->offsets[2], &y);
  if (rc < 0)
    return rc;
  broadcast b = {.rank = c->out[0].shape.rank};
  for (int d = 0; d < b.rank; d++)
    b.dims[d] = c->out[0].shape.dims[d];
  gs_launch_broadcast_strides(&c->in[0].shape, &c->out[0].shape, b.a_strides);
  gs_launch_broadcast_strides(&c->in[1].shape, &c->out[0].shape, b.b_strides);
  unsigned long long n = (unsigned long long)gs_launch_numel(&c->out[0].shape);
  int op = k->op;
  void *params[] = {&x, &z, &y, &n, &op, &b};
  return gs__cu_launch_1d(s, s->d->binary, n, params);
}

/* ---- Softmax, LogSoftmax ----------------------------------------------------------------------- */

static bool softmax_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->attrs && c->n_in == 1 && c->n_out == 1 && gs_launch_all_f32(c);
}

static int softmax_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !softmax_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "%s on CUDA: float32 only", k->name);
  int64_t o, n, i;
  gs_launch_softmax_dims(c, &o, &n, &i);
  unsigned long long outer = (unsigned long long)o, len = (unsigned long long)n,
                     inner = (unsigned long long)i;
  CUdeviceptr x = 0, y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &x);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &y);
  if (rc < 0)
    return rc;
  int log_out = k->op;
  void *params[] = {&x, &y, &outer, &len, &inner, &log_out};
  return gs__cu_launch_1d(s, s->d->softmax, outer * inner, params);
}

/* ---- Transpose, LayerNormalization --------------------------------------------------------------- */

static bool transpose_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->attrs && c->n_in == 1 && gs_launch_all_f32(c) && c->out[0].shape.rank <= 8;
}

/* The output gathers the input along permuted strides: broadcast_f32's walk. */
static int transpose_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !transpose_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "Transpose on CUDA: float32 only");
  const gs_shape *ys = &c->out[0].shape;
  broadcast b = {.rank = ys->rank};
  for (int d = 0; d < ys->rank; d++)
    b.dims[d] = ys->dims[d];
  gs_launch_transpose_strides(c, b.a_strides);
  CUdeviceptr x = 0, y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &x);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &y);
  if (rc < 0)
    return rc;
  unsigned long long n = (unsigned long long)gs_launch_numel(ys);
  void *params[] = {&x, &y, &n, &b};
  return gs__cu_launch_1d(s, s->d->broadcast, n, params);
}

static bool layernorm_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  return gs_launch_layernorm_ok(gs_launch_call(params, size));
}

static int layernorm_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !layernorm_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "LayerNormalization on CUDA: float32, one output");
  const gs_norm_attrs *na = c->attrs;
  CUdeviceptr x = 0, sc = 0, b = 0, y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &x);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &sc);
  if (rc == 0 && c->n_in > 2 && a->buffers[2])
    rc = gs__cu_device_ptr(a->buffers[2], a->offsets[2], &b);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[c->n_in], a->offsets[c->n_in], &y);
  if (rc < 0)
    return rc;
  unsigned long long inner = (unsigned long long)gs_launch_norm_inner(c);
  unsigned long long rows = (unsigned long long)gs_launch_numel(&c->in[0].shape) / inner;
  float eps = na->epsilon;
  void *params[] = {&x, &sc, &b, &y, &rows, &inner, &eps};
  return gs__cu_launch_1d(s, s->d->layernorm, rows, params);
}

/* ---- MatMul and Gemm through cuBLAS ------------------------------------------------------------- */

static bool matmul_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  if (!gs__have_cublas || !c || !gs_launch_all_f32(c) || c->in[0].dtype != GS_DT_FLOAT32)
    return false;
  const gs_matmul_attrs *m = c->attrs;
  return m && m->m <= INT32_MAX && m->n <= INT32_MAX && m->k <= INT32_MAX &&
         m->batch <= INT32_MAX;
}

static int blas_fail(cublasStatus_t st, const char *what) {
  return gs_error(st == CUBLAS_STATUS_ALLOC_FAILED ? GS_ENOMEM : GS_EDEVICE,
                  "%s: cuBLAS status %d", what, (int)st);
}

/* The stream's cuBLAS handle, made on first use and bound to the stream. */
static int blas_handle(cu_stream *s) {
  pthread_mutex_lock(&s->lock); /* one handle per stream, bound to it or none */
  cublasStatus_t made = CUBLAS_STATUS_SUCCESS;
  if (!s->blas) {
    made = gs__cublas.cublasCreate(&s->blas);
    if (made == CUBLAS_STATUS_SUCCESS &&
        (made = gs__cublas.cublasSetStream(s->blas, (cudaStream_t)s->s)) != CUBLAS_STATUS_SUCCESS)
      gs__cublas.cublasDestroy(s->blas);
    if (made != CUBLAS_STATUS_SUCCESS)
      s->blas = NULL;
  }
  pthread_mutex_unlock(&s->lock);
  return made == CUBLAS_STATUS_SUCCESS ? GS_OK : blas_fail(made, "cublasCreate");
}

static int matmul_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !matmul_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "MatMul on CUDA: float32 through cuBLAS only");
  const gs_matmul_attrs *m = c->attrs;
  CUdeviceptr A = 0, B = 0, Y = 0, bias = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &A);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &B);
  if (rc == 0 && m->has_bias)
    rc = gs__cu_device_ptr(a->buffers[2], a->offsets[2], &bias);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[c->n_in], a->offsets[c->n_in], &Y);
  if (rc < 0)
    return rc;
  if ((rc = blas_handle(s)) < 0)
    return rc;
  unsigned long long rows = (unsigned long long)(m->batch * m->m), n = (unsigned long long)m->n;
  float alpha = 1.0f, beta = 0.0f;
  if (m->has_bias) { /* y starts as the bias on every row; GEMM adds onto it */
    void *params[] = {&bias, &Y, &rows, &n};
    if ((rc = gs__cu_launch_1d(s, s->d->bias_rows, rows * n, params)) < 0)
      return rc;
    beta = 1.0f;
  }
  if (m->k == 0) { /* an empty sum: the bias, or zeros */
    CUresult r = m->has_bias ? CUDA_SUCCESS
                             : gs__cu.cuMemsetD8Async(Y, 0, rows * n * sizeof(float), s->s);
    if (r != CUDA_SUCCESS)
      return gs__cu_fail(r, "cuMemsetD8Async");
  } else if (m->m && m->n) {
    /* Row-major Y = A B is column-major Y^T = B^T A^T: cuBLAS gets B first. */
    int M = (int)m->m, N = (int)m->n, K = (int)m->k;
    cublasStatus_t st;
    if (m->batch_rank <= 1) {
      long long sa = m->batch_rank ? m->a_batch_strides[0] : 0;
      long long sb = m->batch_rank ? m->b_batch_strides[0] : 0;
      st = gs__cublas.cublasSgemmStridedBatched(
          s->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, (const float *)(uintptr_t)B, N, sb,
          (const float *)(uintptr_t)A, K, sa, &beta, (float *)(uintptr_t)Y, N,
          (long long)M * N, (int)m->batch);
    } else {
      st = CUBLAS_STATUS_SUCCESS;
      for (int64_t b = 0; st == CUBLAS_STATUS_SUCCESS && b < m->batch; b++) {
        int64_t oa, ob;
        gs_launch_matmul_offsets(m, b, &oa, &ob);
        st = gs__cublas.cublasSgemm(s->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha,
                                    (const float *)(uintptr_t)B + ob, N,
                                    (const float *)(uintptr_t)A + oa, K, &beta,
                                    (float *)(uintptr_t)Y + b * m->m * m->n, N);
      }
    }
    if (st != CUBLAS_STATUS_SUCCESS)
      return blas_fail(st, "cublasSgemm");
  }
  if (m->act == GS_ACT_RELU) {
    unsigned long long total = rows * n;
    int op = UNARY_RELU;
    float unused = 0.0f;
    void *params[] = {&Y, &Y, &total, &op, &unused};
    rc = gs__cu_launch_1d(s, s->d->unary, total, params);
  }
  return rc;
}

static bool gemm_supports(const cu_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  if (!gs__have_cublas || !gs_launch_gemm_ok(c))
    return false;
  const gs_gemm_attrs *g = c->attrs;
  return g->m <= INT32_MAX && g->n <= INT32_MAX && g->k <= INT32_MAX;
}

/* y = alpha op(A) op(B) + beta C, C broadcast to y first. Row-major y is
 * column-major y^T = op(B)^T op(A)^T: cuBLAS gets B first, each operand's
 * stored layout read as its transpose. */
static int gemm_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !gemm_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "Gemm on CUDA: float32 through cuBLAS only");
  const gs_gemm_attrs *g = c->attrs;
  bool has_c = c->n_in > 2 && a->buffers[2] && g->beta != 0;
  CUdeviceptr A = 0, B = 0, C = 0, Y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &A);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &B);
  if (rc == 0 && has_c)
    rc = gs__cu_device_ptr(a->buffers[2], a->offsets[2], &C);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[c->n_in], a->offsets[c->n_in], &Y);
  if (rc == 0)
    rc = blas_handle(s);
  if (rc < 0)
    return rc;
  unsigned long long total = (unsigned long long)(g->m * g->n);
  if (has_c) {
    broadcast b = {.rank = 2, .dims = {g->m, g->n}};
    gs_launch_broadcast_strides(&c->in[2].shape, &c->out[0].shape, b.a_strides);
    void *params[] = {&C, &Y, &total, &b};
    if ((rc = gs__cu_launch_1d(s, s->d->broadcast, total, params)) < 0)
      return rc;
  }
  if (total && g->k) {
    float alpha = g->alpha, beta = has_c ? g->beta : 0.0f;
    cublasStatus_t st = gs__cublas.cublasSgemm(
        s->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        (int)g->n, (int)g->m, (int)g->k, &alpha, (const float *)(uintptr_t)B,
        (int)c->in[1].shape.dims[1], (const float *)(uintptr_t)A, (int)c->in[0].shape.dims[1],
        &beta, (float *)(uintptr_t)Y, (int)g->n);
    if (st != CUBLAS_STATUS_SUCCESS)
      return blas_fail(st, "cublasSgemm");
  } else if (total && !has_c) { /* an empty sum: zeros */
    CUresult r = gs__cu.cuMemsetD8Async(Y, 0, total * sizeof(float), s->s);
    if (r != CUDA_SUCCESS)
      return gs__cu_fail(r, "cuMemsetD8Async");
  }
  if (g->act == GS_ACT_RELU) {
    int op = UNARY_RELU;
    float alpha = 0.0f;
    void *params[] = {&Y, &Y, &total, &op, &alpha};
    rc = gs__cu_launch_1d(s, s->d->unary, total, params);
  }
  return rc;
}

/* ---- registration ----------------------------------------------------------------------------------- */

static const cu_kernel ops[] = {
    {"Relu", UNARY_RELU, unary_supports, unary_launch},
    {"Sigmoid", UNARY_SIGMOID, unary_supports, unary_launch},
    {"Tanh", UNARY_TANH, unary_supports, unary_launch},
    {"LeakyRelu", UNARY_LEAKY, unary_supports, unary_launch},
    {"Gelu", UNARY_GELU_ERF, unary_supports, unary_launch},
    {"Erf", UNARY_ERF, unary_supports, unary_launch},
    {"Sqrt", UNARY_SQRT, unary_supports, unary_launch},
    {"Exp", UNARY_EXP, unary_supports, unary_launch},
    {"Log", UNARY_LOG, unary_supports, unary_launch},
    {"Neg", UNARY_NEG, unary_supports, unary_launch},
    {"Abs", UNARY_ABS, unary_supports, unary_launch},
    {"Identity", 0, copy_supports, copy_launch},
    {"Reshape", 0, copy_supports, copy_launch},
    {"Flatten", 0, copy_supports, copy_launch},
    {"Squeeze", 0, copy_supports, copy_launch},
    {"Unsqueeze", 0, copy_supports, copy_launch},
    {"Transpose", 0, transpose_supports, transpose_launch},
    {"LayerNormalization", 0, layernorm_supports, layernorm_launch},
    {"Add", BINARY_ADD, binary_supports, binary_launch},
    {"Sub", BINARY_SUB, binary_supports, binary_launch},
    {"Mul", BINARY_MUL, binary_supports, binary_launch},
    {"Div", BINARY_DIV, binary_supports, binary_launch},
    {"Softmax", 0, softmax_supports, softmax_launch},
    {"LogSoftmax", 1, softmax_supports, softmax_launch},
    {"MatMul", 0, matmul_supports, matmul_launch},
    {"Gemm", 0, gemm_supports, gemm_launch},
};

int gs__cuda_register_ops(gs_backend_t *backend) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    int rc = gs__backend_register_kernel(backend, ops[i].name, &ops[i]);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

int gs__cuda_find_op_functions(cu_device *d) {
  static const char *const names[] = {"unary_f32",     "binary_f32",  "bias_rows_f32",
                                      "broadcast_f32", "softmax_f32", "layernorm_f32"};
  CUfunction *slots[] = {&d->unary,     &d->binary,  &d->bias_rows,
                         &d->broadcast, &d->softmax, &d->layernorm};
  for (int i = 0; i < 6; i++) {
    CUresult r = gs__cu.cuModuleGetFunction(slots[i], d->module, names[i]);
    if (r != CUDA_SUCCESS)
      return gs__cu_fail(r, names[i]);
  }
  return GS_OK;
}

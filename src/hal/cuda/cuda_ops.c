/* cuda_ops.c - the engine's ops on CUDA: devops.c's ops (their kernels are
 * hal/devops/op_kernels.h, compiled into the plugin's fatbin) queued
 * through this plugin's gs_devops_target, and MatMul and Gemm (with the
 * plan's fused bias and Relu) through cuBLAS. Each kernel says which
 * launches it runs (kernel_supports); the plan runs the others on the CPU.
 * A launch receives its node's gs_op_call, as the CPU's kernels do. */
#include "hal/cuda/cuda_internal.h"

#include <stdio.h>
#include <string.h>

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
      unsigned tag = s->next_tag++ % GS_CUDA_MARKS;
      snprintf(s->tag_node[tag], sizeof s->tag_node[tag], "%s", c ? c->node_name : "");
      s->status_armed = true;
      pthread_mutex_unlock(&s->lock);
      ptrs[i] = s->status;
      tags[i] = tag;
      params[at++] = &ptrs[i];
      params[at++] = &tags[i];
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
  return gs__cu_launch_1d(l->s, l->s->d->ops[kernel], n, params);
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

static gs_devops_target target_of(const launch *l, const gs_op_call *c) {
  return (gs_devops_target){.ctx = (void *)l, .call = c, .launch = target_launch,
                            .copy = target_copy};
}

/* ---- devops.c's ops ----------------------------------------------------------------------- */

static bool devop_supports(const cu_kernel *k, const void *params, size_t size) {
  const gs_op_call *c = gs_launch_call(params, size);
  return c && k->dop->supports(k->dop, c);
}

static int devop_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!c || !devop_supports(k, a->params, a->params_size))
    return gs_error(GS_ENOTSUP, "%s on CUDA: not for these types or shapes", k->name);
  launch l = {k, s, a};
  gs_devops_target t = target_of(&l, c);
  return k->dop->run(k->dop, &t);
}

/* ---- MatMul and Gemm through cuBLAS ------------------------------------------------------------- */

/* Float32 through cuBLAS where it loaded; else devops.c's kernel. */
static bool blas_matmul(const void *params, size_t size) {
  const gs_op_call *c = gs_launch_call(params, size);
  if (!gs__have_cublas || !c || !gs_launch_all_f32(c) || c->in[0].dtype != GS_DT_FLOAT32)
    return false;
  const gs_matmul_attrs *m = c->attrs;
  return m && m->m <= INT32_MAX && m->n <= INT32_MAX && m->k <= INT32_MAX &&
         m->batch <= INT32_MAX;
}

static bool matmul_supports(const cu_kernel *k, const void *params, size_t size) {
  return blas_matmul(params, size) || devop_supports(k, params, size);
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
  if (!blas_matmul(a->params, a->params_size))
    return devop_launch(k, s, a);
  const gs_matmul_attrs *m = c->attrs;
  launch l = {k, s, a};
  gs_devops_target t = target_of(&l, c);
  CUdeviceptr A = 0, B = 0, Y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &A);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &B);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[c->n_in], a->offsets[c->n_in], &Y);
  if (rc < 0)
    return rc;
  if ((rc = blas_handle(s)) < 0)
    return rc;
  int64_t rows = m->batch * m->m;
  float alpha = 1.0f, beta = 0.0f;
  if (m->has_bias) { /* y starts as the bias on every row; GEMM adds onto it */
    if ((rc = gs_devops_bias_rows(&t, 2, c->n_in, rows, m->n)) < 0)
      return rc;
    beta = 1.0f;
  }
  if (m->k == 0) { /* an empty sum: the bias, or zeros */
    if (!m->has_bias && (rc = gs_devops_zero_f32(&t, c->n_in, rows * m->n)) < 0)
      return rc;
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
  return m->act == GS_ACT_RELU ? gs_devops_relu_f32(&t, c->n_in, rows * m->n) : GS_OK;
}

static bool blas_gemm(const void *params, size_t size) {
  const gs_op_call *c = gs_launch_call(params, size);
  if (!gs__have_cublas || !gs_launch_gemm_ok(c))
    return false;
  const gs_gemm_attrs *g = c->attrs;
  return g->m <= INT32_MAX && g->n <= INT32_MAX && g->k <= INT32_MAX;
}

static bool gemm_supports(const cu_kernel *k, const void *params, size_t size) {
  return blas_gemm(params, size) || devop_supports(k, params, size);
}

/* y = alpha op(A) op(B) + beta C, C broadcast to y first. Row-major y is
 * column-major y^T = op(B)^T op(A)^T: cuBLAS gets B first, each operand's
 * stored layout read as its transpose. */
static int gemm_launch(const cu_kernel *k, cu_stream *s, const gs_kernel_args *a) {
  const gs_op_call *c = gs_launch_call(a->params, a->params_size);
  if (!blas_gemm(a->params, a->params_size))
    return devop_launch(k, s, a);
  const gs_gemm_attrs *g = c->attrs;
  bool has_c = c->n_in > 2 && a->buffers[2] && g->beta != 0;
  launch l = {k, s, a};
  gs_devops_target t = target_of(&l, c);
  CUdeviceptr A = 0, B = 0, Y = 0;
  int rc = gs__cu_device_ptr(a->buffers[0], a->offsets[0], &A);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[1], a->offsets[1], &B);
  if (rc == 0)
    rc = gs__cu_device_ptr(a->buffers[c->n_in], a->offsets[c->n_in], &Y);
  if (rc == 0)
    rc = blas_handle(s);
  if (rc < 0)
    return rc;
  int64_t total = g->m * g->n;
  if (has_c && (rc = gs_devops_broadcast_f32(&t, 2, &c->in[2].shape, c->n_in,
                                             &c->out[0].shape)) < 0)
    return rc;
  if (total && g->k) {
    float alpha = g->alpha, beta = has_c ? g->beta : 0.0f;
    cublasStatus_t st = gs__cublas.cublasSgemm(
        s->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        (int)g->n, (int)g->m, (int)g->k, &alpha, (const float *)(uintptr_t)B,
        (int)c->in[1].shape.dims[1], (const float *)(uintptr_t)A, (int)c->in[0].shape.dims[1],
        &beta, (float *)(uintptr_t)Y, (int)g->n);
    if (st != CUBLAS_STATUS_SUCCESS)
      return blas_fail(st, "cublasSgemm");
  } else if (total && !has_c && (rc = gs_devops_zero_f32(&t, c->n_in, total)) < 0) {
    return rc;
  }
  return g->act == GS_ACT_RELU ? gs_devops_relu_f32(&t, c->n_in, total) : GS_OK;
}

/* ---- registration ----------------------------------------------------------------------------------- */

#define MAX_DEVOPS 96
static cu_kernel devop_kernels[MAX_DEVOPS];

int gs__cuda_register_ops(gs_backend_t *backend) {
  size_t count;
  const gs_devop *dops = gs_devops(&count);
  if (count > MAX_DEVOPS)
    return gs_error(GS_EINTERNAL, "CUDA: %zu ops for %d slots", count, MAX_DEVOPS);
  for (size_t i = 0; i < count; i++) {
    cu_kernel k = {dops[i].name, &dops[i], devop_supports, devop_launch};
    if (strcmp(k.name, "MatMul") == 0) /* float32 GEMM through cuBLAS */
      k.supports = matmul_supports, k.launch = matmul_launch;
    else if (strcmp(k.name, "Gemm") == 0)
      k.supports = gemm_supports, k.launch = gemm_launch;
    devop_kernels[i] = k;
    int rc = gs__backend_register_kernel(backend, k.name, &devop_kernels[i]);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

int gs__cuda_find_op_functions(cu_device *d) {
  for (int i = 0; i < GS_DK_COUNT; i++) {
    CUresult r = gs__cu.cuModuleGetFunction(&d->ops[i], d->module, gs_devk_names[i]);
    if (r != CUDA_SUCCESS)
      return gs__cu_fail(r, gs_devk_names[i]);
  }
  return GS_OK;
}

/* opencl_ops.c - the engine's ops on OpenCL: float32 unary ops (Relu,
 * LeakyRelu, Sigmoid, Tanh, Gelu, Erf, Sqrt, Exp, Log, Neg, Abs), Add, Sub,
 * Mul and Div with NumPy broadcasting, Softmax, LogSoftmax, Transpose and
 * LayerNormalization (kernels.cl); Identity and the reshapes as copies of
 * any type; MatMul and Gemm (with the plan's fused bias and Relu) through
 * CLBlast. Each kernel
 * says which launches it runs (kernel_supports); the plan runs the others,
 * and every op without a kernel here, on the CPU. A launch receives its
 * node's gs_op_call, as the CPU's kernels do, and runs on the stream's
 * worker in order with everything else on that stream. */
#include "hal/opencl/opencl_internal.h"

#include "engine/op_launch.h"

#ifdef GS_HAVE_CLBLAST
#include <clblast_c.h>
#endif
#include <string.h>

enum { /* as kernels.cl numbers them */
  UNARY_RELU, UNARY_SIGMOID, UNARY_TANH, UNARY_LEAKY, UNARY_GELU_ERF, UNARY_GELU_TANH,
  UNARY_ERF, UNARY_SQRT, UNARY_EXP, UNARY_LOG, UNARY_NEG, UNARY_ABS
};
enum { BINARY_ADD, BINARY_SUB, BINARY_MUL, BINARY_DIV };

typedef struct broadcast { /* kernels.cl's struct broadcast: longs only, one layout */
  cl_long rank;
  cl_long dims[8];
  cl_long a_strides[8], b_strides[8];
} broadcast;

/* An operand as a cl_mem and an element offset; GS_EINVAL for a host one. */
static int device_operand(const launch_op *l, int i, cl_mem *mem, cl_ulong *elems) {
  const operand *o = &l->ops[i];
  if (!o->present || !o->mem)
    return gs_error(GS_EINVAL, "%s: operand %d must be a device buffer", l->k->name, i);
  if (o->offset % sizeof(float))
    return gs_error(GS_EINVAL, "%s: operand %d is not float-aligned", l->k->name, i);
  *mem = o->mem;
  *elems = o->offset / sizeof(float);
  return GS_OK;
}

/* Sets a kernel's arguments (size, pointer pairs) and queues it over n
 * items, under the device's kernel lock (the arguments are taken when it is
 * queued). It runs in queue order; nothing waits for it here. */
static int enqueue(const launch_op *l, cl_kernel k, size_t n, int nargs, const size_t *sizes,
                   const void *const *values) {
  if (n == 0)
    return GS_OK;
  ocl_device *d = l->s->dev;
  pthread_mutex_lock(&d->kernel_lock);
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < nargs && err == CL_SUCCESS; i++)
    err = clSetKernelArg(k, (cl_uint)i, sizes[i], values[i]);
  if (err == CL_SUCCESS)
    err = clEnqueueNDRangeKernel(l->s->queue, k, 1, NULL, &n, NULL, 0, NULL, NULL);
  pthread_mutex_unlock(&d->kernel_lock);
  return err == CL_SUCCESS ? GS_OK : gs__ocl_fail(err, l->k->name);
}

/* ---- unary ------------------------------------------------------------------------------ */

static bool unary_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->n_in == 1 && c->n_out == 1 && gs_launch_all_f32(c);
}

static int run_unary_on(const launch_op *l, cl_mem x, cl_ulong xo, cl_mem y, cl_ulong yo,
                        cl_ulong n, cl_int op, cl_float alpha) {
  const size_t sizes[] = {sizeof x, sizeof xo, sizeof y, sizeof yo, sizeof n, sizeof op,
                          sizeof alpha};
  const void *values[] = {&x, &xo, &y, &yo, &n, &op, &alpha};
  return enqueue(l, l->s->dev->unary, (size_t)n, 7, sizes, values);
}

static int run_unary(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !unary_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "%s on OpenCL: float32 only", l->k->name);
  cl_mem x = NULL, y = NULL;
  cl_ulong xo = 0, yo = 0;
  int rc = device_operand(l, 0, &x, &xo);
  if (rc == 0)
    rc = device_operand(l, 1, &y, &yo);
  if (rc < 0)
    return rc;
  /* Only LeakyRelu and Gelu have unary attributes (the others' block is empty). */
  const gs_unary_attrs *at = c->attrs;
  cl_int op = l->k->op == UNARY_GELU_ERF && at && at->gelu_tanh ? UNARY_GELU_TANH : l->k->op;
  cl_float alpha = l->k->op == UNARY_LEAKY && at ? at->alpha : 0.0f;
  return run_unary_on(l, x, xo, y, yo, (cl_ulong)gs_launch_numel(&c->out[0].shape), op, alpha);
}

/* ---- data movement --------------------------------------------------------------------- */

/* Identity and the reshapes: the bytes as they are, any type. */
static bool copy_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->n_out == 1 && gs_launch_element_size(c->out[0].dtype) > 0;
}

static int run_copy_op(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !copy_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "%s on OpenCL: one output of a known type only", l->k->name);
  const operand *x = &l->ops[0], *y = &l->ops[c->n_in];
  if (!x->present || !x->mem || !y->present || !y->mem)
    return gs_error(GS_EINVAL, "%s: operands must be device buffers", l->k->name);
  size_t bytes = (size_t)gs_launch_numel(&c->out[0].shape) * gs_launch_element_size(c->out[0].dtype);
  if (bytes == 0 || (x->mem == y->mem && x->offset == y->offset))
    return GS_OK;
  cl_int err = clEnqueueCopyBuffer(l->s->queue, x->mem, y->mem, x->offset, y->offset, bytes, 0,
                                   NULL, NULL);
  return err == CL_SUCCESS ? GS_OK : gs__ocl_fail(err, l->k->name);
}

/* ---- binary ------------------------------------------------------------------------------ */

static bool binary_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->n_in == 2 && c->n_out == 1 && gs_launch_all_f32(c) && c->in[0].dtype == GS_DT_FLOAT32 &&
         c->in[1].dtype == GS_DT_FLOAT32 && c->out[0].shape.rank <= 8;
}

static int run_binary(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !binary_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "%s on OpenCL: float32 of rank 8 or less only", l->k->name);
  cl_mem a = NULL, b = NULL, y = NULL;
  cl_ulong ao = 0, bo = 0, yo = 0;
  int rc = device_operand(l, 0, &a, &ao);
  if (rc == 0)
    rc = device_operand(l, 1, &b, &bo);
  if (rc == 0)
    rc = device_operand(l, 2, &y, &yo);
  if (rc < 0)
    return rc;
  broadcast s = {.rank = c->out[0].shape.rank};
  for (int d = 0; d < c->out[0].shape.rank; d++)
    s.dims[d] = c->out[0].shape.dims[d];
  gs_launch_broadcast_strides(&c->in[0].shape, &c->out[0].shape, s.a_strides);
  gs_launch_broadcast_strides(&c->in[1].shape, &c->out[0].shape, s.b_strides);
  cl_ulong n = (cl_ulong)gs_launch_numel(&c->out[0].shape);
  cl_int op = l->k->op;
  const size_t sizes[] = {sizeof a, sizeof ao, sizeof b, sizeof bo, sizeof y,
                          sizeof yo, sizeof n,  sizeof op, sizeof s};
  const void *values[] = {&a, &ao, &b, &bo, &y, &yo, &n, &op, &s};
  return enqueue(l, l->s->dev->binary, (size_t)n, 9, sizes, values);
}

/* ---- Softmax, LogSoftmax --------------------------------------------------------------------- */

static bool softmax_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->attrs && c->n_in == 1 && c->n_out == 1 && gs_launch_all_f32(c);
}

static int run_softmax(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !softmax_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "%s on OpenCL: float32 only", l->k->name);
  int64_t outer, len, inner;
  gs_launch_softmax_dims(c, &outer, &len, &inner);
  cl_mem x = NULL, y = NULL;
  cl_ulong xo = 0, yo = 0;
  int rc = device_operand(l, 0, &x, &xo);
  if (rc == 0)
    rc = device_operand(l, 1, &y, &yo);
  if (rc < 0)
    return rc;
  cl_int log_out = l->k->op;
  cl_ulong o = (cl_ulong)outer, n = (cl_ulong)len, i = (cl_ulong)inner;
  const size_t sizes[] = {sizeof x, sizeof xo, sizeof y, sizeof yo,
                          sizeof o, sizeof n,  sizeof i, sizeof log_out};
  const void *values[] = {&x, &xo, &y, &yo, &o, &n, &i, &log_out};
  return enqueue(l, l->s->dev->softmax, (size_t)(o * i), 8, sizes, values);
}

/* ---- Transpose, LayerNormalization --------------------------------------------------------------- */

static bool transpose_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->attrs && c->n_in == 1 && gs_launch_all_f32(c) && c->out[0].shape.rank <= 8;
}

/* The output gathers the input along permuted strides: broadcast_f32's walk. */
static int run_transpose(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !transpose_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "Transpose on OpenCL: float32 only");
  const gs_shape *ys = &c->out[0].shape;
  broadcast s = {.rank = ys->rank};
  for (int d = 0; d < ys->rank; d++)
    s.dims[d] = ys->dims[d];
  gs_launch_transpose_strides(c, s.a_strides);
  cl_mem x = NULL, y = NULL;
  cl_ulong xo = 0, yo = 0;
  int rc = device_operand(l, 0, &x, &xo);
  if (rc == 0)
    rc = device_operand(l, 1, &y, &yo);
  if (rc < 0)
    return rc;
  cl_ulong n = (cl_ulong)gs_launch_numel(ys);
  const size_t sizes[] = {sizeof x, sizeof xo, sizeof y, sizeof yo, sizeof n, sizeof s};
  const void *values[] = {&x, &xo, &y, &yo, &n, &s};
  return enqueue(l, l->s->dev->broadcast, (size_t)n, 6, sizes, values);
}

static bool layernorm_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  return gs_launch_layernorm_ok(gs_launch_call(params, size));
}

static int run_layernorm(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !layernorm_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "LayerNormalization on OpenCL: float32, one output");
  const gs_norm_attrs *a = c->attrs;
  cl_int has_bias = c->n_in > 2 && l->ops[2].present;
  cl_mem x = NULL, sc = NULL, b = NULL, y = NULL;
  cl_ulong xo = 0, so = 0, bo = 0, yo = 0;
  int rc = device_operand(l, 0, &x, &xo);
  if (rc == 0)
    rc = device_operand(l, 1, &sc, &so);
  if (rc == 0 && has_bias)
    rc = device_operand(l, 2, &b, &bo);
  if (rc == 0)
    rc = device_operand(l, c->n_in, &y, &yo);
  if (rc < 0)
    return rc;
  if (!has_bias) { /* an argument must still be a valid buffer */
    b = sc;
    bo = so;
  }
  cl_ulong inner = (cl_ulong)gs_launch_norm_inner(c);
  cl_ulong rows = (cl_ulong)gs_launch_numel(&c->in[0].shape) / inner;
  cl_float eps = a->epsilon;
  const size_t sizes[] = {sizeof x,  sizeof xo, sizeof sc,   sizeof so,    sizeof b,  sizeof bo,
                          sizeof has_bias, sizeof y, sizeof yo, sizeof rows, sizeof inner,
                          sizeof eps};
  const void *values[] = {&x, &xo, &sc, &so, &b, &bo, &has_bias, &y, &yo, &rows, &inner, &eps};
  return enqueue(l, l->s->dev->layernorm, (size_t)rows, 12, sizes, values);
}

/* ---- MatMul and Gemm through CLBlast ------------------------------------------------------------ */

#ifdef GS_HAVE_CLBLAST
static bool matmul_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->attrs && gs_launch_all_f32(c) && c->in[0].dtype == GS_DT_FLOAT32;
}

static int run_matmul(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !matmul_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "MatMul on OpenCL: float32 only");
  const gs_matmul_attrs *m = c->attrs;
  cl_mem A = NULL, B = NULL, Y = NULL, bias = NULL;
  cl_ulong ao = 0, bo = 0, yo = 0, biaso = 0;
  int rc = device_operand(l, 0, &A, &ao);
  if (rc == 0)
    rc = device_operand(l, 1, &B, &bo);
  if (rc == 0 && m->has_bias)
    rc = device_operand(l, 2, &bias, &biaso);
  if (rc == 0)
    rc = device_operand(l, c->n_in, &Y, &yo);
  if (rc < 0)
    return rc;
  cl_ulong rows = (cl_ulong)(m->batch * m->m), n = (cl_ulong)m->n;
  float beta = 0.0f;
  if (m->has_bias) { /* y starts as the bias on every row; GEMM adds onto it */
    const size_t sizes[] = {sizeof bias, sizeof biaso, sizeof Y, sizeof yo, sizeof rows, sizeof n};
    const void *values[] = {&bias, &biaso, &Y, &yo, &rows, &n};
    if ((rc = enqueue(l, l->s->dev->bias_rows, (size_t)(rows * n), 6, sizes, values)) < 0)
      return rc;
    beta = 1.0f;
  }
  if (m->k == 0 && !m->has_bias && rows * n > 0) { /* an empty sum: zeros */
    float zero = 0.0f;
    cl_int err = clEnqueueFillBuffer(l->s->queue, Y, &zero, sizeof zero, yo * sizeof(float),
                                     rows * n * sizeof(float), 0, NULL, NULL);
    if (err != CL_SUCCESS)
      return gs__ocl_fail(err, "MatMul");
  } else if (m->k && m->m && m->n) {
    cl_command_queue q = l->s->queue;
    CLBlastStatusCode st;
    if (m->batch_rank <= 1) {
      size_t sa = m->batch_rank ? (size_t)m->a_batch_strides[0] : 0;
      size_t sb = m->batch_rank ? (size_t)m->b_batch_strides[0] : 0;
      st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                      CLBlastTransposeNo, (size_t)m->m, (size_t)m->n,
                                      (size_t)m->k, 1.0f, A, ao, (size_t)m->k, sa, B, bo,
                                      (size_t)m->n, sb, beta, Y, yo, (size_t)m->n,
                                      (size_t)(m->m * m->n), (size_t)m->batch, &q, NULL);
    } else {
      st = CLBlastSuccess;
      for (int64_t b = 0; st == CLBlastSuccess && b < m->batch; b++) {
        int64_t oa, ob;
        gs_launch_matmul_offsets(m, b, &oa, &ob);
        st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                          (size_t)m->m, (size_t)m->n, (size_t)m->k, 1.0f, A, ao + (size_t)oa,
                          (size_t)m->k, B, bo + (size_t)ob, (size_t)m->n, beta, Y,
                          yo + (size_t)(b * m->m * m->n), (size_t)m->n, &q, NULL);
      }
    }
    if (st != CLBlastSuccess)
      return gs_error(st == CLBlastOpenCLOutOfResources || st == CLBlastOpenCLOutOfHostMemory
                          ? GS_ENOMEM
                          : GS_EDEVICE,
                      "MatMul: CLBlast status %d", (int)st);
  }
  if (m->act == GS_ACT_RELU)
    rc = run_unary_on(l, Y, yo, Y, yo, rows * n, UNARY_RELU, 0.0f);
  return rc;
}

static bool gemm_supports(const ocl_kernel *k, const void *params, size_t size) {
  (void)k;
  return gs_launch_gemm_ok(gs_launch_call(params, size));
}

/* y = alpha op(A) op(B) + beta C, C broadcast to y first. */
static int run_gemm(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !gemm_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "Gemm on OpenCL: float32 only");
  const gs_gemm_attrs *g = c->attrs;
  bool has_c = c->n_in > 2 && l->ops[2].present && g->beta != 0;
  cl_mem A = NULL, B = NULL, C = NULL, Y = NULL;
  cl_ulong ao = 0, bo = 0, co = 0, yo = 0;
  int rc = device_operand(l, 0, &A, &ao);
  if (rc == 0)
    rc = device_operand(l, 1, &B, &bo);
  if (rc == 0 && has_c)
    rc = device_operand(l, 2, &C, &co);
  if (rc == 0)
    rc = device_operand(l, c->n_in, &Y, &yo);
  if (rc < 0)
    return rc;
  cl_ulong total = (cl_ulong)(g->m * g->n);
  if (has_c) {
    broadcast s = {.rank = 2, .dims = {g->m, g->n}};
    gs_launch_broadcast_strides(&c->in[2].shape, &c->out[0].shape, s.a_strides);
    const size_t sizes[] = {sizeof C, sizeof co, sizeof Y, sizeof yo, sizeof total, sizeof s};
    const void *values[] = {&C, &co, &Y, &yo, &total, &s};
    if ((rc = enqueue(l, l->s->dev->broadcast, (size_t)total, 6, sizes, values)) < 0)
      return rc;
  }
  if (total && g->k) {
    cl_command_queue q = l->s->queue;
    CLBlastStatusCode st = CLBlastSgemm(
        CLBlastLayoutRowMajor, g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
        g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)g->m, (size_t)g->n,
        (size_t)g->k, g->alpha, A, ao, (size_t)c->in[0].shape.dims[1], B, bo,
        (size_t)c->in[1].shape.dims[1], has_c ? g->beta : 0.0f, Y, yo, (size_t)g->n, &q, NULL);
    if (st != CLBlastSuccess)
      return gs_error(GS_EDEVICE, "Gemm: CLBlast status %d", (int)st);
  } else if (total && !has_c) { /* an empty sum: zeros */
    float zero = 0.0f;
    cl_int err = clEnqueueFillBuffer(l->s->queue, Y, &zero, sizeof zero, yo * sizeof(float),
                                     total * sizeof(float), 0, NULL, NULL);
    if (err != CL_SUCCESS)
      return gs__ocl_fail(err, "Gemm");
  }
  if (g->act == GS_ACT_RELU)
    rc = run_unary_on(l, Y, yo, Y, yo, total, UNARY_RELU, 0.0f);
  return rc;
}
#endif

/* ---- registration -------------------------------------------------------------------------------- */

static const ocl_kernel ops[] = {
    {"Relu", UNARY_RELU, unary_supports, run_unary},
    {"Sigmoid", UNARY_SIGMOID, unary_supports, run_unary},
    {"Tanh", UNARY_TANH, unary_supports, run_unary},
    {"LeakyRelu", UNARY_LEAKY, unary_supports, run_unary},
    {"Gelu", UNARY_GELU_ERF, unary_supports, run_unary},
    {"Erf", UNARY_ERF, unary_supports, run_unary},
    {"Sqrt", UNARY_SQRT, unary_supports, run_unary},
    {"Exp", UNARY_EXP, unary_supports, run_unary},
    {"Log", UNARY_LOG, unary_supports, run_unary},
    {"Neg", UNARY_NEG, unary_supports, run_unary},
    {"Abs", UNARY_ABS, unary_supports, run_unary},
    {"Identity", 0, copy_supports, run_copy_op},
    {"Reshape", 0, copy_supports, run_copy_op},
    {"Flatten", 0, copy_supports, run_copy_op},
    {"Squeeze", 0, copy_supports, run_copy_op},
    {"Unsqueeze", 0, copy_supports, run_copy_op},
    {"Transpose", 0, transpose_supports, run_transpose},
    {"LayerNormalization", 0, layernorm_supports, run_layernorm},
    {"Add", BINARY_ADD, binary_supports, run_binary},
    {"Sub", BINARY_SUB, binary_supports, run_binary},
    {"Mul", BINARY_MUL, binary_supports, run_binary},
    {"Div", BINARY_DIV, binary_supports, run_binary},
    {"Softmax", 0, softmax_supports, run_softmax},
    {"LogSoftmax", 1, softmax_supports, run_softmax},
#ifdef GS_HAVE_CLBLAST
    {"MatMul", 0, matmul_supports, run_matmul},
    {"Gemm", 0, gemm_supports, run_gemm},
#endif
};

int gs__ocl_register_ops(gs_backend_t *backend) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    int rc = gs__backend_register_kernel(backend, ops[i].name, &ops[i]);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

int gs__ocl_create_op_kernels(ocl_device *d) {
  static const char *const names[] = {"unary_f32",     "binary_f32",  "bias_rows_f32",
                                      "broadcast_f32", "softmax_f32", "layernorm_f32"};
  cl_kernel *slots[] = {&d->unary,     &d->binary,  &d->bias_rows,
                        &d->broadcast, &d->softmax, &d->layernorm};
  for (int i = 0; i < 6; i++) {
    cl_int err;
    if (!(*slots[i] = clCreateKernel(d->program, names[i], &err)))
      return gs__ocl_fail(err, names[i]);
  }
  return GS_OK;
}

void gs__ocl_release_op_kernels(ocl_device *d) {
  cl_kernel all[] = {d->unary, d->binary, d->bias_rows, d->broadcast, d->softmax, d->layernorm};
  for (int i = 0; i < 6; i++)
    if (all[i])
      clReleaseKernel(all[i]);
}

/* opencl_ops.c - the engine's ops on OpenCL: devops.c's ops (their kernels
 * are hal/devops/op_kernels.h, built into the device's program) queued
 * through this plugin's gs_devops_target, and MatMul and Gemm (with the
 * plan's fused bias and Relu) through CLBlast. Each kernel says which
 * launches it runs (kernel_supports); the plan runs the others on the CPU.
 * A launch receives its node's gs_op_call, as the CPU's kernels do, and runs
 * on the stream's worker in order with everything else on that stream;
 * kernels are queued without waiting (the queue is in order). */
#include "hal/opencl/opencl_internal.h"

#ifdef GS_HAVE_CLBLAST
#include <clblast_c.h>
#endif
#include <stdio.h>
#include <string.h>

/* ---- the launch target ------------------------------------------------------------------- */

/* An operand as a cl_mem and an offset in elements of `size` bytes. */
static int device_operand(const launch_op *l, int i, size_t size, cl_mem *mem, cl_ulong *elems) {
  if (i < 0 || i >= l->n || !l->ops[i].present || !l->ops[i].mem)
    return gs_error(GS_EINVAL, "%s: operand %d must be a device buffer", l->k->name, i);
  const operand *o = &l->ops[i];
  if (o->offset % size)
    return gs_error(GS_EINVAL, "%s: operand %d is not aligned to its %zu-byte elements",
                    l->k->name, i, size);
  *mem = o->mem;
  *elems = o->offset / size;
  return GS_OK;
}

/* Sets a kernel's arguments and queues it over n items, under the device's
 * kernel lock (the arguments are taken when it is queued). */
static int target_launch(void *ctx, gs_devk kernel, uint64_t n, int nargs, const gs_dk_arg *args) {
  const launch_op *l = ctx;
  if (n == 0)
    return GS_OK;
  /* Resolved before taking the lock: an operand's error needs no unwinding. */
  cl_mem mems[32];
  cl_ulong offs[32];
  if (nargs > (int)(sizeof mems / sizeof mems[0]))
    return gs_error(GS_EINVAL, "%s: %d kernel arguments", l->k->name, nargs);
  for (int i = 0; i < nargs; i++) {
    if (args[i].operand == GS_DK_STATUS) { /* the status buffer, and a tag naming the node */
      ocl_stream *s = l->s;
      unsigned tag = s->next_tag++ % GS_OCL_TAGS;
      const gs_op_call *c = gs_launch_call(l->params, l->params_size);
      snprintf(s->tag_node[tag], sizeof s->tag_node[tag], "%s", c ? c->node_name : "");
      s->status_armed = true;
      mems[i] = s->status;
      offs[i] = tag;
      continue;
    }
    int rc = args[i].operand < 0
                 ? GS_OK
                 : device_operand(l, args[i].operand, args[i].size, &mems[i], &offs[i]);
    if (rc < 0)
      return rc;
  }
  ocl_device *d = l->s->dev;
  cl_kernel k = d->ops[kernel];
  /* The kernels stride over what one launch does not cover. */
  size_t global = n > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
  pthread_mutex_lock(&d->kernel_lock);
  cl_int err = CL_SUCCESS;
  cl_uint at = 0;
  for (int i = 0; i < nargs && err == CL_SUCCESS; i++) {
    if (args[i].operand == -1) {
      err = clSetKernelArg(k, at++, args[i].size, args[i].value);
    } else {
      err = clSetKernelArg(k, at++, sizeof(cl_mem), &mems[i]);
      if (err == CL_SUCCESS)
        err = clSetKernelArg(k, at++, sizeof(cl_ulong), &offs[i]);
    }
  }
  if (err == CL_SUCCESS)
    err = clEnqueueNDRangeKernel(l->s->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL);
  pthread_mutex_unlock(&d->kernel_lock);
  return err == CL_SUCCESS ? GS_OK : gs__ocl_fail(err, gs_devk_names[kernel]);
}

static int target_copy(void *ctx, int src, size_t src_off, int dst, size_t dst_off, size_t bytes) {
  const launch_op *l = ctx;
  cl_mem x = NULL, y = NULL;
  cl_ulong xo = 0, yo = 0;
  int rc = device_operand(l, src, 1, &x, &xo);
  if (rc == 0)
    rc = device_operand(l, dst, 1, &y, &yo);
  if (rc < 0)
    return rc;
  xo += src_off;
  yo += dst_off;
  if (bytes == 0 || (x == y && xo == yo))
    return GS_OK;
  cl_int err = clEnqueueCopyBuffer(l->s->queue, x, y, xo, yo, bytes, 0, NULL, NULL);
  return err == CL_SUCCESS ? GS_OK : gs__ocl_fail(err, l->k->name);
}

static gs_devops_target target_of(const launch_op *l, const gs_op_call *c) {
  return (gs_devops_target){.ctx = (void *)l, .call = c, .launch = target_launch,
                            .copy = target_copy};
}

/* ---- devops.c's ops ----------------------------------------------------------------------- */

static bool devop_supports(const ocl_kernel *k, const void *params, size_t size) {
  const gs_op_call *c = gs_launch_call(params, size);
  return c && k->dop->supports(k->dop, c);
}

static int run_devop(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !devop_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "%s on OpenCL: not for these types or shapes", l->k->name);
  gs_devops_target t = target_of(l, c);
  return l->k->dop->run(l->k->dop, &t);
}

/* ---- MatMul and Gemm through CLBlast ------------------------------------------------------------ */

#ifdef GS_HAVE_CLBLAST
static int clblast_fail(CLBlastStatusCode st, const char *what) {
  return gs_error(st == CLBlastOpenCLOutOfResources || st == CLBlastOpenCLOutOfHostMemory
                      ? GS_ENOMEM
                      : GS_EDEVICE,
                  "%s: CLBlast status %d", what, (int)st);
}

/* Float32 through CLBlast; float16 through devops.c's kernel. */
static bool blas_f32(const void *params, size_t size) {
  const gs_op_call *c = gs_launch_call(params, size);
  return c && c->attrs && gs_launch_all_f32(c) && c->in[0].dtype == GS_DT_FLOAT32;
}

static bool matmul_supports(const ocl_kernel *k, const void *params, size_t size) {
  return blas_f32(params, size) || devop_supports(k, params, size);
}

static int run_matmul(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!blas_f32(l->params, l->params_size))
    return run_devop(l);
  const gs_matmul_attrs *m = c->attrs;
  gs_devops_target t = target_of(l, c);
  cl_mem A = NULL, B = NULL, Y = NULL;
  cl_ulong ao = 0, bo = 0, yo = 0;
  int rc = device_operand(l, 0, 4, &A, &ao);
  if (rc == 0)
    rc = device_operand(l, 1, 4, &B, &bo);
  if (rc == 0)
    rc = device_operand(l, c->n_in, 4, &Y, &yo);
  if (rc < 0)
    return rc;
  int64_t rows = m->batch * m->m;
  float beta = 0.0f;
  if (m->has_bias) { /* y starts as the bias on every row; GEMM adds onto it */
    if ((rc = gs_devops_bias_rows(&t, 2, c->n_in, rows, m->n)) < 0)
      return rc;
    beta = 1.0f;
  }
  if (m->k == 0 && !m->has_bias) { /* an empty sum: zeros */
    if ((rc = gs_devops_zero_f32(&t, c->n_in, rows * m->n)) < 0)
      return rc;
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
      return clblast_fail(st, "MatMul");
  }
  return m->act == GS_ACT_RELU ? gs_devops_relu_f32(&t, c->n_in, rows * m->n) : GS_OK;
}

static bool gemm_supports(const ocl_kernel *k, const void *params, size_t size) {
  return gs_launch_gemm_ok(gs_launch_call(params, size)) || devop_supports(k, params, size);
}

/* y = alpha op(A) op(B) + beta C, C broadcast to y first. */
static int run_gemm(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!gs_launch_gemm_ok(c))
    return run_devop(l);
  const gs_gemm_attrs *g = c->attrs;
  gs_devops_target t = target_of(l, c);
  bool has_c = c->n_in > 2 && l->ops[2].present && g->beta != 0;
  cl_mem A = NULL, B = NULL, Y = NULL;
  cl_ulong ao = 0, bo = 0, yo = 0;
  int rc = device_operand(l, 0, 4, &A, &ao);
  if (rc == 0)
    rc = device_operand(l, 1, 4, &B, &bo);
  if (rc == 0)
    rc = device_operand(l, c->n_in, 4, &Y, &yo);
  if (rc < 0)
    return rc;
  int64_t total = g->m * g->n;
  if (has_c && (rc = gs_devops_broadcast_f32(&t, 2, &c->in[2].shape, c->n_in,
                                             &c->out[0].shape)) < 0)
    return rc;
  if (total && g->k) {
    cl_command_queue q = l->s->queue;
    CLBlastStatusCode st = CLBlastSgemm(
        CLBlastLayoutRowMajor, g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
        g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)g->m, (size_t)g->n,
        (size_t)g->k, g->alpha, A, ao, (size_t)c->in[0].shape.dims[1], B, bo,
        (size_t)c->in[1].shape.dims[1], has_c ? g->beta : 0.0f, Y, yo, (size_t)g->n, &q, NULL);
    if (st != CLBlastSuccess)
      return clblast_fail(st, "Gemm");
  } else if (total && !has_c && (rc = gs_devops_zero_f32(&t, c->n_in, total)) < 0) {
    return rc;
  }
  return g->act == GS_ACT_RELU ? gs_devops_relu_f32(&t, c->n_in, total) : GS_OK;
}

#endif

/* ---- registration -------------------------------------------------------------------------------- */

#define MAX_DEVOPS 96
static ocl_kernel devop_kernels[MAX_DEVOPS];

int gs__ocl_register_ops(gs_backend_t *backend) {
  size_t count;
  const gs_devop *dops = gs_devops(&count);
  if (count > MAX_DEVOPS)
    return gs_error(GS_EINTERNAL, "OpenCL: %zu ops for %d slots", count, MAX_DEVOPS);
  for (size_t i = 0; i < count; i++) {
    ocl_kernel k = {dops[i].name, &dops[i], devop_supports, run_devop};
#ifdef GS_HAVE_CLBLAST /* float32 GEMM through CLBlast */
    if (strcmp(k.name, "MatMul") == 0)
      k.supports = matmul_supports, k.run = run_matmul;
    else if (strcmp(k.name, "Gemm") == 0)
      k.supports = gemm_supports, k.run = run_gemm;
#endif
    devop_kernels[i] = k;
    int rc = gs__backend_register_kernel(backend, k.name, &devop_kernels[i]);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

int gs__ocl_create_op_kernels(ocl_device *d) {
  for (int i = 0; i < GS_DK_COUNT; i++) {
    cl_int err;
    if (!(d->ops[i] = clCreateKernel(d->program, gs_devk_names[i], &err)))
      return gs__ocl_fail(err, gs_devk_names[i]);
  }
  return GS_OK;
}

void gs__ocl_release_op_kernels(ocl_device *d) {
  for (int i = 0; i < GS_DK_COUNT; i++)
    if (d->ops[i])
      clReleaseKernel(d->ops[i]);
}

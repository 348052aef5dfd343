/* opencl_ops.c - the engine's ops on OpenCL: devops.c's ops (their kernels
 * are hal/devops/op_kernels.h, built into the device's programs, float32
 * and float64) queued through this plugin's gs_devops_target, whose GEMM
 * (MatMul, Gemm, Conv; float32 and float64) is CLBlast's and FFT (DFT,
 * STFT) VkFFT's. Each kernel says which launches it runs
 * (kernel_supports); the plan runs the others on the CPU.
 * A launch receives its node's gs_op_call, as the CPU's kernels do, and runs
 * on the stream's worker in order with everything else on that stream;
 * kernels are queued without waiting (the queue is in order). */
#include "hal/opencl/opencl_internal.h"

#ifdef GS_HAVE_CLBLAST
#include <clblast_c.h>
#endif
#ifdef GS_HAVE_VKFFT
#include "hal/opencl/opencl_fft.h"
#endif

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
      mems[i] = l->s->status;
      offs[i] = gs_devops_tag(&l->s->tags, gs_launch_call(l->params, l->params_size));
      continue;
    }
    if (args[i].operand == GS_DK_SCRATCH && !l->s->scratch)
      return gs_error(GS_EINTERNAL, "%s: no scratch buffer", l->k->name);
    if (args[i].operand == GS_DK_SCRATCH) {
      mems[i] = l->s->scratch;
      offs[i] = 0;
      continue;
    }
    int rc = args[i].operand < 0
                 ? GS_OK
                 : device_operand(l, args[i].operand, args[i].size, &mems[i], &offs[i]);
    if (rc < 0)
      return rc;
  }
  ocl_device *d = l->s->dev;
  const gs_op_call *call = gs_launch_call(l->params, l->params_size);
  bool f64 = call && gs_devops_needs_f64(l->k->dop, call);
  cl_kernel k = f64 ? d->ops64[kernel] : d->ops[kernel];
  if (!k) /* devop_supports keeps float64 off devices without the program */
    return gs_error(GS_ENOTSUP, "%s: this device has no float64 kernels", l->k->name);
  /* The kernels stride over what one launch does not cover; the grouped
   * ones run as groups of GS_DK_GROUP items, where the device allows it. */
  size_t global = n > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
  size_t local = GS_DK_GROUP;
  bool grouped = gs_devk_grouped(kernel);
  if (grouped && !(f64 ? d->groups_fit64 : d->groups_fit))
    return GS_ENOTSUP;
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
    err = clEnqueueNDRangeKernel(l->s->queue, k, 1, NULL, &global, grouped ? &local : NULL, 0,
                                 NULL, NULL);
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

#ifdef GS_HAVE_CLBLAST
static int target_gemm(void *ctx, const gs_devops_gemm *g);
#endif
static int target_scratch(void *ctx, size_t bytes);

#ifdef GS_HAVE_VKFFT
static int target_fft(void *ctx, const gs_devops_fft *f) {
  const launch_op *l = ctx;
  if (!l->s->scratch)
    return gs_error(GS_EINTERNAL, "%s: no scratch buffer", l->k->name);
  return gs__ocl_fft(l->s->dev, l->s->queue, l->s->scratch, f->n, f->batch, f->inverse, f->f64);
}
#endif

static gs_devops_target target_of(const launch_op *l, const gs_op_call *c) {
  return (gs_devops_target){.ctx = (void *)l, .call = c, .launch = target_launch,
                            .copy = target_copy, .row_groups = l->s->dev->row_groups,
#ifdef GS_HAVE_CLBLAST
                            .gemm = target_gemm,
#endif
#ifdef GS_HAVE_VKFFT
                            .fft = target_fft,
#endif
                            .scratch = target_scratch};
}

/* ---- devops.c's ops ----------------------------------------------------------------------- */

bool gs__ocl_every_device_fp64 = true;
uint64_t gs__ocl_fft_max_bytes = UINT64_MAX;

/* The bytes of one transform as VkFFT runs it: a power of two as it is,
 * any other length by Bluestein's algorithm over a power of two of at
 * least 2n - 1 points. */
static uint64_t fft_bytes(const gs_op_call *c) {
  const gs_dft_attrs *a = c->attrs;
  uint64_t n = (uint64_t)a->length, p = 1;
  uint64_t want = n & (n - 1) ? 2 * n - 1 : n;
  while (p < want)
    p *= 2;
  return p * 2 * gs_dtype_size(c->in[0].dtype);
}

static bool devop_supports(const ocl_kernel *k, const void *params, size_t size) {
  const gs_op_call *c = gs_launch_call(params, size);
  return c && (gs__ocl_every_device_fp64 || !gs_devops_needs_f64(k->dop, c)) &&
         k->dop->supports(k->dop, c) &&
         (!gs_devops_needs_fft(k->dop) || fft_bytes(c) <= gs__ocl_fft_max_bytes);
}

static int run_devop(const launch_op *l) {
  const gs_op_call *c = gs_launch_call(l->params, l->params_size);
  if (!c || !devop_supports(l->k, l->params, l->params_size))
    return gs_error(GS_ENOTSUP, "%s on OpenCL: not for these types or shapes", l->k->name);
  gs_devops_target t = target_of(l, c);
  return l->k->dop->run(l->k->dop, &t);
}

/* ---- GEMM through CLBlast, and the scratch buffer --------------------------------------------- */

/* An operand, or the stream's scratch buffer, as a cl_mem and an element offset. */
static int gemm_operand(const launch_op *l, int i, size_t es, cl_mem *mem, cl_ulong *elems) {
  if (i != GS_DK_SCRATCH)
    return device_operand(l, i, es, mem, elems);
  if (!l->s->scratch)
    return gs_error(GS_EINTERNAL, "%s: no scratch buffer", l->k->name);
  *mem = l->s->scratch;
  *elems = 0;
  return GS_OK;
}

#ifdef GS_HAVE_CLBLAST
/* The float64 GEMM (CLBlast's Dgemm): a, b and c offsets in doubles. */
static CLBlastStatusCode dgemm(const gs_devops_gemm *g, CLBlastTranspose ta, CLBlastTranspose tb,
                               cl_mem A, cl_ulong ao, cl_mem B, cl_ulong bo, cl_mem C,
                               cl_ulong co, cl_command_queue *q) {
  if (g->batch == 1)
    return CLBlastDgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k,
                        g->alpha, A, ao + (size_t)g->a_off, (size_t)g->lda, B,
                        bo + (size_t)g->b_off, (size_t)g->ldb, g->beta, C, co + (size_t)g->c_off,
                        (size_t)g->ldc, q, NULL);
  return CLBlastDgemmStridedBatched(
      CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k, g->alpha, A,
      ao + (size_t)g->a_off, (size_t)g->lda, (size_t)g->stride_a, B, bo + (size_t)g->b_off,
      (size_t)g->ldb, (size_t)g->stride_b, g->beta, C, co + (size_t)g->c_off, (size_t)g->ldc,
      (size_t)g->stride_c, (size_t)g->batch, q, NULL);
}

static int target_gemm(void *ctx, const gs_devops_gemm *g) {
  const launch_op *l = ctx;
  if (g->half) /* CLBlast's Hgemm needs cl_khr_fp16 and half scalars: devops' kernel does it */
    return GS_ENOTSUP;
  size_t es = g->f64 ? sizeof(double) : sizeof(float);
  cl_mem A = NULL, B = NULL, C = NULL;
  cl_ulong ao = 0, bo = 0, co = 0;
  int rc = gemm_operand(l, g->a, es, &A, &ao);
  if (rc == 0)
    rc = gemm_operand(l, g->b, es, &B, &bo);
  if (rc == 0)
    rc = gemm_operand(l, g->c, es, &C, &co);
  if (rc < 0)
    return rc;
  cl_command_queue q = l->s->queue;
  CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastStatusCode st;
  if (g->f64)
    st = dgemm(g, ta, tb, A, ao, B, bo, C, co, &q);
  else if (g->batch == 1)
    st = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k,
                      g->alpha, A, ao + (size_t)g->a_off, (size_t)g->lda, B,
                      bo + (size_t)g->b_off, (size_t)g->ldb, g->beta, C, co + (size_t)g->c_off,
                      (size_t)g->ldc, &q, NULL);
  else
    st = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k, g->alpha, A,
        ao + (size_t)g->a_off, (size_t)g->lda, (size_t)g->stride_a, B, bo + (size_t)g->b_off,
        (size_t)g->ldb, (size_t)g->stride_b, g->beta, C, co + (size_t)g->c_off, (size_t)g->ldc,
        (size_t)g->stride_c, (size_t)g->batch, &q, NULL);
  if (st == CLBlastSuccess)
    return GS_OK;
  return gs_error(st == CLBlastOpenCLOutOfResources || st == CLBlastOpenCLOutOfHostMemory
                      ? GS_ENOMEM
                      : GS_EDEVICE,
                  "%s: CLBlast status %d", l->k->name, (int)st);
}
#endif

/* Grows the stream's scratch buffer. The one it replaces is released at
 * once: OpenCL keeps a buffer until the commands queued on it are done. */
static int target_scratch(void *ctx, size_t bytes) {
  const launch_op *l = ctx;
  ocl_stream *s = l->s;
  if (bytes <= s->scratch_bytes)
    return GS_OK;
  if (bytes > s->dev->max_alloc)
    return gs_error(GS_ENOMEM, "%s: %zu bytes of scratch; the device allows %zu in one buffer",
                    l->k->name, bytes, s->dev->max_alloc);
  cl_int err;
  cl_mem mem = clCreateBuffer(s->dev->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (!mem)
    return gs__ocl_fail(err, "clCreateBuffer(scratch)");
  if (s->scratch)
    clReleaseMemObject(s->scratch);
  s->scratch = mem;
  s->scratch_bytes = bytes;
  return GS_OK;
}

/* ---- registration -------------------------------------------------------------------------------- */

static ocl_kernel devop_kernels[GS_DEVOPS_MAX];

int gs__ocl_register_ops(gs_backend_t *backend) {
  size_t count;
  const gs_devop *dops = gs_devops(&count);
  if (count > GS_DEVOPS_MAX)
    return gs_error(GS_EINTERNAL, "OpenCL: %zu ops for %d slots", count, GS_DEVOPS_MAX);
  for (size_t i = 0; i < count; i++) {
#ifndef GS_HAVE_VKFFT
    if (gs_devops_needs_fft(&dops[i]))
      continue; /* DFT and STFT stay on the CPU */
#endif
    devop_kernels[i] = (ocl_kernel){dops[i].name, &dops[i], devop_supports, run_devop};
    int rc = gs__backend_register_kernel(backend, dops[i].name, &devop_kernels[i]);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

/* A program's kernel objects into ops[]; clears *groups_fit where a grouped
 * kernel cannot run as a group of GS_DK_GROUP. */
static int create_kernels(ocl_device *d, cl_program program, cl_kernel *ops, bool *groups_fit) {
  for (int i = 0; i < GS_DK_COUNT; i++) {
    cl_int err;
    if (!(ops[i] = clCreateKernel(program, gs_devk_names[i], &err)))
      return gs__ocl_fail(err, gs_devk_names[i]);
    size_t limit = 0; /* a kernel's own limit may be below the device's */
    if (gs_devk_grouped((gs_devk)i) &&
        (clGetKernelWorkGroupInfo(ops[i], d->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof limit,
                                  &limit, NULL) != CL_SUCCESS ||
         limit < GS_DK_GROUP))
      *groups_fit = false;
  }
  return GS_OK;
}

int gs__ocl_create_op_kernels(ocl_device *d) {
  d->groups_fit = d->groups_fit64 = true;
  int rc = create_kernels(d, d->program, d->ops, &d->groups_fit);
  if (rc == 0 && d->program64)
    rc = create_kernels(d, d->program64, d->ops64, &d->groups_fit64);
  return rc;
}

void gs__ocl_release_op_kernels(ocl_device *d) {
  for (int i = 0; i < GS_DK_COUNT; i++) {
    if (d->ops[i])
      clReleaseKernel(d->ops[i]);
    if (d->ops64[i])
      clReleaseKernel(d->ops64[i]);
  }
}

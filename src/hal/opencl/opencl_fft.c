/* opencl_fft.c - VkFFT's OpenCL back end under devops' FFT (opencl_fft.h).
 * Plans are keyed by (n, batch, precision) and kept per device, the oldest
 * replaced (devops_signal.c rounds the count of transforms up to a power of
 * two, so that changing batch sizes make few plans); planning and queueing
 * hold the plans' lock, since a plan's kernel objects take their arguments
 * when queued. */
#define VKFFT_BACKEND 3 /* OpenCL */
#include "hal/opencl/opencl_fft.h"

#include "base/error.h"

#include <stdlib.h>
#include <vkFFT.h>

/* VkFFT keeps the addresses of the buffer and its size that it was given,
 * and reads them at each launch: they live here, beside the plan, and the
 * buffer is set before each launch. */
typedef struct fft_plan {
  int64_t n, batch;
  bool f64, made;
  uint64_t used; /* when last used, by the device's counter */
  cl_mem buffer;
  uint64_t bytes;
  VkFFTApplication app;
} fft_plan;

struct ocl_fft_plans {
  pthread_mutex_t lock;
  uint64_t clock;
  fft_plan plan[GS_OCL_FFT_PLANS];
};

/* The device's plan for this size, made where it has none (the least
 * recently used one is replaced). Under the lock. */
static int find_plan(ocl_device *d, cl_mem buf, int64_t n, int64_t batch, bool f64,
                     fft_plan **out) {
  struct ocl_fft_plans *ps = d->fft;
  fft_plan *p = &ps->plan[0];
  for (int i = 0; i < GS_OCL_FFT_PLANS; i++) {
    fft_plan *q = &ps->plan[i];
    if (q->made && q->n == n && q->batch == batch && q->f64 == f64) {
      q->used = ++ps->clock;
      *out = q;
      return GS_OK;
    }
    if (!q->made || q->used < p->used)
      p = q;
  }
  if (p->made)
    deleteVkFFT(&p->app);
  *p = (fft_plan){.n = n, .batch = batch, .f64 = f64, .buffer = buf};
  p->bytes = (uint64_t)n * (uint64_t)batch * 2 * (f64 ? sizeof(double) : sizeof(float));
  VkFFTConfiguration c = {0};
  c.FFTdim = 1;
  c.size[0] = (uint64_t)n;
  c.numberBatches = (uint64_t)batch;
  c.device = &d->id;
  c.context = &d->ctx;
  c.buffer = &p->buffer;
  c.bufferSize = &p->bytes;
  c.doublePrecision = f64;
  VkFFTResult r = initializeVkFFT(&p->app, c);
  if (r != VKFFT_SUCCESS)
    return gs_error(r == VKFFT_ERROR_MALLOC_FAILED ? GS_ENOMEM : GS_EDEVICE,
                    "VkFFT could not plan %lld transforms of %lld points (VkFFT error %d)",
                    (long long)batch, (long long)n, (int)r);
  p->made = true;
  p->used = ++ps->clock;
  *out = p;
  return GS_OK;
}

int gs__ocl_fft_init(ocl_device *d) {
  struct ocl_fft_plans *ps = calloc(1, sizeof *ps);
  if (!ps)
    return gs_error(GS_ENOMEM, "out of memory for FFT plans");
  pthread_mutex_init(&ps->lock, NULL);
  d->fft = ps;
  return GS_OK;
}

int gs__ocl_fft(ocl_device *d, cl_command_queue q, cl_mem buf, int64_t n, int64_t batch,
                bool inverse, bool f64) {
  pthread_mutex_lock(&d->fft->lock);
  fft_plan *p = NULL;
  int rc = find_plan(d, buf, n, batch, f64, &p);
  if (rc == 0) {
    VkFFTLaunchParams lp = {0};
    lp.commandQueue = &q;
    p->buffer = buf;
    lp.buffer = &p->buffer;
    VkFFTResult r = VkFFTAppend(&p->app, inverse ? 1 : -1, &lp);
    if (r != VKFFT_SUCCESS)
      rc = gs_error(GS_EDEVICE, "VkFFT could not queue %lld transforms of %lld points (VkFFT "
                                "error %d)", (long long)batch, (long long)n, (int)r);
  }
  pthread_mutex_unlock(&d->fft->lock);
  return rc;
}

void gs__ocl_fft_release(ocl_device *d) {
  struct ocl_fft_plans *ps = d->fft;
  if (!ps)
    return;
  for (int i = 0; i < GS_OCL_FFT_PLANS; i++)
    if (ps->plan[i].made)
      deleteVkFFT(&ps->plan[i].app);
  pthread_mutex_destroy(&ps->lock);
  free(ps);
  d->fft = NULL;
}

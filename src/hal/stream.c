/* stream.c - streams, events and kernel launches: argument checks in one
 * place, then the backend's slot. */
#include "hal/hal_internal.h"

#include <stdlib.h>

static const gs_backend_iface *iface_of(const gs_stream_t *s) { return &s->device->backend->iface; }

int gs_stream_create(gs_device_t *device, gs_stream_t **out) {
  return gs_stream_create_ex(device, 0, out);
}

int gs_stream_create_ex(gs_device_t *device, unsigned flags, gs_stream_t **out) {
  if (!device || !out)
    return gs_error(GS_EINVAL, "gs_stream_create: NULL device or output");
  gs_stream_t *s = calloc(1, sizeof *s);
  if (!s)
    return gs_error(GS_ENOMEM, "out of memory creating a stream on %s", device->info.id);
  s->device = device;
  if (!device->caps.inline_streams)
    flags &= ~GS_STREAM_INLINE;
  int rc = device->backend->iface.stream_create(device, flags, &s->ctx);
  if (rc < 0) {
    free(s);
    return rc;
  }
  *out = s;
  return GS_OK;
}

static void forget_stream(gs_pool_t *pool, void *stream) { gs__pool_forget_stream(pool, stream); }

void gs_stream_destroy(gs_stream_t *s) {
  if (!s)
    return;
  iface_of(s)->stream_synchronize(s->ctx);
  /* Memory freed on this stream has been passed: free for everyone now. Any
   * device's pool may hold such memory (a buffer may be freed on a stream of
   * another device), so every pool forgets the stream. */
  for (int i = 0; i < gs_hal_device_count(); i++)
    gs__device_for_each_pool(gs_hal_device(i), forget_stream, s);
  iface_of(s)->stream_destroy(s->ctx);
  free(s);
}

gs_device_t *gs_stream_device(const gs_stream_t *s) { return s->device; }

int gs_stream_set_threads(gs_stream_t *s, int threads) {
  if (!s || threads < 0)
    return gs_error(GS_EINVAL, "gs_stream_set_threads: %s",
                    s ? "a negative thread count" : "NULL stream");
  if (iface_of(s)->stream_set_threads)
    iface_of(s)->stream_set_threads(s->ctx, threads ? threads : s->device->info.compute_units);
  return GS_OK;
}
void *gs__stream_ctx(const gs_stream_t *s) { return s->ctx; }

/* Checks that [offset, offset+bytes) lies in `buf` and that `buf` belongs to
 * the stream's device. */
/* `bytes` from `offset` within the buffer. */
static int check_bounds(const char *what, const gs_buffer_t *buf, size_t offset, size_t bytes) {
  if (!buf)
    return gs_error(GS_EINVAL, "%s: NULL buffer", what);
  if (offset > buf->requested || bytes > buf->requested - offset)
    return gs_error(GS_EINVAL, "%s: range [%zu, %zu+%zu) is outside the buffer of %zu bytes", what,
                    offset, offset, bytes, buf->requested);
  return GS_OK;
}

/* ... and the buffer on the stream's device. */
static int check_range(const gs_stream_t *s, const char *what, const gs_buffer_t *buf,
                       size_t offset, size_t bytes) {
  int rc = check_bounds(what, buf, offset, bytes);
  gs_device_t *dev = rc == 0 ? gs_pool_device(buf->pool) : NULL;
  if (dev && dev != s->device)
    return gs_error(GS_EINVAL, "%s: buffer of %s used on a stream of %s", what, dev->info.id,
                    s->device->info.id);
  return rc;
}

/* gs_device_get_copy_stats: a copy queued (direction 0 to the device, 1 from it). */
static void count_copy(gs_stream_t *s, int direction, size_t bytes, int rc) {
  if (rc < 0)
    return;
  atomic_fetch_add(&s->device->copies[direction], 1);
  atomic_fetch_add(&s->device->copy_bytes[direction], bytes);
}

int gs_stream_copy_h2d(gs_stream_t *s, gs_buffer_t *dst, size_t dst_offset, const void *src,
                       size_t bytes) {
  if (!s || (!src && bytes))
    return gs_error(GS_EINVAL, "copy_h2d: NULL stream or source");
  int rc = check_range(s, "copy_h2d destination", dst, dst_offset, bytes);
  if (rc < 0 || bytes == 0)
    return rc;
  rc = iface_of(s)->stream_copy(s->ctx, dst, dst_offset, NULL, NULL, 0, src, bytes);
  count_copy(s, 0, bytes, rc);
  return rc;
}

int gs_stream_copy_d2h(gs_stream_t *s, void *dst, gs_buffer_t *src, size_t src_offset,
                       size_t bytes) {
  if (!s || (!dst && bytes))
    return gs_error(GS_EINVAL, "copy_d2h: NULL stream or destination");
  int rc = check_range(s, "copy_d2h source", src, src_offset, bytes);
  if (rc < 0 || bytes == 0)
    return rc;
  rc = iface_of(s)->stream_copy(s->ctx, NULL, 0, dst, src, src_offset, NULL, bytes);
  count_copy(s, 1, bytes, rc);
  return rc;
}

int gs_stream_copy_d2d(gs_stream_t *s, gs_buffer_t *dst, size_t dst_offset, gs_buffer_t *src,
                       size_t src_offset, size_t bytes) {
  if (!s)
    return gs_error(GS_EINVAL, "copy_d2d: NULL stream");
  int rc = check_range(s, "copy_d2d destination", dst, dst_offset, bytes);
  if (rc == 0)
    rc = check_range(s, "copy_d2d source", src, src_offset, bytes);
  if (rc < 0 || bytes == 0)
    return rc;
  return iface_of(s)->stream_copy(s->ctx, dst, dst_offset, NULL, src, src_offset, NULL, bytes);
}

static int free_staging(void *arg) {
  gs_buffer_free(arg, NULL); /* the copy from it has run */
  return GS_OK;
}

int gs_stream_copy_peer(gs_stream_t *s, gs_buffer_t *dst, size_t dst_offset, gs_buffer_t *src,
                        size_t src_offset, size_t bytes) {
  if (!s)
    return gs_error(GS_EINVAL, "copy_peer: NULL stream");
  int rc = check_range(s, "copy_peer destination", dst, dst_offset, bytes);
  if (rc == 0)
    rc = check_bounds("copy_peer source", src, src_offset, bytes);
  if (rc < 0)
    return rc;
  gs_device_t *from = gs_pool_device(src->pool);
  if (bytes == 0)
    return GS_OK;
  if (from == s->device)
    return gs_stream_copy_d2d(s, dst, dst_offset, src, src_offset, bytes);
  const char *host = gs_buffer_host_ptr(src); /* pinned, or a device the host addresses */
  if (host)
    return gs_stream_copy_h2d(s, dst, dst_offset, host + src_offset, bytes);
  if (from->backend == s->device->backend && iface_of(s)->stream_copy_peer) {
    rc = iface_of(s)->stream_copy_peer(s->ctx, dst, dst_offset, src, src_offset, bytes);
    if (rc != GS_ENOTSUP)
      return rc;
  }
  /* Staged through the source device's pinned pool (cached, so no page
   * faults after the first time): down on a stream of that device, then up
   * in s's order; the staging buffer goes back once that copy has run. */
  gs_buffer_t *staging = NULL;
  rc = gs_pool_alloc(gs_device_pool(from, GS_MEM_PINNED_HOST), bytes, NULL, &staging);
  if (rc == 0) {
    pthread_mutex_lock(&from->staging_lock);
    if (!from->staging_stream)
      rc = gs_stream_create(from, &from->staging_stream);
    if (rc == 0)
      rc = gs_stream_copy_d2h(from->staging_stream, gs_buffer_host_ptr(staging), src, src_offset,
                              bytes);
    if (from->staging_stream) {
      int sync = gs_stream_synchronize(from->staging_stream);
      rc = rc < 0 ? rc : sync;
    }
    pthread_mutex_unlock(&from->staging_lock);
  }
  if (rc == 0)
    rc = gs_stream_copy_h2d(s, dst, dst_offset, gs_buffer_host_ptr(staging), bytes);
  if (rc < 0) {
    gs_buffer_free(staging, NULL);
    return gs_error_prefix(rc, "copy_peer");
  }
  rc = gs_stream_host_func(s, free_staging, staging);
  if (rc < 0) { /* the copy is queued: wait for it before the staging goes */
    gs_stream_synchronize(s);
    gs_buffer_free(staging, NULL);
    return gs_error_prefix(rc, "copy_peer");
  }
  return GS_OK;
}

int gs_stream_memset(gs_stream_t *s, gs_buffer_t *dst, size_t offset, uint8_t value,
                     size_t bytes) {
  if (!s)
    return gs_error(GS_EINVAL, "memset: NULL stream");
  int rc = check_range(s, "memset", dst, offset, bytes);
  if (rc < 0 || bytes == 0)
    return rc;
  return iface_of(s)->stream_memset(s->ctx, dst, offset, value, bytes);
}

int gs_stream_host_func(gs_stream_t *s, gs_host_fn fn, void *arg) {
  if (!s || !fn)
    return gs_error(GS_EINVAL, "host_func: NULL stream or function");
  return iface_of(s)->stream_host_func(s->ctx, fn, arg);
}

int gs_stream_synchronize(gs_stream_t *s) {
  if (!s)
    return gs_error(GS_EINVAL, "synchronize: NULL stream");
  return iface_of(s)->stream_synchronize(s->ctx);
}

int gs_stream_launch(gs_stream_t *s, const char *op, const gs_kernel_args *args) {
  if (!s || !op || !args)
    return gs_error(GS_EINVAL, "launch: NULL stream, op or arguments");
  const void *kernel = gs__backend_find_kernel(s->device->backend, op);
  if (!kernel)
    return gs_error(GS_ENOTSUP, "launch: backend %s has no kernel for op \"%s\"",
                    s->device->info.backend, op);
  if (args->buffer_count < 0 || args->buffer_count > GS_KERNEL_MAX_BUFFERS)
    return gs_error(GS_EINVAL, "launch %s: %d buffers (at most %d)", op, args->buffer_count,
                    GS_KERNEL_MAX_BUFFERS);
  if (args->params_size > GS_KERNEL_MAX_PARAMS || (args->params_size && !args->params))
    return gs_error(GS_EINVAL, "launch %s: parameter block of %zu bytes (at most %d)", op,
                    args->params_size, GS_KERNEL_MAX_PARAMS);
  for (int i = 0; i < args->buffer_count; i++) {
    if (!args->buffers[i])
      continue; /* an omitted optional operand */
    int rc = check_range(s, op, args->buffers[i], args->offsets[i], 0);
    if (rc < 0)
      return rc;
  }
  return iface_of(s)->stream_launch(s->ctx, kernel, args);
}

/* ---- events ---------------------------------------------------------------- */

int gs_event_create(gs_device_t *device, gs_event_t **out) {
  if (!device || !out)
    return gs_error(GS_EINVAL, "gs_event_create: NULL device or output");
  gs_event_t *e = calloc(1, sizeof *e);
  if (!e)
    return gs_error(GS_ENOMEM, "out of memory creating an event on %s", device->info.id);
  e->device = device;
  int rc = device->backend->iface.event_create(device, &e->ctx);
  if (rc < 0) {
    free(e);
    return rc;
  }
  *out = e;
  return GS_OK;
}

void gs_event_destroy(gs_event_t *e) {
  if (!e)
    return;
  e->device->backend->iface.event_destroy(e->ctx);
  free(e);
}

int gs_event_record(gs_event_t *e, gs_stream_t *s) {
  if (!e || !s)
    return gs_error(GS_EINVAL, "event_record: NULL event or stream");
  if (e->device->backend != s->device->backend)
    return gs_error(GS_EINVAL, "event_record: event of %s recorded on a stream of %s",
                    e->device->info.id, s->device->info.id);
  int rc = iface_of(s)->event_record(e->ctx, s->ctx);
  if (rc == 0)
    e->recorded = true;
  return rc;
}

int gs_stream_wait_event(gs_stream_t *s, gs_event_t *e) {
  if (!e || !s)
    return gs_error(GS_EINVAL, "stream_wait_event: NULL event or stream");
  if (e->device->backend != s->device->backend)
    return gs_error(GS_ENOTSUP,
                    "stream_wait_event: a stream of %s cannot wait for an event of %s "
                    "(another backend); synchronize the event on the host instead",
                    s->device->info.id, e->device->info.id);
  if (!e->recorded)
    return GS_OK; /* as in CUDA: waiting for a never-recorded event is a no-op */
  return iface_of(s)->stream_wait_event(s->ctx, e->ctx);
}

int gs_event_synchronize(gs_event_t *e) {
  if (!e)
    return gs_error(GS_EINVAL, "event_synchronize: NULL event");
  if (!e->recorded)
    return gs_error(GS_ESTATE, "event_synchronize: the event was never recorded");
  return e->device->backend->iface.event_synchronize(e->ctx);
}

int gs_event_query(gs_event_t *e) {
  if (!e)
    return gs_error(GS_EINVAL, "event_query: NULL event");
  if (!e->recorded)
    return gs_error(GS_ESTATE, "event_query: the event was never recorded");
  return e->device->backend->iface.event_query(e->ctx);
}

int gs_event_elapsed_ns(gs_event_t *start, gs_event_t *end, uint64_t *ns) {
  if (!start || !end || !ns)
    return gs_error(GS_EINVAL, "event_elapsed: NULL event or output");
  if (start->device->backend != end->device->backend)
    return gs_error(GS_EINVAL, "event_elapsed: events of different backends");
  if (!start->recorded || !end->recorded)
    return gs_error(GS_ESTATE, "event_elapsed: both events must have been recorded");
  return start->device->backend->iface.event_elapsed_ns(start->ctx, end->ctx, ns);
}

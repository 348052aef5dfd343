/* group.c - device groups (hal.h): all-reduce and broadcast across devices
 * through the backend's collectives (NCCL) where the group is of one
 * backend that has them, else staged through host memory: each buffer down,
 * the sum or the root's bytes made on the host, and up again. */
#include "hal/hal_internal.h"

#include <stdlib.h>
#include <string.h>

#define GS_MAX_GROUP GS_MAX_DEVICES

struct gs_group {
  int n;
  gs_device_t *devices[GS_MAX_GROUP];
  gs_backend_t *backend; /* whose collectives, or NULL: staged */
  void *ctx;
};

int gs_group_create(gs_device_t *const *devices, int n, gs_group_t **out) {
  *out = NULL;
  if (!devices || n < 1 || n > GS_MAX_GROUP)
    return gs_error(GS_EINVAL, "group: %d devices (1 to %d)", n, GS_MAX_GROUP);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (!devices[i] || devices[i] == devices[j])
        return gs_error(GS_EINVAL, "group: device %d is missing or appears twice", i);
  gs_group_t *g = calloc(1, sizeof *g);
  if (!g)
    return gs_error(GS_ENOMEM, "out of memory creating a device group");
  g->n = n;
  memcpy(g->devices, devices, sizeof devices[0] * (size_t)n);
  gs_backend_t *be = devices[0]->backend;
  bool one_backend = true;
  for (int i = 1; i < n; i++)
    one_backend = one_backend && devices[i]->backend == be;
  if (one_backend && be->iface.group_create) {
    int rc = be->iface.group_create(devices, n, &g->ctx);
    if (rc == GS_OK)
      g->backend = be;
    else if (rc != GS_ENOTSUP) {
      free(g);
      return rc;
    }
  }
  *out = g;
  return GS_OK;
}

void gs_group_destroy(gs_group_t *g) {
  if (!g)
    return;
  if (g->backend)
    g->backend->iface.group_destroy(g->ctx);
  free(g);
}

const char *gs_group_method(const gs_group_t *g) {
  return g->backend ? g->backend->iface.name : "staged";
}

/* Each i's buffer and stream on devices[i], `bytes` in range. */
static int check_members(const gs_group_t *g, gs_stream_t *const *streams,
                         gs_buffer_t *const *bufs, size_t bytes) {
  if (!streams || !bufs)
    return gs_error(GS_EINVAL, "group: NULL streams or buffers");
  for (int i = 0; i < g->n; i++) {
    if (!streams[i] || !bufs[i])
      return gs_error(GS_EINVAL, "group: member %d has no stream or buffer", i);
    if (streams[i]->device != g->devices[i] || gs_pool_device(bufs[i]->pool) != g->devices[i])
      return gs_error(GS_EINVAL, "group: member %d's stream or buffer is not on %s", i,
                      g->devices[i]->info.id);
    if (bytes > bufs[i]->requested)
      return gs_error(GS_EINVAL, "group: %zu bytes, member %d's buffer holds %zu", bytes, i,
                      bufs[i]->requested);
  }
  return GS_OK;
}

static void stream_contexts(const gs_group_t *g, gs_stream_t *const *streams, void **ctx) {
  for (int i = 0; i < g->n; i++)
    ctx[i] = streams[i]->ctx;
}

/* Staged: every member's bytes down to host[i] (after its stream's work). */
static int stage_down(const gs_group_t *g, gs_stream_t *const *streams, gs_buffer_t *const *bufs,
                      size_t bytes, void **host, int only) {
  int rc = 0;
  for (int i = 0; rc == 0 && i < g->n; i++)
    if (only < 0 || i == only)
      rc = gs_stream_copy_d2h(streams[i], host[i], bufs[i], 0, bytes);
  for (int i = 0; i < g->n; i++) {
    int sync = gs_stream_synchronize(streams[i]);
    rc = rc < 0 ? rc : sync;
  }
  return rc;
}

static int stage_up(const gs_group_t *g, gs_stream_t *const *streams, gs_buffer_t *const *bufs,
                    size_t bytes, void *const *host) {
  int rc = 0;
  for (int i = 0; rc == 0 && i < g->n; i++)
    rc = gs_stream_copy_h2d(streams[i], bufs[i], 0, host[i], bytes);
  for (int i = 0; i < g->n; i++) {
    int sync = gs_stream_synchronize(streams[i]);
    rc = rc < 0 ? rc : sync;
  }
  return rc;
}

static void free_all(void **host, int n) {
  for (int i = 0; i < n; i++)
    free(host[i]);
}

int gs_group_all_reduce_sum_f32(gs_group_t *g, gs_stream_t *const *streams,
                                gs_buffer_t *const *bufs, size_t count) {
  if (!g)
    return gs_error(GS_EINVAL, "group: NULL group");
  if (count > SIZE_MAX / sizeof(float))
    return gs_error(GS_EINVAL, "group: %zu floats", count);
  size_t bytes = count * sizeof(float);
  int rc = check_members(g, streams, bufs, bytes);
  if (rc < 0 || count == 0)
    return rc;
  if (g->backend) { /* GS_ENOTSUP (host buffers among them): staged below */
    void *ctx[GS_MAX_GROUP];
    stream_contexts(g, streams, ctx);
    rc = g->backend->iface.group_all_reduce_sum_f32(g->ctx, ctx, bufs, count);
    if (rc != GS_ENOTSUP)
      return rc;
  }
  void *host[GS_MAX_GROUP] = {0};
  for (int i = 0; i < g->n; i++)
    if (!(host[i] = malloc(bytes))) {
      free_all(host, g->n);
      return gs_error(GS_ENOMEM, "group: out of memory staging %zu bytes", bytes);
    }
  rc = stage_down(g, streams, bufs, bytes, host, -1);
  if (rc == 0) { /* sum in member order, the same on every member */
    float *sum = host[0];
    for (int i = 1; i < g->n; i++)
      for (size_t k = 0; k < count; k++)
        sum[k] += ((const float *)host[i])[k];
    for (int i = 1; i < g->n; i++)
      memcpy(host[i], sum, bytes);
    rc = stage_up(g, streams, bufs, bytes, host);
  }
  free_all(host, g->n);
  return rc < 0 ? gs_error_prefix(rc, "group all-reduce") : rc;
}

int gs_group_broadcast(gs_group_t *g, gs_stream_t *const *streams, gs_buffer_t *const *bufs,
                       size_t bytes, int root) {
  if (!g)
    return gs_error(GS_EINVAL, "group: NULL group");
  if (root < 0 || root >= g->n)
    return gs_error(GS_EINVAL, "group: root %d of %d members", root, g->n);
  int rc = check_members(g, streams, bufs, bytes);
  if (rc < 0 || bytes == 0)
    return rc;
  if (g->backend) { /* GS_ENOTSUP (host buffers among them): staged below */
    void *ctx[GS_MAX_GROUP];
    stream_contexts(g, streams, ctx);
    rc = g->backend->iface.group_broadcast(g->ctx, ctx, bufs, bytes, root);
    if (rc != GS_ENOTSUP)
      return rc;
  }
  void *staging = malloc(bytes);
  if (!staging)
    return gs_error(GS_ENOMEM, "group: out of memory staging %zu bytes", bytes);
  void *host[GS_MAX_GROUP];
  for (int i = 0; i < g->n; i++)
    host[i] = staging; /* one copy down (the root's), the same bytes up to all */
  rc = stage_down(g, streams, bufs, bytes, host, root);
  if (rc == 0)
    rc = stage_up(g, streams, bufs, bytes, host);
  free(staging);
  return rc < 0 ? gs_error_prefix(rc, "group broadcast") : rc;
}

/* weight_set.c - device copies of weights shared by plans (weight_set.h). */
#include "engine/weight_set.h"

#include "base/error.h"
#include "base/strmap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct gs_weight_set {
  gs_device_t *device;
  pthread_mutex_t lock;
  gs_strmap index; /* "key/dtype/name" -> entry */
  gs_buffer_t **buffers;
  int n, cap;
  uint64_t bytes;
};

int gs_weight_set_create(gs_device_t *device, gs_weight_set **out) {
  gs_weight_set *set = calloc(1, sizeof *set);
  if (!set)
    return gs_error(GS_ENOMEM, "out of memory for a weight set");
  set->device = device;
  pthread_mutex_init(&set->lock, NULL);
  gs_strmap_init(&set->index);
  *out = set;
  return GS_OK;
}

void gs_weight_set_destroy(gs_weight_set *set) {
  if (!set)
    return;
  for (int i = 0; i < set->n; i++)
    gs_buffer_free(set->buffers[i], NULL);
  free(set->buffers);
  gs_strmap_free(&set->index);
  pthread_mutex_destroy(&set->lock);
  free(set);
}

uint64_t gs_weight_set_bytes(const gs_weight_set *set) {
  gs_weight_set *s = (gs_weight_set *)set;
  pthread_mutex_lock(&s->lock);
  uint64_t bytes = s->bytes;
  pthread_mutex_unlock(&s->lock);
  return bytes;
}

gs_device_t *gs_weight_set_device(const gs_weight_set *set) { return set->device; }

static int upload(gs_weight_set *set, const char *key, const void *data, size_t bytes,
                  gs_stream_t *stream, gs_buffer_t **out) {
  if (set->n == set->cap) {
    int cap = set->cap ? 2 * set->cap : 64;
    gs_buffer_t **grown = realloc(set->buffers, sizeof *grown * (size_t)cap);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory for a weight set");
    set->buffers = grown;
    set->cap = cap;
  }
  gs_buffer_t *buf = NULL;
  int rc = gs_pool_alloc(gs_device_pool(set->device, GS_MEM_DEVICE), bytes, NULL, &buf);
  if (rc == 0)
    rc = gs_stream_copy_h2d(stream, buf, 0, data, bytes);
  int sync = rc == 0 ? gs_stream_synchronize(stream) : 0; /* then other plans may read it */
  if (rc == 0 && sync < 0)
    rc = sync;
  if (rc == 0 && (rc = gs_strmap_put(&set->index, key, set->n)) < 0)
    rc = gs_error(GS_ENOMEM, "out of memory for a weight set");
  if (rc < 0) {
    gs_buffer_free(buf, NULL);
    return rc;
  }
  set->buffers[set->n++] = buf;
  set->bytes += gs_buffer_size(buf);
  *out = buf;
  return GS_OK;
}

int gs__weight_set_get(gs_weight_set *set, const void *key, const char *name, gs_dtype dtype,
                       const void *data, size_t bytes, gs_stream_t *stream, gs_buffer_t **out,
                       uint64_t *added) {
  char id[600];
  snprintf(id, sizeof id, "%p/%d/%zu/%s", key, (int)dtype, bytes, name);
  pthread_mutex_lock(&set->lock);
  int found = gs_strmap_get(&set->index, id), rc = GS_OK;
  *added = 0;
  if (found >= 0)
    *out = set->buffers[found];
  else if ((rc = upload(set, id, data, bytes, stream, out)) == 0)
    *added = gs_buffer_size(*out);
  pthread_mutex_unlock(&set->lock);
  return rc;
}

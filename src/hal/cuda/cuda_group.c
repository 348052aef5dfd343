/* cuda_group.c - collectives across this machine's GPUs through NCCL: one
 * communicator per GPU of a group, made together with ncclCommInitAll; one
 * collective's calls for all of them between ncclGroupStart and
 * ncclGroupEnd, as NCCL asks of one thread driving several GPUs. Without
 * libnccl.so.2 the HAL stages collectives through host memory. */
#include "hal/cuda/cuda_internal.h"
#include "hal/cuda/nccl.h"

#include "base/log.h"

#include <stdlib.h>

static gs_nccl nccl;
static bool nccl_tried, have_nccl;
static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct cu_group {
  int n;
  gs_nccl_comm *comms;
} cu_group;

static int nccl_fail(gs_nccl_result r, const char *what) {
  return gs_error(GS_EDEVICE, "%s: %s (NCCL %d)", what, nccl.error_string(r), r);
}

int gs__cu_group_create(gs_device_t *const *devices, int n, void **out) {
  pthread_mutex_lock(&nccl_lock);
  if (!nccl_tried) {
    nccl_tried = true;
    have_nccl = gs_nccl_load(&nccl) == GS_OK;
    if (!have_nccl)
      GS_LOGI("cuda", "collectives staged through host memory: %s", gs_error_detail());
  }
  pthread_mutex_unlock(&nccl_lock);
  if (!have_nccl)
    return GS_ENOTSUP;
  cu_group *g = calloc(1, sizeof *g);
  int *ordinals = calloc((size_t)n, sizeof *ordinals);
  if (g)
    g->comms = calloc((size_t)n, sizeof *g->comms);
  if (!g || !ordinals || !g->comms) {
    if (g)
      free(g->comms);
    free(g);
    free(ordinals);
    return gs_error(GS_ENOMEM, "out of memory creating a GPU group");
  }
  g->n = n;
  for (int i = 0; i < n; i++)
    ordinals[i] = (int)((cu_device *)gs__device_ctx(devices[i]))->dev;
  gs_nccl_result r = nccl.comm_init_all(g->comms, n, ordinals);
  free(ordinals);
  if (r != GS_NCCL_SUCCESS) {
    free(g->comms);
    free(g);
    return nccl_fail(r, "ncclCommInitAll");
  }
  *out = g;
  return GS_OK;
}

void gs__cu_group_destroy(void *group) {
  cu_group *g = group;
  for (int i = 0; i < g->n; i++)
    nccl.comm_destroy(g->comms[i]);
  free(g->comms);
  free(g);
}

/* Each member's buffer on its GPU; pinned host memory: GS_ENOTSUP (staged). */
static int member_ptrs(int n, gs_buffer_t *const *bufs, CUdeviceptr *ptrs) {
  for (int i = 0; i < n; i++)
    if (gs__cu_device_ptr(bufs[i], 0, &ptrs[i]) < 0)
      return GS_ENOTSUP;
  return GS_OK;
}

/* One all-reduce or broadcast: the call for every member, inside one NCCL group. */
static int run_collective(cu_group *g, void *const *streams, gs_buffer_t *const *bufs,
                          size_t count, int type, int root, bool reduce) {
  CUdeviceptr *ptrs = calloc((size_t)g->n, sizeof *ptrs);
  if (!ptrs)
    return gs_error(GS_ENOMEM, "out of memory");
  int rc = member_ptrs(g->n, bufs, ptrs);
  if (rc < 0) {
    free(ptrs);
    return rc;
  }
  gs_nccl_result r = nccl.group_start();
  for (int i = 0; r == GS_NCCL_SUCCESS && i < g->n; i++) {
    void *p = (void *)(uintptr_t)ptrs[i], *stream = ((cu_stream *)streams[i])->s;
    r = reduce ? nccl.all_reduce(p, p, count, type, GS_NCCL_SUM, g->comms[i], stream)
               : nccl.broadcast(p, p, count, type, root, g->comms[i], stream);
  }
  gs_nccl_result end = nccl.group_end(); /* always closes what group_start opened */
  free(ptrs);
  if (r == GS_NCCL_SUCCESS)
    r = end;
  return r == GS_NCCL_SUCCESS ? GS_OK : nccl_fail(r, reduce ? "ncclAllReduce" : "ncclBroadcast");
}

int gs__cu_group_all_reduce_sum_f32(void *group, void *const *streams, gs_buffer_t *const *bufs,
                                    size_t count) {
  return run_collective(group, streams, bufs, count, GS_NCCL_FLOAT32, 0, true);
}

int gs__cu_group_broadcast(void *group, void *const *streams, gs_buffer_t *const *bufs,
                           size_t bytes, int root) {
  return run_collective(group, streams, bufs, bytes, GS_NCCL_INT8, root, false);
}

void gs__cu_groups_shutdown(void) {
  pthread_mutex_lock(&nccl_lock);
  if (have_nccl)
    gs_nccl_unload(&nccl);
  have_nccl = nccl_tried = false;
  pthread_mutex_unlock(&nccl_lock);
}

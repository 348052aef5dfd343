/* nccl.h - the few NCCL functions the CUDA plugin uses for collectives
 * across the GPUs of this machine, declared here (NCCL is not part of the
 * toolkit) and reached through dlopen("libnccl.so.2"). Values and
 * layouts are NCCL's. */
#ifndef GS_HAL_CUDA_NCCL_H
#define GS_HAL_CUDA_NCCL_H

#include <stddef.h>

typedef int gs_nccl_result;
enum { GS_NCCL_SUCCESS = 0 };
typedef struct gs_nccl_comm_st *gs_nccl_comm;
enum { GS_NCCL_INT8 = 0, GS_NCCL_FLOAT32 = 7 }; /* ncclDataType_t */
enum { GS_NCCL_SUM = 0 };                       /* ncclRedOp_t */

#define GS_NCCL_FUNCS(X)                                                                     \
  X(comm_init_all, "ncclCommInitAll", (gs_nccl_comm *, int, const int *))                    \
  X(comm_destroy, "ncclCommDestroy", (gs_nccl_comm))                                         \
  X(all_reduce, "ncclAllReduce",                                                             \
    (const void *, void *, size_t, int, int, gs_nccl_comm, void *))                          \
  X(broadcast, "ncclBroadcast", (const void *, void *, size_t, int, int, gs_nccl_comm, void *)) \
  X(group_start, "ncclGroupStart", (void))                                                   \
  X(group_end, "ncclGroupEnd", (void))

typedef struct gs_nccl {
  void *library;
#define GS__NCCL_FIELD(field, symbol, args) gs_nccl_result(*field) args;
  GS_NCCL_FUNCS(GS__NCCL_FIELD)
#undef GS__NCCL_FIELD
  const char *(*error_string)(gs_nccl_result);
} gs_nccl;

/* Opens libnccl.so.2 and finds the functions; GS_ENOENT without it. */
int gs_nccl_load(gs_nccl *n);
void gs_nccl_unload(gs_nccl *n);

#endif

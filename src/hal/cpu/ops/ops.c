/* ops.c - the CPU backend's op kernels: every family registered when the
 * backend starts, and the same kernels run on the calling thread for the
 * engine's constant folding and for plan steps a device has no kernel for. */
#include "hal/cpu/ops/kernels.h"

int gs__cpu_register_table(gs_backend_t *be, const gs_cpu_kernel_entry *table, size_t count) {
  for (size_t i = 0; i < count; i++) {
    int rc = gs__backend_register_kernel(be, table[i].name, &table[i].kernel);
    if (rc < 0)
      return rc;
  }
  return 0;
}

int gs__cpu_register_ops(gs_backend_t *be) {
  int rc = gs__cpu_register_elementwise(be);
  if (rc == 0)
    rc = gs__cpu_register_nn(be);
  if (rc == 0)
    rc = gs__cpu_register_reduce(be);
  if (rc == 0)
    rc = gs__cpu_register_shape(be);
  if (rc == 0)
    rc = gs__cpu_register_index(be);
  if (rc == 0)
    rc = gs__cpu_register_loss(be);
  if (rc == 0)
    rc = gs__cpu_register_normalize(be);
  if (rc == 0)
    rc = gs__cpu_register_signal(be);
  if (rc == 0)
    rc = gs__cpu_register_quant(be);
  if (rc == 0)
    rc = gs__cpu_register_qgemm(be);
  if (rc == 0)
    rc = gs__cpu_register_qlinear(be);
  if (rc == 0)
    rc = gs__cpu_register_einsum(be);
  if (rc == 0)
    rc = gs__cpu_register_linalg(be);
  if (rc == 0)
    rc = gs__cpu_register_rnn(be);
  if (rc == 0)
    rc = gs__cpu_register_detect(be);
  if (rc == 0)
    rc = gs__cpu_register_attention(be);
  if (rc == 0)
    rc = gs__cpu_register_squeeze(be);
  return rc;
}

/* A host kernel is the CPU backend's registered gs_cpu_kernel. */
const gs_host_kernel *gs_host_kernel_find(const char *op) {
  gs_backend_t *cpu = gs_hal_backend_by_name(gs__cpu_backend_iface.name);
  return cpu && op ? (const gs_host_kernel *)gs__backend_find_kernel(cpu, op) : NULL;
}

int gs_host_kernel_run(const gs_host_kernel *kernel, const void *params, size_t params_size,
                       void *const *ptrs, int n_buffers) {
  if (n_buffers < 0 || n_buffers > GS_KERNEL_MAX_BUFFERS)
    return gs_error(GS_EINVAL, "a host kernel takes at most %d buffers, not %d",
                    GS_KERNEL_MAX_BUFFERS, n_buffers);
  gs_cpu_kernel_call kc = {.buffer_count = n_buffers, .params = params,
                           .params_size = params_size};
  for (int i = 0; i < n_buffers; i++)
    kc.ptr[i] = ptrs[i];
  return ((const gs_cpu_kernel *)kernel)->fn(&kc);
}

/* k_nn_f64.h - the neural-network ops' float64 CPU kernels (k_nn_f64.c),
 * which k_nn.c's kernels call for float64 operands. Each takes the node's
 * call and its operands (inputs, then outputs) as doubles; the optional
 * float32 outputs of LayerNormalization are read from the same array. */
#ifndef GS_HAL_CPU_OPS_K_NN_F64_H
#define GS_HAL_CPU_OPS_K_NN_F64_H

#include "hal/op/op_attrs.h"
#include "hal/op/op_call.h"

typedef int (*gs_f64_impl)(const gs_op_call *c, double *const *p);

/* Row-major C = alpha op(A) op(B) + beta C through BLAS (OpenBLAS, kept to
 * one thread of its own), rows of C cut among the stream's threads. */
void gs__cpu_dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                   const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                   double *c, int64_t ldc);

int gs__gemm_f64(const gs_op_call *c, double *const *p);
int gs__matmul_f64(const gs_op_call *c, double *const *p);
int gs__conv_f64(const gs_op_call *c, double *const *p);
int gs__conv_transpose_f64(const gs_op_call *c, double *const *p);
int gs__maxpool_f64(const gs_op_call *c, double *const *p);
/* AveragePool, LpPool and their global forms (the attributes' lp). */
int gs__avgpool_f64(const gs_op_call *c, double *const *p);
int gs__batchnorm_f64(const gs_op_call *c, double *const *p);
int gs__layernorm_f64(const gs_op_call *c, double *const *p);
int gs__rmsnorm_f64(const gs_op_call *c, double *const *p);
int gs__softmax_f64(const gs_op_call *c, double *const *p);
int gs__logsoftmax_f64(const gs_op_call *c, double *const *p);

#endif

/* ops.h - the tables of op definitions, one per family; ops.c indexes them. */
#ifndef GS_ENGINE_OPS_H
#define GS_ENGINE_OPS_H

#include "engine/op.h"
#include "hal/op/op_attrs.h"

/* MatMul's shapes (numpy's rules) into m and out; shared with QLinearMatMul. */
int gs__matmul_shapes(const gs_op_call *c, const gs_shape *a, const gs_shape *b,
                      gs_matmul_attrs *m, gs_shape *out);

/* Conv's (or ConvTranspose's) window attributes into a and its output
 * shape into out, for input 0 and weights of shape w; shared with
 * QLinearConv and ConvInteger. */
int gs__conv_shapes(gs_op_call *c, const gs_node *n, const gs_shape *w, bool transposed,
                    gs_conv_attrs *a, gs_shape *out);

/* A pooling window's attributes into a (kernel, strides, pads, dilations,
 * ceil_mode, count_include_pad) and its output shape into out, for input 0
 * in NCHW; shared with QLinearAveragePool. */
int gs__pool_shapes(gs_op_call *c, const gs_node *n, gs_pool_attrs *a, gs_shape *out);

/* Each table ends with an entry whose name is NULL. */
extern const gs_op_def gs__ops_elementwise[];
extern const gs_op_def gs__ops_nn[];
extern const gs_op_def gs__ops_reduce[];
extern const gs_op_def gs__ops_shape[];
extern const gs_op_def gs__ops_index[];
extern const gs_op_def gs__ops_loss[];
extern const gs_op_def gs__ops_normalize[];
extern const gs_op_def gs__ops_signal[];
extern const gs_op_def gs__ops_linalg[];
extern const gs_op_def gs__ops_quant[];
extern const gs_op_def gs__ops_qoperator[];
extern const gs_op_def gs__ops_einsum[];
extern const gs_op_def gs__ops_rnn[];
extern const gs_op_def gs__ops_detect[];
extern const gs_op_def gs__ops_control[];
extern const gs_op_def gs__ops_attention[];

#endif

/* dnnl_conv.h - float32 convolution through oneDNN, for the CPU kernels. */
#ifndef GS_ENGINE_CPU_DNNL_CONV_H
#define GS_ENGINE_CPU_DNNL_CONV_H

#include "hal/op/op_attrs.h"
#include "hal/op/op_call.h"

#include <stdbool.h>

/* Runs the Conv of call c on float32 operands p (inputs, then the output).
 * Sets *done when oneDNN did it; leaves it false when oneDNN cannot (then
 * the caller computes it another way). Returns a GS_E code only when oneDNN
 * started and failed. */
int gs__dnnl_conv(const gs_op_call *c, float *const *p, bool *done);

/* The same for a MatMul of several products (a batch, broadcast where its
 * strides say so): one oneDNN matmul primitive for the whole batch, kept in
 * the call's state (dnnl_matmul.c). */
int gs__dnnl_matmul(const gs_op_call *c, float *const *p, bool *done);

/* Sets the activation fused into an op (op_attrs.h) as oneDNN's eltwise
 * post-op on `attr`; nothing for GS_ACT_NONE. Returns a dnnl_status_t. */
struct dnnl_primitive_attr;
int gs__dnnl_set_activation(struct dnnl_primitive_attr *attr, gs_activation act, float lo,
                            float hi);

/* Whether oneDNN's 8-bit products are exact on this CPU: with VNNI (or
 * AMX), u8 x s8 pairs are summed straight into int32. Without it, its
 * kernels sum each pair of products in int16 first (vpmaddubsw), which
 * saturates (255 * 127 * 2 > 32767): such CPUs (AVX2, AVX-512 without
 * VNNI) get products that never reach that sum (k_qgemm.c). */
bool gs__dnnl_int8_exact(void);

/* oneDNN's CPU engine, made at first use; NULL where oneDNN has none. */
struct dnnl_engine;
struct dnnl_engine *gs__dnnl_engine(void);

/* The convolutions' layouts and reorders, shared by the float32 and int8
 * ones (dnnl_conv.c, dnnl_qconv.c): NCW/NCHW/NCDHW by rank, the weights'
 * OIHW (GOIHW grouped), and a reorder between two layouts on the CPU
 * engine (*out NULL where they are the same; the caller destroys it). */
#include <oneapi/dnnl/dnnl.h>
dnnl_format_tag_t gs__dnnl_plain_tag(int rank);
/* The channel block of the layouts oneDNN's convolutions keep on this CPU:
 * 16 with AVX-512, else 8 (what the CPU's caps give as conv_channel_block). */
int gs__dnnl_channel_block(void);
/* Whether oneDNN uses AVX-512 here: the CPU has it and ONEDNN_MAX_CPU_ISA
 * does not hold oneDNN below it. The project's own AVX-512 kernels follow
 * it, so that that one setting tests their AVX2 paths on any machine. */
bool gs__dnnl_avx512(void);
dnnl_format_tag_t gs__dnnl_weights_tag(int rank, bool grouped);
dnnl_status_t gs__dnnl_reorder_between(const dnnl_memory_desc_t *from,
                                      const dnnl_memory_desc_t *to, dnnl_primitive_t *out);

#endif

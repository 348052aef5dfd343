/* dnnl_qconv.h - QLinearConv and ConvInteger through oneDNN's int8 convolution. */
#ifndef GS_HAL_CPU_OPS_DNNL_QCONV_H
#define GS_HAL_CPU_OPS_DNNL_QCONV_H

#include "hal/op/op_attrs.h"
#include "hal/op/op_call.h"

/* Runs the QLinearConv of call c on buffers p (inputs, then the output).
 * Sets *done when oneDNN did it; leaves it false where oneDNN cannot (weight
 * zero points other than 0, uint8 weights, a shape it refuses): the caller
 * computes it another way. Returns a GS_E code only when oneDNN started and
 * failed. The primitive lives in c->state. */
int gs__dnnl_qconv(const gs_op_call *c, void *const *p, bool *done);

/* The same for ConvInteger, whose int8 or uint8 weights and zero points
 * of any value (per output channel too) oneDNN runs, the zero points taken
 * away after it. */
int gs__dnnl_conv_integer(const gs_op_call *c, void *const *p, bool *done);

#endif

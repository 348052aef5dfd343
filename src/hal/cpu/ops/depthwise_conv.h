/* depthwise_conv.h - 2-D depthwise convolutions on NCHW data, each channel
 * its own filter, computed in place of oneDNN (k_nn.c's Conv asks first).
 *
 * oneDNN runs a depthwise convolution on channels-last or channel-blocked
 * data only, so an NCHW tensor whose channels the plan could not keep
 * blocked (not a multiple of oneDNN's block) is reordered into its layout
 * and back around each one: ShuffleNet's 58, 116 and 232 channels, where
 * those reorders took more time than the convolutions. A channel's plane
 * is contiguous in NCHW, and its filter a few taps: the plane is laid out
 * once (padding written out, strides cut into phases) and each tap is one
 * vectorised pass over the whole plane, with no reorder. */
#ifndef GS_HAL_CPU_OPS_DEPTHWISE_CONV_H
#define GS_HAL_CPU_OPS_DEPTHWISE_CONV_H

#include "hal/op/op_call.h"

#include <stdbool.h>

/* Whether the kernel takes this float32 Conv: 2-D, one filter per channel
 * (group = input channels = output channels), both sides NCHW (not kept
 * blocked by the plan), no residual. */
bool gs__depthwise_conv_fits(const gs_op_call *c);
/* y = act(conv(x, w) + b): p[0] x, p[1] w [C, 1, kh, kw], p[2] the bias
 * (where has_bias), p[c->n_in] y. Spread over the calling thread's team.
 * Returns 0, or GS_ENOMEM (a padded plane per piece of the work). */
int gs__depthwise_conv(const gs_op_call *c, float *const *p);

#endif

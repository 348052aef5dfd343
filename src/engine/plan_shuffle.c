/* plan_shuffle.c - the channel shuffle as exporters write it (ShuffleNet's
 * torch.onnx export): Concat of G tensors of C channels along the channels,
 * Reshape to [N, G, C, ...], Transpose swapping those two axes, Reshape
 * back. The result interleaves the inputs' channels: channel c G + g is
 * input g's channel c. That is the inputs, each seen as [N, C, 1, rest],
 * concatenated along a new axis after the channels: one Concat step writes
 * it, and the Transpose's copy of the whole tensor is gone (the Reshapes
 * moved no bytes already). */
#include "engine/plan_internal.h"

#include "hal/op/op_attrs.h"

/* perm swaps axes 1 and 2 and keeps the others. */
static bool swaps_first_axes(const gs_transpose_attrs *t, int rank) {
  if (rank < 3 || t->perm[0] != 0 || t->perm[1] != 2 || t->perm[2] != 1)
    return false;
  for (int i = 3; i < rank; i++)
    if (t->perm[i] != i)
      return false;
  return true;
}

/* Concat step k joins G inputs of one shape [N, C, rest...] along axis 1;
 * C in *channels. */
static bool even_channel_concat(const gs_plan *p, int k, int64_t *channels) {
  const gs_op_call *c = p->steps[k].call;
  if (!gs__step_is(&p->steps[k], "Concat") || ((const gs_axis_attrs *)c->attrs)->axis != 1 ||
      c->n_in < 2 || c->in[0].shape.rank < 2)
    return false;
  for (int i = 1; i < c->n_in; i++)
    if (!gs_shape_equal(&c->in[i].shape, &c->in[0].shape) || c->in[i].dtype != c->in[0].dtype)
      return false;
  *channels = c->in[0].shape.dims[1];
  return true;
}

/* Transpose step t, if it ends a channel shuffle: the Concat joins its
 * inputs along a new axis 2 into the Transpose's output, and the Reshape
 * and Transpose go. */
static void fuse_one(gs_plan *p, int t) {
  step *tr = &p->steps[t];
  const gs_shape *mid = &tr->call->in[0].shape; /* [N, G, C, rest...] */
  int r = gs__plan_producer(p, tr->in[0]);
  if (!swaps_first_axes(tr->call->attrs, mid->rank) || r < 0 ||
      !gs__step_is(&p->steps[r], "Reshape") || gs__plan_sole_consumer(p, tr->in[0]) != t)
    return;
  int k = gs__plan_producer(p, p->steps[r].in[0]);
  int64_t channels;
  if (k < 0 || gs__plan_sole_consumer(p, p->steps[r].in[0]) != r ||
      !even_channel_concat(p, k, &channels))
    return;
  step *cat = &p->steps[k];
  const gs_shape *xs = &cat->call->in[0].shape;
  int groups = cat->call->n_in;
  if (mid->dims[0] != xs->dims[0] || mid->dims[1] != groups || mid->dims[2] != channels)
    return;
  int64_t rest = 1;
  for (int i = 2; i < xs->rank; i++)
    rest *= xs->dims[i];
  /* Asked of a copy, so that a device that refuses leaves the steps. */
  gs_axis_attrs attrs = {.axis = 2};
  gs_op_call fused = *cat->call;
  fused.attrs = &attrs;
  for (int i = 0; i < groups; i++)
    fused.in[i].shape = (gs_shape){4, {xs->dims[0], channels, 1, rest}};
  fused.out[0].shape = (gs_shape){4, {xs->dims[0], channels, groups, rest}};
  const gs_op_call *asked = &fused;
  if (!gs_device_supports_launch(p->device, fused.op_type, &asked, sizeof asked))
    return;
  for (int i = 0; i < groups; i++)
    cat->call->in[i].shape = fused.in[i].shape;
  cat->call->out[0].shape = fused.out[0].shape;
  ((gs_axis_attrs *)cat->call->attrs)->axis = 2;
  cat->out[0] = tr->out[0];
  p->steps[r].dead = true;
  tr->dead = true;
  p->report.fused += 2;
}

void gs__plan_fuse_shuffle(gs_plan *p) {
  for (int s = 0; s < p->n_steps; s++)
    if (!p->steps[s].dead && gs__step_is(&p->steps[s], "Transpose"))
      fuse_one(p, s);
}

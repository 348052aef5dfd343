/* plan_fuse.c - fusions of a plan's steps: where a kernel can do the work
 * of the steps after it on the way out (a bias, a normalisation folded
 * into weights, an activation), one pass over memory instead of two or
 * more. */
#include "engine/plan_internal.h"

#include "base/error.h"
#include "engine/op.h"
#include "hal/op/op_attrs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Up to `max` live steps that read value v; the count, or -1 when v is a
 * graph output (it must stay) or more steps read it. */
static int consumers(gs_plan *p, int v, int *out, int max) {
  if (p->values[v].graph_output)
    return -1;
  int n = 0;
  for (int s = 0; s < p->n_steps; s++) {
    if (p->steps[s].dead)
      continue;
    for (int i = 0; i < p->steps[s].call->n_in; i++)
      if (p->steps[s].in[i] == v) {
        if (n == max)
          return -1;
        out[n++] = s;
        break;
      }
  }
  return n;
}

int gs__plan_sole_consumer(gs_plan *p, int v) {
  int s = -1;
  return consumers(p, v, &s, 1) == 1 ? s : -1;
}

int gs__plan_replace_step(gs_plan *p, int s, const char *op_type, const void *attrs,
                          size_t attrs_size, const int *ins, int n_in) {
  step *st = &p->steps[s];
  gs_op_call *c = calloc(1, sizeof *c);
  void *a = NULL;
  if (c) {
    c->op_type = op_type;
    c->node_name = st->call->node_name; /* the model's, as the step's was */
    a = gs_op_attrs(c, attrs_size);
    c->state = calloc(1, sizeof *c->state);
  }
  if (!a || !c->state) {
    gs__plan_free_call(c);
    return gs_error(GS_ENOMEM, "out of memory planning %s at node %s", op_type,
                    st->call->node_name);
  }
  memcpy(a, attrs, attrs_size);
  c->n_in = n_in;
  c->n_out = 1;
  for (int i = 0; i < n_in; i++)
    if (ins[i] >= 0)
      c->in[i] = (gs_tensor_desc){.dtype = p->values[ins[i]].dtype,
                                  .shape = p->values[ins[i]].shape};
  c->out[0] = st->call->out[0];
  const gs_op_call *asked = c;
  if (!gs_device_supports_launch(p->device, c->op_type, &asked, sizeof asked)) {
    gs__plan_free_call(c);
    return 0;
  }
  gs__plan_free_call(st->call);
  st->call = c;
  for (int i = 0; i < GS_OP_MAX_IO; i++)
    st->in[i] = i < n_in ? ins[i] : -1;
  return 1;
}

int gs__plan_producer(const gs_plan *p, int v) {
  for (int s = 0; v >= 0 && s < p->n_steps; s++)
    if (!p->steps[s].dead && p->steps[s].out[0] == v)
      return s;
  return -1;
}

/* Conv (constant float32 weights) followed by BatchNormalization (constant
 * parameters): new weights W*s and bias (b - mean)*s + B, s = scale/sqrt(var+eps). */
static int fuse_conv_bn(gs_plan *p, step *conv) {
  int y = conv->out[0], b = gs__plan_sole_consumer(p, y);
  if (b < 0 || !gs__step_is(&p->steps[b], "BatchNormalization") || p->steps[b].in[0] != y)
    return 0;
  step *bn = &p->steps[b];
  const value *w = &p->values[conv->in[1]];
  if (w->dtype != GS_DT_FLOAT32 || !w->data)
    return 0;
  for (int i = 1; i < 5; i++)
    if (!p->values[bn->in[i]].data)
      return 0;
  const gs_conv_attrs *ca = conv->call->attrs;
  if (ca->has_bias && !p->values[conv->in[2]].data)
    return 0;
  int64_t cout = w->shape.dims[0], per = cout ? gs_shape_numel(&w->shape) / cout : 0;
  float eps = ((const gs_norm_attrs *)bn->call->attrs)->epsilon;
  const float *scale = p->values[bn->in[1]].data, *shift = p->values[bn->in[2]].data,
              *mean = p->values[bn->in[3]].data, *var = p->values[bn->in[4]].data;
  const float *old_b = ca->has_bias ? p->values[conv->in[2]].data : NULL;
  bool shareable = w->share_key && (!ca->has_bias || p->values[conv->in[2]].share_key);
  for (int i = 1; i < 5; i++)
    shareable = shareable && p->values[bn->in[i]].share_key;
  const void *share_key = shareable ? w->share_key : NULL;
  float *nw = malloc(w->bytes ? w->bytes : 1), *nb = malloc(sizeof(float) * (size_t)(cout ? cout : 1));
  if (!nw || !nb) {
    free(nw);
    free(nb);
    return gs_error(GS_ENOMEM, "out of memory fusing node %s", conv->node->name);
  }
  for (int64_t o = 0; o < cout; o++) {
    float s = scale[o] / sqrtf(var[o] + eps);
    for (int64_t i = 0; i < per; i++)
      nw[o * per + i] = ((const float *)w->data)[o * per + i] * s;
    nb[o] = ((old_b ? old_b[o] : 0.0f) - mean[o]) * s + shift[o];
  }
  char name[256];
  gs_shape bs = {.rank = 1, .dims = {cout}};
  snprintf(name, sizeof name, "%s/fused_weights", conv->node->name);
  char *wname = strdup(name);
  snprintf(name, sizeof name, "%s/fused_bias", conv->node->name);
  char *bname = strdup(name);
  gs_shape ws = w->shape; /* add_value may move p->values, and w with them */
  int wi = wname && bname ? gs__plan_add_value(p, wname, GS_DT_FLOAT32, &ws)
                          : gs_error(GS_ENOMEM, "out of memory fusing node %s", conv->node->name);
  if (wi >= 0) {
    p->values[wi].data = nw;
    p->values[wi].share_key = share_key;
    p->values[wi].owns_data = p->values[wi].owns_name = true;
    wname = NULL;
    nw = NULL;
  }
  int bi = wi >= 0 ? gs__plan_add_value(p, bname, GS_DT_FLOAT32, &bs) : wi;
  if (bi >= 0) {
    p->values[bi].data = nb;
    p->values[bi].share_key = share_key;
    p->values[bi].owns_data = p->values[bi].owns_name = true;
    bname = NULL;
    nb = NULL;
  }
  free(wname);
  free(bname);
  free(nw);
  free(nb);
  if (wi < 0 || bi < 0)
    return wi < 0 ? wi : bi;
  conv->in[1] = wi;
  conv->in[2] = bi;
  conv->call->n_in = 3;
  conv->call->in[2].dtype = GS_DT_FLOAT32;
  conv->call->in[2].shape = bs;
  ((gs_conv_attrs *)conv->call->attrs)->has_bias = true;
  conv->out[0] = bn->out[0];
  bn->dead = true;
  p->report.fused++;
  return 0;
}

/* MatMul whose output only feeds an Add of a constant vector over its last
 * dim: the bias joins the MatMul (sgemm with beta = 1). */
static int fuse_matmul_add(gs_plan *p, step *mm) {
  int y = mm->out[0], a = gs__plan_sole_consumer(p, y);
  if (a < 0 || !gs__step_is(&p->steps[a], "Add") || mm->call->in[0].dtype != GS_DT_FLOAT32)
    return 0;
  step *add = &p->steps[a];
  int other = add->in[0] == y ? add->in[1] : add->in[0];
  const value *bias = &p->values[other];
  gs_matmul_attrs *m = mm->call->attrs;
  if (!bias->data || bias->dtype != GS_DT_FLOAT32 || gs_shape_numel(&bias->shape) != m->n ||
      bias->shape.dims[bias->shape.rank - 1] != m->n ||
      !gs_shape_equal(&p->values[add->out[0]].shape, &p->values[y].shape) ||
      p->values[y].shape.rank < 1)
    return 0;
  mm->in[2] = other;
  mm->call->n_in = 3;
  mm->call->in[2] = (gs_tensor_desc){.dtype = GS_DT_FLOAT32, .shape = bias->shape};
  m->has_bias = true;
  mm->out[0] = add->out[0];
  add->dead = true;
  p->report.fused++;
  return 0;
}


bool gs__plan_known_scalar(gs_plan *p, int v, float *x) {
  const value *val = v >= 0 ? &p->values[v] : NULL;
  if (!val || !val->data || val->dtype != GS_DT_FLOAT32 || gs_shape_numel(&val->shape) != 1)
    return false;
  *x = *(const float *)val->data;
  return true;
}

/* Step s (a binary op) reads value v and a known scalar: *x. */
static bool with_scalar(gs_plan *p, int s, int v, float *x) {
  const step *st = &p->steps[s];
  if (st->call->n_in != 2 || (st->in[0] != v && st->in[1] != v))
    return false;
  return gs__plan_known_scalar(p, st->in[0] == v ? st->in[1] : st->in[0], x);
}

/* The steps an activation spans after the producer: they go, and the last
 * one's output becomes the producer's. */
typedef struct act_match {
  gs_activation act;
  float lo, hi;
  int steps[5], n;
} act_match;

/* y -> Sigmoid -> Mul(y, sigmoid): SiLU. */
static bool match_silu(gs_plan *p, int y, const int *readers, int n, act_match *m) {
  if (n != 2)
    return false;
  for (int k = 0; k < 2; k++) {
    int sg = readers[k], mul = readers[1 - k];
    const step *s = &p->steps[sg], *mu = &p->steps[mul];
    if (!gs__step_is(s, "Sigmoid") || !gs__step_is(mu, "Mul") || mu->call->n_in != 2)
      continue;
    int sig_out = s->out[0];
    bool pair = (mu->in[0] == y && mu->in[1] == sig_out) || (mu->in[1] == y && mu->in[0] == sig_out);
    int only;
    if (pair && consumers(p, sig_out, &only, 1) == 1 && only == mul) {
      *m = (act_match){.act = GS_ACT_SILU, .steps = {sg, mul}, .n = 2};
      return true;
    }
  }
  return false;
}

/* y -> Div(sqrt 2) -> Erf -> Add(1) -> Mul(y, .) -> Mul(0.5): GELU, as
 * torch writes it. */
static bool match_gelu(gs_plan *p, int y, const int *readers, int n, act_match *m) {
  if (n != 2)
    return false;
  for (int k = 0; k < 2; k++) {
    int div = readers[k], mul = readers[1 - k], erf, add, half;
    float x;
    if (!gs__step_is(&p->steps[div], "Div") || p->steps[div].in[0] != y ||
        !gs__plan_known_scalar(p, p->steps[div].in[1], &x) || fabsf(x - 1.41421356f) > 1e-5f)
      continue;
    if ((erf = gs__plan_sole_consumer(p, p->steps[div].out[0])) < 0 ||
        !gs__step_is(&p->steps[erf], "Erf"))
      continue;
    if ((add = gs__plan_sole_consumer(p, p->steps[erf].out[0])) < 0 ||
        !gs__step_is(&p->steps[add], "Add") ||
        !with_scalar(p, add, p->steps[erf].out[0], &x) || x != 1.0f)
      continue;
    const step *mu = &p->steps[mul];
    int a = p->steps[add].out[0];
    if (!gs__step_is(mu, "Mul") || gs__plan_sole_consumer(p, a) != mul || mu->call->n_in != 2 ||
        !((mu->in[0] == y && mu->in[1] == a) || (mu->in[1] == y && mu->in[0] == a)))
      continue;
    if ((half = gs__plan_sole_consumer(p, mu->out[0])) < 0 ||
        !gs__step_is(&p->steps[half], "Mul") || !with_scalar(p, half, mu->out[0], &x) || x != 0.5f)
      continue;
    *m = (act_match){.act = GS_ACT_GELU, .steps = {div, erf, add, mul, half}, .n = 5};
    return true;
  }
  return false;
}

/* What reads y that the producer's kernel can apply on the way out. */
static bool match_activation(gs_plan *p, int y, act_match *m) {
  int readers[3];
  int n = consumers(p, y, readers, 3);
  if (n == 1) {
    const step *r = &p->steps[readers[0]];
    *m = (act_match){.steps = {readers[0]}, .n = 1, .lo = -INFINITY, .hi = INFINITY};
    if (gs__step_is(r, "Relu"))
      m->act = GS_ACT_RELU;
    else if (gs__step_is(r, "HardSwish"))
      m->act = GS_ACT_HARDSWISH;
    else if (gs__step_is(r, "Clip") && r->in[0] == y &&
             (r->call->n_in < 2 || r->in[1] < 0 || gs__plan_known_scalar(p, r->in[1], &m->lo)) &&
             (r->call->n_in < 3 || r->in[2] < 0 || gs__plan_known_scalar(p, r->in[2], &m->hi)))
      m->act = GS_ACT_CLIP;
    return m->act != GS_ACT_NONE;
  }
  return n > 0 && (match_silu(p, y, readers, n, m) || match_gelu(p, y, readers, n, m));
}

/* Sets the activation step s's kernel applies on the way out (*act, in its
 * attrs) where the device's kernel takes it, or where the device has no
 * kernel for the op at all (the CPU's, which then runs the step, takes
 * every one). A device kernel that takes the op but not the activation
 * would lose the step to the CPU: *act stays none then, the steps stay for
 * the device to run, and the answer is false. */
static bool set_fused_activation(gs_plan *p, const step *s, gs_activation *act,
                                 gs_activation want) {
  const gs_op_call *c = s->call;
  *act = want;
  if (gs_device_supports_launch(p->device, c->op_type, &c, sizeof c))
    return true;
  *act = GS_ACT_NONE;
  if (gs_device_supports_launch(p->device, c->op_type, &c, sizeof c))
    return false;
  *act = want;
  return true;
}

/* Gemm, MatMul or Conv followed by an activation: it runs inside their
 * kernel, where the device's kernel takes it (device kernels take Relu). */
static void fuse_activation(gs_plan *p, step *s) {
  int y = s->out[0];
  act_match m = {0};
  if (p->values[y].dtype != GS_DT_FLOAT32 || !match_activation(p, y, &m))
    return;
  gs_activation *act;
  float *lo, *hi;
  if (gs__step_is(s, "Conv")) {
    gs_conv_attrs *a = s->call->attrs;
    act = &a->act, lo = &a->act_lo, hi = &a->act_hi;
  } else if (gs__step_is(s, "Gemm")) {
    gs_gemm_attrs *a = s->call->attrs;
    act = &a->act, lo = &a->act_lo, hi = &a->act_hi;
  } else {
    gs_matmul_attrs *a = s->call->attrs;
    act = &a->act, lo = &a->act_lo, hi = &a->act_hi;
  }
  if (*act != GS_ACT_NONE)
    return;
  *lo = m.lo;
  *hi = m.hi;
  if (!set_fused_activation(p, s, act, m.act))
    return;
  s->out[0] = p->steps[m.steps[m.n - 1]].out[0];
  for (int i = 0; i < m.n; i++)
    p->steps[m.steps[i]].dead = true;
  p->report.fused++;
}

/* BatchNormalization followed by Relu (DenseNet's pre-activation, where no
 * Conv before it takes the normalisation): one pass over memory, as
 * set_fused_activation allows. */
static void fuse_batchnorm_relu(gs_plan *p, step *bn) {
  int y = bn->out[0], r = gs__plan_sole_consumer(p, y);
  gs_norm_attrs *a = bn->call->attrs;
  if (bn->call->n_out != 1 || p->values[y].dtype != GS_DT_FLOAT32 || r < 0 ||
      !gs__step_is(&p->steps[r], "Relu") || !set_fused_activation(p, bn, &a->act, GS_ACT_RELU))
    return;
  bn->out[0] = p->steps[r].out[0];
  p->steps[r].dead = true;
  p->report.fused++;
}

/* A Conv whose blocked output only feeds an Add of another blocked tensor
 * of its shape (a residual sum), and perhaps an activation after it:
 * oneDNN adds the tensor and applies the activation as the convolution
 * writes its output (post-ops), one pass over memory instead of three. The
 * fused step takes the Add's place in the run, since the other tensor may
 * be made after the Conv. Runs once the layout is known: oneDNN adds
 * quickly only in the output's own layout. */
static void fuse_residual(gs_plan *p, int s) {
  step *conv = &p->steps[s];
  gs_conv_attrs *a = conv->call->attrs;
  int y = conv->out[0], k = gs__plan_sole_consumer(p, y);
  if (!a->dst_blocked || a->act != GS_ACT_NONE || a->residual || k < 0 ||
      !gs__step_is(&p->steps[k], "Add") || p->steps[k].call->n_in != 2)
    return;
  step *add = &p->steps[k];
  int r = add->in[0] == y ? add->in[1] : add->in[0], sum = add->out[0];
  if (r == y || r < 0 || !p->values[r].blocked || !p->values[sum].blocked ||
      !gs_shape_equal(&p->values[r].shape, &p->values[y].shape))
    return;
  act_match m = {0};
  if (match_activation(p, sum, &m) && !p->values[p->steps[m.steps[m.n - 1]].out[0]].blocked)
    m.act = GS_ACT_NONE;
  /* The device is asked about a copy of the fused call, so that a refusal
   * (a device that keeps blocked layouts but cannot add in its Conv) leaves
   * the step as it was. */
  gs_conv_attrs fused_attrs = *a;
  fused_attrs.residual = true;
  fused_attrs.act = m.act;
  fused_attrs.act_lo = m.lo;
  fused_attrs.act_hi = m.hi;
  gs_op_call fused = *conv->call;
  fused.attrs = &fused_attrs;
  if (fused.n_in < 3)
    fused.in[2] = (gs_tensor_desc){0};
  fused.in[3] = (gs_tensor_desc){.dtype = p->values[r].dtype, .shape = p->values[r].shape};
  fused.n_in = 4;
  const gs_op_call *asked = &fused;
  if (!gs_device_supports_launch(p->device, fused.op_type, &asked, sizeof asked))
    return;
  *a = fused_attrs;
  fused.attrs = a;
  *conv->call = fused;
  if (conv->call->in[2].dtype == GS_DT_INVALID)
    conv->in[2] = -1;
  conv->in[3] = r;
  conv->out[0] = sum;
  /* The values no step makes now leave the report's count of blocked ones:
   * y, and with an activation the sum and what the activation's steps made
   * before their last. */
  int gone[1 + 1 + 5], n_gone = 0;
  gone[n_gone++] = y;
  if (m.act != GS_ACT_NONE) {
    gone[n_gone++] = sum;
    for (int i = 0; i + 1 < m.n; i++)
      gone[n_gone++] = p->steps[m.steps[i]].out[0];
    conv->out[0] = p->steps[m.steps[m.n - 1]].out[0];
    for (int i = 0; i < m.n; i++)
      p->steps[m.steps[i]].dead = true;
    p->report.fused++;
  }
  for (int i = 0; i < n_gone; i++)
    p->report.kept_blocked -= p->values[gone[i]].blocked;
  gs__plan_free_call(add->call);
  *add = *conv;
  conv->call = NULL; /* moved */
  conv->dead = true;
  p->report.fused++;
}

/* Drops the fused steps, keeping order. */
static void drop_dead_steps(gs_plan *p) {
  int n = 0;
  for (int i = 0; i < p->n_steps; i++) {
    if (p->steps[i].dead) {
      gs__plan_free_call(p->steps[i].call);
      continue;
    }
    p->steps[n++] = p->steps[i];
  }
  p->n_steps = n;
}

int gs__plan_fuse(gs_plan *p) {
  int rc = gs__plan_fuse_attention(p);
  if (rc < 0)
    return rc;
  gs__plan_fuse_shuffle(p);
  for (int i = 0; i < p->n_steps; i++) {
    step *s = &p->steps[i];
    if (s->dead)
      continue;
    rc = 0;
    if (gs__step_is(s, "Conv"))
      rc = fuse_conv_bn(p, s);
    else if (gs__step_is(s, "MatMul"))
      rc = fuse_matmul_add(p, s);
    else if (gs__step_is(s, "BatchNormalization"))
      fuse_batchnorm_relu(p, s);
    if (rc < 0)
      return rc;
    if (gs__step_is(s, "Conv") || gs__step_is(s, "Gemm") || gs__step_is(s, "MatMul"))
      fuse_activation(p, s);
  }
  drop_dead_steps(p);
  if ((rc = gs__plan_fuse_squeeze_excite(p)) < 0)
    return rc;
  drop_dead_steps(p);
  gs__plan_keep_blocked(p);
  for (int i = 0; i < p->n_steps; i++)
    if (!p->steps[i].dead && gs__step_is(&p->steps[i], "Conv"))
      fuse_residual(p, i);
  drop_dead_steps(p);
  return 0;
}

/* dnnl_conv.c - float32 convolution through oneDNN. The primitive is made
 * once per plan step (for its fixed shapes) and kept in the step's kernel
 * state: oneDNN picks its layouts (blocked, for its fastest kernels), the
 * weights are reordered to that layout once when they are constant, and
 * the activations are reordered from and to NCHW around each call, since
 * the rest of the engine works in NCHW. */
#include "hal/cpu/ops/dnnl_conv.h"

#include "base/error.h"
#include "base/log.h"
#include "hal/cpu/ops/parallel.h"
#include "hal/cpu/ops/transpose_2d.h"
#include "hal/op/op_launch.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One oneDNN engine and stream for the CPU, made at first use. */
static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static bool engine_ok;

static void engine_init(void) {
  engine_ok = dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success;
  if (!engine_ok)
    GS_LOGW("engine", "oneDNN has no CPU engine here; convolutions use im2col + GEMM");
}

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static bool int8_exact;

static void isa_init(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  /* avx512_core_vnni, _bf16 and _amx all carry the VNNI bit (0x40). */
  int8_exact = (isa & 0x40) != 0 || isa == dnnl_cpu_isa_avx2_vnni;
}

/* Asked on every int8 product: found once (oneDNN fixes its ISA at first use). */
bool gs__dnnl_int8_exact(void) {
  pthread_once(&isa_once, isa_init);
  return int8_exact;
}

struct dnnl_engine *gs__dnnl_engine(void) {
  pthread_once(&engine_once, engine_init);
  return engine_ok ? engine : NULL;
}

/* Appends the activation to a chain of post-ops (nothing for none). */
static dnnl_status_t append_activation(dnnl_post_ops_t ops, gs_activation act, float lo,
                                       float hi) {
  dnnl_alg_kind_t alg;
  float alpha = 0.0f, beta = 0.0f;
  switch (act) {
  case GS_ACT_NONE: return dnnl_success;
  case GS_ACT_RELU: alg = dnnl_eltwise_relu; break;
  case GS_ACT_CLIP: alg = dnnl_eltwise_clip, alpha = lo, beta = hi; break;
  case GS_ACT_HARDSWISH: alg = dnnl_eltwise_hardswish; break;
  case GS_ACT_SILU: alg = dnnl_eltwise_swish, alpha = 1.0f; break;
  case GS_ACT_GELU: alg = dnnl_eltwise_gelu_erf; break;
  default: return dnnl_unimplemented;
  }
  return dnnl_post_ops_append_eltwise(ops, 1.0f, alg, alpha, beta);
}

/* The post-ops of a product or convolution: a tensor added to its output
 * (residual: its memory description; NULL for none), then the activation. */
static dnnl_status_t set_post_ops(struct dnnl_primitive_attr *attr,
                                  const dnnl_memory_desc_t *residual, gs_activation act,
                                  float lo, float hi) {
  if (!residual && act == GS_ACT_NONE)
    return dnnl_success;
  dnnl_post_ops_t ops;
  dnnl_status_t st = dnnl_post_ops_create(&ops);
  if (st != dnnl_success)
    return st;
  if (residual)
    st = dnnl_post_ops_append_binary(ops, dnnl_binary_add, residual);
  if (st == dnnl_success)
    st = append_activation(ops, act, lo, hi);
  if (st == dnnl_success)
    st = dnnl_primitive_attr_set_post_ops(attr, ops);
  dnnl_post_ops_destroy(ops);
  return st;
}

int gs__dnnl_set_activation(struct dnnl_primitive_attr *attr, gs_activation act, float lo,
                            float hi) {
  return set_post_ops(attr, NULL, act, lo, hi);
}

typedef struct conv_state {
  dnnl_primitive_t conv, src_reorder, dst_reorder, w_reorder;
  dnnl_memory_t src_plain, src_blocked, dst_plain, dst_blocked, w_plain, w_blocked, bias;
  dnnl_memory_t residual; /* gs_conv_attrs.residual: in the engine's layout of the output */
  dnnl_stream_t stream; /* runs of one plan are serialised, so one stream serves */
  const void *w_cached; /* the constant weights the blocked copy was made from */
  bool failed;          /* oneDNN could not do this convolution: im2col instead */
  /* The primitive reads or writes channels-last where the engine's buffer
   * is NCHW: transposed here (transpose_2d.h), not by oneDNN's reorder,
   * which ran at a fifth of the speed on few channels (ShuffleNet's first
   * convolution, 24 channels out: 18.8 ms for 9.6 M floats). */
  bool src_to_nhwc, dst_from_nhwc;
} conv_state;

static void destroy_state(void *p) {
  conv_state *s = p;
  if (!s)
    return;
  dnnl_primitive_t prims[] = {s->conv, s->src_reorder, s->dst_reorder, s->w_reorder};
  for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
    if (prims[i])
      dnnl_primitive_destroy(prims[i]);
  if (s->stream)
    dnnl_stream_destroy(s->stream);
  dnnl_memory_t mems[] = {s->src_plain, s->src_blocked, s->dst_plain, s->dst_blocked,
                          s->w_plain,   s->w_blocked,   s->bias,      s->residual};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i])
      dnnl_memory_destroy(mems[i]);
  free(s);
}

/* Channels up to which NCHW <-> NHWC is transposed here rather than by
 * oneDNN's reorder: measured on ShuffleNet (AVX-512 Xeon, batch 32), the
 * first convolution (3 channels in, 24 out) went 25.5 -> 20.4 ms with
 * both sides transposed here (its input now goes to oneDNN as NCHW,
 * below), while depthwise convolutions of 116 and 232 channels went
 * 40-70% slower than with oneDNN's reorder. */
#define GS_OWN_TRANSPOSE_CHANNELS 32

/* Whether md is channels-last (NWC, NHWC, NDHWC) over dims `dims`. */
static bool is_nhwc(const dnnl_memory_desc_t *md, int rank, const dnnl_dims_t dims) {
  dnnl_format_tag_t tag = rank == 3 ? dnnl_acb : rank == 4 ? dnnl_acdb : dnnl_acdeb;
  dnnl_memory_desc_t nhwc;
  return rank >= 3 && rank <= 5 &&
         dnnl_memory_desc_init_by_tag(&nhwc, rank, dims, dnnl_f32, tag) == dnnl_success &&
         dnnl_memory_desc_equal(md, &nhwc);
}

/* NCHW -> NHWC (to_nhwc) or back of images [n, c, spatial...] of
 * `shape`, one 2-D transpose per image. */
static void nhwc_transpose(const gs_shape *shape, bool to_nhwc, const void *x, void *y) {
  int64_t n, c, hw;
  gs_launch_split_axis(shape, 1, &n, &c, &hw);
  if (to_nhwc)
    gs__transpose_batch_4(x, y, n, hw, c, hw, c * hw);
  else
    gs__transpose_batch_4(x, y, n, c, hw, c, c * hw);
}

/* Whether oneDNN chose its reference implementation ("ref:any"), a plain
 * loop nest many times slower than its JIT kernels. */
static bool is_reference(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
         impl && strncmp(impl, "ref", 3) == 0;
}

dnnl_format_tag_t gs__dnnl_plain_tag(int rank) {
  return rank == 3 ? dnnl_ncw : rank == 4 ? dnnl_nchw : dnnl_ncdhw;
}

static pthread_once_t block_once = PTHREAD_ONCE_INIT;
static int block_channels;

static void block_init(void) {
  /* The ISA values are sets of bits: AVX-512 (core) where all of its are. */
  unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
  unsigned avx512 = (unsigned)dnnl_cpu_isa_avx512_core;
  block_channels = (isa & avx512) == avx512 ? 16 : 8;
}

/* The channel block oneDNN's convolutions use on this CPU: 16 with
 * AVX-512, else 8. Asked at every convolution's set-up: found once. */
int gs__dnnl_channel_block(void) {
  pthread_once(&block_once, block_init);
  return block_channels;
}

bool gs__dnnl_avx512(void) { return gs__dnnl_channel_block() == 16; }

/* The channel-blocked layout activations keep between two convolutions. */
static dnnl_format_tag_t blocked_tag(int rank) {
  bool wide = gs__dnnl_channel_block() == 16;
  if (rank == 3)
    return wide ? dnnl_aBc16b : dnnl_aBc8b;
  return rank == 4 ? (wide ? dnnl_aBcd16b : dnnl_aBcd8b) : (wide ? dnnl_aBcde16b : dnnl_aBcde8b);
}

dnnl_format_tag_t gs__dnnl_weights_tag(int rank, bool grouped) {
  if (grouped)
    return rank == 3 ? dnnl_goiw : rank == 4 ? dnnl_goihw : dnnl_goidhw;
  return rank == 3 ? dnnl_oiw : rank == 4 ? dnnl_oihw : dnnl_oidhw;
}

dnnl_status_t gs__dnnl_reorder_between(const dnnl_memory_desc_t *from,
                                      const dnnl_memory_desc_t *to, dnnl_primitive_t *out) {
  *out = NULL;
  if (dnnl_memory_desc_equal(from, to))
    return dnnl_success;
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL);
  if (st == dnnl_success) {
    st = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
  }
  return st;
}

/* The convolution's descriptors: the layouts it may choose (`*_any`) and
 * the engine's buffers' (`*_plain`), its weights (any), bias and geometry. */
typedef struct conv_mds {
  dnnl_memory_desc_t src_any, dst_any, w_any, b_md, src_plain, dst_plain, w_plain;
  dnnl_dims_t strides, dil, pl, pr;
} conv_mds;

/* The primitive descriptor. Where the plan keeps a side blocked, the
 * primitive is asked for that layout first: left free, oneDNN 2.6 picks
 * its NHWC kernels (brgconv) on AVX-512, and the reorders to and from them
 * took 12 of ResNet-50's 65 ms. Any layout is the fall-back where only the
 * reference kernel takes the blocked one (RegNetY's grouped convolutions
 * ran 75 times slower on it). An input of up to 4 channels (an image's: a
 * network's first convolution) is asked for as NCHW the same way:
 * oneDNN's first-layer kernel reads it so, where any layout chose
 * channels-last and a reorder before it (ShuffleNet's first convolution at
 * batch 32: 19 -> 13 ms). */
static dnnl_status_t make_pd(const gs_conv_attrs *a, const conv_mds *d,
                             const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd) {
  bool few = !a->src_blocked && a->group == 1 && d->src_plain.dims[1] <= 4;
  bool plain_first = a->src_blocked || a->dst_blocked || few;
  dnnl_status_t st = dnnl_success;
  *pd = NULL;
  for (int pass = plain_first ? 0 : 1; pass < 2; pass++) {
    dnnl_convolution_desc_t cd;
    const dnnl_memory_desc_t *sd =
        pass == 0 && (a->src_blocked || few) ? &d->src_plain : &d->src_any;
    const dnnl_memory_desc_t *dd = pass == 0 && a->dst_blocked ? &d->dst_plain : &d->dst_any;
    st = dnnl_dilated_convolution_forward_desc_init(
        &cd, dnnl_forward_inference, dnnl_convolution_direct, sd, &d->w_any,
        a->has_bias ? &d->b_md : NULL, dd, d->strides, d->dil, d->pl, d->pr);
    if (st == dnnl_success)
      st = dnnl_primitive_desc_create(pd, &cd, attr, engine, NULL);
    if (pass == 1 || (st == dnnl_success && !is_reference(*pd)))
      return st;
    /* No kernel, or only the reference one, for the plain or blocked
     * layout: any layout then. */
    if (st == dnnl_success)
      dnnl_primitive_desc_destroy(*pd);
    *pd = NULL;
    st = dnnl_success;
  }
  return st;
}

/* Where the primitive's layout of one side differs from the engine's
 * buffer: a buffer of the primitive's layout, and either oneDNN's reorder
 * between the two or (own_transpose) the engine's NCHW <-> NHWC. */
static dnnl_status_t join_layouts(const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *prim,
                                  bool to_prim, bool own_transpose, dnnl_primitive_t *reorder,
                                  dnnl_memory_t *separate) {
  if (dnnl_memory_desc_equal(plain, prim))
    return dnnl_success;
  dnnl_status_t st = dnnl_success;
  if (!own_transpose)
    st = gs__dnnl_reorder_between(to_prim ? plain : prim, to_prim ? prim : plain, reorder);
  if (st == dnnl_success)
    st = dnnl_memory_create(separate, prim, engine, DNNL_MEMORY_ALLOCATE);
  return st;
}

static dnnl_status_t build(conv_state *s, const gs_op_call *c) {
  const gs_conv_attrs *a = c->attrs;
  const gs_shape *xs = &c->in[0].shape, *ws = &c->in[1].shape, *ys = &c->out[0].shape;
  int rank = xs->rank;
  bool grouped = a->group > 1;
  dnnl_dims_t src, dst, w, bias = {ys->dims[1]};
  conv_mds d;
  for (int i = 0; i < rank; i++) {
    src[i] = xs->dims[i];
    dst[i] = ys->dims[i];
  }
  int wr = rank + (grouped ? 1 : 0);
  if (grouped) {
    w[0] = a->group;
    w[1] = ws->dims[0] / a->group;
    for (int i = 1; i < rank; i++)
      w[i + 1] = ws->dims[i];
  } else {
    for (int i = 0; i < rank; i++)
      w[i] = ws->dims[i];
  }
  for (int i = 0; i < a->spatial; i++) {
    d.strides[i] = a->stride[i];
    d.dil[i] = a->dilation[i] - 1; /* oneDNN counts the gaps */
    d.pl[i] = a->pad_begin[i];
    d.pr[i] = a->pad_end[i];
  }
  dnnl_status_t st = dnnl_success;
#define TRY(x) \
  if (st == dnnl_success) \
  st = (x)
  TRY(dnnl_memory_desc_init_by_tag(&d.src_any, rank, src, dnnl_f32, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&d.dst_any, rank, dst, dnnl_f32, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&d.w_any, wr, w, dnnl_f32, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&d.b_md, 1, bias, dnnl_f32, dnnl_x));
  /* "plain": the layout of the engine's buffer, NCHW unless the plan keeps
   * it blocked; a reorder joins it to the primitive's where they differ. */
  TRY(dnnl_memory_desc_init_by_tag(&d.src_plain, rank, src, dnnl_f32,
                                   a->src_blocked ? blocked_tag(rank) : gs__dnnl_plain_tag(rank)));
  TRY(dnnl_memory_desc_init_by_tag(&d.dst_plain, rank, dst, dnnl_f32,
                                   a->dst_blocked ? blocked_tag(rank) : gs__dnnl_plain_tag(rank)));
  TRY(dnnl_memory_desc_init_by_tag(&d.w_plain, wr, w, dnnl_f32,
                                   gs__dnnl_weights_tag(rank, grouped)));
  dnnl_primitive_attr_t attr = NULL;
  TRY(dnnl_primitive_attr_create(&attr));
  TRY(set_post_ops(attr, a->residual ? &d.dst_plain : NULL, a->act, a->act_lo, a->act_hi));
  dnnl_primitive_desc_t pd = NULL;
  TRY(make_pd(a, &d, attr, &pd));
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success)
    return st;
  const dnnl_memory_desc_t *src_md = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *dst_md = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  s->src_to_nhwc = !a->src_blocked && src[1] <= GS_OWN_TRANSPOSE_CHANNELS &&
                   is_nhwc(src_md, rank, src);
  s->dst_from_nhwc = !a->dst_blocked && dst[1] <= GS_OWN_TRANSPOSE_CHANNELS &&
                     is_nhwc(dst_md, rank, dst);
  TRY(dnnl_primitive_create(&s->conv, pd));
  /* Plain memories wrap the engine's buffers (handles set per call); the
   * primitive's own layouts have storage of their own. */
  TRY(join_layouts(&d.src_plain, src_md, true, s->src_to_nhwc, &s->src_reorder, &s->src_blocked));
  TRY(join_layouts(&d.dst_plain, dst_md, false, s->dst_from_nhwc, &s->dst_reorder,
                   &s->dst_blocked));
  TRY(join_layouts(&d.w_plain, w_md, true, false, &s->w_reorder, &s->w_blocked));
  s->src_to_nhwc = s->src_to_nhwc && s->src_blocked; /* both layouts one where a side is 1 */
  s->dst_from_nhwc = s->dst_from_nhwc && s->dst_blocked;
  TRY(dnnl_memory_create(&s->src_plain, &d.src_plain, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->dst_plain, &d.dst_plain, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->w_plain, &d.w_plain, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&s->bias, &d.b_md, engine, DNNL_MEMORY_NONE));
  if (a->residual)
    TRY(dnnl_memory_create(&s->residual, &d.dst_plain, engine, DNNL_MEMORY_NONE));
#undef TRY
  dnnl_primitive_desc_destroy(pd);
  return st;
}

static dnnl_status_t reorder(dnnl_stream_t stream, dnnl_primitive_t r, dnnl_memory_t from,
                             dnnl_memory_t to) {
  dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  return dnnl_primitive_execute(r, stream, 2, args);
}

static int conv_run(const gs_op_call *c, float *const *p, bool *done);

/* A 1x1 convolution of stride 1 on NCHW data is one GEMM per image. Where
 * its channels are not a multiple of oneDNN's channel block, oneDNN would
 * reorder its input and output to and from a padded blocked layout, which
 * costs more than the product itself (ShuffleNet's 58 and 116 channels:
 * 10 such convolutions took 7.7 ms through oneDNN, 4.1 ms as GEMMs): the
 * caller's GEMM takes those. */
static bool better_as_gemm(const gs_op_call *c) {
  const gs_conv_attrs *a = c->attrs;
  if (a->group != 1 || a->src_blocked || a->dst_blocked)
    return false;
  for (int i = 0; i < a->spatial; i++)
    if (a->kernel[i] != 1 || a->stride[i] != 1 || a->pad_begin[i] || a->pad_end[i])
      return false;
  int block = gs__dnnl_channel_block();
  return c->in[0].shape.dims[1] % block != 0 || c->out[0].shape.dims[1] % block != 0;
}

/* A small convolution is made and run on one thread (parallel.h): oneDNN
 * fixes a primitive's threads when it makes it. */
int gs__dnnl_conv(const gs_op_call *c, float *const *p, bool *done) {
  *done = false;
  pthread_once(&engine_once, engine_init);
  if (engine_ok && better_as_gemm(c))
    return 0;
  const gs_shape *ws = &c->out[0].shape, *wt = &c->in[1].shape;
  double flops = 2.0 * (double)gs_shape_numel(ws) * (double)gs_shape_numel(wt) /
                 (double)(wt->dims[0] ? wt->dims[0] : 1);
  int saved = gs_parallel_small(flops);
  int rc = conv_run(c, p, done);
  gs_parallel_restore(saved);
  return rc;
}

static int conv_run(const gs_op_call *c, float *const *p, bool *done) {
  *done = false;
  pthread_once(&engine_once, engine_init);
  if (!engine_ok || !c->state)
    return 0;
  conv_state *s = c->state->ptr;
  if (!s) {
    if (!(s = calloc(1, sizeof *s)))
      return gs_error(GS_ENOMEM, "out of memory for the oneDNN state of node %s", c->node_name);
    c->state->ptr = s;
    c->state->free = destroy_state;
    if (build(s, c) != dnnl_success) {
      GS_LOGD("engine", "node %s: oneDNN cannot run this convolution; using im2col", c->node_name);
      s->failed = true;
    }
  }
  if (s->failed)
    return 0;
  const gs_conv_attrs *a = c->attrs;
  if (!s->stream && dnnl_stream_create(&s->stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    s->stream = NULL;
    return 0;
  }
  dnnl_stream_t stream = s->stream;
  dnnl_status_t st = dnnl_success;
  dnnl_memory_set_data_handle(s->src_plain, p[0]);
  dnnl_memory_set_data_handle(s->dst_plain, p[c->n_in]);
  dnnl_memory_set_data_handle(s->w_plain, p[1]);
  if (a->has_bias)
    dnnl_memory_set_data_handle(s->bias, p[2]);
  if (a->residual)
    dnnl_memory_set_data_handle(s->residual, p[3]);
  if (s->w_reorder && (!a->weights_const || s->w_cached != p[1])) {
    st = reorder(stream, s->w_reorder, s->w_plain, s->w_blocked);
    s->w_cached = p[1];
  }
  void *handle = NULL;
  if (st == dnnl_success && s->src_to_nhwc &&
      (st = dnnl_memory_get_data_handle(s->src_blocked, &handle)) == dnnl_success)
    nhwc_transpose(&c->in[0].shape, true, p[0], handle);
  else if (st == dnnl_success && s->src_reorder)
    st = reorder(stream, s->src_reorder, s->src_plain, s->src_blocked);
  if (st == dnnl_success) {
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, s->src_blocked ? s->src_blocked : s->src_plain},
        {DNNL_ARG_WEIGHTS, s->w_blocked ? s->w_blocked : s->w_plain},
        {DNNL_ARG_DST, s->dst_blocked ? s->dst_blocked : s->dst_plain},
    };
    int n_args = 3;
    if (a->has_bias)
      args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, s->bias};
    if (a->residual)
      args[n_args++] =
          (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, s->residual};
    st = dnnl_primitive_execute(s->conv, stream, n_args, args);
  }
  if (st == dnnl_success && s->dst_reorder)
    st = reorder(stream, s->dst_reorder, s->dst_blocked, s->dst_plain);
  if (st == dnnl_success)
    st = dnnl_stream_wait(stream);
  if (st == dnnl_success && s->dst_from_nhwc &&
      (st = dnnl_memory_get_data_handle(s->dst_blocked, &handle)) == dnnl_success)
    nhwc_transpose(&c->out[0].shape, false, handle, p[c->n_in]);
  if (st != dnnl_success)
    return gs_error(GS_EDEVICE, "node %s: oneDNN convolution failed (status %d)", c->node_name,
                    (int)st);
  *done = true;
  return 0;
}

/* op_attrs.h - the parsed attributes of each op, as its infer function
 * leaves them for the kernels of every backend. Flat structs: one free(). */
#ifndef GS_HAL_OP_ATTRS_H
#define GS_HAL_OP_ATTRS_H

#include "hal/op/op_call.h"
#include "hal/op/tensor.h"

/* Activation fused into the op that precedes it (plan_fuse.c fuses them):
 * Relu; Clip to [act_lo, act_hi]; HardSwish; SiLU, x * sigmoid(x) (as
 * exporters write it, Sigmoid then Mul); GELU with erf (Div, Erf, Add,
 * Mul, Mul, as torch writes it). Device kernels take Relu only: the plan
 * fuses the others where the device's kernel says it runs them. */
typedef enum {
  GS_ACT_NONE,
  GS_ACT_RELU,
  GS_ACT_CLIP,
  GS_ACT_HARDSWISH,
  GS_ACT_SILU,
  GS_ACT_GELU
} gs_activation;

/* The element-wise ops' parameters: alpha and beta as each op names
 * them (LeakyRelu, Elu, Celu, ThresholdedRelu: alpha; HardSigmoid: alpha,
 * beta; Selu: alpha, gamma in beta; Shrink: lambd in alpha, bias in beta). */
typedef struct gs_unary_attrs {
  float alpha, beta;
  bool gelu_tanh;      /* Gelu approximate="tanh" */
  bool fmod;           /* Mod: C's remainder (sign of the dividend), else Python's */
  bool detect_pos, detect_neg; /* IsInf */
  bool shift_right;    /* BitShift direction="RIGHT" */
} gs_unary_attrs;

typedef struct gs_cast_attrs {
  gs_dtype to;
} gs_cast_attrs;

typedef struct gs_axis_attrs {
  int axis; /* normalised */
} gs_axis_attrs;

typedef struct gs_gemm_attrs {
  float alpha, beta;
  bool trans_a, trans_b;
  int64_t m, n, k;
  bool b_packed; /* set by the plan: B is constant and packed (op_packed.h); trans_b is moot */
  gs_activation act;
  float act_lo, act_hi; /* GS_ACT_CLIP's bounds */
} gs_gemm_attrs;

/* MatMul, and MatMul+Add fused: out = a @ b (+ bias broadcast on the last dim). */
typedef struct gs_matmul_attrs {
  int64_t batch, m, n, k;
  /* Batch strides of a and b in elements (0: broadcast), per flattened batch. */
  int batch_rank;
  int64_t batch_dims[GS_MAX_DIMS];
  int64_t a_batch_strides[GS_MAX_DIMS], b_batch_strides[GS_MAX_DIMS];
  bool has_bias; /* fused Add: input 2, of n elements */
  bool b_packed; /* set by the plan: batch 1, B constant and packed (op_packed.h) */
  gs_activation act;
  float act_lo, act_hi; /* GS_ACT_CLIP's bounds */
} gs_matmul_attrs;

typedef struct gs_conv_attrs {
  int spatial; /* 1, 2 or 3 */
  int64_t group;
  int64_t kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3], output_padding[3];
  bool has_bias;
  bool weights_const; /* set by the plan: the weights never change between runs */
  gs_activation act;
  float act_lo, act_hi; /* GS_ACT_CLIP's bounds */
  /* Set by the plan between two convolutions on the CPU (plan_fuse.c): the
   * input is read, the output written, in oneDNN's channel-blocked layout
   * (nChw8c or nChw16c, by the CPU), not NCHW; channels a multiple of the
   * block. */
  bool src_blocked, dst_blocked;
  /* Set by the plan where the output is blocked (plan_fuse.c): a fourth
   * input, of the output's shape and layout, is added to the sum before
   * the activation (a residual connection); in[2] is omitted without a bias. */
  bool residual;
} gs_conv_attrs;

/* SqueezeExcite, a step the plan makes (plan_squeeze.c; the CPU's kernel,
 * k_squeeze.c): y = x * gate(W2 act(W1 mean(x) + b1) + b2), per image and
 * channel, for x [N, C, spatial...] and mean(x) [N, C] over the spatial
 * dims. in[1] W1 [R, C, 1...], in[2] b1 [R], in[3] W2 [C, R, 1...], in[4]
 * b2 [C]; a bias left out (dtype GS_DT_INVALID) is zero. */
typedef enum { GS_GATE_SIGMOID, GS_GATE_HARD_SIGMOID } gs_gate;
typedef struct gs_squeeze_excite_attrs {
  int64_t squeezed;         /* R */
  gs_activation act;        /* after W1 */
  float act_lo, act_hi;     /* GS_ACT_CLIP's bounds */
  gs_gate gate;
  float gate_alpha, gate_beta; /* HardSigmoid's: max(0, min(1, alpha v + beta)) */
  /* Set by the plan (plan_layout.c): x and y are in oneDNN's channel-blocked
   * layout, blocks of this many channels; 0: NCHW. */
  int block;
} gs_squeeze_excite_attrs;

typedef struct gs_pool_attrs {
  int spatial;
  int64_t kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
  bool count_include_pad;
  bool global;
  int lp; /* LpPool and GlobalLpPool: the norm's p; 0 for max and average pooling */
  /* GlobalAveragePool on the CPU (plan_layout.c): the input is in oneDNN's
   * channel-blocked layout, blocks of this many channels; 0: NCHW. The
   * output, [N, C, 1...], is the same bytes in either layout. */
  int src_block;
} gs_pool_attrs;

typedef struct gs_norm_attrs {
  float epsilon;
  int axis; /* LayerNormalization: first normalised axis */
  /* BatchNormalization: the activation after it, run in its pass
   * (plan_fuse.c); GS_ACT_RELU or none, taken by the CPU's float32 kernel. */
  gs_activation act;
} gs_norm_attrs;

typedef struct gs_reduce_attrs {
  bool reduce[GS_MAX_DIMS]; /* which input dims are reduced */
  bool keepdims;
  bool select_last; /* ArgMax */
} gs_reduce_attrs;

typedef struct gs_topk_attrs {
  int axis;
  int64_t k;
  bool largest, sorted;
} gs_topk_attrs;

typedef struct gs_transpose_attrs {
  int perm[GS_MAX_DIMS];
} gs_transpose_attrs;

typedef struct gs_slice_attrs {
  int64_t start[GS_MAX_DIMS], step[GS_MAX_DIMS]; /* per input dim, resolved */
} gs_slice_attrs;

typedef struct gs_constant_attrs {
  uint8_t value[8]; /* ConstantOfShape: one element of the output type */
} gs_constant_attrs;

typedef enum { GS_PAD_CONSTANT, GS_PAD_REFLECT, GS_PAD_EDGE, GS_PAD_WRAP } gs_pad_mode;

typedef struct gs_pad_attrs {
  gs_pad_mode mode;
  int64_t begin[GS_MAX_DIMS], end[GS_MAX_DIMS]; /* may be negative (crop) */
  double value;
} gs_pad_attrs;

typedef enum { GS_RESIZE_NEAREST, GS_RESIZE_LINEAR, GS_RESIZE_CUBIC } gs_resize_mode;
typedef enum {
  GS_COORD_HALF_PIXEL,
  GS_COORD_ASYMMETRIC,
  GS_COORD_ALIGN_CORNERS,
  GS_COORD_PYTORCH_HALF_PIXEL,
  GS_COORD_HALF_PIXEL_SYMMETRIC,
  GS_COORD_TF_CROP_AND_RESIZE,
} gs_coord_mode;
typedef enum {
  GS_NEAREST_ROUND_PREFER_FLOOR,
  GS_NEAREST_ROUND_PREFER_CEIL,
  GS_NEAREST_FLOOR,
  GS_NEAREST_CEIL,
} gs_nearest_mode;

typedef struct gs_resize_attrs {
  gs_resize_mode mode;
  gs_coord_mode coord;
  gs_nearest_mode nearest;
  double scale[GS_MAX_DIMS]; /* output / input per dim */
  /* The resized length as half_pixel_symmetric and tf_crop_and_resize use
   * it: scale * input (not rounded) when scales are given, else the size. */
  double out_len[GS_MAX_DIMS];
  double cubic_a;           /* cubic_coeff_a */
  bool exclude_outside;     /* cubic: taps outside the input get no weight */
  bool antialias;           /* linear and cubic downscaling widen the filter */
  double extrapolation;     /* tf_crop_and_resize: the value outside the input */
  double roi_start[GS_MAX_DIMS], roi_end[GS_MAX_DIMS]; /* tf_crop_and_resize, normalised */
  /* What the device kernels (devops) cover: nearest and linear, the first
   * four coordinate modes, no antialias. */
  bool device_ok;
} gs_resize_attrs;

/* gpusrv's own op GS_IMAGE_TAPS_OP, which no model names: one pass of a
 * Pillow resize over each image of a batch (engine/image_pack.c queues it;
 * the kernel is op_kernels.h's image_taps_u8, which says what a pass
 * describes). Operands: the pixels (uint8), the table (uint8: the taps,
 * and `images` taps_pass records at byte passes_at), the output (uint8);
 * `elements` output bytes in all. */
#define GS_IMAGE_TAPS_OP "gpusrv.ImageTaps"
#define GS_IMAGE_TAPS_FRACTION_BITS 22 /* the weights' fixed point */
typedef struct gs_image_taps_attrs {
  int64_t images, passes_at, elements;
} gs_image_taps_attrs;
/* A taps_pass record of the table, field for field. */
typedef struct gs_image_taps_pass {
  int64_t first, x_at, y_at, taps_at, n_out, inner, in_tap, in_line, ksize;
} gs_image_taps_pass;

typedef struct gs_shape_attrs {
  int start, end; /* Shape: the slice of dims it returns */
} gs_shape_attrs;

/* The indexing family (ops_index.c): what each op of it reads. */
typedef enum {
  GS_SCATTER_NONE, GS_SCATTER_ADD, GS_SCATTER_MUL, GS_SCATTER_MAX, GS_SCATTER_MIN
} gs_scatter_reduction;

typedef struct gs_index_attrs {
  int axis;                        /* normalised: GatherElements, ScatterElements, CumSum, OneHot, Hardmax */
  int batch_dims;                  /* GatherND */
  gs_scatter_reduction reduction;  /* ScatterElements, ScatterND */
  bool upper;                      /* Trilu */
  bool exclusive, reverse;         /* CumSum */
  bool crd;                        /* DepthToSpace mode="CRD" */
  int64_t k;                       /* Trilu's diagonal, EyeLike's */
  int64_t blocksize;               /* DepthToSpace, SpaceToDepth */
  int64_t depth;                   /* OneHot */
  double start, delta;             /* Range */
  bool align_corners;              /* AffineGrid */
  bool periodic;                   /* the windows (ops_signal.c) */
  /* Col2Im: spatial dims, image and block shapes, dilations, pads,
   * strides, and blocks per dim in offset; AffineGrid: spatial dims and
   * sizes in image; CenterCropPad: per dim, the input position of output
   * 0 (negative where it pads). */
  int spatial;
  int64_t image[GS_MAX_DIMS], block[GS_MAX_DIMS], dilation[GS_MAX_DIMS];
  int64_t pad_begin[GS_MAX_DIMS], stride[GS_MAX_DIMS], offset[GS_MAX_DIMS];
} gs_index_attrs;

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (ops_loss.c). */
typedef enum { GS_LOSS_NONE, GS_LOSS_SUM, GS_LOSS_MEAN } gs_loss_reduction;
typedef struct gs_loss_attrs {
  gs_loss_reduction reduction;
  bool has_ignore;
  int64_t ignore_index;
} gs_loss_attrs;

/* LRN, GroupNormalization, MeanVarianceNormalization, LpNormalization
 * (ops_normalize.c). */
typedef struct gs_normalize_attrs {
  float alpha, beta, bias, epsilon;
  int axis, p;           /* LpNormalization: normalised axis, 1 or 2 */
  int64_t size;          /* LRN: channels in the window */
  int64_t groups;        /* GroupNormalization */
  bool per_channel;      /* GroupNormalization: scale and bias per channel, else per group */
  bool reduce[GS_MAX_DIMS]; /* MeanVarianceNormalization's axes */
} gs_normalize_attrs;

/* The quantised ops (ops_quant.c, ops_qoperator.c): QuantizeLinear,
 * DequantizeLinear, and the integer ops of QOperator models. Which
 * inputs an op reads (its scales and zero points) is fixed by the op;
 * these are its shapes and attributes. */
typedef struct gs_quant_attrs {
  int axis;           /* normalised; the axis scales run along when not one;
                         QLinearSoftmax's and QLinearConcat's axis */
  int64_t block_size; /* blocked quantisation: elements per scale along axis; 0: none */
  gs_matmul_attrs matmul; /* the products: QLinearMatMul, MatMulInteger, QGemm, ... */
  gs_conv_attrs conv;     /* QLinearConv, ConvInteger */
  gs_pool_attrs pool;     /* QLinearAveragePool */
  float alpha;            /* QGemm's product scale; QLinearLeakyRelu's slope */
  bool trans_a, trans_b;  /* QGemm */
  bool channels_last;     /* QLinearGlobalAveragePool, QLinearAveragePool: NHWC */
  bool softmax_2d;        /* QLinearSoftmax of opset < 13: rows of [..axis) x [axis..) */
  bool b_const;           /* set by the plan: the products' B is a constant (a weight) */
} gs_quant_attrs;

/* Einsum (ops_einsum.c): every label numbered, each operand's labels. */
#define GS_EINSUM_MAX_LABELS 16
typedef struct gs_einsum_attrs {
  int n_labels;
  int64_t size[GS_EINSUM_MAX_LABELS];     /* each label's extent */
  int n_in;
  int in_rank[GS_OP_MAX_IO];
  int8_t in_label[GS_OP_MAX_IO][GS_MAX_DIMS]; /* label of each dim of each input */
  int out_rank;
  int8_t out_label[GS_MAX_DIMS];
} gs_einsum_attrs;

/* RNN, GRU and LSTM (ops_rnn.c). */
typedef enum { GS_RNN_PLAIN, GS_RNN_GRU, GS_RNN_LSTM } gs_rnn_kind;
typedef enum {
  GS_ACT_FN_SIGMOID, GS_ACT_FN_TANH, GS_ACT_FN_RELU, GS_ACT_FN_HARD_SIGMOID,
  GS_ACT_FN_LEAKY_RELU, GS_ACT_FN_AFFINE, GS_ACT_FN_SCALED_TANH, GS_ACT_FN_ELU,
  GS_ACT_FN_SOFTSIGN, GS_ACT_FN_SOFTPLUS, GS_ACT_FN_THRESHOLDED_RELU
} gs_act_fn;
typedef struct gs_rnn_attrs {
  gs_rnn_kind kind;
  int64_t seq, batch, input, hidden;
  int dirs;           /* 1 or 2 */
  bool reverse;       /* direction="reverse" (one direction) */
  bool batch_first;   /* layout=1 */
  float clip;         /* 0: none */
  bool input_forget, linear_before_reset;
  /* Per direction: f, g (and h for LSTM), with their alpha and beta. */
  gs_act_fn act[2][3];
  float act_alpha[2][3], act_beta[2][3];
} gs_rnn_attrs;

/* Attention (opsets 23 and 24, ops_attention.c), in its 4-D form: Q
 * [batch, q_heads, q_seq, head], K [batch, kv_heads, kv_seq, head], V
 * [batch, kv_heads, kv_seq, v_head]; 3-D inputs hold [batch, seq, heads x
 * head] instead. past_key and past_value (4-D) come before K and V along
 * the sequence: total = past + kv_seq. */
typedef struct gs_attention_attrs {
  int64_t batch, q_heads, kv_heads, q_seq, kv_seq, past, total, head, v_head;
  bool three_d;        /* Q, K, V and Y are 3-D */
  bool causal;         /* query i sees keys j <= i + past */
  float scale, softcap; /* softcap 0: none */
  int qk_mode;         /* what the 4th output holds: 0 scores, 1 + mask, 2 softcapped, 3 softmax */
  bool has_mask, mask_bool;
  int64_t mask_dims[4]; /* the mask's shape right-aligned to 4 dims (1s before) */
  bool has_past, has_nonpad; /* nonpad_kv_seqlen (opset 24): keys j >= it are masked */
  /* Set by the plan only, where it runs MatMul, scale, mask, Softmax and
   * MatMul as one Attention (plan_attention.c): K is given as its
   * transpose, [batch, kv_heads, head, kv_seq] (heads 1 for a 3-D graph),
   * as the graph's first MatMul read it. */
  bool keys_transposed;
} gs_attention_attrs;

/* RotaryEmbedding (opset 23, ops_attention.c): X 4-D [batch, heads, seq,
 * head] or 3-D [batch, seq, heads x head]; the first rot_dim of each head
 * rotated by the cos and sin caches' row for its position, halves paired
 * (x[i], x[i + rot_dim/2]) or, interleaved, neighbours (x[2i], x[2i+1]). */
typedef struct gs_rotary_attrs {
  int64_t batch, seq, heads, head, rot_dim;
  bool three_d, interleaved;
  bool has_positions; /* position_ids [batch, seq] pick rows of caches [max_pos, rot_dim/2];
                       * without them the caches are [batch, seq, rot_dim/2] */
  int64_t max_pos;
} gs_rotary_attrs;

/* TensorScatter (opset 24, ops_attention.c): a key/value cache with the
 * update written along axis from each batch's write index (circular: modulo
 * the cache's length). */
typedef struct gs_tensor_scatter_attrs {
  int axis; /* normalised, past the batch */
  bool circular;
} gs_tensor_scatter_attrs;

/* DFT and STFT (ops_signal.c). The input is [outer..., axis, inner..., 1 or
 * 2], real or (real, imaginary) pairs; the output [outer..., out_len,
 * inner..., 2]. STFT: [batch, signal, 1 or 2] cut into frames of `window`
 * samples every `step`, each transformed at `length`: [batch, frames,
 * out_len, 2]. */
typedef struct gs_dft_attrs {
  int64_t outer, in_len, inner; /* the input around the axis */
  int64_t length;               /* of each transform: dft_length, or STFT's frame_length */
  int64_t out_len;              /* length, or its onesided half, length / 2 + 1 */
  bool complex_in;              /* the input's last dim is 2 */
  bool inverse;                 /* DFT: scaled by 1 / length, as numpy's ifft */
  int64_t frames, step, window; /* STFT; window: samples taken from each frame */
  bool has_window;              /* STFT: input 2, else a rectangular window */
} gs_dft_attrs;

/* MelWeightMatrix (ops_signal.c): [dft_length / 2 + 1, mel_bins]. */
typedef struct gs_mel_attrs {
  int64_t mel_bins, dft_length;
} gs_mel_attrs;

/* RoiAlign (ops_detect.c). */
typedef struct gs_roi_align_attrs {
  bool max_mode;       /* mode="max", else "avg" */
  bool half_pixel;     /* coordinate_transformation_mode="half_pixel" (opset 16's default) */
  int64_t out_h, out_w;
  int64_t sampling_ratio; /* 0: as many as the bin spans */
  float spatial_scale;
} gs_roi_align_attrs;

/* NonMaxSuppression (ops_detect.c). Its output's size is its result, so
 * the planner computes it on the host once the inputs' values are known
 * (while planning the graph after it): inferring it selects the boxes, and
 * the kernel writes the selection out. */
typedef struct gs_nms_attrs {
  int64_t count;
  int64_t selected[]; /* count rows of (batch, class, box) */
} gs_nms_attrs;

#endif

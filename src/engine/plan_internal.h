/* plan_internal.h - what the files of a plan share (plan.c builds and runs
 * it, plan_fuse.c fuses its steps): its values, its steps and the plan. */
#ifndef GS_ENGINE_PLAN_INTERNAL_H
#define GS_ENGINE_PLAN_INTERNAL_H

#include "engine/engine.h"
#include "engine/plan_stages.h"
#include "engine/weight_set.h"
#include "hal/op/op_call.h"

#include <pthread.h>
#include <string.h>

typedef struct value {
  const char *name;   /* borrowed from the model */
  gs_dtype dtype;
  gs_shape shape;
  size_t bytes;
  const void *data;   /* host data when known while planning, else NULL */
  bool owns_data;
  bool owns_name; /* values the plan made up (fused weights) */
  int def, last_use;  /* step that writes it (-1: before the first), last step reading it */
  int64_t offset;     /* in the arena, or in the weights buffer when `data` */
  /* A weight the plans of one model can share (weight_set.h): the model's
   * host data it comes from; NULL for what the plan folds for its shapes. */
  const void *share_key;
  bool in_set;         /* read from the plan's weight set ... */
  gs_buffer_t *shared; /* ... from this copy */
  /* During gs_plan_run_buffers: the caller's buffer that holds this input
   * or receives this output in place of the arena (no copy). */
  gs_buffer_t *bound;
  bool in_arena;
  bool graph_output;
  /* The model inputs (bits 0..63) whose values this value depends on. */
  uint64_t from_inputs;
  bool graph_input; /* a model input itself, as the caller gives it */
  /* A value that shares another's place in the arena (a Reshape's output
   * and its input, which dies there): that value's index, else -1. A
   * Slice's output may be a view of part of its input's place: it starts
   * view_offset bytes into it (0 otherwise). */
  int alias_of;
  int64_t view_offset;
  bool blocked; /* kept in oneDNN's channel-blocked layout (plan_layout.c) */
} value;

/* Where a run's time goes by section (plan_sections.c). */
typedef struct gs_plan_sections gs_plan_sections;

typedef struct step {
  const gs_node *node; /* NULL for the casts a reduced-precision plan adds */
  gs_op_call *call;
  int in[GS_OP_MAX_IO], out[GS_OP_MAX_IO]; /* value indices, -1: omitted */
  bool dead;                               /* fused into another step */
  bool empty;                              /* every output empty: nothing to launch */
  bool on_cpu; /* runs on the host: the device lacks the kernel, or host_section */
  bool host_section; /* a step of gs_plan_options.host_sections (never in place) */
  bool in_place;                           /* output shares its input's bytes: nothing to launch */
  /* For a fallback step: the CPU kernel, and the host address of each
   * operand (constant data, or its place in the plan's staging buffer). */
  const gs_host_kernel *cpu_kernel;
  void *host[GS_OP_MAX_IO];
  /* ... and the operands not copied: an input a step before it on the CPU
   * left in the staging, an output only such steps read (bit per operand,
   * inputs first, as host[]). */
  uint64_t stays_on_host;
} step;

struct gs_plan {
  const gs_model *model;
  gs_device_t *device;
  gs_strmap index;
  value *values;
  int n_values, cap_values;
  step *steps;
  int n_steps;
  int *inputs, *outputs; /* value indices of the graph's inputs and outputs */
  gs_buffer_t *arena, *weights;
  gs_weight_set *weight_set; /* NULL: every weight in `weights` */
  gs_buffer_t *staging; /* pinned host memory for steps that run on the CPU instead */
  gs_stream_t *stream;
  pthread_mutex_t run_lock;
  /* The type float32 tensors take in this plan: GS_DT_FLOAT16 or
   * GS_DT_BFLOAT16 (reduced precision), GS_DT_FLOAT64 (fp64); INVALID: float32. */
  gs_dtype float_type;
  gs_strmap keep_f32; /* values that must stay float32 (Resize's roi and scales) */
  /* Inputs planned with their values (engine.h): a copy of each, which
   * every run's input must equal. */
  uint64_t baked;
  void **baked_values;
  size_t *baked_bytes; /* as the caller gives them (float32 stays 4 bytes) */
  /* While planning: the inputs whose values a node asked for, the node
   * (index into the model's nodes) and whether it asked for a computed
   * value rather than a model input itself. */
  uint64_t wants;
  int wanting_node;
  bool wants_computed;
  bool must_cut; /* the node runs graphs (If): only a plan in stages runs it */
  /* A plan made in stages (plan_stages.h): everything above but model,
   * device and report is unused then. */
  gs_plan_stages *stages;
  /* A plan across devices (plan_chain.h): likewise, everything above but
   * model, device and report is unused then. */
  struct gs_plan_chain *chain;
  gs_plan_report report;
  uint64_t *step_ns;      /* profiling (gs_plan_profile_start): per step, summed */
  uint64_t profiled_runs;
  gs_plan_sections *sections; /* gs_plan_time_sections; NULL: not timed */
};

/* The index among `names` of the section node `node_name` belongs to (its
 * name is "<section>/..."), or -1 (plan_sections.c). */
int gs__plan_section_of(const char *node_name, int n, const char *const *names);

/* Adds a value (its name borrowed unless owns_name is set after); returns
 * its index or a GS_E code. May move p->values. */
int gs__plan_add_value(gs_plan *p, const char *name, gs_dtype dt, const gs_shape *shape);
/* Frees a step's call with its attrs and kernel state. */
void gs__plan_free_call(gs_op_call *c);
/* The one live step that reads value v, or -1 if none or several, or v is
 * a graph output (plan_fuse.c). */
int gs__plan_sole_consumer(gs_plan *p, int v);
/* The live step whose first output is v, or -1 (an input or a weight). */
int gs__plan_producer(const gs_plan *p, int v);
/* A fused step's call (op_type, a copy of attrs, inputs ins[0..n_in), -1
 * where left out, step s's output) in place of step s's, if the device
 * takes it: 1 replaced, 0 not (step s unchanged), or GS_ENOMEM
 * (plan_fuse.c). The caller marks the steps it replaces dead. */
int gs__plan_replace_step(gs_plan *p, int s, const char *op_type, const void *attrs,
                          size_t attrs_size, const int *ins, int n_in);
/* Whether value v is a float32 known while planning with one element (of
 * any shape): its value in *x (plan_fuse.c). */
bool gs__plan_known_scalar(gs_plan *p, int v, float *x);
/* Fuses the plan's steps where a kernel can do two ops' work in one pass
 * (plan_fuse.c), and drops the steps that were fused away. */
int gs__plan_fuse(gs_plan *p);
/* Runs attention's MatMul, scale, mask, Softmax and MatMul as one
 * Attention step where the device has the kernel (plan_attention.c);
 * called by gs__plan_fuse first, before a product takes the mask as bias. */
int gs__plan_fuse_attention(gs_plan *p);
/* Runs a squeeze-excitation block (GlobalAveragePool, two 1x1 Convs, a
 * gate, Mul) as one SqueezeExcite step where the device has the kernel
 * (plan_squeeze.c); called by gs__plan_fuse once activations are fused. */
int gs__plan_fuse_squeeze_excite(gs_plan *p);
/* Runs a channel shuffle (Concat, Reshape, Transpose) as one Concat step
 * (plan_shuffle.c); called by gs__plan_fuse. */
void gs__plan_fuse_shuffle(gs_plan *p);
/* Marks the CPU convolutions whose data stays in oneDNN's blocked layout
 * (plan_layout.c); called by gs__plan_fuse once the fused steps are gone. */
void gs__plan_keep_blocked(gs_plan *p);
/* Stores constant weights in the layout their kernels read fastest
 * (plan_weights.c): a product's B packed where the device takes it so. */
int gs__plan_lay_out_weights(gs_plan *p);

/* Section timing's hooks in a run (plan_sections.c), under the run lock
 * and only where p->sections: begin before the first step, step before
 * each step's launch, end after the last, add once the run has
 * synchronised without an error. */
void gs__plan_sections_begin(gs_plan *p);
void gs__plan_sections_step(gs_plan *p, int step_index);
void gs__plan_sections_end(gs_plan *p);
void gs__plan_sections_add(gs_plan *p);
void gs__plan_sections_free(gs_plan_sections *s);

static inline bool gs__step_is(const step *s, const char *name) {
  return strcmp(s->call->op_type, name) == 0;
}

#endif

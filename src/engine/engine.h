/* engine.h - the compute engine: load ONNX models (model.h), build a plan
 * for a device and input shapes, and run it. */
#ifndef GS_ENGINE_H
#define GS_ENGINE_H

#include "engine/model.h"
#include "hal/op/tensor.h"
#include "hal/hal.h"

/* Registers the engine's kernels with the backends. Call once after
 * gs_hal_init(). */
int gs_engine_init(void);

typedef struct gs_plan gs_plan;

/* Precision of a plan's tensors. FP16 and BF16 convert the float32 weights
 * once and keep every float32 tensor in 16 bits, where the device can
 * (caps.half_precision); FP64 keeps them in float64 (scientific models
 * exported in float32), on any device. Float32 inputs and outputs are
 * converted at the plan's edges. */
typedef enum {
  GS_PRECISION_FP32,
  GS_PRECISION_FP16,
  GS_PRECISION_BF16,
  GS_PRECISION_FP64
} gs_precision;

/* "fp32", "fp16", "bf16", "fp64", as configurations and the command line
 * write them: by gs_precision, NULL after the last (a table's word list). */
extern const char *const gs_precision_names[];
const char *gs_precision_name(gs_precision p);
/* The precision named `name`; false when it names none. */
bool gs_precision_from_name(const char *name, gs_precision *out);

typedef struct gs_weight_set gs_weight_set; /* weight_set.h */

typedef struct gs_plan_options {
  gs_device_t *device;    /* NULL: the first device */
  gs_precision precision; /* GS_PRECISION_FP32 unless asked */
  /* Weights shared with other plans of the model on the device (NULL: the
   * plan uploads its own); it must outlive the plan. */
  gs_weight_set *weights;
  /* The inputs' values in host memory, one per model input in order (the
   * array or an entry may be NULL). Read only while planning, and only
   * for inputs whose values fix shapes (a Reshape's shape, a Range's
   * limit, Resize's scales): the plan is then made for those values, and
   * runs with others are refused (gs_plan_fits). */
  const void *const *input_values;
  /* Host threads the plan's kernels may use at once, where the device runs
   * them on the host (the CPU); 0: all cores of the device
   * (gs_stream_set_threads). */
  int threads;
  /* The same bits from every run, whatever the instance count or the cores
   * (issue 22's `deterministic`): kernels on the host run on one thread,
   * since oneDNN's GEMM and convolutions may split a sum differently on
   * more. The device kernels already sum in a fixed order, without atomics. */
  bool deterministic;
  /* Iterations one Loop node may run in a run before the run fails (a Loop
   * whose condition never turns false would run forever); 0: 10 million. */
  int64_t loop_limit;
  /* Sections (nodes named "<section>/<node>", as an ensemble's steps are)
   * whose kernels run on the host, as a step the device has no kernel for
   * does: an ensemble's step whose model is placed on the CPU. A value
   * crosses between the device and the host once at the sections' edges;
   * the values between their own nodes stay in host memory. NULL: none.
   * No effect on a device whose memory is the host's. Borrowed: the names
   * must outlive the plan. */
  const char *const *host_sections;
  int n_host_sections;
  /* Sections whose kernels run on another device: device_sections[i] on
   * section_devices[i]; a section listed in neither runs on `device`. The
   * plan is then a chain of parts, one per change of device in an order of
   * data that keeps each device's nodes together, and a value crosses
   * between devices only where a part reads what a part on another device
   * made (plan_chain.h). Shapes that depend on
   * values are not supported then. Borrowed, as host_sections. */
  const char *const *device_sections;
  gs_device_t *const *section_devices;
  int n_device_sections;
} gs_plan_options;

/* Builds a plan of `model` for the given shapes of its inputs (one per
 * model input, in order): fixes every shape, folds constants, fuses
 * MatMul+Add, Conv+BatchNormalization and a following Relu, and lays out
 * one arena by liveness. The plan keeps a pointer to the model, which must
 * outlive it. The caller destroys it with gs_plan_destroy(). Shapes that do
 * not fit the model give GS_EINVAL naming the input, expected and got. */
int gs_plan_create(const gs_model *model, const gs_shape *input_shapes,
                   const gs_plan_options *options, gs_plan **out);
void gs_plan_destroy(gs_plan *plan);
/* Whether the plan was made for the values of some input (see
 * input_values), and whether `inputs` (host memory, one per model input)
 * hold those values: callers that cache plans by shapes check both. */
bool gs_plan_takes_values(const gs_plan *plan);
bool gs_plan_fits(const gs_plan *plan, const void *const *inputs);

/* Whether the sizes of the plan's outputs are known only after a run: a
 * node's output size depends on values computed from the inputs (NonZero,
 * NonMaxSuppression), so the plan is made in stages (plan_stages.h). Such
 * a plan runs with gs_plan_run_alloc only, and gs_plan_output gives the
 * shapes the model declares (-1 where unknown) and no size. */
bool gs_plan_sizes_at_run(const gs_plan *plan);

/* The device memory the plan holds now: its arena and its own weights
 * (weights it shares with a weight set are the set's). A plan made in stages
 * holds those of every stage plan it keeps, which grows as its runs plan the
 * later stages for the shapes they meet: read it again after a run. */
uint64_t gs_plan_device_bytes(const gs_plan *plan);

/* Runs the plan: inputs[i] holds input i (host memory of the plan's shape
 * and type), outputs[i] receives output i. One run at a time per plan;
 * concurrent callers are serialised. */
int gs_plan_run(gs_plan *plan, const void *const *inputs, void *const *outputs);
/* The same with inputs and outputs in device buffers of the plan's device
 * (from offset 0, at least the plan's sizes): for pipelines that copy
 * host to device and back in stages of their own. */
int gs_plan_run_buffers(gs_plan *plan, gs_buffer_t *const *inputs, gs_buffer_t *const *outputs);
/* The device the plan runs on. */
gs_device_t *gs_plan_device(const gs_plan *plan);
/* The devices other than gs_plan_device on which a plan across devices
 * (gs_plan_options.device_sections) holds memory, each once with its
 * bytes: their count (0 for any other plan), of which the first `max` are
 * filled in. */
int gs_plan_other_devices(const gs_plan *plan, gs_device_t **devices, uint64_t *bytes, int max);

typedef struct gs_plan_value_info {
  const char *name;
  gs_dtype dtype;
  gs_shape shape;
  size_t bytes;
  /* Known while planning (a constant, or computed from shapes alone): its
   * bytes, which the plan holds; NULL when a run computes it. */
  const void *data;
} gs_plan_value_info;

int gs_plan_input_count(const gs_plan *plan);
int gs_plan_output_count(const gs_plan *plan);
void gs_plan_input(const gs_plan *plan, int i, gs_plan_value_info *out);
void gs_plan_output(const gs_plan *plan, int i, gs_plan_value_info *out);

/* gs_plan_run for every plan, sizing the outputs as the run found them:
 * each outputs[i] is allocated (malloc; the caller frees it, also when it
 * is empty) and described in info[i] (data NULL). On failure nothing is
 * left allocated. */
int gs_plan_run_alloc(gs_plan *plan, const void *const *inputs, void **outputs,
                      gs_plan_value_info *info);

typedef struct gs_plan_report {
  int nodes;        /* in the model */
  int steps;        /* kernels a run launches */
  int folded;       /* nodes computed while planning */
  int fused;        /* nodes merged into another's kernel */
  int cpu_fallback; /* steps that run on the CPU because the device lacks the kernel */
  int host_steps;   /* steps of gs_plan_options.host_sections run on the host */
  /* Copies between the device and the host that a run makes around the
   * steps run on the host, each way, and their bytes. */
  int host_copies[2]; /* [0]: to the device, [1]: to the host */
  uint64_t host_copy_bytes[2];
  uint64_t host_staging_bytes; /* the pinned host memory those steps' operands take */
  uint64_t host_staging_naive_bytes; /* ... were no two kept values to share a place */
  /* A chain across devices (gs_plan_options.device_sections): its parts,
   * and what those on other devices than the plan's hold there (the other
   * figures are of the parts on the plan's device). */
  int chain_parts;
  uint64_t other_devices_bytes;
  int kept_blocked; /* values kept in oneDNN's blocked layout (between convolutions, through
                     * the elementwise ops between them) */
  int in_place;     /* Reshapes and the like whose output shares their input's bytes */
  int slice_views;  /* of them, Slices whose output is a contiguous part of their input */
  int overwritten;  /* elementwise steps that write over an input dying there */
  int packed;       /* products whose constant B is stored packed for the device's kernel */
  int attention;    /* MatMul, scale, mask, Softmax, MatMul run as one Attention step */
  int squeeze_excite; /* GlobalAveragePool, Conv, Conv, gate, Mul run as one step */
  char fallback_ops[256]; /* their ops, "Conv, Relu" */
  uint64_t arena_bytes;  /* peak of the liveness-planned arena */
  uint64_t naive_bytes;  /* sum of all intermediate tensors, without reuse (a copy-free
                          * reshape's output not counted: it is its input) */
  uint64_t weights_bytes;        /* the plan's own */
  uint64_t shared_weights_bytes; /* read from its weight set */
  uint64_t shared_weights_added; /* of those, what this plan uploaded to the set */
  /* Made in stages (gs_plan_sizes_at_run): the figures above are of the
   * stage before the first cut; later stages are planned while running. */
  bool staged;
} gs_plan_report;
void gs_plan_get_report(const gs_plan *plan, gs_plan_report *out);

/* A profile: once started, every run adds each kernel's time, to find
 * where a run's time goes. A kernel's time is the time its launch takes,
 * which is its whole work on the CPU (kernels run in the caller's thread)
 * but only the queueing on a device whose streams run them later (CUDA,
 * OpenCL). Returns 0; GS_ENOTSUP for a plan made in stages, GS_ENOMEM. */
int gs_plan_profile_start(gs_plan *plan);
typedef struct gs_plan_step_time {
  const char *op_type, *node_name; /* the plan's, valid while it lives */
  uint64_t ns;                     /* summed over the profiled runs */
} gs_plan_step_time;
/* The times of the plan's first `max` steps, in run order, into out, and
 * the runs profiled into *runs; returns the number of steps (0 before
 * gs_plan_profile_start). Steps that launch nothing (a Reshape that takes
 * its input's bytes) read 0. */
int gs_plan_profile(gs_plan *plan, gs_plan_step_time *out, int max, uint64_t *runs);

/* Sections: a model whose nodes are named "<section>/<node>" (an
 * ensemble's steps, model_compose.h) can have each run sum the time of
 * each section's kernels, measured with events on the device's clock (so
 * on CUDA and OpenCL the time they ran, not the time they were queued).
 * A kernel of no listed section counts to the section that ran before it;
 * copies in and out count to none. `names` need not outlive the call.
 * Returns 0; GS_ENOTSUP for a plan made in stages or a device without
 * event timing; GS_ENOMEM. */
int gs_plan_time_sections(gs_plan *plan, int n, const char *const *names);
/* Each section's time summed over the runs that succeeded since the last
 * call, into ns[0..n-1], and from zero again; false (ns untouched) where
 * the plan's sections are not timed, or are not n. */
bool gs_plan_take_section_times(gs_plan *plan, uint64_t *ns, int n);

#endif

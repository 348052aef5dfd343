/* plan_stages.h - plans made in stages, for graphs where a node's output
 * size depends on values computed from the inputs: NonZero,
 * NonMaxSuppression, a Reshape to a shape the data gives. Such a node
 * cannot be planned before a run has computed what it reads, so the graph
 * is cut around the first one (gs_model_cut): the stage before it is
 * planned with the plan, for the input shapes. At each run that stage
 * runs; the node alone is planned with the values it reads (computed on
 * the host while planning) and run; and the stage after it is planned for
 * the shapes that came out, cutting again where it must. The plans of the
 * node and of the stage after are kept for the shapes (and values) seen
 * last, so runs that repeat them plan nothing.
 *
 * Control flow is cut around the same way: for an If the node's stage is
 * replaced by the branch its condition chooses; a Loop's or a Scan's body
 * is planned once for the shapes its iterations see and run per
 * iteration, with a Scan's sequences sliced along their scan axes.
 *
 * Values cross between stages through host memory. The engine's own
 * (plan.c) entry points; callers use engine.h. */
#ifndef GS_ENGINE_PLAN_STAGES_H
#define GS_ENGINE_PLAN_STAGES_H

#include "engine/engine.h"

typedef struct gs_plan_stages gs_plan_stages;

/* Cuts `m` around m->nodes[node] and plans the stage before it for
 * `shapes`; opt is copied (its input_values are read now only). The caller
 * frees it with gs__plan_stages_destroy. */
int gs__plan_stages_create(const gs_model *m, int node, const gs_shape *shapes,
                           const gs_plan_options *opt, gs_plan_stages **out);
void gs__plan_stages_destroy(gs_plan_stages *st);
/* The plan of the stage before the cut: its inputs are the model's. */
gs_plan *gs__plan_stages_head(const gs_plan_stages *st);
/* gs_plan_device_bytes of every plan the stages keep, the head's included. */
uint64_t gs__plan_stages_device_bytes(const gs_plan_stages *st);
/* One run, as gs_plan_run_alloc. One at a time (the caller serialises). */
int gs__plan_stages_run(gs_plan_stages *st, const void *const *inputs, void **outputs,
                        gs_plan_value_info *info);

/* gs_plan_create for a stage of one node: it never cuts, and takes the
 * values of inputs of any size. */
int gs__plan_create_node(const gs_model *m, const gs_shape *shapes, const gs_plan_options *opt,
                         gs_plan **out);

#endif

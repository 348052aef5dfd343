/* model_split.h - a model cut into consecutive parts, one per device, for
 * running a model across devices as a pipeline: part k computes on device
 * k, and what it hands to part k+1 crosses between the devices (the
 * pipeline's exchange stage).
 *
 * Cuts are placed between nodes of the topological order so that the parts
 * carry about equal shares of the weights (of the nodes where a model has
 * none) and so that only values part k produced cross cut k: the graph's
 * inputs are read by part 0 alone, its outputs produced by the last part,
 * and no value skips a part. A model with no such cuts is refused with the
 * reason. */
#ifndef GS_ENGINE_MODEL_SPLIT_H
#define GS_ENGINE_MODEL_SPLIT_H

#include "engine/model.h"

#define GS_SPLIT_MAX_PARTS 6
#define GS_SPLIT_MAX_CROSSING 8 /* values crossing one cut */

/* Each part is a model of its own for gs_plan_create, borrowing its nodes,
 * names and weights from `m`, which must outlive it; free it with
 * gs_model_part_free (never gs_model_free). Part 0's inputs are m's; a
 * later part's inputs are the values crossing into it, declared with no
 * shape (rank -1) and no type (GS_DT_INVALID) until the caller sets dtype
 * from the plan of the part before (gs_plan_output). The last part's
 * outputs are m's; an earlier part's are the values crossing out of it. */
int gs_model_split(const gs_model *m, int parts, gs_model *out[]);
void gs_model_part_free(gs_model *part);

/* Makes input `input` of a part a weight of it: for a value the part before
 * knows while planning (gs_plan_value_info.data, a shape computed from
 * shapes), which the part's plan may need to know while planning too. The
 * input's dtype must be set; `data` must outlive the part. */
int gs_model_part_set_constant(gs_model *part, int input, const gs_shape *shape,
                               const void *data, size_t bytes);

/* Cuts m around node `node` (an index into m->nodes) into three stages,
 * for plans made in stages (plan_stages.c): the nodes before it, the node
 * alone, and the nodes after it. Stage 0 takes m's inputs; a later stage
 * takes the graph inputs and earlier stages' values its nodes read, those
 * declared with no shape and no type (as gs_model_split's parts). Each
 * stage hands on what later stages read, and the graph outputs it makes.
 * Static values are made again by copies of their nodes where read. Free
 * each stage with gs_model_part_free. */
int gs_model_cut(const gs_model *m, int node, gs_model *out[3]);
/* The same for n stages, stage k holding nodes [bounds[k], bounds[k + 1])
 * of m (bounds[0] is 0, bounds[n] is m->n_nodes; a stage may be empty). */
int gs_model_cut_at(const gs_model *m, const int *bounds, int n, gs_model *out[]);

/* Stage `stage` of gs_model_cut around an If, Loop or Scan node (its last
 * node), with `branch` (one of the node's graph attributes) in the node's
 * place: the branch's own inputs (a Loop body's iteration, condition and
 * carried values) then the stage's, copies of static values' makers and
 * weights, then the branch's nodes and weights; its outputs are the
 * branch's. Borrows from both; free it with gs_model_part_free. */
int gs_model_with_branch(const gs_model *stage, const gs_model *branch, gs_model **out);

#endif

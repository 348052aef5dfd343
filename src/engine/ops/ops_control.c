/* ops_control.c - the definitions of If and Loop. The planner runs them
 * itself: it cuts the plan around the node, and at each run plans and runs
 * the branch the condition chooses, or the body once per iteration
 * (plan_stages.c); no kernel computes them. */
#include "engine/op.h"
#include "engine/ops/ops.h"

#include "base/error.h"

/* Both branches present, each with as many outputs as the node, and one
 * input from the file (the condition; the rest are what the branches
 * capture). */
static int check_if(const gs_node *n) {
  if (n->n_in - n->n_captured != 1)
    return gs_error(GS_EINVAL, "If takes one input, the condition; the file gives %d",
                    n->n_in - n->n_captured);
  const char *branches[] = {"then_branch", "else_branch"};
  for (int b = 0; b < 2; b++) {
    const gs_attr *a = gs_node_attr(n, branches[b]);
    if (!a || a->type != GS_ATTR_GRAPH)
      return gs_error(GS_EINVAL, "If needs the graph attribute %s", branches[b]);
    if (a->g->n_inputs != a->g->n_captured)
      return gs_error(GS_EINVAL, "%s declares inputs; an If branch takes none", branches[b]);
    if (a->g->n_outputs != n->n_out)
      return gs_error(GS_EINVAL, "%s has %d outputs; the node has %d", branches[b],
                      a->g->n_outputs, n->n_out);
  }
  return GS_OK;
}

/* Loop: inputs M (trip count) and cond (both optional, "" when omitted),
 * then N carried values; outputs the N final values and K scan outputs.
 * The body takes (iteration, cond, N carried) and gives (cond, N carried,
 * K scanned). */
static int check_loop(const gs_node *n) {
  int carried = n->n_in - n->n_captured - 2;
  if (carried < 0)
    return gs_error(GS_EINVAL, "Loop takes M and cond (either may be \"\") before its values");
  const gs_attr *a = gs_node_attr(n, "body");
  if (!a || a->type != GS_ATTR_GRAPH)
    return gs_error(GS_EINVAL, "Loop needs the graph attribute body");
  const gs_model *body = a->g;
  int scanned = n->n_out - carried;
  if (body->n_inputs - body->n_captured != 2 + carried || scanned < 0 ||
      body->n_outputs != 1 + carried + scanned)
    return gs_error(GS_EINVAL, "Loop carries %d values and has %d outputs; its body takes %d "
                               "inputs and gives %d outputs (expected %d and at least %d)",
                    carried, n->n_out, body->n_inputs - body->n_captured, body->n_outputs,
                    2 + carried, 1 + carried);
  return GS_OK;
}

static int infer_graphs(gs_op_call *c, const gs_node *n) {
  return gs_op_fail(c, "%s runs its graphs while running, which needs the inputs' values in "
                       "host memory; this caller plans without them", n->op_type);
}

static const char *const if_attrs[] = {"then_branch", "else_branch", NULL};
static const char *const loop_attrs[] = {"body", NULL};

const gs_op_def gs__ops_control[] = {
    {.name = "If", .min_in = 1, .max_in = GS_OP_MAX_IO, .min_out = 1, .max_out = GS_OP_MAX_IO,
     .attrs = if_attrs, .check = check_if, .infer = infer_graphs, .runs_graphs = true},
    {.name = "Loop", .min_in = 0, .max_in = GS_OP_MAX_IO, .min_out = 1, .max_out = GS_OP_MAX_IO,
     .attrs = loop_attrs, .check = check_loop, .infer = infer_graphs, .runs_graphs = true},
    {.name = NULL},
};

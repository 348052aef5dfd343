/* ops_control.c - the definition of If. The planner runs it itself: it
 * cuts the plan around the node, and at each run plans and runs the branch
 * the condition chooses (plan_stages.c); no kernel computes it. */
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

static int infer_if(gs_op_call *c, const gs_node *n) {
  (void)n;
  return gs_op_fail(c, "If is run by choosing its branch while running, which needs the "
                       "inputs' values in host memory; this caller plans without them");
}

static const char *const if_attrs[] = {"then_branch", "else_branch", NULL};

const gs_op_def gs__ops_control[] = {
    {.name = "If", .min_in = 1, .max_in = GS_OP_MAX_IO, .min_out = 1, .max_out = GS_OP_MAX_IO,
     .attrs = if_attrs, .check = check_if, .infer = infer_if, .runs_graphs = true},
    {.name = NULL},
};

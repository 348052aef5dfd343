/* ops_control.c - the definitions of If, Loop and Scan. The planner runs
 * them itself: it cuts the plan around the node, and at each run plans and
 * runs the branch the condition chooses, or the body once per iteration
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

/* Scan's INTS attribute `name`, when given, holds `count` values, each
 * within [lo, hi] (an axis is checked against its rank while running). */
static int check_scan_ints(const gs_node *n, const char *name, int count, int64_t lo,
                           int64_t hi) {
  const gs_attr *a = gs_node_attr(n, name);
  if (!a)
    return GS_OK;
  if (a->type != GS_ATTR_INTS || a->n != count)
    return gs_error(GS_EINVAL, "Scan's %s must hold %d ints", name, count);
  for (int i = 0; i < a->n; i++)
    if (a->ints[i] < lo || a->ints[i] > hi)
      return gs_error(GS_EINVAL, "Scan's %s holds %lld; it must be %lld to %lld", name,
                      (long long)a->ints[i], (long long)lo, (long long)hi);
  return GS_OK;
}

/* Scan: N state values, then num_scan_inputs (M) sequences; outputs the
 * N final states and K stacked scan outputs. The body takes (N states, M
 * slices) and gives (N states, K slices). */
static int check_scan(const gs_node *n) {
  int given = n->n_in - n->n_captured;
  int64_t m = gs_attr_int(n, "num_scan_inputs", 0);
  if (m < 1 || m > given)
    return gs_error(GS_EINVAL, "Scan's num_scan_inputs is %lld; it must be 1 to its %d inputs",
                    (long long)m, given);
  const gs_attr *a = gs_node_attr(n, "body");
  if (!a || a->type != GS_ATTR_GRAPH)
    return gs_error(GS_EINVAL, "Scan needs the graph attribute body");
  const gs_model *body = a->g;
  int states = given - (int)m, scanned = n->n_out - states;
  if (scanned < 0 || body->n_inputs - body->n_captured != given ||
      body->n_outputs != n->n_out)
    return gs_error(GS_EINVAL, "Scan has %d states, %lld sequences and %d outputs; its body "
                               "takes %d inputs and gives %d outputs (expected %d and %d)",
                    states, (long long)m, n->n_out, body->n_inputs - body->n_captured,
                    body->n_outputs, given, n->n_out);
  int rc = check_scan_ints(n, "scan_input_axes", (int)m, -GS_MAX_DIMS, GS_MAX_DIMS - 1);
  if (rc == 0)
    rc = check_scan_ints(n, "scan_input_directions", (int)m, 0, 1);
  if (rc == 0)
    rc = check_scan_ints(n, "scan_output_axes", scanned, -GS_MAX_DIMS, GS_MAX_DIMS - 1);
  if (rc == 0)
    rc = check_scan_ints(n, "scan_output_directions", scanned, 0, 1);
  return rc;
}

static int infer_graphs(gs_op_call *c, const gs_node *n) {
  return gs_op_fail(c, "%s runs its graphs while running, which needs the inputs' values in "
                       "host memory; this caller plans without them", n->op_type);
}

static const char *const if_attrs[] = {"then_branch", "else_branch", NULL};
static const char *const loop_attrs[] = {"body", NULL};
static const char *const scan_attrs[] = {"body",
                                         "num_scan_inputs",
                                         "scan_input_axes",
                                         "scan_input_directions",
                                         "scan_output_axes",
                                         "scan_output_directions",
                                         NULL};

const gs_op_def gs__ops_control[] = {
    {.name = "If", .min_in = 1, .max_in = GS_OP_MAX_IO, .min_out = 1, .max_out = GS_OP_MAX_IO,
     .attrs = if_attrs, .check = check_if, .infer = infer_graphs, .runs_graphs = true},
    {.name = "Loop", .min_in = 0, .max_in = GS_OP_MAX_IO, .min_out = 1, .max_out = GS_OP_MAX_IO,
     .attrs = loop_attrs, .check = check_loop, .infer = infer_graphs, .runs_graphs = true},
    {.name = "Scan", .min_in = 1, .max_in = GS_OP_MAX_IO, .min_out = 1, .max_out = GS_OP_MAX_IO,
     .attrs = scan_attrs, .check = check_scan, .infer = infer_graphs, .runs_graphs = true},
    {.name = NULL},
};

/* model_compose.h - one model from several run in turn (an ensemble's
 * steps): each step's graph joins the whole under its own prefix, its inputs
 * and outputs renamed to the tensors the ensemble wires them to. The whole
 * is planned and run as any model, so that what passes between steps stays
 * in the plan's device memory and no step waits on the host. */
#ifndef GS_ENGINE_MODEL_COMPOSE_H
#define GS_ENGINE_MODEL_COMPOSE_H

#include "engine/model.h"

typedef struct gs_compose_step {
  gs_model *model;    /* taken: its nodes and weights move into the whole, and it is freed */
  const char *name;   /* for messages, and the prefix "<name>/" of its own tensors */
  /* Its graph inputs and outputs (`from`) and the ensemble tensors they are
   * (`to`); every graph input must be wired. */
  int n_map;
  const char *const *from, *const *to;
} gs_compose_step;

/* Joins the steps (taken, whatever it returns) into *out, whose graph
 * inputs are the ensemble tensors `inputs` (typed as the steps that read
 * them) and outputs `outputs` (as the steps that write them), in the
 * steps' order of data. GS_EINVAL naming the step and tensor where the
 * wiring does not add up: an input wired to nothing, a tensor no step or
 * input makes, two steps making one tensor, a cycle; GS_ENOTSUP for steps
 * with graph attributes (If, Loop, Scan) or of different opsets. The caller
 * frees *out with gs_model_free. */
int gs_model_compose(gs_compose_step *steps, int n_steps, const char *const *inputs,
                     int n_inputs, const char *const *outputs, int n_outputs, const char *name,
                     gs_model **out);

#endif

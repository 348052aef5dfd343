/* ensemble.h - Triton's ensembles: a model of platform "ensemble" whose
 * ensemble_scheduling lists steps, each a model of the repository with its
 * inputs and outputs wired to the ensemble's tensors by input_map and
 * output_map. gpusrv composes the steps' graphs into one model
 * (engine/model_compose.h), planned and run as any other: the tensors
 * between steps stay in the instance's device memory, and clients see one
 * model. A step's "preprocess" recipe on an input the ensemble's request
 * fills becomes the ensemble's (image_input.h). */
#ifndef GS_API_ENSEMBLE_H
#define GS_API_ENSEMBLE_H

#include "api/repository.h"

#include <jansson.h>

/* Reads "platform", "input", "output" and "ensemble_scheduling" of a
 * configuration (config.json's shape, or config.pbtxt's as model_config.c
 * reads it) into m->is_ensemble and m->ensemble. GS_EINVAL naming the file
 * and what is wrong. */
int gs_ensemble_read_config(gs_served_model *m, json_t *root, const char *path);

/* The ensemble's model: each step's model file (its version, or the
 * highest) from `repo_dir`, composed; m's recipe set from a step's. The
 * caller frees *out with gs_model_free. */
int gs_ensemble_compose(gs_served_model *m, const char *repo_dir, gs_model **out);

#endif

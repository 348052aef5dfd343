/* ensemble.h - Triton's ensembles: a model of platform "ensemble" whose
 * ensemble_scheduling lists steps, each a model of the repository with its
 * inputs and outputs wired to the ensemble's tensors by input_map and
 * output_map. gpusrv composes the steps' graphs into one model
 * (engine/model_compose.h), planned and run as any other: the tensors
 * between steps stay in the instance's device memory, and clients see one
 * model. A step's "preprocess" recipe on an input the ensemble's request
 * fills becomes the ensemble's (image_input.h).
 *
 * A step whose model's instance_group is KIND_CPU (or kind "cpu") alone
 * runs on the host's cores while the others run on the instance's device:
 * what crosses between them is copied once each way at the step's edges
 * (gs_plan_options.host_sections). A step whose model's instance_group
 * names a device runs there: the plan is then a chain across devices
 * (plan_chain.h), a tensor crossing only between steps on different
 * devices. Every other step runs on the instance's device. The config
 * reply says which ("runs_on"). */
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

/* Statistics per step, as Triton keeps them for an ensemble's composing
 * models: each step's model counts the ensemble's requests and batches it
 * took part in, with the time of its kernels (engine.h's sections, on the
 * device's clock). time_steps turns that on for a new plan of m's composed
 * model (the caller holds the instance's lock); a plan it cannot time (one
 * made in stages) keeps no figures per step, which the log says once per
 * load. count_steps, after a run of that plan that succeeded (the
 * instance's lock still held), adds the run to the step models found in
 * m's repository; with requests 0 (a warm-up) it drops the run's times. */
void gs_ensemble_time_steps(gs_served_model *m, gs_plan *plan);
void gs_ensemble_count_steps(gs_served_model *m, gs_plan *plan, int requests, int64_t rows);

#endif

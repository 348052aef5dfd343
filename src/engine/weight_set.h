/* weight_set.h - device copies of a model's weights shared by the plans of
 * it on one device. A served model's instance makes a plan per batch shape
 * (dynamic batching forms batches of every size up to the maximum); each
 * plan holding its own copy of every weight multiplied the weights' device
 * memory by the plans cached. Plans made with a set (gs_plan_options.weights)
 * take the model's initializers, and the Conv weights they fuse from them,
 * from the set: uploaded by the first plan that reads them, reused after.
 * Constants a plan folds for its shapes stay the plan's own. */
#ifndef GS_ENGINE_WEIGHT_SET_H
#define GS_ENGINE_WEIGHT_SET_H

#include "hal/op/tensor.h"
#include "hal/hal.h"

#include <stdint.h>

typedef struct gs_weight_set gs_weight_set;

int gs_weight_set_create(gs_device_t *device, gs_weight_set **out);
/* Frees the device copies, once every plan made with the set is gone (plans
 * hold its buffers). Entries are keyed by the models' host addresses: a set
 * must not serve a model loaded after one it served was freed (the address
 * may be reused); make a set per model, and drop it with the model. */
void gs_weight_set_destroy(gs_weight_set *set);
/* Device memory the set holds: what its owner books. */
uint64_t gs_weight_set_bytes(const gs_weight_set *set);
gs_device_t *gs_weight_set_device(const gs_weight_set *set);

/* For plan.c: the device copy of the weight `name` (of type dtype, `bytes`
 * long) whose source is the model's host data at `key`, uploaded from
 * `data` through `stream` when the set has none yet (the copy has run when
 * this returns; *added gets the device memory that took, else 0). */
int gs__weight_set_get(gs_weight_set *set, const void *key, const char *name, gs_dtype dtype,
                       const void *data, size_t bytes, gs_stream_t *stream, gs_buffer_t **out,
                       uint64_t *added);

#endif

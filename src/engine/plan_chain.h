/* plan_chain.h - plans whose sections run on devices of their own: an
 * ensemble whose steps' models sit on different devices
 * (gs_plan_options.device_sections). The nodes are put in an order of
 * data that keeps each device's together, and cut where the device
 * changes into parts (gs_model_cut_at); each part is
 * planned on its device, as any plan is, and a run runs them in turn. A
 * value crosses between devices only where a part on one reads what a part
 * on another made (gs_stream_copy_peer: directly where the backend can,
 * else through host memory); between the nodes of one part it stays in
 * that device's memory. The run's inputs and outputs are on the plan's own
 * device (options.device), or in host memory.
 *
 * The engine's own (plan.c) entry points; callers use engine.h. */
#ifndef GS_ENGINE_PLAN_CHAIN_H
#define GS_ENGINE_PLAN_CHAIN_H

#include "engine/engine.h"

typedef struct gs_plan_chain gs_plan_chain;

/* Whether opt places a section of m on another device than opt->device. */
bool gs__plan_chain_needed(const gs_model *m, const gs_plan_options *opt);

/* Cuts and plans m for `shapes`; `m` and the options' names must outlive
 * the chain. GS_ENOTSUP where a part's shapes depend on values (plans made
 * in stages, or for input values). *report sums the parts on opt->device;
 * report->other_devices_bytes holds the rest. The caller frees the chain
 * with gs__plan_chain_destroy. */
int gs__plan_chain_create(const gs_model *m, const gs_shape *shapes, const gs_plan_options *opt,
                          gs_plan_chain **out, gs_plan_report *report);
void gs__plan_chain_destroy(gs_plan_chain *c);

/* One run, inputs and outputs in host memory (host_in, host_out) or in
 * buffers on the plan's device (dev_in, dev_out); the other pair NULL. One
 * at a time (the caller serialises). */
int gs__plan_chain_run(gs_plan_chain *c, const void *const *host_in, void *const *host_out,
                       gs_buffer_t *const *dev_in, gs_buffer_t *const *dev_out);

/* Input and output i of the model as the chain takes and computes them
 * (gs_plan_input, gs_plan_output). */
void gs__plan_chain_input(const gs_plan_chain *c, int i, gs_plan_value_info *out);
void gs__plan_chain_output(const gs_plan_chain *c, int i, gs_plan_value_info *out);
/* Memory the chain holds on the plan's device. */
uint64_t gs__plan_chain_device_bytes(const gs_plan_chain *c);
/* gs_plan_other_devices of the chain (the count may exceed max: only max
 * are filled in). */
int gs__plan_chain_other_devices(const gs_plan_chain *c, gs_device_t **devices, uint64_t *bytes,
                                 int max);

#endif

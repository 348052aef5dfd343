/* autoscale.h - how many instances a model whose instance_group says
 * "count": "auto" runs, between its min and max: one more while requests
 * keep waiting for their run past its budget, one fewer once the others
 * could have carried the load at half their time for a while. The
 * batcher's scaler thread samples its queue each tick and applies the step
 * (batcher.c), and the ledger may still refuse a step up. The batcher's
 * lock covers it. */
#ifndef GS_API_AUTOSCALE_H
#define GS_API_AUTOSCALE_H

#include <stdint.h>

typedef struct gs_autoscale_config {
  int min, max;
  uint64_t budget_ns; /* queue delay above which an instance is added */
  uint64_t down_ns;   /* how long the load must have been light before one goes */
} gs_autoscale_config;

/* What the queue and the instances did during one tick. */
typedef struct gs_autoscale_sample {
  uint64_t now_ns, tick_ns;
  uint64_t waited;    /* requests whose run began during the tick */
  uint64_t waited_ns; /* their waits from arrival to run (queue and pipeline), in all */
  uint64_t oldest_ns; /* how long the oldest request still queued has waited (0: none queued) */
  uint64_t busy_ns;   /* time the instances spent computing, summed over instances */
} gs_autoscale_sample;

typedef struct gs_autoscale {
  gs_autoscale_config cfg;
  int over_ticks;          /* ticks in a row with the queue delay over budget */
  uint64_t light_since_ns; /* since when the load has been light (0: it is not) */
  uint64_t last_change_ns; /* the last step, or refusal of one */
} gs_autoscale;

/* The step to take now with `active` instances running: +1, -1 or 0. */
int gs_autoscale_step(gs_autoscale *a, const gs_autoscale_sample *s, int active);
/* A step up was refused (no room in the ledger): none is tried again for a
 * while, unless no instance runs at all. */
void gs_autoscale_refused(gs_autoscale *a, uint64_t now_ns);

#endif

/* tune_queue.h - the second half of `gpusrv model tune`: the batch size and
 * instance count the compute sweep chose, served through the server's own
 * repository and dynamic batcher in this process, by clients of its own at
 * rising concurrency (1, 4, 16, 64, each sending one row and the next on
 * the reply), for a few max_queue_delay values; the delay whose throughput
 * holds up best over the concurrencies kept within the latency budget is
 * the one --write sets. */
#ifndef GS_CLI_TUNE_QUEUE_H
#define GS_CLI_TUNE_QUEUE_H

#include "hal/hal.h"

#include <stdint.h>

typedef struct gs_tune_queue_args {
  const char *model_file; /* the version's model.onnx */
  int64_t max_batch;
  int batch, instances;   /* the compute sweep's best */
  gs_device_t *device;
  double run_p50_ms;      /* the best batch's run, which the delays tried are fractions of */
  double budget_ms;       /* 0: none */
  double seconds;         /* per concurrency and delay */
} gs_tune_queue_args;

/* Prints the table and sets *delay_us to the best delay. Returns 0, or an
 * error after saying why (GS_ERANGE: no delay kept even one client's p99
 * within the budget); *delay_us is then untouched. */
int gs_tune_queue(const gs_tune_queue_args *a, int64_t *delay_us);

#endif

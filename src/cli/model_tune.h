/* model_tune.h - `gpusrv model tune MODEL_DIR`: batch sizes and instance
 * counts measured in place, and the best within the budgets named. */
#ifndef GS_CLI_MODEL_TUNE_H
#define GS_CLI_MODEL_TUNE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gs_tune_options {
  const char *device;        /* NULL: the first device */
  double latency_budget_ms;  /* 0: none */
  uint64_t memory_budget;    /* bytes; 0: none */
  double seconds;            /* per configuration measured; 0: the default */
  bool write;                /* write the best into MODEL_DIR/config.json */
} gs_tune_options;

/* Runs the sweep and prints its table; returns an exit status (cli.h). */
int gs_cli_model_tune(const char *model_dir, const gs_tune_options *o);

#endif

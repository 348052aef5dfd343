/* calibrate.h - the ranges of a model's tensors over calibration data
 * (calibrate.c), for quantize.c. */
#ifndef GS_ENGINE_CALIBRATE_H
#define GS_ENGINE_CALIBRATE_H

#include "engine/quantize.h"

#define GS_CALIB_MAX_INPUTS 64    /* model inputs and outputs */
#define GS_CALIB_MAX_TENSORS 4096 /* tensors measured */

typedef struct gs_calib_job {
  const char *const *tensors; /* names of float32 tensors the model computes or takes */
  const int *input_of;        /* per tensor: the model input it is, or -1 */
  int n_tensors;
  const gs_npy *calibration; /* one per model input, samples along dimension 0 */
  int64_t batch;             /* samples per run */
  bool fixed_batch;          /* the model's batch dimension is fixed: whole batches only */
  gs_device_t *device;
  int threads;
  gs_calib_method method;
} gs_calib_job;

typedef struct gs_calib_range {
  float lo, hi; /* lo <= 0 <= hi */
} gs_calib_range;

/* Runs m (whose outputs it extends by the tensors: load it for this alone)
 * over the calibration data, and fills ranges[i] for job->tensors[i];
 * *runs: the runs of one pass. */
int gs__calibrate(gs_model *m, const gs_calib_job *job, gs_calib_range *ranges, int *runs);

#endif

/* quantize.h - static quantisation of a float model (`gpusrv model
 * quantize`): the model runs over calibration data, the ranges of the
 * tensors its Conv, MatMul and Gemm nodes read and write are measured, and
 * a QDQ model is written: QuantizeLinear and DequantizeLinear around those
 * tensors (uint8, asymmetric), int8 weights (symmetric, per tensor or per
 * output channel) and int32 biases, in the form onnxruntime's quantiser
 * writes, so that onnxruntime runs the file too and gpusrv runs its
 * patterns as integer ops (model_qdq.c). */
#ifndef GS_ENGINE_QUANTIZE_H
#define GS_ENGINE_QUANTIZE_H

#include "engine/model.h"
#include "engine/npy.h"
#include "hal/hal.h"

typedef enum {
  GS_CALIB_MINMAX,     /* the range seen */
  GS_CALIB_PERCENTILE, /* the 0.001% and 99.999% points of the values seen */
  GS_CALIB_ENTROPY,    /* the clipping threshold of least KL divergence (TensorRT's method) */
} gs_calib_method;

/* "minmax", "percentile", "entropy"; false for anything else. */
bool gs_calib_method_from_name(const char *name, gs_calib_method *out);

typedef struct gs_quantize_options {
  gs_device_t *device; /* where the calibration runs */
  gs_calib_method method;
  bool per_channel; /* weights: a scale per output channel, else one per tensor */
  /* One per model input, in the model's order: samples along dimension 0. */
  const gs_npy *calibration;
  int threads; /* for the calibration runs; 0: all cores */
} gs_quantize_options;

typedef struct gs_quantize_report {
  int nodes;     /* Conv, MatMul and Gemm nodes quantised */
  int tensors;   /* activations calibrated */
  int64_t samples;
  int runs;      /* calibration runs (batches), per pass */
  uint64_t float_weight_bytes, int8_weight_bytes; /* of the weights quantised */
} gs_quantize_report;

/* Quantises the model at `path` into a new file at `out_path`. Fails with
 * GS_EINVAL naming what is wrong (calibration data that does not fit the
 * inputs, a model with nothing to quantise) and leaves no file then. */
int gs_model_quantize(const char *path, const char *out_path, const gs_quantize_options *o,
                      gs_quantize_report *report);

#endif

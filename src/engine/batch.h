/* batch.h - batch inference over a data set as the six-stage pipeline:
 * ingest (reader threads, pread) → preprocess (a CPU thread pool: type
 * conversion and normalisation into pinned staging) → H2D (a copy stream)
 * → compute (the plan) → D2H (a copy stream) → write (in input order).
 * With several devices the model is cut into consecutive parts, one per
 * device (model_split.h), each part's compute a stage, and an exchange
 * stage before each part but the first copies what the part before
 * computed onto its device (gs_stream_copy_peer: peer to peer where the
 * devices can, else staged through host memory). */
#ifndef GS_ENGINE_BATCH_H
#define GS_ENGINE_BATCH_H

#include "engine/engine.h"
#include "engine/pipeline.h"

#define GS_BATCH_MAX_DEVICES 6

typedef struct gs_batch_options {
  const char *model_path;  /* model.onnx */
  const char *input;       /* .npy, a directory of .npy, or .csv */
  const char *output_dir;  /* gets <output name>.npy for each output */
  int batch;               /* rows per batch (0: 64; a fixed batch dimension wins) */
  /* The devices, in the order the model's parts run on them (one: the
   * whole model there; n_devices 0: the first device). */
  gs_device_t *devices[GS_BATCH_MAX_DEVICES];
  int n_devices;
  gs_precision precision;
  double scale, mean, std; /* preprocess: (x * scale - mean) / std; 1, 0, 1 by default */
  int slots;               /* batches in flight (0: 4) */
  /* Ingest and preprocess threads (0: 2, and the cores; a quarter of them
   * where a CPU computes, whose kernels take the rest). */
  int readers, workers;
  /* Called from the write stage after each batch (may be NULL). */
  void (*progress)(int64_t rows_done, int64_t rows_total, void *ctx);
  void *progress_ctx;
  atomic_bool *cancel;     /* may be NULL */
} gs_batch_options;

/* Runs the whole data set; *stats gets each stage's figures. Malformed
 * input fails naming the file and position; outputs are complete only when
 * it returns 0. */
int gs_batch_run(const gs_batch_options *options, int64_t *rows, gs_pipeline_result *stats);

/* For `gpusrv bench`: runs each stage alone over the whole data set (with
 * its threads; alone[k] gets its batches per second), then all of them
 * overlapped into *whole, whose stages[k] names stage k. The data set is
 * dropped from the page cache before each run that reads it. */
int gs_batch_profile(const gs_batch_options *options, double alone[GS_PIPELINE_MAX_STAGES],
                     gs_pipeline_result *whole, int64_t *rows);

/* Parses "scale=1/255,mean=0.5,std=0.25" into options (each key optional;
 * a value may be a fraction). GS_EINVAL naming what is wrong. */
int gs_batch_parse_preprocess(const char *spec, gs_batch_options *options);

#endif

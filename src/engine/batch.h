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
#include "engine/image.h"
#include "engine/pipeline.h"

#define GS_BATCH_MAX_DEVICES 6

typedef struct gs_batch_options {
  const char *model_path;  /* model.onnx */
  /* .npy, a directory of .npy, or a .csv of numbers (dataset.h); or images:
   * a directory of JPEG and PNG files, a .txt or .csv list of them
   * (image_set.h), each decoded and made one row by `prep`. */
  const char *input;
  const char *output_dir;  /* gets <output name>.npy for each output */
  int batch;               /* rows per batch (0: 64; a fixed batch dimension wins) */
  /* The devices, in the order the model's parts run on them (one: the
   * whole model there; n_devices 0: the first device). */
  gs_device_t *devices[GS_BATCH_MAX_DEVICES];
  int n_devices;
  gs_precision precision;
  /* Preprocessing: (x * scale - mean) / std for numbers (one mean and std);
   * for images the whole recipe. gs_prep_defaults: none. */
  gs_prep prep;
  int slots;               /* batches in flight (0: 4) */
  /* Ingest and preprocess threads (0: 2, and the cores; a quarter of them
   * where a CPU computes, whose kernels take the rest). */
  int readers, workers;
  /* Called from the write stage after each batch (may be NULL). */
  void (*progress)(int64_t rows_done, int64_t rows_total, void *ctx);
  void *progress_ctx;
  atomic_bool *cancel;     /* may be NULL */
  /* Images that could not be read or decoded: their rows are zeros (where
   * a device finishes the recipe, black pixels normalised), and
   * output_dir/failed.txt says which and why (row, path, reason, tab
   * separated); the others go on. Their count, where not NULL. */
  int64_t *failed;
  /* Set where the recipe's type, layout and normalisation ran on the
   * device, in the plan (gs_prep_graph); else the CPU did it all. */
  bool *prep_on_device;
  /* Where the recipe's resize and crop ran on the device as well (the
   * "resize" stage, image_pack.h), how many images it resized (the CPU
   * resized the others: padded crops, images too large for its staging);
   * -1 where the CPU resized them all. */
  int64_t *resized_on_device;
  /* The bytes the h2d stage copied to the first device, where not NULL. */
  int64_t *h2d_bytes;
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

#endif

/* pipeline.h - stages run as an overlapped pipeline: a ring of slots (the
 * buffers, allocated once by the caller), a thread or more per stage, items
 * handed from stage to stage in order, back-pressure when every slot is in
 * flight, cancellation, the first error stopping every stage, and per-stage
 * timers (busy, waiting for input, blocked on output) that name the slowest
 * stage. The six-stage data flow of DESIGN.md (ingest, preprocess, H2D,
 * compute, exchange, D2H) is one use; `gpusrv batch` and `gpusrv bench` run
 * on it. */
#ifndef GS_ENGINE_PIPELINE_H
#define GS_ENGINE_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define GS_PIPELINE_MAX_STAGES 18
#define GS_PIPELINE_MAX_THREADS 64

/* One stage. `run` works on the item `seq` held in slot `slot`. The first
 * stage (the source) fills the slot and returns 1 when there is no item
 * `seq` (the input has ended); every stage returns 0 when done, or a
 * negative GS_E code (with gs_error detail) to fail the run. With several
 * threads a stage works on several items at once; they still leave it in
 * order. The last stage's slot goes back to the ring when it returns. */
typedef struct gs_pipeline_stage {
  const char *name;
  int threads; /* 1 or more */
  int (*run)(void *ctx, int slot, int64_t seq);
  void *ctx;
  /* For latency: when this stage (one thread) is idle with nothing queued
   * and the stage before it has no other work waiting, that stage's thread
   * runs this one itself rather than waking this stage's thread. A lone
   * item then crosses without a wake-up per stage; under load the stages
   * keep to their own threads and overlap. */
  bool run_through;
} gs_pipeline_stage;

typedef struct gs_pipeline_stage_stats {
  char name[32];
  int threads;
  int64_t items;
  uint64_t busy_ns;     /* in run(), summed over its threads */
  uint64_t wait_in_ns;  /* its threads waiting for an item (the source: for a free slot), also
                         * while the stage before ran this one for them (run_through) */
  uint64_t wait_out_ns; /* done, waiting to hand the item on in order */
} gs_pipeline_stage_stats;

typedef struct gs_pipeline_result {
  int64_t items;     /* that left the last stage */
  uint64_t wall_ns;
  int n_stages;
  gs_pipeline_stage_stats stages[GS_PIPELINE_MAX_STAGES];
  int failed_stage;  /* -1 if none */
  char error[512];   /* the failing stage's message ("" if none) */
  bool cancelled;
} gs_pipeline_result;

/* Runs the stages over `slots` slots (1..1024) until the source ends, a
 * stage fails, or *cancel becomes true (checked between items; may be
 * NULL). `out` is filled as it goes (see gs_pipeline_read_stats). Returns 0, the failing stage's code (the result names the stage and
 * its message), or GS_ECANCELED. Every stage's threads have stopped when it
 * returns. */
int gs_pipeline_run(const gs_pipeline_stage *stages, int n_stages, int slots,
                    atomic_bool *cancel, gs_pipeline_result *out);

/* For a stage's run() that waits for work from outside the pipeline (a
 * source waiting for requests to arrive): reports that many nanoseconds of
 * the current call as waiting for input rather than busy. */
void gs_pipeline_note_wait(uint64_t ns);

/* For a source whose run() knows that more items are ready at once (a
 * server with more requests queued): the pipeline then hands this item on
 * rather than running later stages in the source's thread (run_through). */
void gs_pipeline_note_more(void);

/* The figures of a run still going: `live` is the result gs_pipeline_run
 * is filling (its counters grow as items pass); copies them consistently
 * enough for monitoring from another thread. */
void gs_pipeline_read_stats(const gs_pipeline_result *live, gs_pipeline_result *copy);

/* The stage whose busy time per thread is largest: the bottleneck. */
int gs_pipeline_slowest(const gs_pipeline_result *r);

#endif

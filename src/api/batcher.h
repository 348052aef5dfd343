/* batcher.h - the dynamic batcher of one served model: a queue ordered by
 * priority, from which batches are formed up to the preferred or maximum
 * batch size within the maximum queue delay, then run on the model's plan.
 * Requests wait without holding an HTTP thread (the server suspends them). */
#ifndef GS_API_BATCHER_H
#define GS_API_BATCHER_H

#include "api/infer_request.h"

typedef struct gs_batcher gs_batcher;

/* Starts the batcher's thread for `m`. The caller stops it. */
int gs_batcher_start(gs_served_model *m, gs_batcher **out);
/* Finishes every queued request, then stops the thread and frees it. */
void gs_batcher_stop(gs_batcher *b);
/* Queues a request; its done callback runs later on the batcher's thread.
 * Returns GS_EBUSY (and does not queue it) when the queue is full. */
int gs_batcher_submit(gs_batcher *b, gs_infer_request *r);

/* Runs one request now, in the calling thread: for models without dynamic
 * batching, where queueing would only add two thread hand-offs. Its done
 * callback runs before this returns. */
void gs_batcher_run_inline(gs_served_model *m, gs_infer_request *r);

/* Whether m's runs outside a batcher have been short, by a moving mean of
 * their compute: short enough for a thread that serves other calls to run
 * them in passing (GS_BATCHER_SHORT_NS). False before the first run. */
#define GS_BATCHER_SHORT_NS 100000
bool gs_batcher_inline_is_short(const gs_served_model *m);

/* A run of one of an ensemble's steps (ensemble.h) into its model's
 * statistics: `requests` requests of `rows` rows in one execution, no
 * queue and no copies (the step runs inside the ensemble's plan, its
 * tensors on the device), `ns` of compute, and each request a success
 * of that long. */
void gs_batcher_count_step(gs_served_model *m, int requests, int64_t rows, uint64_t ns);

/* For a model whose instance_group says "count": "auto": starts the thread
 * that adds and removes instances (autoscale.h), once the model is loaded
 * and warmed up. The batcher's stop stops it. */
int gs_batcher_autoscale(gs_batcher *b);

/* The window an adaptive batcher has learnt now (adaptive_wait.h), in ns. */
uint64_t gs_batcher_adaptive_wait_ns(gs_batcher *b);

#endif

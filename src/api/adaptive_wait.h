/* adaptive_wait.h - how long an adaptive batcher ("dynamic_batching":
 * {"adaptive": true, "latency_budget_us": N}) lets a batch wait for more
 * requests, instead of a fixed max_queue_delay: a window that each arrival
 * opens again (so a batch keeps gathering while requests keep coming, and
 * goes at the first lull), its length taken from the arrivals themselves,
 * and never past the budget left once the batch's expected run is counted.
 * The batcher's lock covers it. */
#ifndef GS_API_ADAPTIVE_WAIT_H
#define GS_API_ADAPTIVE_WAIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gs_adaptive_wait {
  uint64_t last_arrival_ns;
  /* Moving averages over arrivals: the share that came while other
   * requests were still unanswered (in parts per 65536), and the gap before
   * each such arrival. */
  uint32_t overlap_share;
  uint64_t overlap_gap_ns;
} gs_adaptive_wait;

/* A request arrived at `now`; `others` requests were unanswered then. */
void gs_adaptive_arrival(gs_adaptive_wait *a, uint64_t now, int64_t others);
/* The window: how long a batch waits for each next request (0: not at all),
 * for a model where a row saves saving_ns by joining a batch instead of
 * running alone (negative: not known yet). */
uint64_t gs_adaptive_window(const gs_adaptive_wait *a, int64_t saving_ns);
/* When a batch whose first request arrived at `first_ns` stops waiting, as
 * of its last arrival `last_ns` (first_ns at first): one window after it,
 * but never so late that a run expected to take full_ns (a full batch)
 * would end past the first request's budget. */
uint64_t gs_adaptive_deadline(const gs_adaptive_wait *a, uint64_t first_ns, uint64_t last_ns,
                              uint64_t budget_ns, uint64_t full_ns, int64_t saving_ns);

#endif

/* adaptive_wait.c - the window of an adaptive batcher (adaptive_wait.h).
 *
 * Waiting gathers something only where requests arrive while others are
 * still unanswered: clients that send together, or more clients than the
 * instances keep up with. A client that sends its next request only after
 * the reply never does, and then the window is none. So the window follows
 * the arrivals: where at least a quarter of them came while others were
 * unanswered, it is half as long again as the mean gap before such
 * arrivals (long enough for the next of a group, short of the pause
 * between groups); otherwise none. And never longer than what a row saves
 * by joining a batch rather than running alone: a request that comes later
 * is better run on its own than waited for, and where batching saves
 * nothing (a compute-bound model on the CPU, whose batch of 4 takes 4 rows'
 * time), waiting only adds latency. */
#include "api/adaptive_wait.h"

#define ONE 65536u           /* overlap_share's whole */
#define MIN_SHARE (ONE / 4)  /* below this share of arrivals, no window */
#define STEP_NS 20000u       /* added to the window: a thread's wake-up, roughly */

void gs_adaptive_arrival(gs_adaptive_wait *a, uint64_t now, int64_t others) {
  uint64_t gap = a->last_arrival_ns && now > a->last_arrival_ns ? now - a->last_arrival_ns : 0;
  a->last_arrival_ns = now;
  bool overlaps = others > 0;
  /* Averages over about the last 8 arrivals. */
  a->overlap_share = a->overlap_share - a->overlap_share / 8 + (overlaps ? ONE / 8 : 0);
  if (overlaps)
    a->overlap_gap_ns = a->overlap_gap_ns ? a->overlap_gap_ns - a->overlap_gap_ns / 8 + gap / 8
                                          : gap;
}

uint64_t gs_adaptive_window(const gs_adaptive_wait *a, int64_t saving_ns) {
  if (a->overlap_share < MIN_SHARE)
    return 0;
  uint64_t window = a->overlap_gap_ns + a->overlap_gap_ns / 2 + STEP_NS;
  return saving_ns >= 0 && (uint64_t)saving_ns < window ? (uint64_t)saving_ns : window;
}

uint64_t gs_adaptive_deadline(const gs_adaptive_wait *a, uint64_t first_ns, uint64_t last_ns,
                              uint64_t budget_ns, uint64_t full_ns, int64_t saving_ns) {
  uint64_t cap = budget_ns > full_ns ? budget_ns - full_ns : 0;
  uint64_t end = last_ns + gs_adaptive_window(a, saving_ns), latest = first_ns + cap;
  return end < latest ? end : latest;
}

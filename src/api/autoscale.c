/* autoscale.c - the instance count of an autoscaled model (autoscale.h).
 *
 * Up: the mean wait, from arrival to run, of the requests whose run began
 * during a tick (in the queue, then behind the batches ahead of theirs in
 * an instance's pipeline), or the age of the oldest one still queued, is
 * over the budget for two ticks in a row (one tick is noise: a burst the
 * running instances absorb), and the last step is two ticks old (an
 * instance just added has not yet shown what it does to the waits).
 *
 * Down: for the whole down window, no request waited past half the budget
 * and the instances' compute time would have kept one instance fewer busy
 * less than half the time. The last instance, where min is 0, goes only
 * when nothing at all arrived in that window. */
#include "api/autoscale.h"

#include <stdbool.h>

#define REFUSAL_PAUSE_NS 2000000000ull /* after a refused step up, before the next try */

static bool over_budget(const gs_autoscale_sample *s, uint64_t budget_ns) {
  return (s->waited && s->waited_ns / s->waited > budget_ns) || s->oldest_ns > budget_ns;
}

static bool light(const gs_autoscale_sample *s, uint64_t budget_ns, int active) {
  if (active <= 1)
    return !s->waited && !s->oldest_ns && !s->busy_ns;
  bool short_waits = (!s->waited || s->waited_ns / s->waited <= budget_ns / 2) &&
                     s->oldest_ns <= budget_ns / 2;
  return short_waits && s->busy_ns * 2 <= (uint64_t)(active - 1) * s->tick_ns;
}

int gs_autoscale_step(gs_autoscale *a, const gs_autoscale_sample *s, int active) {
  const gs_autoscale_config *c = &a->cfg;
  if (active == 0 && s->oldest_ns && c->max > 0) {
    a->over_ticks = 0;
    a->light_since_ns = 0;
    a->last_change_ns = s->now_ns;
    return 1; /* a request waits and nothing runs: no waiting for a trend */
  }
  a->over_ticks = over_budget(s, c->budget_ns) ? a->over_ticks + 1 : 0;
  bool settled = s->now_ns >= a->last_change_ns + 2 * s->tick_ns;
  if (a->over_ticks >= 2 && active < c->max && settled) {
    a->over_ticks = 0;
    a->light_since_ns = 0;
    a->last_change_ns = s->now_ns;
    return 1;
  }
  if (!light(s, c->budget_ns, active)) {
    a->light_since_ns = 0;
    return 0;
  }
  if (!a->light_since_ns)
    a->light_since_ns = s->now_ns - s->tick_ns; /* light since the tick began */
  if (active > c->min && s->now_ns - a->light_since_ns >= c->down_ns) {
    a->light_since_ns = s->now_ns; /* the next one waits a whole window */
    a->last_change_ns = s->now_ns;
    return -1;
  }
  return 0;
}

void gs_autoscale_refused(gs_autoscale *a, uint64_t now_ns) {
  /* last_change_ns ahead of now: `settled` stays false for the pause. */
  a->last_change_ns = now_ns + REFUSAL_PAUSE_NS;
  a->over_ticks = 0;
}

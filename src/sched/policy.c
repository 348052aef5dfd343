/* policy.c - one scheduling pass: priority, then weighted DRF across
 * tenants, then submission order, with EASY backfill behind the head job
 * (see policy.h). */
#include "sched/policy.h"

#include <stdlib.h>
#include <string.h>

#define CPU_EPS 1e-9

static bool whole_free(const gs_sched_free *f, const gs_sched_free *total, int d) {
  return f->dev_share[d] >= 100 && f->dev_mem[d] >= total->dev_mem[d];
}

static bool slice_fits(const gs_sched_free *f, const gs_sched_need *n, int d) {
  return f->dev_mem[d] >= n->gpu_mem && f->dev_share[d] >= n->gpu_share;
}

static bool wants_slice(const gs_sched_need *n) {
  return n->gpus == 0 && (n->gpu_mem > 0 || n->gpu_share > 0);
}

static bool host_fits(const gs_sched_free *f, const gs_sched_need *n) {
  return f->cpus + CPU_EPS >= n->cpus && f->host_mem >= n->host_mem;
}

/* A placement that fits every state in `states` at once (the free state
 * now and, for backfill, the head job's reservation). */
static bool fit_all(const gs_sched_free *const *states, int n_states, const gs_sched_free *total,
                    const gs_sched_need *need, gs_sched_placement *out) {
  for (int s = 0; s < n_states; s++)
    if (!host_fits(states[s], need))
      return false;
  gs_sched_placement p = 0;
  if (need->gpus > 0) {
    int got = 0;
    for (int d = 0; d < total->n_devices && got < need->gpus; d++) {
      bool ok = true;
      for (int s = 0; s < n_states && ok; s++)
        ok = whole_free(states[s], total, d);
      if (ok) {
        p |= (gs_sched_placement)1 << d;
        got++;
      }
    }
    if (got < need->gpus)
      return false;
  } else if (wants_slice(need)) {
    /* Best fit on the state now: the device with the least free memory that
     * still takes the slice, so that big holes stay for big jobs. */
    int best = -1;
    for (int d = 0; d < total->n_devices; d++) {
      bool ok = true;
      for (int s = 0; s < n_states && ok; s++)
        ok = slice_fits(states[s], need, d);
      if (ok && (best < 0 || states[0]->dev_mem[d] < states[0]->dev_mem[best]))
        best = d;
    }
    if (best < 0)
      return false;
    p = (gs_sched_placement)1 << best;
  }
  *out = p;
  return true;
}

bool gs_sched_fit(const gs_sched_free *free_now, const gs_sched_free *total,
                  const gs_sched_need *need, gs_sched_placement *placement) {
  const gs_sched_free *states[1] = {free_now};
  return fit_all(states, 1, total, need, placement);
}

bool gs_sched_possible(const gs_sched_free *total, const gs_sched_need *need) {
  gs_sched_placement p;
  return gs_sched_fit(total, total, need, &p);
}

static void apply(gs_sched_free *f, const gs_sched_free *total, const gs_sched_need *need,
                  gs_sched_placement placement, int sign) {
  f->cpus += sign * need->cpus;
  f->host_mem += (uint64_t)(int64_t)sign * need->host_mem;
  for (int d = 0; d < total->n_devices; d++) {
    if (!(placement >> d & 1))
      continue;
    if (need->gpus > 0) {
      f->dev_mem[d] += (uint64_t)(int64_t)sign * total->dev_mem[d];
      f->dev_share[d] += sign * 100;
    } else {
      f->dev_mem[d] += (uint64_t)(int64_t)sign * need->gpu_mem;
      f->dev_share[d] += sign * need->gpu_share;
    }
  }
}

void gs_sched_take(gs_sched_free *f, const gs_sched_free *total, const gs_sched_need *need,
                   gs_sched_placement placement) {
  apply(f, total, need, placement, -1);
}

void gs_sched_give(gs_sched_free *f, const gs_sched_free *total, const gs_sched_need *need,
                   gs_sched_placement placement) {
  apply(f, total, need, placement, +1);
}

/* ---- tenants: usage, quotas, dominant shares ------------------------------------------ */

typedef struct totals {
  double devices, dev_mem, cpus, host_mem;
} totals;

static uint64_t need_device_mem(const gs_sched_free *total, const gs_sched_need *need,
                                gs_sched_placement placement) {
  if (need->gpus == 0)
    return need->gpu_mem;
  uint64_t sum = 0;
  for (int d = 0; d < total->n_devices; d++)
    if (placement >> d & 1)
      sum += total->dev_mem[d];
  return sum;
}

static double need_devices(const gs_sched_need *need) {
  return need->gpus > 0 ? need->gpus : need->gpu_share / 100.0;
}

static void charge(gs_sched_tenant *t, const gs_sched_free *total, const gs_sched_need *need,
                   gs_sched_placement placement) {
  t->used_devices += need_devices(need);
  t->used_device_mem += need_device_mem(total, need, placement);
  t->used_jobs++;
  t->used_cpus += need->cpus;
  t->used_host_mem += need->host_mem;
}

static bool within_quota(const gs_sched_tenant *t, const gs_sched_free *total,
                         const gs_sched_need *need) {
  /* Whole devices count their memory; take the largest device as the bound
   * so that the quota test does not depend on which devices are free. */
  uint64_t mem = need->gpu_mem;
  if (need->gpus > 0) {
    uint64_t largest = 0;
    for (int d = 0; d < total->n_devices; d++)
      if (total->dev_mem[d] > largest)
        largest = total->dev_mem[d];
    mem = largest * (uint64_t)need->gpus;
  }
  if (t->max_devices > 0 && t->used_devices + need_devices(need) > t->max_devices + CPU_EPS)
    return false;
  if (t->max_device_mem > 0 && t->used_device_mem + mem > t->max_device_mem)
    return false;
  if (t->max_jobs > 0 && t->used_jobs + 1 > t->max_jobs)
    return false;
  if (t->max_cpus > 0 && t->used_cpus + need->cpus > t->max_cpus + CPU_EPS)
    return false;
  if (t->max_host_mem > 0 && t->used_host_mem + need->host_mem > t->max_host_mem)
    return false;
  return true;
}

bool gs_sched_within_quota_alone(const gs_sched_tenant *t, const gs_sched_free *total,
                                 const gs_sched_need *need) {
  gs_sched_tenant idle = {.weight = t->weight, .max_devices = t->max_devices,
                          .max_device_mem = t->max_device_mem, .max_jobs = t->max_jobs,
                          .max_cpus = t->max_cpus, .max_host_mem = t->max_host_mem};
  return within_quota(&idle, total, need);
}

/* The larger of a tenant's shares of each resource, over its weight. */
static double dominant_share(const gs_sched_tenant *t, const totals *all) {
  double s = 0, v;
  if (all->devices > 0 && (v = t->used_devices / all->devices) > s)
    s = v;
  if (all->dev_mem > 0 && (v = (double)t->used_device_mem / all->dev_mem) > s)
    s = v;
  if (all->cpus > 0 && (v = t->used_cpus / all->cpus) > s)
    s = v;
  if (all->host_mem > 0 && (v = (double)t->used_host_mem / all->host_mem) > s)
    s = v;
  return s / (t->weight > 0 ? t->weight : 1.0);
}

/* ---- the pass ---------------------------------------------------------------------- */

typedef struct ending {
  int64_t end_s;
  const gs_sched_need *need;
  gs_sched_placement placement;
} ending;

static int by_end(const void *a, const void *b) {
  int64_t x = ((const ending *)a)->end_s, y = ((const ending *)b)->end_s;
  return x < y ? -1 : x > y;
}

static int by_queue_order(const void *a, const void *b, void *jobs) {
  const gs_sched_job *base = jobs;
  const gs_sched_job *x = &base[*(const int *)a], *y = &base[*(const int *)b];
  if (x->priority != y->priority)
    return x->priority > y->priority ? -1 : 1;
  if (x->tenant != y->tenant)
    return x->tenant < y->tenant ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The head job's reservation: when, at the earliest, the jobs running now
 * (and those started in this pass) will have freed enough for it, and what
 * will be free then once it has started. */
typedef struct reservation {
  int64_t at_s;
  gs_sched_free after; /* free at at_s, after the head took its share */
} reservation;

static void reserve(reservation *r, const gs_sched_free *free_now, const gs_sched_free *total,
                    ending *ends, int n_ends, const gs_sched_need *head) {
  qsort(ends, (size_t)n_ends, sizeof *ends, by_end);
  r->after = *free_now;
  r->at_s = GS_SCHED_NO_END;
  gs_sched_placement p;
  for (int i = 0; i < n_ends; i++) {
    gs_sched_give(&r->after, total, ends[i].need, ends[i].placement);
    /* Jobs without a time limit never end as far as planning knows. */
    if (ends[i].end_s == GS_SCHED_NO_END)
      break;
    if (gs_sched_fit(&r->after, total, head, &p)) {
      r->at_s = ends[i].end_s;
      gs_sched_take(&r->after, total, head, p);
      return;
    }
  }
  /* Never, as far as we can tell: backfill may only use what the head could
   * not use even with every running job gone. */
  for (int i = 0; i < n_ends; i++)
    if (ends[i].end_s == GS_SCHED_NO_END)
      gs_sched_give(&r->after, total, ends[i].need, ends[i].placement);
  if (gs_sched_fit(&r->after, total, head, &p))
    gs_sched_take(&r->after, total, head, p);
}

int gs_sched_plan(gs_sched_free *free_now, const gs_sched_free *total, gs_sched_tenant *tenants,
                  int n_tenants, const gs_sched_job *running, int n_running,
                  gs_sched_job *pending, int n_pending, int64_t now_s) {
  totals all = {.devices = total->n_devices, .cpus = total->cpus,
                .host_mem = (double)total->host_mem};
  for (int d = 0; d < total->n_devices; d++)
    all.dev_mem += (double)total->dev_mem[d];
  for (int t = 0; t < n_tenants; t++) {
    tenants[t].used_devices = tenants[t].used_cpus = 0;
    tenants[t].used_device_mem = tenants[t].used_host_mem = 0;
    tenants[t].used_jobs = 0;
  }
  ending *ends = malloc(((size_t)n_running + (size_t)n_pending + 1) * sizeof *ends);
  int *order = malloc(((size_t)n_pending + 1) * sizeof *order);
  /* per tenant, the next job in the current priority level: a cursor into order[] */
  int *cursor = malloc(((size_t)n_tenants + 1) * sizeof *cursor);
  int *stop = malloc(((size_t)n_tenants + 1) * sizeof *stop);
  if (!ends || !order || !cursor || !stop) {
    free(ends);
    free(order);
    free(cursor);
    free(stop);
    for (int i = 0; i < n_pending; i++) {
      pending[i].start = false;
      pending[i].reason = "Resources";
    }
    return 0;
  }
  int n_ends = 0;
  for (int i = 0; i < n_running; i++) {
    if (running[i].tenant >= 0 && running[i].tenant < n_tenants)
      charge(&tenants[running[i].tenant], total, &running[i].need, running[i].placement);
    ends[n_ends++] = (ending){running[i].end_s, &running[i].need, running[i].placement};
  }
  for (int i = 0; i < n_pending; i++) {
    order[i] = i;
    pending[i].start = false;
    pending[i].reason = "Priority";
  }
  qsort_r(order, (size_t)n_pending, sizeof *order, by_queue_order, pending);

  bool have_head = false;
  reservation res = {0};
  int started = 0;
  for (int lo = 0; lo < n_pending;) {
    int hi = lo;
    while (hi < n_pending && pending[order[hi]].priority == pending[order[lo]].priority)
      hi++;
    for (int t = 0; t < n_tenants; t++)
      cursor[t] = stop[t] = -1;
    for (int i = lo; i < hi; i++) {
      int t = pending[order[i]].tenant;
      if (t < 0 || t >= n_tenants)
        continue;
      if (cursor[t] < 0)
        cursor[t] = i;
      stop[t] = i + 1;
    }
    /* Within a priority level: the next job of the tenant with the lowest
     * weighted dominant share (ties: the earlier submission). */
    for (;;) {
      int best = -1;
      double best_share = 0;
      for (int t = 0; t < n_tenants; t++) {
        if (cursor[t] < 0 || cursor[t] >= stop[t])
          continue;
        double s = dominant_share(&tenants[t], &all);
        if (best < 0 || s < best_share ||
            (s == best_share && pending[order[cursor[t]]].seq < pending[order[cursor[best]]].seq)) {
          best = t;
          best_share = s;
        }
      }
      if (best < 0)
        break;
      gs_sched_job *j = &pending[order[cursor[best]++]];
      gs_sched_tenant *tn = &tenants[best];
      if (!within_quota(tn, total, &j->need)) {
        j->reason = "QuotaExceeded";
        continue;
      }
      gs_sched_placement p;
      if (!have_head) {
        if (gs_sched_fit(free_now, total, &j->need, &p)) {
          j->start = true;
          j->placement = p;
          gs_sched_take(free_now, total, &j->need, p);
          charge(tn, total, &j->need, p);
          ends[n_ends++] = (ending){j->limit_s > 0 ? now_s + j->limit_s : GS_SCHED_NO_END,
                                    &j->need, p};
          started++;
        } else {
          j->reason = "Resources";
          have_head = true;
          reserve(&res, free_now, total, ends, n_ends, &j->need);
        }
        continue;
      }
      /* Backfill: fits now, and either ends before the head's reservation
       * or leaves what the head will need at that time. */
      int64_t end = j->limit_s > 0 ? now_s + j->limit_s : GS_SCHED_NO_END;
      const gs_sched_free *both[2] = {free_now, &res.after};
      bool ok = false;
      if (end <= res.at_s && end != GS_SCHED_NO_END)
        ok = gs_sched_fit(free_now, total, &j->need, &p);
      else if (fit_all(both, 2, total, &j->need, &p)) {
        ok = true;
        gs_sched_take(&res.after, total, &j->need, p);
      }
      if (ok) {
        j->start = true;
        j->placement = p;
        gs_sched_take(free_now, total, &j->need, p);
        charge(tn, total, &j->need, p);
        started++;
      }
    }
    lo = hi;
  }
  free(ends);
  free(order);
  free(cursor);
  free(stop);
  return started;
}

/* ---- preemption ------------------------------------------------------------------------ */

typedef struct candidate {
  int index;
  int priority;
  int64_t end_s; /* started later ~ ends later: the least work lost */
} candidate;

static int by_cheapest_victim(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->priority != y->priority)
    return x->priority < y->priority ? -1 : 1;
  return x->end_s > y->end_s ? -1 : x->end_s < y->end_s;
}

int gs_sched_victims(const gs_sched_free *free_now, const gs_sched_free *total,
                     const gs_sched_job *running, int n_running, const gs_sched_job *head,
                     bool *victim) {
  gs_sched_free trial = *free_now;
  gs_sched_placement p;
  for (int i = 0; i < n_running; i++) {
    victim[i] = false;
    if (running[i].leaving)
      gs_sched_give(&trial, total, &running[i].need, running[i].placement);
  }
  if (gs_sched_fit(&trial, total, &head->need, &p))
    return 0; /* those already leaving make room enough */
  candidate *c = malloc(((size_t)n_running + 1) * sizeof *c);
  if (!c)
    return 0;
  int n = 0;
  for (int i = 0; i < n_running; i++)
    if (!running[i].leaving && running[i].priority < head->priority)
      c[n++] = (candidate){i, running[i].priority, running[i].end_s};
  qsort(c, (size_t)n, sizeof *c, by_cheapest_victim);
  int chosen = 0;
  bool fits = false;
  for (int k = 0; k < n && !fits; k++) {
    const gs_sched_job *r = &running[c[k].index];
    gs_sched_give(&trial, total, &r->need, r->placement);
    victim[c[k].index] = true;
    chosen++;
    fits = gs_sched_fit(&trial, total, &head->need, &p);
  }
  free(c);
  if (!fits) {
    for (int i = 0; i < n_running; i++)
      victim[i] = false;
    return 0;
  }
  /* Spare those whose stopping turned out not to be needed (an earlier
   * pick freed what a later one was chosen for). */
  for (int i = 0; i < n_running; i++) {
    if (!victim[i])
      continue;
    gs_sched_free without = trial;
    gs_sched_take(&without, total, &running[i].need, running[i].placement);
    if (gs_sched_fit(&without, total, &head->need, &p)) {
      victim[i] = false;
      trial = without;
      chosen--;
    }
  }
  return chosen;
}

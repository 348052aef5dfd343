/* idle.c - models nobody calls give their memory back: a model configured
 * with idle_unload_seconds is unloaded once that long has passed without a
 * request (its plans, weights and their bookings go), shows as
 * UNLOADED_IDLE, and the next request loads it again and waits for that
 * load. */
#include "api/idle.h"

#include "base/clock.h"
#include "base/thread.h"
#include "base/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* How often the idle thread looks: a limit is kept to within this. */
#define IDLE_CHECK_MS 250

/* ---- unloading ----------------------------------------------------------------------------- */

static bool idle_past_limit(gs_served_model *m, uint64_t now) {
  if (m->idle_unload_s <= 0 || atomic_load(&m->state) != GS_MODEL_READY ||
      atomic_load(&m->in_flight) > 0)
    return false;
  uint64_t last = atomic_load(&m->last_used_ns);
  return now > last && now - last >= (uint64_t)m->idle_unload_s * 1000000000u;
}

/* Unloads m if it is idle past its limit (the admin lock held, which keeps
 * its configuration still). A request using it now, or on its way into the
 * batcher, holds its use lock shared: then it is not idle, and is left. */
static void unload_if_idle(gs_served_model *m) {
  if (!idle_past_limit(m, gs_now_ns()) || pthread_rwlock_trywrlock(&m->use) != 0)
    return;
  if (idle_past_limit(m, gs_now_ns())) {
    /* The state first: a request that arrives now waits for the load
     * again instead of being told "unloading". */
    atomic_store(&m->state, GS_MODEL_UNLOADED_IDLE);
    int64_t limit = m->idle_unload_s;
    atomic_store(&m->idle_timeout_us, m->default_timeout_us);
    gs__repository_unload_locked(m);
    snprintf(m->reason, sizeof m->reason, "unloaded after %lld s without requests "
             "(idle_unload_seconds); the next request loads it again", (long long)limit);
    atomic_fetch_add(&m->unloads[GS_UNLOAD_IDLE], 1);
    GS_LOGI("api", "model %s unloaded after %lld s idle", m->name, (long long)limit);
  }
  pthread_rwlock_unlock(&m->use);
}

static void *idle_main(void *arg) {
  gs_repository *repo = arg;
  pthread_mutex_lock(&repo->idler_lock);
  while (!atomic_load(&repo->closing)) {
    gs_cond_wait_until(&repo->idler_wake, &repo->idler_lock,
                       gs_now_ns() + (uint64_t)IDLE_CHECK_MS * 1000000u);
    if (atomic_load(&repo->closing))
      break;
    /* A load or unload in progress holds the admin lock for as long as it
     * takes: this round is skipped rather than waiting behind it. */
    if (pthread_mutex_trylock(&repo->admin) != 0)
      continue;
    int n = atomic_load(&repo->n_models);
    for (int i = 0; i < n; i++)
      unload_if_idle(&repo->models[i]);
    pthread_mutex_unlock(&repo->admin);
  }
  pthread_mutex_unlock(&repo->idler_lock);
  return NULL;
}

void gs__idle_start(gs_repository *repo) {
  pthread_mutex_init(&repo->idler_lock, NULL);
  gs_cond_init_monotonic(&repo->idler_wake);
  repo->idler_started = pthread_create(&repo->idler, NULL, idle_main, repo) == 0;
  if (!repo->idler_started)
    GS_LOGW("api", "no thread for unloading idle models: idle_unload_seconds has no effect");
}

void gs__idle_stop(gs_repository *repo) {
  if (!repo->idler_started)
    return;
  pthread_mutex_lock(&repo->idler_lock);
  pthread_cond_signal(&repo->idler_wake);
  pthread_mutex_unlock(&repo->idler_lock);
  pthread_join(repo->idler, NULL);
  repo->idler_started = false;
  pthread_cond_destroy(&repo->idler_wake);
  pthread_mutex_destroy(&repo->idler_lock);
}

/* ---- loading again on demand --------------------------------------------------------------- */

typedef struct demand_load {
  gs_repository *repo;
  gs_served_model *m;
} demand_load;

/* Loads the model again, unless something else has (an admin's load or
 * unload) in the meantime, then wakes every request that waited. */
static void *demand_main(void *arg) {
  demand_load *d = arg;
  gs_repository *repo = d->repo;
  gs_served_model *m = d->m;
  free(d);
  pthread_mutex_lock(&repo->admin);
  pthread_rwlock_wrlock(&m->use);
  if (atomic_load(&m->state) == GS_MODEL_UNLOADED_IDLE && !atomic_load(&repo->closing)) {
    atomic_store(&m->state, GS_MODEL_LOADING);
    gs__repository_load_locked(repo, m, GS_LOAD_DEMAND);
    GS_LOGI("api", "model %s loaded again on demand in %.0f ms", m->name,
            (double)atomic_load(&m->last_load_ns) / 1e6);
  }
  pthread_rwlock_unlock(&m->use);
  pthread_mutex_unlock(&repo->admin);
  pthread_mutex_lock(&m->demand_lock);
  gs_load_waiter *w = NULL;
  while (m->waiters) { /* reversed: the first to come is the first woken */
    gs_load_waiter *next = m->waiters->next;
    m->waiters->next = w;
    w = m->waiters;
    m->waiters = next;
  }
  atomic_store(&m->demand_active, false);
  pthread_mutex_unlock(&m->demand_lock);
  uint64_t now = gs_now_ns();
  /* The idle clock starts after the waiters are on their way, so that none
   * can find the model unloaded again before its turn. */
  atomic_store(&m->last_used_ns, now);
  while (w) {
    gs_load_waiter *next = w->next; /* w may be gone once woken */
    atomic_fetch_add(&m->load_waits, 1);
    atomic_fetch_add(&m->load_wait_ns, now - w->since_ns);
    w->loaded(w);
    w = next;
  }
  atomic_fetch_sub(&repo->admin_running, 1);
  return NULL;
}

/* Starts demand_main (m's demand lock held); false when no thread can be
 * made. */
static bool start_demand_load(gs_repository *repo, gs_served_model *m) {
  demand_load *d = malloc(sizeof *d);
  if (!d)
    return false;
  *d = (demand_load){.repo = repo, .m = m};
  atomic_fetch_add(&repo->admin_running, 1); /* the daemon's stop waits for it */
  bool ok = gs_run_detached(demand_main, d);
  if (!ok) {
    atomic_fetch_sub(&repo->admin_running, 1);
    free(d);
  }
  return ok;
}

gs_wait_outcome gs_served_wait_load(gs_repository *repo, gs_served_model *m, gs_load_waiter *w,
                                    int *retry_after_s) {
  if (atomic_load(&repo->closing))
    return GS_WAIT_NONE;
  pthread_mutex_lock(&m->demand_lock);
  bool active = atomic_load(&m->demand_active);
  if (!active && atomic_load(&m->state) != GS_MODEL_UNLOADED_IDLE) {
    pthread_mutex_unlock(&m->demand_lock);
    return GS_WAIT_NONE;
  }
  if (!active) {
    if (!start_demand_load(repo, m)) {
      pthread_mutex_unlock(&m->demand_lock);
      return GS_WAIT_NONE; /* answered as unloaded; the next request tries again */
    }
    atomic_store(&m->demand_active, true);
  }
  /* The last load's time is a guess at this one's. */
  uint64_t timeout_us = atomic_load(&m->idle_timeout_us), load_ns = atomic_load(&m->last_load_ns);
  if (timeout_us > 0 && load_ns / 1000 > timeout_us) {
    pthread_mutex_unlock(&m->demand_lock);
    *retry_after_s = (int)(load_ns / 1000000000u) + 1;
    return GS_WAIT_TOO_SLOW;
  }
  w->since_ns = gs_now_ns();
  w->next = m->waiters;
  m->waiters = w;
  pthread_mutex_unlock(&m->demand_lock);
  return GS_WAIT_JOINED;
}

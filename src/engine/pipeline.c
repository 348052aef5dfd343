/* pipeline.c - the overlapped pipeline of pipeline.h: one lock for its
 * bookkeeping (items are coarse, a batch each) and a condition variable per
 * stage, so that a hand-off wakes only the stage it concerns; a free list of
 * slots that the source draws from (back-pressure), an input queue per
 * stage, and an in-order hand-off so that every queue stays in submission
 * order whatever the number of threads per stage. */
#include "engine/pipeline.h"

#include "base/clock.h"
#include "base/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct item_queue {
  int *slot;
  int64_t *seq;
  int head, count, cap;
} item_queue;

typedef struct run_state {
  const gs_pipeline_stage *stages;
  int n;
  pthread_mutex_t lock;
  pthread_cond_t cond[GS_PIPELINE_MAX_STAGES]; /* [k]: stage k has something to look at */
  item_queue queue[GS_PIPELINE_MAX_STAGES]; /* [0]: free slots; [k]: stage k's input */
  int64_t taken[GS_PIPELINE_MAX_STAGES];    /* items each stage has taken */
  int active[GS_PIPELINE_MAX_STAGES];       /* threads in each stage's run() now */
  int64_t next_out[GS_PIPELINE_MAX_STAGES]; /* the seq each stage hands on next */
  int64_t end_seq;                          /* INT64_MAX until the source ends */
  bool stop;
  atomic_bool *cancel;
  gs_pipeline_result *result;
  int error;
} run_state;

typedef struct worker {
  run_state *st;
  int stage;
  pthread_t thread;
} worker;

static void push(item_queue *q, int slot, int64_t seq) {
  int at = (q->head + q->count) % q->cap;
  q->slot[at] = slot;
  q->seq[at] = seq;
  q->count++;
}

static void pop(item_queue *q, int *slot, int64_t *seq) {
  *slot = q->slot[q->head];
  *seq = q->seq[q->head];
  q->head = (q->head + 1) % q->cap;
  q->count--;
}

/* Time a stage's run() spent waiting for work outside the pipeline (the
 * source waiting for requests): counted as waiting for input, not busy. */
static _Thread_local uint64_t outside_wait_ns;
/* Set by a source whose run() knows that more items are ready at once. */
static _Thread_local bool source_has_more;

void gs_pipeline_note_wait(uint64_t ns) { outside_wait_ns += ns; }
void gs_pipeline_note_more(void) { source_has_more = true; }

static void wake_all(run_state *st) {
  for (int k = 0; k < st->n; k++)
    pthread_cond_broadcast(&st->cond[k]);
}

/* Waits until stage k's condition is signalled; with a cancel flag to
 * watch, for a short while at most, so that an external cancel is seen
 * even when nobody signals. Called with the lock held. */
static void wait_for(run_state *st, int k) {
  if (!st->cancel) {
    pthread_cond_wait(&st->cond[k], &st->lock);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 20 * 1000 * 1000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  pthread_cond_timedwait(&st->cond[k], &st->lock, &ts);
}

static bool cancelled(run_state *st) {
  if (st->cancel && atomic_load(st->cancel) && !st->stop) {
    st->stop = true;
    st->result->cancelled = true;
    wake_all(st);
  }
  return st->stop;
}

/* Records the first failure and stops every stage. Lock held. */
static void fail(run_state *st, int stage, int code) {
  if (st->error == 0) {
    st->error = code;
    st->result->failed_stage = stage;
    snprintf(st->result->error, sizeof st->result->error, "%s: %s", st->stages[stage].name,
             gs_error_detail());
  }
  st->stop = true;
  wake_all(st);
}

/* Adds to a stage's figures while the pipeline runs: atomically, so that
 * gs_pipeline_read_stats can read them from another thread meanwhile. */
static void add_stat(uint64_t *field, uint64_t value) {
  __atomic_fetch_add(field, value, __ATOMIC_RELAXED);
}

/* Whether the thread of stage `own`, handing item `seq` on to stage `to`,
 * runs `to` itself: `to` allows it, has one thread, which is idle with
 * nothing queued and expects this very item; and the thread's own stage
 * has no work waiting, so that nothing is held up meanwhile. A lone item
 * then crosses the pipeline without a thread wake-up per stage; under load
 * the stages keep to their own threads and overlap. Lock held. */
static bool runs_through(const run_state *st, int own, int to, int64_t seq) {
  const gs_pipeline_stage *next = &st->stages[to];
  /* A stage of several threads hands on at once: a sibling may be waiting
   * to hand on the next item after this one. */
  if (!next->run_through || next->threads != 1 || st->stages[own].threads != 1 ||
      st->active[to] > 0 || st->queue[to].count > 0 || st->taken[to] != seq || st->stop)
    return false;
  return own == 0 ? !source_has_more : st->queue[own].count == 0;
}

/* Runs stage k on an item in the calling thread and times it. */
static int run_stage(run_state *st, int k, int slot, int64_t seq) {
  const gs_pipeline_stage *stage = &st->stages[k];
  gs_pipeline_stage_stats *figures = &st->result->stages[k];
  outside_wait_ns = 0;
  uint64_t t1 = gs_now_ns();
  int rc = stage->run(stage->ctx, slot, seq);
  uint64_t spent = gs_now_ns() - t1, waited = outside_wait_ns < spent ? outside_wait_ns : spent;
  add_stat(&figures->busy_ns, spent - waited);
  add_stat(&figures->wait_in_ns, waited);
  return rc;
}

static void *stage_thread(void *arg) {
  worker *w = arg;
  run_state *st = w->st;
  const int k = w->stage;
  const gs_pipeline_stage *stage = &st->stages[k];
  gs_pipeline_stage_stats *figures = &st->result->stages[k];
  pthread_mutex_lock(&st->lock);
  for (;;) {
    /* An item: a free slot and the next seq for the source, else the next
     * item of this stage's queue. */
    uint64_t t0 = gs_now_ns();
    bool finished = false;
    while (!cancelled(st)) {
      if (st->taken[k] >= st->end_seq) {
        finished = true;
        break;
      }
      if (st->queue[k].count > 0 && st->active[k] < stage->threads)
        break;
      wait_for(st, k);
    }
    add_stat(&figures->wait_in_ns, gs_now_ns() - t0);
    if (finished || st->stop)
      break;
    int slot;
    int64_t seq;
    if (k == 0) {
      int64_t unused;
      pop(&st->queue[0], &slot, &unused);
      seq = st->taken[0];
    } else {
      pop(&st->queue[k], &slot, &seq);
    }
    st->taken[k]++;
    st->active[k]++;
    pthread_mutex_unlock(&st->lock);

    source_has_more = false;
    int rc = run_stage(st, k, slot, seq);

    pthread_mutex_lock(&st->lock);
    st->active[k]--;
    if (rc < 0) {
      fail(st, k, rc);
      break;
    }
    if (k == 0 && rc == 1) { /* the input ended before this seq */
      if (seq < st->end_seq)
        st->end_seq = seq;
      push(&st->queue[0], slot, 0);
      wake_all(st); /* every stage compares its count with the end */
      continue;
    }
    /* Hand on in order. */
    uint64_t t2 = gs_now_ns();
    while (!cancelled(st) && st->next_out[k] != seq && seq < st->end_seq)
      wait_for(st, k);
    add_stat(&figures->wait_out_ns, gs_now_ns() - t2);
    if (st->stop)
      break;
    /* Stage `at` is done with the item: on to the next stage, or through
     * it in this thread (runs_through), and so on. */
    int at = k;
    for (;;) {
      int to = at + 1;
      bool last = seq >= st->end_seq || at == st->n - 1; /* or a source went past the end */
      if (seq < st->end_seq) {
        st->next_out[at]++;
        add_stat((uint64_t *)&st->result->stages[at].items, 1);
      }
      if (!last && runs_through(st, k, to, seq)) {
        st->taken[to]++;
        st->active[to]++;
        pthread_mutex_unlock(&st->lock);
        rc = run_stage(st, to, slot, seq);
        pthread_mutex_lock(&st->lock);
        st->active[to]--;
        if (st->queue[to].count > 0) /* its own thread may be waiting for us to finish */
          pthread_cond_signal(&st->cond[to]);
        if (rc < 0) {
          fail(st, to, rc);
          break;
        }
        at = to;
        continue;
      }
      if (last) {
        push(&st->queue[0], slot, 0);
        to = 0;
        if (seq < st->end_seq)
          add_stat((uint64_t *)&st->result->items, 1);
      } else {
        push(&st->queue[to], slot, seq);
      }
      /* One thread of the next stage has an item; with several, some may be
       * waiting on their order rather than for an item, so wake them all. */
      if (st->stages[to].threads > 1)
        pthread_cond_broadcast(&st->cond[to]);
      else
        pthread_cond_signal(&st->cond[to]);
      break;
    }
    if (st->stop)
      break;
    if (stage->threads > 1) /* a sibling may be waiting to hand on the next seq */
      pthread_cond_broadcast(&st->cond[k]);
  }
  wake_all(st);
  pthread_mutex_unlock(&st->lock);
  return NULL;
}

int gs_pipeline_run(const gs_pipeline_stage *stages, int n_stages, int slots,
                    atomic_bool *cancel, gs_pipeline_result *out) {
  memset(out, 0, sizeof *out);
  out->failed_stage = -1;
  if (n_stages < 1 || n_stages > GS_PIPELINE_MAX_STAGES)
    return gs_error(GS_EINVAL, "a pipeline has 1 to %d stages, not %d", GS_PIPELINE_MAX_STAGES,
                    n_stages);
  if (slots < 1 || slots > 1024)
    return gs_error(GS_EINVAL, "a pipeline has 1 to 1024 slots, not %d", slots);
  int total_threads = 0;
  for (int k = 0; k < n_stages; k++) {
    if (stages[k].threads < 1 || !stages[k].run || !stages[k].name)
      return gs_error(GS_EINVAL, "stage '%s' needs a run function and 1 thread or more",
                      stages[k].name ? stages[k].name : "?");
    total_threads += stages[k].threads;
  }
  if (total_threads > GS_PIPELINE_MAX_THREADS)
    return gs_error(GS_EINVAL, "a pipeline runs at most %d threads, not %d",
                    GS_PIPELINE_MAX_THREADS, total_threads);
  run_state st = {.stages = stages, .n = n_stages, .end_seq = INT64_MAX, .cancel = cancel,
                  .result = out};
  int rc = GS_OK;
  for (int k = 0; k < n_stages && rc == 0; k++) {
    snprintf(out->stages[k].name, sizeof out->stages[k].name, "%s", stages[k].name);
    out->stages[k].threads = stages[k].threads;
    __atomic_store_n(&out->n_stages, k + 1, __ATOMIC_RELEASE); /* named before counted */
    item_queue *q = &st.queue[k];
    q->cap = slots;
    q->slot = malloc((size_t)slots * sizeof *q->slot);
    q->seq = malloc((size_t)slots * sizeof *q->seq);
    if (!q->slot || !q->seq)
      rc = gs_error(GS_ENOMEM, "out of memory for a pipeline");
  }
  worker *workers = rc == 0 ? calloc((size_t)total_threads, sizeof *workers) : NULL;
  if (rc == 0 && !workers)
    rc = gs_error(GS_ENOMEM, "out of memory for a pipeline");
  if (rc == 0) {
    for (int i = 0; i < slots; i++)
      push(&st.queue[0], i, 0);
    pthread_mutex_init(&st.lock, NULL);
    for (int k = 0; k < n_stages; k++)
      pthread_cond_init(&st.cond[k], NULL);
    uint64_t start = gs_now_ns();
    int started = 0;
    for (int k = 0; k < n_stages; k++)
      for (int t = 0; t < stages[k].threads; t++) {
        workers[started] = (worker){.st = &st, .stage = k};
        if (pthread_create(&workers[started].thread, NULL, stage_thread, &workers[started]) != 0) {
          pthread_mutex_lock(&st.lock);
          st.stop = true;
          if (st.error == 0)
            st.error = gs_error(GS_EIO, "cannot start a pipeline thread");
          wake_all(&st);
          pthread_mutex_unlock(&st.lock);
          k = n_stages;
          break;
        }
        started++;
      }
    for (int i = 0; i < started; i++)
      pthread_join(workers[i].thread, NULL);
    out->wall_ns = gs_now_ns() - start;
    for (int k = 0; k < n_stages; k++)
      pthread_cond_destroy(&st.cond[k]);
    pthread_mutex_destroy(&st.lock);
    rc = st.error ? st.error
         : out->cancelled ? gs_error(GS_ECANCELED, "the pipeline was cancelled")
                          : GS_OK;
    if (st.error && out->failed_stage >= 0)
      gs_error(st.error, "%s", out->error);
  }
  free(workers);
  for (int k = 0; k < n_stages; k++) {
    free(st.queue[k].slot);
    free(st.queue[k].seq);
  }
  return rc;
}

void gs_pipeline_read_stats(const gs_pipeline_result *live, gs_pipeline_result *copy) {
  memset(copy, 0, sizeof *copy);
  copy->failed_stage = -1;
  /* A stage is counted once named (release in gs_pipeline_run). */
  int n = __atomic_load_n(&live->n_stages, __ATOMIC_ACQUIRE);
  copy->n_stages = n < GS_PIPELINE_MAX_STAGES ? n : GS_PIPELINE_MAX_STAGES;
  copy->items = (int64_t)__atomic_load_n((const uint64_t *)&live->items, __ATOMIC_RELAXED);
  for (int k = 0; k < copy->n_stages; k++) {
    const gs_pipeline_stage_stats *from = &live->stages[k];
    gs_pipeline_stage_stats *to = &copy->stages[k];
    memcpy(to->name, from->name, sizeof to->name);
    to->name[sizeof to->name - 1] = '\0';
    to->threads = from->threads;
    to->items = (int64_t)__atomic_load_n((const uint64_t *)&from->items, __ATOMIC_RELAXED);
    to->busy_ns = __atomic_load_n(&from->busy_ns, __ATOMIC_RELAXED);
    to->wait_in_ns = __atomic_load_n(&from->wait_in_ns, __ATOMIC_RELAXED);
    to->wait_out_ns = __atomic_load_n(&from->wait_out_ns, __ATOMIC_RELAXED);
  }
}

int gs_pipeline_slowest(const gs_pipeline_result *r) {
  int best = -1;
  double best_busy = -1;
  for (int k = 0; k < r->n_stages; k++) {
    double per_thread = (double)r->stages[k].busy_ns / (r->stages[k].threads ? r->stages[k].threads : 1);
    if (per_thread > best_busy) {
      best_busy = per_thread;
      best = k;
    }
  }
  return best;
}

/* batcher.c - the dynamic batcher of one served model. One thread per
 * instance of the model takes requests by priority (then arrival), so the
 * instances run batches side by side; each gathers more of the same
 * version and row shape up to a preferred or the maximum batch size while
 * the first one has waited less than the maximum queue delay, concatenates
 * their rows, runs the batch, and hands each request its rows back. */
#include "api/batcher.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>

typedef struct batcher_worker {
  struct gs_batcher *b;
  gs_instance *inst;
  pthread_t thread;
} batcher_worker;

struct gs_batcher {
  gs_served_model *m;
  int n_workers;
  batcher_worker workers[GS_REPO_MAX_INSTANCES];
  pthread_mutex_t lock;
  pthread_cond_t cond;
  gs_infer_request *head; /* sorted by priority, then arrival */
  int64_t queued;
  bool stopping;
};

void gs_infer_request_clear(gs_infer_request *r) {
  for (int i = 0; i < GS_REQ_MAX_IO; i++) {
    free(r->owned[i]);
    free(r->outputs[i]);
    r->owned[i] = r->outputs[i] = NULL;
  }
}

static void stat_add(gs_duration_stat *s, uint64_t ns) {
  s->count++;
  s->ns += ns;
}

static void finish(gs_infer_request *r, int status, const char *error) {
  gs_served_model *m = r->model;
  uint64_t now = gs_now_ns();
  r->status = status;
  if (error)
    snprintf(r->error, sizeof r->error, "%s", error);
  pthread_mutex_lock(&m->stats_lock);
  stat_add(status == 200 ? &m->stats.success : &m->stats.fail, now - r->t_arrive);
  pthread_mutex_unlock(&m->stats_lock);
  r->done(r, r->ctx);
}

/* Whether queued request q goes before r: by priority (lower number
 * first); within a priority, timed-out (delayed) requests go behind the
 * others; then by arrival. */
static bool goes_before(const gs_infer_request *q, const gs_infer_request *r) {
  if (q->priority != r->priority)
    return q->priority < r->priority;
  return !q->delayed || r->delayed;
}

static void enqueue(gs_batcher *b, gs_infer_request *r) {
  gs_infer_request **at = &b->head;
  while (*at && goes_before(*at, r))
    at = &(*at)->next;
  r->next = *at;
  *at = r;
  b->queued++;
}

int gs_batcher_submit(gs_batcher *b, gs_infer_request *r) {
  gs_served_model *m = b->m;
  if (r->priority <= 0)
    r->priority = m->default_priority > 0 ? m->default_priority : 1;
  if (!r->timeout_us)
    r->timeout_us = m->default_timeout_us;
  r->t_arrive = gs_now_ns();
  pthread_mutex_lock(&b->lock);
  if (m->max_queue_size > 0 && b->queued >= m->max_queue_size) {
    pthread_mutex_unlock(&b->lock);
    return gs_error(GS_EBUSY, "model %s: the queue is full (max_queue_size %lld)", m->name,
                    (long long)m->max_queue_size);
  }
  enqueue(b, r);
  /* Every worker: the one that wakes may be gathering a batch this
   * request does not fit, while another instance sits idle. */
  pthread_cond_broadcast(&b->cond);
  pthread_mutex_unlock(&b->lock);
  return GS_OK;
}

/* Whether r can join a batch led by `first`: same version, same rows. */
static bool compatible(const gs_infer_request *first, const gs_infer_request *r) {
  if (r->version != first->version)
    return false;
  int n = first->version->model->n_inputs;
  for (int i = 0; i < n; i++) {
    const gs_shape *a = &first->shapes[i], *c = &r->shapes[i];
    if (a->rank != c->rank)
      return false;
    for (int d = 1; d < a->rank; d++)
      if (a->dims[d] != c->dims[d])
        return false;
  }
  return true;
}

/* The batch size to aim for: the largest preferred size that fits, else the maximum. */
static int64_t target_size(const gs_served_model *m) {
  int64_t best = 0;
  for (int i = 0; i < m->n_preferred; i++)
    if (m->preferred_batch_sizes[i] <= m->max_batch_size && m->preferred_batch_sizes[i] > best)
      best = m->preferred_batch_sizes[i];
  return best ? best : m->max_batch_size;
}

static bool is_preferred(const gs_served_model *m, int64_t size) {
  for (int i = 0; i < m->n_preferred; i++)
    if (m->preferred_batch_sizes[i] == size)
      return true;
  return false;
}

/* Removes from the queue the requests whose queue timeout has passed: into
 * `expired` to be rejected, or (timeout_action DELAY) back into the queue
 * behind the requests of their priority that have not timed out. */
static void take_expired(gs_batcher *b, uint64_t now, gs_infer_request **expired) {
  gs_infer_request *delayed = NULL, **delayed_tail = &delayed; /* in arrival order */
  for (gs_infer_request **at = &b->head; *at;) {
    gs_infer_request *r = *at;
    if (!r->delayed && r->timeout_us && now - r->t_arrive > r->timeout_us * 1000) {
      *at = r->next;
      b->queued--;
      if (b->m->timeout_delays) {
        r->next = NULL;
        *delayed_tail = r;
        delayed_tail = &r->next;
      } else {
        r->next = *expired;
        *expired = r;
      }
    } else {
      at = &r->next;
    }
  }
  while (delayed) {
    gs_infer_request *r = delayed;
    delayed = r->next;
    r->delayed = true;
    enqueue(b, r);
  }
}

/* Takes the next batch off the queue (lock held): the first request and
 * those that fit with it. Waits up to the max queue delay for more when the
 * model batches. Returns the count, 0 when stopping with nothing queued. */
static int next_batch(gs_batcher *b, gs_infer_request **batch, int max, int64_t *rows) {
  gs_served_model *m = b->m;
  gs_infer_request *expired = NULL;
  for (;;) {
    while (!b->head && !b->stopping)
      pthread_cond_wait(&b->cond, &b->lock);
    take_expired(b, gs_now_ns(), &expired);
    if (expired) {
      /* Answer them outside the lock: their callbacks may take others. */
      pthread_mutex_unlock(&b->lock);
      while (expired) {
        gs_infer_request *r = expired;
        expired = r->next;
        finish(r, 503, "timed out waiting in the queue");
      }
      pthread_mutex_lock(&b->lock);
      continue;
    }
    if (!b->head)
      return 0;
    break;
  }
  gs_infer_request *first = b->head;
  b->head = first->next;
  b->queued--;
  batch[0] = first;
  int n = 1;
  *rows = first->batch;
  if (m->max_batch_size == 0)
    return n;
  int64_t target = target_size(m);
  uint64_t deadline = first->t_arrive + m->max_queue_delay_us * 1000;
  for (;;) {
    /* Take what fits from the queue, in order. */
    for (gs_infer_request **at = &b->head; *at && n < max && *rows < target;) {
      gs_infer_request *r = *at;
      if (compatible(first, r) && *rows + r->batch <= m->max_batch_size) {
        *at = r->next;
        b->queued--;
        batch[n++] = r;
        *rows += r->batch;
      } else {
        at = &r->next;
      }
    }
    if (*rows >= target || is_preferred(m, *rows) || n == max || b->stopping)
      break;
    uint64_t now = gs_now_ns();
    if (now >= deadline)
      break;
    /* The condition waits on CLOCK_MONOTONIC, gs_now_ns()'s clock. */
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000u),
                          .tv_nsec = (long)(deadline % 1000000000u)};
    pthread_cond_timedwait(&b->cond, &b->lock, &ts);
  }
  if (b->head)
    pthread_cond_signal(&b->cond); /* what this batch left is another instance's */
  return n;
}

/* Concatenates the batch's inputs along their first dimension, runs the
 * batch, and gives each request its rows of every output. */
static void run_batch(gs_served_model *m, gs_instance *inst, gs_infer_request **batch, int n,
                      int64_t rows) {
  gs_served_version *v = batch[0]->version;
  const gs_model *model = v->model;
  uint64_t t0 = gs_now_ns();
  for (int k = 0; k < n; k++)
    batch[k]->t_batch = t0;
  gs_shape shapes[GS_REQ_MAX_IO];
  const void *inputs[GS_REQ_MAX_IO];
  void *joined[GS_REQ_MAX_IO] = {0};
  void *outputs[GS_REQ_MAX_IO] = {0};
  gs_plan_value_info info[GS_REQ_MAX_IO];
  int rc = 0;
  for (int i = 0; i < model->n_inputs; i++) {
    shapes[i] = batch[0]->shapes[i];
    inputs[i] = batch[0]->inputs[i];
    if (n == 1)
      continue;
    shapes[i].dims[0] = rows;
    size_t row_bytes = (size_t)(gs_shape_numel(&batch[0]->shapes[i]) / batch[0]->batch) *
                       gs_dtype_size(model->inputs[i].dtype);
    char *buf = malloc(row_bytes * (size_t)rows + 1);
    if (!buf) {
      rc = gs_error(GS_ENOMEM, "out of memory joining a batch of %lld rows", (long long)rows);
      break;
    }
    size_t at = 0;
    for (int k = 0; k < n; k++) {
      memcpy(buf + at, batch[k]->inputs[i], row_bytes * (size_t)batch[k]->batch);
      at += row_bytes * (size_t)batch[k]->batch;
    }
    joined[i] = buf;
    inputs[i] = buf;
  }
  uint64_t t1 = gs_now_ns();
  if (rc == 0)
    rc = gs_served_run(m, inst, v, shapes, inputs, outputs, info);
  uint64_t t2 = gs_now_ns();
  int status = rc == 0 ? 200 : rc == GS_EINVAL ? 400 : 500;
  char error[600];
  snprintf(error, sizeof error, "%s", rc < 0 ? gs_error_detail() : "");
  /* Each request's rows of each output. */
  for (int k = 0, row = 0; rc == 0 && k < n; row += (int)batch[k]->batch, k++) {
    gs_infer_request *r = batch[k];
    for (int o = 0; o < model->n_outputs && status == 200; o++) {
      r->out_info[o] = info[o];
      if (n == 1) {
        r->outputs[o] = outputs[o];
        outputs[o] = NULL;
        continue;
      }
      int64_t out_rows = info[o].shape.rank ? info[o].shape.dims[0] : 1;
      size_t row_bytes = out_rows ? info[o].bytes / (size_t)out_rows : 0;
      r->out_info[o].shape.dims[0] = r->batch;
      r->out_info[o].bytes = row_bytes * (size_t)r->batch;
      if (!(r->outputs[o] = malloc(r->out_info[o].bytes + 1))) {
        status = 500;
        snprintf(error, sizeof error, "out of memory splitting a batch");
        break;
      }
      memcpy(r->outputs[o], (char *)outputs[o] + row_bytes * (size_t)row, r->out_info[o].bytes);
    }
  }
  uint64_t t3 = gs_now_ns();
  pthread_mutex_lock(&m->stats_lock);
  for (int k = 0; k < n; k++) {
    stat_add(&m->stats.queue, t0 - batch[k]->t_arrive);
    stat_add(&m->stats.compute_input, t1 - t0);
    stat_add(&m->stats.compute_infer, t2 - t1);
    stat_add(&m->stats.compute_output, t3 - t2);
  }
  if (status == 200) {
    m->stats.inference_count += (uint64_t)rows;
    m->stats.execution_count++;
    gs_duration_stat *bs = m->stats.batch[rows <= GS_STATS_MAX_BATCH ? rows : 0];
    stat_add(&bs[0], t1 - t0);
    stat_add(&bs[1], t2 - t1);
    stat_add(&bs[2], t3 - t2);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->stats.last_inference_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  }
  pthread_mutex_unlock(&m->stats_lock);
  for (int i = 0; i < GS_REQ_MAX_IO; i++) {
    free(joined[i]);
    free(outputs[i]);
  }
  for (int k = 0; k < n; k++)
    finish(batch[k], status, status == 200 ? NULL : error);
}

void gs_batcher_run_inline(gs_served_model *m, gs_infer_request *r) {
  r->t_arrive = gs_now_ns();
  gs_infer_request *batch[1] = {r};
  run_batch(m, NULL, batch, 1, r->batch);
}

static void *batcher_main(void *arg) {
  batcher_worker *w = arg;
  gs_batcher *b = w->b;
  /* Linux lets a sleeping thread wake up to 50 us late (timer slack); the
   * batcher's waits are the max queue delay, often 100 us, so ask for none. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  gs_infer_request *batch[256];
  pthread_mutex_lock(&b->lock);
  for (;;) {
    int64_t rows = 0;
    int n = next_batch(b, batch, 256, &rows);
    if (n == 0)
      break; /* stopping and empty */
    pthread_mutex_unlock(&b->lock);
    run_batch(b->m, w->inst, batch, n, rows);
    pthread_mutex_lock(&b->lock);
  }
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

int gs_batcher_start(gs_served_model *m, gs_batcher **out) {
  gs_batcher *b = calloc(1, sizeof *b);
  if (!b)
    return gs_error(GS_ENOMEM, "out of memory starting the batcher of %s", m->name);
  b->m = m;
  pthread_mutex_init(&b->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&b->cond, &attr);
  pthread_condattr_destroy(&attr);
  for (int i = 0; i < m->n_instances; i++) {
    batcher_worker *w = &b->workers[i];
    w->b = b;
    w->inst = &m->instances[i];
    if (pthread_create(&w->thread, NULL, batcher_main, w) != 0) {
      gs_batcher_stop(b);
      return gs_error(GS_ENOMEM, "cannot start the batcher threads of %s", m->name);
    }
    b->n_workers++;
  }
  *out = b;
  return GS_OK;
}

void gs_batcher_stop(gs_batcher *b) {
  if (!b)
    return;
  pthread_mutex_lock(&b->lock);
  b->stopping = true;
  pthread_cond_broadcast(&b->cond);
  pthread_mutex_unlock(&b->lock);
  for (int i = 0; i < b->n_workers; i++)
    pthread_join(b->workers[i].thread, NULL);
  pthread_mutex_destroy(&b->lock);
  pthread_cond_destroy(&b->cond);
  free(b);
}

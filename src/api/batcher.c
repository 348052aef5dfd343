/* batcher.c - the dynamic batcher of one served model. Requests wait in one
 * queue by priority (then arrival). Each instance of the model runs batches
 * as a pipeline of five stages over a few slots, so that several batches
 * are in flight per instance and each stage is timed:
 *
 *   gather  - the next batch off the queue: the first request and more of
 *             the same version and row shape, up to a preferred or the
 *             maximum batch size while the first has waited less than the
 *             maximum queue delay (adaptive batching: up to the maximum,
 *             within a wait learnt under a latency budget, adaptive_wait.h);
 *             their rows joined into pinned staging
 *   h2d     - staging to the device, on the instance's copy-in stream
 *   compute - the plan for the batch's shapes
 *   d2h     - the outputs back to pinned staging, on the copy-out stream
 *   encode  - each request's rows of each output, encoded into its reply
 *
 * On a device whose memory the host addresses directly (the CPU backend)
 * there is nothing to copy: gather writes into the device buffers, encode
 * reads from them, and the pipeline is gather, compute, encode. Each stage
 * hand-off costs a thread wake-up, so stages that would do nothing are left
 * out rather than run empty. A slot's buffers come from the device's caching pools and grow to the
 * largest batch seen, so a steady load allocates nothing. A batch that
 * fails (a plan that cannot be built, a device error) fails its own
 * requests; the pipeline goes on. */
#include "api/batcher.h"

#include "api/adaptive_wait.h"
#include "api/autoscale.h"
#include "api/ensemble.h"
#include "api/image_input.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/image_pack.h"
#include "engine/pipeline.h"

#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_SLOTS 4 /* batches in flight per instance */
#define MAX_BATCH_REQUESTS 256

typedef struct batch_slot {
  gs_infer_request *reqs[MAX_BATCH_REQUESTS];
  int n;
  int64_t rows;
  gs_shape shapes[GS_REQ_MAX_IO];
  size_t in_bytes[GS_REQ_MAX_IO];
  gs_buffer_t *staged_in[GS_REQ_MAX_IO], *dev_in[GS_REQ_MAX_IO];
  int n_out;
  gs_plan_value_info out_info[GS_REQ_MAX_IO];
  gs_buffer_t *dev_out[GS_REQ_MAX_IO], *staged_out[GS_REQ_MAX_IO];
  /* Where the device resizes (resize_on_device): the image input's pack,
   * for rows of pack_h x pack_w, its staging (pinned, and on the device),
   * and which input it holds this batch (-1: none). */
  gs_image_pack *pack;
  int pack_h, pack_w, packed_input;
  size_t pack_bytes, mid_bytes;
  gs_buffer_t *pack_staged, *pack_dev;
  bool open;  /* holds requests not yet answered */
  int status; /* 0 while all goes well, else the HTTP status its requests get */
  char error[600];
  uint64_t t_batch, t_copied_in, t_computed; /* when it left the queue, h2d, compute */
} batch_slot;

typedef struct instance_pipeline {
  struct gs_batcher *b;
  gs_instance *inst;
  gs_stream_t *h2d, *d2h;
  bool direct; /* the host addresses the device's memory: no staging, no copies */
  gs_buffer_t *pack_mid; /* the h2d stage's, for the resize's horizontal passes */
  batch_slot slots[BATCH_SLOTS];
  pthread_t thread;
  bool leaving; /* the autoscaler is taking it away: it takes no more batches (under lock) */
  bool failed;  /* it stopped on an error and counted itself out of `alive` (under lock) */
} instance_pipeline;

struct gs_batcher {
  gs_served_model *m;
  /* Pipelines started, on instances 0 to n_pipelines - 1; an autoscaled
   * model's scaler changes it (and only it, on its own thread). */
  int n_pipelines;
  int alive; /* pipelines still running (under lock) */
  instance_pipeline pipelines[GS_REPO_MAX_INSTANCES];
  pthread_mutex_t lock;
  pthread_cond_t cond;
  gs_infer_request *head; /* sorted by priority, then arrival */
  int64_t queued;
  bool stopping;
  gs_adaptive_wait adaptive; /* the model's wait, where its batching is adaptive */
  /* Where the model autoscales: the scaler's thread, woken each tick or
   * when a request arrives to no instance; what it samples: requests whose
   * run began, and their wait from arrival (in the queue, then behind the
   * batches ahead in their pipeline), and the instances' compute time. */
  bool scaling;
  pthread_t scaler;
  pthread_cond_t scaler_wake;
  gs_autoscale scale;
  _Atomic uint64_t waited, waited_ns, busy_ns;
  int n_failed; /* pipelines that stopped on an error (under lock) */
  /* The scaler's own: the plan a new instance makes first (the one the
   * model ran last), and whether the last refusal was logged. */
  gs_served_version *last_version;
  gs_shape last_shapes[GS_REQ_MAX_IO];
  bool refusal_logged;
};

void gs_infer_request_clear(gs_infer_request *r) {
  for (int i = 0; i < GS_REQ_MAX_IO; i++) {
    for (int64_t k = 0; r->decoded[i] && k < r->n_decoded[i]; k++)
      if (r->decoded[i][k].owned)
        gs_image_free(&r->decoded[i][k].img);
    free(r->decoded[i]);
    r->decoded[i] = NULL;
    r->n_decoded[i] = 0;
    free(r->owned[i]);
    if (!r->output_borrowed[i])
      free(r->outputs[i]);
    r->owned[i] = r->outputs[i] = NULL;
    r->output_borrowed[i] = false;
  }
}

/* The queue's length changed by `delta` (b->lock held); the model's copy
 * is what its statistics read without the batcher's lock. */
static void count_queued(gs_batcher *b, int64_t delta) {
  b->queued += delta;
  atomic_store(&b->m->queue_length, b->queued);
}

static void stat_add(gs_duration_stat *s, uint64_t ns) {
  s->count++;
  s->ns += ns;
}

static void finish(gs_infer_request *r, int status, const char *error) {
  gs_served_model *m = r->model;
  uint64_t now = gs_now_ns();
  atomic_store(&m->last_used_ns, now);
  atomic_fetch_sub(&m->in_flight, 1);
  r->status = status;
  if (error)
    snprintf(r->error, sizeof r->error, "%s", error);
  pthread_mutex_lock(&m->stats_lock);
  stat_add(status == 200 ? &m->stats.success : &m->stats.fail, now - r->t_arrive);
  if (status == 200)
    m->stats.latency[gs_latency_bucket(now - r->t_arrive)]++;
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
  count_queued(b, 1);
}

int gs_batcher_submit(gs_batcher *b, gs_infer_request *r) {
  gs_served_model *m = b->m;
  if (r->priority <= 0)
    r->priority = m->default_priority > 0 ? m->default_priority : 1;
  if (!r->timeout_us)
    r->timeout_us = m->default_timeout_us;
  r->t_arrive = gs_now_ns();
  pthread_mutex_lock(&b->lock);
  if (b->alive == 0 && b->scaling && b->n_failed == 0) {
    pthread_cond_signal(&b->scaler_wake); /* scaled to none: it starts one for this request */
  } else if (b->alive == 0) {
    pthread_mutex_unlock(&b->lock);
    return gs_error(GS_EBUSY, "model %s: no instance can run batches (the log says why)", m->name);
  }
  if (m->max_queue_size > 0 && b->queued >= m->max_queue_size) {
    pthread_mutex_unlock(&b->lock);
    return gs_error(GS_EBUSY, "model %s: the queue is full (max_queue_size %lld)", m->name,
                    (long long)m->max_queue_size);
  }
  enqueue(b, r);
  if (m->adaptive_batching)
    gs_adaptive_arrival(&b->adaptive, r->t_arrive, atomic_load(&m->in_flight));
  atomic_fetch_add(&m->in_flight, 1); /* until finish(): not idle meanwhile */
  atomic_store(&m->last_used_ns, r->t_arrive);
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

/* How long a batch of `rows` rows is expected to take, input to output:
 * the mean of the batches of that size run so far, else of the nearest
 * larger size, else of the nearest smaller one scaled up by rows; 0 before
 * any batch has run. */
static uint64_t expected_run_ns(gs_served_model *m, int64_t rows) {
  int64_t top = rows < GS_STATS_MAX_BATCH ? rows : GS_STATS_MAX_BATCH;
  uint64_t ns = 0;
  pthread_mutex_lock(&m->stats_lock);
  for (int64_t size = top; size <= GS_STATS_MAX_BATCH && !ns; size++) {
    const gs_duration_stat *s = m->stats.batch[size];
    if (s[1].count)
      ns = (s[0].ns + s[1].ns + s[2].ns) / s[1].count;
  }
  for (int64_t size = top - 1; size >= 1 && !ns; size--) {
    const gs_duration_stat *s = m->stats.batch[size];
    if (s[1].count)
      ns = (s[0].ns + s[1].ns + s[2].ns) / s[1].count * (uint64_t)rows / (uint64_t)size;
  }
  pthread_mutex_unlock(&m->stats_lock);
  return ns;
}

/* What a row saves by joining a batch instead of running alone: one row's
 * run less what a row adds to the largest batch size run so far; one row's
 * run where no larger batch has run yet (so that batching is tried), and -1
 * before any batch has. */
static int64_t row_saving_ns(gs_served_model *m) {
  int64_t saving = -1;
  pthread_mutex_lock(&m->stats_lock);
  const gs_duration_stat *one = m->stats.batch[1];
  if (one[1].count) {
    double run1 = (double)(one[0].ns + one[1].ns + one[2].ns) / (double)one[1].count;
    saving = (int64_t)run1;
    for (int size = GS_STATS_MAX_BATCH; size >= 2; size--) {
      const gs_duration_stat *s = m->stats.batch[size];
      if (!s[1].count)
        continue;
      double run = (double)(s[0].ns + s[1].ns + s[2].ns) / (double)s[1].count;
      double per_row = (run - run1) / (size - 1);
      saving = per_row < run1 ? (int64_t)(run1 - per_row) : 0;
      break;
    }
  }
  pthread_mutex_unlock(&m->stats_lock);
  return saving;
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
      count_queued(b, -1);
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
 * model batches. Returns the count, 0 when stopping with nothing queued or
 * when the pipeline is leaving. */
static int next_batch(gs_batcher *b, const instance_pipeline *ip, gs_infer_request **batch,
                      int max, int64_t *rows) {
  gs_served_model *m = b->m;
  gs_infer_request *expired = NULL;
  for (;;) {
    while (!b->head && !b->stopping && !ip->leaving)
      pthread_cond_wait(&b->cond, &b->lock);
    if (ip->leaving)
      return 0;
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
  count_queued(b, -1);
  batch[0] = first;
  int n = 1;
  *rows = first->batch;
  if (m->max_batch_size == 0)
    return n;
  /* Adaptive: up to the maximum, waiting what adaptive_wait.c has learnt. */
  bool adaptive = m->adaptive_batching;
  int64_t target = adaptive ? m->max_batch_size : target_size(m);
  uint64_t budget_ns = (uint64_t)m->latency_budget_us * 1000, full_ns = 0, deadline;
  int64_t saving_ns = -1;
  if (adaptive) {
    full_ns = expected_run_ns(m, m->max_batch_size);
    saving_ns = row_saving_ns(m);
    deadline = gs_adaptive_deadline(&b->adaptive, first->t_arrive, first->t_arrive, budget_ns,
                                    full_ns, saving_ns);
  } else {
    deadline = first->t_arrive + m->max_queue_delay_us * 1000;
  }
  bool waited = false;
  int64_t rows_seen = *rows;
  for (;;) {
    /* Take what fits from the queue, in order. */
    for (gs_infer_request **at = &b->head; *at && n < max && *rows < target;) {
      gs_infer_request *r = *at;
      if (compatible(first, r) && *rows + r->batch <= m->max_batch_size) {
        *at = r->next;
        count_queued(b, -1);
        batch[n++] = r;
        *rows += r->batch;
      } else {
        at = &r->next;
      }
    }
    uint64_t now = gs_now_ns();
    if (adaptive && *rows > rows_seen && waited) /* more came: keep gathering while they do */
      deadline = gs_adaptive_deadline(&b->adaptive, first->t_arrive, now, budget_ns, full_ns,
                                      saving_ns);
    rows_seen = *rows;
    if (*rows >= target || (!adaptive && is_preferred(m, *rows)) || n == max || b->stopping ||
        ip->leaving)
      break;
    if (now >= deadline)
      break;
    waited = true;
    gs_cond_wait_until(&b->cond, &b->lock, deadline);
  }
  if (b->head)
    pthread_cond_signal(&b->cond); /* what this batch left is another instance's */
  return n;
}

/* ---- the stages ------------------------------------------------------------------------ */

/* A failed run's HTTP status: the request's fault, a device another holds
 * for now (an ensemble's step on a GPU a job holds whole), or the server's. */
static int run_status(int rc) { return rc == GS_EINVAL ? 400 : rc == GS_EBUSY ? 503 : 500; }

static void slot_fail(batch_slot *sl, int rc) {
  if (sl->status)
    return;
  sl->status = run_status(rc);
  snprintf(sl->error, sizeof sl->error, "%s", gs_error_detail());
}

/* A slot's buffer at least `bytes` long from `pool`: kept while big
 * enough, else given back and taken anew (the pool caches both). */
static int ensure_buffer(gs_pool_t *pool, gs_buffer_t **buf, size_t bytes) {
  if (*buf && gs_buffer_size(*buf) >= bytes)
    return GS_OK;
  gs_buffer_free(*buf, NULL);
  *buf = NULL;
  return gs_pool_alloc(pool, bytes ? bytes : 1, NULL, buf);
}

/* ---- images the device resizes -------------------------------------------------------------- */

/* Row j of request r's image input i: an image for the recipe, or NULL
 * for a row that goes as it is (row_bytes): the model's own tensor as the
 * request sent it, or a row the CPU made of an image too large to hold. */
static const gs_image *row_image(const gs_infer_request *r, int i, int64_t j) {
  return r->decoded[i] && !r->decoded[i][j].as_is ? &r->decoded[i][j].img : NULL;
}

static const uint8_t *row_bytes(const gs_infer_request *r, int i, int64_t j, size_t row) {
  if (r->decoded[i])
    return r->decoded[i][j].img.rgb;
  return (const uint8_t *)r->inputs[i] + (size_t)j * row;
}

/* The slot's pack for h x w rows, with its staging, and the h2d stage's
 * buffer for the passes (made here, once, and never moved: the h2d stage
 * may be using it); false where memory is short or that buffer is too
 * small for these rows. */
static bool pack_ready(instance_pipeline *ip, batch_slot *sl, int h, int w) {
  gs_served_model *m = ip->b->m;
  if (sl->pack && (sl->pack_h != h || sl->pack_w != w)) { /* another version's size */
    gs_image_pack_free(sl->pack);
    sl->pack = NULL;
  }
  if (!sl->pack) {
    if (gs_image_pack_create(&m->prep, m->max_batch_size, h, w, &sl->pack, &sl->pack_bytes,
                             &sl->mid_bytes) < 0)
      return false;
    sl->pack_h = h;
    sl->pack_w = w;
  }
  gs_device_t *d = ip->inst->device;
  gs_pool_t *dev = gs_device_pool(d, GS_MEM_DEVICE);
  if (!ip->pack_mid && gs_pool_alloc(dev, sl->mid_bytes, NULL, &ip->pack_mid) < 0)
    return false;
  return gs_buffer_size(ip->pack_mid) >= sl->mid_bytes &&
         ensure_buffer(gs_device_pool(d, GS_MEM_PINNED_HOST), &sl->pack_staged,
                       sl->pack_bytes) == 0 &&
         ensure_buffer(dev, &sl->pack_dev, sl->pack_bytes) == 0;
}

/* The batch's rows of image input i: packed for the device's resize, or,
 * where the pack's memory is short, resized by the CPU into staged_in[i]. */
static int gather_images(instance_pipeline *ip, batch_slot *sl, int i, int h, int w) {
  gs_served_model *m = ip->b->m;
  size_t row = (size_t)h * w * 3;
  int rc = GS_OK;
  if (sl->rows <= m->max_batch_size && pack_ready(ip, sl, h, w)) {
    gs_image_pack_begin(sl->pack, gs_buffer_host_ptr(sl->pack_staged));
    for (int k = 0; rc == 0 && k < sl->n; k++)
      for (int64_t j = 0; rc == 0 && j < sl->reqs[k]->shapes[i].dims[0]; j++) {
        const gs_image *img = row_image(sl->reqs[k], i, j);
        if (img)
          rc = gs_image_pack_image(sl->pack, img);
        else
          gs_image_pack_row(sl->pack, row_bytes(sl->reqs[k], i, j, row));
      }
    if (rc == 0)
      sl->packed_input = i;
    return rc;
  }
  gs_prep geometry = m->prep;
  gs_prep_geometry_only(&geometry);
  rc = ensure_buffer(gs_device_pool(ip->inst->device, GS_MEM_PINNED_HOST), &sl->staged_in[i],
                     sl->in_bytes[i]);
  uint8_t *to = rc == 0 ? gs_buffer_host_ptr(sl->staged_in[i]) : NULL;
  for (int k = 0; rc == 0 && k < sl->n; k++)
    for (int64_t j = 0; rc == 0 && j < sl->reqs[k]->shapes[i].dims[0]; j++, to += row) {
      const gs_image *img = row_image(sl->reqs[k], i, j);
      if (img)
        rc = gs_prep_image(&geometry, img, h, w, false, GS_DT_UINT8, to);
      else
        memcpy(to, row_bytes(sl->reqs[k], i, j, row), row);
    }
  return rc;
}

/* The packed images to the device, resized there into dev_in[i]. */
static int h2d_images(instance_pipeline *ip, batch_slot *sl, int i) {
  gs_pool_t *dev = gs_device_pool(ip->inst->device, GS_MEM_DEVICE);
  int rc = ensure_buffer(dev, &sl->dev_in[i], sl->in_bytes[i]);
  if (rc == 0)
    rc = gs_stream_copy_h2d(ip->h2d, sl->pack_dev, 0, gs_buffer_host_ptr(sl->pack_staged),
                            gs_image_pack_used(sl->pack));
  if (rc == 0)
    rc = gs_image_pack_launch(sl->pack, ip->h2d, sl->pack_dev, ip->pack_mid, sl->dev_in[i]);
  if (rc == 0)
    atomic_fetch_add(&ip->b->m->device_resizes, (uint64_t)gs_image_pack_on_device(sl->pack));
  return rc;
}

static int stage_gather(void *ctx, int s, int64_t seq) {
  (void)seq;
  instance_pipeline *ip = ctx;
  gs_batcher *b = ip->b;
  batch_slot *sl = &ip->slots[s];
  static _Thread_local bool slack_set;
  if (!slack_set) {
    /* Linux lets a sleeping thread wake up to 50 us late (timer slack); the
     * max queue delay is often 100 us, so ask for none. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    slack_set = true;
  }
  uint64_t t0 = gs_now_ns();
  pthread_mutex_lock(&b->lock);
  sl->n = next_batch(b, ip, sl->reqs, MAX_BATCH_REQUESTS, &sl->rows);
  if (b->head)
    gs_pipeline_note_more(); /* keep gathering; let the other stages' threads run this one */
  pthread_mutex_unlock(&b->lock);
  sl->t_batch = gs_now_ns();
  /* Waiting for requests, and for company within the max queue delay, is
   * the stage waiting for input; joining rows is its work. */
  gs_pipeline_note_wait(sl->t_batch - t0);
  if (sl->n == 0)
    return 1; /* stopping, and nothing is queued */
  sl->open = true;
  sl->status = 0;
  sl->n_out = 0;
  gs_infer_request *first = sl->reqs[0];
  const gs_model *model = first->version->model;
  gs_pool_t *into = gs_device_pool(ip->inst->device,
                                   ip->direct ? GS_MEM_DEVICE : GS_MEM_PINNED_HOST);
  bool nchw;
  int h = 0, w = 0;
  int images = b->m->resize_on_device && !ip->direct
                   ? gs_image_input_find(b->m, model, &nchw, &h, &w)
                   : -1;
  sl->packed_input = -1;
  for (int k = 0; k < sl->n; k++)
    sl->reqs[k]->t_batch = sl->t_batch;
  for (int i = 0; i < model->n_inputs; i++) {
    sl->shapes[i] = first->shapes[i];
    if (sl->n > 1)
      sl->shapes[i].dims[0] = sl->rows;
    size_t elem = gs_dtype_size(model->inputs[i].dtype);
    sl->in_bytes[i] = (size_t)gs_shape_numel(&sl->shapes[i]) * elem;
    if (i == images) {
      int rc = gather_images(ip, sl, i, h, w);
      if (rc < 0) {
        slot_fail(sl, rc);
        break;
      }
      continue;
    }
    gs_buffer_t **buf = ip->direct ? &sl->dev_in[i] : &sl->staged_in[i];
    int rc = ensure_buffer(into, buf, sl->in_bytes[i]);
    if (rc < 0) {
      slot_fail(sl, rc);
      break;
    }
    char *to = gs_buffer_host_ptr(*buf);
    for (int k = 0; k < sl->n; k++) {
      size_t bytes = (size_t)gs_shape_numel(&sl->reqs[k]->shapes[i]) * elem;
      memcpy(to, sl->reqs[k]->inputs[i], bytes);
      to += bytes;
    }
  }
  sl->t_copied_in = gs_now_ns(); /* h2d, when there is one, moves it on */
  return GS_OK;
}

static int stage_h2d(void *ctx, int s, int64_t seq) {
  (void)seq;
  instance_pipeline *ip = ctx;
  batch_slot *sl = &ip->slots[s];
  int n_in = sl->reqs[0]->version->model->n_inputs, rc = GS_OK;
  gs_pool_t *dev = gs_device_pool(ip->inst->device, GS_MEM_DEVICE);
  for (int i = 0; sl->status == 0 && rc == 0 && i < n_in; i++)
    if (i == sl->packed_input)
      rc = h2d_images(ip, sl, i);
    else if ((rc = ensure_buffer(dev, &sl->dev_in[i], sl->in_bytes[i])) == 0 && sl->in_bytes[i])
      rc = gs_stream_copy_h2d(ip->h2d, sl->dev_in[i], 0, gs_buffer_host_ptr(sl->staged_in[i]),
                              sl->in_bytes[i]);
  int sync = gs_stream_synchronize(ip->h2d);
  if (rc < 0 || sync < 0)
    slot_fail(sl, rc < 0 ? rc : sync);
  sl->t_copied_in = gs_now_ns();
  return GS_OK;
}

/* For the autoscaler: how long the slot's requests waited for their run,
 * which began at t0, and how long it took. */
static void count_run(gs_batcher *b, const batch_slot *sl, uint64_t t0) {
  uint64_t waited = 0;
  for (int k = 0; k < sl->n; k++)
    waited += t0 > sl->reqs[k]->t_arrive ? t0 - sl->reqs[k]->t_arrive : 0;
  atomic_fetch_add(&b->waited_ns, waited);
  atomic_fetch_add(&b->waited, (uint64_t)sl->n);
  atomic_fetch_add(&b->busy_ns, sl->t_computed - t0);
}

static int stage_compute(void *ctx, int s, int64_t seq) {
  (void)seq;
  instance_pipeline *ip = ctx;
  batch_slot *sl = &ip->slots[s];
  uint64_t t0 = 0;
  if (sl->status == 0) {
    gs_instance *inst = ip->inst;
    gs_served_version *v = sl->reqs[0]->version;
    gs_pool_t *dev = gs_device_pool(inst->device, GS_MEM_DEVICE);
    pthread_mutex_lock(&inst->lock);
    t0 = gs_now_ns();
    gs_plan *plan;
    /* Batches are planned by shape alone: a model whose shapes depend on an
     * input's values is refused here, with a message naming the input. */
    int rc = gs_served_plan(ip->b->m, inst, v, sl->shapes, NULL, &plan);
    for (int i = 0; rc == 0 && i < v->model->n_inputs; i++) {
      gs_plan_value_info in;
      gs_plan_input(plan, i, &in);
      if (in.bytes != sl->in_bytes[i])
        rc = gs_error(GS_EINVAL, "input %s: the batch has %zu bytes, the plan takes %zu",
                      in.name, sl->in_bytes[i], in.bytes);
    }
    sl->n_out = rc == 0 ? gs_plan_output_count(plan) : 0;
    for (int i = 0; rc == 0 && i < sl->n_out; i++) {
      gs_plan_output(plan, i, &sl->out_info[i]);
      rc = ensure_buffer(dev, &sl->dev_out[i], sl->out_info[i].bytes);
    }
    if (rc == 0)
      rc = gs_plan_run_buffers(plan, sl->dev_in, sl->dev_out);
    if (rc == 0)
      gs_ensemble_count_steps(ip->b->m, plan, sl->n, sl->rows);
    pthread_mutex_unlock(&inst->lock);
    if (rc < 0)
      slot_fail(sl, rc);
  }
  sl->t_computed = gs_now_ns();
  if (t0)
    count_run(ip->b, sl, t0);
  return GS_OK;
}

static int stage_d2h(void *ctx, int s, int64_t seq) {
  (void)seq;
  instance_pipeline *ip = ctx;
  batch_slot *sl = &ip->slots[s];
  gs_pool_t *pinned = gs_device_pool(ip->inst->device, GS_MEM_PINNED_HOST);
  int rc = GS_OK;
  for (int i = 0; sl->status == 0 && rc == 0 && i < sl->n_out; i++)
    if ((rc = ensure_buffer(pinned, &sl->staged_out[i], sl->out_info[i].bytes)) == 0 &&
        sl->out_info[i].bytes)
      rc = gs_stream_copy_d2h(ip->d2h, gs_buffer_host_ptr(sl->staged_out[i]), sl->dev_out[i], 0,
                              sl->out_info[i].bytes);
  int sync = gs_stream_synchronize(ip->d2h);
  if (rc < 0 || sync < 0)
    slot_fail(sl, rc < 0 ? rc : sync);
  return GS_OK;
}

/* Triton's statistics for a batch of n requests: each request's queue time
 * (none where reqs is NULL) and the batch's input, infer and output times;
 * rows inferred and the batch-size figures when the batch ran (ok). Under
 * the model's statistics lock. */
static void count_batch_locked(gs_served_model *m, gs_infer_request *const *reqs, int n, bool ok,
                               int64_t inferred, int64_t rows, uint64_t input_ns,
                               uint64_t infer_ns, uint64_t output_ns) {
  for (int k = 0; k < n; k++) {
    stat_add(&m->stats.queue, reqs ? reqs[k]->t_batch - reqs[k]->t_arrive : 0);
    stat_add(&m->stats.compute_input, input_ns);
    stat_add(&m->stats.compute_infer, infer_ns);
    stat_add(&m->stats.compute_output, output_ns);
  }
  if (ok) {
    m->stats.inference_count += (uint64_t)inferred;
    m->stats.execution_count++;
    gs_duration_stat *bs = m->stats.batch[rows <= GS_STATS_MAX_BATCH ? rows : 0];
    stat_add(&bs[0], input_ns);
    stat_add(&bs[1], infer_ns);
    stat_add(&bs[2], output_ns);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->stats.last_inference_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  }
}

static void count_batch(gs_served_model *m, gs_infer_request *const *reqs, int n, bool ok,
                        int64_t inferred, int64_t rows, uint64_t input_ns, uint64_t infer_ns,
                        uint64_t output_ns) {
  pthread_mutex_lock(&m->stats_lock);
  count_batch_locked(m, reqs, n, ok, inferred, rows, input_ns, infer_ns, output_ns);
  pthread_mutex_unlock(&m->stats_lock);
}

void gs_batcher_count_step(gs_served_model *m, int requests, int64_t rows, uint64_t ns) {
  pthread_mutex_lock(&m->stats_lock);
  count_batch_locked(m, NULL, requests, true, rows, rows, 0, ns, 0);
  for (int k = 0; k < requests; k++) {
    stat_add(&m->stats.success, ns);
    m->stats.latency[gs_latency_bucket(ns)]++;
  }
  pthread_mutex_unlock(&m->stats_lock);
}

/* A request's own copy of its rows of a BYTES output: the records, then
 * the strings they point to. In a batch, a record may point into another
 * request's body (a model that mixes rows), and that request may be
 * answered and gone before this one is encoded. */
static void *own_strings(const gs_bytes_ref *rows, int64_t n) {
  size_t heap = 0;
  for (int64_t i = 0; i < n; i++)
    heap += rows[i].len;
  char *block = malloc((size_t)n * sizeof *rows + heap + 1);
  if (!block)
    return NULL;
  gs_bytes_ref *recs = (gs_bytes_ref *)block;
  char *at = block + (size_t)n * sizeof *rows;
  for (int64_t i = 0; i < n; i++) {
    if (rows[i].len)
      memcpy(at, rows[i].data, rows[i].len);
    recs[i] = (gs_bytes_ref){.data = at, .len = rows[i].len};
    at += rows[i].len;
  }
  return block;
}

/* Each request its rows of every output (pointers into the slot's staging,
 * which its reply copies before the slot is reused), the statistics, and
 * the reply. */
static int stage_encode(void *ctx, int s, int64_t seq) {
  (void)seq;
  instance_pipeline *ip = ctx;
  batch_slot *sl = &ip->slots[s];
  gs_served_model *m = ip->b->m;
  /* A batch of several requests splits along the first dimension of each
   * output, which must then be the batch's rows. */
  for (int o = 0; sl->n > 1 && sl->status == 0 && o < sl->n_out; o++) {
    const gs_plan_value_info *info = &sl->out_info[o];
    int64_t out_rows = info->shape.rank ? info->shape.dims[0] : -1;
    if (out_rows != sl->rows) {
      sl->status = 500;
      snprintf(sl->error, sizeof sl->error, "output %s has %lld rows for a batch of %lld: this "
               "model cannot be batched (set max_batch_size to 0, or keep the batch dimension)",
               info->name, (long long)out_rows, (long long)sl->rows);
    }
  }
  int64_t failed_rows = 0;
  for (int k = 0, row = 0; sl->status == 0 && k < sl->n; row += (int)sl->reqs[k]->batch, k++) {
    gs_infer_request *r = sl->reqs[k];
    for (int o = 0; o < sl->n_out; o++) {
      const gs_plan_value_info *info = &sl->out_info[o];
      char *data = gs_buffer_host_ptr(ip->direct ? sl->dev_out[o] : sl->staged_out[o]);
      r->out_info[o] = *info;
      r->outputs[o] = data;
      r->output_borrowed[o] = true;
      if (sl->n == 1)
        continue;
      int64_t out_rows = info->shape.rank ? info->shape.dims[0] : 1;
      size_t row_bytes = out_rows ? info->bytes / (size_t)out_rows : 0;
      r->out_info[o].shape.dims[0] = r->batch;
      r->out_info[o].bytes = row_bytes * (size_t)r->batch;
      r->outputs[o] = data + row_bytes * (size_t)row;
      if (info->dtype == GS_DT_BYTES) {
        r->outputs[o] = own_strings((const gs_bytes_ref *)(data + row_bytes * (size_t)row),
                                    (int64_t)(r->out_info[o].bytes / sizeof(gs_bytes_ref)));
        r->output_borrowed[o] = false;
        if (!r->outputs[o] && r->status != 500) {
          r->status = 500; /* answered below as out of memory */
          failed_rows += r->batch;
        }
      }
    }
  }
  uint64_t now = gs_now_ns();
  count_batch(m, sl->reqs, sl->n, sl->status == 0, sl->rows - failed_rows, sl->rows,
              sl->t_copied_in - sl->t_batch, sl->t_computed - sl->t_copied_in,
              now - sl->t_computed);
  sl->open = false;
  for (int k = 0; k < sl->n; k++) {
    gs_infer_request *r = sl->reqs[k];
    if (sl->status)
      finish(r, sl->status, sl->error);
    else if (r->status == 500)
      finish(r, 500, "out of memory copying the strings of a reply");
    else
      finish(r, 200, NULL);
  }
  return GS_OK;
}

/* ---- the instance's pipeline ------------------------------------------------------------- */

/* Answers every request of a list taken off the queue. */
static void fail_all(gs_infer_request *list, int status, const char *why) {
  while (list) {
    gs_infer_request *r = list;
    list = r->next;
    finish(r, status, why);
  }
}

static void *instance_main(void *arg) {
  instance_pipeline *ip = arg;
  /* Every stage after gather may be run through by the thread before it
   * when idle: a lone request crosses on one thread, as without a pipeline. */
  gs_pipeline_stage copying[5] = {
      {"gather", 1, stage_gather, ip, false},  {"h2d", 1, stage_h2d, ip, true},
      {"compute", 1, stage_compute, ip, true}, {"d2h", 1, stage_d2h, ip, true},
      {"encode", 1, stage_encode, ip, true},
  };
  gs_pipeline_stage direct[3] = {
      {"gather", 1, stage_gather, ip, false},
      {"compute", 1, stage_compute, ip, true},
      {"encode", 1, stage_encode, ip, true},
  };
  gs_batcher *b = ip->b;
  int rc = gs_pipeline_run(ip->direct ? direct : copying, ip->direct ? 3 : 5, BATCH_SLOTS, NULL,
                           &ip->inst->pipeline);
  if (rc == 0)
    return NULL; /* stopped, every batch answered */
  GS_LOGE("batcher", "model %s: the batch pipeline of %s stopped: %s", b->m->name,
          ip->inst->owner, gs_error_detail());
  /* Batches it held, then (when no instance is left) the queue: answered. */
  for (int s = 0; s < BATCH_SLOTS; s++)
    if (ip->slots[s].open) {
      ip->slots[s].open = false;
      for (int k = 0; k < ip->slots[s].n; k++)
        finish(ip->slots[s].reqs[k], 503, "the model's batch pipeline stopped");
    }
  pthread_mutex_lock(&b->lock);
  ip->failed = true;
  b->n_failed++;
  gs_infer_request *left = --b->alive == 0 ? b->head : NULL;
  if (left) {
    b->head = NULL;
    count_queued(b, -b->queued);
  }
  pthread_mutex_unlock(&b->lock);
  fail_all(left, 503, "no instance of the model can run batches");
  return NULL;
}

static void release_pipeline(instance_pipeline *ip) {
  for (int s = 0; s < BATCH_SLOTS; s++) {
    batch_slot *sl = &ip->slots[s];
    gs_image_pack_free(sl->pack);
    gs_buffer_free(sl->pack_staged, NULL);
    gs_buffer_free(sl->pack_dev, NULL);
  }
  gs_buffer_free(ip->pack_mid, NULL);
  for (int s = 0; s < BATCH_SLOTS; s++)
    for (int i = 0; i < GS_REQ_MAX_IO; i++) {
      batch_slot *sl = &ip->slots[s];
      gs_buffer_free(sl->staged_in[i], NULL);
      gs_buffer_free(sl->dev_in[i], NULL);
      gs_buffer_free(sl->dev_out[i], NULL);
      gs_buffer_free(sl->staged_out[i], NULL);
    }
  if (ip->h2d)
    gs_stream_destroy(ip->h2d);
  if (ip->d2h)
    gs_stream_destroy(ip->d2h);
}

void gs_batcher_run_inline(gs_served_model *m, gs_infer_request *r) {
  r->t_batch = gs_now_ns();
  if (!r->t_arrive) /* else set where it waited for a thread */
    r->t_arrive = r->t_batch;
  atomic_fetch_add(&m->in_flight, 1);
  int rc = gs_served_run(m, r->version, r->shapes, r->inputs, r->outputs, r->out_info);
  uint64_t t1 = gs_now_ns();
  /* The mean moves by an eighth of each run's difference from it (races
   * between threads lose a sample, which a mean can spare). It counts the
   * wait for a free instance too: that is how long a caller's thread is
   * held. A failed run, often refused before it computes, is left out. */
  if (rc == 0) {
    uint64_t mean = atomic_load_explicit(&m->inline_compute_ns, memory_order_relaxed);
    uint64_t run_ns = t1 - r->t_batch;
    atomic_store_explicit(&m->inline_compute_ns, mean ? mean - mean / 8 + run_ns / 8 : run_ns,
                          memory_order_relaxed);
  }
  /* In the HTTP thread: no queue, no copies of its own; the plan's run is
   * the compute. */
  count_batch(m, &r, 1, rc == 0, r->batch, r->batch, 0, t1 - r->t_batch, 0);
  finish(r, rc == 0 ? 200 : run_status(rc), rc == 0 ? NULL : gs_error_detail());
}

bool gs_batcher_inline_is_short(const gs_served_model *m) {
  uint64_t mean = atomic_load_explicit(&m->inline_compute_ns, memory_order_relaxed);
  return mean > 0 && mean < GS_BATCHER_SHORT_NS;
}

uint64_t gs_batcher_adaptive_wait_ns(gs_batcher *b) {
  pthread_mutex_lock(&b->lock);
  uint64_t ns = gs_adaptive_window(&b->adaptive, row_saving_ns(b->m));
  pthread_mutex_unlock(&b->lock);
  return ns;
}

/* Starts the pipeline of instance `i` (the next after those running). */
static int start_pipeline(gs_batcher *b, int i) {
  instance_pipeline *ip = &b->pipelines[i];
  memset(ip, 0, sizeof *ip);
  ip->b = b;
  ip->inst = &b->m->instances[i];
  gs_device_t *dev = ip->inst->device;
  ip->direct = gs_device_get_caps(dev)->host_visible_device_memory;
  /* Each copy stage waits for its own copies: an inline stream, where the
   * backend has them, runs them on the stage's thread without a hop. */
  int rc;
  if (!ip->direct && ((rc = gs_stream_create_ex(dev, GS_STREAM_INLINE, &ip->h2d)) < 0 ||
                      (rc = gs_stream_create_ex(dev, GS_STREAM_INLINE, &ip->d2h)) < 0)) {
    release_pipeline(ip);
    return rc;
  }
  pthread_mutex_lock(&b->lock);
  b->alive++; /* before it runs: it counts itself out if it fails */
  pthread_mutex_unlock(&b->lock);
  if (pthread_create(&ip->thread, NULL, instance_main, ip) != 0) {
    pthread_mutex_lock(&b->lock);
    b->alive--;
    pthread_mutex_unlock(&b->lock);
    release_pipeline(ip);
    return gs_error(GS_ENOMEM, "cannot start the batch pipeline of %s", ip->inst->owner);
  }
  b->n_pipelines++;
  return GS_OK;
}

/* Stops the last pipeline once its batches are answered (the queue goes to
 * the others), and gives its instance's plans back. */
static void stop_last_pipeline(gs_batcher *b) {
  instance_pipeline *ip = &b->pipelines[b->n_pipelines - 1];
  pthread_mutex_lock(&b->lock);
  ip->leaving = true;
  pthread_cond_broadcast(&b->cond);
  pthread_mutex_unlock(&b->lock);
  pthread_join(ip->thread, NULL);
  release_pipeline(ip);
  pthread_mutex_lock(&b->lock);
  if (!ip->failed)
    b->alive--;
  if (b->alive == 0 && b->head) /* came while it left: the scaler starts one */
    pthread_cond_signal(&b->scaler_wake);
  pthread_mutex_unlock(&b->lock);
  b->n_pipelines--;
  /* The plan it ran last is what the next instance to start makes first. */
  gs_served_last_plan(ip->inst, &b->last_version, b->last_shapes);
  gs_served_drop_plans(b->m, ip->inst);
}

/* ---- autoscaling ------------------------------------------------------------------------- */

#define SCALE_TICK_NS 250000000ull

/* The instances running and well (b->lock held). */
static int running(const gs_batcher *b) { return b->n_pipelines - b->n_failed; }

static void publish_count(gs_batcher *b) {
  pthread_mutex_lock(&b->lock);
  atomic_store(&b->m->active_instances, running(b));
  pthread_mutex_unlock(&b->lock);
}

/* One instance more: the plan the model ran last made and booked on it
 * first, so that a step the ledger has no room for is refused before it
 * takes requests. */
static void scale_up(gs_batcher *b) {
  gs_served_model *m = b->m;
  int i = b->n_pipelines, rc = GS_OK;
  if (i > 0)
    gs_served_last_plan(&m->instances[0], &b->last_version, b->last_shapes);
  if (b->last_version)
    rc = gs_served_prepare(m, &m->instances[i], b->last_version, b->last_shapes);
  if (rc == 0 && (rc = start_pipeline(b, i)) < 0)
    gs_served_drop_plans(m, &m->instances[i]);
  if (rc < 0) {
    atomic_fetch_add(&m->scale_refusals, 1);
    if (!b->refusal_logged) /* once for a run of refusals */
      GS_LOGW("batcher", "model %s: no instance added (%d running): %s", m->name, i,
              gs_error_detail());
    b->refusal_logged = true;
    pthread_mutex_lock(&b->lock);
    gs_autoscale_refused(&b->scale, gs_now_ns());
    /* With no instance at all, what waits would wait for ever. */
    gs_infer_request *left = b->alive == 0 ? b->head : NULL;
    if (left) {
      b->head = NULL;
      count_queued(b, -b->queued);
    }
    pthread_mutex_unlock(&b->lock);
    fail_all(left, 503, "no instance of the model could be started (the log says why)");
    return;
  }
  b->refusal_logged = false;
  atomic_fetch_add(&m->scale_ups, 1);
  publish_count(b);
  GS_LOGI("batcher", "model %s: %d instances (one added: requests waited past the budget)",
          m->name, b->n_pipelines);
}

static void scale_down(gs_batcher *b) {
  stop_last_pipeline(b);
  atomic_fetch_add(&b->m->scale_downs, 1);
  publish_count(b);
  GS_LOGI("batcher", "model %s: %d instances (one removed: the load is light)", b->m->name,
          b->n_pipelines);
}

/* What the queue did since the last sample, `tick_ns` ago (b->lock held). */
static void take_sample(gs_batcher *b, uint64_t now, uint64_t tick_ns, gs_autoscale_sample *s) {
  *s = (gs_autoscale_sample){.now_ns = now, .tick_ns = tick_ns ? tick_ns : 1,
                             .waited = atomic_exchange(&b->waited, 0),
                             .waited_ns = atomic_exchange(&b->waited_ns, 0)};
  for (const gs_infer_request *r = b->head; r; r = r->next) {
    uint64_t age = now > r->t_arrive ? now - r->t_arrive : 1; /* 0 would read as none queued */
    if (age > s->oldest_ns)
      s->oldest_ns = age;
  }
  s->busy_ns = atomic_exchange(&b->busy_ns, 0);
}

/* A step has been taken (b->lock held): what was measured while it was
 * being taken (planning, or a leaving pipeline's last batches) belongs to
 * neither count, and the new count is given its two ticks from now. */
static void step_taken(gs_batcher *b, uint64_t now) {
  atomic_store(&b->waited, 0);
  atomic_store(&b->waited_ns, 0);
  atomic_store(&b->busy_ns, 0);
  if (b->scale.last_change_ns < now) /* not a refusal's pause, which runs on */
    b->scale.last_change_ns = now;
}

static void *scaler_main(void *arg) {
  gs_batcher *b = arg;
  pthread_mutex_lock(&b->lock);
  uint64_t last = gs_now_ns(), next = last + SCALE_TICK_NS;
  while (!b->stopping) {
    gs_cond_wait_until(&b->scaler_wake, &b->lock, next);
    uint64_t now = gs_now_ns();
    bool starved = b->alive == 0 && b->head; /* woken by a request that found none */
    if (b->stopping || (now < next && !starved))
      continue;
    gs_autoscale_sample sample;
    take_sample(b, now, now - last, &sample);
    int step = gs_autoscale_step(&b->scale, &sample, running(b));
    bool healthy = b->n_failed == 0; /* a failed pipeline stays where it is, counted out */
    pthread_mutex_unlock(&b->lock);
    if (step > 0 && b->n_pipelines < b->m->n_instances)
      scale_up(b);
    else if (step < 0 && healthy && b->n_pipelines > 0)
      scale_down(b);
    pthread_mutex_lock(&b->lock);
    last = gs_now_ns();
    if (step)
      step_taken(b, last);
    next = last + SCALE_TICK_NS;
  }
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

int gs_batcher_autoscale(gs_batcher *b) {
  gs_served_model *m = b->m;
  const gs_instance_group *g = &m->groups[0];
  b->scale.cfg = (gs_autoscale_config){
      .min = (int)g->min, .max = m->n_instances,
      .budget_ns = (uint64_t)gs_served_queue_budget_us(m) * 1000,
      .down_ns = (uint64_t)g->scale_down_ms * 1000000};
  b->scale.last_change_ns = gs_now_ns();
  if (pthread_create(&b->scaler, NULL, scaler_main, b) != 0)
    return gs_error(GS_ENOMEM, "cannot start the instance scaler of %s", m->name);
  pthread_mutex_lock(&b->lock);
  b->scaling = true;
  pthread_mutex_unlock(&b->lock);
  return GS_OK;
}

int gs_batcher_start(gs_served_model *m, gs_batcher **out) {
  gs_batcher *b = calloc(1, sizeof *b);
  if (!b)
    return gs_error(GS_ENOMEM, "out of memory starting the batcher of %s", m->name);
  b->m = m;
  pthread_mutex_init(&b->lock, NULL);
  gs_cond_init_monotonic(&b->cond);
  gs_cond_init_monotonic(&b->scaler_wake);
  int rc = GS_OK;
  int first = atomic_load(&m->active_instances);
  for (int i = 0; i < first && rc == 0; i++)
    rc = start_pipeline(b, i);
  if (rc < 0) {
    char why[600];
    snprintf(why, sizeof why, "%s", gs_error_detail());
    gs_batcher_stop(b);
    return gs_error(rc, "%s", why);
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
  pthread_cond_signal(&b->scaler_wake);
  pthread_mutex_unlock(&b->lock);
  if (b->scaling)
    pthread_join(b->scaler, NULL); /* first: it starts and stops pipelines */
  for (int i = 0; i < b->n_pipelines; i++) {
    pthread_join(b->pipelines[i].thread, NULL);
    release_pipeline(&b->pipelines[i]);
  }
  /* What no pipeline took (none could start, or one stopped on an error). */
  count_queued(b, -b->queued); /* what is drained below never reaches a pipeline */
  while (b->head) {
    gs_infer_request *r = b->head;
    b->head = r->next;
    finish(r, 503, "the model is being unloaded");
  }
  pthread_mutex_destroy(&b->lock);
  pthread_cond_destroy(&b->cond);
  pthread_cond_destroy(&b->scaler_wake);
  free(b);
}

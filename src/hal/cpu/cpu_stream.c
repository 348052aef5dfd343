/* cpu_stream.c - streams and events of the CPU backend: each stream is a
 * queue of operations run in order by its own worker thread (or, inline, by
 * the caller's). A kernel may fan out over more threads: OpenMP's, which
 * oneDNN shares, as many as the stream was given. */
#include "hal/cpu/cpu_internal.h"

#include "base/clock.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_event {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t recorded_gen; /* bumped by each record */
  uint64_t done_gen;     /* the latest record the stream has reached */
  uint64_t time_ns;      /* when it reached it */
  atomic_int refs;       /* the owner plus queued operations */
} cpu_event;

typedef enum { OP_COPY, OP_MEMSET, OP_KERNEL, OP_HOST_FN, OP_CALL, OP_RECORD, OP_WAIT } op_type;

typedef struct cpu_op {
  op_type type;
  union {
    struct {
      void *dst;
      const void *src;
      size_t bytes;
    } copy;
    struct {
      void *dst;
      size_t bytes;
      uint8_t value;
    } set;
    struct {
      gs_cpu_kernel_fn fn;
      gs_cpu_kernel_call call;
      uint8_t params[GS_KERNEL_MAX_PARAMS];
    } kernel;
    struct {
      gs_host_fn fn;
      void *arg;
    } host; /* OP_HOST_FN; OP_CALL frees arg after */
    struct {
      cpu_event *event;
      uint64_t gen;
    } ev;
  } u;
} cpu_op;

typedef struct cpu_stream {
  pthread_t worker;
  pthread_mutex_t lock;
  pthread_cond_t work;  /* worker waits for operations */
  pthread_cond_t done;  /* synchronize waits for progress */
  cpu_op *ring;         /* capacity a power of two */
  size_t cap, head, tail; /* head: next to run; tail: next free (both unwrapped) */
  _Atomic uint64_t completed;
  bool worker_idle, stopping;
  _Atomic int threads;      /* a kernel's OpenMP team, at most */
  bool inline_exec;         /* GS_STREAM_INLINE: no worker; callers run the work */
  pthread_mutex_t run_lock; /* inline: one caller's operation at a time */
  int sync_waiters;
  int error;              /* first error since the last synchronize */
  char error_detail[256];
} cpu_stream;

/* ---- events ---------------------------------------------------------------- */

static void event_unref(cpu_event *e) {
  if (atomic_fetch_sub(&e->refs, 1) == 1) {
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    free(e);
  }
}

int gs__cpu_event_create(gs_device_t *device, void **out) {
  cpu_event *e = calloc(1, sizeof *e);
  if (!e)
    return gs_error(GS_ENOMEM, "out of memory creating an event on %s",
                    gs_device_get_info(device)->id);
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->cond, NULL);
  atomic_init(&e->refs, 1);
  *out = e;
  return GS_OK;
}

/* Queued records still hold references: the event goes when they have run. */
void gs__cpu_event_destroy(void *event) { event_unref(event); }

int gs__cpu_event_synchronize(void *event) {
  cpu_event *e = event;
  pthread_mutex_lock(&e->lock);
  uint64_t target = e->recorded_gen;
  while (e->done_gen < target)
    pthread_cond_wait(&e->cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
  return GS_OK;
}

int gs__cpu_event_query(void *event) {
  cpu_event *e = event;
  pthread_mutex_lock(&e->lock);
  int done = e->done_gen >= e->recorded_gen;
  pthread_mutex_unlock(&e->lock);
  return done;
}

int gs__cpu_event_elapsed_ns(void *start, void *end, uint64_t *ns) {
  cpu_event *a = start, *b = end;
  if (gs__cpu_event_query(a) != 1 || gs__cpu_event_query(b) != 1)
    return gs_error(GS_ESTATE, "event_elapsed: an event has not happened yet");
  pthread_mutex_lock(&a->lock);
  uint64_t t0 = a->time_ns;
  pthread_mutex_unlock(&a->lock);
  pthread_mutex_lock(&b->lock);
  uint64_t t1 = b->time_ns;
  pthread_mutex_unlock(&b->lock);
  if (t1 < t0)
    return gs_error(GS_EINVAL, "event_elapsed: the end event happened %llu ns before the start",
                    (unsigned long long)(t0 - t1));
  *ns = t1 - t0;
  return GS_OK;
}

/* ---- the worker ------------------------------------------------------------- */

static void set_error(cpu_stream *s, int rc) {
  pthread_mutex_lock(&s->lock);
  if (s->error == 0) {
    s->error = rc;
    snprintf(s->error_detail, sizeof s->error_detail, "%s", gs_error_detail());
  }
  pthread_mutex_unlock(&s->lock);
}

/* OpenMP's team size is a setting of the calling thread: set it where the
 * thread last ran a kernel for a stream with another count. */
static void use_threads(int threads) {
  static __thread int current;
  if (threads != current) {
    omp_set_num_threads(threads);
    current = threads;
  }
}

static void run_op(cpu_stream *s, cpu_op *op) {
  switch (op->type) {
  case OP_COPY:
    memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
    break;
  case OP_MEMSET:
    memset(op->u.set.dst, op->u.set.value, op->u.set.bytes);
    break;
  case OP_KERNEL: {
    op->u.kernel.call.params = op->u.kernel.params;
    use_threads(atomic_load_explicit(&s->threads, memory_order_relaxed));
    int rc = op->u.kernel.fn(&op->u.kernel.call);
    if (rc < 0)
      set_error(s, rc);
    break;
  }
  case OP_HOST_FN:
  case OP_CALL: {
    int rc = op->u.host.fn(op->u.host.arg);
    if (rc != 0)
      set_error(s, rc < 0 ? rc : gs_error(GS_EINTERNAL, "host function returned %d", rc));
    if (op->type == OP_CALL)
      free(op->u.host.arg);
    break;
  }
  case OP_RECORD: {
    cpu_event *e = op->u.ev.event;
    uint64_t now = gs_now_ns();
    pthread_mutex_lock(&e->lock);
    if (op->u.ev.gen > e->done_gen) {
      e->done_gen = op->u.ev.gen;
      e->time_ns = now;
    }
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    event_unref(e);
    break;
  }
  case OP_WAIT: {
    cpu_event *e = op->u.ev.event;
    pthread_mutex_lock(&e->lock);
    while (e->done_gen < op->u.ev.gen)
      pthread_cond_wait(&e->cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
    event_unref(e);
    break;
  }
  }
}

static void *worker_main(void *arg) {
  cpu_stream *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (s->head == s->tail && !s->stopping) {
      s->worker_idle = true;
      pthread_cond_wait(&s->work, &s->lock);
    }
    s->worker_idle = false;
    if (s->head == s->tail)
      break; /* stopping, and nothing left */
    /* The slot stays ours until head moves: enqueue never overwrites it,
     * and growing the ring copies it to the same unwrapped index. */
    cpu_op op = s->ring[s->head & (s->cap - 1)];
    pthread_mutex_unlock(&s->lock);
    run_op(s, &op);
    pthread_mutex_lock(&s->lock);
    s->head++;
    atomic_store_explicit(&s->completed, s->head, memory_order_release);
    if (s->sync_waiters)
      pthread_cond_broadcast(&s->done);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Appends `op`. Returns 0 or GS_ENOMEM when the ring cannot grow. */
static int enqueue(cpu_stream *s, const cpu_op *op) {
  if (s->inline_exec) {
    /* Run it now, in order with other callers; counters as if it had been
     * queued and completed, so that marks and synchronize work alike. */
    cpu_op copy = *op;
    pthread_mutex_lock(&s->run_lock);
    run_op(s, &copy);
    pthread_mutex_lock(&s->lock);
    s->tail++;
    s->head++;
    atomic_store_explicit(&s->completed, s->head, memory_order_release);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&s->run_lock);
    return GS_OK;
  }
  pthread_mutex_lock(&s->lock);
  if (s->tail - s->head == s->cap) {
    size_t cap = s->cap * 2;
    cpu_op *ring = malloc(cap * sizeof *ring);
    if (!ring) {
      pthread_mutex_unlock(&s->lock);
      return gs_error(GS_ENOMEM, "out of memory growing a stream queue to %zu operations", cap);
    }
    for (size_t i = s->head; i != s->tail; i++)
      ring[i & (cap - 1)] = s->ring[i & (s->cap - 1)];
    free(s->ring);
    s->ring = ring;
    s->cap = cap;
  }
  s->ring[s->tail & (s->cap - 1)] = *op;
  s->tail++;
  if (s->worker_idle)
    pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  return GS_OK;
}

/* ---- streams ---------------------------------------------------------------- */

int gs__cpu_stream_create(gs_device_t *device, unsigned flags, void **out) {
  cpu_stream *s = calloc(1, sizeof *s);
  if (s)
    s->ring = malloc(64 * sizeof *s->ring);
  if (!s || !s->ring) {
    if (s)
      free(s);
    return gs_error(GS_ENOMEM, "out of memory creating a stream on %s",
                    gs_device_get_info(device)->id);
  }
  s->cap = 64;
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->run_lock, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  s->inline_exec = flags & GS_STREAM_INLINE;
  atomic_init(&s->threads, gs_device_get_info(device)->compute_units);
  int rc = s->inline_exec ? 0 : pthread_create(&s->worker, NULL, worker_main, s);
  if (rc != 0) {
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->run_lock);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    free(s->ring);
    free(s);
    return gs_error(GS_ENOMEM, "cannot start a stream worker thread: %s", strerror(rc));
  }
  *out = s;
  return GS_OK;
}

void gs__cpu_stream_set_threads(void *stream, int threads) {
  cpu_stream *s = stream;
  atomic_store_explicit(&s->threads, threads > 0 ? threads : 1, memory_order_relaxed);
}

void gs__cpu_stream_destroy(void *stream) {
  cpu_stream *s = stream;
  if (!s->inline_exec) {
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker, NULL);
  }
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->run_lock);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->done);
  free(s->ring);
  free(s);
}

static void *host_addr(gs_buffer_t *b, size_t offset) {
  return (char *)b->segment->native + b->offset + offset;
}

int gs__cpu_stream_copy(void *stream, gs_buffer_t *dst, size_t dst_offset, void *dst_host,
                        gs_buffer_t *src, size_t src_offset, const void *src_host, size_t bytes) {
  cpu_op op = {.type = OP_COPY};
  op.u.copy.dst = dst ? host_addr(dst, dst_offset) : dst_host;
  op.u.copy.src = src ? host_addr(src, src_offset) : src_host;
  op.u.copy.bytes = bytes;
  return enqueue(stream, &op);
}

int gs__cpu_stream_memset(void *stream, gs_buffer_t *dst, size_t offset, uint8_t value,
                          size_t bytes) {
  cpu_op op = {.type = OP_MEMSET};
  op.u.set.dst = host_addr(dst, offset);
  op.u.set.value = value;
  op.u.set.bytes = bytes;
  return enqueue(stream, &op);
}

int gs__cpu_stream_launch(void *stream, const void *kernel, const gs_kernel_args *args) {
  cpu_op op = {.type = OP_KERNEL};
  op.u.kernel.fn = ((const gs_cpu_kernel *)kernel)->fn;
  gs_cpu_kernel_call *call = &op.u.kernel.call;
  call->buffer_count = args->buffer_count;
  for (int i = 0; i < args->buffer_count; i++) {
    gs_buffer_t *b = args->buffers[i];
    call->ptr[i] = b ? host_addr(b, args->offsets[i]) : NULL;
    call->bytes[i] = b ? b->requested - args->offsets[i] : 0;
  }
  if (args->params_size)
    memcpy(op.u.kernel.params, args->params, args->params_size);
  call->params_size = args->params_size;
  return enqueue(stream, &op);
}

int gs__cpu_stream_host_func(void *stream, gs_host_fn fn, void *arg) {
  cpu_op op = {.type = OP_HOST_FN};
  op.u.host.fn = fn;
  op.u.host.arg = arg;
  return enqueue(stream, &op);
}

int gs__cpu_stream_call(void *stream, gs_host_fn fn, void *arg) {
  cpu_op op = {.type = OP_CALL};
  op.u.host.fn = fn;
  op.u.host.arg = arg;
  int rc = enqueue(stream, &op);
  if (rc < 0)
    free(arg);
  return rc;
}

int gs__cpu_stream_synchronize(void *stream) {
  cpu_stream *s = stream;
  pthread_mutex_lock(&s->lock);
  size_t target = s->tail;
  s->sync_waiters++;
  while (s->head < target)
    pthread_cond_wait(&s->done, &s->lock);
  s->sync_waiters--;
  int rc = s->error;
  char detail[sizeof s->error_detail];
  memcpy(detail, s->error_detail, sizeof detail);
  s->error = 0;
  s->error_detail[0] = '\0';
  pthread_mutex_unlock(&s->lock);
  if (rc < 0)
    return gs_error(rc, "%s", detail);
  return GS_OK;
}

int gs__cpu_stream_mark(void *stream, uint64_t *ticket) {
  cpu_stream *s = stream;
  pthread_mutex_lock(&s->lock);
  *ticket = s->tail;
  pthread_mutex_unlock(&s->lock);
  return GS_OK;
}

int gs__cpu_stream_passed(void *stream, uint64_t ticket) {
  cpu_stream *s = stream;
  return atomic_load_explicit(&s->completed, memory_order_acquire) >= ticket;
}

int gs__cpu_event_record(void *event, void *stream) {
  cpu_event *e = event;
  cpu_op op = {.type = OP_RECORD};
  op.u.ev.event = e;
  atomic_fetch_add(&e->refs, 1);
  /* The new generation becomes visible together with its queued record, so
   * that a wait that sees it finds the record already queued. (Lock order:
   * event, then stream; the worker never holds both.) */
  cpu_stream *st = stream;
  if (st->inline_exec) {
    /* Runs at once, taking the event's lock itself: not held around it. */
    pthread_mutex_lock(&e->lock);
    op.u.ev.gen = ++e->recorded_gen;
    pthread_mutex_unlock(&e->lock);
    return enqueue(st, &op);
  }
  pthread_mutex_lock(&e->lock);
  op.u.ev.gen = e->recorded_gen + 1;
  int rc = enqueue(st, &op);
  if (rc == 0)
    e->recorded_gen = op.u.ev.gen;
  pthread_mutex_unlock(&e->lock);
  if (rc < 0)
    event_unref(e);
  return rc;
}

int gs__cpu_stream_wait_event(void *stream, void *event) {
  cpu_event *e = event;
  cpu_op op = {.type = OP_WAIT};
  op.u.ev.event = e;
  atomic_fetch_add(&e->refs, 1);
  pthread_mutex_lock(&e->lock);
  op.u.ev.gen = e->recorded_gen;
  pthread_mutex_unlock(&e->lock);
  int rc = enqueue(stream, &op);
  if (rc < 0)
    event_unref(e);
  return rc;
}

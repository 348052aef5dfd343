/* pool.c - the caching allocator every backend's memory goes through.
 *
 * Memory comes from the device in segments (backend slot segment_alloc) and is
 * handed out as blocks. Requests are rounded to a size class (multiples of
 * 512 bytes); requests up to 1 MiB are served from 2 MiB "small" segments,
 * larger ones from "large" segments, so that small buffers do not break up
 * the memory that large ones need. A block bigger than asked is split, and a
 * freed block is merged with free neighbours of its segment. Free blocks sit
 * in bins by size (four per power of two) with a bitmap of non-empty bins, so
 * finding a block costs a few bit operations, not a walk over the cache.
 *
 * Stream order: a block freed with a stream keeps that stream and a ticket
 * (stream_mark) until the stream has passed the ticket. Until then only work
 * on the same stream may reuse it, since that work is ordered after the free.
 * This is the rule of CUDA's caching allocator, written once for all backends.
 */
#include "hal/hal_internal.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUND_BYTES ((size_t)512)
#define SMALL_MAX ((size_t)1 << 20)
#define SMALL_SEGMENT ((size_t)2 << 20)
#define LARGE_GRANULE ((size_t)2 << 20)
#define LARGE_BATCH_BELOW ((size_t)10 << 20)
#define LARGE_BATCH_SEGMENT ((size_t)20 << 20)
#define NBINS 256 /* 4 bins for each power of two up to 2^63 */

typedef struct bin_set {
  gs_buffer_t *head[NBINS];
  uint64_t nonempty[NBINS / 64];
} bin_set;

struct gs_pool {
  gs_device_t *device;
  gs_mem_kind kind;
  pthread_mutex_t lock;
  size_t round; /* size-class granule: max(512, device alignment) */
  uint64_t limit;
  gs_segment *segments;
  bin_set bins[2]; /* [0] large, [1] small */
  gs_buffer_t *spare; /* block structs kept for reuse, linked by bin_next */
  gs_pool_stats st;
  gs_pool_t *list_prev, *list_next; /* the device's pools */
};

static const char *const kind_names[GS_MEM_KIND_COUNT] = {"device", "pinned"};

static size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* ---- bins ------------------------------------------------------------------ */

static int bin_index(size_t size) {
  int log2 = 63 - __builtin_clzll((unsigned long long)size);
  int sub = log2 >= 2 ? (int)((size >> (log2 - 2)) & 3) : 0;
  return log2 * 4 + sub;
}

static void bin_insert(gs_pool_t *p, gs_buffer_t *b) {
  bin_set *set = &p->bins[b->segment->small];
  int i = bin_index(b->size);
  b->bin = i;
  b->bin_prev = NULL;
  b->bin_next = set->head[i];
  if (b->bin_next)
    b->bin_next->bin_prev = b;
  set->head[i] = b;
  set->nonempty[i / 64] |= 1ull << (i % 64);
}

static void bin_remove(gs_pool_t *p, gs_buffer_t *b) {
  bin_set *set = &p->bins[b->segment->small];
  int i = b->bin;
  if (b->bin_prev)
    b->bin_prev->bin_next = b->bin_next;
  else
    set->head[i] = b->bin_next;
  if (b->bin_next)
    b->bin_next->bin_prev = b->bin_prev;
  if (!set->head[i])
    set->nonempty[i / 64] &= ~(1ull << (i % 64));
  b->bin = -1;
  b->bin_prev = b->bin_next = NULL;
}

/* First non-empty bin at or after `from`, or -1. */
static int next_nonempty(const bin_set *set, int from) {
  for (int w = from / 64; w < NBINS / 64; w++) {
    uint64_t bits = set->nonempty[w];
    if (w == from / 64)
      bits &= ~0ull << (from % 64);
    if (bits)
      return w * 64 + __builtin_ctzll(bits);
  }
  return -1;
}

/* ---- block structs --------------------------------------------------------- */

static gs_buffer_t *block_new(gs_pool_t *p) {
  gs_buffer_t *b = p->spare;
  if (b)
    p->spare = b->bin_next;
  else if (!(b = malloc(sizeof *b)))
    return NULL;
  memset(b, 0, sizeof *b);
  b->pool = p;
  b->bin = -1;
  return b;
}

static void block_recycle(gs_pool_t *p, gs_buffer_t *b) {
  b->bin_next = p->spare;
  p->spare = b;
}

/* Whether a free block may serve work on `stream`. Clears a tag that the
 * freeing stream has passed. */
static bool block_usable(gs_buffer_t *b, gs_stream_t *stream) {
  if (!b->free_stream || b->free_stream == stream)
    return true;
  if (gs__stream_passed(b->free_stream, b->free_ticket) == 1) {
    b->free_stream = NULL;
    return true;
  }
  return false;
}

/* Drops a free block's tag once its stream has passed the free. Safe under
 * the pool lock: a stream is forgotten by every pool (under each pool's
 * lock) before it is destroyed. */
static void settle_tag(gs_buffer_t *b) {
  if (b->free_stream && gs__stream_passed(b->free_stream, b->free_ticket) == 1)
    b->free_stream = NULL;
}

/* Whether two free neighbours may become one block. */
static bool mergeable(gs_buffer_t *a, gs_buffer_t *b) {
  if (!a || !b || !a->is_free || !b->is_free)
    return false;
  settle_tag(a);
  settle_tag(b);
  return a->free_stream == b->free_stream;
}

/* Merges `next` into `b`; both free, `next` right after `b`, both out of
 * their bins or not: bins are fixed here. */
static void merge_into(gs_pool_t *p, gs_buffer_t *b, gs_buffer_t *next) {
  if (next->bin >= 0)
    bin_remove(p, next);
  b->size += next->size;
  if (next->free_ticket > b->free_ticket)
    b->free_ticket = next->free_ticket;
  b->seg_next = next->seg_next;
  if (b->seg_next)
    b->seg_next->seg_prev = b;
  block_recycle(p, next);
}

/* Merges every run of free neighbours in the segment whose tags now agree
 * (tags settle after the free that set them, so a later look can merge). */
static void coalesce_segment(gs_pool_t *p, gs_segment *seg) {
  for (gs_buffer_t *b = seg->first; b; b = b->seg_next) {
    if (!b->is_free || !mergeable(b, b->seg_next))
      continue;
    if (b->bin >= 0)
      bin_remove(p, b);
    while (mergeable(b, b->seg_next))
      merge_into(p, b, b->seg_next);
    bin_insert(p, b);
  }
}

/* Best fit in the first bins that have a usable block. */
static gs_buffer_t *find_free_block(gs_pool_t *p, bool small, size_t size, gs_stream_t *stream) {
  bin_set *set = &p->bins[small];
  int start = bin_index(size);
  for (int i = next_nonempty(set, start); i >= 0; i = next_nonempty(set, i + 1)) {
    gs_buffer_t *best = NULL;
    for (gs_buffer_t *b = set->head[i]; b; b = b->bin_next)
      if (b->size >= size && (!best || b->size < best->size) && block_usable(b, stream))
        best = b;
    if (best)
      return best;
  }
  return NULL;
}

/* ---- segments -------------------------------------------------------------- */

static void segment_release(gs_pool_t *p, gs_segment *seg) {
  gs_buffer_t *b = seg->first;
  if (b->bin >= 0)
    bin_remove(p, b);
  block_recycle(p, b);
  if (seg->prev)
    seg->prev->next = seg->next;
  else
    p->segments = seg->next;
  if (seg->next)
    seg->next->prev = seg->prev;
  p->st.reserved_bytes -= seg->size;
  p->st.segment_count--;
  gs__device_iface(p->device)->segment_free(p->device, p->kind, seg);
  free(seg);
}

/* Releases segments that hold one free block nobody waits on. Returns the
 * bytes released. */
static uint64_t release_unused(gs_pool_t *p) {
  uint64_t released = 0;
  gs_segment *next;
  for (gs_segment *seg = p->segments; seg; seg = next) {
    next = seg->next;
    coalesce_segment(p, seg);
    gs_buffer_t *b = seg->first;
    if (b->is_free && !b->seg_next && block_usable(b, NULL)) {
      released += seg->size;
      segment_release(p, seg);
    }
  }
  return released;
}

static int segment_new(gs_pool_t *p, size_t block_size, bool small, gs_buffer_t **out) {
  size_t want;
  if (small)
    want = SMALL_SEGMENT;
  else if (block_size < LARGE_BATCH_BELOW)
    want = LARGE_BATCH_SEGMENT;
  else
    want = round_up(block_size, LARGE_GRANULE);
  if (p->limit && p->st.reserved_bytes + want > p->limit)
    release_unused(p);
  if (p->limit && p->st.reserved_bytes + want > p->limit)
    want = block_size; /* no batching when close to the limit */
  if (p->limit && p->st.reserved_bytes + want > p->limit) {
    char a[32], f[32], l[32], r[32];
    uint64_t free_bytes = p->limit > p->st.reserved_bytes ? p->limit - p->st.reserved_bytes : 0;
    return gs_error(GS_ENOMEM,
                    "%s %s pool: cannot allocate %s: limit %s, %s reserved, %s free under the "
                    "limit (the cache holds no block that fits)",
                    p->device->info.id, kind_names[p->kind],
                    gs_format_bytes(block_size, a, sizeof a), gs_format_bytes(p->limit, l, sizeof l),
                    gs_format_bytes(p->st.reserved_bytes, r, sizeof r),
                    gs_format_bytes(free_bytes, f, sizeof f));
  }
  gs_segment *seg = calloc(1, sizeof *seg);
  gs_buffer_t *b = block_new(p);
  if (!seg || !b) {
    free(seg);
    if (b)
      block_recycle(p, b);
    return gs_error(GS_ENOMEM, "out of host memory for pool bookkeeping");
  }
  int rc = gs__device_iface(p->device)->segment_alloc(p->device, p->kind, want, seg);
  if (rc == GS_ENOMEM && release_unused(p) > 0)
    rc = gs__device_iface(p->device)->segment_alloc(p->device, p->kind, want, seg);
  if (rc < 0) {
    free(seg);
    block_recycle(p, b);
    return rc;
  }
  seg->size = want;
  seg->small = small;
  seg->first = b;
  seg->next = p->segments;
  if (seg->next)
    seg->next->prev = seg;
  p->segments = seg;
  p->st.reserved_bytes += want;
  p->st.segment_count++;
  if (p->st.reserved_bytes > p->st.peak_reserved_bytes)
    p->st.peak_reserved_bytes = p->st.reserved_bytes;
  b->segment = seg;
  b->offset = 0;
  b->size = want;
  b->is_free = true;
  *out = b;
  return GS_OK;
}

/* Whether a free block still waits for its stream. */
static bool any_tagged(gs_pool_t *p) {
  bool tagged = false;
  for (gs_segment *seg = p->segments; seg; seg = seg->next)
    for (gs_buffer_t *b = seg->first; b; b = b->seg_next)
      if (b->is_free && b->free_stream) {
        settle_tag(b);
        tagged = tagged || b->free_stream;
      }
  return tagged;
}

/* Waits, with the lock held only while looking, until no free block waits
 * for its stream, or `timeout_ns` passes. Streams are polled rather than
 * synchronized: synchronizing would consume their owners' errors, and a
 * stream may be destroyed meanwhile (it is forgotten under our lock first).
 * Returns true when nothing waits any more. */
static bool wait_for_tags(gs_pool_t *p, uint64_t timeout_ns) {
  uint64_t deadline = gs_now_ns() + timeout_ns;
  while (any_tagged(p)) {
    if (gs_now_ns() > deadline)
      return false;
    pthread_mutex_unlock(&p->lock);
    gs_sleep_ns(50 * 1000);
    pthread_mutex_lock(&p->lock);
  }
  for (gs_segment *seg = p->segments; seg; seg = seg->next)
    coalesce_segment(p, seg);
  return true;
}

/* ---- pools ------------------------------------------------------------------ */

int gs__pool_init(gs_pool_t **out, gs_device_t *device, gs_mem_kind kind, uint64_t limit) {
  gs_pool_t *p = calloc(1, sizeof *p);
  if (!p)
    return gs_error(GS_ENOMEM, "out of memory creating a pool on %s", device->info.id);
  p->device = device;
  p->kind = kind;
  p->limit = limit;
  p->st.limit_bytes = limit;
  size_t align = gs_device_get_caps(device)->min_alignment;
  p->round = align > ROUND_BYTES ? round_up(align, ROUND_BYTES) : ROUND_BYTES;
  pthread_mutex_init(&p->lock, NULL);
  gs__device_add_pool(device, p);
  *out = p;
  return GS_OK;
}

int gs_pool_create(gs_device_t *device, gs_mem_kind kind, uint64_t limit, gs_pool_t **out) {
  if (!device || !out || (unsigned)kind >= GS_MEM_KIND_COUNT)
    return gs_error(GS_EINVAL, "gs_pool_create: NULL device or output, or unknown kind %d",
                    (int)kind);
  return gs__pool_init(out, device, kind, limit);
}

void gs_pool_destroy(gs_pool_t *p) {
  if (!p)
    return;
  /* Work queued before a stream-ordered free may still use the memory. */
  pthread_mutex_lock(&p->lock);
  wait_for_tags(p, UINT64_MAX / 2);
  pthread_mutex_unlock(&p->lock);
  gs__device_remove_pool(p->device, p);
  if (p->st.live_count)
    GS_LOGW("hal", "%s %s pool destroyed with %llu buffer(s) still live", p->device->info.id,
            kind_names[p->kind], (unsigned long long)p->st.live_count);
  while (p->segments) {
    gs_segment *seg = p->segments;
    /* Leave one block per segment, as segment_release expects. */
    gs_buffer_t *b = seg->first->seg_next;
    while (b) {
      gs_buffer_t *next = b->seg_next;
      if (b->bin >= 0)
        bin_remove(p, b);
      free(b);
      b = next;
    }
    seg->first->seg_next = NULL;
    segment_release(p, seg);
  }
  while (p->spare) {
    gs_buffer_t *b = p->spare;
    p->spare = b->bin_next;
    free(b);
  }
  pthread_mutex_destroy(&p->lock);
  free(p);
}

int gs_pool_set_limit(gs_pool_t *p, uint64_t limit) {
  if (!p)
    return gs_error(GS_EINVAL, "gs_pool_set_limit: NULL pool");
  pthread_mutex_lock(&p->lock);
  p->limit = limit;
  p->st.limit_bytes = limit;
  if (limit && p->st.reserved_bytes > limit)
    release_unused(p);
  pthread_mutex_unlock(&p->lock);
  return GS_OK;
}

void gs_pool_trim(gs_pool_t *p) {
  pthread_mutex_lock(&p->lock);
  release_unused(p);
  pthread_mutex_unlock(&p->lock);
}

void gs_pool_get_stats(gs_pool_t *p, gs_pool_stats *out) {
  pthread_mutex_lock(&p->lock);
  *out = p->st;
  uint64_t free_bytes = 0, largest = 0;
  for (gs_segment *seg = p->segments; seg; seg = seg->next)
    for (gs_buffer_t *b = seg->first; b; b = b->seg_next)
      if (b->is_free) {
        free_bytes += b->size;
        if (b->size > largest)
          largest = b->size;
      }
  pthread_mutex_unlock(&p->lock);
  out->largest_free_block = largest;
  out->fragmentation = free_bytes ? 1.0 - (double)largest / (double)free_bytes : 0.0;
}

gs_device_t *gs_pool_device(const gs_pool_t *p) { return p->device; }
gs_mem_kind gs_pool_kind(const gs_pool_t *p) { return p->kind; }

/* Splits `b` so that it is `size` bytes, if the rest is worth keeping. */
static void maybe_split(gs_pool_t *p, gs_buffer_t *b, size_t size) {
  size_t rest = b->size - size;
  bool worth = b->segment->small ? rest >= p->round : rest > SMALL_MAX;
  if (!worth)
    return;
  gs_buffer_t *r = block_new(p);
  if (!r)
    return; /* keep the whole block: correct, only less economical */
  r->segment = b->segment;
  r->offset = b->offset + size;
  r->size = rest;
  r->is_free = true;
  r->free_stream = b->free_stream;
  r->free_ticket = b->free_ticket;
  r->seg_prev = b;
  r->seg_next = b->seg_next;
  if (r->seg_next)
    r->seg_next->seg_prev = r;
  b->seg_next = r;
  b->size = size;
  bin_insert(p, r);
}

static int alloc_locked(gs_pool_t *p, size_t rounded, bool small, gs_stream_t *stream,
                        gs_buffer_t **out) {
  gs_buffer_t *b = find_free_block(p, small, rounded, stream);
  if (b) {
    bin_remove(p, b);
    p->st.cache_hits++;
  } else {
    int rc = segment_new(p, rounded, small, &b);
    if (rc < 0)
      return rc;
  }
  maybe_split(p, b, rounded);
  b->is_free = false;
  b->free_stream = NULL;
  *out = b;
  return GS_OK;
}

int gs_pool_alloc(gs_pool_t *p, size_t size, gs_stream_t *stream, gs_buffer_t **out) {
  if (!p || !out)
    return gs_error(GS_EINVAL, "gs_pool_alloc: NULL pool or output");
  if (size > ((size_t)1 << 62))
    return gs_error(GS_ENOMEM, "%s %s pool: cannot allocate %zu bytes: larger than any device",
                    p->device->info.id, kind_names[p->kind], size);
  if (stream && stream->device != p->device)
    return gs_error(GS_EINVAL, "gs_pool_alloc: pool of %s used with a stream of %s",
                    p->device->info.id, stream->device->info.id);
  size_t rounded = round_up(size ? size : 1, p->round);
  bool small = rounded <= SMALL_MAX;
  gs_buffer_t *b = NULL;
  pthread_mutex_lock(&p->lock);
  int rc = alloc_locked(p, rounded, small, stream, &b);
  if (rc == GS_ENOMEM && any_tagged(p)) {
    /* Memory freed on other streams comes back once they pass their frees.
     * A bounded wait: a host function that allocates while its own stream
     * holds the memory would otherwise wait for itself. */
    char detail[512];
    snprintf(detail, sizeof detail, "%s", gs_error_detail());
    bool settled = wait_for_tags(p, 10ull * 1000 * 1000 * 1000);
    rc = alloc_locked(p, rounded, small, stream, &b);
    if (rc == GS_ENOMEM)
      gs_error(GS_ENOMEM, "%s%s", detail,
               settled ? "" : "; memory freed on other streams was still in use after 10 s");
  }
  if (rc == GS_OK) {
    b->requested = size;
    p->st.allocated_bytes += b->size;
    p->st.requested_bytes += size;
    p->st.alloc_count++;
    p->st.live_count++;
    if (p->st.allocated_bytes > p->st.peak_allocated_bytes)
      p->st.peak_allocated_bytes = p->st.allocated_bytes;
  }
  pthread_mutex_unlock(&p->lock);
  if (rc == GS_OK)
    *out = b;
  return rc;
}

void gs_buffer_free(gs_buffer_t *b, gs_stream_t *stream) {
  if (!b)
    return;
  gs_pool_t *p = b->pool;
  uint64_t ticket = 0;
  if (stream && gs__stream_mark(stream, &ticket) < 0) {
    /* Cannot tell when the stream passes this point: keep the memory out of
     * the cache rather than risk handing it out while it is still in use. */
    GS_LOGE("hal", "%s: cannot mark stream for a free (%s); %zu bytes leak", p->device->info.id,
            gs_error_detail(), b->size);
    pthread_mutex_lock(&p->lock);
    p->st.allocated_bytes -= b->size;
    p->st.requested_bytes -= b->requested;
    p->st.live_count--;
    pthread_mutex_unlock(&p->lock);
    return;
  }
  pthread_mutex_lock(&p->lock);
  p->st.allocated_bytes -= b->size;
  p->st.requested_bytes -= b->requested;
  p->st.live_count--;
  b->is_free = true;
  b->free_stream = stream;
  b->free_ticket = ticket;
  b->requested = 0;
  if (mergeable(b, b->seg_next))
    merge_into(p, b, b->seg_next);
  gs_buffer_t *prev = b->seg_prev;
  if (mergeable(prev, b)) {
    bin_remove(p, prev);
    merge_into(p, prev, b);
    b = prev;
  }
  bin_insert(p, b);
  pthread_mutex_unlock(&p->lock);
}

void gs__pool_forget_stream(gs_pool_t *p, gs_stream_t *stream) {
  pthread_mutex_lock(&p->lock);
  for (gs_segment *seg = p->segments; seg; seg = seg->next)
    for (gs_buffer_t *b = seg->first; b; b = b->seg_next)
      if (b->is_free && b->free_stream == stream)
        b->free_stream = NULL;
  for (gs_segment *seg = p->segments; seg; seg = seg->next)
    coalesce_segment(p, seg);
  pthread_mutex_unlock(&p->lock);
}

size_t gs_buffer_size(const gs_buffer_t *b) { return b->requested; }
gs_pool_t *gs_buffer_pool(const gs_buffer_t *b) { return b->pool; }
void *gs_buffer_host_ptr(const gs_buffer_t *b) {
  return b->segment->host_ptr ? (char *)b->segment->host_ptr + b->offset : NULL;
}

/* ---- the device's list of pools ------------------------------------------ */

void gs__pool_link(gs_pool_t *p, gs_pool_t **head) {
  p->list_prev = NULL;
  p->list_next = *head;
  if (*head)
    (*head)->list_prev = p;
  *head = p;
}

void gs__pool_unlink(gs_pool_t *p, gs_pool_t **head) {
  if (p->list_prev)
    p->list_prev->list_next = p->list_next;
  else if (*head == p)
    *head = p->list_next;
  if (p->list_next)
    p->list_next->list_prev = p->list_prev;
  p->list_prev = p->list_next = NULL;
}

gs_pool_t *gs__pool_next(const gs_pool_t *p) { return p->list_next; }

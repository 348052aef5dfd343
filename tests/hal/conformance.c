/* conformance.c - the HAL conformance suite, written once against hal.h and
 * run for each backend: `hal_conformance BACKEND [CASE...]`. A backend that is
 * not present on this machine is skipped (exit 77) with the reason. Later
 * backends must pass it unchanged. */
#include "harness.h"

#include "base/clock.h"
#include "hal/hal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *backend_name;
static gs_device_t *dev;

static void setup(void) {
  CHECK_OK(gs_hal_init());
  char id[64];
  snprintf(id, sizeof id, "%s0", backend_name);
  dev = gs_hal_device_find(id);
  CHECK_MSG(dev != NULL, "no device %s", id);
}

static void teardown(void) { gs_hal_shutdown(); }

static gs_pool_t *device_pool(void) { return gs_device_pool(dev, GS_MEM_DEVICE); }

static void fill_pattern(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(seed * 31u + i * 7u + (i >> 8));
}

/* ---- devices ------------------------------------------------------------------ */

static void device_info_and_caps(void) {
  const gs_device_info *info = gs_device_get_info(dev);
  CHECK_STR(info->backend, backend_name);
  CHECK(strncmp(info->id, backend_name, strlen(backend_name)) == 0);
  CHECK(info->name[0] != '\0');
  CHECK(info->compute_units >= 1);
  CHECK(info->memory_total_bytes > 0);
  CHECK(gs_hal_device(info->index) == dev);
  const gs_device_caps *caps = gs_device_get_caps(dev);
  CHECK(caps->min_alignment >= 1 && (caps->min_alignment & (caps->min_alignment - 1)) == 0);
  CHECK(gs_device_backend(dev) == gs_hal_backend_by_name(backend_name));
  gs_telemetry t;
  CHECK_OK(gs_device_telemetry(dev, &t));
  if (t.valid & GS_TM_MEMORY) {
    CHECK(t.memory_total_bytes > 0);
    CHECK_EQ(t.memory_used_bytes + t.memory_free_bytes, t.memory_total_bytes);
  }
  if (t.valid & GS_TM_UTILIZATION)
    CHECK(t.utilization_percent >= 0 && t.utilization_percent <= 100);
  gs_process_info procs[4];
  int count = -1;
  int rc = gs_device_processes(dev, procs, 4, &count);
  CHECK(rc == 0 || rc == GS_ENOTSUP);
  CHECK_EQ(rc == 0, caps->process_list);
}

/* ---- allocation ----------------------------------------------------------------- */

static void alloc_zero_bytes(void) {
  gs_buffer_t *b;
  CHECK_OK(gs_pool_alloc(device_pool(), 0, NULL, &b));
  CHECK_EQ(gs_buffer_size(b), 0);
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_OK(gs_stream_copy_h2d(s, b, 0, "", 0));
  CHECK_ERR(gs_stream_copy_h2d(s, b, 0, "x", 1), GS_EINVAL);
  CHECK_OK(gs_stream_synchronize(s));
  gs_stream_destroy(s);
  gs_buffer_free(b, NULL);
  gs_buffer_free(NULL, NULL); /* a no-op */
}

static void alloc_over_limit(void) {
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 8u << 20, &pool));
  gs_buffer_t *b = NULL;
  CHECK_ERR(gs_pool_alloc(pool, 16u << 20, NULL, &b), GS_ENOMEM);
  const char *why = gs_error_detail();
  CHECK_MSG(strstr(why, "16.0 MiB") && strstr(why, "free") && strstr(why, "8.0 MiB"),
            "message lacks the size, the limit or what is free: %s", why);
  CHECK(b == NULL);
  /* Within the limit works, and the pool is still usable after the failure. */
  CHECK_OK(gs_pool_alloc(pool, 6u << 20, NULL, &b));
  gs_buffer_t *b2;
  CHECK_ERR(gs_pool_alloc(pool, 4u << 20, NULL, &b2), GS_ENOMEM);
  gs_buffer_free(b, NULL);
  CHECK_OK(gs_pool_alloc(pool, 4u << 20, NULL, &b2));
  gs_buffer_free(b2, NULL);
  gs_pool_stats st;
  gs_pool_get_stats(pool, &st);
  CHECK(st.reserved_bytes <= 8u << 20);
  CHECK(st.peak_reserved_bytes <= 8u << 20);
  gs_pool_destroy(pool);
  /* Absurd sizes fail cleanly on the default pool too. */
  CHECK_ERR(gs_pool_alloc(device_pool(), (size_t)-1, NULL, &b), GS_ENOMEM);
}

static void many_small_allocations(void) {
  enum { N = 3000 };
  static gs_buffer_t *bufs[N];
  static size_t sizes[N];
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  srand(7);
  for (int i = 0; i < N; i++) {
    sizes[i] = 1 + (size_t)(rand() % 3000);
    CHECK_OK(gs_pool_alloc(device_pool(), sizes[i], s, &bufs[i]));
    CHECK_OK(gs_stream_memset(s, bufs[i], 0, (uint8_t)i, sizes[i]));
  }
  /* Every buffer kept its own bytes: no two overlap. */
  uint8_t *out = malloc(3000);
  for (int i = 0; i < N; i++) {
    CHECK_OK(gs_stream_copy_d2h(s, out, bufs[i], 0, sizes[i]));
    CHECK_OK(gs_stream_synchronize(s));
    for (size_t k = 0; k < sizes[i]; k++)
      CHECK_MSG(out[k] == (uint8_t)i, "buffer %d byte %zu is %u, expected %u", i, k, out[k],
                (uint8_t)i);
    void *host = gs_buffer_host_ptr(bufs[i]);
    if (host)
      CHECK((uintptr_t)host % gs_device_get_caps(dev)->min_alignment == 0);
  }
  gs_pool_stats st;
  gs_pool_get_stats(device_pool(), &st);
  CHECK_EQ(st.live_count, N);
  for (int i = 0; i < N; i++)
    gs_buffer_free(bufs[i], s);
  gs_pool_get_stats(device_pool(), &st);
  CHECK_EQ(st.live_count, 0);
  CHECK_EQ(st.allocated_bytes, 0);
  free(out);
  gs_stream_destroy(s);
}

static void reuse_after_free(void) {
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 0, &pool));
  gs_buffer_t *b;
  CHECK_OK(gs_pool_alloc(pool, 1u << 20, NULL, &b));
  gs_pool_stats a, c;
  gs_pool_get_stats(pool, &a);
  gs_buffer_free(b, NULL);
  for (int i = 0; i < 100; i++) {
    CHECK_OK(gs_pool_alloc(pool, 1u << 20, NULL, &b));
    gs_buffer_free(b, NULL);
  }
  gs_pool_get_stats(pool, &c);
  CHECK_EQ(c.reserved_bytes, a.reserved_bytes); /* no new device memory */
  CHECK_EQ(c.segment_count, a.segment_count);
  CHECK_EQ(c.cache_hits, a.cache_hits + 100);
  CHECK_EQ(c.alloc_count, a.alloc_count + 100);
  gs_pool_trim(pool);
  gs_pool_get_stats(pool, &c);
  CHECK_EQ(c.reserved_bytes, 0);
  CHECK_EQ(c.segment_count, 0);
  gs_pool_destroy(pool);
}

static void split_and_coalesce(void) {
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 0, &pool));
  gs_buffer_t *a, *b, *c;
  CHECK_OK(gs_pool_alloc(pool, 4u << 20, NULL, &a));
  CHECK_OK(gs_pool_alloc(pool, 4u << 20, NULL, &b));
  CHECK_OK(gs_pool_alloc(pool, 4u << 20, NULL, &c));
  gs_pool_stats st;
  gs_pool_get_stats(pool, &st);
  CHECK_EQ(st.segment_count, 1); /* split from one segment */
  uint64_t seg = st.reserved_bytes;
  CHECK(seg >= 12u << 20);
  gs_buffer_free(b, NULL);
  gs_pool_get_stats(pool, &st);
  CHECK(st.fragmentation > 0); /* a hole between a and c, and the tail */
  gs_buffer_free(a, NULL);
  gs_pool_get_stats(pool, &st);
  CHECK(st.largest_free_block >= 8u << 20); /* a and b merged */
  gs_buffer_free(c, NULL);
  gs_pool_get_stats(pool, &st);
  CHECK_EQ(st.largest_free_block, seg); /* all one block again */
  CHECK(st.fragmentation == 0.0);
  /* The merged block serves a request as big as the three together. */
  CHECK_OK(gs_pool_alloc(pool, 12u << 20, NULL, &a));
  gs_pool_get_stats(pool, &st);
  CHECK_EQ(st.segment_count, 1);
  gs_buffer_free(a, NULL);
  gs_pool_destroy(pool);
}

static void limit_releases_cache(void) {
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 40u << 20, &pool));
  gs_buffer_t *b;
  CHECK_OK(gs_pool_alloc(pool, 30u << 20, NULL, &b));
  gs_buffer_free(b, NULL); /* cached: 30 MiB reserved, all free */
  /* 36 MiB does not fit beside the cached 30: the cache makes room. */
  CHECK_OK(gs_pool_alloc(pool, 36u << 20, NULL, &b));
  gs_pool_stats st;
  gs_pool_get_stats(pool, &st);
  CHECK(st.reserved_bytes <= 40u << 20);
  gs_buffer_free(b, NULL);
  CHECK_OK(gs_pool_set_limit(pool, 1u << 20)); /* shrinking releases the cache */
  gs_pool_get_stats(pool, &st);
  CHECK_EQ(st.reserved_bytes, 0);
  gs_pool_destroy(pool);
}

static void pool_stats_add_up(void) {
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 0, &pool));
  gs_buffer_t *a, *b;
  CHECK_OK(gs_pool_alloc(pool, 1000, NULL, &a));
  CHECK_OK(gs_pool_alloc(pool, 3u << 20, NULL, &b));
  gs_pool_stats st;
  gs_pool_get_stats(pool, &st);
  CHECK_EQ(st.requested_bytes, 1000 + (3u << 20));
  CHECK(st.allocated_bytes >= st.requested_bytes);
  CHECK(st.reserved_bytes >= st.allocated_bytes);
  CHECK_EQ(st.live_count, 2);
  CHECK_EQ(st.alloc_count, 2);
  CHECK_EQ(st.peak_allocated_bytes, st.allocated_bytes);
  uint64_t peak = st.peak_allocated_bytes;
  gs_buffer_free(b, NULL);
  gs_pool_get_stats(pool, &st);
  CHECK_EQ(st.requested_bytes, 1000);
  CHECK_EQ(st.peak_allocated_bytes, peak); /* the peak stays */
  CHECK_EQ(st.live_count, 1);
  CHECK(gs_pool_device(pool) == dev);
  CHECK(gs_pool_kind(pool) == GS_MEM_DEVICE);
  CHECK(gs_buffer_pool(a) == pool);
  gs_buffer_free(a, NULL);
  gs_pool_destroy(pool);
}

static void pinned_host_pool(void) {
  gs_buffer_t *pin, *d;
  CHECK_OK(gs_pool_alloc(gs_device_pool(dev, GS_MEM_PINNED_HOST), 1u << 20, NULL, &pin));
  uint8_t *p = gs_buffer_host_ptr(pin);
  CHECK(p != NULL); /* pinned host memory is always host-visible */
  fill_pattern(p, 1u << 20, 3);
  CHECK_OK(gs_pool_alloc(device_pool(), 1u << 20, NULL, &d));
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  uint8_t *back = malloc(1u << 20);
  CHECK_OK(gs_stream_copy_h2d(s, d, 0, p, 1u << 20));
  CHECK_OK(gs_stream_copy_d2h(s, back, d, 0, 1u << 20));
  CHECK_OK(gs_stream_synchronize(s));
  CHECK(memcmp(back, p, 1u << 20) == 0);
  free(back);
  gs_buffer_free(d, s);
  gs_buffer_free(pin, s);
  gs_stream_destroy(s);
}

/* ---- copies ---------------------------------------------------------------------- */

static void copies_of_many_sizes_and_offsets(void) {
  static const size_t sizes[] = {1, 3, 255, 4096, 65537, 1u << 20, (3u << 20) + 7};
  static const size_t offsets[] = {0, 1, 17, 4095};
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  size_t max = (3u << 20) + 7 + 4096;
  uint8_t *src = malloc(max), *dst = malloc(max);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (size_t j = 0; j < sizeof offsets / sizeof offsets[0]; j++) {
      size_t n = sizes[i], off = offsets[j], off2 = offsets[(j + 1) % 4];
      gs_buffer_t *a, *b;
      CHECK_OK(gs_pool_alloc(device_pool(), n + off, s, &a));
      CHECK_OK(gs_pool_alloc(device_pool(), n + off2, s, &b));
      fill_pattern(src, n, (unsigned)(i * 10 + j));
      memset(dst, 0xEE, n);
      CHECK_OK(gs_stream_copy_h2d(s, a, off, src, n));
      CHECK_OK(gs_stream_copy_d2d(s, b, off2, a, off, n));
      CHECK_OK(gs_stream_copy_d2h(s, dst, b, off2, n));
      CHECK_OK(gs_stream_synchronize(s));
      CHECK_MSG(memcmp(src, dst, n) == 0, "copy of %zu bytes at offsets %zu/%zu differs", n, off,
                off2);
      gs_buffer_free(a, s);
      gs_buffer_free(b, s);
    }
  free(src);
  free(dst);
  gs_stream_destroy(s);
}

/* Fills a's bytes from `off` (on stream s), copies them to b at `off2` as
 * a peer copy on t, and checks what lands there. */
static void check_peer_copy(gs_stream_t *s, gs_buffer_t *a, size_t off, gs_stream_t *t,
                            gs_buffer_t *b, size_t off2, size_t n, unsigned seed) {
  uint8_t *src = malloc(n), *dst = malloc(n);
  fill_pattern(src, n, seed);
  memset(dst, 0xEE, n);
  CHECK_OK(gs_stream_copy_h2d(s, a, off, src, n));
  CHECK_OK(gs_stream_synchronize(s));
  CHECK_OK(gs_stream_copy_peer(t, b, off2, a, off, n));
  CHECK_OK(gs_stream_copy_d2h(t, dst, b, off2, n));
  CHECK_OK(gs_stream_synchronize(t));
  CHECK_MSG(memcmp(src, dst, n) == 0, "%s -> %s differs",
            gs_device_get_info(gs_stream_device(s))->id, gs_device_get_info(gs_stream_device(t))->id);
  free(src);
  free(dst);
}

/* The exchange between devices: to and from every other device there is,
 * at offsets, whatever way the pair copies (peer, or staged through host
 * memory); a range past the source's end is refused. */
static void copies_between_devices(void) {
  const size_t n = (1u << 20) + 13, off = 5, off2 = 64;
  int others = 0;
  for (int i = 0; i < gs_hal_device_count(); i++) {
    gs_device_t *other = gs_hal_device(i);
    if (other == dev)
      continue;
    others++;
    gs_stream_t *s, *t;
    gs_buffer_t *a, *b;
    CHECK_OK(gs_stream_create(dev, &s));
    CHECK_OK(gs_stream_create(other, &t));
    CHECK_OK(gs_pool_alloc(device_pool(), n + off, s, &a));
    CHECK_OK(gs_pool_alloc(gs_device_pool(other, GS_MEM_DEVICE), n + off2, t, &b));
    check_peer_copy(s, a, off, t, b, off2, n, (unsigned)i);      /* here -> there */
    check_peer_copy(t, b, off2, s, a, off, n, (unsigned)i + 100); /* there -> here */
    CHECK_ERR(gs_stream_copy_peer(s, a, 0, b, off2 + 1, n), GS_EINVAL);
    gs_buffer_free(a, s);
    gs_buffer_free(b, t);
    gs_stream_destroy(s);
    gs_stream_destroy(t);
  }
  printf("  (%d other devices)\n", others);
}

/* Collectives over this device and every other there is: an all-reduce
 * sums every member's floats into each, a broadcast gives each the root's
 * bytes; a member on the wrong device is refused. */
static void group_all_reduce_and_broadcast(void) {
  gs_device_t *devices[8];
  int n = 0;
  devices[n++] = dev;
  for (int i = 0; i < gs_hal_device_count() && n < 8; i++)
    if (gs_hal_device(i) != dev)
      devices[n++] = gs_hal_device(i);
  gs_group_t *g;
  CHECK_OK(gs_group_create(devices, n, &g));
  printf("  (%d members, %s)\n", n, gs_group_method(g));
  const size_t count = 1000;
  gs_stream_t *streams[8];
  gs_buffer_t *bufs[8];
  float *host = malloc(count * sizeof(float));
  for (int i = 0; i < n; i++) {
    CHECK_OK(gs_stream_create(devices[i], &streams[i]));
    CHECK_OK(gs_pool_alloc(gs_device_pool(devices[i], GS_MEM_DEVICE), count * sizeof(float),
                           streams[i], &bufs[i]));
    for (size_t k = 0; k < count; k++)
      host[k] = (float)(i + 1) * (float)k; /* member i holds (i + 1) k */
    CHECK_OK(gs_stream_copy_h2d(streams[i], bufs[i], 0, host, count * sizeof(float)));
    CHECK_OK(gs_stream_synchronize(streams[i]));
  }
  CHECK_OK(gs_group_all_reduce_sum_f32(g, streams, bufs, count));
  float members_sum = (float)(n * (n + 1) / 2); /* 1 + 2 + ... + n */
  for (int i = 0; i < n; i++) {
    CHECK_OK(gs_stream_copy_d2h(streams[i], host, bufs[i], 0, count * sizeof(float)));
    CHECK_OK(gs_stream_synchronize(streams[i]));
    for (size_t k = 0; k < count; k += 111)
      CHECK_MSG(host[k] == members_sum * (float)k, "member %d element %zu: %g", i, k, host[k]);
  }
  /* Broadcast 13 bytes from the last member over everyone's. */
  uint8_t bytes[13], got[13];
  fill_pattern(bytes, sizeof bytes, 7);
  CHECK_OK(gs_stream_copy_h2d(streams[n - 1], bufs[n - 1], 0, bytes, sizeof bytes));
  CHECK_OK(gs_stream_synchronize(streams[n - 1]));
  CHECK_OK(gs_group_broadcast(g, streams, bufs, sizeof bytes, n - 1));
  for (int i = 0; i < n; i++) {
    CHECK_OK(gs_stream_copy_d2h(streams[i], got, bufs[i], 0, sizeof got));
    CHECK_OK(gs_stream_synchronize(streams[i]));
    CHECK_MSG(memcmp(bytes, got, sizeof got) == 0, "member %d after the broadcast", i);
  }
  if (n > 1) { /* member 0's buffer given as member 1's */
    gs_buffer_t *wrong[8];
    memcpy(wrong, bufs, sizeof wrong);
    wrong[1] = bufs[0];
    CHECK_ERR(gs_group_broadcast(g, streams, wrong, 4, 0), GS_EINVAL);
  }
  CHECK_ERR(gs_group_broadcast(g, streams, bufs, 4, n), GS_EINVAL);
  for (int i = 0; i < n; i++) {
    gs_buffer_free(bufs[i], streams[i]);
    gs_stream_destroy(streams[i]);
  }
  gs_group_destroy(g);
  free(host);
}

/* Device memory this process holds shows in the device's "used" figure
 * (OpenCL reports nothing else: its used is what our pools hold). */
static void telemetry_counts_memory_held(void) {
  gs_telemetry t;
  CHECK_OK(gs_device_telemetry(dev, &t));
  if (!(t.valid & GS_TM_MEMORY)) {
    printf("  (no memory telemetry here)\n");
    return;
  }
  const size_t bytes = 64u << 20;
  gs_buffer_t *b;
  CHECK_OK(gs_pool_alloc(device_pool(), bytes, NULL, &b));
  CHECK_OK(gs_device_telemetry(dev, &t));
  CHECK_MSG(t.memory_used_bytes >= bytes, "%llu bytes used while %zu are held",
            (unsigned long long)t.memory_used_bytes, bytes);
  gs_buffer_free(b, NULL);
}

static void copies_out_of_range_are_refused(void) {
  gs_stream_t *s;
  gs_buffer_t *b;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_OK(gs_pool_alloc(device_pool(), 100, s, &b));
  char host[200] = {0};
  CHECK_ERR(gs_stream_copy_h2d(s, b, 0, host, 101), GS_EINVAL);
  CHECK(strstr(gs_error_detail(), "100 bytes") != NULL);
  CHECK_ERR(gs_stream_copy_h2d(s, b, 101, host, 0), GS_EINVAL);
  CHECK_ERR(gs_stream_copy_d2h(s, host, b, 50, 51), GS_EINVAL);
  CHECK_ERR(gs_stream_copy_d2d(s, b, 0, b, 1, 100), GS_EINVAL);
  CHECK_ERR(gs_stream_memset(s, b, 99, 0, 2), GS_EINVAL);
  CHECK_ERR(gs_stream_copy_h2d(s, b, 0, NULL, 10), GS_EINVAL);
  CHECK_ERR(gs_stream_copy_h2d(s, b, (size_t)-1, host, 2), GS_EINVAL); /* no overflow */
  /* The edge itself is fine, and nothing refused was queued. */
  CHECK_OK(gs_stream_memset(s, b, 0, 0x11, 100));
  CHECK_OK(gs_stream_copy_d2h(s, host, b, 99, 1));
  CHECK_OK(gs_stream_synchronize(s));
  CHECK_EQ(host[0], 0x11);
  gs_buffer_free(b, s);
  gs_stream_destroy(s);
}

/* ---- ordering, host functions, kernels ----------------------------------------- */

typedef struct order_state {
  int next;
  int bad;
} order_state;

typedef struct order_step {
  order_state *st;
  int expect;
} order_step;

static int check_order(void *arg) {
  order_step *step = arg;
  if (step->st->next != step->expect)
    step->st->bad++;
  step->st->next = step->expect + 1;
  return 0;
}

static void ordering_across_thousands_of_operations(void) {
  enum { OPS = 5000, SLOTS = 8 };
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  gs_buffer_t *slots, *log;
  CHECK_OK(gs_pool_alloc(device_pool(), SLOTS * sizeof(int32_t), s, &slots));
  CHECK_OK(gs_pool_alloc(device_pool(), OPS * sizeof(int32_t), s, &log));
  static int32_t values[OPS], out[OPS];
  static order_step steps[OPS];
  order_state st = {0, 0};
  /* Each value goes through a reused slot into the log: if any copy ran out
   * of order, the log holds another value. */
  for (int i = 0; i < OPS; i++) {
    values[i] = i * 3 + 1;
    size_t slot = (size_t)(i % SLOTS) * sizeof(int32_t);
    CHECK_OK(gs_stream_copy_h2d(s, slots, slot, &values[i], sizeof(int32_t)));
    CHECK_OK(gs_stream_copy_d2d(s, log, (size_t)i * sizeof(int32_t), slots, slot, sizeof(int32_t)));
    steps[i] = (order_step){&st, i};
    CHECK_OK(gs_stream_host_func(s, check_order, &steps[i]));
  }
  CHECK_OK(gs_stream_copy_d2h(s, out, log, 0, sizeof out));
  CHECK_OK(gs_stream_synchronize(s));
  for (int i = 0; i < OPS; i++)
    CHECK_MSG(out[i] == values[i], "log[%d] = %d, expected %d", i, out[i], values[i]);
  CHECK_EQ(st.bad, 0);
  CHECK_EQ(st.next, OPS);
  gs_buffer_free(slots, s);
  gs_buffer_free(log, s);
  gs_stream_destroy(s);
}

static int fail_with_eio(void *arg) {
  (void)arg;
  return gs_error(GS_EIO, "host function failed on purpose");
}

static void host_function_errors_reach_synchronize(void) {
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_OK(gs_stream_host_func(s, fail_with_eio, NULL));
  CHECK_ERR(gs_stream_synchronize(s), GS_EIO);
  CHECK(strstr(gs_error_detail(), "on purpose") != NULL);
  CHECK_OK(gs_stream_synchronize(s)); /* reported once */
  CHECK_ERR(gs_stream_host_func(s, NULL, NULL), GS_EINVAL);
  gs_stream_destroy(s);
}

static void kernel_launch(void) {
  CHECK(gs_device_supports_op(dev, "axpy_f32"));
  CHECK(!gs_device_supports_op(dev, "no_such_op"));
  enum { N = 1000 };
  gs_stream_t *s;
  gs_buffer_t *x, *y;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_OK(gs_pool_alloc(device_pool(), N * sizeof(float), s, &x));
  CHECK_OK(gs_pool_alloc(device_pool(), N * sizeof(float), s, &y));
  static float hx[N], hy[N], out[N];
  for (int i = 0; i < N; i++) {
    hx[i] = (float)i;
    hy[i] = 1.0f;
  }
  CHECK_OK(gs_stream_copy_h2d(s, x, 0, hx, sizeof hx));
  CHECK_OK(gs_stream_copy_h2d(s, y, 0, hy, sizeof hy));
  gs_axpy_params p = {.n = N, .alpha = 2.0f};
  gs_kernel_args args = {.buffer_count = 2, .buffers = {x, y}, .params = &p, .params_size = sizeof p};
  CHECK_OK(gs_stream_launch(s, "axpy_f32", &args));
  CHECK_OK(gs_stream_launch(s, "axpy_f32", &args));
  CHECK_OK(gs_stream_copy_d2h(s, out, y, 0, sizeof out));
  CHECK_OK(gs_stream_synchronize(s));
  for (int i = 0; i < N; i++)
    CHECK_MSG(out[i] == 1.0f + 4.0f * (float)i, "y[%d] = %g", i, (double)out[i]);

  CHECK_ERR(gs_stream_launch(s, "no_such_op", &args), GS_ENOTSUP);
  CHECK(strstr(gs_error_detail(), "no_such_op") != NULL);
  /* A kernel that rejects its arguments fails the launch (a backend that checks
   * before queueing: CUDA) or the stream at its next synchronize (one that
   * checks when the work runs: CPU, OpenCL); never the process. */
  gs_axpy_params too_many = {.n = N + 1, .alpha = 1.0f};
  args.params = &too_many;
  int rc = gs_stream_launch(s, "axpy_f32", &args);
  if (rc == GS_OK)
    rc = gs_stream_synchronize(s);
  CHECK_EQ(rc, GS_EINVAL);
  CHECK(strstr(gs_error_detail(), "exceeds") != NULL);
  args.buffer_count = GS_KERNEL_MAX_BUFFERS + 1;
  CHECK_ERR(gs_stream_launch(s, "axpy_f32", &args), GS_EINVAL);
  gs_buffer_free(x, s);
  gs_buffer_free(y, s);
  gs_stream_destroy(s);
}

/* ---- events ---------------------------------------------------------------------- */

typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool open;
  atomic_int entered;
} gate;

static gate the_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};

static int wait_at_gate(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->entered, 1);
  pthread_mutex_lock(&g->lock);
  while (!g->open)
    pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
  return 0;
}

static void open_gate(gate *g) {
  pthread_mutex_lock(&g->lock);
  g->open = true;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

static int sleep_20ms(void *arg) {
  (void)arg;
  gs_sleep_ns(20 * 1000 * 1000);
  return 0;
}

static void events_and_timing(void) {
  gs_stream_t *s;
  gs_event_t *e0, *e1;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_OK(gs_event_create(dev, &e0));
  CHECK_OK(gs_event_create(dev, &e1));
  CHECK_ERR(gs_event_synchronize(e0), GS_ESTATE); /* never recorded */
  CHECK_ERR(gs_event_query(e0), GS_ESTATE);

  CHECK_OK(gs_stream_host_func(s, wait_at_gate, &the_gate));
  CHECK_OK(gs_event_record(e0, s));
  CHECK_OK(gs_stream_host_func(s, sleep_20ms, NULL));
  CHECK_OK(gs_event_record(e1, s));
  /* Checked after the gate opens: a failed check must not leave a host
   * function blocked (CUDA runs them all on one thread: the next tests would hang). */
  int queried = gs_event_query(e0); /* behind the gate */
  uint64_t ns;
  int early = gs_event_elapsed_ns(e0, e1, &ns);
  open_gate(&the_gate);
  CHECK_EQ(queried, 0);
  CHECK_EQ(early, GS_ESTATE);
  CHECK_OK(gs_event_synchronize(e1));
  CHECK_EQ(gs_event_query(e0), 1);
  CHECK_EQ(gs_event_query(e1), 1);
  if (gs_device_get_caps(dev)->event_timing) {
    CHECK_OK(gs_event_elapsed_ns(e0, e1, &ns));
    CHECK_MSG(ns >= 19 * 1000 * 1000 && ns < 5000ull * 1000 * 1000, "elapsed %llu ns",
              (unsigned long long)ns);
  } else {
    CHECK_ERR(gs_event_elapsed_ns(e0, e1, &ns), GS_ENOTSUP);
  }
  /* Re-recording re-arms the event. */
  CHECK_OK(gs_event_record(e0, s));
  CHECK_OK(gs_event_synchronize(e0));
  CHECK_OK(gs_stream_synchronize(s));
  gs_event_destroy(e0);
  gs_event_destroy(e1);
  gs_stream_destroy(s);
}

static atomic_int b_ran;
static int mark_b_ran(void *arg) {
  (void)arg;
  atomic_store(&b_ran, 1);
  return 0;
}

static void stream_waits_for_event_of_another(void) {
  gs_stream_t *a, *b;
  gs_event_t *e;
  CHECK_OK(gs_stream_create(dev, &a));
  CHECK_OK(gs_stream_create(dev, &b));
  CHECK_OK(gs_event_create(dev, &e));
  CHECK_OK(gs_stream_host_func(a, wait_at_gate, &the_gate));
  CHECK_OK(gs_event_record(e, a));
  CHECK_OK(gs_stream_wait_event(b, e));
  CHECK_OK(gs_stream_host_func(b, mark_b_ran, NULL));
  gs_sleep_ns(50 * 1000 * 1000);
  CHECK_EQ(atomic_load(&b_ran), 0); /* b waits for a, and a waits at the gate */
  open_gate(&the_gate);
  CHECK_OK(gs_stream_synchronize(b));
  CHECK_EQ(atomic_load(&b_ran), 1);
  CHECK_OK(gs_stream_synchronize(a));
  gs_event_destroy(e);
  gs_stream_destroy(a);
  gs_stream_destroy(b);
}

static void event_destroyed_while_queued(void) {
  gs_stream_t *s;
  gs_event_t *e;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_OK(gs_event_create(dev, &e));
  CHECK_OK(gs_stream_host_func(s, sleep_20ms, NULL));
  CHECK_OK(gs_event_record(e, s));
  gs_event_destroy(e); /* the queued record keeps what it needs */
  CHECK_OK(gs_stream_synchronize(s));
  gs_stream_destroy(s);
}

static atomic_int slow_done;
static int slow_then_mark(void *arg) {
  (void)arg;
  gs_sleep_ns(50 * 1000 * 1000);
  atomic_store(&slow_done, 1);
  return 0;
}

static void stream_destroy_finishes_queued_work(void) {
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_OK(gs_stream_host_func(s, slow_then_mark, NULL));
  gs_stream_destroy(s);
  CHECK_EQ(atomic_load(&slow_done), 1);
}

/* ---- stream-ordered reuse ----------------------------------------------------------- */

static void freed_memory_waits_for_its_stream(void) {
  enum { N = 64 * 1024 };
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 0, &pool));
  gs_stream_t *a, *b;
  CHECK_OK(gs_stream_create(dev, &a));
  CHECK_OK(gs_stream_create(dev, &b));
  static uint8_t seen_by_a[N];
  gs_buffer_t *x, *y;
  CHECK_OK(gs_pool_alloc(pool, N, a, &x));
  /* a: fill x, wait at the gate, then read x back. x is freed now, on a. */
  gs_event_t *filled;
  CHECK_OK(gs_event_create(dev, &filled));
  CHECK_OK(gs_stream_memset(a, x, 0, 0xAA, N));
  CHECK_OK(gs_event_record(filled, a));
  CHECK_OK(gs_stream_host_func(a, wait_at_gate, &the_gate));
  CHECK_OK(gs_stream_copy_d2h(a, seen_by_a, x, 0, N));
  gs_buffer_free(x, a);
  CHECK_OK(gs_event_synchronize(filled)); /* so a cannot overwrite b's bytes later */
  gs_event_destroy(filled);
  /* b must not get x's memory while a still uses it. */
  CHECK_OK(gs_pool_alloc(pool, N, b, &y));
  CHECK_OK(gs_stream_memset(b, y, 0, 0x55, N));
  CHECK_OK(gs_stream_synchronize(b));
  open_gate(&the_gate);
  CHECK_OK(gs_stream_synchronize(a));
  for (int i = 0; i < N; i++)
    CHECK_MSG(seen_by_a[i] == 0xAA, "byte %d overwritten by another stream: 0x%02x", i,
              seen_by_a[i]);
  gs_buffer_free(y, b);
  /* Work on the same stream is ordered after the free: reused at once. */
  gs_pool_stats st0, st1;
  CHECK_OK(gs_pool_alloc(pool, N, a, &x));
  gs_buffer_free(x, a);
  gs_pool_get_stats(pool, &st0);
  CHECK_OK(gs_pool_alloc(pool, N, a, &x));
  gs_pool_get_stats(pool, &st1);
  CHECK_EQ(st1.cache_hits, st0.cache_hits + 1);
  CHECK_EQ(st1.reserved_bytes, st0.reserved_bytes);
  gs_buffer_free(x, a);
  gs_stream_destroy(a);
  gs_stream_destroy(b);
  gs_pool_destroy(pool);
}

static void stream_freed_memory_is_released_after_the_stream_passes(void) {
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 4u << 20, &pool));
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  gs_buffer_t *b;
  CHECK_OK(gs_pool_alloc(pool, 1u << 20, s, &b)); /* splits a segment */
  CHECK_OK(gs_stream_memset(s, b, 0, 1, 1u << 20));
  gs_buffer_free(b, s);
  CHECK_OK(gs_stream_synchronize(s));
  /* The freed half and the untouched half merge once the stream has passed
   * the free, so the whole segment can go back to the device. */
  gs_pool_trim(pool);
  gs_pool_stats st;
  gs_pool_get_stats(pool, &st);
  CHECK_EQ(st.reserved_bytes, 0);
  /* And a limit-sized request fits again. */
  CHECK_OK(gs_pool_alloc(pool, 4u << 20, NULL, &b));
  gs_buffer_free(b, NULL);
  gs_stream_destroy(s);
  gs_pool_destroy(pool);
}

static void pool_destroy_waits_for_queued_work(void) {
  gs_pool_t *pool;
  CHECK_OK(gs_pool_create(dev, GS_MEM_DEVICE, 0, &pool));
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  gs_buffer_t *b;
  static uint8_t out[1 << 16];
  CHECK_OK(gs_pool_alloc(pool, sizeof out, s, &b));
  CHECK_OK(gs_stream_memset(s, b, 0, 7, sizeof out));
  CHECK_OK(gs_stream_host_func(s, sleep_20ms, NULL));
  CHECK_OK(gs_stream_copy_d2h(s, out, b, 0, sizeof out));
  gs_buffer_free(b, s);
  gs_pool_destroy(pool); /* must not unmap memory the queued copy reads */
  CHECK_OK(gs_stream_synchronize(s));
  CHECK_EQ(out[0], 7);
  CHECK_EQ(out[sizeof out - 1], 7);
  gs_stream_destroy(s);
}

static void pool_left_alive_is_destroyed_at_shutdown(void) {
  gs_pool_t *pool;
  gs_buffer_t *b;
  CHECK_OK(gs_pool_create(dev, GS_MEM_PINNED_HOST, 0, &pool));
  CHECK_OK(gs_pool_alloc(pool, 12345, NULL, &b));
  gs_buffer_free(b, NULL);
  /* Not destroyed here: teardown's gs_hal_shutdown() must free it (the leak
   * checker of the sanitizer build fails this case otherwise). */
}

static pthread_t host_fn_thread;
static int note_thread(void *arg) {
  (void)arg;
  host_fn_thread = pthread_self();
  return 0;
}

static void inline_streams_run_in_the_caller(void) {
  gs_stream_t *s;
  CHECK_OK(gs_stream_create_ex(dev, GS_STREAM_INLINE, &s));
  bool inline_caps = gs_device_get_caps(dev)->inline_streams;
  CHECK_OK(gs_stream_host_func(s, note_thread, NULL));
  if (inline_caps) /* ran during the call, on this thread */
    CHECK(pthread_equal(host_fn_thread, pthread_self()));
  /* Everything else behaves as on any stream. */
  enum { N = 4096 };
  static float hx[N], out[N];
  for (int i = 0; i < N; i++)
    hx[i] = (float)i;
  gs_buffer_t *x, *y;
  CHECK_OK(gs_pool_alloc(device_pool(), sizeof hx, s, &x));
  CHECK_OK(gs_pool_alloc(device_pool(), sizeof hx, s, &y));
  CHECK_OK(gs_stream_copy_h2d(s, x, 0, hx, sizeof hx));
  CHECK_OK(gs_stream_memset(s, y, 0, 0, sizeof hx));
  gs_axpy_params p = {.n = N, .alpha = 3.0f};
  gs_kernel_args args = {.buffer_count = 2, .buffers = {x, y}, .params = &p, .params_size = sizeof p};
  gs_event_t *e0, *e1;
  CHECK_OK(gs_event_create(dev, &e0));
  CHECK_OK(gs_event_create(dev, &e1));
  CHECK_OK(gs_event_record(e0, s));
  CHECK_OK(gs_stream_launch(s, "axpy_f32", &args));
  CHECK_OK(gs_stream_host_func(s, sleep_20ms, NULL));
  CHECK_OK(gs_event_record(e1, s));
  if (inline_caps)
    CHECK_EQ(gs_event_query(e1), 1); /* already happened */
  CHECK_OK(gs_stream_copy_d2h(s, out, y, 0, sizeof out));
  CHECK_OK(gs_stream_synchronize(s));
  for (int i = 0; i < N; i++)
    CHECK_MSG(out[i] == 3.0f * (float)i, "y[%d] = %g", i, (double)out[i]);
  uint64_t ns;
  if (gs_device_get_caps(dev)->event_timing) {
    CHECK_OK(gs_event_elapsed_ns(e0, e1, &ns));
    CHECK(ns >= 19 * 1000 * 1000);
  }
  CHECK_OK(gs_stream_host_func(s, fail_with_eio, NULL));
  CHECK_ERR(gs_stream_synchronize(s), GS_EIO);
  CHECK_OK(gs_stream_synchronize(s));
  gs_buffer_free(x, s);
  gs_buffer_free(y, s);
  gs_event_destroy(e0);
  gs_event_destroy(e1);
  gs_stream_destroy(s);
}

/* Every backend takes a thread count (those that run no kernel on host
 * threads ignore it); a negative one is refused, and kernels still run. */
static void streams_take_a_thread_count(void) {
  gs_stream_t *s;
  CHECK_OK(gs_stream_create(dev, &s));
  CHECK_ERR(gs_stream_set_threads(s, -1), GS_EINVAL);
  CHECK_ERR(gs_stream_set_threads(NULL, 1), GS_EINVAL);
  enum { N = 1000 };
  static float hx[N], out[N];
  for (int i = 0; i < N; i++)
    hx[i] = (float)i;
  gs_buffer_t *x, *y;
  CHECK_OK(gs_pool_alloc(device_pool(), sizeof hx, s, &x));
  CHECK_OK(gs_pool_alloc(device_pool(), sizeof hx, s, &y));
  CHECK_OK(gs_stream_copy_h2d(s, x, 0, hx, sizeof hx));
  CHECK_OK(gs_stream_memset(s, y, 0, 0, sizeof hx));
  gs_axpy_params p = {.n = N, .alpha = 1.0f};
  gs_kernel_args args = {.buffer_count = 2, .buffers = {x, y}, .params = &p, .params_size = sizeof p};
  int counts[] = {1, 3, 0};
  for (int k = 0; k < 3; k++) {
    CHECK_OK(gs_stream_set_threads(s, counts[k]));
    CHECK_OK(gs_stream_launch(s, "axpy_f32", &args));
  }
  CHECK_OK(gs_stream_copy_d2h(s, out, y, 0, sizeof out));
  CHECK_OK(gs_stream_synchronize(s));
  for (int i = 0; i < N; i++)
    CHECK_MSG(out[i] == 3.0f * (float)i, "y[%d] = %g", i, (double)out[i]);
  gs_buffer_free(x, s);
  gs_buffer_free(y, s);
  gs_stream_destroy(s);
}

/* ---- several streams from several threads ---------------------------------------- */

typedef struct worker_arg {
  int id;
  int failures;
} worker_arg;

static void *stream_worker(void *p) {
  worker_arg *w = p;
  gs_stream_t *s;
  if (gs_stream_create(dev, &s) != 0) {
    w->failures++;
    return NULL;
  }
  enum { N = 2048 };
  float hx[N], hy[N], out[N];
  for (int round = 0; round < 150; round++) {
    gs_buffer_t *x, *y;
    size_t bytes = (size_t)(N - (round % 7) * 100) * sizeof(float);
    size_t n = bytes / sizeof(float);
    if (gs_pool_alloc(device_pool(), bytes, s, &x) || gs_pool_alloc(device_pool(), bytes, s, &y)) {
      w->failures++;
      break;
    }
    for (size_t i = 0; i < n; i++) {
      hx[i] = (float)(w->id + round);
      hy[i] = (float)i;
    }
    gs_axpy_params prm = {.n = n, .alpha = 0.5f};
    gs_kernel_args args = {.buffer_count = 2, .buffers = {x, y}, .params = &prm,
                           .params_size = sizeof prm};
    int rc = gs_stream_copy_h2d(s, x, 0, hx, bytes) | gs_stream_copy_h2d(s, y, 0, hy, bytes) |
             gs_stream_launch(s, "axpy_f32", &args) | gs_stream_copy_d2h(s, out, y, 0, bytes) |
             gs_stream_synchronize(s);
    if (rc)
      w->failures++;
    for (size_t i = 0; i < n; i++)
      if (out[i] != (float)i + 0.5f * (float)(w->id + round)) {
        w->failures++;
        break;
      }
    gs_buffer_free(x, s);
    gs_buffer_free(y, (round & 1) ? s : NULL);
  }
  gs_stream_destroy(s);
  return NULL;
}

static void several_streams_from_several_threads(void) {
  enum { T = 6 };
  pthread_t th[T];
  worker_arg args[T];
  for (int i = 0; i < T; i++) {
    args[i] = (worker_arg){i, 0};
    CHECK_EQ(pthread_create(&th[i], NULL, stream_worker, &args[i]), 0);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    CHECK_MSG(args[i].failures == 0, "thread %d: %d failures", i, args[i].failures);
  }
  gs_pool_stats st;
  gs_pool_get_stats(device_pool(), &st);
  CHECK_EQ(st.live_count, 0);
}

static const gs_test tests[] = {
    {"device_info_and_caps", device_info_and_caps},
    {"alloc_zero_bytes", alloc_zero_bytes},
    {"alloc_over_limit", alloc_over_limit},
    {"many_small_allocations", many_small_allocations},
    {"reuse_after_free", reuse_after_free},
    {"split_and_coalesce", split_and_coalesce},
    {"limit_releases_cache", limit_releases_cache},
    {"pool_stats_add_up", pool_stats_add_up},
    {"pinned_host_pool", pinned_host_pool},
    {"copies_of_many_sizes_and_offsets", copies_of_many_sizes_and_offsets},
    {"copies_between_devices", copies_between_devices},
    {"telemetry_counts_memory_held", telemetry_counts_memory_held},
    {"group_all_reduce_and_broadcast", group_all_reduce_and_broadcast},
    {"copies_out_of_range_are_refused", copies_out_of_range_are_refused},
    {"ordering_across_thousands_of_operations", ordering_across_thousands_of_operations},
    {"host_function_errors_reach_synchronize", host_function_errors_reach_synchronize},
    {"kernel_launch", kernel_launch},
    {"events_and_timing", events_and_timing},
    {"stream_waits_for_event_of_another", stream_waits_for_event_of_another},
    {"event_destroyed_while_queued", event_destroyed_while_queued},
    {"stream_destroy_finishes_queued_work", stream_destroy_finishes_queued_work},
    {"freed_memory_waits_for_its_stream", freed_memory_waits_for_its_stream},
    {"stream_freed_memory_is_released_after_the_stream_passes",
     stream_freed_memory_is_released_after_the_stream_passes},
    {"pool_destroy_waits_for_queued_work", pool_destroy_waits_for_queued_work},
    {"pool_left_alive_is_destroyed_at_shutdown", pool_left_alive_is_destroyed_at_shutdown},
    {"inline_streams_run_in_the_caller", inline_streams_run_in_the_caller},
    {"streams_take_a_thread_count", streams_take_a_thread_count},
    {"several_streams_from_several_threads", several_streams_from_several_threads},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s BACKEND [CASE...]\n", argv[0]);
    return 2;
  }
  backend_name = argv[1];
  /* Skip, with the reason, when this machine lacks the backend. Asked in a
   * child process: a driver's threads (OpenCL's) do not survive the fork of
   * each case, so this process must never start one. */
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    int rc = gs_hal_init();
    bool present = rc == 0 && gs_hal_backend_by_name(backend_name) != NULL;
    if (!present) {
      const char *why = "it is not built or not installed";
      for (int i = 0; i < gs_hal_skipped_count(); i++)
        if (strcmp(gs_hal_skipped(i)->name, backend_name) == 0)
          why = gs_hal_skipped(i)->reason;
      printf("SKIP hal_conformance %s: backend not available here: %s\n", backend_name, why);
    }
    fflush(stdout);
    /* Where the backend's device is known to be installed, its absence is
     * a failure, not a skip (CI installs PoCL). */
    const char *require = getenv("GSTEST_REQUIRE_DEVICE");
    _exit(present ? 0 : require && strcmp(require, "1") == 0 ? 1 : 77);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status))
    return 1;
  if (WEXITSTATUS(status) != 0)
    return WEXITSTATUS(status);
  gs_test_suite suite = {.name = "hal_conformance", .tests = tests, .setup = setup,
                         .teardown = teardown, .timeout_s = 120};
  return gs_test_run(&suite, argc - 1, argv + 1);
}

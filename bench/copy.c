/* copy.c - `gs-bench-copy`: H2D, D2H and D2D bandwidth of every backend's
 * streams for sizes from 4 KiB to 256 MiB, printed beside this machine's plain
 * memcpy bandwidth measured in the same run; then the cost of a cached pool
 * allocate+free of 1 MiB beside malloc+free.
 *
 * Method (as nvbandwidth does it): warm-up copies, then a run of copies
 * between two events recorded on the stream, bandwidth = bytes / elapsed;
 * the median of several such samples. Pinned host memory is used, and
 * pageable memory too where the backend says the two differ.
 *
 * The memcpy peer runs in a host function of the same stream (the same
 * thread and core as the stream's copies), between the same buffers where
 * the device's memory is host memory (else two heap buffers); its samples
 * are interleaved with the streams' so that both see the same machine (on a
 * shared host the bandwidth drifts from second to second).
 *
 * Usage: gs-bench-copy [--max-size BYTES] [--samples N] [--backend NAME] */
#include "base/clock.h"
#include "hal/hal.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int samples = 7;
static size_t max_size = (size_t)256 << 20;
/* Bytes copied per sample: enough to dwarf the timing's own cost. */
static const size_t bytes_per_sample = (size_t)256 << 20;
static const int max_copies_per_sample = 4000;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int copies_for(size_t size) {
  size_t n = bytes_per_sample / size;
  if (n < 4)
    n = 4;
  if (n > (size_t)max_copies_per_sample)
    n = (size_t)max_copies_per_sample;
  return (int)n;
}

/* What one device's measurements share: buffers of max_size, allocated once. */
typedef struct rig {
  gs_device_t *dev;
  gs_stream_t *s;
  gs_event_t *e0, *e1;
  gs_buffer_t *a, *b, *pinned;
  void *pin, *pageable;          /* host sides; pageable is NULL unless it differs */
  char *plain_src, *plain_dst;   /* memcpy's own buffers */
} rig;

__attribute__((noreturn)) static void die(const char *what) {
  fprintf(stderr, "gs-bench-copy: %s: %s\n", what, gs_error_detail());
  exit(1);
}

/* One sample of plain memcpy: GB/s (1e9 bytes) over `n` copies of `size`. */
typedef struct memcpy_job {
  rig *r;
  size_t size;
  int n;
  double gbps;
} memcpy_job;

static int memcpy_on_stream(void *arg) {
  memcpy_job *j = arg;
  uint64_t t0 = gs_now_ns();
  /* Where the device's memory is host memory, the peer copies between the
   * very buffers the stream copies between (pinned -> device), so that the
   * figure isolates the stream's own cost from how the memory was mapped. */
  void *dst = gs_buffer_host_ptr(j->r->a) ? gs_buffer_host_ptr(j->r->a) : j->r->plain_dst;
  const void *src = gs_buffer_host_ptr(j->r->a) ? j->r->pin : j->r->plain_src;
  for (int i = 0; i < j->n; i++) {
    memcpy(dst, src, j->size);
    /* Keep the compiler from merging or dropping the repeated copies. */
    __asm__ volatile("" : : "r"(dst) : "memory");
  }
  j->gbps = (double)j->size * j->n / (double)(gs_now_ns() - t0);
  return 0;
}

/* One sample of plain memcpy, run as a host function of the stream: on the
 * thread (and core) that runs the stream's copies, so that both are
 * measured on the same hardware (the cores of a shared VM differ). */
static double memcpy_sample(rig *r, size_t size, int n) {
  memcpy_job j = {.r = r, .size = size, .n = n};
  if (gs_stream_host_func(r->s, memcpy_on_stream, &j) || gs_stream_synchronize(r->s))
    die("memcpy sample");
  return j.gbps;
}

typedef enum { H2D, D2H, D2D, H2D_PAGEABLE, D2H_PAGEABLE, DIRECTIONS } direction;

/* One sample of `n` copies queued between two events; GB/s. */
static double stream_sample(rig *r, direction dir, size_t size, int n) {
  if (gs_event_record(r->e0, r->s))
    die("event_record");
  for (int i = 0; i < n; i++) {
    int rc;
    switch (dir) {
    case H2D: rc = gs_stream_copy_h2d(r->s, r->a, 0, r->pin, size); break;
    case D2H: rc = gs_stream_copy_d2h(r->s, r->pin, r->a, 0, size); break;
    case D2D: rc = gs_stream_copy_d2d(r->s, r->b, 0, r->a, 0, size); break;
    case H2D_PAGEABLE: rc = gs_stream_copy_h2d(r->s, r->a, 0, r->pageable, size); break;
    default: rc = gs_stream_copy_d2h(r->s, r->pageable, r->a, 0, size); break;
    }
    if (rc)
      die("copy");
  }
  uint64_t ns = 0;
  if (gs_event_record(r->e1, r->s) || gs_event_synchronize(r->e1) ||
      gs_event_elapsed_ns(r->e0, r->e1, &ns))
    die("timing");
  return (double)size * n / (double)(ns ? ns : 1);
}

static const char *human_size(size_t bytes, char *buf, size_t cap) {
  if (bytes >= (size_t)1 << 20)
    snprintf(buf, cap, "%zu MiB", bytes >> 20);
  else
    snprintf(buf, cap, "%zu KiB", bytes >> 10);
  return buf;
}

/* Worst fraction of memcpy among large copies, for the goal. A copy is
 * large when source and destination together exceed the last-level cache:
 * below that, the figures measure the cache and swing with other tenants. */
static double worst_large_fraction = 1e9;
static size_t large_from;

static void rig_open(rig *r, gs_device_t *dev, bool pageable) {
  memset(r, 0, sizeof *r);
  r->dev = dev;
  gs_pool_t *pool = gs_device_pool(dev, GS_MEM_DEVICE);
  if (gs_stream_create(dev, &r->s) || gs_event_create(dev, &r->e0) ||
      gs_event_create(dev, &r->e1) || gs_pool_alloc(pool, max_size, r->s, &r->a) ||
      gs_pool_alloc(pool, max_size, r->s, &r->b) ||
      gs_pool_alloc(gs_device_pool(dev, GS_MEM_PINNED_HOST), max_size, NULL, &r->pinned))
    die("setup");
  r->pin = gs_buffer_host_ptr(r->pinned);
  r->pageable = pageable ? malloc(max_size) : NULL;
  r->plain_src = malloc(max_size);
  r->plain_dst = malloc(max_size);
  if (!r->plain_src || !r->plain_dst || (pageable && !r->pageable)) {
    fprintf(stderr, "gs-bench-copy: out of memory for %zu-byte buffers\n", max_size);
    exit(1);
  }
  /* Touch everything once so that no sample pays for first-use page faults. */
  memset(r->pin, 5, max_size);
  memset(r->plain_src, 1, max_size);
  memset(r->plain_dst, 2, max_size);
  if (r->pageable)
    memset(r->pageable, 6, max_size);
  if (gs_stream_memset(r->s, r->a, 0, 3, max_size) || gs_stream_memset(r->s, r->b, 0, 4, max_size) ||
      gs_stream_synchronize(r->s))
    die("memset");
}

static void rig_close(rig *r) {
  gs_stream_synchronize(r->s);
  gs_buffer_free(r->a, r->s);
  gs_buffer_free(r->b, r->s);
  gs_buffer_free(r->pinned, NULL);
  gs_event_destroy(r->e0);
  gs_event_destroy(r->e1);
  gs_stream_destroy(r->s);
  free(r->pageable);
  free(r->plain_src);
  free(r->plain_dst);
}

static void bench_device(gs_device_t *dev) {
  const gs_device_info *info = gs_device_get_info(dev);
  bool pageable = gs_device_get_caps(dev)->pinned_faster_than_pageable;
  int ndir = pageable ? DIRECTIONS : D2D + 1;
  printf("\n%s (%s, %s): bandwidth in GB/s, and as a fraction of memcpy\n", info->id,
         info->backend, info->name);
  if (!pageable)
    printf("(this backend moves pinned and pageable host memory the same way: pinned shown)\n");
  printf("%9s %8s | %15s %15s %15s", "size", "memcpy", "H2D pinned", "D2H pinned", "D2D");
  if (pageable)
    printf(" %15s %15s", "H2D pageable", "D2H pageable");
  printf("\n");

  rig r;
  rig_open(&r, dev, pageable);
  for (size_t size = 4096; size <= max_size; size *= 4) {
    int n = copies_for(size);
    double base[16], v[DIRECTIONS][16], med[DIRECTIONS];
    /* Warm-up, then samples interleaved so that the machine's drift (other
     * tenants, frequency) hits memcpy and the streams alike. */
    memcpy_sample(&r, size, 3);
    for (int d = 0; d < ndir; d++)
      stream_sample(&r, (direction)d, size, 3);
    for (int s = 0; s < samples; s++) {
      base[s] = memcpy_sample(&r, size, n);
      for (int d = 0; d < ndir; d++)
        v[d][s] = stream_sample(&r, (direction)d, size, n);
    }
    double b = median(base, samples);
    char sz[32];
    printf("%9s %8.2f |", human_size(size, sz, sizeof sz), b);
    for (int d = 0; d < ndir; d++) {
      med[d] = median(v[d], samples);
      printf(" %7.2f (%4.0f%%)", med[d], 100 * med[d] / b);
      if (size >= large_from && med[d] / b < worst_large_fraction)
        worst_large_fraction = med[d] / b;
    }
    printf("\n");
  }
  rig_close(&r);
}

/* ---- allocation cost --------------------------------------------------------- */

enum { ALLOC_ROUNDS = 200000 };

static double ns_per_malloc_free(size_t size) {
  uint64_t t0 = gs_now_ns();
  for (int i = 0; i < ALLOC_ROUNDS; i++) {
    void *p = malloc(size);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
  return (double)(gs_now_ns() - t0) / ALLOC_ROUNDS;
}

static double ns_per_pool_alloc_free(gs_pool_t *pool, size_t size, gs_stream_t *s) {
  gs_buffer_t *b;
  if (gs_pool_alloc(pool, size, s, &b) == 0) /* the first one fills the cache */
    gs_buffer_free(b, s);
  uint64_t t0 = gs_now_ns();
  for (int i = 0; i < ALLOC_ROUNDS; i++) {
    if (gs_pool_alloc(pool, size, s, &b) != 0) {
      fprintf(stderr, "gs-bench-copy: %s\n", gs_error_detail());
      exit(1);
    }
    gs_buffer_free(b, s);
  }
  return (double)(gs_now_ns() - t0) / ALLOC_ROUNDS;
}

/* glibc serves 1 MiB with mmap until a free raises its threshold and the
 * heap grows to hold such blocks. A child process that fixes the threshold
 * at its documented default (128 KiB) before any large malloc measures the
 * mmap path; the parent's heap is untouched by it. */
static double malloc_mmap_ns(size_t size) {
  int fd[2];
  if (pipe(fd) != 0)
    return 0;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
    malloc_trim(0);
    double v[16];
    for (int k = 0; k < samples; k++)
      v[k] = ns_per_malloc_free(size);
    double m = median(v, samples);
    ssize_t w = write(fd[1], &m, sizeof m);
    _exit(w == (ssize_t)sizeof m ? 0 : 1);
  }
  close(fd[1]);
  double m = 0;
  if (pid < 0 || read(fd[0], &m, sizeof m) != (ssize_t)sizeof m)
    m = 0;
  close(fd[0]);
  if (pid > 0)
    waitpid(pid, NULL, 0);
  return m;
}

static void bench_alloc(gs_device_t *dev) {
  const size_t size = (size_t)1 << 20;
  gs_stream_t *s;
  if (gs_stream_create(dev, &s)) {
    fprintf(stderr, "gs-bench-copy: %s\n", gs_error_detail());
    exit(1);
  }
  double v_pool[16], v_pool_s[16], v_adaptive[16];
  for (int k = 0; k < samples; k++) {
    v_pool[k] = ns_per_pool_alloc_free(gs_device_pool(dev, GS_MEM_DEVICE), size, NULL);
    v_pool_s[k] = ns_per_pool_alloc_free(gs_device_pool(dev, GS_MEM_DEVICE), size, s);
    v_adaptive[k] = ns_per_malloc_free(size);
  }
  double pool = median(v_pool, samples), pool_s = median(v_pool_s, samples);
  double adaptive = median(v_adaptive, samples);
  double mm = malloc_mmap_ns(size);
  gs_stream_destroy(s);

  printf("\n%s: allocate+free of 1 MiB, ns per pair (median of %d runs of %d)\n",
         gs_device_get_info(dev)->id, samples, ALLOC_ROUNDS);
  printf("  pool, no stream              %8.1f\n", pool);
  printf("  pool, stream-ordered         %8.1f\n", pool_s);
  printf("  malloc+free, mmap threshold  %8.1f   (pool = %.3f of it; goal <= 0.1)\n", mm, pool / mm);
  printf("  malloc+free, glibc adaptive  %8.1f   (pool = %.3f of it)\n", adaptive,
         pool / adaptive);
}

/* The size of the largest cache, from sysfs (glibc's sysconf figure is wrong
 * on some virtual machines); 32 MiB when the kernel does not say. */
static long last_level_cache_bytes(void) {
  long best = 0;
  for (int i = 0; i < 8; i++) {
    char path[96], text[32];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    if (fgets(text, sizeof text, f)) {
      char unit = 'K';
      long v = 0;
      if (sscanf(text, "%ld%c", &v, &unit) >= 1) {
        v *= unit == 'M' ? 1024 * 1024 : unit == 'K' ? 1024 : 1;
        if (v > best)
          best = v;
      }
    }
    fclose(f);
  }
  return best > 0 ? best : 32l << 20;
}

int main(int argc, char **argv) {
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--max-size") == 0 && i + 1 < argc)
      max_size = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc)
      samples = atoi(argv[++i]);
    else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr, "usage: gs-bench-copy [--max-size BYTES] [--samples N] [--backend NAME]\n");
      return 2;
    }
  }
  if (samples < 1 || samples > 15 || max_size < 4096) {
    fprintf(stderr, "gs-bench-copy: --samples must be 1..15 and --max-size at least 4096\n");
    return 2;
  }
  if (gs_hal_init() != 0) {
    fprintf(stderr, "gs-bench-copy: %s\n", gs_error_detail());
    return 1;
  }
  long l3 = last_level_cache_bytes();
  large_from = (size_t)1 << 20;
  while (2 * large_from <= (size_t)l3) /* source and destination exceed it */
    large_from *= 2;
  printf("gs-bench-copy: median of %d samples; sizes 4 KiB .. %zu MiB; last-level cache %ld KiB\n",
         samples, max_size >> 20, l3 > 0 ? l3 / 1024 : -1);
  for (int i = 0; i < gs_hal_device_count(); i++) {
    gs_device_t *d = gs_hal_device(i);
    if (only && strcmp(gs_device_get_info(d)->backend, only) != 0)
      continue;
    bench_device(d);
    bench_alloc(d);
  }
  if (worst_large_fraction < 1e9)
    printf("\nlarge copies (>= %zu MiB, past the cache): worst %.0f%% of memcpy (goal >= 90%%)\n",
           large_from >> 20, 100 * worst_large_fraction);
  gs_hal_shutdown();
  return 0;
}

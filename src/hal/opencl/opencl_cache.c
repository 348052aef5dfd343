/* opencl_cache.c - the kernels' programs, built from source once per device
 * and driver and kept on disk as binaries, so that later starts skip the
 * OpenCL compiler (hundreds of milliseconds per device on PoCL). The cache
 * is GPUSRV_CACHE_DIR, else $XDG_CACHE_HOME/gpusrv, else ~/.cache/gpusrv;
 * an entry is named by a hash of the device, its driver, the platform and
 * the source, so a changed driver or kernel source builds anew. A cache that
 * cannot be read or written is only slower; a corrupt entry is rebuilt.
 * Entries of older sources would pile up with each upgrade: a read marks
 * an entry used (its mtime), and a write keeps the GS_OCL_CACHE_KEEP most
 * recently used. */
#include "hal/opencl/opencl_internal.h"

#include "base/fileutil.h"
#include "base/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Entries kept: two programs (float32, float64) per kind of device, for
 * a machine with a few kinds, or a few drivers side by side. */
#define GS_OCL_CACHE_KEEP 16

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* The entry's path for this device and source; false when there is no cache directory. */
static bool entry_path(cl_device_id id, const char *source, char *out, size_t cap) {
  char dir[1024];
  const char *env = getenv("GPUSRV_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
             *home = getenv("HOME");
  if (env && *env)
    snprintf(dir, sizeof dir, "%s", env);
  else if (xdg && *xdg)
    snprintf(dir, sizeof dir, "%s/gpusrv", xdg);
  else if (home && *home)
    snprintf(dir, sizeof dir, "%s/.cache/gpusrv", home);
  else
    return false;
  char name[256] = "", driver[256] = "", platform_version[256] = "";
  cl_platform_id platform = NULL;
  clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  clGetDeviceInfo(id, CL_DRIVER_VERSION, sizeof driver - 1, driver, NULL);
  clGetDeviceInfo(id, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
  if (platform)
    clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof platform_version - 1,
                      platform_version, NULL);
  uint64_t h = 14695981039346656037ull;
  h = fnv1a(h, name, strlen(name) + 1);
  h = fnv1a(h, driver, strlen(driver) + 1);
  h = fnv1a(h, platform_version, strlen(platform_version) + 1);
  h = fnv1a(h, source, strlen(source));
  snprintf(out, cap, "%s/opencl-%016llx.bin", dir, (unsigned long long)h);
  return true;
}

static cl_program from_binary(ocl_device *d, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  unsigned char *bin = NULL;
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (size > 0 && fseek(f, 0, SEEK_SET) == 0 && (bin = malloc((size_t)size)) &&
      fread(bin, 1, (size_t)size, f) != (size_t)size) {
    free(bin);
    bin = NULL;
  }
  fclose(f);
  if (!bin)
    return NULL;
  size_t len = (size_t)size;
  const unsigned char *bins[] = {bin};
  cl_int status = CL_SUCCESS, err;
  cl_program p = clCreateProgramWithBinary(d->ctx, 1, &d->id, &len, bins, &status, &err);
  free(bin);
  if (p && (status != CL_SUCCESS || err != CL_SUCCESS ||
            clBuildProgram(p, 1, &d->id, "-cl-std=CL1.2", NULL, NULL) != CL_SUCCESS)) {
    clReleaseProgram(p);
    p = NULL;
  }
  return p;
}

typedef struct cache_entry {
  struct timespec used;
  char name[64];
} cache_entry;

static int older_first(const void *a, const void *b) {
  const struct timespec *x = &((const cache_entry *)a)->used, *y = &((const cache_entry *)b)->used;
  if (x->tv_sec != y->tv_sec)
    return x->tv_sec < y->tv_sec ? -1 : 1;
  return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

/* Removes all but the GS_OCL_CACHE_KEEP most recently used entries of dir. */
static void prune(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  cache_entry *list = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    struct stat st;
    if (strncmp(e->d_name, "opencl-", 7) != 0 || len < 11 || len >= sizeof list->name ||
        strcmp(e->d_name + len - 4, ".bin") != 0 ||
        fstatat(dirfd(d), e->d_name, &st, 0) != 0)
      continue;
    if (n == cap) {
      cache_entry *grown = realloc(list, (cap = cap ? 2 * cap : 32) * sizeof *list);
      if (!grown)
        break;
      list = grown;
    }
    list[n].used = st.st_mtim;
    memcpy(list[n++].name, e->d_name, len + 1);
  }
  if (n > GS_OCL_CACHE_KEEP) {
    qsort(list, n, sizeof *list, older_first);
    for (size_t i = 0; i < n - GS_OCL_CACHE_KEEP; i++)
      if (unlinkat(dirfd(d), list[i].name, 0) == 0)
        GS_LOGD("opencl", "cache: removed %s/%s, the least recently used", dir, list[i].name);
  }
  closedir(d);
  free(list);
}

static void save_binary(cl_program p, const char *path) {
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
      size == 0)
    return;
  unsigned char *bin = malloc(size);
  unsigned char *bins[] = {bin};
  if (!bin || clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) != CL_SUCCESS) {
    free(bin);
    return;
  }
  char dir[1100], tmp[1200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = gs_mkdir_p(dir) == 0 ? fopen(tmp, "wb") : NULL;
  bool ok = f && fwrite(bin, 1, size, f) == size;
  if (f)
    ok = fclose(f) == 0 && ok;
  /* Whole or not at all: another process may be reading the entry. */
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    GS_LOGD("opencl", "cannot cache the kernels' binary in %s", path);
  } else {
    prune(dir);
  }
  free(bin);
}

int gs__ocl_build_program(ocl_device *d, const char *dev_name, const char *source,
                          cl_program *out) {
  char path[1200];
  bool cached = entry_path(d->id, source, path, sizeof path);
  if (cached && (*out = from_binary(d, path))) {
    GS_LOGD("opencl", "%s: kernels from the cache %s", dev_name, path);
    utimensat(AT_FDCWD, path, NULL, 0); /* used now: pruned last */
    return GS_OK;
  }
  cl_int err;
  cl_program p = clCreateProgramWithSource(d->ctx, 1, &source, NULL, &err);
  if (!p)
    return gs__ocl_fail(err, "clCreateProgramWithSource");
  err = clBuildProgram(p, 1, &d->id, "-cl-std=CL1.2", NULL, NULL);
  if (err != CL_SUCCESS) {
    /* The log's beginning: its first errors (it may run to many kilobytes). */
    size_t size = 0;
    clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
    char *log = calloc(size + 1, 1);
    if (log && size)
      clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, size, log, NULL);
    clReleaseProgram(p);
    int rc = gs_error(GS_EDEVICE, "%s: the kernels do not build: %.1500s", dev_name,
                      log ? log : "(no log: out of memory)");
    free(log);
    return rc;
  }
  if (cached)
    save_binary(p, path);
  *out = p;
  return GS_OK;
}

/* plugin.c - finds and loads backend plugins (gpusrv-<name>.so), checks their
 * API version, and records why any plugin was skipped. */
#include "hal/hal_internal.h"

#include "base/log.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLUGIN_PREFIX "gpusrv-"
#define PLUGIN_SUFFIX ".so"

/* The backend name in a plugin file name, "gpusrv-cuda.so" -> "cuda". */
static bool plugin_name(const char *file, char *name, size_t cap) {
  size_t len = strlen(file), pre = strlen(PLUGIN_PREFIX), suf = strlen(PLUGIN_SUFFIX);
  if (len <= pre + suf || strncmp(file, PLUGIN_PREFIX, pre) != 0 ||
      strcmp(file + len - suf, PLUGIN_SUFFIX) != 0 || len - pre - suf >= cap)
    return false;
  memcpy(name, file + pre, len - pre - suf);
  name[len - pre - suf] = '\0';
  return true;
}

static void load_one(const char *dir, const char *file) {
  char name[32], path[PATH_MAX];
  if (!plugin_name(file, name, sizeof name))
    return;
  if (gs_hal_backend_by_name(name))
    return; /* found earlier on the path: the first one wins */
  if (!gs__hal_backend_wanted(name)) {
    gs__hal_skip(name, "not listed in GPUSRV_BACKENDS");
    return;
  }
  snprintf(path, sizeof path, "%s/%s", dir, file);
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    gs__hal_skip(name, "cannot load %s: %s", path, dlerror());
    return;
  }
  const uint32_t *version = dlsym(dl, GS_PLUGIN_VERSION_SYMBOL);
  if (!version) {
    gs__hal_skip(name, "%s exports no %s: not a gpusrv plugin", path, GS_PLUGIN_VERSION_SYMBOL);
    dlclose(dl);
    return;
  }
  if (*version != GS_HAL_API_VERSION) {
    gs__hal_skip(name, "%s was built for HAL API version %u, this gpusrv has version %u", path,
                 *version, GS_HAL_API_VERSION);
    dlclose(dl);
    return;
  }
  gs_plugin_init_fn init;
  *(void **)&init = dlsym(dl, GS_PLUGIN_INIT_SYMBOL);
  if (!init) {
    gs__hal_skip(name, "%s exports no %s", path, GS_PLUGIN_INIT_SYMBOL);
    dlclose(dl);
    return;
  }
  const gs_backend_iface *iface = NULL;
  gs_error_clear();
  int rc = init(&iface);
  if (rc < 0 || !iface) {
    gs__hal_skip(name, "%s", rc < 0 ? gs_error_detail() : "its init returned no interface");
    dlclose(dl);
    return;
  }
  if (!iface->name || strcmp(iface->name, name) != 0) {
    gs__hal_skip(name, "%s calls its backend \"%s\", not \"%s\"", path,
                 iface->name ? iface->name : "(null)", name);
    dlclose(dl);
    return;
  }
  if (gs__hal_register_backend(iface, dl) < 0)
    dlclose(dl); /* the reason was recorded by the registration */
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Loads the plugins of one directory, in name order so that runs agree. */
static void load_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  char *files[64];
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) && n < 64;)
    if (strncmp(de->d_name, PLUGIN_PREFIX, strlen(PLUGIN_PREFIX)) == 0)
      if ((files[n] = strdup(de->d_name)))
        n++;
  closedir(d);
  qsort(files, (size_t)n, sizeof files[0], compare_names);
  for (int i = 0; i < n; i++) {
    load_one(dir, files[i]);
    free(files[i]);
  }
}

void gs__plugins_load(void) {
  const char *env = getenv("GPUSRV_PLUGIN_PATH");
  if (env && *env) {
    char *copy = strdup(env), *save = NULL;
    for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir; dir = strtok_r(NULL, ":", &save))
      load_dir(dir);
    free(copy);
    return;
  }
  /* Beside the executable (the build tree), then ../lib/gpusrv (an install). */
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash)
    return;
  *slash = '\0';
  load_dir(exe);
  char lib[PATH_MAX + 32];
  snprintf(lib, sizeof lib, "%s/../lib/gpusrv", exe);
  load_dir(lib);
}

void gs__plugin_unload(void *dl) {
  if (dl)
    dlclose(dl);
}

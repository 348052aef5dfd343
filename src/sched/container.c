/* container.c - what the front desk and the job supervisor need to run a
 * job in a container with podman (container.h): the allow-list, the
 * request's checks, podman run as the tenant, and podman's command line. */
#include "sched/container.h"

#include "base/error.h"
#include "base/run.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MOUNTS 32
#define MAX_IMAGE_LEN 255

bool gs_image_allowed(const char *patterns, const char *image) {
  char pattern[512];
  for (const char *p = patterns; p && *p;) {
    size_t n = strcspn(p, ",");
    if (n > 0 && n < sizeof pattern) {
      memcpy(pattern, p, n);
      pattern[n] = '\0';
      char *s = pattern, *e = pattern + n;
      while (*s == ' ')
        s++;
      while (e > s && e[-1] == ' ')
        *--e = '\0';
      if (*s && fnmatch(s, image, 0) == 0)
        return true;
    }
    p += n;
    if (*p == ',')
      p++;
  }
  return false;
}

/* An image reference as podman takes it: registry/name:tag or @digest,
 * nothing an option parser or a shell could take for something else. */
static bool image_name_ok(const char *image) {
  size_t n = strlen(image);
  if (n == 0 || n > MAX_IMAGE_LEN || image[0] == '-')
    return false;
  return strspn(image, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:@") ==
         n;
}

/* An absolute path in one spelling only: no "." or ".." parts, no "//",
 * no trailing '/', and no ':' or ',' (podman's separators in -v). */
static bool mount_path_ok(const char *p, size_t n) {
  if (n == 0 || p[0] != '/' || n > 1024 || (n > 1 && p[n - 1] == '/'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (p[i] == ':' || p[i] == ',' || p[i] == '\0' || p[i] == '\n' ||
        (p[i] == '/' && i + 1 < n && p[i + 1] == '/'))
      return false;
  for (size_t i = 0; i < n;) {
    while (i < n && p[i] == '/')
      i++;
    size_t start = i;
    while (i < n && p[i] != '/')
      i++;
    size_t len = i - start;
    if ((len == 1 && p[start] == '.') || (len == 2 && p[start] == '.' && p[start + 1] == '.'))
      return false;
  }
  return true;
}

/* Whether `p` (n bytes) is `dir` or below it. */
static bool under(const char *p, size_t n, const char *dir) {
  size_t d = strlen(dir);
  return n >= d && strncmp(p, dir, d) == 0 && (n == d || p[d] == '/');
}

/* "SRC:DST[:ro|:rw]" into its canonical form "SRC:DST:ro|rw". */
static json_t *mount_of(const char *m) {
  const char *c1 = strchr(m, ':');
  const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  const char *mode = c2 ? c2 + 1 : "rw";
  size_t dst_len = c1 ? (c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1)) : 0;
  if (!c1 || !mount_path_ok(m, (size_t)(c1 - m)) || !mount_path_ok(c1 + 1, dst_len) ||
      (strcmp(mode, "ro") != 0 && strcmp(mode, "rw") != 0)) {
    gs_error(GS_EINVAL, "mount '%.300s' is not SRC:DST[:ro|:rw] with absolute paths (no '.', "
             "'..', '//', trailing '/', ':' or ',' in them)", m);
    return NULL;
  }
  size_t src_len = (size_t)(c1 - m);
  if (under(m, src_len, "/dev") || under(m, src_len, "/proc") || under(m, src_len, "/sys")) {
    gs_error(GS_EPERM, "mount '%.300s': /dev, /proc and /sys are not mounted into containers "
             "(a job's devices come through CDI)", m);
    return NULL;
  }
  if (dst_len == 1 || (dst_len == 4 && strncmp(c1 + 1, "/job", 4) == 0)) {
    gs_error(GS_EINVAL, "mount '%.300s': its destination may not be / or /job (the job's "
             "directory)", m);
    return NULL;
  }
  char canon[2200];
  snprintf(canon, sizeof canon, "%.*s:%.*s:%s", (int)(c1 - m), m, (int)dst_len, c1 + 1, mode);
  return json_string(canon);
}

json_t *gs_container_from_request(const gs_container_policy *policy, const gs_job_request *req) {
  const char *patterns = policy->allowed_images, *image = req->image;
  const char *const *mounts = req->mounts;
  const char *network = req->network && *req->network ? req->network : "none";
  if (!patterns || !*patterns) {
    gs_error(GS_EINVAL, "this server runs no containers: its configuration allows no images "
             "(allowed-images)");
    return NULL;
  }
  if (!image_name_ok(image)) {
    gs_error(GS_EINVAL, "'%.300s' is not an image name (letters, digits and ._-/:@, at most %d)",
             image, MAX_IMAGE_LEN);
    return NULL;
  }
  if (!gs_image_allowed(patterns, image)) {
    gs_error(GS_EPERM, "image '%s' is not among the server's allowed images", image);
    return NULL;
  }
  if (strcmp(network, "none") != 0 && strcmp(network, "host") != 0) {
    gs_error(GS_EINVAL, "network is 'none' or 'host', not '%.100s'", network);
    return NULL;
  }
  if (strcmp(network, "host") == 0 && !policy->host_network) {
    gs_error(GS_EPERM, "this server gives containers no host network "
             "(container-host-network)");
    return NULL;
  }
  json_t *list = json_array();
  size_t n = 0;
  for (; list && mounts && mounts[n]; n++) {
    json_t *m = n < MAX_MOUNTS ? mount_of(mounts[n]) : NULL;
    if (!m) {
      if (n >= MAX_MOUNTS)
        gs_error(GS_EINVAL, "more than %d mounts", MAX_MOUNTS);
      json_decref(list);
      return NULL;
    }
    json_array_append_new(list, m);
  }
  json_t *c = list ? json_pack("{s:s, s:o, s:s, s:b, s:b}", "image", image, "mounts", list,
                               "network", network, "writable_root", req->writable_root, "pull",
                               policy->pull)
                    : NULL;
  if (!c)
    gs_error(GS_ENOMEM, "out of memory for the job's container");
  return c;
}

void gs_strings_free(char **list) {
  for (char **p = list; p && *p; p++)
    free(*p);
  free(list);
}

/* A NULL-ended list grown one malloc'd string at a time; *failed once any
 * allocation failed (then the list is freed at the end). */
typedef struct strings {
  char **v;
  size_t n, cap;
  bool failed;
} strings;

static void add(strings *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(strings *s, const char *fmt, ...) {
  if (s->failed)
    return;
  if (s->n + 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 32;
    char **v = realloc(s->v, cap * sizeof *v);
    if (!v) {
      s->failed = true;
      return;
    }
    s->v = v;
    s->cap = cap;
  }
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&s->v[s->n], fmt, ap);
  va_end(ap);
  if (rc < 0) {
    s->failed = true;
    return;
  }
  s->v[++s->n] = NULL;
}

static char **done(strings *s) {
  if (s->failed || !s->v) {
    gs_strings_free(s->v);
    return NULL;
  }
  return s->v;
}

char **gs_podman_env(const gs_container_user *u) {
  strings s = {0};
  add(&s, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  add(&s, "HOME=%s", u->home);
  add(&s, "USER=%s", u->name);
  add(&s, "LOGNAME=%s", u->name);
  return done(&s);
}

/* cgroup v2 alone (no v1 hierarchies): podman must be told to make no
 * cgroup (which runc cannot do, crun can); with v1, rootless podman makes
 * none, and crun refuses hybrid hierarchies, so runc runs it. */
static bool cgroup_v2_only(void) {
  struct stat sb;
  return stat("/sys/fs/cgroup/cgroup.controllers", &sb) == 0;
}

char **gs_container_argv(const json_t *container, const char *name, const char *work_dir,
                         const char *workdir_inside, const char *env_file,
                         const json_t *cdi_devices, const json_t *job_argv) {
  strings s = {0};
  add(&s, "podman");
  /* Not systemd's: a rootless podman that may reach the user's systemd
   * moves itself into a scope of the user's slice, out of the job's cgroup. */
  add(&s, "--cgroup-manager=cgroupfs");
  add(&s, "--runtime");
  add(&s, cgroup_v2_only() ? "crun" : "runc");
  add(&s, "run");
  add(&s, "--rm");
  add(&s, "--name=%s", name);
  if (cgroup_v2_only())
    add(&s, "--cgroups=disabled");
  const char *network = json_string_value(json_object_get(container, "network"));
  add(&s, "--network=%s", network && strcmp(network, "host") == 0 ? "host" : "none");
  if (!json_is_true(json_object_get(container, "writable_root")))
    add(&s, "--read-only");
  add(&s, "--security-opt=no-new-privileges");
  add(&s, json_is_true(json_object_get(container, "pull")) ? "--pull=missing" : "--pull=never");
  add(&s, "--log-driver=passthrough"); /* its output goes to the supervisor's pipes */
  add(&s, "--volume=%s:/job:rw", work_dir);
  add(&s, "--workdir=%s", workdir_inside);
  add(&s, "--env-file=%s", env_file);
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(container, "mounts"), i, m)
    add(&s, "--volume=%s", json_string_value(m));
  json_array_foreach(cdi_devices, i, m)
    add(&s, "--device=%s", json_string_value(m));
  add(&s, "%s", json_string_value(json_object_get(container, "image")));
  json_array_foreach(job_argv, i, m)
    add(&s, "%s", json_string_value(m));
  return done(&s);
}

int gs_podman_run_as(const gs_container_user *u, const char *const *args, char *out, size_t cap,
                     bool errors_too, double timeout_s) {
  strings argv = {0};
  if (geteuid() == 0 && u->uid != 0) { /* root: become the tenant first */
    /* By its path: the supervisor runs with no PATH, and runuser lives in sbin. */
    const char *runuser = access("/usr/sbin/runuser", X_OK) == 0 ? "/usr/sbin/runuser"
                          : access("/sbin/runuser", X_OK) == 0   ? "/sbin/runuser"
                                                                 : "runuser";
    add(&argv, "%s", runuser);
    add(&argv, "-u");
    add(&argv, "%s", u->name);
    add(&argv, "--");
  }
  add(&argv, "podman");
  for (size_t i = 0; args[i]; i++)
    add(&argv, "%s", args[i]);
  char **av = done(&argv), **env = gs_podman_env(u);
  if (!av || !env) {
    gs_strings_free(av);
    gs_strings_free(env);
    return gs_error(GS_ENOMEM, "cannot start podman: out of memory");
  }
  gs_run_options o = {.envp = env, .errors_too = errors_too, .timeout_s = timeout_s};
  int rc = gs_run_capture(av, &o, out, cap, NULL);
  gs_strings_free(av);
  gs_strings_free(env);
  if (rc == GS_ETIMEDOUT)
    return gs_error(GS_ETIMEDOUT, "podman took longer than %.0f s", timeout_s);
  if (rc == 127)
    return gs_error(GS_ENOENT, "podman is not installed (or runuser is missing)");
  return rc;
}

int gs_container_image_present(const gs_container_user *u, const char *image) {
  const char *args[] = {"image", "exists", image, NULL};
  int rc = gs_podman_run_as(u, args, NULL, 0, false, 30);
  if (rc < 0) {
    char why[300]; /* gs_error writes where gs_error_detail reads */
    snprintf(why, sizeof why, "%s", gs_error_detail());
    return gs_error(GS_EIO, "cannot look for image '%s': %s", image, why);
  }
  if (rc != 0)
    return gs_error(GS_EINVAL, "image '%s' is not among user %s's local images (podman "
                    "images); gpusrv pulls none", image, u->name);
  return GS_OK;
}

static bool listed(const gs_image_info *list, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(list[i].name, name) == 0)
      return true;
  return false;
}

/* One entry of `podman images --format json` into the allowed ones of
 * *list: an image with several names comes once per name, each entry
 * listing them all. */
static int add_images(json_t *img, const char *patterns, gs_image_info **list, int *n) {
  size_t i;
  json_t *name;
  json_array_foreach(json_object_get(img, "Names"), i, name) {
    const char *s = json_string_value(name);
    if (!s || !gs_image_allowed(patterns, s) || listed(*list, *n, s))
      continue;
    gs_image_info *grown = realloc(*list, (size_t)(*n + 1) * sizeof **list);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory listing images");
    *list = grown;
    gs_image_info *e = &grown[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", s);
    snprintf(e->id, sizeof e->id, "%s", json_string_value(json_object_get(img, "Id")) ?: "");
    json_int_t size = json_integer_value(json_object_get(img, "Size"));
    e->size_bytes = size > 0 ? (uint64_t)size : 0;
    e->created = (double)json_integer_value(json_object_get(img, "Created"));
  }
  return GS_OK;
}

int gs_container_images(const gs_container_user *u, const char *patterns, gs_image_info **out,
                        int *n) {
  *out = NULL;
  *n = 0;
  size_t cap = 4 << 20;
  char *text = malloc(cap);
  if (!text)
    return gs_error(GS_ENOMEM, "out of memory listing images");
  const char *args[] = {"images", "--format", "json", NULL};
  int rc = gs_podman_run_as(u, args, text, cap, false, 30);
  json_t *all = rc == 0 ? json_loads(text, 0, NULL) : NULL;
  free(text);
  if (rc != 0 || !json_is_array(all)) {
    char why[300];
    snprintf(why, sizeof why, "%s", rc < 0 ? gs_error_detail() : "podman images failed");
    json_decref(all);
    return gs_error(GS_EIO, "cannot list user %s's images: %s", u->name, why);
  }
  size_t i;
  json_t *img;
  json_array_foreach(all, i, img) {
    if (rc == 0)
      rc = add_images(img, patterns, out, n);
  }
  json_decref(all);
  if (rc < 0) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return rc;
}

static bool in_list(const char *list, const char *id) {
  size_t n = strlen(id);
  for (const char *p = list; p && *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, id, n) == 0)
      return true;
    p += len;
    if (*p == ',')
      p++;
  }
  return false;
}

json_t *gs_cdi_devices(const char *cdi_spec, const char *devices) {
  json_t *out = json_array();
  json_t *spec = devices && *devices && cdi_spec && *cdi_spec
                     ? json_load_file(cdi_spec, 0, NULL) : NULL;
  const char *kind = json_string_value(json_object_get(spec, "kind"));
  size_t i;
  json_t *d;
  json_array_foreach(json_object_get(spec, "devices"), i, d) {
    const char *name = json_string_value(json_object_get(d, "name"));
    if (out && kind && name && in_list(devices, name)) {
      char full[400];
      snprintf(full, sizeof full, "%s=%s", kind, name);
      json_array_append_new(out, json_string(full));
    }
  }
  json_decref(spec);
  return out;
}

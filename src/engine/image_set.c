/* image_set.c - the list of images of a batch run (image_set.h). */
#include "engine/image_set.h"

#include "base/error.h"

#include <errno.h>
#include <fts.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

struct gs_image_set {
  char **paths;
  int64_t n, cap;
};

void gs_image_set_close(gs_image_set *set) {
  if (!set)
    return;
  for (int64_t i = 0; i < set->n; i++)
    free(set->paths[i]);
  free(set->paths);
  free(set);
}

int64_t gs_image_set_count(const gs_image_set *set) { return set->n; }
const char *gs_image_set_path(const gs_image_set *set, int64_t i) { return set->paths[i]; }

static bool ends_with(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len >= n && strncasecmp(s + len - n, suffix, n) == 0;
}

static bool is_image_name(const char *s, size_t len) {
  return ends_with(s, len, ".jpg") || ends_with(s, len, ".jpeg") || ends_with(s, len, ".png");
}

/* `name` (len bytes), relative to `dir` unless absolute. */
static int add(gs_image_set *set, const char *dir, const char *name, size_t len) {
  if (set->n == set->cap) {
    int64_t cap = set->cap ? 2 * set->cap : 256;
    char **grown = realloc(set->paths, (size_t)cap * sizeof *grown);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory listing images");
    set->paths = grown;
    set->cap = cap;
  }
  char path[PATH_MAX];
  int n = name[0] == '/' || !dir ? snprintf(path, sizeof path, "%.*s", (int)len, name)
                                 : snprintf(path, sizeof path, "%s/%.*s", dir, (int)len, name);
  if (n < 0 || (size_t)n >= sizeof path)
    return gs_error(GS_EINVAL, "an image path of over %d bytes", PATH_MAX);
  if (!(set->paths[set->n] = strdup(path)))
    return gs_error(GS_ENOMEM, "out of memory listing images");
  set->n++;
  return GS_OK;
}

static int by_name(const FTSENT **a, const FTSENT **b) {
  return strcmp((*a)->fts_name, (*b)->fts_name);
}

/* The directory's images, depth first in name order; *npy whether it also
 * holds .npy files (then it is a data set of numbers). Links to directories
 * are not followed (no cycles); links named as images are taken. */
static int list_dir(gs_image_set *set, const char *dir, bool *npy) {
  char *roots[] = {(char *)dir, NULL};
  FTS *fts = fts_open(roots, FTS_PHYSICAL | FTS_COMFOLLOW | FTS_NOCHDIR, by_name);
  if (!fts)
    return gs_error(GS_EIO, "cannot list %s: %s", dir, strerror(errno));
  int rc = GS_OK;
  FTSENT *e;
  while (rc == 0 && (e = fts_read(fts))) {
    if (e->fts_info == FTS_DNR || e->fts_info == FTS_ERR)
      rc = gs_error(GS_EIO, "cannot list %s: %s", e->fts_path, strerror(e->fts_errno));
    else if (e->fts_info == FTS_F && ends_with(e->fts_name, e->fts_namelen, ".npy"))
      *npy = true;
    else if ((e->fts_info == FTS_F || e->fts_info == FTS_SL) && /* links to files too */
             is_image_name(e->fts_name, e->fts_namelen))
      rc = add(set, NULL, e->fts_path, e->fts_pathlen);
  }
  fts_close(fts);
  return rc;
}

/* A .txt of paths, or a .csv whose first column is paths. */
static int list_file(gs_image_set *set, const char *list, bool csv) {
  FILE *f = fopen(list, "r");
  if (!f)
    return gs_error(errno == ENOENT ? GS_ENOENT : GS_EIO, "cannot open %s: %s", list,
                    strerror(errno));
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", list);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = GS_OK, line_no = 0;
  while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
    line_no++;
    size_t n = csv ? strcspn(line, ",\r\n") : strcspn(line, "\r\n");
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
      n--;
    if (n == 0 || line[0] == '#' || (csv && line_no == 1 && !is_image_name(line, n)))
      continue; /* blank, a comment, a CSV's header */
    rc = add(set, dir, line, n);
  }
  free(line);
  fclose(f);
  return rc;
}

/* Whether a CSV's first or second line starts with an image's name. */
static bool csv_lists_images(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  char buf[4096];
  bool images = false;
  for (int i = 0; i < 2 && !images && fgets(buf, sizeof buf, f); i++)
    images = is_image_name(buf, strcspn(buf, ",\r\n"));
  fclose(f);
  return images;
}

int gs_image_set_open(const char *path, gs_image_set **out) {
  *out = NULL;
  struct stat sb;
  size_t len = strlen(path);
  bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
  bool txt = !dir && ends_with(path, len, ".txt");
  bool csv = !dir && ends_with(path, len, ".csv") && csv_lists_images(path);
  if (!dir && !txt && !csv && !is_image_name(path, len))
    return GS_OK;
  gs_image_set *set = calloc(1, sizeof *set);
  if (!set)
    return gs_error(GS_ENOMEM, "out of memory listing images");
  bool npy = false;
  int rc = dir ? list_dir(set, path, &npy) : txt || csv ? list_file(set, path, csv)
                                                        : add(set, NULL, path, len);
  if (rc == 0 && dir && (npy || set->n == 0)) { /* numbers, for dataset.h */
    gs_image_set_close(set);
    return GS_OK;
  }
  if (rc == 0 && set->n == 0)
    rc = gs_error(GS_EINVAL, "%s lists no images", path);
  if (rc < 0) {
    gs_image_set_close(set);
    return rc;
  }
  *out = set;
  return GS_OK;
}

/* load_override.c - a load request's own configuration and files
 * (load_override.h): checked as they arrive, and written to a private
 * directory the model then loads from like any in the repository. */
#include "api/load_override.h"

#include "base/error.h"
#include "base/fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PATH_LEN 256
#define MAX_DEPTH 8

gs_load_override *gs_load_override_new(void) { return calloc(1, sizeof(gs_load_override)); }

void gs_load_override_free(gs_load_override *ov) {
  if (!ov)
    return;
  free(ov->config);
  for (int i = 0; i < ov->n_files; i++) {
    free(ov->files[i].path);
    free(ov->files[i].data);
  }
  free(ov);
}

/* A path inside the model's directory: relative, each part a name (not
 * empty, "." or ".."), and not the configuration, which "config" gives. */
static int check_path(const char *path) {
  size_t len = strlen(path);
  if (len == 0 || len > MAX_PATH_LEN)
    return gs_error(GS_EINVAL, "file parameter 'file:%.300s': a path of 1 to %d characters is "
                    "needed", path, MAX_PATH_LEN);
  int depth = 0;
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
      return gs_error(GS_EINVAL, "file parameter 'file:%s': each part of the path must be a "
                      "name inside the model's directory (not empty, '.' or '..')", path);
    if (++depth > MAX_DEPTH)
      return gs_error(GS_EINVAL, "file parameter 'file:%s': deeper than %d directories", path,
                      MAX_DEPTH);
    p += n;
    if (*p == '/')
      p++;
    if (*p == '\0' && p[-1] == '/')
      return gs_error(GS_EINVAL, "file parameter 'file:%s' names a directory", path);
  }
  if (strcmp(path, "config.json") == 0 || strcmp(path, "config.pbtxt") == 0)
    return gs_error(GS_EINVAL, "file parameter 'file:%s': the configuration comes from the "
                    "'config' parameter", path);
  return GS_OK;
}

static char *copy_bytes(const void *value, size_t len) {
  char *p = malloc(len + 1);
  if (p) {
    if (len)
      memcpy(p, value, len);
    p[len] = '\0';
  }
  return p;
}

int gs_load_override_add(gs_load_override *ov, const char *key, const void *value, size_t len) {
  if (strcmp(key, "config") == 0) {
    if (ov->config)
      return gs_error(GS_EINVAL, "parameter 'config' is given twice");
    if (memchr(value, '\0', len))
      return gs_error(GS_EINVAL, "parameter 'config' holds a NUL byte; JSON text is needed");
    if (!(ov->config = copy_bytes(value, len)))
      return gs_error(GS_ENOMEM, "out of memory for the load's config");
    return GS_OK;
  }
  if (strncmp(key, "file:", 5) != 0)
    return gs_error(GS_EINVAL, "unknown load parameter '%.200s' (known: 'config' and "
                    "'file:<path>')", key);
  const char *path = key + 5;
  if (check_path(path) < 0)
    return gs_error_code();
  for (int i = 0; i < ov->n_files; i++)
    if (strcmp(ov->files[i].path, path) == 0)
      return gs_error(GS_EINVAL, "file parameter 'file:%s' is given twice", path);
  if (ov->n_files == GS_LOAD_MAX_FILES)
    return gs_error(GS_EINVAL, "more than %d file parameters", GS_LOAD_MAX_FILES);
  gs_load_file *f = &ov->files[ov->n_files];
  f->path = strdup(path);
  f->data = copy_bytes(value, len);
  f->len = len;
  if (!f->path || !f->data) {
    free(f->path);
    free(f->data);
    return gs_error(GS_ENOMEM, "out of memory for file parameter 'file:%s'", path);
  }
  ov->n_files++;
  return GS_OK;
}

int gs_load_override_check(const gs_load_override *ov) {
  if (ov->n_files > 0 && !ov->config)
    return gs_error(GS_EINVAL, "a load with file parameters needs the 'config' parameter too: "
                    "the files make the whole model directory");
  return GS_OK;
}

/* Writes `len` bytes to a new file at `path` under directory fd `root`,
 * making its parent directories. */
static int write_file(int root, const char *path, const void *data, size_t len) {
  char dirs[MAX_PATH_LEN + 1];
  snprintf(dirs, sizeof dirs, "%s", path);
  for (char *slash = strchr(dirs, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    if (mkdirat(root, dirs, 0700) != 0 && errno != EEXIST)
      return gs_error(GS_EIO, "cannot make directory %s for the load's files: %s", dirs,
                      strerror(errno));
    *slash = '/';
  }
  int fd = openat(root, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return gs_error(GS_EIO, "cannot write the load's file %s: %s", path, strerror(errno));
  const char *p = data;
  for (size_t left = len; left > 0;) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      return gs_error(GS_EIO, "cannot write the load's file %s: %s", path, strerror(err));
    }
    p += n;
    left -= (size_t)n;
  }
  if (close(fd) != 0)
    return gs_error(GS_EIO, "cannot write the load's file %s: %s", path, strerror(errno));
  return GS_OK;
}

int gs_load_override_stage(const gs_load_override *ov, char **dir) {
  const char *tmp = getenv("TMPDIR");
  char *path = NULL;
  if (asprintf(&path, "%s/gpusrv-load-XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0)
    return gs_error(GS_ENOMEM, "out of memory staging the load's files");
  if (!mkdtemp(path)) {
    int err = errno;
    free(path);
    return gs_error(GS_EIO, "cannot make a directory for the load's files: %s", strerror(err));
  }
  int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = root < 0 ? gs_error(GS_EIO, "cannot open %s: %s", path, strerror(errno)) : GS_OK;
  if (rc == 0 && ov->config)
    rc = write_file(root, "config.json", ov->config, strlen(ov->config));
  for (int i = 0; rc == 0 && i < ov->n_files; i++)
    rc = write_file(root, ov->files[i].path, ov->files[i].data, ov->files[i].len);
  if (root >= 0)
    close(root);
  if (rc < 0) {
    gs_load_dir_remove(path);
    return rc;
  }
  *dir = path;
  return GS_OK;
}

void gs_load_dir_remove(char *dir) {
  if (!dir)
    return;
  gs_remove_tree(dir);
  free(dir);
}

/* Standard base64 (with padding, as Python's b64encode writes it) into a
 * new buffer: OpenSSL's decoder, which counts the padding as zero bytes. */
static int decode_base64(const char *key, const char *text, size_t len, unsigned char **out,
                         size_t *out_len) {
  if (len % 4 != 0)
    return gs_error(GS_EINVAL, "parameter '%.200s': not base64 (its length is not a multiple "
                    "of 4)", key);
  if (len > INT_MAX)
    return gs_error(GS_EINVAL, "parameter '%.200s': a file of more than 1.5 GiB cannot come "
                    "base64 in JSON; load it over gRPC, or from the repository", key);
  /* OpenSSL takes '=' anywhere as zero bits and skips leading blanks:
   * only the alphabet, with '=' as the last one or two, is base64. */
  size_t body = len;
  while (body > 0 && len - body < 2 && text[body - 1] == '=')
    body--;
  if (strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") != body)
    return gs_error(GS_EINVAL, "parameter '%.200s': not base64", key);
  unsigned char *buf = malloc(len / 4 * 3 + 1);
  if (!buf)
    return gs_error(GS_ENOMEM, "out of memory decoding parameter '%.200s'", key);
  int n = len ? EVP_DecodeBlock(buf, (const unsigned char *)text, (int)len) : 0;
  if (n < 0) {
    free(buf);
    return gs_error(GS_EINVAL, "parameter '%.200s': not base64", key);
  }
  size_t pad = len >= 1 && text[len - 1] == '=' ? (len >= 2 && text[len - 2] == '=' ? 2 : 1) : 0;
  *out = buf;
  *out_len = (size_t)n - pad;
  return GS_OK;
}

static int add_json_value(gs_load_override *ov, const char *key, json_t *v) {
  if (!json_is_string(v))
    return gs_error(GS_EINVAL, "load parameter '%.200s' must be a string%s", key,
                    strncmp(key, "file:", 5) == 0 ? " (the file's bytes in base64)" : "");
  const char *text = json_string_value(v);
  size_t len = json_string_length(v);
  if (strncmp(key, "file:", 5) != 0)
    return gs_load_override_add(ov, key, text, len);
  unsigned char *bytes = NULL;
  size_t n = 0;
  if (decode_base64(key, text, len, &bytes, &n) < 0)
    return gs_error_code();
  int rc = gs_load_override_add(ov, key, bytes, n);
  free(bytes);
  return rc;
}

int gs_load_override_from_json(const char *body, size_t len, gs_load_override **out) {
  *out = NULL;
  if (len == 0)
    return GS_OK;
  json_error_t jerr;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return gs_error(GS_EINVAL, "the load request's body is not JSON: line %d: %s", jerr.line,
                    jerr.text);
  json_t *params = json_is_object(root) ? json_object_get(root, "parameters") : NULL;
  int rc = GS_OK;
  if (!json_is_object(root) || (params && !json_is_object(params)))
    rc = gs_error(GS_EINVAL, "the load request's body must be an object, and its "
                  "'parameters' an object");
  gs_load_override *ov = NULL;
  if (rc == 0 && params && json_object_size(params) > 0 && !(ov = gs_load_override_new()))
    rc = gs_error(GS_ENOMEM, "out of memory reading the load request");
  const char *key;
  json_t *v;
  if (ov)
    json_object_foreach(params, key, v) {
      if (rc == 0)
        rc = add_json_value(ov, key, v);
    }
  if (rc == 0 && ov)
    rc = gs_load_override_check(ov);
  json_decref(root);
  if (rc < 0) {
    gs_load_override_free(ov);
    return rc;
  }
  *out = ov;
  return GS_OK;
}

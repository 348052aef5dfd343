/* load_override.h - what a load request may bring in place of the
 * repository's files: the "config" and "file:<path>" parameters of
 * Triton's repository extension (HTTP and gRPC), and the private directory
 * that such files are written to before the model loads from it. */
#ifndef GS_API_LOAD_OVERRIDE_H
#define GS_API_LOAD_OVERRIDE_H

#include <stddef.h>

#define GS_LOAD_MAX_FILES 64

typedef struct gs_load_file {
  char *path; /* relative to the model's directory, e.g. "1/model.onnx" */
  void *data;
  size_t len;
} gs_load_file;

typedef struct gs_load_override {
  char *config; /* the configuration, JSON text; NULL: the model directory's own */
  int n_files;
  gs_load_file files[GS_LOAD_MAX_FILES];
} gs_load_override;

/* A new, empty override (NULL when out of memory); the caller frees it
 * with gs_load_override_free, which takes NULL too. */
gs_load_override *gs_load_override_new(void);
void gs_load_override_free(gs_load_override *ov);

/* Adds one parameter, copying its value: "config" (JSON text, `len`
 * bytes) or "file:<path>" (the file's bytes). GS_EINVAL with the reason
 * for another key, a path that leaves the model's directory, a
 * configuration file among the files, or too many files; GS_ENOMEM. */
int gs_load_override_add(gs_load_override *ov, const char *key, const void *value, size_t len);

/* Whether the parameters make a load: files come with their "config", as
 * Triton asks (GS_EINVAL with the reason). */
int gs_load_override_check(const gs_load_override *ov);

/* Writes the files, and the configuration as config.json, into a new
 * directory (mode 0700) under $TMPDIR or /tmp. *dir receives its path,
 * which the caller hands to gs_load_dir_remove when done with it. */
int gs_load_override_stage(const gs_load_override *ov, char **dir);

/* Removes a directory gs_load_override_stage made, and frees `dir`
 * (NULL is fine). */
void gs_load_dir_remove(char *dir);

/* HTTP's load body, {"parameters": {"config": "...", "file:1/model.onnx":
 * "<base64>"}}: *out receives the override (the caller frees it), or NULL
 * where the body names no parameters. GS_EINVAL with the reason, GS_ENOMEM. */
int gs_load_override_from_json(const char *body, size_t len, gs_load_override **out);

#endif

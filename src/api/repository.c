/* repository.c - the model repository: scanning, configuration, loading,
 * and the plan cache each served model keeps. */
#include "api/repository.h"

#include "base/error.h"
#include "base/log.h"

#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- configuration -------------------------------------------------------------- */

/* config.json: {"max_batch_size": N, "precision": "fp32|fp16|bf16",
 * "dynamic_batching": {preferred_batch_size, max_queue_delay_microseconds,
 * priority_levels, default_priority_level, default_queue_policy:
 * {max_queue_size, default_timeout_microseconds}}}. instance_group is
 * accepted and not acted on yet (one instance, on the first device). */
static int read_config_json(gs_served_model *m, const char *path) {
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return gs_error(GS_EINVAL, "%s, line %d: %s", path, jerr.line, jerr.text);
  int rc = GS_OK;
  json_t *mbs = json_object_get(root, "max_batch_size");
  if (mbs && (!json_is_integer(mbs) || json_integer_value(mbs) < 0 ||
              json_integer_value(mbs) > 1 << 20))
    rc = gs_error(GS_EINVAL, "%s: max_batch_size must be an integer in [0, 1048576]", path);
  else if (mbs)
    m->max_batch_size = json_integer_value(mbs);
  json_t *db = json_object_get(root, "dynamic_batching");
  if (rc == 0 && db) {
    m->dynamic_batching = true;
    json_t *pref = json_object_get(db, "preferred_batch_size"), *e;
    size_t i;
    json_array_foreach(pref, i, e) {
      if (!json_is_integer(e) || json_integer_value(e) < 1 || m->n_preferred == 8) {
        rc = gs_error(GS_EINVAL, "%s: preferred_batch_size holds up to 8 positive integers", path);
        break;
      }
      m->preferred_batch_sizes[m->n_preferred++] = json_integer_value(e);
    }
    json_t *delay = json_object_get(db, "max_queue_delay_microseconds");
    if (rc == 0 && delay) {
      if (!json_is_integer(delay) || json_integer_value(delay) < 0)
        rc = gs_error(GS_EINVAL, "%s: max_queue_delay_microseconds must be >= 0", path);
      else
        m->max_queue_delay_us = (uint64_t)json_integer_value(delay);
    }
    json_t *levels = json_object_get(db, "priority_levels");
    if (rc == 0 && levels) {
      if (!json_is_integer(levels) || json_integer_value(levels) < 0 || json_integer_value(levels) > 100)
        rc = gs_error(GS_EINVAL, "%s: priority_levels must be in [0, 100]", path);
      else
        m->priority_levels = (int)json_integer_value(levels);
    }
    json_t *dpl = json_object_get(db, "default_priority_level");
    if (rc == 0 && dpl)
      m->default_priority = json_is_integer(dpl) ? (int)json_integer_value(dpl) : 0;
    json_t *qp = json_object_get(db, "default_queue_policy");
    if (rc == 0 && qp) {
      json_t *mqs = json_object_get(qp, "max_queue_size"), *dt =
          json_object_get(qp, "default_timeout_microseconds");
      if (mqs && (!json_is_integer(mqs) || json_integer_value(mqs) < 0))
        rc = gs_error(GS_EINVAL, "%s: max_queue_size must be >= 0", path);
      else if (mqs)
        m->max_queue_size = json_integer_value(mqs);
      if (rc == 0 && dt && (!json_is_integer(dt) || json_integer_value(dt) < 0))
        rc = gs_error(GS_EINVAL, "%s: default_timeout_microseconds must be >= 0", path);
      else if (dt)
        m->default_timeout_us = (uint64_t)json_integer_value(dt);
    }
  }
  json_t *prec = json_object_get(root, "precision");
  if (rc == 0 && prec) {
    const char *p = json_is_string(prec) ? json_string_value(prec) : "";
    if (!strcmp(p, "fp32"))
      m->precision = GS_PRECISION_FP32;
    else if (!strcmp(p, "fp16"))
      m->precision = GS_PRECISION_FP16;
    else if (!strcmp(p, "bf16"))
      m->precision = GS_PRECISION_BF16;
    else
      rc = gs_error(GS_EINVAL, "%s: precision must be fp32, fp16 or bf16", path);
  }
  json_decref(root);
  return rc;
}

/* config.pbtxt (Triton's text format): the fields gpusrv acts on today,
 * max_batch_size; the rest is read by Triton's rules later. */
static int read_config_pbtxt(gs_served_model *m, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return gs_error(GS_EIO, "cannot open %s", path);
  char line[1024];
  int rc = GS_OK;
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    while (isspace((unsigned char)*p))
      p++;
    if (strncmp(p, "max_batch_size", 14) == 0) {
      p = strchr(p, ':');
      long long v = p ? strtoll(p + 1, NULL, 10) : -1;
      if (v < 0 || v > 1 << 20)
        rc = gs_error(GS_EINVAL, "%s: unreadable max_batch_size", path);
      else
        m->max_batch_size = v;
    }
  }
  fclose(f);
  return rc;
}

/* ---- loading ---------------------------------------------------------------------- */

static int cmp_version_desc(const void *a, const void *b) {
  int64_t x = ((const gs_served_version *)a)->number, y = ((const gs_served_version *)b)->number;
  return (x < y) - (x > y);
}

/* The model's inputs and outputs must fit max_batch_size: with batching,
 * every input's first dimension is the batch (symbolic or not). */
static int check_batching(const gs_served_model *m, const gs_model *model) {
  if (m->max_batch_size == 0)
    return GS_OK;
  for (int i = 0; i < model->n_inputs; i++)
    if (model->inputs[i].rank < 1)
      return gs_error(GS_EINVAL, "max_batch_size is %lld but input %s has no first dimension "
                                 "to batch along",
                      (long long)m->max_batch_size, model->inputs[i].name);
  return GS_OK;
}

static void load_model(gs_served_model *m, const char *dir) {
  char path[1200];
  struct stat st;
  snprintf(path, sizeof path, "%s/config.json", dir);
  int rc = 0;
  if (stat(path, &st) == 0)
    rc = read_config_json(m, path);
  else {
    snprintf(path, sizeof path, "%s/config.pbtxt", dir);
    if (stat(path, &st) == 0)
      rc = read_config_pbtxt(m, path);
  }
  if (rc < 0) {
    snprintf(m->reason, sizeof m->reason, "%s", gs_error_detail());
    return;
  }
  DIR *d = opendir(dir);
  for (struct dirent *de; d && (de = readdir(d));) {
    char *end;
    long long v = strtoll(de->d_name, &end, 10);
    if (*end || end == de->d_name || v < 0 || m->n_versions == GS_REPO_MAX_VERSIONS)
      continue;
    gs_served_version *ver = &m->versions[m->n_versions++];
    memset(ver, 0, sizeof *ver);
    ver->number = v;
    snprintf(path, sizeof path, "%s/%s/model.onnx", dir, de->d_name);
    if (gs_model_load(path, &ver->model) < 0 || check_batching(m, ver->model) < 0) {
      snprintf(ver->reason, sizeof ver->reason, "%s", gs_error_detail());
      gs_model_free(ver->model);
      ver->model = NULL;
    }
  }
  if (d)
    closedir(d);
  qsort(m->versions, (size_t)m->n_versions, sizeof m->versions[0], cmp_version_desc);
  if (m->n_versions == 0) {
    snprintf(m->reason, sizeof m->reason, "no version directory (%s/<n>/model.onnx)", dir);
    return;
  }
  for (int i = 0; i < m->n_versions; i++)
    if (m->versions[i].model)
      m->ready = true;
  if (!m->ready)
    snprintf(m->reason, sizeof m->reason, "version %lld: %s", (long long)m->versions[0].number,
             m->versions[0].reason);
}

int gs_repository_open(gs_repository *repo, const char *dir, gs_device_t *device) {
  memset(repo, 0, sizeof *repo);
  snprintf(repo->dir, sizeof repo->dir, "%s", dir);
  repo->device = device;
  DIR *d = opendir(dir);
  if (!d)
    return gs_error(GS_ENOENT, "cannot read the model repository %s", dir);
  int cap = 0;
  for (struct dirent *de; (de = readdir(d));) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (de->d_name[0] == '.' || stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
      continue;
    if (strlen(de->d_name) >= sizeof repo->models[0].name)
      continue;
    if (repo->n_models == cap) {
      cap = cap ? 2 * cap : 8;
      gs_served_model *grown = realloc(repo->models, sizeof *grown * (size_t)cap);
      if (!grown) {
        closedir(d);
        return gs_error(GS_ENOMEM, "out of memory reading the model repository");
      }
      repo->models = grown;
    }
    gs_served_model *m = &repo->models[repo->n_models++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", de->d_name);
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->stats_lock, NULL);
    load_model(m, path);
    if (m->ready)
      GS_LOGI("api", "model %s ready (%d version(s))", m->name, m->n_versions);
    else
      GS_LOGW("api", "model %s not ready: %s", m->name, m->reason);
  }
  closedir(d);
  return GS_OK;
}

void gs_repository_close(gs_repository *repo) {
  for (int i = 0; i < repo->n_models; i++) {
    gs_served_model *m = &repo->models[i];
    for (int v = 0; v < m->n_versions; v++) {
      for (int k = 0; k < GS_REPO_PLAN_CACHE; k++)
        gs_plan_destroy(m->versions[v].plans[k]);
      gs_model_free(m->versions[v].model);
    }
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->stats_lock);
  }
  free(repo->models);
  memset(repo, 0, sizeof *repo);
}

gs_served_model *gs_repository_find(gs_repository *repo, const char *name) {
  for (int i = 0; i < repo->n_models; i++)
    if (strcmp(repo->models[i].name, name) == 0)
      return &repo->models[i];
  return NULL;
}

gs_served_version *gs_served_version_find(gs_served_model *m, const char *v) {
  /* No version asked: the highest that loaded, else the highest (to say why). */
  if ((!v || !*v) && m->n_versions > 0) {
    for (int i = 0; i < m->n_versions; i++)
      if (m->versions[i].model)
        return &m->versions[i];
    return &m->versions[0];
  }
  for (int i = 0; i < m->n_versions; i++) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)m->versions[i].number);
    if ((!v || !*v) ? m->versions[i].model != NULL : strcmp(num, v) == 0)
      return &m->versions[i];
  }
  return NULL;
}

/* ---- running ------------------------------------------------------------------------- */

static bool same_shapes(const gs_shape *a, const gs_shape *b, int n) {
  for (int i = 0; i < n; i++)
    if (!gs_shape_equal(&a[i], &b[i]))
      return false;
  return true;
}

/* The plan for these shapes, from the cache or made now (the least recently
 * used one makes room). Called with the model's lock held. */
static int plan_for(gs_served_model *m, gs_served_version *v, const gs_shape *shapes,
                    gs_plan **out) {
  int n = v->model->n_inputs;
  int k = 0;
  while (k < GS_REPO_PLAN_CACHE && v->plans[k] && !same_shapes(v->plan_shapes[k], shapes, n))
    k++;
  gs_plan *plan = k < GS_REPO_PLAN_CACHE ? v->plans[k] : NULL;
  if (!plan) {
    gs_plan_options opt = {.device = NULL, .precision = m->precision};
    int rc = gs_plan_create(v->model, shapes, &opt, &plan);
    if (rc < 0)
      return rc;
    k = GS_REPO_PLAN_CACHE - 1;
    gs_plan_destroy(v->plans[k]);
  }
  /* Move to the front. */
  for (int i = k; i > 0; i--) {
    v->plans[i] = v->plans[i - 1];
    memcpy(v->plan_shapes[i], v->plan_shapes[i - 1], sizeof v->plan_shapes[i]);
  }
  v->plans[0] = plan;
  memcpy(v->plan_shapes[0], shapes, sizeof(gs_shape) * (size_t)n);
  *out = plan;
  return GS_OK;
}

int gs_served_run(gs_served_model *m, gs_served_version *v, const gs_shape *shapes,
                  const void *const *inputs, void **outputs, gs_plan_value_info *out_info) {
  if (v->model->n_inputs > 8)
    return gs_error(GS_ENOTSUP, "models with more than 8 inputs are not served yet");
  pthread_mutex_lock(&m->lock);
  gs_plan *plan;
  int rc = plan_for(m, v, shapes, &plan);
  int n_out = rc == 0 ? gs_plan_output_count(plan) : 0;
  for (int i = 0; rc == 0 && i < n_out; i++) {
    gs_plan_output(plan, i, &out_info[i]);
    if (!(outputs[i] = malloc(out_info[i].bytes ? out_info[i].bytes : 1)))
      rc = gs_error(GS_ENOMEM, "out of memory for output %s", out_info[i].name);
  }
  /* One run at a time per model for now: the dynamic batcher (later) will
   * gather requests instead of queueing them on this lock. */
  if (rc == 0)
    rc = gs_plan_run(plan, inputs, outputs);
  pthread_mutex_unlock(&m->lock);
  if (rc < 0)
    for (int i = 0; i < n_out; i++) {
      free(outputs[i]);
      outputs[i] = NULL;
    }
  return rc;
}

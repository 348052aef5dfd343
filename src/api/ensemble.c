/* ensemble.c - ensembles' configuration and their composed model
 * (ensemble.h). */
#include "api/ensemble.h"

#include "api/batcher.h"
#include "api/image_input.h"
#include "api/model_config.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/model_compose.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the configuration ------------------------------------------------------------------- */

/* A repeated field in either form: an array, or the one entry config.pbtxt
 * makes of a field given once. */
static size_t list_size(json_t *v) { return json_is_array(v) ? json_array_size(v) : v ? 1 : 0; }
static json_t *list_get(json_t *v, size_t i) { return json_is_array(v) ? json_array_get(v, i) : v; }

static int copy_name(char *dst, json_t *v, const char *path, const char *what) {
  const char *s = json_string_value(v);
  if (!s || !s[0] || strlen(s) >= GS_ENSEMBLE_NAME)
    return gs_error(GS_EINVAL, "%s: %s must be a name of 1 to %d characters", path, what,
                    GS_ENSEMBLE_NAME - 1);
  snprintf(dst, GS_ENSEMBLE_NAME, "%s", s);
  return GS_OK;
}

/* input_map or output_map: {"name": "tensor", ...} as config.json writes a
 * protobuf map, or entries {"key": ..., "value": ...} as config.pbtxt does. */
static int read_wires(json_t *map, char from[][GS_ENSEMBLE_NAME], char to[][GS_ENSEMBLE_NAME],
                      int *n, const char *path, const char *what) {
  bool entries = json_is_array(map) ||
                 (json_is_object(map) && json_object_size(map) == 2 &&
                  json_is_string(json_object_get(map, "key")) &&
                  json_is_string(json_object_get(map, "value")));
  *n = 0;
  if (!map)
    return GS_OK;
  if (!entries && !json_is_object(map))
    return gs_error(GS_EINVAL, "%s: %s must map names to tensors", path, what);
  size_t count = entries ? list_size(map) : json_object_size(map);
  if (count > GS_ENSEMBLE_MAX_WIRES)
    return gs_error(GS_EINVAL, "%s: %s has %zu entries, at most %d", path, what, count,
                    GS_ENSEMBLE_MAX_WIRES);
  if (entries) {
    for (size_t i = 0; i < count; i++) {
      json_t *e = list_get(map, i);
      int rc = copy_name(from[i], json_object_get(e, "key"), path, what);
      if (rc < 0 || (rc = copy_name(to[i], json_object_get(e, "value"), path, what)) < 0)
        return rc;
    }
  } else {
    const char *key;
    json_t *value;
    size_t i = 0;
    json_object_foreach(map, key, value) {
      if (strlen(key) == 0 || strlen(key) >= GS_ENSEMBLE_NAME)
        return gs_error(GS_EINVAL, "%s: %s: a name must be 1 to %d characters", path, what,
                        GS_ENSEMBLE_NAME - 1);
      snprintf(from[i], GS_ENSEMBLE_NAME, "%s", key);
      int rc = copy_name(to[i], value, path, what);
      if (rc < 0)
        return rc;
      i++;
    }
  }
  *n = (int)count;
  return GS_OK;
}

static int read_step(gs_ensemble_step *st, json_t *j, const char *path, size_t k) {
  char what[64];
  snprintf(what, sizeof what, "ensemble_scheduling step %zu model_name", k);
  int rc = copy_name(st->model, json_object_get(j, "model_name"), path, what);
  if (rc < 0)
    return rc;
  json_t *version = json_object_get(j, "model_version");
  st->version = json_is_integer(version) ? json_integer_value(version) : -1;
  if (version && (!json_is_integer(version) || st->version < -1))
    return gs_error(GS_EINVAL, "%s: step %s: model_version must be -1 (the highest) or a version",
                    path, st->model);
  snprintf(what, sizeof what, "step %s input_map", st->model);
  if ((rc = read_wires(json_object_get(j, "input_map"), st->in_from, st->in_to, &st->n_in, path,
                       what)) < 0)
    return rc;
  snprintf(what, sizeof what, "step %s output_map", st->model);
  return read_wires(json_object_get(j, "output_map"), st->out_from, st->out_to, &st->n_out, path,
                    what);
}

/* "input" or "output": entries with a "name". */
static int read_io(json_t *list, char names[][GS_ENSEMBLE_NAME], int *n, const char *path,
                   const char *what) {
  size_t count = list_size(list);
  if (count == 0 || count > GS_ENSEMBLE_MAX_WIRES)
    return gs_error(GS_EINVAL, "%s: an ensemble lists 1 to %d %ss (\"%s\": [{\"name\": ...}])",
                    path, GS_ENSEMBLE_MAX_WIRES, what, what);
  for (size_t i = 0; i < count; i++) {
    int rc = copy_name(names[i], json_object_get(list_get(list, i), "name"), path, what);
    if (rc < 0)
      return rc;
  }
  *n = (int)count;
  return GS_OK;
}

int gs_ensemble_read_config(gs_served_model *m, json_t *root, const char *path) {
  const char *platform = json_string_value(json_object_get(root, "platform"));
  json_t *scheduling = json_object_get(root, "ensemble_scheduling");
  m->is_ensemble = platform && strcmp(platform, "ensemble") == 0;
  if (!m->is_ensemble)
    return scheduling ? gs_error(GS_EINVAL, "%s: ensemble_scheduling goes with platform "
                                            "\"ensemble\"", path)
                      : GS_OK;
  gs_ensemble *e = &m->ensemble;
  memset(e, 0, sizeof *e);
  json_t *steps = json_object_get(scheduling, "step");
  size_t n = list_size(steps);
  if (!json_is_object(scheduling) || n == 0 || n > GS_ENSEMBLE_MAX_STEPS)
    return gs_error(GS_EINVAL, "%s: an ensemble needs ensemble_scheduling with 1 to %d steps",
                    path, GS_ENSEMBLE_MAX_STEPS);
  int rc = read_io(json_object_get(root, "input"), e->inputs, &e->n_inputs, path, "input");
  if (rc == 0)
    rc = read_io(json_object_get(root, "output"), e->outputs, &e->n_outputs, path, "output");
  for (size_t k = 0; rc == 0 && k < n; k++)
    rc = read_step(&e->steps[k], list_get(steps, k), path, k);
  e->n_steps = (int)n;
  return rc;
}

/* ---- the composed model ------------------------------------------------------------------ */

/* The step's model file: its version's, or the highest version's. */
static int step_file(const char *repo_dir, const gs_ensemble_step *st, char *path, size_t cap) {
  if (st->version >= 0) {
    snprintf(path, cap, "%s/%s/%lld/model.onnx", repo_dir, st->model, (long long)st->version);
    return access(path, R_OK) == 0 ? GS_OK
                                   : gs_error(GS_ENOENT, "ensemble step %s: no version %lld "
                                                         "(%s)", st->model,
                                              (long long)st->version, path);
  }
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/%s", repo_dir, st->model);
  DIR *d = opendir(dir);
  long long best = -1;
  for (struct dirent *de; d && (de = readdir(d));) {
    char *end, file[1400];
    long long v = strtoll(de->d_name, &end, 10);
    snprintf(file, sizeof file, "%s/%s/model.onnx", dir, de->d_name);
    if (!*end && end != de->d_name && v > best && access(file, R_OK) == 0)
      best = v;
  }
  if (d)
    closedir(d);
  if (best < 0)
    return gs_error(GS_ENOENT, "ensemble step %s: no model %s/<version>/model.onnx (an "
                               "ensemble's steps are ONNX models of the repository)",
                    st->model, dir);
  snprintf(path, cap, "%s/%lld/model.onnx", dir, best);
  return GS_OK;
}

/* Whether a model's instance_group places it on the host's cores alone. */
static bool placed_on_cpu(const gs_served_model *cfg) {
  for (int g = 0; g < cfg->n_groups; g++)
    if (strcmp(cfg->groups[g].kind, "KIND_CPU") != 0 && strcmp(cfg->groups[g].kind, "cpu") != 0)
      return false;
  return cfg->n_groups > 0;
}

/* The first device a model's instance_group names, where it is here. */
static gs_device_t *named_device(const gs_served_model *cfg) {
  for (int g = 0; g < cfg->n_groups; g++)
    if (cfg->groups[g].n_devices > 0)
      return gs_instance_group_device(&cfg->groups[g], 0);
  return NULL;
}

/* What the ensemble takes from step st's configuration: where its model
 * has a recipe on an input the ensemble's request fills, the ensemble takes
 * images there by it; where its model is placed on the CPU, so is the step
 * (st->on_host), else on the device it names (st->device). */
static int read_step_config(gs_served_model *m, const char *repo_dir, gs_ensemble_step *st,
                            const gs_model *model) {
  gs_served_model *cfg = calloc(1, sizeof *cfg);
  if (!cfg)
    return gs_error(GS_ENOMEM, "out of memory reading step %s's configuration", st->model);
  char path[1200];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s/config.json", repo_dir, st->model);
  int rc = GS_OK;
  if (stat(path, &sb) == 0)
    rc = gs_model_config_read_json(cfg, path);
  else if (snprintf(path, sizeof path, "%s/%s/config.pbtxt", repo_dir, st->model),
           stat(path, &sb) == 0)
    rc = gs_model_config_read_pbtxt(cfg, path);
  st->on_host = rc == 0 && placed_on_cpu(cfg);
  st->device = rc == 0 && !st->on_host ? named_device(cfg) : NULL;
  bool nchw;
  int h, w, idx = rc == 0 && cfg->has_prep ? gs_image_input_find(cfg, model, &nchw, &h, &w) : -1;
  for (int i = 0; idx >= 0 && i < st->n_in; i++) {
    if (strcmp(st->in_from[i], model->inputs[idx].name) != 0)
      continue;
    for (int j = 0; j < m->ensemble.n_inputs; j++)
      if (strcmp(st->in_to[i], m->ensemble.inputs[j]) == 0 && !m->has_prep) {
        m->has_prep = true;
        m->prep = cfg->prep;
        snprintf(m->prep_spec, sizeof m->prep_spec, "%s", cfg->prep_spec);
      }
  }
  free(cfg);
  return rc;
}

int gs_ensemble_compose(gs_served_model *m, const char *repo_dir, gs_model **out) {
  gs_ensemble *e = &m->ensemble;
  gs_compose_step steps[GS_ENSEMBLE_MAX_STEPS] = {0};
  const char *from[GS_ENSEMBLE_MAX_STEPS][2 * GS_ENSEMBLE_MAX_WIRES];
  const char *to[GS_ENSEMBLE_MAX_STEPS][2 * GS_ENSEMBLE_MAX_WIRES];
  const char *inputs[GS_ENSEMBLE_MAX_WIRES], *outputs[GS_ENSEMBLE_MAX_WIRES];
  int rc = GS_OK; /* the ensemble's own recipe, if its config has one, else a step's */
  for (int k = 0; rc == 0 && k < e->n_steps; k++) {
    gs_ensemble_step *st = &e->steps[k];
    char path[1400];
    if ((rc = step_file(repo_dir, st, path, sizeof path)) < 0)
      break;
    if ((rc = gs_model_load(path, &steps[k].model)) < 0) {
      char where[GS_ENSEMBLE_NAME + 32];
      snprintf(where, sizeof where, "ensemble step %s", st->model);
      rc = gs_error_prefix(rc, where);
      break;
    }
    rc = read_step_config(m, repo_dir, st, steps[k].model);
    bool again = false; /* the same model twice: a prefix each */
    for (int j = 0; j < k; j++)
      again = again || strcmp(e->steps[j].model, st->model) == 0;
    snprintf(st->prefix, sizeof st->prefix, again ? "%s#%d" : "%s", st->model, k);
    /* Entries stay where they are until the repository is freed. */
    st->served = m->repo ? gs_repository_find(m->repo, st->model) : NULL;
    for (int i = 0; i < st->n_in; i++)
      from[k][i] = st->in_from[i], to[k][i] = st->in_to[i];
    for (int i = 0; i < st->n_out; i++)
      from[k][st->n_in + i] = st->out_from[i], to[k][st->n_in + i] = st->out_to[i];
    steps[k] = (gs_compose_step){.model = steps[k].model, .name = st->prefix,
                                 .n_map = st->n_in + st->n_out, .from = from[k], .to = to[k]};
  }
  if (rc < 0) {
    for (int k = 0; k < e->n_steps; k++)
      gs_model_free(steps[k].model);
    return rc;
  }
  e->n_host_sections = e->n_device_sections = 0;
  for (int k = 0; k < e->n_steps; k++) {
    gs_ensemble_step *st = &e->steps[k];
    if (st->on_host)
      e->host_sections[e->n_host_sections++] = st->prefix;
    if (st->device) {
      e->device_sections[e->n_device_sections] = st->prefix;
      e->section_devices[e->n_device_sections++] = st->device;
    }
  }
  for (int i = 0; i < e->n_inputs; i++)
    inputs[i] = e->inputs[i];
  for (int i = 0; i < e->n_outputs; i++)
    outputs[i] = e->outputs[i];
  return gs_model_compose(steps, e->n_steps, inputs, e->n_inputs, outputs, e->n_outputs, m->name,
                          out);
}

/* ---- figures per step -------------------------------------------------------------------- */

void gs_ensemble_time_steps(gs_served_model *m, gs_plan *plan) {
  const char *names[GS_ENSEMBLE_MAX_STEPS];
  for (int k = 0; k < m->ensemble.n_steps; k++)
    names[k] = m->ensemble.steps[k].prefix;
  /* Once per load, not once per shape; instances plan side by side. */
  if (gs_plan_time_sections(plan, m->ensemble.n_steps, names) < 0 &&
      !atomic_exchange(&m->ensemble.untimed_said, true))
    GS_LOGW("api", "ensemble %s: its steps' models get no figures from it: %s", m->name,
            gs_error_detail());
}

void gs_ensemble_count_steps(gs_served_model *m, gs_plan *plan, int requests, int64_t rows) {
  const gs_ensemble *e = &m->ensemble;
  uint64_t ns[GS_ENSEMBLE_MAX_STEPS];
  if (!m->is_ensemble || !gs_plan_take_section_times(plan, ns, e->n_steps))
    return;
  for (int k = 0; requests > 0 && k < e->n_steps; k++) {
    gs_served_model *step = e->steps[k].served;
    if (step && step != m)
      gs_batcher_count_step(step, requests, rows, ns[k]);
  }
}

/* kserve.c - the KServe v2 / Open Inference Protocol over HTTP: server and
 * model metadata, model configuration in Triton's shape, and inference with
 * JSON tensors and with the binary tensor data extension. */
#include "api/kserve.h"
#include "api/header_cache.h"
#include "api/image_input.h"
#include "api/kserve_data.h"

#include "base/error.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- replies ---------------------------------------------------------------------- */

void gs_http_reply_free(gs_http_reply *r) {
  free(r->body);
  memset(r, 0, sizeof *r);
}

int gs_http_reply_json(gs_http_reply *r, int status, json_t *j) {
  r->status = status;
  r->body = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  r->len = r->body ? strlen(r->body) : 0;
  snprintf(r->content_type, sizeof r->content_type, "application/json");
  return r->body ? 0 : gs_error(GS_ENOMEM, "out of memory encoding a reply");
}

int gs_http_reply_error(gs_http_reply *r, int status, const char *message) {
  json_t *j = json_object();
  json_object_set_new(j, "error", json_string(message));
  return gs_http_reply_json(r, status, j);
}

/* ---- finding a model ------------------------------------------------------------------ */

gs_served_version *gs_kserve_ready_version(gs_served_model *m, const char *version, int *status,
                                           char *why, size_t whylen) {
  int state = atomic_load(&m->state);
  *status = 503;
  if (state == GS_MODEL_LOADING || state == GS_MODEL_UNLOADED) {
    snprintf(why, whylen, "model '%s' is %s", m->name,
             state == GS_MODEL_LOADING ? "still loading" : "unloaded");
    return NULL;
  }
  if (state == GS_MODEL_UNLOADED_IDLE) {
    snprintf(why, whylen, "model '%s' was %s", m->name, m->reason);
    return NULL;
  }
  if (state == GS_MODEL_UNAVAILABLE) { /* no version loaded, or no instance could be made */
    snprintf(why, whylen, "model '%s' is not ready: %s", m->name, m->reason);
    return NULL;
  }
  gs_served_version *v = gs_served_version_find(m, version);
  if (!v) {
    *status = 404;
    if (version && version[0])
      snprintf(why, whylen, "model '%s' has no version '%s'", m->name, version);
    else
      snprintf(why, whylen, "model '%s' has no version", m->name);
    return NULL;
  }
  if (!v->model) {
    snprintf(why, whylen, "model '%s' is not ready: %s", m->name,
             v->reason[0] ? v->reason : m->reason);
    return NULL;
  }
  *status = 200;
  return v;
}

/* ---- metadata ---------------------------------------------------------------------- */

/* The shape a client sees: with batching, the batch dimension is -1. */
static json_t *shape_json(const gs_served_model *m, const gs_value_info *v, bool config) {
  json_t *a = json_array();
  for (int d = 0; d < v->rank; d++) {
    if (m->max_batch_size > 0 && d == 0) {
      if (!config)
        json_array_append_new(a, json_integer(-1));
      continue;
    }
    json_array_append_new(a, json_integer(v->dims[d] >= 0 ? v->dims[d] : -1));
  }
  return a;
}

json_t *gs_kserve_repository_index(gs_repository *repo) {
  json_t *a = json_array();
  int n = atomic_load(&repo->n_models);
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(m->name));
    if (!gs_served_try_use(m)) { /* a load or unload has it: say so, without waiting */
      int state = atomic_load(&m->state);
      if (state != GS_MODEL_UNLOADED && state != GS_MODEL_UNLOADED_IDLE)
        state = GS_MODEL_LOADING;
      json_object_set_new(o, "state", json_string(gs_model_state_name(state)));
      json_array_append_new(a, o);
      continue;
    }
    gs_served_version *v = gs_served_version_find(m, NULL);
    int state = atomic_load(&m->state);
    if (v) {
      char num[32];
      snprintf(num, sizeof num, "%lld", (long long)v->number);
      json_object_set_new(o, "version", json_string(num));
    }
    json_object_set_new(o, "state", json_string(gs_model_state_name(state)));
    if (state != GS_MODEL_READY && m->reason[0])
      json_object_set_new(o, "reason", json_string(m->reason));
    gs_served_release(m);
    json_array_append_new(a, o);
  }
  return a;
}

json_t *gs_kserve_server_metadata(const char *version) {
  json_t *j = json_object(), *ext = json_array();
  json_object_set_new(j, "name", json_string("gpusrv"));
  json_object_set_new(j, "version", json_string(version));
  /* Exactly what is implemented. */
  json_array_append_new(ext, json_string("binary_tensor_data"));
  json_array_append_new(ext, json_string("model_configuration"));
  json_array_append_new(ext, json_string("statistics"));
  json_array_append_new(ext, json_string("model_repository"));
  json_object_set_new(j, "extensions", ext);
  return j;
}

/* The model's inputs and outputs as metadata ("datatype", "shape") or as
 * configuration ("data_type", "dims") lists them. */
static void tensor_lists(gs_served_model *m, gs_served_version *v, bool config, json_t *ins,
                         json_t *outs) {
  for (int pass = 0; pass < 2; pass++) {
    const gs_value_info *vs = pass ? v->model->outputs : v->model->inputs;
    int n = pass ? v->model->n_outputs : v->model->n_inputs;
    for (int i = 0; i < n; i++) {
      json_t *t = json_object();
      json_object_set_new(t, "name", json_string(vs[i].name));
      json_object_set_new(t, config ? "data_type" : "datatype",
                          json_string(config ? gs_kserve_triton_name(vs[i].dtype)
                                             : gs_kserve_dtype_name(vs[i].dtype)));
      json_object_set_new(t, config ? "dims" : "shape", shape_json(m, &vs[i], config));
      json_array_append_new(pass ? outs : ins, t);
    }
  }
}

json_t *gs_kserve_model_metadata(gs_served_model *m, gs_served_version *v) {
  json_t *j = json_object(), *vers = json_array(), *ins = json_array(), *outs = json_array();
  json_object_set_new(j, "name", json_string(m->name));
  for (int i = 0; i < m->n_versions; i++) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)m->versions[i].number);
    json_array_append_new(vers, json_string(num));
  }
  json_object_set_new(j, "versions", vers);
  json_object_set_new(j, "platform", json_string("onnxruntime_onnx"));
  tensor_lists(m, v, false, ins, outs);
  json_object_set_new(j, "inputs", ins);
  json_object_set_new(j, "outputs", outs);
  return j;
}

/* The instances as made, one group per device: its kind, how many, and the
 * device (Triton's gpus: the index among the GPUs). */
static json_t *instance_groups_json(gs_served_model *m) {
  json_t *groups = json_array();
  for (int i = 0; i < m->n_instances; i++) {
    gs_device_t *d = m->instances[i].device;
    bool seen = false;
    for (int k = 0; k < i; k++)
      seen = seen || m->instances[k].device == d;
    if (seen)
      continue;
    /* An autoscaled model: the instances running now, and its bounds. */
    int count = 0, active = atomic_load(&m->active_instances);
    for (int k = i; k < active; k++)
      count += m->instances[k].device == d;
    const gs_device_info *info = gs_device_get_info(d);
    json_t *g = json_object();
    char name[300];
    snprintf(name, sizeof name, "%s_%s", m->name, info->id);
    json_object_set_new(g, "name", json_string(name));
    json_object_set_new(g, "kind", json_string(info->type == GS_DEVICE_GPU ? "KIND_GPU" : "KIND_CPU"));
    json_object_set_new(g, "count", json_integer(count));
    json_object_set_new(g, "devices", json_pack("[s]", info->id));
    if (gs_served_autoscaled(m))
      json_object_set_new(g, "autoscale", json_pack("{s:I,s:I,s:I}", "min", (json_int_t)m->groups[0].min,
                                                    "max", (json_int_t)m->groups[0].max,
                                                    "queue_delay_budget_us",
                                                    (json_int_t)gs_served_queue_budget_us(m)));
    if (info->type == GS_DEVICE_GPU) {
      int gpu_index = 0;
      for (int k = 0; k < info->index; k++)
        gpu_index += gs_device_get_info(gs_hal_device(k))->type == GS_DEVICE_GPU;
      json_object_set_new(g, "gpus", json_pack("[i]", gpu_index));
    }
    json_array_append_new(groups, g);
  }
  return groups;
}

/* ensemble_scheduling as config.json writes it: maps as objects. */
static json_t *ensemble_json(const gs_ensemble *e) {
  json_t *steps = json_array();
  for (int k = 0; k < e->n_steps; k++) {
    const gs_ensemble_step *st = &e->steps[k];
    json_t *in = json_object(), *out = json_object();
    for (int i = 0; i < st->n_in; i++)
      json_object_set_new(in, st->in_from[i], json_string(st->in_to[i]));
    for (int i = 0; i < st->n_out; i++)
      json_object_set_new(out, st->out_from[i], json_string(st->out_to[i]));
    /* gpusrv's own: where the step's kernels run (ensemble.h). */
    json_array_append_new(steps, json_pack("{s:s, s:I, s:o, s:o, s:s}", "model_name", st->model,
                                           "model_version", (json_int_t)st->version, "input_map",
                                           in, "output_map", out, "runs_on",
                                           st->on_host  ? "cpu"
                                           : st->device ? gs_device_get_info(st->device)->id
                                                        : "instance"));
  }
  return json_pack("{s:o}", "step", steps);
}

json_t *gs_kserve_model_config(gs_served_model *m, gs_served_version *v) {
  json_t *j = json_object(), *ins = json_array(), *outs = json_array();
  json_object_set_new(j, "name", json_string(m->name));
  json_object_set_new(j, "platform", json_string(m->is_ensemble ? "ensemble" : "onnxruntime_onnx"));
  json_object_set_new(j, "backend", json_string(m->is_ensemble ? "" : "onnxruntime"));
  if (m->is_ensemble)
    json_object_set_new(j, "ensemble_scheduling", ensemble_json(&m->ensemble));
  json_object_set_new(j, "max_batch_size", json_integer(m->max_batch_size));
  tensor_lists(m, v, true, ins, outs);
  json_object_set_new(j, "input", ins);
  json_object_set_new(j, "output", outs);
  if (m->dynamic_batching) {
    json_t *db = json_object(), *pref = json_array(), *qp = json_object();
    for (int i = 0; i < m->n_preferred; i++)
      json_array_append_new(pref, json_integer(m->preferred_batch_sizes[i]));
    json_object_set_new(db, "preferred_batch_size", pref);
    json_object_set_new(db, "max_queue_delay_microseconds",
                        json_integer((json_int_t)m->max_queue_delay_us));
    json_object_set_new(db, "priority_levels", json_integer(m->priority_levels));
    json_object_set_new(db, "default_priority_level", json_integer(m->default_priority));
    json_object_set_new(qp, "max_queue_size", json_integer(m->max_queue_size));
    json_object_set_new(qp, "default_timeout_microseconds",
                        json_integer((json_int_t)m->default_timeout_us));
    json_object_set_new(qp, "timeout_action", json_string(m->timeout_delays ? "DELAY" : "REJECT"));
    json_object_set_new(db, "default_queue_policy", qp);
    json_object_set_new(j, "dynamic_batching", db);
  }
  json_object_set_new(j, "instance_group", instance_groups_json(m));
  if (m->has_prep) {
    json_object_set_new(j, "preprocess", json_string(m->prep_spec));
    /* where its type, layout and normalisation run (image.h's finish) */
    json_object_set_new(j, "preprocess_finish", json_string(m->prep_on_device ? "device" : "cpu"));
    json_object_set_new(j, "preprocess_resize",
                        json_string(m->resize_on_device ? "device" : "cpu"));
  }
  json_object_set_new(j, "precision", json_string(gs_precision_name(m->precision)));
  return j;
}

/* ---- statistics -------------------------------------------------------------------- */

static json_t *duration_json(const gs_duration_stat *d) {
  json_t *o = json_object();
  json_object_set_new(o, "count", json_integer((json_int_t)d->count));
  json_object_set_new(o, "ns", json_integer((json_int_t)d->ns));
  return o;
}

/* Triton's statistics of one model (all its versions counted together,
 * reported under the version `v`). */
static json_t *model_stats_json(gs_served_model *m, gs_served_version *v) {
  gs_model_stats st;
  pthread_mutex_lock(&m->stats_lock);
  st = m->stats;
  pthread_mutex_unlock(&m->stats_lock);
  json_t *o = json_object(), *is = json_object(), *bs = json_array();
  char num[32];
  snprintf(num, sizeof num, "%lld", (long long)v->number);
  json_object_set_new(o, "name", json_string(m->name));
  json_object_set_new(o, "version", json_string(num));
  json_object_set_new(o, "last_inference", json_integer((json_int_t)st.last_inference_ms));
  json_object_set_new(o, "inference_count", json_integer((json_int_t)st.inference_count));
  json_object_set_new(o, "execution_count", json_integer((json_int_t)st.execution_count));
  json_object_set_new(is, "success", duration_json(&st.success));
  json_object_set_new(is, "fail", duration_json(&st.fail));
  json_object_set_new(is, "queue", duration_json(&st.queue));
  json_object_set_new(is, "compute_input", duration_json(&st.compute_input));
  json_object_set_new(is, "compute_infer", duration_json(&st.compute_infer));
  json_object_set_new(is, "compute_output", duration_json(&st.compute_output));
  gs_duration_stat zero = {0, 0};
  json_object_set_new(is, "cache_hit", duration_json(&zero));
  json_object_set_new(is, "cache_miss", duration_json(&zero));
  json_object_set_new(o, "inference_stats", is);
  /* gpusrv's own, beside Triton's fields: the requests waiting now, and the
   * successes' latency histogram (per bucket, since the start; bounds in
   * microseconds, the last unbounded) for percentiles between two reads. */
  json_object_set_new(o, "queue_length", json_integer((json_int_t)atomic_load(&m->queue_length)));
  json_t *bounds = json_array(), *counts = json_array();
  for (int b = 0; b < GS_LATENCY_BUCKETS; b++) {
    if (b < GS_LATENCY_BUCKETS - 1)
      json_array_append_new(bounds, json_real(gs_latency_bound_us(b)));
    json_array_append_new(counts, json_integer((json_int_t)st.latency[b]));
  }
  json_object_set_new(o, "latency_histogram",
                      json_pack("{s:o, s:o}", "bounds_us", bounds, "counts", counts));
  for (int b = 1; b <= GS_STATS_MAX_BATCH; b++) {
    if (!st.batch[b][1].count)
      continue;
    json_t *e = json_object();
    json_object_set_new(e, "batch_size", json_integer(b));
    json_object_set_new(e, "compute_input", duration_json(&st.batch[b][0]));
    json_object_set_new(e, "compute_infer", duration_json(&st.batch[b][1]));
    json_object_set_new(e, "compute_output", duration_json(&st.batch[b][2]));
    json_array_append_new(bs, e);
  }
  json_object_set_new(o, "batch_stats", bs);
  return o;
}

json_t *gs_kserve_model_stats(gs_served_model *m, gs_served_version *v) {
  json_t *j = json_object(), *all = json_array();
  json_array_append_new(all, model_stats_json(m, v));
  json_object_set_new(j, "model_stats", all);
  return j;
}

json_t *gs_kserve_stats(gs_repository *repo) {
  json_t *j = json_object(), *all = json_array();
  int n = atomic_load(&repo->n_models);
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    if (!gs_served_try_use(m))
      continue; /* loading: no statistics yet, and no waiting for them */
    gs_served_version *v = gs_served_ready(m) ? gs_served_version_find(m, NULL) : NULL;
    if (v)
      json_array_append_new(all, model_stats_json(m, v));
    gs_served_release(m);
  }
  json_object_set_new(j, "model_stats", all);
  return j;
}

/* ---- inference --------------------------------------------------------------------- */

/* The range of an integer type's values. */
static void int_range(gs_dtype dt, double *lo, double *hi) {
  switch (dt) {
  case GS_DT_BOOL: *lo = 0; *hi = 1; break;
  case GS_DT_UINT8: *lo = 0; *hi = 255; break;
  case GS_DT_INT8: *lo = -128; *hi = 127; break;
  case GS_DT_INT16: *lo = -32768; *hi = 32767; break;
  case GS_DT_INT32: *lo = -2147483648.0; *hi = 2147483647.0; break;
  case GS_DT_UINT16: *lo = 0; *hi = 65535; break;
  case GS_DT_UINT32: *lo = 0; *hi = 4294967295.0; break;
  case GS_DT_UINT64: *lo = 0; *hi = 18446744073709551615.0; break;
  default: *lo = -9223372036854775808.0; *hi = 9223372036854775807.0; break;
  }
}

/* Whether JSON value `a` fits type dt: integers (or numbers with no
 * fraction) within an integer type's range, numbers within a float
 * type's finite range; booleans as 0 and 1. */
static bool fits(json_t *a, gs_dtype dt, double v) {
  if (gs_dtype_is_float(dt))
    return dt == GS_DT_FLOAT64 ||
           fabs(v) <= (dt == GS_DT_FLOAT16 ? 65504.0 : dt == GS_DT_BFLOAT16 ? 3.3895313892515355e38
                                                                             : FLT_MAX);
  double lo, hi;
  int_range(dt, &lo, &hi);
  if (json_is_integer(a) && dt == GS_DT_INT64)
    return true;
  if (json_is_integer(a) && dt == GS_DT_UINT64) /* jansson's integers stop at int64 */
    return json_integer_value(a) >= 0;
  /* int64's and uint64's upper bounds round up to 2^63 and 2^64 as doubles:
   * those must stay out. */
  return v == floor(v) && v >= lo &&
         (v < hi || (v == hi && dt != GS_DT_INT64 && dt != GS_DT_UINT64));
}

/* Appends the numbers of a (possibly nested) JSON array to buf as dtype:
 * 0, -1 too many, -2 not a number (the caller names the input), -3 a value
 * the type cannot hold (*bad points at it). */
static int flatten(json_t *a, gs_dtype dt, char *buf, int64_t *at, int64_t count, json_t **bad) {
  if (json_is_array(a)) {
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) {
      int rc = flatten(e, dt, buf, at, count, bad);
      if (rc < 0)
        return rc;
    }
    return 0;
  }
  if (*at >= count)
    return -1;
  size_t es = gs_dtype_size(dt);
  char *slot = buf + (size_t)*at * es;
  double v;
  if (json_is_boolean(a))
    v = json_is_true(a);
  else if (json_is_number(a))
    v = json_number_value(a);
  else
    return -2;
  if (!fits(a, dt, v)) {
    *bad = a;
    return -3;
  }
  /* In range (fits), so the conversion of an integral v is defined. */
  int64_t i = json_is_integer(a)                               ? json_integer_value(a)
              : gs_dtype_is_float(dt) || dt == GS_DT_UINT64 ? 0
                                                            : (int64_t)v;
  switch (dt) {
  case GS_DT_FLOAT32: *(float *)slot = (float)v; break;
  case GS_DT_FLOAT64: *(double *)slot = v; break;
  case GS_DT_FLOAT16: *(uint16_t *)slot = gs_f32_to_f16((float)v); break;
  case GS_DT_BFLOAT16: *(uint16_t *)slot = gs_f32_to_bf16((float)v); break;
  case GS_DT_INT64: *(int64_t *)slot = i; break;
  case GS_DT_INT32: *(int32_t *)slot = (int32_t)i; break;
  case GS_DT_INT16: *(int16_t *)slot = (int16_t)i; break;
  case GS_DT_INT8: *(int8_t *)slot = (int8_t)i; break;
  case GS_DT_UINT8: *(uint8_t *)slot = (uint8_t)i; break;
  case GS_DT_UINT16: *(uint16_t *)slot = (uint16_t)i; break;
  case GS_DT_UINT32: *(uint32_t *)slot = (uint32_t)i; break;
  case GS_DT_UINT64: *(uint64_t *)slot = json_is_integer(a) ? (uint64_t)i : (uint64_t)v; break;
  case GS_DT_BOOL: *(uint8_t *)slot = i != 0; break;
  default: return -2;
  }
  (*at)++;
  return 0;
}

/* ---- BYTES ---------------------------------------------------------------------------- */

/* Counts the strings of a (possibly nested) JSON array and their bytes;
 * -2 when it holds something else. */
static int count_strings(json_t *a, int64_t *n, size_t *bytes) {
  if (json_is_array(a)) {
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) {
      int rc = count_strings(e, n, bytes);
      if (rc < 0)
        return rc;
    }
    return 0;
  }
  if (!json_is_string(a))
    return -2;
  (*n)++;
  *bytes += json_string_length(a);
  return 0;
}

/* Copies the strings into `heap` and points a record at each. */
static void fill_strings(json_t *a, gs_bytes_ref *recs, int64_t *at, char **heap) {
  if (json_is_array(a)) {
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e)
      fill_strings(e, recs, at, heap);
    return;
  }
  size_t len = json_string_length(a);
  memcpy(*heap, json_string_value(a), len);
  recs[(*at)++] = (gs_bytes_ref){.data = *heap, .len = len};
  *heap += len;
}

/* A JSON input of BYTES: one block, the records then the strings' bytes. */
static int strings_from_json(json_t *data, int64_t count, void **block, const char *name,
                             char *why, size_t why_len) {
  int64_t n = 0;
  size_t bytes = 0;
  int rc = count_strings(data, &n, &bytes);
  if (rc < 0 || n != count) {
    snprintf(why, why_len, "input '%s': %s (shape needs %lld strings)", name,
             rc < 0 ? "data holds something other than strings" : "wrong number of values",
             (long long)count);
    return GS_EINVAL;
  }
  char *b = malloc((size_t)count * sizeof(gs_bytes_ref) + bytes + 1);
  if (!b) {
    snprintf(why, why_len, "out of memory for input '%s'", name);
    return GS_ENOMEM;
  }
  char *heap = b + (size_t)count * sizeof(gs_bytes_ref);
  int64_t at = 0;
  fill_strings(data, (gs_bytes_ref *)b, &at, &heap);
  *block = b;
  return GS_OK;
}

static bool param_true(json_t *obj, const char *key) {
  json_t *params = json_object_get(obj, "parameters");
  return params && json_is_true(json_object_get(params, key));
}

#define MAX_IO GS_REQ_MAX_IO

int gs_kserve_apply_parameter(gs_infer_request *r, const char *key, bool is_int, int64_t value,
                              char *why, size_t whylen) {
  int levels = r->model->priority_levels;
  if (strcmp(key, "priority") == 0) {
    if (!is_int || value < 0 || (levels > 0 && value > levels)) {
      snprintf(why, whylen, "priority must be an integer from 1 to %d", levels > 0 ? levels : 1);
      return -1;
    }
    r->priority = (int)value;
  } else if (strcmp(key, "timeout") == 0) {
    if (!is_int || value < 0) {
      snprintf(why, whylen, "timeout must be a number of microseconds");
      return -1;
    }
    r->timeout_us = (uint64_t)value;
  }
  return 0;
}

int gs_kserve_output_index(const gs_infer_request *r, const char *name, char *why,
                           size_t whylen) {
  const gs_model *model = r->version->model;
  for (int i = 0; name && i < model->n_outputs; i++)
    if (strcmp(model->outputs[i].name, name) == 0)
      return i;
  snprintf(why, whylen, "unknown output '%s' for model %s", name ? name : "(no name)",
           r->model->name);
  return -1;
}

int gs_kserve_check_input(gs_infer_request *r, const char *name, const char *datatype,
                          const int64_t *dims, int rank, bool first, size_t max_values,
                          int64_t *count, char *why, size_t whylen) {
  const gs_served_model *m = r->model;
  const gs_model *model = r->version->model;
  int idx = -1;
  for (int i = 0; name && i < model->n_inputs; i++)
    if (strcmp(model->inputs[i].name, name) == 0)
      idx = i;
  if (!name || idx < 0) {
    snprintf(why, whylen, "unknown input '%s' for model %s", name ? name : "(no name)", m->name);
    return -1;
  }
  if (r->inputs[idx]) {
    snprintf(why, whylen, "input '%s' is given twice", name);
    return -1;
  }
  const gs_value_info *want = &model->inputs[idx];
  gs_dtype given = datatype ? gs_kserve_dtype_from_name(datatype) : GS_DT_INVALID;
  /* A model that takes pixels itself (its recipe finished on the device)
   * takes them as its own tensor only at its own size. */
  bool image = (given != want->dtype || m->prep_on_device) &&
               gs_image_input_form(m, model, idx, given, rank, dims);
  if (given != want->dtype && !image) {
    snprintf(why, whylen, "input '%s': expected datatype %s%s, got %s", name,
             gs_kserve_dtype_name(want->dtype),
             m->has_prep ? " (or images: BYTES [n] of JPEG or PNG files, UINT8 [n, h, w, 3])" : "",
             datatype && datatype[0] ? datatype : "none");
    return -1;
  }
  if (!image && rank != want->rank) {
    snprintf(why, whylen, "input '%s': expected a shape of %d dimensions", name, want->rank);
    return -1;
  }
  gs_shape sh = {.rank = image ? rank : want->rank};
  for (int d = 0; d < sh.rank; d++) {
    int64_t val = dims[d];
    bool batch = m->max_batch_size > 0 && d == 0;
    if (val < 0 || (batch && (val < 1 || val > m->max_batch_size)) ||
        (!batch && !image && want->dims[d] >= 0 && val != want->dims[d])) {
      snprintf(why, whylen, "input '%s': dimension %d is %lld, expected %s%lld", name, d,
               (long long)val, batch ? "1 to " : "",
               (long long)(batch ? m->max_batch_size : want->dims[d]));
      return -1;
    }
    sh.dims[d] = val;
  }
  if (m->max_batch_size > 0) {
    if (!first && sh.dims[0] != r->batch) {
      snprintf(why, whylen, "input '%s' has %lld rows, the others %lld", name,
               (long long)sh.dims[0], (long long)r->batch);
      return -1;
    }
    r->batch = sh.dims[0];
  }
  r->shapes[idx] = sh;
  r->given[idx] = given;
  r->image[idx] = image;
  *count = gs_shape_numel(&sh);
  /* Every value takes a byte or more of the message in any form (JSON,
   * binary, a string's length): a shape that holds more cannot be honest,
   * and bounding it keeps the sizes callers compute from overflowing. */
  if (*count < 0 || (uint64_t)*count > max_values) {
    snprintf(why, whylen, "input '%s': its shape holds more values than the request's %zu "
             "bytes can carry", name, max_values);
    return -1;
  }
  return idx;
}

/* Parses one request into r (which must be zeroed). On a client mistake,
 * fills err with the 400/404 reply and returns a GS_E code. */
int gs_kserve_parse(gs_served_model *m, gs_served_version *v, const char *body, size_t len,
                    size_t header_len, gs_infer_request *r, gs_http_reply *err) {
  const gs_model *model = v->model;
  char why[600] = "";
  r->model = m;
  r->version = v;
  r->batch = 1;
  if (header_len > len)
    return gs_http_reply_error(err, 400, "Inference-Header-Content-Length is larger than the body"),
           GS_EINVAL;
  if (header_len &&
      gs_header_cache_take(m, v, body, header_len, body + header_len, len - header_len, r))
    return GS_OK;
  size_t json_len = header_len ? header_len : len;
  json_error_t jerr;
  json_t *req = json_loadb(body, json_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!req) {
    snprintf(why, sizeof why, "malformed JSON in the request at line %d, column %d: %s", jerr.line,
             jerr.column, jerr.text);
    gs_http_reply_error(err, 400, why);
    return GS_EINVAL;
  }
  const char *binary = body + json_len;
  size_t binary_left = len - json_len;
  int status = 400;
  json_t *inputs = json_object_get(req, "inputs");
  if (model->n_inputs > MAX_IO || model->n_outputs > MAX_IO) {
    snprintf(why, sizeof why, "models with more than %d inputs or outputs are not served yet", MAX_IO);
    goto fail;
  }
  json_t *id = json_object_get(req, "id");
  if (json_is_string(id)) {
    snprintf(r->id, sizeof r->id, "%s", json_string_value(id));
    r->has_id = true;
  }
  json_t *params = json_object_get(req, "parameters");
  static const char *const acted_on[] = {"priority", "timeout"};
  for (size_t i = 0; i < sizeof acted_on / sizeof acted_on[0]; i++) {
    json_t *value = params ? json_object_get(params, acted_on[i]) : NULL;
    if (value && gs_kserve_apply_parameter(r, acted_on[i], json_is_integer(value),
                                           json_integer_value(value), why, sizeof why) < 0)
      goto fail;
  }
  if (!json_is_array(inputs)) {
    snprintf(why, sizeof why, "the request has no \"inputs\" array");
    goto fail;
  }
  size_t k;
  json_t *in;
  json_array_foreach(inputs, k, in) {
    const char *name = json_string_value(json_object_get(in, "name"));
    const char *dtname = json_string_value(json_object_get(in, "datatype"));
    json_t *shape = json_object_get(in, "shape");
    int64_t dims[GS_MAX_DIMS];
    int rank = json_is_array(shape) ? (int)json_array_size(shape) : -1;
    for (int d = 0; d < rank && d < GS_MAX_DIMS; d++) {
      json_t *dim = json_array_get(shape, (size_t)d);
      dims[d] = json_is_integer(dim) ? json_integer_value(dim) : -1;
    }
    int64_t count;
    int idx = gs_kserve_check_input(r, name, dtname, dims, rank, k == 0, len, &count, why,
                                    sizeof why);
    if (idx < 0)
      goto fail;
    const gs_dtype given = r->given[idx]; /* the model's, or an image form */
    size_t bytes = (size_t)count * gs_dtype_size(given);
    bool strings = given == GS_DT_BYTES;
    json_t *iparams = json_object_get(in, "parameters");
    json_t *bsize = iparams ? json_object_get(iparams, "binary_data_size") : NULL;
    if (bsize && strings) {
      int64_t n = json_is_integer(bsize) ? json_integer_value(bsize) : -1;
      if (n < 0 || (size_t)n > binary_left) {
        snprintf(why, sizeof why, "input '%s': binary_data_size %lld, but %zu bytes of binary "
                 "data are left", name, (long long)n, binary_left);
        goto fail;
      }
      int src = gs_kserve_strings_from_binary(binary, (size_t)n, count, &r->owned[idx], name, why,
                                    sizeof why);
      if (src < 0) {
        status = src == GS_ENOMEM ? 500 : 400;
        goto fail;
      }
      r->inputs[idx] = r->owned[idx];
      binary += n;
      binary_left -= (size_t)n;
      continue;
    }
    if (bsize) {
      int64_t n = json_is_integer(bsize) ? json_integer_value(bsize) : -1;
      if (n < 0 || (size_t)n != bytes || (size_t)n > binary_left) {
        snprintf(why, sizeof why, "input '%s': binary_data_size %lld, but its shape needs %zu bytes "
                 "and %zu bytes of binary data are left", name, (long long)n, bytes, binary_left);
        goto fail;
      }
      r->inputs[idx] = binary; /* read in place: the body outlives the request */
      binary += n;
      binary_left -= (size_t)n;
      continue;
    }
    json_t *data = json_object_get(in, "data");
    if (!data) {
      snprintf(why, sizeof why, "input '%s' has neither \"data\" nor binary_data_size", name);
      goto fail;
    }
    if (strings) {
      int src = strings_from_json(data, count, &r->owned[idx], name, why, sizeof why);
      if (src < 0) {
        status = src == GS_ENOMEM ? 500 : 400;
        goto fail;
      }
      r->inputs[idx] = r->owned[idx];
      continue;
    }
    if (!(r->owned[idx] = malloc(bytes ? bytes : 1))) {
      status = 500;
      snprintf(why, sizeof why, "out of memory for input '%s'", name);
      goto fail;
    }
    r->inputs[idx] = r->owned[idx];
    int64_t at = 0;
    json_t *bad = NULL;
    int frc = flatten(data, given, r->owned[idx], &at, count, &bad);
    if (frc == -3) {
      char *text = json_dumps(bad, JSON_ENCODE_ANY);
      snprintf(why, sizeof why, "input '%s': the value %s is out of range for %s", name,
               text ? text : "?", gs_kserve_dtype_name(given));
      free(text);
      goto fail;
    }
    if (frc < 0 || at != count) {
      snprintf(why, sizeof why, "input '%s': %s (shape needs %lld values)", name,
               frc == -2 ? "data holds something other than numbers" : "wrong number of values",
               (long long)count);
      goto fail;
    }
  }
  for (int i = 0; i < model->n_inputs; i++)
    if (!r->inputs[i]) {
      snprintf(why, sizeof why, "input '%s' is missing", model->inputs[i].name);
      goto fail;
    }
  for (int i = 0; i < model->n_inputs; i++)
    if (r->image[i] && (status = gs_image_input_convert(r, i, why, sizeof why)) != 0)
      goto fail;
  status = 400;
  /* Which outputs, and which of them go as binary. */
  json_t *wanted = json_object_get(req, "outputs");
  bool all_binary = param_true(req, "binary_data_output");
  for (int i = 0; i < model->n_outputs; i++) {
    r->send[i] = !json_is_array(wanted) || json_array_size(wanted) == 0;
    r->binary[i] = all_binary;
  }
  json_t *w;
  json_array_foreach(wanted, k, w) {
    int idx = gs_kserve_output_index(r, json_string_value(json_object_get(w, "name")), why,
                                     sizeof why);
    if (idx < 0)
      goto fail;
    r->send[idx] = true;
    json_t *p = json_object_get(w, "parameters");
    if (p && json_object_get(p, "binary_data"))
      r->binary[idx] = json_is_true(json_object_get(p, "binary_data"));
  }
  json_decref(req);
  if (header_len)
    gs_header_cache_keep(v, body, header_len, body + header_len, len - header_len, r);
  return GS_OK;
fail:
  json_decref(req);
  gs_infer_request_clear(r);
  gs_http_reply_error(err, status, why[0] ? why : "bad request");
  return GS_EINVAL;
}

int gs_kserve_parse_raw(gs_served_model *m, gs_served_version *v, const char *body, size_t len,
                        gs_infer_request *r, gs_http_reply *err) {
  const gs_model *model = v->model;
  char why[600] = "";
  r->model = m;
  r->version = v;
  r->batch = 1;
  const gs_value_info *in = &model->inputs[0];
  if (model->n_inputs != 1 || model->n_outputs > MAX_IO) {
    snprintf(why, sizeof why, "a raw binary request (Inference-Header-Content-Length: 0) needs a "
             "model with one input; %s has %d", m->name, model->n_inputs);
    return gs_http_reply_error(err, 400, why), GS_EINVAL;
  }
  gs_shape sh = {.rank = in->rank};
  for (int d = 0; d < in->rank; d++) {
    if (m->max_batch_size > 0 && d == 0) {
      sh.dims[0] = 1; /* one row */
    } else if (in->dims[d] < 0) {
      snprintf(why, sizeof why, "a raw binary request needs the input's whole shape from the "
               "model, but dimension %d of '%s' varies: send JSON with its shape", d, in->name);
      return gs_http_reply_error(err, 400, why), GS_EINVAL;
    } else {
      sh.dims[d] = in->dims[d];
    }
  }
  int64_t count = gs_shape_numel(&sh);
  r->shapes[0] = sh;
  if (count < 0 || (uint64_t)count > len) {
    snprintf(why, sizeof why, "the raw body has %zu bytes, too few for the %s values of input "
             "'%s'", len, count < 0 ? "overflowing number of" : "model's", in->name);
    return gs_http_reply_error(err, 400, why), GS_EINVAL;
  }
  if (in->dtype == GS_DT_BYTES) {
    int rc = gs_kserve_strings_from_binary(body, len, count, &r->owned[0], in->name, why, sizeof why);
    if (rc < 0)
      return gs_http_reply_error(err, rc == GS_ENOMEM ? 500 : 400, why), rc;
    r->inputs[0] = r->owned[0];
  } else {
    size_t bytes = (size_t)count * gs_dtype_size(in->dtype);
    if (len != bytes) {
      char shape[128];
      snprintf(why, sizeof why, "the raw body has %zu bytes; input '%s' of shape %s and type %s "
               "needs %zu", len, in->name, gs_shape_str(&sh, shape, sizeof shape),
               gs_kserve_dtype_name(in->dtype), bytes);
      return gs_http_reply_error(err, 400, why), GS_EINVAL;
    }
    r->inputs[0] = body; /* read in place: the body outlives the request */
  }
  for (int i = 0; i < model->n_outputs; i++)
    r->send[i] = r->binary[i] = true;
  return GS_OK;
}

/* ---- the reply of an all-binary request, written directly ------------------------------- */

/* Text a JSON string can hold as it is: printable ASCII without quote or
 * backslash (what model, version, id and tensor names nearly always are). */
static bool plain(const char *s) {
  for (; *s; s++)
    if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
      return false;
  return true;
}

typedef struct reply_text {
  char *p;
  size_t len, cap;
} reply_text;

static void put(reply_text *t, const char *s, size_t n) {
  if (t->len + n <= t->cap)
    memcpy(t->p + t->len, s, n);
  t->len += n; /* past cap: counted, so the caller sees it did not fit */
}

static void put_str(reply_text *t, const char *s) {
  put(t, s, strlen(s));
}

static void put_u64(reply_text *t, uint64_t v) {
  char digits[24];
  int n = 0;
  do
    digits[sizeof digits - 1 - n++] = (char)('0' + v % 10);
  while ((v /= 10) && n < 24);
  put(t, digits + sizeof digits - n, (size_t)n);
}

/* When every output goes as binary data and every name is plain, the JSON
 * part of the reply is written here, not built as a jansson tree and
 * dumped: for a small model that tree (a malloc per value, and printf per
 * number in json_dumps) cost about a tenth of the server's time per request
 * (perf, bench/serve at concurrency 16). Returns false to leave it to the
 * general path below. */
static bool encode_binary_fast(const gs_infer_request *r, gs_http_reply *out) {
  const gs_model *model = r->version->model;
  size_t binary_total = 0, sizes[GS_REQ_MAX_IO] = {0};
  if (!plain(r->model->name) || (r->has_id && !plain(r->id)))
    return false;
  for (int i = 0; i < model->n_outputs; i++) {
    if (!r->send[i])
      continue;
    const gs_plan_value_info *info = &r->out_info[i];
    if (!r->binary[i] || info->dtype == GS_DT_BYTES || !plain(info->name))
      return false;
    sizes[i] = info->bytes;
    binary_total += sizes[i];
  }
  reply_text t = {.cap = 512 + 192 * (size_t)model->n_outputs};
  if (!(t.p = malloc(t.cap + binary_total)))
    return false;
  put_str(&t, "{\"model_name\":\"");
  put_str(&t, r->model->name);
  put_str(&t, "\",\"model_version\":\"");
  put_u64(&t, (uint64_t)r->version->number);
  put_str(&t, "\"");
  if (r->has_id) {
    put_str(&t, ",\"id\":\"");
    put_str(&t, r->id);
    put_str(&t, "\"");
  }
  put_str(&t, ",\"outputs\":[");
  bool first = true;
  for (int i = 0; i < model->n_outputs; i++) {
    if (!r->send[i])
      continue;
    const gs_plan_value_info *info = &r->out_info[i];
    put_str(&t, first ? "{\"name\":\"" : ",{\"name\":\"");
    first = false;
    put_str(&t, info->name);
    put_str(&t, "\",\"datatype\":\"");
    put_str(&t, gs_kserve_dtype_name(info->dtype));
    put_str(&t, "\",\"shape\":[");
    for (int d = 0; d < info->shape.rank; d++) {
      if (d)
        put(&t, ",", 1);
      put_u64(&t, (uint64_t)info->shape.dims[d]);
    }
    put_str(&t, "],\"parameters\":{\"binary_data_size\":");
    put_u64(&t, sizes[i]);
    put_str(&t, "}}");
  }
  put_str(&t, "]}");
  if (t.len > t.cap) { /* longer names than room was made for */
    free(t.p);
    return false;
  }
  size_t at = t.len;
  for (int i = 0; i < model->n_outputs; i++)
    if (r->send[i]) {
      memcpy(t.p + at, r->outputs[i], sizes[i]);
      at += sizes[i];
    }
  *out = (gs_http_reply){.status = 200, .body = t.p, .len = at,
                         .header_len = binary_total ? t.len : 0};
  snprintf(out->content_type, sizeof out->content_type,
           binary_total ? "application/octet-stream" : "application/json");
  return true;
}

int gs_kserve_encode(const gs_infer_request *r, gs_http_reply *out) {
  if (r->status != 200)
    return gs_http_reply_error(out, r->status, r->error);
  if (encode_binary_fast(r, out))
    return GS_OK;
  const gs_model *model = r->version->model;
  json_t *res = json_object(), *outs = json_array();
  json_object_set_new(res, "model_name", json_string(r->model->name));
  char num[32];
  snprintf(num, sizeof num, "%lld", (long long)r->version->number);
  json_object_set_new(res, "model_version", json_string(num));
  if (r->has_id)
    json_object_set_new(res, "id", json_string(r->id));
  size_t binary_total = 0, binary_size[GS_REQ_MAX_IO] = {0};
  for (int i = 0; i < model->n_outputs; i++) {
    if (!r->send[i])
      continue;
    const gs_plan_value_info *info = &r->out_info[i];
    int64_t numel = gs_shape_numel(&info->shape);
    bool strings = info->dtype == GS_DT_BYTES;
    json_t *o = json_object(), *shape = json_array();
    json_object_set_new(o, "name", json_string(info->name));
    json_object_set_new(o, "datatype", json_string(gs_kserve_dtype_name(info->dtype)));
    for (int d = 0; d < info->shape.rank; d++)
      json_array_append_new(shape, json_integer(info->shape.dims[d]));
    json_object_set_new(o, "shape", shape);
    if (r->binary[i]) {
      binary_size[i] = strings ? gs_kserve_strings_binary_size(r->outputs[i], numel) : info->bytes;
      if (binary_size[i] == SIZE_MAX) {
        json_decref(o);
        json_decref(outs);
        json_decref(res);
        return gs_http_reply_error(out, 500, "an output string is longer than the binary form's "
                                             "4-byte length can say");
      }
      json_t *p = json_object();
      json_object_set_new(p, "binary_data_size", json_integer((json_int_t)binary_size[i]));
      json_object_set_new(o, "parameters", p);
      binary_total += binary_size[i];
    } else {
      json_t *data = strings ? gs_kserve_strings_json(r->outputs[i], numel)
                             : gs_kserve_data_json(info->dtype, r->outputs[i], numel);
      if (!data) {
        char why[300];
        snprintf(why, sizeof why, "output '%s' holds %s, which JSON cannot carry: ask for it "
                 "with binary_data", info->name,
                 strings ? "bytes that are not valid UTF-8" : "NaN or an infinity");
        json_decref(o);
        json_decref(outs);
        json_decref(res);
        return gs_http_reply_error(out, 400, why);
      }
      json_object_set_new(o, "data", data);
    }
    json_array_append_new(outs, o);
  }
  json_object_set_new(res, "outputs", outs);
  char *text = json_dumps(res, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(res);
  size_t tl = text ? strlen(text) : 0;
  /* JSON alone (the usual reply) goes as dumped; binary parts follow a copy. */
  out->body = text && binary_total ? realloc(text, tl + binary_total + 1) : text;
  if (!out->body) {
    free(text);
    return gs_http_reply_error(out, 500, "out of memory encoding the reply");
  }
  size_t at = tl;
  for (int i = 0; i < model->n_outputs; i++)
    if (r->send[i] && r->binary[i]) {
      if (r->out_info[i].dtype == GS_DT_BYTES)
        gs_kserve_strings_to_binary(r->outputs[i], gs_shape_numel(&r->out_info[i].shape), out->body + at);
      else
        memcpy(out->body + at, r->outputs[i], binary_size[i]);
      at += binary_size[i];
    }
  out->len = at;
  out->status = 200;
  out->header_len = binary_total ? tl : 0;
  snprintf(out->content_type, sizeof out->content_type,
           binary_total ? "application/octet-stream" : "application/json");
  return GS_OK;
}

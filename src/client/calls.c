/* calls.c - the client's calls other than inference: health, metadata,
 * models, jobs (submit, list, get, cancel, wait, logs), devices, bookings,
 * usage and tenants, each one or a few requests to the daemon. */
#include "client/client_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* GET path, answering GS_OK for 2xx, GS_EBUSY for 503, else the error. */
static int probe(gs_client *c, const char *path) {
  client_exchange x = {.method = "GET", .path = path};
  int rc = client_perform(c, &x);
  if (rc == GS_OK)
    rc = client_status_error(c, &x, path);
  free(x.body);
  return rc;
}

int gs_client_live(gs_client *c) { return probe(c, "/v2/health/live"); }
int gs_client_ready(gs_client *c) { return probe(c, "/v2/health/ready"); }

int gs_client_server_metadata(gs_client *c, char **json) {
  return gs_client_request(c, "GET", "/v2", NULL, json);
}

/* ---- models --------------------------------------------------------------------------- */

int gs_client_images(gs_client *c, char **json) {
  return gs_client_request(c, "GET", "/api/v1/images", NULL, json);
}

int gs_client_models(gs_client *c, char **json) {
  return gs_client_request(c, "POST", "/v2/repository/index", "{}", json);
}

static int model_path(const char *model, const char *version, const char *tail, char *out,
                      size_t cap) {
  if (!model || !*model)
    return GS_EINVAL;
  char name[400], ver[64];
  client_escape(model, name, sizeof name);
  if (version && *version) {
    client_escape(version, ver, sizeof ver);
    snprintf(out, cap, "/v2/models/%s/versions/%s%s", name, ver, tail);
  } else {
    snprintf(out, cap, "/v2/models/%s%s", name, tail);
  }
  return GS_OK;
}

static int repository_action(gs_client *c, const char *model, const char *action) {
  if (!model || !*model)
    return client_fail(c, GS_EINVAL, "%s: which model?", action);
  char name[400], path[600];
  client_escape(model, name, sizeof name);
  snprintf(path, sizeof path, "/v2/repository/models/%s/%s", name, action);
  return gs_client_request(c, "POST", path, "{}", NULL);
}

int gs_client_model_load(gs_client *c, const char *model) {
  return repository_action(c, model, "load");
}

int gs_client_model_unload(gs_client *c, const char *model) {
  return repository_action(c, model, "unload");
}

int gs_client_model_metadata(gs_client *c, const char *model, const char *version, char **json) {
  char path[600];
  if (model_path(model, version, "", path, sizeof path) < 0)
    return client_fail(c, GS_EINVAL, "metadata: which model?");
  return gs_client_request(c, "GET", path, NULL, json);
}

int gs_client_model_config(gs_client *c, const char *model, const char *version, char **json) {
  char path[600];
  if (model_path(model, version, "/config", path, sizeof path) < 0)
    return client_fail(c, GS_EINVAL, "config: which model?");
  return gs_client_request(c, "GET", path, NULL, json);
}

int gs_client_model_ready(gs_client *c, const char *model, const char *version) {
  char path[600];
  if (model_path(model, version, "/ready", path, sizeof path) < 0)
    return client_fail(c, GS_EINVAL, "ready: which model?");
  return probe(c, path);
}

int gs_client_model_stats(gs_client *c, const char *model, char **json) {
  char path[600];
  if (!model)
    snprintf(path, sizeof path, "/v2/models/stats");
  else if (model_path(model, NULL, "/stats", path, sizeof path) < 0)
    return client_fail(c, GS_EINVAL, "stats: which model?");
  return gs_client_request(c, "GET", path, NULL, json);
}

/* ---- jobs ----------------------------------------------------------------------------- */

/* A request body from a JSON value; the value is consumed. */
static int request_json(gs_client *c, const char *method, const char *path, json_t *body,
                        json_t **out) {
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (body && !text)
    return client_fail(c, GS_ENOMEM, "out of memory");
  char *answer = NULL;
  int rc = gs_client_request(c, method, path, text, out ? &answer : NULL);
  free(text);
  if (rc == GS_OK && out && !(*out = json_loads(answer, 0, NULL)))
    rc = client_fail(c, GS_EIO, "%s: the daemon's answer is not JSON", path);
  free(answer);
  return rc;
}

/* Sets key to a JSON string; false when the text is not UTF-8. */
static bool put_string(json_t *obj, const char *key, const char *value) {
  json_t *s = json_string(value);
  return s && json_object_set_new(obj, key, s) == 0;
}

/* A NULL-terminated list of strings as a JSON array, or NULL when one is
 * not UTF-8 (a command with a part silently missing would run something
 * else). */
static json_t *string_array(const char *const *list) {
  json_t *a = json_array();
  for (; a && list && *list; list++) {
    json_t *s = json_string(*list);
    if (!s || json_array_append_new(a, s) != 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

int gs_client_job_submit(gs_client *c, const gs_client_job_spec *spec, int64_t *id, char **json) {
  if (json)
    *json = NULL;
  if (!spec || !spec->argv || !spec->argv[0])
    return client_fail(c, GS_EINVAL, "submit: no command");
  json_t *cmd = string_array(spec->argv), *env = string_array(spec->env);
  if (!cmd || !env) {
    json_decref(cmd);
    json_decref(env);
    return client_fail(c, GS_EINVAL, "submit: the command or its environment is not valid UTF-8");
  }
  json_t *body = json_object();
  json_object_set_new(body, "command", cmd); /* steals it, even on failure */
  json_object_set_new(body, "env", env);
  bool ok = body != NULL;
  ok = ok && (!spec->name || put_string(body, "name", spec->name)) &&
       (!spec->gpu_mem || put_string(body, "gpu_mem", spec->gpu_mem)) &&
       (!spec->mem || put_string(body, "mem", spec->mem)) &&
       (!spec->time_limit || put_string(body, "time_limit", spec->time_limit)) &&
       (!spec->chdir || put_string(body, "chdir", spec->chdir)) &&
       (!spec->image || put_string(body, "image", spec->image)) &&
       (!spec->network || put_string(body, "network", spec->network)) &&
       (!spec->partition || put_string(body, "partition", spec->partition));
  if (ok && spec->mounts) { /* set_new takes it, also on failure */
    json_t *mounts = string_array(spec->mounts);
    ok = mounts && json_object_set_new(body, "mounts", mounts) == 0;
  }
  if (!ok) {
    json_decref(body);
    return client_fail(c, GS_EINVAL, "submit: a name, size, time, directory, image, mount or partition is "
                       "not valid UTF-8");
  }
  if (spec->gpus)
    json_object_set_new(body, "gpus", json_integer(spec->gpus));
  if (spec->gpu_share > 0)
    json_object_set_new(body, "gpu_share", json_integer(spec->gpu_share));
  if (spec->cpus > 0)
    json_object_set_new(body, "cpus", json_real(spec->cpus));
  if (spec->priority)
    json_object_set_new(body, "priority", json_integer(spec->priority));
  if (spec->requeue)
    json_object_set_new(body, "requeue", json_true());
  if (spec->writable_root)
    json_object_set_new(body, "writable_root", json_true());
  if (spec->nodes)
    json_object_set_new(body, "nodes", json_integer(spec->nodes));
  if (spec->gpus_per_node)
    json_object_set_new(body, "gpus_per_node", json_integer(spec->gpus_per_node));
  if (spec->ntasks_per_node)
    json_object_set_new(body, "ntasks_per_node", json_integer(spec->ntasks_per_node));
  if (spec->mpi)
    json_object_set_new(body, "mpi", json_true());
  json_t *job = NULL;
  int rc = request_json(c, "POST", "/api/v1/jobs", body, &job);
  if (rc == GS_OK) {
    if (id)
      *id = (int64_t)json_integer_value(json_object_get(job, "id"));
    if (json && !(*json = json_dumps(job, JSON_COMPACT)))
      rc = client_fail(c, GS_ENOMEM, "out of memory");
  }
  json_decref(job);
  return rc;
}

int gs_client_jobs(gs_client *c, bool all, char **json) {
  return gs_client_request(c, "GET", all ? "/api/v1/jobs?all=1" : "/api/v1/jobs", NULL, json);
}

int gs_client_job(gs_client *c, int64_t id, char **json) {
  char path[64];
  snprintf(path, sizeof path, "/api/v1/jobs/%lld", (long long)id);
  return gs_client_request(c, "GET", path, NULL, json);
}

int gs_client_job_cancel(gs_client *c, int64_t id) {
  char path[64];
  snprintf(path, sizeof path, "/api/v1/jobs/%lld", (long long)id);
  return gs_client_request(c, "DELETE", path, NULL, NULL);
}

static bool finished(const char *state) {
  static const char *const running[] = {"PENDING", "RUNNING"};
  for (size_t i = 0; i < sizeof running / sizeof running[0]; i++)
    if (strcmp(state, running[i]) == 0)
      return false;
  return true;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The daemon answers a job's state; waiting polls it, from every 20 ms
 * doubling up to every 0.5 s, so that a short job is seen ending at once
 * and a long one costs little. */
int gs_client_job_wait(gs_client *c, int64_t id, double timeout_s, char state[32],
                       int *exit_code) {
  char path[64];
  snprintf(path, sizeof path, "/api/v1/jobs/%lld", (long long)id);
  double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  for (long pause_us = 20000;; pause_us = pause_us < 500000 ? pause_us * 2 : pause_us) {
    json_t *j = NULL;
    int rc = request_json(c, "GET", path, NULL, &j);
    if (rc < 0)
      return rc;
    const char *st = json_string_value(json_object_get(j, "state"));
    if (st && finished(st)) {
      if (state)
        snprintf(state, 32, "%s", st);
      json_t *code = json_object_get(j, "exit_code"), *sig = json_object_get(j, "signal");
      if (exit_code)
        *exit_code = json_is_integer(sig)    ? 128 + (int)json_integer_value(sig)
                     : json_is_integer(code) ? (int)json_integer_value(code)
                                             : -1;
      json_decref(j);
      return GS_OK;
    }
    json_decref(j);
    if (deadline && now_s() + (double)pause_us / 1e6 > deadline)
      return client_fail(c, GS_ETIMEDOUT, "job %lld has not finished within %g s", (long long)id,
                         timeout_s);
    struct timespec ts = {pause_us / 1000000, (pause_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
}

typedef struct log_reader {
  gs_client *c;
  client_exchange *x;
  gs_client_data_fn fn;
  void *ctx;
  size_t got;
} log_reader;

static size_t on_log(const char *data, size_t len, void *arg) {
  log_reader *r = arg;
  if (len && r->fn(data, len, r->ctx) != 0) {
    r->x->sink_error = client_fail(r->c, GS_ECANCELED, "logs: stopped by the callback");
    return 0;
  }
  r->got += len;
  return len;
}

int gs_client_job_logs(gs_client *c, int64_t id, bool stderr_stream, bool follow,
                       gs_client_data_fn on_data, void *ctx) {
  if (!on_data)
    return client_fail(c, GS_EINVAL, "logs: no callback");
  char job_path[64], path[160];
  snprintf(job_path, sizeof job_path, "/api/v1/jobs/%lld", (long long)id);
  long long offset = 0;
  for (long pause_us = 20000;; pause_us = pause_us < 500000 ? pause_us * 2 : pause_us) {
    /* The state first: once it has finished, reading to the end gets all. */
    bool done = true;
    if (follow) {
      json_t *j = NULL;
      int rc = request_json(c, "GET", job_path, NULL, &j);
      if (rc < 0)
        return rc;
      const char *st = json_string_value(json_object_get(j, "state"));
      done = !st || finished(st);
      json_decref(j);
    }
    for (;;) { /* the daemon answers up to a chunk at a time */
      snprintf(path, sizeof path, "/api/v1/jobs/%lld/logs?stream=%s&offset=%lld", (long long)id,
               stderr_stream ? "stderr" : "stdout", offset);
      client_exchange x = {.method = "GET", .path = path, .sink = on_log};
      log_reader r = {.c = c, .x = &x, .fn = on_data, .ctx = ctx};
      x.sink_ctx = &r;
      int rc = client_perform(c, &x);
      if (rc == GS_OK)
        rc = client_status_error(c, &x, "logs");
      free(x.body);
      if (rc < 0)
        return rc;
      offset += (long long)r.got;
      if (r.got == 0)
        break;
    }
    if (done)
      return GS_OK;
    struct timespec ts = {pause_us / 1000000, (pause_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
}

/* ---- devices, bookings, usage, tenants ---------------------------------------------------------- */

int gs_client_devices(gs_client *c, char **json) {
  return gs_client_request(c, "GET", "/api/v1/devices", NULL, json);
}

int gs_client_bookings(gs_client *c, char **json) {
  return gs_client_request(c, "GET", "/api/v1/bookings", NULL, json);
}

int gs_client_usage(gs_client *c, const char *tenant, double since, char **json) {
  char path[600], name[400];
  int n = snprintf(path, sizeof path, "/api/v1/usage?since=%.3f", since > 0 ? since : 0.0);
  if (tenant && *tenant) {
    client_escape(tenant, name, sizeof name);
    snprintf(path + n, sizeof path - (size_t)n, "&tenant=%s", name);
  }
  return gs_client_request(c, "GET", path, NULL, json);
}

int gs_client_tenants(gs_client *c, char **json) {
  return gs_client_request(c, "GET", "/api/v1/tenants", NULL, json);
}

int gs_client_tenant_add(gs_client *c, const char *tenant_json, char **json) {
  if (!tenant_json)
    return client_fail(c, GS_EINVAL, "tenant add: no description");
  return gs_client_request(c, "POST", "/api/v1/tenants", tenant_json, json);
}

static int tenant_path(gs_client *c, const char *name, const char *tail, char *out, size_t cap) {
  if (!name || !*name)
    return client_fail(c, GS_EINVAL, "which tenant?");
  char esc[400];
  client_escape(name, esc, sizeof esc);
  snprintf(out, cap, "/api/v1/tenants/%s%s", esc, tail);
  return GS_OK;
}

int gs_client_tenant_remove(gs_client *c, const char *name) {
  char path[600];
  int rc = tenant_path(c, name, "", path, sizeof path);
  return rc < 0 ? rc : gs_client_request(c, "DELETE", path, NULL, NULL);
}

int gs_client_tenant_token(gs_client *c, const char *name, char **json) {
  char path[600];
  int rc = tenant_path(c, name, "/tokens", path, sizeof path);
  return rc < 0 ? rc : gs_client_request(c, "POST", path, NULL, json);
}

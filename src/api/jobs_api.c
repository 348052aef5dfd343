/* jobs_api.c - /api/v1: jobs (submit, list, get, cancel, logs), tenants
 * (admin), devices, bookings and usage, over the front desk. Bodies and
 * replies are JSON; errors are {"error": ...} with 400, 401, 403, 404, 409. */
#include "api/jobs_api.h"
#include "api/jobs_json.h"
#include "sched/holds.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/units.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_CHUNK (1 << 20)

static int status_of(int code) {
  switch (code) {
  case GS_ENOENT: return 404;
  case GS_EPERM: return 403;
  case GS_EEXIST:
  case GS_EBUSY:
  case GS_ESTATE: return 409;
  case GS_EIO:
  case GS_ENOMEM:
  case GS_EINTERNAL: return 500;
  default: return 400;
  }
}

static bool fail(gs_http_reply *r, int code) {
  gs_http_reply_error(r, status_of(code), gs_error_detail());
  return true;
}

/* A size given as a number of bytes or as text ("16G"). */
static int get_bytes(json_t *body, const char *key, uint64_t *out) {
  json_t *v = json_object_get(body, key);
  if (!v || json_is_null(v))
    return GS_OK;
  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    *out = (uint64_t)json_integer_value(v);
    return GS_OK;
  }
  if (json_is_string(v)) {
    int rc = gs_parse_bytes(json_string_value(v), out);
    return rc < 0 ? gs_error_prefix(rc, key) : GS_OK;
  }
  return gs_error(GS_EINVAL, "%s must be a size in bytes or text such as \"16G\"", key);
}

static int get_number(json_t *body, const char *key, double lo, double hi, double *out) {
  json_t *v = json_object_get(body, key);
  if (!v || json_is_null(v))
    return GS_OK;
  if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi)
    return gs_error(GS_EINVAL, "%s must be a number from %g to %g", key, lo, hi);
  *out = json_number_value(v);
  return GS_OK;
}

static int get_int(json_t *body, const char *key, int lo, int hi, int *out) {
  json_t *v = json_object_get(body, key);
  if (!v || json_is_null(v))
    return GS_OK;
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return gs_error(GS_EINVAL, "%s must be a whole number from %d to %d", key, lo, hi);
  *out = (int)json_integer_value(v);
  return GS_OK;
}

static int get_string(json_t *body, const char *key, const char **out) {
  json_t *v = json_object_get(body, key);
  if (!v || json_is_null(v))
    return GS_OK;
  if (!json_is_string(v))
    return gs_error(GS_EINVAL, "%s must be a string", key);
  *out = json_string_value(v);
  return GS_OK;
}

static json_t *parse_body(const char *body, size_t len, gs_http_reply *r) {
  json_error_t err;
  json_t *j = json_loadb(body ? body : "", len, 0, &err);
  if (!j || !json_is_object(j)) {
    char msg[300];
    snprintf(msg, sizeof msg, "the body is not a JSON object%s%s", j ? "" : ": ",
             j ? "" : err.text);
    json_decref(j);
    gs_http_reply_error(r, 400, msg);
    return NULL;
  }
  return j;
}

/* A JSON list of strings (`what` says which) as a NULL-terminated array
 * pointing into it (free the array, not the strings); absent: NULL, fine. */
static int string_list(json_t *body, const char *key, bool required, const char ***out) {
  json_t *v = json_object_get(body, key), *e;
  *out = NULL;
  if (!v && !required)
    return GS_OK;
  bool is_env = strcmp(key, "env") == 0;
  if (!json_is_array(v) || (required && json_array_size(v) == 0))
    return gs_error(GS_EINVAL, required ? "a job needs a command: a list of strings"
                    : is_env ? "%s must be a list of \"NAME=VALUE\""
                             : "%s must be a list of strings", key);
  const char **list = calloc(json_array_size(v) + 1, sizeof *list);
  if (!list)
    return gs_error(GS_ENOMEM, "out of memory reading %s", key);
  size_t i;
  json_array_foreach(v, i, e) {
    if (!json_is_string(e) || (required && !json_string_length(e))) {
      free(list);
      return required ? gs_error(GS_EINVAL, "the command's arguments must be non-empty strings "
                                            "(argument %zu)", i)
             : is_env ? gs_error(GS_EINVAL, "env entry %zu is not \"NAME=VALUE\"", i)
                      : gs_error(GS_EINVAL, "%s entry %zu is not a string", key, i);
    }
    list[i] = json_string_value(e);
  }
  *out = list;
  return GS_OK;
}

/* The job as JSON, or its id alone when it cannot be read back. */
static json_t *job_reply(gs_frontdesk *fd, const gs_principal *who, int64_t id) {
  gs_job_info info;
  if (gs_job_get(fd, who, id, &info) < 0)
    return NULL;
  json_t *j = gs_job_json(&info);
  gs_job_info_free(&info);
  return j;
}

/* The fields of a job's body into b->req; -1 with the reason recorded. */
static int read_job_fields(json_t *j, gs_job_body *b) {
  gs_job_request *req = &b->req;
  int gpus = 0, share = 0;
  json_t *lim = json_object_get(j, "time_limit");
  int rc = string_list(j, "command", true, &b->argv);
  if (rc == 0)
    rc = string_list(j, "env", false, &b->env);
  if (rc == 0)
    rc = string_list(j, "mounts", false, &b->mounts);
  req->argv = b->argv;
  req->env = b->env;
  req->mounts = b->mounts;
  if (rc == 0)
    rc = get_string(j, "name", &req->name);
  if (rc == 0)
    rc = get_string(j, "image", &req->image);
  if (rc == 0)
    rc = get_string(j, "network", &req->network);
  json_t *wr = json_object_get(j, "writable_root");
  if (rc == 0 && wr && !json_is_boolean(wr))
    rc = gs_error(GS_EINVAL, "writable_root must be true or false");
  req->writable_root = json_is_true(wr);
  if (rc == 0)
    rc = get_string(j, "chdir", &req->chdir);
  if (rc == 0)
    rc = get_int(j, "gpus", 0, GS_SCHED_MAX_DEVICES, &gpus);
  if (rc == 0)
    rc = get_int(j, "gpu_share", 0, 100, &share);
  if (rc == 0)
    rc = get_bytes(j, "gpu_mem", &req->need.gpu_mem);
  if (rc == 0)
    rc = get_bytes(j, "mem", &req->need.host_mem);
  if (rc == 0)
    rc = get_number(j, "cpus", 0, 1e6, &req->need.cpus);
  if (rc == 0 && json_is_number(json_object_get(j, "cpus")) && req->need.cpus <= 0)
    rc = gs_error(GS_EINVAL, "cpus must be more than 0: a job without a CPU limit is not "
                             "allowed (leave cpus out for the daemon's default)");
  if (rc == 0)
    rc = get_int(j, "priority", -1000, 1000, &req->priority);
  if (rc == 0 && json_is_integer(lim) && json_integer_value(lim) >= 0)
    req->time_limit_s = json_integer_value(lim);
  else if (rc == 0 && json_is_string(lim))
    rc = gs_parse_duration(json_string_value(lim), &req->time_limit_s);
  else if (rc == 0 && lim && !json_is_null(lim))
    rc = gs_error(GS_EINVAL, "time_limit must be seconds or text such as \"2h\"");
  json_t *rq = json_object_get(j, "requeue");
  if (rc == 0 && rq && !json_is_boolean(rq))
    rc = gs_error(GS_EINVAL, "requeue must be true or false");
  req->requeue = json_is_true(rq);
  if (rc == 0)
    rc = get_int(j, "nodes", 0, 100000, &req->nodes);
  if (rc == 0)
    rc = get_int(j, "gpus_per_node", 0, 4096, &req->gpus_per_node);
  if (rc == 0)
    rc = get_int(j, "ntasks_per_node", 0, 4096, &req->ntasks_per_node);
  if (rc == 0)
    rc = get_string(j, "partition", &req->partition);
  json_t *mpi = json_object_get(j, "mpi");
  if (rc == 0 && mpi && !json_is_boolean(mpi))
    rc = gs_error(GS_EINVAL, "mpi must be true or false");
  req->mpi = json_is_true(mpi);
  req->need.gpus = gpus;
  req->need.gpu_share = share;
  return rc;
}

int gs_job_body_parse(const char *body, size_t len, gs_job_body *b, gs_http_reply *err) {
  memset(b, 0, sizeof *b);
  /* cpus and mem left out: the daemon's defaults (gs_job_request). */
  if (!(b->json = parse_body(body, len, err)))
    return GS_EINVAL;
  int rc = read_job_fields(b->json, b);
  if (rc < 0) {
    fail(err, rc);
    gs_job_body_free(b);
  }
  return rc;
}

void gs_job_body_free(gs_job_body *b) {
  free(b->argv);
  free(b->env);
  free(b->mounts);
  json_decref(b->json);
  memset(b, 0, sizeof *b);
}

/* POST /api/v1/jobs */
static bool submit(gs_frontdesk *fd, const gs_principal *who, const char *body, size_t len,
                   gs_http_reply *r) {
  gs_job_body b;
  if (gs_job_body_parse(body, len, &b, r) < 0)
    return true;
  int64_t id = 0;
  int rc = gs_job_submit(fd, who, &b.req, &id);
  gs_job_body_free(&b);
  if (rc < 0)
    return fail(r, rc);
  json_t *job = job_reply(fd, who, id);
  gs_http_reply_json(r, 201, job ? job : json_pack("{s:I}", "id", (json_int_t)id));
  return true;
}

/* GET /api/v1/jobs/{id}/logs?stream=stdout&offset=N: the bytes from N on
 * (up to 1 MiB), as they are. */
static bool logs(gs_frontdesk *fd, const gs_principal *who, int64_t id, const gs_jobs_query *q,
                 gs_http_reply *r) {
  char path[700];
  bool ended;
  int rc = gs_job_log_path(fd, who, id, q->stream ? q->stream : "stdout", path, sizeof path,
                           &ended);
  if (rc < 0)
    return fail(r, rc);
  char *end = NULL;
  long long offset = q->offset ? strtoll(q->offset, &end, 10) : 0;
  if (q->offset && (end == q->offset || *end || offset < 0)) {
    gs_http_reply_error(r, 400, "offset must be a byte offset (0 or more)");
    return true;
  }
  /* A log lies where the job's user can write (Slurm's are in a directory
   * that user owns): only a plain file with one name is read, never a FIFO
   * (O_NONBLOCK: opening one does not wait) nor a hard link to another. */
  int f = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (f >= 0 && (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)) {
    close(f);
    gs_http_reply_error(r, 403, "the job's log is not a plain file of its own");
    return true;
  }
  r->status = 200;
  snprintf(r->content_type, sizeof r->content_type, "text/plain; charset=utf-8");
  r->body = malloc(LOG_CHUNK + 1);
  r->len = 0;
  if (!r->body) {
    if (f >= 0)
      close(f);
    gs_http_reply_error(r, 500, "out of memory reading a log");
    return true;
  }
  if (f >= 0) { /* no file yet: the job has not started; an empty log */
    ssize_t got = pread(f, r->body, LOG_CHUNK, offset);
    r->len = got > 0 ? (size_t)got : 0;
    close(f);
  }
  r->body[r->len] = '\0';
  return true;
}

static bool jobs_routes(gs_frontdesk *fd, const gs_principal *who, bool get, bool post,
                        bool del, const char *rest, const gs_jobs_query *q, const char *body,
                        size_t len, gs_http_reply *r) {
  if (rest[0] == '\0') {
    if (post)
      return submit(fd, who, body, len, r);
    if (get) {
      bool all = q->all && strcmp(q->all, "0") != 0 && strcmp(q->all, "false") != 0;
      gs_job_info *jobs;
      int n, rc = gs_jobs_list(fd, who, all, q->tenant, &jobs, &n);
      if (rc < 0)
        return fail(r, rc);
      gs_http_reply_json(r, 200, json_pack("{s:o}", "jobs", gs_jobs_json(jobs, n)));
      gs_job_infos_free(jobs, n);
      return true;
    }
    return false;
  }
  char *end = NULL;
  long long id = strtoll(rest + 1, &end, 10);
  if (rest[0] != '/' || end == rest + 1 || id <= 0)
    return false;
  if (*end == '\0' && get) {
    json_t *j = job_reply(fd, who, id);
    if (!j)
      return fail(r, gs_error_code());
    gs_http_reply_json(r, 200, j);
    return true;
  }
  if (*end == '\0' && del) {
    int rc = gs_job_cancel(fd, who, id);
    if (rc < 0)
      return fail(r, rc);
    json_t *j = job_reply(fd, who, id);
    gs_http_reply_json(r, 200, j ? j : json_object());
    return true;
  }
  if (strcmp(end, "/logs") == 0 && get)
    return logs(fd, who, id, q, r);
  return false;
}

/* The fields of a tenant's body into t; -1 with the reason recorded. */
static int read_tenant_fields(json_t *b, gs_tenant *t) {
  const char *name = NULL, *user = NULL, *group = NULL;
  int rc = get_string(b, "name", &name);
  if (rc == 0)
    rc = get_string(b, "user", &user);
  if (rc == 0)
    rc = get_string(b, "group", &group);
  if (rc == 0)
    rc = get_number(b, "weight", 1e-6, 1e6, &t->weight);
  if (rc == 0)
    rc = get_int(b, "max_priority", -1000, 1000, &t->max_priority);
  json_t *quotas = json_object_get(b, "quotas");
  json_t *qs = quotas ? quotas : b;
  if (rc == 0)
    rc = get_number(qs, "devices", 0, 1e6, &t->max_devices);
  if (rc == 0)
    rc = get_bytes(qs, "device_mem", &t->max_device_mem);
  if (rc == 0)
    rc = get_int(qs, "jobs", 0, 1000000, &t->max_jobs);
  if (rc == 0)
    rc = get_number(qs, "cpus", 0, 1e6, &t->max_cpus);
  if (rc == 0)
    rc = get_bytes(qs, "mem", &t->max_host_mem);
  t->allow_root = json_is_true(json_object_get(b, "allow_root"));
  t->admin = json_is_true(json_object_get(b, "admin"));
  if (rc == 0 && (!name || !*name))
    rc = gs_error(GS_EINVAL, "a tenant needs a name");
  if (rc == 0 && (!user || !*user))
    rc = gs_error(GS_EINVAL, "tenant '%s' needs a Unix user for its jobs (\"user\")", name);
  if (rc == 0 && (strlen(name) >= sizeof t->name || strlen(user) >= sizeof t->unix_user ||
                  (group && strlen(group) >= sizeof t->unix_group)))
    rc = gs_error(GS_EINVAL, "names are at most 63 characters");
  if (rc == 0) {
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->unix_user, sizeof t->unix_user, "%s", user);
    snprintf(t->unix_group, sizeof t->unix_group, "%s", group ? group : "");
  }
  return rc;
}

int gs_tenant_body_parse(const char *body, size_t len, gs_tenant *t, gs_http_reply *err) {
  *t = (gs_tenant){.weight = 1};
  json_t *b = parse_body(body, len, err);
  if (!b)
    return GS_EINVAL;
  int rc = read_tenant_fields(b, t);
  json_decref(b);
  if (rc < 0)
    fail(err, rc);
  return rc;
}

/* POST /api/v1/tenants */
static bool add_tenant(gs_frontdesk *fd, const char *body, size_t len, gs_http_reply *r) {
  gs_tenant t;
  if (gs_tenant_body_parse(body, len, &t, r) < 0)
    return true;
  char token[96];
  int rc = gs_tenant_add(fd, &t, token, sizeof token);
  if (rc < 0)
    return fail(r, rc);
  gs_http_reply_json(r, 201, json_pack("{s:s, s:s}", "name", t.name, "token", token));
  return true;
}

static bool tenant_routes(gs_frontdesk *fd, const gs_principal *who, bool get, bool post,
                          bool del, const char *rest, const char *body, size_t len,
                          gs_http_reply *r) {
  if (!who->admin) {
    gs_http_reply_error(r, 403, "managing tenants needs an admin token");
    return true;
  }
  if (rest[0] == '\0' && get) {
    gs_tenant_info *tenants;
    int n, rc = gs_tenants_list(fd, &tenants, &n);
    if (rc < 0)
      return fail(r, rc);
    gs_http_reply_json(r, 200, json_pack("{s:o}", "tenants", gs_tenants_json(tenants, n)));
    free(tenants);
    return true;
  }
  if (rest[0] == '\0' && post)
    return add_tenant(fd, body, len, r);
  if (rest[0] != '/')
    return false;
  char name[128];
  const char *slash = strchr(rest + 1, '/');
  size_t n = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
  if (n == 0 || n >= sizeof name)
    return false;
  memcpy(name, rest + 1, n);
  name[n] = '\0';
  if (!slash && del) {
    int rc = gs_tenant_remove(fd, name);
    if (rc < 0)
      return fail(r, rc);
    gs_http_reply_json(r, 200, json_pack("{s:s}", "removed", name));
    return true;
  }
  if (slash && strcmp(slash, "/tokens") == 0 && post) {
    char token[96];
    int rc = gs_tenant_new_token(fd, name, token, sizeof token);
    if (rc < 0)
      return fail(r, rc);
    gs_http_reply_json(r, 201, json_pack("{s:s, s:s}", "name", name, "token", token));
    return true;
  }
  return false;
}

/* A job named in JSON: a string, or a positive integer (Slurm's ids) as
 * its decimal digits. NULL when neither. */
static const char *job_name(const json_t *v, char *buf, size_t cap) {
  if (json_is_string(v))
    return json_string_value(v);
  if (json_is_integer(v) && json_integer_value(v) > 0) {
    snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    return buf;
  }
  return NULL;
}

/* POST /api/v1/holds {"scheduler", "job", "user", "gpus": [indices]};
 * `scheduler` where the body names none (an older prolog's call). */
static int book_hold(gs_frontdesk *fd, const json_t *j, const char *scheduler) {
  int gpus[GS_BOOKING_MAX_PARTS], n = 0;
  char buf[32];
  json_t *list = json_object_get(j, "gpus");
  const char *job = job_name(json_object_get(j, "job"), buf, sizeof buf);
  if (json_object_get(j, "scheduler"))
    scheduler = json_string_value(json_object_get(j, "scheduler"));
  const char *user = json_string_value(json_object_get(j, "user"));
  if (!scheduler || !job || !user || !json_is_array(list) ||
      json_array_size(list) > GS_BOOKING_MAX_PARTS)
    return gs_error(GS_EINVAL, "a hold needs \"scheduler\", \"job\" (a string or a positive "
                               "integer), \"user\" and \"gpus\" (at most %d indices)",
                    GS_BOOKING_MAX_PARTS);
  for (size_t k = 0; k < json_array_size(list); k++) {
    json_t *g = json_array_get(list, k);
    if (!json_is_integer(g) || json_integer_value(g) < 0 || json_integer_value(g) > 1 << 20)
      return gs_error(GS_EINVAL, "gpus[%zu] is not a GPU index", k);
    gpus[n++] = (int)json_integer_value(g);
  }
  return gs_hold_book(gs_frontdesk_holds(fd), scheduler, job, user, gpus, n);
}

/* PUT /api/v1/holds/SCHEDULER {"jobs": [...], "as_of": T}: the jobs that
 * still ran at Unix time T (default: GS_HOLDS_RECONCILE_GRACE_S ago). */
static int reconcile_holds(gs_frontdesk *fd, const char *scheduler, const json_t *j) {
  json_t *list = json_object_get(j, "jobs"), *as_of = json_object_get(j, "as_of");
  size_t n = json_array_size(list);
  if (!json_is_array(list) || n > 100000 || (as_of && !json_is_number(as_of)))
    return gs_error(GS_EINVAL, "a reconcile needs \"jobs\": the jobs that still run (at most "
                               "100000), and may say \"as_of\": when they were listed "
                               "(Unix seconds)");
  const char **live = calloc(n + 1, sizeof *live);
  char (*bufs)[32] = calloc(n + 1, sizeof *bufs);
  int rc = live && bufs ? GS_OK : gs_error(GS_ENOMEM, "out of memory for a reconcile");
  for (size_t k = 0; rc == 0 && k < n; k++)
    if (!(live[k] = job_name(json_array_get(list, k), bufs[k], sizeof bufs[k])))
      rc = gs_error(GS_EINVAL, "jobs[%zu] is not a job", k);
  if (rc == 0)
    rc = gs_holds_reconcile(gs_frontdesk_holds(fd), scheduler, live, (int)n,
                            as_of ? json_number_value(as_of)
                                  : gs_wall_s() - GS_HOLDS_RECONCILE_GRACE_S);
  free(live);
  free(bufs);
  return rc;
}

/* Devices held for outside schedulers' jobs (holds.h): POST /api/v1/holds
 * books (Slurm's prolog), DELETE /api/v1/holds/SCHEDULER/JOB releases (its
 * epilog), PUT /api/v1/holds/SCHEDULER {"jobs": [...]} drops the holds of
 * jobs not listed. Admin only: slurmd runs the hooks as root. An older
 * gpusrv's hooks call POST /api/v1/slurm/jobs and DELETE .../slurm/jobs/N:
 * `legacy` (Slurm's holds, then). */
static bool holds_routes(gs_frontdesk *fd, const gs_principal *who, const char *method,
                         const char *rest, bool legacy, const char *body, size_t len,
                         gs_http_reply *r) {
  bool post = !strcmp(method, "POST"), put = !strcmp(method, "PUT") && !legacy,
       del = !strcmp(method, "DELETE");
  if (rest[0] != '\0' && rest[0] != '/')
    return false;
  if (!post && !put && !del)
    return false;
  if (!who->admin) {
    gs_http_reply_error(r, 403, "holding devices for a scheduler's jobs needs an admin token");
    return true;
  }
  char path[128];
  snprintf(path, sizeof path, "%s%s", legacy && rest[0] ? "/slurm" : "", rest);
  if (strlen(rest) + 6 >= sizeof path) {
    gs_http_reply_error(r, 400, "a hold's scheduler and job are 15 and 63 bytes at most");
    return true;
  }
  char scheduler[32] = "", job[96] = "";
  const char *slash = path[0] ? strchr(path + 1, '/') : NULL;
  if (path[0]) {
    snprintf(scheduler, sizeof scheduler, "%.*s",
             (int)(slash ? (size_t)(slash - path - 1) : strlen(path + 1)), path + 1);
    snprintf(job, sizeof job, "%s", slash ? slash + 1 : "");
  }
  int rc;
  json_t *j = NULL;
  if (path[0] == '\0' && post) {
    if (!(j = parse_body(body, len, r)))
      return true;
    rc = book_hold(fd, j, legacy ? "slurm" : NULL);
  } else if (scheduler[0] && !slash && put) {
    if (!(j = parse_body(body, len, r)))
      return true;
    rc = reconcile_holds(fd, scheduler, j);
  } else if (scheduler[0] && slash && del) {
    rc = gs_hold_release(gs_frontdesk_holds(fd), scheduler, job);
  } else {
    return false;
  }
  json_decref(j);
  if (rc < 0)
    return fail(r, rc);
  json_t *reply = json_pack("{s:o}", "bookings", gs_bookings_json(gs_frontdesk_ledger(fd)));
  if (put)
    json_object_set_new(reply, "dropped", json_integer(rc));
  gs_http_reply_json(r, 200, reply);
  return true;
}

bool gs_jobs_api_route(gs_frontdesk *fd, const gs_principal *who, const char *method,
                       const char *url, const gs_jobs_query *q, const char *body, size_t len,
                       gs_http_reply *r) {
  bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0,
       del = strcmp(method, "DELETE") == 0;
  if (strncmp(url, "/api/v1/jobs", 12) == 0)
    return jobs_routes(fd, who, get, post, del, url + 12, q, body, len, r);
  if (strncmp(url, "/api/v1/tenants", 15) == 0)
    return tenant_routes(fd, who, get, post, del, url + 15, body, len, r);
  if (strncmp(url, "/api/v1/holds", 13) == 0)
    return holds_routes(fd, who, method, url + 13, false, body, len, r);
  if (strncmp(url, "/api/v1/slurm/jobs", 18) == 0)
    return holds_routes(fd, who, method, url + 18, true, body, len, r);
  if (strcmp(url, "/api/v1/devices") == 0 && get) {
    gs_frontdesk_device devices[GS_SCHED_MAX_DEVICES];
    int n = gs_frontdesk_devices(fd, devices, GS_SCHED_MAX_DEVICES);
    bool all = q->all && strcmp(q->all, "0") != 0 && strcmp(q->all, "false") != 0;
    gs_http_reply_json(r, 200, json_pack("{s:o}", "devices", gs_devices_json(devices, n, all)));
    return true;
  }
  if (strcmp(url, "/api/v1/bookings") == 0 && get) {
    gs_http_reply_json(r, 200,
                       json_pack("{s:o}", "bookings", gs_bookings_json(gs_frontdesk_ledger(fd))));
    return true;
  }
  if (strcmp(url, "/api/v1/images") == 0 && get) {
    gs_image_info *images;
    int n, rc = gs_images_list(fd, who, &images, &n);
    if (rc < 0)
      return fail(r, rc);
    json_t *list = json_array();
    for (int i = 0; i < n; i++)
      json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:f}", "name", images[i].name,
                                            "id", images[i].id, "size",
                                            (json_int_t)images[i].size_bytes, "created",
                                            images[i].created));
    free(images);
    gs_http_reply_json(r, 200, json_pack("{s:o}", "images", list));
    return true;
  }
  if (strcmp(url, "/api/v1/usage") == 0 && get) {
    char *end = NULL;
    double since = q->since ? strtod(q->since, &end) : 0;
    if (q->since && (end == q->since || *end)) {
      gs_http_reply_error(r, 400, "since must be Unix seconds");
      return true;
    }
    gs_usage_row *rows;
    int n, rc = gs_usage_list(fd, who, q->tenant, since, &rows, &n);
    if (rc < 0)
      return fail(r, rc);
    gs_http_reply_json(r, 200, json_pack("{s:o}", "usage", gs_usage_json(rows, n)));
    free(rows);
    return true;
  }
  return false;
}

/* slurm_jobs.c - see slurm_jobs.h. */
#include "sched/slurm_jobs.h"
#include "sched/slurm_gpus.h"

#include "base/error.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GPUS GS_BOOKING_MAX_PARTS

typedef struct slurm_job {
  int64_t id;
  char user[64];
  int gpus[MAX_GPUS];
  int n_gpus;
  gs_booking *booking;
} slurm_job;

struct gs_slurm_jobs {
  gs_ledger *ledger;
  char path[600];
  char squeue[256];
  pthread_mutex_t lock;
  slurm_job *jobs;
  int n, cap;
};

/* ---- the file ----------------------------------------------------------------------------- */

/* Writes every job to the file, through a temporary and a rename, so that a
 * crash leaves the old list or the new one. With the lock held. */
static int save(gs_slurm_jobs *s) {
  json_t *list = json_array();
  for (int i = 0; i < s->n; i++) {
    json_t *gpus = json_array();
    for (int k = 0; k < s->jobs[i].n_gpus; k++)
      json_array_append_new(gpus, json_integer(s->jobs[i].gpus[k]));
    json_array_append_new(list, json_pack("{s:I, s:s, s:o}", "job", (json_int_t)s->jobs[i].id,
                                          "user", s->jobs[i].user, "gpus", gpus));
  }
  char tmp[640];
  snprintf(tmp, sizeof tmp, "%s.tmp", s->path);
  char *text = json_dumps(list, JSON_COMPACT);
  json_decref(list);
  int fd = text ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
  size_t len = text ? strlen(text) : 0;
  bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
  if (fd >= 0)
    ok = close(fd) == 0 && ok;
  free(text);
  if (!ok || rename(tmp, s->path) != 0) {
    int e = errno;
    unlink(tmp);
    return gs_error(GS_EIO, "cannot write %s: %s", s->path, strerror(e));
  }
  return GS_OK;
}

/* ---- bookings ----------------------------------------------------------------------------- */

/* Books what is left of the job's GPUs. With the lock held. */
static int book(gs_slurm_jobs *s, slurm_job *j) {
  gs_device_t *gpus[MAX_GPUS];
  int n = gs_slurm_gpus(gpus, MAX_GPUS);
  if (n > MAX_GPUS)
    n = MAX_GPUS;
  gs_booking_part parts[MAX_GPUS];
  for (int k = 0; k < j->n_gpus; k++) {
    int idx = j->gpus[k];
    if (idx < 0 || idx >= n)
      return gs_error(GS_EINVAL, "slurm job %lld: this node has no GPU %d (it has %d)",
                      (long long)j->id, idx, n);
    gs_device_t *d = gpus[idx];
    uint64_t cap = gs_ledger_capacity(s->ledger, d), used = gs_ledger_booked(s->ledger, d);
    int share = gs_ledger_share_booked(s->ledger, d);
    if (used > 0 || share > 0)
      GS_LOGW("slurm", "slurm job %lld: GPU %d (%s) already has %d%% of its compute and %llu "
              "bytes booked here; the job gets the rest", (long long)j->id, idx,
              gs_device_get_info(d)->id, share, (unsigned long long)used);
    parts[k] = (gs_booking_part){.device = d, .bytes = cap > used ? cap - used : 0,
                                 .share = 100 - share};
  }
  char owner[128];
  snprintf(owner, sizeof owner, "slurm job %lld (%s)", (long long)j->id, j->user);
  return gs_book(s->ledger, parts, j->n_gpus, owner, &j->booking);
}

/* book(), again where a model or a job booked on one of the GPUs between
 * reading what is left and booking it. */
static int book_rest(gs_slurm_jobs *s, slurm_job *j) {
  int rc = GS_ENOMEM;
  for (int attempt = 0; attempt < 5 && rc == GS_ENOMEM; attempt++)
    rc = book(s, j);
  return rc;
}

static slurm_job *find(gs_slurm_jobs *s, int64_t id) {
  for (int i = 0; i < s->n; i++)
    if (s->jobs[i].id == id)
      return &s->jobs[i];
  return NULL;
}

/* Room for one more job. */
static int grow(gs_slurm_jobs *s, int64_t id) {
  if (s->n < s->cap)
    return GS_OK;
  int cap = s->cap ? s->cap * 2 : 16;
  slurm_job *grown = realloc(s->jobs, sizeof *grown * (size_t)cap);
  if (!grown)
    return gs_error(GS_ENOMEM, "out of memory booking slurm job %lld", (long long)id);
  s->jobs = grown;
  s->cap = cap;
  return GS_OK;
}

/* Appends a job and books it; the job is not kept when booking fails. With
 * the lock held, or before the object is shared (open). */
static int add(gs_slurm_jobs *s, const slurm_job *j) {
  int rc = grow(s, j->id);
  if (rc < 0)
    return rc;
  s->jobs[s->n] = *j;
  rc = book_rest(s, &s->jobs[s->n]);
  if (rc == 0)
    s->n++;
  return rc;
}

/* Appends a job whose GPUs could not be booked again at a start: it stays
 * listed (and in the file) until squeue no longer shows it. */
static int add_unbooked(gs_slurm_jobs *s, const slurm_job *j) {
  int rc = grow(s, j->id);
  if (rc == 0) {
    s->jobs[s->n] = *j;
    s->jobs[s->n++].booking = NULL;
  }
  return rc;
}

/* Releases a job and moves the last one into its place: a caller that
 * drops while walking the list walks it downward. */
static void drop(gs_slurm_jobs *s, slurm_job *j) {
  gs_booking_release(j->booking);
  *j = s->jobs[--s->n];
}

int gs_slurm_job_book(gs_slurm_jobs *s, int64_t job_id, const char *user, const int *gpus,
                      int n_gpus) {
  if (job_id <= 0 || n_gpus < 0 || n_gpus > MAX_GPUS || !user || !user[0] ||
      strlen(user) >= sizeof ((slurm_job *)0)->user)
    return gs_error(GS_EINVAL, "a slurm job needs an id above 0, a user (under 64 bytes) and "
                               "at most %d GPUs", MAX_GPUS);
  slurm_job j = {.id = job_id, .n_gpus = n_gpus};
  snprintf(j.user, sizeof j.user, "%s", user);
  for (int k = 0; k < n_gpus; k++) {
    for (int q = 0; q < k; q++)
      if (gpus[q] == gpus[k])
        return gs_error(GS_EINVAL, "slurm job %lld names GPU %d twice", (long long)job_id,
                        gpus[k]);
    j.gpus[k] = gpus[k];
  }
  pthread_mutex_lock(&s->lock);
  int rc = GS_OK;
  if (!find(s, job_id) && n_gpus > 0) {
    rc = add(s, &j);
    if (rc == 0 && (rc = save(s)) < 0) {
      char why[256]; /* the file could not be written: not booked, so the prolog says so */
      snprintf(why, sizeof why, "%s", gs_error_detail());
      drop(s, &s->jobs[s->n - 1]);
      rc = gs_error(GS_EIO, "%s", why);
    }
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int gs_slurm_job_release(gs_slurm_jobs *s, int64_t job_id) {
  pthread_mutex_lock(&s->lock);
  slurm_job *j = find(s, job_id);
  int rc = GS_OK;
  if (!j)
    rc = gs_error(GS_ENOENT, "slurm job %lld has no booking here", (long long)job_id);
  else {
    drop(s, j);
    rc = save(s);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* ---- a restart ---------------------------------------------------------------------------- */

/* Books again the jobs the file keeps. */
static void load(gs_slurm_jobs *s) {
  json_error_t err;
  json_t *list = json_load_file(s->path, 0, &err);
  if (!list) {
    if (access(s->path, F_OK) == 0)
      GS_LOGW("slurm", "%s: %s (line %d); no Slurm job is booked again", s->path, err.text,
              err.line);
    return;
  }
  size_t i;
  json_t *e;
  json_array_foreach(list, i, e) {
    json_t *gpus = json_object_get(e, "gpus");
    const char *user = json_string_value(json_object_get(e, "user"));
    slurm_job j = {.id = (int64_t)json_integer_value(json_object_get(e, "job"))};
    if (!user || j.id <= 0 || !json_is_array(gpus) || json_array_size(gpus) > MAX_GPUS) {
      GS_LOGW("slurm", "%s: entry %zu is malformed; left out", s->path, i);
      continue;
    }
    snprintf(j.user, sizeof j.user, "%s", user);
    bool valid = !find(s, j.id);
    for (size_t k = 0; valid && k < json_array_size(gpus); k++) {
      json_t *g = json_array_get(gpus, k);
      valid = json_is_integer(g) && json_integer_value(g) >= 0 &&
              json_integer_value(g) < MAX_GPUS;
      j.gpus[j.n_gpus++] = valid ? (int)json_integer_value(g) : 0;
    }
    if (!valid) {
      GS_LOGW("slurm", "%s: entry %zu (slurm job %lld) is malformed or repeated; left out",
              s->path, i, (long long)j.id);
      continue;
    }
    if (add(s, &j) < 0) { /* kept unbooked, in the file too, until Slurm ends it */
      GS_LOGW("slurm", "slurm job %lld is not booked again: %s", (long long)j.id,
              gs_error_detail());
      if (add_unbooked(s, &j) < 0)
        GS_LOGW("slurm", "%s", gs_error_detail());
    }
  }
  json_decref(list);
}

/* Slurm's jobs that have not ended, from squeue: ids into *ids (the
 * caller frees); -1 when squeue cannot answer. */
static int slurm_job_ids(const char *squeue, int64_t **ids) {
  /* A shell command line: `squeue` is the daemon's own setting (PATH's
   * squeue), never a user's text. */
  char cmd[400];
  /* --all: hidden partitions' jobs too. timeout(1): a controller that does
   * not answer must not hold the daemon's start (124 = cannot answer). */
  snprintf(cmd, sizeof cmd, "timeout 20 %s --all --noheader --format=%%A 2>/dev/null", squeue);
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  int n = 0, cap = 0;
  *ids = NULL;
  char line[64];
  while (fgets(line, sizeof line, p)) {
    char *end;
    long long id = strtoll(line, &end, 10);
    if (end == line || id <= 0)
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      int64_t *grown = realloc(*ids, sizeof *grown * (size_t)cap);
      if (!grown) {
        n = -1; /* a partial list would drop running jobs */
        break;
      }
      *ids = grown;
    }
    (*ids)[n++] = id;
  }
  if (pclose(p) != 0 || n < 0) {
    free(*ids);
    *ids = NULL;
    return -1;
  }
  return n;
}

/* Drops the bookings of jobs squeue no longer lists. */
static void reconcile(gs_slurm_jobs *s) {
  if (s->n == 0)
    return;
  int64_t *ids;
  int n = slurm_job_ids(s->squeue, &ids);
  if (n < 0) {
    GS_LOGW("slurm", "%s did not answer: the %d Slurm job bookings are kept", s->squeue, s->n);
    return;
  }
  for (int i = s->n - 1; i >= 0; i--) {
    bool listed = false;
    for (int k = 0; k < n && !listed; k++)
      listed = ids[k] == s->jobs[i].id;
    if (!listed) {
      GS_LOGI("slurm", "slurm job %lld has ended: its booking goes", (long long)s->jobs[i].id);
      drop(s, &s->jobs[i]);
    }
  }
  free(ids);
  if (save(s) < 0)
    GS_LOGW("slurm", "%s", gs_error_detail());
}

int gs_slurm_jobs_open(gs_ledger *ledger, const char *state_dir, const char *squeue,
                       gs_slurm_jobs **out) {
  gs_slurm_jobs *s = calloc(1, sizeof *s);
  if (!s)
    return gs_error(GS_ENOMEM, "out of memory opening the Slurm job bookings");
  s->ledger = ledger;
  snprintf(s->path, sizeof s->path, "%s/slurm-jobs.json", state_dir);
  snprintf(s->squeue, sizeof s->squeue, "%s", squeue ? squeue : "squeue");
  pthread_mutex_init(&s->lock, NULL);
  load(s);
  reconcile(s);
  *out = s;
  return GS_OK;
}

void gs_slurm_jobs_close(gs_slurm_jobs *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n; i++)
    gs_booking_release(s->jobs[i].booking);
  free(s->jobs);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

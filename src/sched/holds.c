/* holds.c - see holds.h. */
#include "sched/holds.h"
#include "sched/slurm_gpus.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/run.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS GS_BOOKING_MAX_PARTS

typedef struct hold {
  char scheduler[16], job[64], user[64];
  int gpus[MAX_GPUS];
  int n_gpus;
  double booked_at; /* Unix seconds */
  gs_booking *booking; /* NULL: kept unbooked after a restart, until its job ends */
} hold;

struct gs_holds {
  gs_ledger *ledger;
  char path[600], legacy_path[600];
  char squeue[256];
  pthread_mutex_t lock;
  hold *holds;
  int n, cap;
};


/* ---- names -------------------------------------------------------------------------------- */

static bool name_ok(const char *s, size_t max, const char *extra, bool upper) {
  size_t n = strlen(s);
  if (n == 0 || n > max)
    return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
          (upper && *p >= 'A' && *p <= 'Z') || strchr(extra, *p)))
      return false;
  return true;
}

static int check_names(const char *scheduler, const char *job) {
  if (!scheduler || !name_ok(scheduler, 15, "-", false))
    return gs_error(GS_EINVAL, "a hold's scheduler is 1 to 15 of a-z, 0-9 and '-', not '%s'",
                    scheduler ? scheduler : "(none)");
  if (!job || !name_ok(job, 63, "._:-", true))
    return gs_error(GS_EINVAL, "a hold's job is 1 to 63 letters, digits, '.', '_', ':' or '-', "
                               "not '%s'", job ? job : "(none)");
  return GS_OK;
}

/* ---- the file ----------------------------------------------------------------------------- */

/* Writes every hold to the file, through a temporary and a rename, so that
 * a crash leaves the old list or the new one. With the lock held. */
static int save(gs_holds *h) {
  json_t *list = json_array();
  for (int i = 0; i < h->n; i++) {
    json_t *gpus = json_array();
    for (int k = 0; k < h->holds[i].n_gpus; k++)
      json_array_append_new(gpus, json_integer(h->holds[i].gpus[k]));
    json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:o, s:f}", "scheduler",
                                          h->holds[i].scheduler, "job", h->holds[i].job, "user",
                                          h->holds[i].user, "gpus", gpus, "booked_at",
                                          h->holds[i].booked_at));
  }
  char tmp[640];
  snprintf(tmp, sizeof tmp, "%s.tmp", h->path);
  char *text = json_dumps(list, JSON_COMPACT);
  json_decref(list);
  int fd = text ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
  size_t len = text ? strlen(text) : 0;
  bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
  if (fd >= 0)
    ok = close(fd) == 0 && ok;
  free(text);
  if (!ok || rename(tmp, h->path) != 0) {
    int e = errno;
    unlink(tmp);
    return gs_error(GS_EIO, "cannot write %s: %s", h->path, strerror(e));
  }
  unlink(h->legacy_path); /* its holds are in the new file now */
  return GS_OK;
}

/* ---- bookings ----------------------------------------------------------------------------- */

/* Books what is left of the hold's GPUs. With the lock held. */
static int book(gs_holds *h, hold *x) {
  gs_device_t *gpus[MAX_GPUS], *held[MAX_GPUS];
  int n = gs_slurm_gpus(gpus, MAX_GPUS);
  if (n > MAX_GPUS)
    n = MAX_GPUS;
  for (int k = 0; k < x->n_gpus; k++) {
    int idx = x->gpus[k];
    if (idx < 0 || idx >= n)
      return gs_error(GS_EINVAL, "%s job %s: this node has no GPU %d (it has %d)",
                      x->scheduler, x->job, idx, n);
    held[k] = gpus[idx];
    uint64_t used = gs_ledger_booked(h->ledger, held[k]); /* for the log alone */
    int share = gs_ledger_share_booked(h->ledger, held[k]);
    if (used > 0 || share > 0)
      GS_LOGW("holds", "%s job %s: GPU %d (%s) already has %d%% of its compute and %llu "
              "bytes booked here; the job gets the rest", x->scheduler, x->job, idx,
              gs_device_get_info(held[k])->id, share, (unsigned long long)used);
  }
  char owner[GS_LEDGER_OWNER_MAX];
  snprintf(owner, sizeof owner, "%s job %s (%s)", x->scheduler, x->job, x->user);
  return gs_book_rest(h->ledger, held, x->n_gpus, owner, &x->booking);
}

static hold *find(gs_holds *h, const char *scheduler, const char *job) {
  for (int i = 0; i < h->n; i++)
    if (!strcmp(h->holds[i].scheduler, scheduler) && !strcmp(h->holds[i].job, job))
      return &h->holds[i];
  return NULL;
}

/* Appends a hold, booked where `booked` (not kept when that fails), else
 * unbooked: one that could not be booked again at a start stays listed,
 * and in the file, until its job ends. With the lock held, or before the
 * object is shared (open). */
static int add(gs_holds *h, const hold *x, bool booked) {
  if (h->n == h->cap) {
    int cap = h->cap ? h->cap * 2 : 16;
    hold *grown = realloc(h->holds, sizeof *grown * (size_t)cap);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory holding %s job %s", x->scheduler, x->job);
    h->holds = grown;
    h->cap = cap;
  }
  h->holds[h->n] = *x;
  h->holds[h->n].booking = NULL;
  int rc = booked ? book(h, &h->holds[h->n]) : GS_OK;
  if (rc == 0)
    h->n++;
  return rc;
}

/* Releases a hold and moves the last one into its place: a caller that
 * drops while walking the list walks it downward. */
static void drop(gs_holds *h, hold *x) {
  gs_booking_release(x->booking);
  *x = h->holds[--h->n];
}

int gs_hold_book(gs_holds *h, const char *scheduler, const char *job, const char *user,
                 const int *gpus, int n_gpus) {
  if (check_names(scheduler, job) < 0)
    return gs_error_code();
  if (n_gpus < 0 || n_gpus > MAX_GPUS || !user || !user[0] ||
      strlen(user) >= sizeof ((hold *)0)->user)
    return gs_error(GS_EINVAL, "a hold needs a user (under 64 bytes) and at most %d GPUs",
                    MAX_GPUS);
  hold x = {.n_gpus = n_gpus, .booked_at = gs_wall_s()};
  snprintf(x.scheduler, sizeof x.scheduler, "%s", scheduler);
  snprintf(x.job, sizeof x.job, "%s", job);
  snprintf(x.user, sizeof x.user, "%s", user);
  for (int k = 0; k < n_gpus; k++) {
    for (int q = 0; q < k; q++)
      if (gpus[q] == gpus[k])
        return gs_error(GS_EINVAL, "%s job %s names GPU %d twice", scheduler, job, gpus[k]);
    x.gpus[k] = gpus[k];
  }
  pthread_mutex_lock(&h->lock);
  int rc = GS_OK;
  if (!find(h, scheduler, job) && n_gpus > 0) {
    rc = add(h, &x, true);
    if (rc == 0 && (rc = save(h)) < 0) {
      char why[256]; /* the file could not be written: not held, so the caller says so */
      snprintf(why, sizeof why, "%s", gs_error_detail());
      drop(h, &h->holds[h->n - 1]);
      rc = gs_error(GS_EIO, "%s", why);
    }
  }
  pthread_mutex_unlock(&h->lock);
  return rc;
}

int gs_hold_release(gs_holds *h, const char *scheduler, const char *job) {
  if (check_names(scheduler, job) < 0)
    return gs_error_code();
  pthread_mutex_lock(&h->lock);
  hold *x = find(h, scheduler, job);
  int rc = GS_OK;
  if (!x)
    rc = gs_error(GS_ENOENT, "%s job %s holds nothing here", scheduler, job);
  else {
    drop(h, x);
    rc = save(h);
  }
  pthread_mutex_unlock(&h->lock);
  return rc;
}

int gs_holds_reconcile(gs_holds *h, const char *scheduler, const char *const *live, int n_live,
                       double as_of) {
  if (check_names(scheduler, "x") < 0)
    return gs_error_code();
  pthread_mutex_lock(&h->lock);
  int dropped = 0;
  for (int i = h->n - 1; i >= 0; i--) {
    hold *x = &h->holds[i];
    bool listed = strcmp(x->scheduler, scheduler) != 0 || x->booked_at > as_of;
    for (int k = 0; k < n_live && !listed; k++)
      listed = !strcmp(live[k], x->job);
    if (!listed) {
      GS_LOGI("holds", "%s job %s has ended: its hold goes", x->scheduler, x->job);
      drop(h, x);
      dropped++;
    }
  }
  int rc = dropped ? save(h) : GS_OK;
  pthread_mutex_unlock(&h->lock);
  return rc < 0 ? rc : dropped;
}

/* ---- a restart ---------------------------------------------------------------------------- */

/* One entry of the file as a hold; false (with the reason) when it is not
 * one. An older daemon's slurm-jobs.json has integer jobs and no
 * scheduler: Slurm's. */
static bool entry_of(const json_t *e, hold *x, const char **why) {
  json_t *gpus = json_object_get(e, "gpus"), *job = json_object_get(e, "job");
  const char *scheduler = json_string_value(json_object_get(e, "scheduler"));
  const char *user = json_string_value(json_object_get(e, "user"));
  *x = (hold){0};
  if (json_is_integer(job) && json_integer_value(job) > 0)
    snprintf(x->job, sizeof x->job, "%lld", (long long)json_integer_value(job));
  else if (json_is_string(job) && json_string_length(job) < sizeof x->job)
    snprintf(x->job, sizeof x->job, "%s", json_string_value(job));
  json_t *at = json_object_get(e, "booked_at");
  x->booked_at = json_is_number(at) ? json_number_value(at) : 0;
  /* No scheduler: Slurm's, in an older daemon's file. */
  snprintf(x->scheduler, sizeof x->scheduler, "%s",
           !scheduler ? "slurm" : strlen(scheduler) < sizeof x->scheduler ? scheduler : "");
  *why = "is malformed";
  if (!user || strlen(user) >= sizeof x->user || !json_is_array(gpus) ||
      json_array_size(gpus) > MAX_GPUS || check_names(x->scheduler, x->job) < 0)
    return false;
  snprintf(x->user, sizeof x->user, "%s", user);
  for (size_t k = 0; k < json_array_size(gpus); k++) {
    json_t *g = json_array_get(gpus, k);
    if (!json_is_integer(g) || json_integer_value(g) < 0 || json_integer_value(g) >= MAX_GPUS)
      return false;
    x->gpus[x->n_gpus++] = (int)json_integer_value(g);
  }
  return true;
}

/* Books again the holds the file keeps. */
static void load(gs_holds *h) {
  const char *path = access(h->path, F_OK) == 0 ? h->path : h->legacy_path;
  json_error_t err;
  json_t *list = json_load_file(path, 0, &err);
  if (!list) {
    if (access(path, F_OK) == 0)
      GS_LOGW("holds", "%s: %s (line %d); nothing is held again", path, err.text, err.line);
    return;
  }
  size_t i;
  json_t *e;
  json_array_foreach(list, i, e) {
    hold x;
    const char *why;
    bool valid = entry_of(e, &x, &why);
    if (valid && find(h, x.scheduler, x.job)) {
      valid = false;
      why = "repeats a job";
    }
    if (!valid) {
      GS_LOGW("holds", "%s: entry %zu %s; left out", path, i, why);
      continue;
    }
    if (add(h, &x, true) < 0) { /* kept unbooked, in the file too, until the job ends */
      GS_LOGW("holds", "%s job %s is not booked again: %s", x.scheduler, x.job,
              gs_error_detail());
      if (add(h, &x, false) < 0)
        GS_LOGW("holds", "%s", gs_error_detail());
    }
  }
  json_decref(list);
}

/* Slurm's jobs that have not ended, from squeue: their ids into *ids (the
 * caller frees each and the array); -1 when squeue cannot answer (within
 * 20 s: a controller that does not answer must not hold the daemon's
 * start) or lists more than is read (a partial list would drop running
 * jobs). */
static int slurm_job_ids(const char *squeue, char ***ids) {
  /* --all: hidden partitions' jobs too. */
  char *argv[] = {(char *)squeue, "--all", "--noheader", "--format=%A", NULL};
  gs_run_options o = {.timeout_s = 20};
  size_t cap = 1 << 20;
  char *text = malloc(cap);
  bool truncated = true;
  int rc = text ? gs_run_capture(argv, &o, text, cap, &truncated) : GS_ENOMEM;
  *ids = NULL;
  int n = 0, n_cap = 0;
  bool failed = rc != 0 || truncated;
  for (char *line = text, *next; !failed && line && *line; line = next) {
    next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    line[strcspn(line, " ")] = '\0';
    if (!line[0])
      continue;
    if (n == n_cap) {
      n_cap = n_cap ? 2 * n_cap : 64;
      char **grown = realloc(*ids, sizeof *grown * (size_t)n_cap);
      if (!grown) {
        failed = true;
        break;
      }
      *ids = grown;
    }
    if (!((*ids)[n] = strdup(line))) {
      failed = true;
      break;
    }
    n++;
  }
  free(text);
  if (!failed)
    return n;
  for (int i = 0; i < n; i++)
    free((*ids)[i]);
  free(*ids);
  *ids = NULL;
  return -1;
}

/* Drops the holds of Slurm's jobs that squeue no longer lists. */
static void reconcile_slurm(gs_holds *h) {
  int held = 0;
  for (int i = 0; i < h->n; i++)
    held += !strcmp(h->holds[i].scheduler, "slurm");
  if (held == 0)
    return;
  char **ids;
  int n = slurm_job_ids(h->squeue, &ids);
  if (n < 0) {
    GS_LOGW("holds", "%s did not answer: the %d Slurm job holds are kept", h->squeue, held);
    return;
  }
  if (gs_holds_reconcile(h, "slurm", (const char *const *)ids, n, gs_wall_s()) < 0)
    GS_LOGW("holds", "%s", gs_error_detail());
  for (int i = 0; i < n; i++)
    free(ids[i]);
  free(ids);
}

int gs_holds_open(gs_ledger *ledger, const char *state_dir, const char *squeue, gs_holds **out) {
  gs_holds *h = calloc(1, sizeof *h);
  if (!h)
    return gs_error(GS_ENOMEM, "out of memory opening the holds");
  h->ledger = ledger;
  snprintf(h->path, sizeof h->path, "%s/holds.json", state_dir);
  snprintf(h->legacy_path, sizeof h->legacy_path, "%s/slurm-jobs.json", state_dir);
  snprintf(h->squeue, sizeof h->squeue, "%s", squeue ? squeue : "squeue");
  pthread_mutex_init(&h->lock, NULL);
  load(h);
  reconcile_slurm(h);
  *out = h;
  return GS_OK;
}

void gs_holds_close(gs_holds *h) {
  if (!h)
    return;
  for (int i = 0; i < h->n; i++)
    gs_booking_release(h->holds[i].booking);
  free(h->holds);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

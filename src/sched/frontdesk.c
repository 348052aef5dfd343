/* frontdesk.c - the front desk: tenants and their tokens, the queue of
 * process jobs, and one thread that schedules them (policy.c), books their
 * devices (ledger.c), starts them under a supervisor (shim.c), enforces
 * time limits and cancellations, and records every change (store.c).
 * Jobs on several nodes go to Slurm (frontdesk_slurm.c). */
#include "sched/frontdesk_internal.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/fileutil.h"
#include "base/log.h"
#include "base/units.h"
#include "sched/cgroup.h"
#include "sched/container.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <math.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TIME_LIMIT_S (100LL * 366 * 86400)


void gs_fd_wake(gs_frontdesk *fd) {
  uint64_t one = 1;
  if (write(fd->wake_fd, &one, sizeof one) < 0) {
    /* a full counter already means "gs_fd_wake up" */
  }
}

/* A booking went back to the ledger (a model unloaded while idle, an
 * instance scaled away, a plan evicted, a job ended): pending jobs may fit now. */
static void booking_released(void *arg) { gs_fd_wake(arg); }

/* ---- tokens ------------------------------------------------------------------------------ */

/* A token reads "gs_<id>_<48 hex digits>"; the store keeps only a salted
 * SHA-256 of the secret part. */
static void token_hash(const uint8_t salt[16], const char *secret, uint8_t out[32]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned len = 32;
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  EVP_DigestUpdate(ctx, salt, 16);
  EVP_DigestUpdate(ctx, secret, strlen(secret));
  EVP_DigestFinal_ex(ctx, out, &len);
  EVP_MD_CTX_free(ctx);
}

static int random_bytes(void *buf, size_t n) {
  uint8_t *p = buf;
  while (n) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return gs_error(GS_EIO, "no random bytes for a token: %s", strerror(errno));
    }
    p += got;
    n -= (size_t)got;
  }
  return GS_OK;
}

static int make_token(gs_frontdesk *fd, const char *tenant, char *token, size_t cap) {
  uint8_t raw[24], salt[16], hash[32];
  int rc = random_bytes(raw, sizeof raw);
  if (rc == 0)
    rc = random_bytes(salt, sizeof salt);
  if (rc < 0)
    return rc;
  char secret[49];
  for (int i = 0; i < 24; i++)
    snprintf(secret + 2 * i, 3, "%02x", raw[i]);
  token_hash(salt, secret, hash);
  int64_t id;
  rc = gs_store_token_insert(fd->store, tenant, salt, hash, &id);
  if (rc < 0)
    return rc;
  snprintf(token, cap, "gs_%lld_%s", (long long)id, secret);
  return GS_OK;
}

int gs_frontdesk_authenticate(gs_frontdesk *fd, const char *token, gs_principal *out) {
  long long id;
  char secret[64];
  int used = 0;
  if (!token || sscanf(token, "gs_%lld_%63[0-9a-f]%n", &id, secret, &used) != 2 ||
      token[used] != '\0' || strlen(secret) != 48)
    return gs_error(GS_EPERM, "not a gpusrv token");
  char tenant[64];
  uint8_t salt[16], hash[32], got[32];
  int rc = gs_store_token_get(fd->auth_store, id, tenant, salt, hash);
  if (rc < 0)
    return gs_error(GS_EPERM, "unknown token");
  token_hash(salt, secret, got);
  if (CRYPTO_memcmp(got, hash, 32) != 0)
    return gs_error(GS_EPERM, "wrong token");
  pthread_rwlock_rdlock(&fd->tenants_lock);
  bool found = false;
  for (int i = 0; i < fd->n_tenants; i++)
    if (strcmp(fd->tenants[i].name, tenant) == 0) {
      snprintf(out->tenant, sizeof out->tenant, "%s", tenant);
      out->tenant_serial = fd->tenants[i].serial;
      out->admin = fd->tenants[i].admin;
      found = true;
    }
  pthread_rwlock_unlock(&fd->tenants_lock);
  return found ? GS_OK : gs_error(GS_EPERM, "the token's tenant is gone");
}

int64_t gs_frontdesk_token_count(gs_frontdesk *fd) {
  int64_t n = 0;
  gs_store_token_count(fd->store, &n);
  return n;
}

const char *gs_frontdesk_admin_token_path(const gs_frontdesk *fd) { return fd->admin_token_path; }

/* ---- tenants ----------------------------------------------------------------------------- */

/* A tenant's quotas as the queue policy reads them. */
static gs_sched_tenant sched_tenant_of(const gs_tenant *t) {
  return (gs_sched_tenant){.weight = t->weight, .max_devices = t->max_devices,
                           .max_device_mem = t->max_device_mem, .max_jobs = t->max_jobs,
                           .max_cpus = t->max_cpus, .max_host_mem = t->max_host_mem};
}

gs_tenant *gs_fd_find_tenant(gs_frontdesk *fd, const char *name) {
  for (int i = 0; i < fd->n_tenants; i++)
    if (strcmp(fd->tenants[i].name, name) == 0)
      return &fd->tenants[i];
  return NULL;
}

static bool valid_name(const char *s) {
  if (!s[0] || strlen(s) > 63)
    return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_' || *p == '.'))
      return false;
  return true;
}

int gs_tenant_add(gs_frontdesk *fd, const gs_tenant *t, char *token, size_t cap) {
  if (!valid_name(t->name))
    return gs_error(GS_EINVAL, "a tenant's name is 1 to 63 letters, digits, '-', '_' or '.', "
                               "not '%s'", t->name);
  if (!(t->weight > 0) || t->weight > 1e6)
    return gs_error(GS_EINVAL, "a tenant's weight is above 0 (and at most 1e6), not %g",
                    t->weight);
  if (t->max_devices < 0 || t->max_cpus < 0 || t->max_jobs < 0)
    return gs_error(GS_EINVAL, "quotas are 0 (no limit) or more");
  if (t->max_priority < -1000 || t->max_priority > 1000)
    return gs_error(GS_EINVAL, "a maximum priority is -1000 to 1000, not %d", t->max_priority);
  if (!t->unix_user[0])
    return gs_error(GS_EINVAL, "tenant '%s' needs a Unix user for its jobs (--user)", t->name);
  gs_tenant copy = *t;
  copy.created = gs_wall_s();
  pthread_mutex_lock(&fd->lock);
  int rc = gs_fd_find_tenant(fd, t->name)
               ? gs_error(GS_EEXIST, "tenant '%s' already exists", t->name)
               : GS_OK;
  if (rc == 0) {
    /* Under the write lock: token checks read the array under the read
     * lock, and realloc may free the block they are reading. */
    pthread_rwlock_wrlock(&fd->tenants_lock);
    gs_tenant *grown = realloc(fd->tenants, (size_t)(fd->n_tenants + 1) * sizeof *grown);
    if (grown)
      fd->tenants = grown;
    pthread_rwlock_unlock(&fd->tenants_lock);
    rc = grown ? gs_store_tenant_insert(fd->store, &copy)
               : gs_error(GS_ENOMEM, "out of memory adding a tenant");
  }
  if (rc == 0)
    rc = make_token(fd, t->name, token, cap);
  if (rc == 0) {
    pthread_rwlock_wrlock(&fd->tenants_lock);
    fd->tenants[fd->n_tenants++] = copy;
    pthread_rwlock_unlock(&fd->tenants_lock);
  }
  else if (gs_fd_find_tenant(fd, t->name) == NULL && rc != GS_EEXIST)
    gs_store_tenant_delete(fd->store, t->name); /* no half-made tenant */
  pthread_mutex_unlock(&fd->lock);
  return rc;
}

int gs_tenant_remove(gs_frontdesk *fd, const char *name) {
  pthread_mutex_lock(&fd->lock);
  gs_tenant *t = gs_fd_find_tenant(fd, name);
  int rc = GS_OK;
  if (!t)
    rc = gs_error(GS_ENOENT, "no tenant '%s'", name);
  /* Ended jobs wait in the active list for the scheduler's next pass. */
  for (int i = 0; rc == 0 && i < fd->n_active; i++)
    if (strcmp(fd->active[i].job->tenant, name) == 0 &&
        (fd->active[i].job->state == GS_JOB_PENDING || fd->active[i].job->state == GS_JOB_RUNNING))
      rc = gs_error(GS_EBUSY, "tenant '%s' has unfinished jobs (job %lld); cancel them first",
                    name, (long long)fd->active[i].job->id);
  if (rc == 0)
    rc = gs_store_tenant_delete(fd->store, name);
  if (rc == 0) {
    pthread_rwlock_wrlock(&fd->tenants_lock);
    *t = fd->tenants[--fd->n_tenants];
    pthread_rwlock_unlock(&fd->tenants_lock);
  }
  pthread_mutex_unlock(&fd->lock);
  return rc;
}

int gs_tenant_new_token(gs_frontdesk *fd, const char *name, char *token, size_t cap) {
  pthread_mutex_lock(&fd->lock);
  int rc = gs_fd_find_tenant(fd, name) ? make_token(fd, name, token, cap)
                                 : gs_error(GS_ENOENT, "no tenant '%s'", name);
  pthread_mutex_unlock(&fd->lock);
  return rc;
}

int gs_tenants_list(gs_frontdesk *fd, gs_tenant_info **out, int *n) {
  pthread_mutex_lock(&fd->lock);
  *n = fd->n_tenants;
  *out = calloc((size_t)fd->n_tenants + 1, sizeof **out);
  for (int i = 0; *out && i < fd->n_tenants; i++) {
    gs_tenant_info *info = &(*out)[i];
    info->tenant = fd->tenants[i];
    for (int k = 0; k < fd->n_active; k++)
      if (strcmp(fd->active[k].job->tenant, info->tenant.name) == 0) {
        if (fd->active[k].job->state == GS_JOB_RUNNING)
          info->running++;
        else if (fd->active[k].job->state == GS_JOB_PENDING)
          info->pending++;
      }
  }
  pthread_mutex_unlock(&fd->lock);
  return *out ? GS_OK : gs_error(GS_ENOMEM, "out of memory listing tenants");
}

int gs_fd_resolve_identity(const gs_tenant *t, identity *id) {
  struct passwd pw, *res = NULL;
  char buf[4096];
  if (getpwnam_r(t->unix_user, &pw, buf, sizeof buf, &res) != 0 || !res)
    return gs_error(GS_EINVAL, "tenant '%s' maps to Unix user '%s', which does not exist here",
                    t->name, t->unix_user);
  id->uid = pw.pw_uid;
  id->gid = pw.pw_gid;
  snprintf(id->user, sizeof id->user, "%s", pw.pw_name);
  snprintf(id->home, sizeof id->home, "%s", pw.pw_dir);
  snprintf(id->shell, sizeof id->shell, "%s", pw.pw_shell);
  if (t->unix_group[0]) {
    struct group gr, *gres = NULL;
    if (getgrnam_r(t->unix_group, &gr, buf, sizeof buf, &gres) != 0 || !gres)
      return gs_error(GS_EINVAL, "tenant '%s' maps to Unix group '%s', which does not exist here",
                      t->name, t->unix_group);
    id->gid = gr.gr_gid;
  }
  if (id->uid == 0 && !t->allow_root)
    return gs_error(GS_EPERM, "tenant '%s' maps to root, and jobs never run as root unless the "
                              "tenant was added with --allow-root", t->name);
  if (geteuid() != 0 && id->uid != geteuid())
    return gs_error(GS_EPERM, "tenant '%s' maps to user '%s', but the daemon does not run as "
                              "root and can start jobs only as its own user (uid %u)",
                    t->name, t->unix_user, (unsigned)geteuid());
  return GS_OK;
}

/* ---- jobs: bookkeeping ----------------------------------------------------------------- */

/* Room for one more active job. */
int gs_fd_reserve_active(gs_frontdesk *fd) {
  if (fd->n_active == fd->cap_active) {
    int cap = fd->cap_active ? 2 * fd->cap_active : 64;
    active_job *grown = realloc(fd->active, (size_t)cap * sizeof *grown);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory queueing a job");
    fd->active = grown;
    fd->cap_active = cap;
  }
  return GS_OK;
}

int gs_fd_add_active(gs_frontdesk *fd, gs_job *j) {
  int rc = gs_fd_reserve_active(fd);
  if (rc == 0)
    fd->active[fd->n_active++] = (active_job){.job = j, .pidfd = -1};
  return rc;
}

static void remove_active(gs_frontdesk *fd, int i) {
  if (fd->active[i].pidfd >= 0)
    close(fd->active[i].pidfd);
  gs_job_free(fd->active[i].job);
  /* keep submission order: the queue is scanned oldest first */
  memmove(&fd->active[i], &fd->active[i + 1], (size_t)(fd->n_active - i - 1) * sizeof *fd->active);
  fd->n_active--;
}

/* Sets a job's state and writes it. When the write fails (a full disk)
 * the job keeps its new state in memory, marked unsaved: it stays in the
 * active list, and so in every listing, and the scheduler writes it again
 * on each pass until it takes. Returns the write's result. */
int gs_fd_set_state(gs_frontdesk *fd, gs_job *j, gs_job_state state, const char *reason) {
  j->state = state;
  snprintf(j->reason, sizeof j->reason, "%s", reason ? reason : "");
  int rc = gs_store_job_update(fd->store, j, true);
  j->unsaved = rc < 0;
  if (rc < 0)
    GS_LOGE("sched", "job %lld: %s (kept in memory, written again later)", (long long)j->id,
            gs_error_detail());
  return rc;
}

/* Whether a job still takes part in scheduling (not one that has ended and
 * waits only for its state to be written). */
bool gs_fd_in_queue(const gs_job *j) {
  return j->state == GS_JOB_PENDING || j->state == GS_JOB_RUNNING;
}

static void job_dir(const gs_frontdesk *fd, int64_t id, char *out, size_t cap) {
  snprintf(out, cap, "%s/jobs/%lld", fd->set.state_dir, (long long)id);
}

static int open_pidfd(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

/* Signals a job's supervisor through its pidfd where there is one, so that
 * a pid reused after it ended cannot receive the signal. */
static void signal_job(active_job *a, int sig) {
  if (a->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, a->pidfd, sig, NULL, 0u);
  else if (a->job->pid > 0 && gs_process_start_ticks(a->job->pid) == a->job->pid_start)
    kill(a->job->pid, sig);
}

/* Whole devices book all their memory and compute; slices what they ask. */
static int book_devices(gs_frontdesk *fd, gs_job *j, gs_sched_placement placement) {
  gs_booking_part parts[GS_BOOKING_MAX_PARTS];
  int n = 0;
  j->devices[0] = '\0';
  for (int d = 0; d < fd->n_devices; d++) {
    if (!(placement >> d & 1))
      continue;
    parts[n].device = fd->devices[d];
    parts[n].bytes = j->need.gpus > 0 ? fd->total.dev_mem[d] : j->need.gpu_mem;
    parts[n].share = j->need.gpus > 0 ? 100 : j->need.gpu_share;
    size_t len = strlen(j->devices);
    snprintf(j->devices + len, sizeof j->devices - len, "%s%s", len ? "," : "",
             gs_device_get_info(fd->devices[d])->id);
    n++;
  }
  j->booking = NULL;
  if (n == 0)
    return GS_OK;
  char owner[96];
  snprintf(owner, sizeof owner, "job %lld (%s)", (long long)j->id, j->tenant);
  return gs_book(fd->set.ledger, parts, n, owner, &j->booking);
}

/* ---- jobs: starting -------------------------------------------------------------------- */

static void env_add(json_t *env, const char *key, const char *value) {
  size_t n = strlen(key) + strlen(value) + 2;
  char *kv = malloc(n);
  if (!kv)
    return;
  snprintf(kv, n, "%s=%s", key, value);
  json_array_append_new(env, json_string(kv));
  free(kv);
}

/* CUDA_VISIBLE_DEVICES names CUDA devices by their CUDA index; the other
 * backends get their own variable. Empty when the job booked none, so that
 * a job cannot reach a device it did not book. */
/* The indexes of the booked devices of one backend ("cuda"): as this
 * machine numbers them, or `renumbered` from 0 in the same order, as a
 * container that holds only their device nodes numbers them. */
static void visible_devices(const char *devices, const char *prefix, bool renumbered, char *out,
                            size_t cap) {
  out[0] = '\0';
  char copy[256];
  snprintf(copy, sizeof copy, "%s", devices);
  size_t plen = strlen(prefix);
  int k = 0;
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    if (strncmp(tok, prefix, plen) == 0 && tok[plen] >= '0' && tok[plen] <= '9') {
      size_t len = strlen(out);
      if (renumbered)
        snprintf(out + len, cap - len, "%s%d", len ? "," : "", k++);
      else
        snprintf(out + len, cap - len, "%s%s", len ? "," : "", tok + plen);
    }
}

/* Whether `env` ("K=V" strings) sets `name`. */
static bool env_has(const json_t *env, const char *name) {
  size_t i, len = strlen(name);
  json_t *kv;
  json_array_foreach(env, i, kv) {
    const char *s = json_string_value(kv);
    if (s && strncmp(s, name, len) == 0 && s[len] == '=')
      return true;
  }
  return false;
}

static int write_spec(const char *dir, const gs_job *j, const identity *id, const char *cwd,
                      const gs_frontdesk_settings *set) {
  /* The job's own variables, then the defaults it did not set; those of
   * the booking were refused in its request, so they are the daemon's. */
  json_t *env = json_deep_copy(j->env);
  const char *defaults[][2] = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", id->home}, {"USER", id->user}, {"LOGNAME", id->user}, {"SHELL", id->shell}};
  /* A container's PATH and HOME are its image's. */
  for (size_t k = 0; !j->container && k < sizeof defaults / sizeof defaults[0]; k++)
    if (!env_has(j->env, defaults[k][0]))
      env_add(env, defaults[k][0], defaults[k][1]);
  char jid[32], vis[256];
  snprintf(jid, sizeof jid, "%lld", (long long)j->id);
  env_add(env, "GPUSRV_JOB_ID", jid);
  env_add(env, "GPUSRV_TENANT", j->tenant);
  env_add(env, "GPUSRV_VISIBLE_DEVICES", j->devices);
  visible_devices(j->devices, "cuda", j->container != NULL, vis, sizeof vis);
  env_add(env, "CUDA_VISIBLE_DEVICES", vis);
  env_add(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID"); /* the indexes as gpusrv numbers them */
  visible_devices(j->devices, "opencl", false, vis, sizeof vis);
  env_add(env, "GPUSRV_OPENCL_VISIBLE_DEVICES", vis);
  json_t *spec = json_pack(
      "{s:I, s:O, s:o, s:s, s:i, s:i, s:s, s:I, s:f, s:I, s:I}", "id", (json_int_t)j->id, "argv",
      j->argv, "env", env, "cwd", cwd, "uid", (int)id->uid, "gid", (int)id->gid, "user", id->user,
      "memory", (json_int_t)j->need.host_mem, "cpus", j->need.cpus, "pids",
      (json_int_t)set->job_pids_max, "log_max", (json_int_t)set->job_log_max);
  /* In a container: podman runs from the job's work directory, and the
   * job from chdir inside the container (/job, the work directory, by
   * default). */
  if (spec && j->container &&
      (json_object_set(spec, "container", j->container) < 0 ||
       json_object_set_new(spec, "home", json_string(id->home)) < 0 ||
       json_object_set_new(spec, "container_workdir",
                           json_string(j->chdir[0] ? j->chdir : "/job")) < 0 ||
       json_object_set_new(spec, "cdi_devices", gs_cdi_devices(set->cdi_spec, j->devices)) < 0)) {
    json_decref(spec);
    spec = NULL;
  }
  char path[700], tmp[720];
  snprintf(path, sizeof path, "%s/spec.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  /* Root alone reads it: it holds the job's environment. */
  char *text = spec ? json_dumps(spec, JSON_COMPACT) : NULL; /* one write, not one per token */
  int f = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  size_t len = text ? strlen(text) : 0;
  bool ok = f >= 0 && text && write(f, text, len) == (ssize_t)len;
  if (f >= 0)
    ok = close(f) == 0 && ok;
  free(text);
  int rc = ok && rename(tmp, path) == 0
               ? GS_OK
               : gs_error(GS_EIO, "cannot write %s: %s", path, strerror(errno));
  json_decref(spec);
  return rc;
}

/* Prepares the job's directory and starts its supervisor; the job is
 * RUNNING once this returns 0. */
/* launch's answer when a job cannot start for now (it stays PENDING). */
#define LAUNCH_NOT_NOW 1

static int launch(gs_frontdesk *fd, active_job *a) {
  gs_job *j = a->job;
  gs_tenant *t = gs_fd_find_tenant(fd, j->tenant);
  identity id;
  if (!t)
    return gs_error(GS_EPERM, "tenant '%s' no longer exists", j->tenant);
  int rc = gs_fd_resolve_identity(t, &id);
  if (rc < 0)
    return rc;
  char dir[600], work[700];
  job_dir(fd, j->id, dir, sizeof dir);
  snprintf(work, sizeof work, "%s/work", dir);
  /* The job's directory: traversable by its user, readable by root alone
   * (the spec holds its environment); its work directory and logs belong
   * to the user and nobody else. */
  if (gs_mkdir_p(work) < 0 || chmod(dir, 0711) < 0 || chown(work, id.uid, id.gid) < 0 ||
      chmod(work, 0700) < 0)
    return gs_error(GS_EIO, "cannot prepare %s: %s", work, strerror(errno));
  rc = write_spec(dir, j, &id, j->chdir[0] && !j->container ? j->chdir : work, &fd->set);
  if (rc < 0)
    return rc;
  char exit_path[720], pid_path[720], shim_log[720];
  snprintf(exit_path, sizeof exit_path, "%s/exit.json", dir);
  snprintf(pid_path, sizeof pid_path, "%s/supervisor.pid", dir);
  unlink(exit_path); /* from an earlier run of a requeued job */
  unlink(pid_path);
  snprintf(shim_log, sizeof shim_log, "%s/supervisor.log", dir);
  /* On disk before the supervisor exists: should the daemon die in
   * between, the next one finds the job RUNNING and looks for the
   * supervisor's pid file, instead of starting the job a second time. */
  j->pid = 0;
  j->pid_start = 0;
  j->start_time = gs_wall_s();
  j->end_time = 0;
  j->exit_code = -1;
  j->signal = 0;
  j->runs++;
  j->cancel_requested = j->timed_out = false;
  j->preempted_by = 0;
  j->over_memory[0] = '\0';
  j->term_sent_at = 0;
  if (gs_fd_set_state(fd, j, GS_JOB_RUNNING, "") < 0) {
    /* Not on disk as RUNNING: starting it now could start it a second time
     * after a restart. It waits, PENDING as the store has it. */
    char why[200];
    snprintf(why, sizeof why, "Waiting: the state cannot be written (%s)", gs_error_detail());
    j->state = GS_JOB_PENDING;
    j->unsaved = false;
    j->runs--;
    j->start_time = 0;
    snprintf(j->reason, sizeof j->reason, "%s", why);
    return LAUNCH_NOT_NOW;
  }
  /* posix_spawn (vfork underneath): no copy of the daemon's page tables,
   * which a fork of a process holding models would pay for. */
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, shim_log, O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_init(&attr);
  /* Born with the signals it waits for blocked (a cancel at its start is
   * not lost), and with every disposition at its default (the daemon
   * ignores SIGPIPE; its jobs must not). */
  sigset_t blocked, all;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGCHLD);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGHUP);
  sigaddset(&blocked, SIGUSR1);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &blocked);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid;
  char *const argv[] = {"gpusrv-job-shim", dir, NULL};
  char *const envp[] = {NULL};
  int err = posix_spawn(&pid, fd->shim_path, &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0)
    return gs_error(GS_EIO, "cannot start the job's supervisor %s: %s", fd->shim_path,
                    strerror(err));
  a->pidfd = open_pidfd(pid);
  j->pid = pid;
  j->pid_start = gs_process_start_ticks(pid);
  if (gs_store_job_update(fd->store, j, false) < 0)
    GS_LOGE("sched", "job %lld: %s", (long long)j->id, gs_error_detail());
  GS_LOGI("sched", "job %lld (%s) started, pid %d, devices '%s'", (long long)j->id, j->tenant,
          (int)pid, j->devices);
  return GS_OK;
}

/* ---- jobs: ending ----------------------------------------------------------------------- */

/* What is left of a job whose supervisor vanished would hold resources
 * nobody booked: kill it through the job's cgroup. */
static void kill_leftovers(int64_t id) {
  gs_cgroup cg;
  char name[64];
  gs_cgroup_job_name(id, name, sizeof name);
  if (gs_cgroup_open(name, &cg) == 0) {
    gs_cgroup_kill_all(&cg);
    gs_cgroup_remove(&cg);
  }
}

/* The job's supervisor is gone: read what it wrote and settle the job.
 * Returns true if the job left the queue (false: requeued). */
static bool settle(gs_frontdesk *fd, active_job *a) {
  gs_job *j = a->job;
  if (j->pid > 0)
    waitpid(j->pid, NULL, WNOHANG); /* reap it if it is our child */
  char dir[600], path[700];
  job_dir(fd, j->id, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/exit.json", dir);
  json_t *ex = json_load_file(path, 0, NULL);
  uint64_t ooms = 0;
  bool term_forwarded = false;
  if (ex) {
    term_forwarded = json_is_true(json_object_get(ex, "term_forwarded"));
    j->exit_code = (int)json_integer_value(json_object_get(ex, "exit_code"));
    j->signal = (int)json_integer_value(json_object_get(ex, "signal"));
    ooms = (uint64_t)json_integer_value(json_object_get(ex, "oom_kills"));
    j->cpu_seconds += json_number_value(json_object_get(ex, "cpu_seconds"));
    double end = json_number_value(json_object_get(ex, "end_time"));
    j->end_time = end > 0 ? end : gs_wall_s();
  } else {
    j->end_time = gs_wall_s();
  }
  double wall = j->end_time > j->start_time ? j->end_time - j->start_time : 0;
  double devices = j->need.gpus > 0 ? j->need.gpus : j->need.gpu_share / 100.0;
  uint64_t dev_mem = j->need.gpus > 0 ? 0 : j->need.gpu_mem;
  if (j->need.gpus > 0)
    for (int d = 0; d < fd->n_devices; d++)
      if (j->placement >> d & 1)
        dev_mem += fd->total.dev_mem[d];
  j->device_seconds += devices * wall;
  j->device_mem_byte_seconds += (double)dev_mem * wall;
  gs_booking_release(j->booking);
  j->booking = NULL;
  if (a->pidfd >= 0)
    close(a->pidfd);
  a->pidfd = -1;
  char reason[256] = "";
  gs_job_state state;
  bool clean_exit = ex && j->exit_code == 0 && j->signal == 0;
  if (!ex)
    kill_leftovers(j->id);
  if (j->cancel_requested) {
    state = GS_JOB_CANCELLED;
  } else if (!ex) {
    state = GS_JOB_LOST;
    snprintf(reason, sizeof reason, "its supervisor (pid %d) ended without reporting",
             (int)j->pid);
  } else if (j->timed_out) {
    state = GS_JOB_TIMEOUT;
    snprintf(reason, sizeof reason, "ran past its time limit of %lld s",
             (long long)j->time_limit_s);
  } else if (j->over_memory[0]) {
    state = GS_JOB_OUT_OF_MEMORY;
    snprintf(reason, sizeof reason, "%s", j->over_memory);
  } else if (j->preempted_by && (!clean_exit || term_forwarded)) {
    /* Stopped for another job, even if it left cleanly on SIGTERM (a
     * checkpoint): its work is not done, so it runs again. */
    state = GS_JOB_PREEMPTED;
    snprintf(reason, sizeof reason, "stopped to make room for job %lld",
             (long long)j->preempted_by);
  } else if (ooms > 0 && (j->signal == SIGKILL || j->exit_code != 0)) {
    state = GS_JOB_OUT_OF_MEMORY;
    char lim[32];
    snprintf(reason, sizeof reason, "killed for going over its memory limit of %s",
             gs_format_bytes(j->need.host_mem, lim, sizeof lim));
  } else if (clean_exit) {
    state = GS_JOB_COMPLETED;
  } else {
    state = GS_JOB_FAILED;
    if (j->signal)
      snprintf(reason, sizeof reason, "killed by signal %d (%s)", j->signal, strsignal(j->signal));
    else
      snprintf(reason, sizeof reason, "exit code %d", j->exit_code);
  }
  json_decref(ex);
  gs_fd_set_state(fd, j, state, reason);
  GS_LOGI("sched", "job %lld %s %s", (long long)j->id, gs_job_state_name(state), reason);
  if ((state == GS_JOB_LOST && j->requeue) || state == GS_JOB_PREEMPTED) {
    j->pid = 0;
    j->start_time = j->end_time = 0;
    j->preempted_by = 0;
    gs_fd_set_state(fd, j, GS_JOB_PENDING, "Requeued");
    return false;
  }
  return true;
}

/* Time limits, and SIGKILL after the grace period of a SIGTERM. */
static void enforce_limits(gs_frontdesk *fd, double now) {
  for (int i = 0; i < fd->n_active; i++) {
    active_job *a = &fd->active[i];
    gs_job *j = a->job;
    if (j->state != GS_JOB_RUNNING || j->pid <= 0)
      continue;
    if (j->time_limit_s > 0 && !j->timed_out && !j->cancel_requested && !j->preempted_by &&
        !j->over_memory[0] &&
        now >= j->start_time + (double)j->time_limit_s) {
      j->timed_out = true;
      j->term_sent_at = now;
      signal_job(a, SIGTERM); /* the supervisor passes it on to the job's processes */
    }
    if (j->term_sent_at > 0 && now >= j->term_sent_at + fd->set.kill_grace_s) {
      signal_job(a, SIGUSR1); /* the supervisor kills all of them */
      j->term_sent_at = INFINITY;
    }
  }
}

/* ---- device memory per process -------------------------------------------------------------- */

/* The job a process belongs to, by what the job cannot forge: its cgroup
 * (gpusrv/job-ID), else its session, which its supervisor leads (a process
 * can leave a session but not join another). 0 if none. */
static int64_t job_of_process(gs_frontdesk *fd, int pid) {
  int64_t id = gs_cgroup_job_of_process(pid);
  if (id > 0)
    return id;
  int session = gs_process_session(pid);
  if (session <= 0)
    return 0;
  for (int i = 0; i < fd->n_active; i++)
    if (fd->active[i].job->state == GS_JOB_RUNNING && fd->active[i].job->pid == session)
      return fd->active[i].job->id;
  return 0;
}

int gs_frontdesk_processes(gs_frontdesk *fd, gs_device_process **out, int *n) {
  enum { PER_DEVICE = 256 };
  *n = 0;
  *out = calloc((size_t)fd->n_devices * PER_DEVICE + 1, sizeof **out);
  if (!*out)
    return gs_error(GS_ENOMEM, "out of memory listing device processes");
  gs_process_info procs[PER_DEVICE];
  int session[PER_DEVICE];
  for (int d = 0; d < fd->n_devices; d++) {
    int count = 0;
    if (gs_device_processes(fd->devices[d], procs, PER_DEVICE, &count) < 0)
      continue;
    if (count > PER_DEVICE)
      count = PER_DEVICE;
    /* /proc first, without the lock (the scheduler's loop takes it) ... */
    gs_device_process *first = &(*out)[*n];
    for (int k = 0; k < count; k++) {
      gs_device_process *p = &first[k];
      p->device = fd->devices[d];
      p->pid = procs[k].pid;
      snprintf(p->name, sizeof p->name, "%s", procs[k].name);
      p->memory_bytes = procs[k].memory_used_bytes;
      p->job = gs_cgroup_job_of_process(p->pid);
      session[k] = p->job > 0 ? 0 : gs_process_session(p->pid);
    }
    /* ... then the jobs, under it, as job_of_process matches them. */
    pthread_mutex_lock(&fd->lock);
    for (int k = 0; k < count; k++) {
      gs_device_process *p = &first[k];
      for (int i = 0; i < fd->n_active; i++) {
        const gs_job *j = fd->active[i].job;
        if (p->job <= 0 && session[k] > 0 && j->state == GS_JOB_RUNNING && j->pid == session[k])
          p->job = j->id;
        if (p->job > 0 && j->id == p->job)
          snprintf(p->tenant, sizeof p->tenant, "%s", j->tenant);
      }
      if (p->job < 0)
        p->job = 0;
    }
    pthread_mutex_unlock(&fd->lock);
    *n += count;
  }
  return GS_OK;
}

/* What the devices report each process using (NVML on NVIDIA GPUs), summed
 * per job and device: a job over its booking on a device (or on a device it
 * did not book) is stopped as OUT_OF_MEMORY before it starves the jobs and
 * models that share it. */
static void watch_device_memory(gs_frontdesk *fd, double now) {
  gs_process_info procs[256];
  int64_t owner[256];
  for (int d = 0; d < fd->n_devices; d++) {
    int count = 0;
    if (gs_device_processes(fd->devices[d], procs, 256, &count) < 0 || count == 0)
      continue;
    if (count > 256)
      count = 256;
    for (int k = 0; k < count; k++)
      owner[k] = job_of_process(fd, procs[k].pid);
    for (int i = 0; i < fd->n_active; i++) {
      gs_job *j = fd->active[i].job;
      if (j->state != GS_JOB_RUNNING || j->over_memory[0] || j->pid <= 0)
        continue;
      uint64_t used = 0;
      for (int k = 0; k < count; k++)
        if (owner[k] == j->id)
          used += procs[k].memory_used_bytes;
      uint64_t booked = !(j->placement >> d & 1) ? 0
                        : j->need.gpus > 0       ? fd->total.dev_mem[d]
                                                 : j->need.gpu_mem;
      if (used <= booked)
        continue;
      char u[32], b[32];
      snprintf(j->over_memory, sizeof j->over_memory,
               "used %s of device memory on %s; its booking there is %s",
               gs_format_bytes(used, u, sizeof u), gs_device_get_info(fd->devices[d])->id,
               gs_format_bytes(booked, b, sizeof b));
      if (j->term_sent_at == 0)
        j->term_sent_at = now;
      signal_job(&fd->active[i], SIGTERM);
      GS_LOGW("sched", "job %lld: %s", (long long)j->id, j->over_memory);
    }
  }
}

/* ---- the queue ----------------------------------------------------------------------------- */

static void snapshot_free(gs_frontdesk *fd, gs_sched_free *free_now) {
  *free_now = fd->total;
  for (int d = 0; d < fd->n_devices; d++) {
    uint64_t booked = gs_ledger_booked(fd->set.ledger, fd->devices[d]);
    free_now->dev_mem[d] = booked < fd->total.dev_mem[d] ? fd->total.dev_mem[d] - booked : 0;
    free_now->dev_share[d] = 100 - gs_ledger_share_booked(fd->set.ledger, fd->devices[d]);
  }
  for (int i = 0; i < fd->n_active; i++) {
    const gs_job *j = fd->active[i].job;
    if (j->state == GS_JOB_RUNNING) {
      free_now->cpus -= j->need.cpus;
      free_now->host_mem -= j->need.host_mem < free_now->host_mem ? j->need.host_mem
                                                                  : free_now->host_mem;
    }
  }
}

static int tenant_index(gs_frontdesk *fd, const char *name) {
  for (int i = 0; i < fd->n_tenants; i++)
    if (strcmp(fd->tenants[i].name, name) == 0)
      return i;
  return -1;
}


/* The head of the queue waits for resources that lower-priority jobs hold:
 * stop the cheapest of them (SIGTERM, then SIGKILL after the grace period);
 * they are requeued when they have gone. */
static void preempt_for_head(gs_frontdesk *fd, const gs_sched_free *free_now,
                             const gs_sched_job *running, int n_run, const gs_sched_job *pending,
                             int n_pend) {
  const gs_sched_job *head = NULL;
  for (int k = 0; k < n_pend && !head; k++)
    if (!pending[k].start && strcmp(pending[k].reason, "Resources") == 0)
      head = &pending[k];
  if (!head || n_run == 0)
    return;
  bool *victim = calloc((size_t)n_run, sizeof *victim);
  if (!victim)
    return;
  if (gs_sched_victims(free_now, &fd->total, running, n_run, head, victim) > 0) {
    double now = gs_wall_s();
    for (int i = 0; i < n_run; i++) {
      active_job *a = victim[i] ? gs_fd_find_active(fd, running[i].id) : NULL;
      if (!a || a->job->pid <= 0)
        continue;
      a->job->preempted_by = head->id;
      a->job->term_sent_at = now;
      signal_job(a, SIGTERM);
      GS_LOGI("sched", "job %lld preempted for job %lld", (long long)a->job->id,
              (long long)head->id);
    }
  }
  free(victim);
}

static void schedule(gs_frontdesk *fd) {
  int n_run = 0, n_pend = 0;
  for (int i = 0; i < fd->n_active; i++) {
    if (fd->active[i].job->state == GS_JOB_RUNNING)
      n_run++;
    else if (fd->active[i].job->state == GS_JOB_PENDING)
      n_pend++;
  }
  if (n_pend == 0)
    return;
  gs_sched_job *running = calloc((size_t)n_run + 1, sizeof *running);
  gs_sched_job *pending = calloc((size_t)n_pend + 1, sizeof *pending);
  int *index = calloc((size_t)n_pend + 1, sizeof *index);
  gs_sched_tenant *tenants = calloc((size_t)fd->n_tenants + 1, sizeof *tenants);
  if (!running || !pending || !index || !tenants)
    goto out;
  for (int t = 0; t < fd->n_tenants; t++) {
    tenants[t] = sched_tenant_of(&fd->tenants[t]);
  }
  n_run = n_pend = 0;
  for (int i = 0; i < fd->n_active; i++) {
    const gs_job *j = fd->active[i].job;
    if (!gs_fd_in_queue(j) || j->slurm) /* Slurm places its own */
      continue;
    gs_sched_job s = {.id = j->id, .tenant = tenant_index(fd, j->tenant), .priority = j->priority,
                      .seq = j->id, .need = j->need, .placement = j->placement,
                      .limit_s = j->time_limit_s};
    if (j->state == GS_JOB_RUNNING) {
      s.end_s = j->time_limit_s > 0 ? (int64_t)j->start_time + j->time_limit_s : GS_SCHED_NO_END;
      s.leaving = j->cancel_requested || j->timed_out || j->preempted_by || j->over_memory[0];
      running[n_run++] = s;
    } else {
      index[n_pend] = i;
      pending[n_pend++] = s;
    }
  }
  gs_sched_free free_now;
  snapshot_free(fd, &free_now);
  gs_sched_free before = free_now;
  gs_sched_plan(&free_now, &fd->total, tenants, fd->n_tenants, running, n_run, pending, n_pend,
                (int64_t)gs_wall_s());
  if (fd->set.preemption)
    preempt_for_head(fd, &before, running, n_run, pending, n_pend);
  for (int k = 0; k < n_pend; k++) {
    active_job *a = &fd->active[index[k]];
    gs_job *j = a->job;
    if (!pending[k].start) {
      /* Why it waits changes with every pass: kept in memory only (writing
       * it would cost a synced transaction per pending job). */
      snprintf(j->reason, sizeof j->reason, "%s",
               pending[k].tenant < 0 ? "tenant removed" : pending[k].reason);
      continue;
    }
    j->placement = pending[k].placement;
    int rc = book_devices(fd, j, j->placement);
    if (rc < 0) { /* a model instance booked the device meanwhile */
      snprintf(j->reason, sizeof j->reason, "Resources");
      continue;
    }
    rc = launch(fd, a);
    if (rc == LAUNCH_NOT_NOW) {
      gs_booking_release(j->booking);
      j->booking = NULL;
    } else if (rc < 0) {
      gs_booking_release(j->booking);
      j->booking = NULL;
      j->end_time = gs_wall_s();
      gs_fd_set_state(fd, j, GS_JOB_FAILED, gs_error_detail());
    }
  }
out:
  free(running);
  free(pending);
  free(index);
  free(tenants);
}

/* A Slurm job's two log files, which Slurm wrote into the tenant's
 * directory (unlink: an entry the tenant swapped for a link goes, not
 * what it points to). */
static void remove_slurm_logs(gs_frontdesk *fd, int64_t id) {
  gs_job *j = NULL;
  if (gs_store_job_get(fd->store, id, &j) < 0 || !j->slurm) {
    gs_job_free(j);
    return;
  }
  for (int k = 0; k < 2; k++) {
    const char *path = json_string_value(json_object_get(j->slurm, k ? "stderr" : "stdout"));
    if (path && unlink(path) < 0 && errno != ENOENT)
      GS_LOGW("sched", "cannot remove %s: %s", path, strerror(errno));
  }
  GS_LOGI("sched", "job %lld's Slurm logs removed (ended over %lld s ago)", (long long)id,
          (long long)fd->set.job_retention_s);
  gs_job_free(j);
}

/* Removes the directories (work files and logs) of jobs that ended more
 * than the retention period ago, and the log files of Slurm's; their
 * records, and so the accounting, stay in the store. Each pass asks the store for the jobs that passed the
 * period since the last pass (all of them at the first), not every job
 * there is. Called without fd->lock (a removal can take long). */
static void remove_old_job_dirs(gs_frontdesk *fd, double now, double *done_until) {
  double cutoff = now - (double)fd->set.job_retention_s;
  int64_t *ids = NULL;
  int n = 0;
  if (fd->set.job_retention_s <= 0 ||
      gs_store_jobs_ended_between(fd->store, *done_until, cutoff, &ids, &n) < 0)
    return;
  for (int i = 0; i < n; i++) {
    pthread_mutex_lock(&fd->lock);
    bool active = gs_fd_find_active(fd, ids[i]) != NULL;
    pthread_mutex_unlock(&fd->lock);
    char dir[600];
    job_dir(fd, ids[i], dir, sizeof dir);
    if (!active)
      remove_slurm_logs(fd, ids[i]);
    if (active || access(dir, F_OK) != 0) /* queued again, or removed on an earlier run */
      continue;
    if (gs_remove_tree(dir) < 0)
      GS_LOGW("sched", "cannot remove %s: %s", dir, strerror(errno));
    else
      GS_LOGI("sched", "job %lld's directory removed (ended over %lld s ago)",
              (long long)ids[i], (long long)fd->set.job_retention_s);
  }
  free(ids);
  *done_until = cutoff;
}

static void *scheduler_thread(void *arg) {
  gs_frontdesk *fd = arg;
  struct pollfd *fds = NULL;
  int cap = 0;
  double next_watch = 0, next_cleanup = 0, cleaned_until = 0;
  pthread_mutex_lock(&fd->lock);
  while (!fd->stop) {
    double now = gs_wall_s();
    bool write_failed = false;
    for (int i = 0; i < fd->n_active;) {
      active_job *a = &fd->active[i];
      gs_job *j = a->job;
      bool gone = false;
      /* After one write fails in a pass the rest wait for the next: each
       * failure can take the store's busy timeout, with the lock held. */
      if (j->unsaved && !write_failed && !(write_failed = gs_store_job_update(fd->store, j,
                                                                                true) < 0)) {
        j->unsaved = false;
        GS_LOGI("sched", "job %lld: its state %s is written now", (long long)j->id,
                gs_job_state_name(j->state));
      }
      if (j->state == GS_JOB_RUNNING && !j->slurm) {
        if (a->pidfd >= 0) {
          struct pollfd p = {.fd = a->pidfd, .events = POLLIN};
          gone = poll(&p, 1, 0) > 0;
        } else {
          /* No pidfd (an old kernel): reap it if it is our child, else
           * look for it in /proc. */
          gone = waitpid(j->pid, NULL, WNOHANG) == j->pid ||
                 gs_process_start_ticks(j->pid) != j->pid_start;
        }
      }
      if (gone && settle(fd, a) && !j->unsaved) {
        remove_active(fd, i);
        continue;
      }
      if (!gs_fd_in_queue(j) && !j->unsaved) { /* failed to launch, or ended and now written */
        remove_active(fd, i);
        continue;
      }
      i++;
    }
    enforce_limits(fd, now);
    if (now >= next_watch) {
      watch_device_memory(fd, now);
      next_watch = now + 0.5;
    }
    if (now >= next_cleanup) {
      pthread_mutex_unlock(&fd->lock);
      remove_old_job_dirs(fd, now, &cleaned_until);
      pthread_mutex_lock(&fd->lock);
      /* Every minute, or as often as a short retention needs. */
      int64_t every = fd->set.job_retention_s / 2;
      next_cleanup = now + (double)(every < 1 ? 1 : every > 60 ? 60 : every);
    }
    schedule(fd);
    /* Sleep until a submission, a cancel, a job's end, or a second passes
     * (time limits; jobs whose end no pidfd reports). */
    if (cap < fd->n_active + 1) {
      cap = fd->n_active + 64;
      struct pollfd *grown = realloc(fds, (size_t)cap * sizeof *fds);
      if (!grown) {
        cap = 0;
        pthread_mutex_unlock(&fd->lock);
        sleep(1);
        pthread_mutex_lock(&fd->lock);
        continue;
      }
      fds = grown;
    }
    int n = 0;
    fds[n++] = (struct pollfd){.fd = fd->wake_fd, .events = POLLIN};
    for (int i = 0; i < fd->n_active; i++)
      if (fd->active[i].pidfd >= 0)
        fds[n++] = (struct pollfd){.fd = fd->active[i].pidfd, .events = POLLIN};
    pthread_mutex_unlock(&fd->lock);
    if (poll(fds, (nfds_t)n, 500) > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      if (read(fd->wake_fd, &v, sizeof v) < 0) {
        /* nothing to drain */
      }
    }
    pthread_mutex_lock(&fd->lock);
  }
  pthread_mutex_unlock(&fd->lock);
  free(fds);
  return NULL;
}

/* ---- jobs: the calls ------------------------------------------------------------------------ */

/* A job that names no CPU or memory limit gets the daemon's default, within
 * its tenant's quota (the quota itself where the daemon has no default), so
 * that every job is limited in its cgroup and charged for what it may use. */
static void apply_default_limits(const gs_frontdesk *fd, const gs_tenant *t, gs_sched_need *n) {
  if (n->cpus == 0) {
    n->cpus = fd->set.job_default_cpus;
    if (t->max_cpus > 0 && (n->cpus == 0 || n->cpus > t->max_cpus))
      n->cpus = t->max_cpus;
  }
  if (n->host_mem == 0) {
    n->host_mem = fd->set.job_default_mem;
    if (t->max_host_mem > 0 && (n->host_mem == 0 || n->host_mem > t->max_host_mem))
      n->host_mem = t->max_host_mem;
  }
}

/* Why a job can never fit its tenant's quotas, even with nothing else of
 * the tenant running; false when it can. */
static bool beyond_quota(const gs_frontdesk *fd, const gs_tenant *t, const gs_sched_need *n,
                         char *why, size_t cap) {
  gs_sched_tenant q = sched_tenant_of(t);
  if (gs_sched_within_quota_alone(&q, &fd->total, n))
    return false;
  char have[32], want[32];
  if (t->max_cpus > 0 && n->cpus > t->max_cpus)
    snprintf(why, cap, "it asks for %g CPUs; tenant '%s' may use %g", n->cpus, t->name,
             t->max_cpus);
  else if (t->max_host_mem > 0 && n->host_mem > t->max_host_mem)
    snprintf(why, cap, "it asks for %s of memory; tenant '%s' may use %s",
             gs_format_bytes(n->host_mem, want, sizeof want), t->name,
             gs_format_bytes(t->max_host_mem, have, sizeof have));
  else if (t->max_devices > 0 && (n->gpus > 0 ? n->gpus : n->gpu_share / 100.0) > t->max_devices)
    snprintf(why, cap, "it asks for more devices than the %g tenant '%s' may use",
             t->max_devices, t->name);
  else
    snprintf(why, cap, "it asks for more device memory than the %s tenant '%s' may use",
             gs_format_bytes(t->max_device_mem, have, sizeof have), t->name);
  return true;
}


static bool possible(gs_frontdesk *fd, const gs_sched_need *n, char *why, size_t cap) {
  if (n->gpus > 0 && (n->gpu_mem > 0 || n->gpu_share > 0)) {
    snprintf(why, cap, "ask for whole devices (gpus) or a slice of one (gpu_mem, gpu_share), "
                       "not both");
    return false;
  }
  if (n->gpus < 0 || n->gpu_share < 0 || n->gpu_share > 100 || !(n->cpus >= 0)) {
    snprintf(why, cap, "gpus, cpus and gpu_share (0-100) cannot be negative");
    return false;
  }
  if (gs_sched_possible(&fd->total, n))
    return true;
  if (n->gpus > fd->n_devices || ((n->gpu_mem || n->gpu_share) && fd->n_devices == 0))
    snprintf(why, cap, "it asks for %d device(s); %d device(s) here can be booked by jobs%s",
             n->gpus ? n->gpus : 1, fd->n_devices,
             fd->n_devices == 0 ? " (--job-devices chooses them)" : "");
  else if (n->cpus > fd->total.cpus)
    snprintf(why, cap, "it asks for %g CPUs; this machine has %g", n->cpus, fd->total.cpus);
  else if (n->host_mem > fd->total.host_mem)
    snprintf(why, cap, "it asks for %llu bytes of memory; this machine has %llu",
             (unsigned long long)n->host_mem, (unsigned long long)fd->total.host_mem);
  else
    snprintf(why, cap, "no device has %llu bytes of memory and %d%% of its compute",
             (unsigned long long)n->gpu_mem, n->gpu_share);
  return false;
}

/* Variables that say which devices a job may use, or who it is: the
 * daemon's to set. */
static bool reserved_variable(const char *kv) {
  static const char *const names[] = {"CUDA_VISIBLE_DEVICES=", "CUDA_DEVICE_ORDER=",
                                      "NVIDIA_VISIBLE_DEVICES=", "HIP_VISIBLE_DEVICES=",
                                      "ROCR_VISIBLE_DEVICES=", "GPU_DEVICE_ORDINAL=",
                                      "ZE_AFFINITY_MASK=", "ONEAPI_DEVICE_SELECTOR=", "GPUSRV_"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strncmp(kv, names[i], strlen(names[i])) == 0)
      return true;
  return false;
}

/* A NULL-terminated list of strings as a JSON array (how a job keeps its
 * command and environment on disk); NULL when a string is not UTF-8. */
static json_t *json_strings(const char *const *list) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && list && list[i]; i++)
    if (json_array_append_new(arr, json_string(list[i])) < 0) {
      json_decref(arr);
      return NULL;
    }
  return arr;
}

/* The caller's tenant's user, for podman. */
static int container_user_of(gs_frontdesk *fd, const gs_principal *who, identity *ident) {
  pthread_mutex_lock(&fd->lock);
  gs_tenant *t = gs_fd_find_tenant(fd, who->tenant);
  int rc = t ? gs_fd_resolve_identity(t, ident) : gs_error(GS_EPERM, "no tenant '%s'", who->tenant);
  pthread_mutex_unlock(&fd->lock);
  return rc;
}

int gs_images_list(gs_frontdesk *fd, const gs_principal *who, gs_image_info **out, int *n) {
  *out = NULL;
  *n = 0;
  if (!fd->set.allowed_images[0])
    return GS_OK; /* no containers here */
  identity ident = {0};
  if (container_user_of(fd, who, &ident) < 0)
    return gs_error_code();
  gs_container_user u = {.uid = ident.uid, .gid = ident.gid, .name = ident.user,
                         .home = ident.home};
  return gs_container_images(&u, fd->set.allowed_images, out, n);
}

/* A container job's image and mounts checked (container.h), and its image
 * looked for in the tenant's user's local images, outside the front desk's
 * lock (podman takes a moment). *out: the job's container object. */
static int check_container(gs_frontdesk *fd, const gs_principal *who, const gs_job_request *req,
                           json_t **out) {
  for (size_t i = 0; req->env && req->env[i]; i++) {
    const char *kv = req->env[i];
    size_t key = strcspn(kv, "=");
    /* podman's env file reads other lines otherwise: "#" comments, keys
     * with blanks, and keys without a value or with '*' taken from its own
     * environment. */
    bool name_ok = key > 0 && kv[key] == '=' && !isdigit((unsigned char)kv[0]) &&
                   strspn(kv, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
                       key;
    if (!name_ok)
      return gs_error(GS_EINVAL, "env entry %zu: a container job's variable names are letters, "
                      "digits and '_'", i);
    if (strchr(kv, '\n'))
      return gs_error(GS_EINVAL, "env entry %zu holds a newline, which a container's "
                      "environment file cannot", i);
  }
  gs_container_policy policy = {.allowed_images = fd->set.allowed_images,
                                .host_network = fd->set.container_host_network,
                                .pull = fd->set.pull_images};
  json_t *c = gs_container_from_request(&policy, req);
  if (!c)
    return gs_error_code();
  identity ident = {0};
  int rc = container_user_of(fd, who, &ident);
  gs_container_user u = {.uid = ident.uid, .gid = ident.gid, .name = ident.user,
                         .home = ident.home};
  if (rc == 0 && !fd->set.pull_images) /* else podman pulls it when the job starts */
    rc = gs_container_image_present(&u, req->image);
  if (rc < 0) {
    json_decref(c);
    return rc;
  }
  *out = c;
  return GS_OK;
}

/* A new PENDING job of `who` as `req` asks (name, command, environment,
 * directory, needs and limits); NULL with the reason recorded. The caller
 * frees it with gs_job_free. */
gs_job *gs_fd_new_job(const gs_principal *who, const gs_job_request *req) {
  gs_job *j = calloc(1, sizeof *j);
  if (!j) {
    gs_error(GS_ENOMEM, "out of memory for a job");
    return NULL;
  }
  snprintf(j->tenant, sizeof j->tenant, "%s", who->tenant);
  j->tenant_serial = who->tenant_serial;
  snprintf(j->name, sizeof j->name, "%s", req->name && req->name[0] ? req->name : req->argv[0]);
  j->argv = json_strings(req->argv);
  j->env = json_strings(req->env);
  if (!j->argv || !j->env) {
    gs_job_free(j);
    gs_error(GS_EINVAL, "the command and its environment must be UTF-8 text");
    return NULL;
  }
  snprintf(j->chdir, sizeof j->chdir, "%s", req->chdir ? req->chdir : "");
  j->need = req->need;
  j->time_limit_s = req->time_limit_s;
  j->priority = req->priority;
  j->requeue = req->requeue;
  j->state = GS_JOB_PENDING;
  j->exit_code = -1;
  j->submit_time = gs_wall_s();
  return j;
}

int gs_job_submit(gs_frontdesk *fd, const gs_principal *who, const gs_job_request *req,
                  int64_t *id) {
  if (!req->argv || !req->argv[0])
    return gs_error(GS_EINVAL, "a job needs a command");
  for (size_t i = 0; req->argv[i]; i++)
    if (!req->argv[i][0])
      return gs_error(GS_EINVAL, "the command's arguments must be non-empty strings (argument %zu)",
                      i);
  for (size_t i = 0; req->env && req->env[i]; i++) {
    const char *kv = req->env[i];
    if (!strchr(kv, '=') || kv[0] == '=')
      return gs_error(GS_EINVAL, "env entry %zu is not \"NAME=VALUE\"", i);
    if (reserved_variable(kv))
      return gs_error(GS_EINVAL, "env entry %zu sets %.*s, which the daemon sets from the "
                                 "job's booking", i, (int)(strchr(kv, '=') - kv), kv);
  }
  if (req->chdir && req->chdir[0] && req->chdir[0] != '/')
    return gs_error(GS_EINVAL, "chdir must be an absolute path, not '%s'", req->chdir);
  if (req->chdir && strlen(req->chdir) >= sizeof ((gs_job *)0)->chdir)
    return gs_error(GS_EINVAL, "chdir is longer than %zu bytes",
                    sizeof ((gs_job *)0)->chdir - 1);
  if (req->time_limit_s < 0 || req->time_limit_s > MAX_TIME_LIMIT_S)
    return gs_error(GS_EINVAL, "a time limit is 0 (none) to %lld seconds, not %lld",
                    (long long)MAX_TIME_LIMIT_S, (long long)req->time_limit_s);
  if (req->priority < -1000 || req->priority > 1000)
    return gs_error(GS_EINVAL, "priority is -1000 to 1000, not %d", req->priority);
  if (!(req->need.cpus >= 0))
    return gs_error(GS_EINVAL, "cpus cannot be negative");
  if (req->nodes != 0)
    return gs_fd_submit_to_slurm(fd, who, req, id);
  if (req->gpus_per_node || req->ntasks_per_node || (req->partition && req->partition[0]) ||
      req->mpi)
    return gs_error(GS_EINVAL, "gpus_per_node, ntasks_per_node, partition and mpi are for a job "
                               "on several nodes, which Slurm runs: name its nodes");
  json_t *container = NULL;
  if (req->image && req->image[0] && check_container(fd, who, req, &container) < 0)
    return gs_error_code();
  if ((!req->image || !req->image[0]) &&
      ((req->mounts && req->mounts[0]) || (req->network && req->network[0]) || req->writable_root))
    return gs_error(GS_EINVAL, "mounts, network and writable_root are for a job in a container: "
                    "name its image");
  gs_job *j = gs_fd_new_job(who, req);
  if (!j) {
    json_decref(container);
    return gs_error_code();
  }
  j->container = container;
  pthread_mutex_lock(&fd->lock);
  gs_tenant *t = gs_fd_find_tenant(fd, who->tenant);
  if (t)
    j->tenant_serial = t->serial;
  identity ident;
  int rc = t ? gs_fd_resolve_identity(t, &ident)
             : gs_error(GS_EPERM, "no tenant '%s'", who->tenant);
  char why[256];
  if (rc == 0) {
    apply_default_limits(fd, t, &j->need);
    if (!possible(fd, &j->need, why, sizeof why) || beyond_quota(fd, t, &j->need, why, sizeof why))
      rc = gs_error(GS_EINVAL, "this job can never run here: %s", why);
  }
  if (rc == 0 && req->priority > t->max_priority)
    rc = gs_error(GS_EPERM, "tenant '%s' may submit at priority %d at most, not %d", t->name,
                  t->max_priority, req->priority);
  if (rc == 0 && fd->n_active >= GS_FD_MAX_ACTIVE)
    rc = gs_error(GS_EBUSY, "the queue is full (%d unfinished jobs)", GS_FD_MAX_ACTIVE);
  if (rc == 0)
    rc = gs_fd_reserve_active(fd); /* so that nothing can fail once it is on disk */
  if (rc == 0)
    rc = gs_store_job_insert(fd->store, j);
  if (rc == 0) {
    *id = j->id;
    gs_fd_add_active(fd, j);
  }
  pthread_mutex_unlock(&fd->lock);
  if (rc < 0) {
    gs_job_free(j);
    return rc;
  }
  gs_fd_wake(fd);
  return GS_OK;
}

/* A job is its tenant's (by serial: a later tenant of the same name does
 * not inherit it) and the admins'. */
static bool may_see(const gs_principal *who, const gs_job *j) {
  return who->admin || (j->tenant_serial != 0 && j->tenant_serial == who->tenant_serial);
}

active_job *gs_fd_find_active(gs_frontdesk *fd, int64_t id) {
  for (int i = 0; i < fd->n_active; i++)
    if (fd->active[i].job->id == id)
      return &fd->active[i];
  return NULL;
}

/* scancel through slurmrestd; the next poll records the job's end. */
int gs_job_cancel(gs_frontdesk *fd, const gs_principal *who, int64_t id) {
  pthread_mutex_lock(&fd->lock);
  active_job *a = gs_fd_find_active(fd, id);
  int rc = GS_OK;
  if (!a) {
    gs_job *j = NULL;
    rc = gs_store_job_get(fd->store, id, &j);
    if (rc == 0)
      rc = may_see(who, j) ? gs_error(GS_ESTATE, "job %lld has already ended (%s)",
                                              (long long)id, gs_job_state_name(j->state))
                                   : gs_error(GS_EPERM, "job %lld belongs to another tenant",
                                              (long long)id);
    gs_job_free(j);
  } else if (!may_see(who, a->job)) {
    rc = gs_error(GS_EPERM, "job %lld belongs to another tenant", (long long)id);
  } else if (!gs_fd_in_queue(a->job)) { /* ended; its state is still being written */
    rc = gs_error(GS_ESTATE, "job %lld has already ended (%s)", (long long)id,
                  gs_job_state_name(a->job->state));
  } else if (a->job->slurm) {
    pthread_mutex_unlock(&fd->lock);
    return gs_fd_cancel_in_slurm(fd, id); /* the lock is not held across slurmrestd's answer */
  } else if (a->job->state == GS_JOB_PENDING) {
    a->job->end_time = gs_wall_s();
    if (gs_fd_set_state(fd, a->job, GS_JOB_CANCELLED, "cancelled while pending") == 0) {
      remove_active(fd, (int)(a - fd->active));
    } else { /* not on disk: a restart would run it; it stays PENDING, and says so */
      char why[300];
      snprintf(why, sizeof why, "%s", gs_error_detail());
      a->job->state = GS_JOB_PENDING;
      a->job->unsaved = false;
      a->job->end_time = 0;
      a->job->reason[0] = '\0';
      rc = gs_error(GS_EIO, "job %lld could not be cancelled: %s", (long long)id, why);
    }
  } else if (!a->job->cancel_requested) {
    a->job->cancel_requested = true;
    a->job->term_sent_at = gs_wall_s();
    signal_job(a, SIGTERM);
  }
  pthread_mutex_unlock(&fd->lock);
  gs_fd_wake(fd);
  return rc;
}

int gs_job_get(gs_frontdesk *fd, const gs_principal *who, int64_t id, gs_job_info *out) {
  *out = (gs_job_info){0};
  pthread_mutex_lock(&fd->lock);
  active_job *a = gs_fd_find_active(fd, id);
  gs_job *stored = NULL;
  const gs_job *j = a ? a->job : NULL;
  int rc = GS_OK;
  if (!j && (rc = gs_store_job_get(fd->store, id, &stored)) == 0)
    j = stored;
  if (rc == 0 && !may_see(who, j))
    rc = gs_error(GS_EPERM, "job %lld belongs to another tenant", (long long)id);
  if (rc == 0)
    rc = gs_job_fill_info(j, out);
  if (rc == 0)
    rc = gs_store_job_events(fd->store, id, &out->events, &out->n_events);
  gs_job_free(stored);
  pthread_mutex_unlock(&fd->lock);
  if (rc < 0)
    gs_job_info_free(out);
  return rc;
}

int gs_jobs_list(gs_frontdesk *fd, const gs_principal *who, bool all, const char *tenant,
                 gs_job_info **out, int *n) {
  /* An admin may ask for one tenant by name; anyone else sees their own
   * tenant's, by its serial. */
  const char *only = who->admin && tenant && tenant[0] ? tenant : NULL;
  int64_t serial = who->admin ? 0 : who->tenant_serial;
  *out = NULL;
  *n = 0;
  pthread_mutex_lock(&fd->lock);
  /* Unfinished jobs as the queue has them now (newest first), then with
   * --all the ended ones from the store. */
  int rc = GS_OK;
  *out = calloc((size_t)fd->n_active + 1, sizeof **out);
  if (!*out)
    rc = gs_error(GS_ENOMEM, "out of memory listing jobs");
  for (int i = fd->n_active - 1; rc == 0 && i >= 0; i--)
    if ((!only || strcmp(fd->active[i].job->tenant, only) == 0) &&
        (!serial || fd->active[i].job->tenant_serial == serial))
      if ((rc = gs_job_fill_info(fd->active[i].job, &(*out)[*n])) == 0)
        (*n)++;
  gs_job_info *ended = NULL;
  int n_ended = 0;
  if (rc == 0 && all)
    rc = gs_store_jobs_ended(fd->store, only, serial, 1000, &ended, &n_ended);
  pthread_mutex_unlock(&fd->lock);
  gs_job_info *both = rc == 0 && n_ended ? realloc(*out, (size_t)(*n + n_ended) * sizeof **out)
                                        : *out;
  if (both && n_ended) {
    memcpy(both + *n, ended, (size_t)n_ended * sizeof *ended); /* the elements move over */
    *out = both;
    *n += n_ended;
    free(ended);
  } else if (n_ended) {
    gs_job_infos_free(ended, n_ended);
    rc = gs_error(GS_ENOMEM, "out of memory listing jobs");
  }
  if (rc < 0) {
    gs_job_infos_free(*out, *n);
    *out = NULL;
    *n = 0;
  }
  return rc;
}

int gs_job_log_path(gs_frontdesk *fd, const gs_principal *who, int64_t id, const char *stream,
                    char *path, size_t cap, bool *ended) {
  if (strcmp(stream, "stdout") != 0 && strcmp(stream, "stderr") != 0)
    return gs_error(GS_EINVAL, "a log is stdout or stderr, not '%s'", stream);
  pthread_mutex_lock(&fd->lock);
  active_job *a = gs_fd_find_active(fd, id);
  int rc = GS_OK;
  bool visible = false;
  char slurm_log[700] = ""; /* a Slurm job's: where Slurm writes it */
  double end_time = 0;
  gs_job *j = NULL;
  if (a) {
    visible = may_see(who, a->job);
    *ended = !gs_fd_in_queue(a->job);
  } else if ((rc = gs_store_job_get(fd->store, id, &j)) == 0) {
    visible = may_see(who, j);
    *ended = true;
  }
  const json_t *slurm = a ? a->job->slurm : j ? j->slurm : NULL;
  bool in_slurm = slurm != NULL;
  end_time = a ? a->job->end_time : j ? j->end_time : 0;
  if (in_slurm)
    snprintf(slurm_log, sizeof slurm_log, "%s",
             json_string_value(json_object_get(slurm, stream[3] == 'o' ? "stdout" : "stderr"))
                 ?: "");
  gs_job_free(j);
  pthread_mutex_unlock(&fd->lock);
  if (rc < 0)
    return rc;
  if (!visible)
    return gs_error(GS_EPERM, "job %lld belongs to another tenant", (long long)id);
  bool retention_passed = *ended && fd->set.job_retention_s > 0 && end_time > 0 &&
                          end_time < gs_wall_s() - (double)fd->set.job_retention_s;
  char dir[700];
  if (in_slurm)
    snprintf(dir, sizeof dir, "%s", slurm_log);
  else
    job_dir(fd, id, dir, sizeof dir);
  if (*ended && access(dir, F_OK) != 0 && errno == ENOENT && (!in_slurm || retention_passed))
    return gs_error(GS_ENOENT, "job %lld's logs were removed: ended jobs' directories are kept "
                               "%lld s (--job-retention)", (long long)id,
                    (long long)fd->set.job_retention_s);
  if (in_slurm)
    snprintf(path, cap, "%s", slurm_log);
  else
    snprintf(path, cap, "%s/%s.log", dir, stream);
  return GS_OK;
}

int gs_usage_list(gs_frontdesk *fd, const gs_principal *who, const char *tenant, double since,
                  gs_usage_row **out, int *n) {
  const char *only = who->admin && tenant && tenant[0] ? tenant : NULL;
  int64_t serial = who->admin ? 0 : who->tenant_serial;
  pthread_mutex_lock(&fd->lock);
  int rc = gs_store_usage(fd->store, only, serial, since, out, n);
  pthread_mutex_unlock(&fd->lock);
  return rc;
}

int gs_frontdesk_devices(gs_frontdesk *fd, gs_frontdesk_device *out, int cap) {
  int n = 0;
  for (int d = 0; d < fd->n_devices && n < cap; d++)
    out[n++] = (gs_frontdesk_device){
        .device = fd->devices[d], .memory_total = fd->total.dev_mem[d],
        .memory_booked = gs_ledger_booked(fd->set.ledger, fd->devices[d]),
        .share_booked = gs_ledger_share_booked(fd->set.ledger, fd->devices[d])};
  return n;
}

gs_ledger *gs_frontdesk_ledger(gs_frontdesk *fd) { return fd->set.ledger; }

/* ---- open and close ------------------------------------------------------------------------ */

static int choose_devices(gs_frontdesk *fd) {
  const char *want = fd->set.job_devices;
  for (int i = 0; i < gs_hal_device_count() && fd->n_devices < GS_SCHED_MAX_DEVICES; i++) {
    gs_device_t *dev = gs_hal_device(i);
    const gs_device_info *info = gs_device_get_info(dev);
    bool take;
    if (!want[0])
      take = info->type != GS_DEVICE_CPU;
    else if (strcmp(want, "all") == 0)
      take = true;
    else {
      take = false;
      char copy[256];
      snprintf(copy, sizeof copy, "%s", want);
      for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && !take;
           tok = strtok_r(NULL, ",", &save))
        take = strcmp(tok, info->id) == 0;
    }
    if (!take)
      continue;
    int d = fd->n_devices++;
    fd->devices[d] = dev;
    fd->total.dev_mem[d] = gs_ledger_capacity(fd->set.ledger, dev);
    fd->total.dev_share[d] = 100;
  }
  fd->total.n_devices = fd->n_devices;
  /* Every id named must exist. */
  if (want[0] && strcmp(want, "all") != 0) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", want);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
      if (!gs_hal_device_find(tok))
        return gs_error(GS_EINVAL, "--job-devices names '%s', which is no device here", tok);
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  fd->total.cpus = cores > 0 ? (double)cores : 1;
  fd->total.host_mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
  return GS_OK;
}

/* The first start: an admin tenant whose jobs run as nobody when the daemon
 * is root (never as root by default), and its token in a file only the
 * daemon's user can read. */
static int first_start(gs_frontdesk *fd) {
  gs_tenant admin = {.name = "admin", .weight = 1, .admin = true, .max_priority = 1000};
  if (geteuid() == 0) {
    snprintf(admin.unix_user, sizeof admin.unix_user, "nobody");
  } else {
    struct passwd *pw = getpwuid(geteuid());
    snprintf(admin.unix_user, sizeof admin.unix_user, "%s", pw ? pw->pw_name : "nobody");
  }
  char token[96];
  int rc = gs_tenant_add(fd, &admin, token, sizeof token);
  if (rc < 0)
    return rc;
  snprintf(fd->admin_token_path, sizeof fd->admin_token_path, "%s/admin.token", fd->set.state_dir);
  unlink(fd->admin_token_path); /* a stale one from a state that was wiped */
  int f = open(fd->admin_token_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (f < 0)
    return gs_error(GS_EIO, "cannot write %s: %s", fd->admin_token_path, strerror(errno));
  fchmod(f, 0600);
  dprintf(f, "%s\n", token);
  close(f);
  return GS_OK;
}

/* The pid file the supervisor of the job in `dir` writes before it runs
 * the job: "PID START_TICKS BOOT_ID". False if there is none; boot ""
 * where the file names no boot. */
static bool read_supervisor_pid(const char *dir, long long *pid, unsigned long long *start,
                                char boot[64]) {
  char path[700], text[128];
  snprintf(path, sizeof path, "%s/supervisor.pid", dir);
  boot[0] = '\0';
  return gs_read_text_file(path, text, sizeof text) > 0 &&
         sscanf(text, "%lld %llu %63s", pid, start, boot) >= 2;
}

/* Whether the supervisor of the job in `dir` started during this boot (its
 * pid file names the boot it started in); true when the file says nothing. */
static bool supervisor_boot_matches(const char *dir) {
  long long pid;
  unsigned long long start;
  char boot[64], now[64];
  if (!read_supervisor_pid(dir, &pid, &start, boot) || !boot[0] ||
      gs_boot_id(now, sizeof now) < 0)
    return true;
  return strcmp(boot, now) == 0;
}

/* Jobs of an earlier run: pending ones queue again; running ones are
 * adopted if their supervisor still lives, else settled from what it wrote
 * (or LOST). */
static int take_back_jobs(gs_frontdesk *fd) {
  gs_job **jobs = NULL;
  int n = 0;
  int rc = gs_store_jobs_active(fd->store, &jobs, &n);
  if (rc < 0)
    return rc;
  for (int i = 0; i < n; i++) {
    gs_job *j = jobs[i];
    j->exit_code = j->state == GS_JOB_RUNNING ? j->exit_code : -1;
    if (gs_fd_add_active(fd, j) < 0) {
      gs_job_free(j);
      continue;
    }
    active_job *a = &fd->active[fd->n_active - 1];
    if (j->state != GS_JOB_RUNNING || j->slurm) /* Slurm's: asked again by poll_slurm */
      continue;
    /* Its placement and booking, from the devices it had. */
    char copy[256];
    snprintf(copy, sizeof copy, "%s", j->devices);
    j->placement = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
      for (int d = 0; d < fd->n_devices; d++)
        if (strcmp(gs_device_get_info(fd->devices[d])->id, tok) == 0)
          j->placement |= (gs_sched_placement)1 << d;
    char dir[600], path[700];
    job_dir(fd, j->id, dir, sizeof dir);
    if (j->pid <= 0) {
      /* The daemon stopped while starting it: the supervisor, if it came
       * to be, left its pid; if it did not, the job never ran. */
      long long pid = 0;
      unsigned long long start = 0;
      char boot[64];
      if (read_supervisor_pid(dir, &pid, &start, boot)) {
        j->pid = (pid_t)pid;
        j->pid_start = start;
      } else {
        snprintf(path, sizeof path, "%s/exit.json", dir);
        if (access(path, F_OK) != 0) {
          j->start_time = 0;
          j->runs--;
          gs_fd_set_state(fd, j, GS_JOB_PENDING, "Requeued: the daemon stopped while starting it");
          continue;
        }
      }
    }
    /* A supervisor from before the last boot cannot be alive, whatever
     * process now has its pid and start time: its pid file names its boot. */
    bool same_boot = supervisor_boot_matches(dir);
    int pidfd = j->pid > 0 && same_boot ? open_pidfd(j->pid) : -1;
    /* A kernel before 5.3 has no pidfds: /proc alone tells then. */
    bool no_pidfds = pidfd < 0 && j->pid > 0 && same_boot && errno == ENOSYS;
    if ((pidfd >= 0 || no_pidfds) && same_boot && j->pid_start != 0 &&
        gs_process_start_ticks(j->pid) == j->pid_start) {
      a->pidfd = pidfd;
      if (book_devices(fd, j, j->placement) < 0)
        GS_LOGW("sched", "job %lld: adopted, but its devices could not be booked again: %s",
                (long long)j->id, gs_error_detail());
      GS_LOGI("sched", "job %lld adopted (pid %d)", (long long)j->id, (int)j->pid);
    } else {
      if (pidfd >= 0)
        close(pidfd);
      j->pid_start = 0;
      if (settle(fd, a) && !j->unsaved)
        remove_active(fd, fd->n_active - 1);
    }
  }
  free(jobs);
  return GS_OK;
}

/* Jobs run as their tenants' users, who must be able to pass through every
 * directory above their work directories. */
static void warn_if_unreachable(const char *jobs_dir) {
  char real[PATH_MAX];
  if (!realpath(jobs_dir, real))
    return;
  for (char *slash = real; slash; slash = strchr(slash + 1, '/')) {
    char saved = slash[1];
    slash[1] = '\0';
    struct stat sb;
    if (stat(real, &sb) == 0 && !(sb.st_mode & S_IXOTH)) {
      GS_LOGW("sched", "jobs will not reach their work directories: %s is not traversable by "
                       "other users (chmod o+x, or choose another --state-dir)", real);
      slash[1] = saved;
      return;
    }
    slash[1] = saved;
  }
}

/* The highest numbered job directory under jobs/ (0: none). */
static int64_t last_job_dir(const char *jobs_dir) {
  DIR *d = opendir(jobs_dir);
  int64_t last = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    char *end;
    long long id = strtoll(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && id > last)
      last = id;
  }
  if (d)
    closedir(d);
  return last;
}

/* What the database says against what the state directory shows: a
 * database with no tenants beside a previous daemon's admin.token or job
 * directories was emptied or replaced, and job directories past its last
 * id would be handed to new jobs (and chowned to their users). Both are
 * refused unless the operator asks to start anew (--reset-state). */
static int check_state_matches(gs_frontdesk *fd) {
  char jobs[600], token[600];
  snprintf(jobs, sizeof jobs, "%s/jobs", fd->set.state_dir);
  snprintf(token, sizeof token, "%s/admin.token", fd->set.state_dir);
  int64_t last_dir = last_job_dir(jobs), last_id = 0;
  int rc = gs_store_job_last_id(fd->store, &last_id);
  if (rc < 0)
    return rc;
  bool lost_all = fd->n_tenants == 0 && (access(token, F_OK) == 0 || last_dir > 0);
  if (!fd->set.reset_state && lost_all)
    return gs_error(GS_ESTATE, "%s holds a previous daemon's files (admin.token, jobs/) but its "
                               "state.db has no tenants: the database was emptied or replaced. "
                               "Restore it, or start with --reset-state to begin anew (the "
                               "tenants, tokens and job records are gone)", fd->set.state_dir);
  if (!fd->set.reset_state && last_dir > last_id)
    return gs_error(GS_ESTATE, "%s/%lld exists but the newest job state.db knows is %lld: the "
                               "database was reset or restored from an older copy, and new jobs "
                               "would reuse those directories. Restore the newest database, or "
                               "start with --reset-state to number new jobs past them", jobs,
                    (long long)last_dir, (long long)last_id);
  if (last_dir > last_id) {
    GS_LOGW("sched", "--reset-state: new jobs are numbered after %lld, past jobs/ on disk",
            (long long)last_dir);
    rc = gs_store_job_ids_after(fd->store, last_dir);
  }
  return rc;
}

/* The job supervisor lives beside the running executable (the build tree)
 * or in ../lib/gpusrv (an installed tree). */
static int find_shim(char *out, size_t cap) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return gs_error(GS_EIO, "cannot find this executable: %s", strerror(errno));
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash)
    *slash = '\0';
  const char *const places[] = {"", "/../lib/gpusrv"};
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
    snprintf(out, cap, "%s%s/gpusrv-job-shim", exe, places[i]);
    if (access(out, X_OK) == 0)
      return GS_OK;
  }
  return gs_error(GS_ENOENT, "cannot find gpusrv-job-shim in %s or %s/../lib/gpusrv: jobs "
                             "cannot start", exe, exe);
}

gs_holds *gs_frontdesk_holds(gs_frontdesk *fd) { return fd->holds; }

int gs_frontdesk_open(const gs_frontdesk_settings *settings, gs_frontdesk **out) {
  gs_frontdesk *fd = calloc(1, sizeof *fd);
  if (!fd)
    return gs_error(GS_ENOMEM, "out of memory opening the front desk");
  fd->set = *settings;
  fd->wake_fd = -1;
  pthread_mutex_init(&fd->lock, NULL);
  pthread_cond_init(&fd->slurm_cond, NULL);
  pthread_rwlock_init(&fd->tenants_lock, NULL);
  char path[600];
  int rc = GS_OK;
  snprintf(path, sizeof path, "%s/jobs", settings->state_dir);
  if (gs_mkdir_p(path) < 0)
    rc = gs_error(GS_EIO, "cannot create %s: %s", path, strerror(errno));
  if (rc == 0) {
    chmod(settings->state_dir, 0711);
    chmod(path, 0711);
    snprintf(path, sizeof path, "%s/state.db", settings->state_dir);
    rc = gs_store_open(path, &fd->store);
    if (rc == 0)
      rc = gs_store_open(path, &fd->auth_store);
  }
  if (rc == 0 && geteuid() == 0)
    warn_if_unreachable(path);
  if (rc == 0)
    rc = find_shim(fd->shim_path, sizeof fd->shim_path);
  if (rc == 0)
    rc = choose_devices(fd);
  if (rc == 0)
    rc = gs_store_tenants_load(fd->store, &fd->tenants, &fd->n_tenants);
  if (rc == 0)
    rc = check_state_matches(fd);
  if (rc == 0 && fd->n_tenants == 0)
    rc = first_start(fd);
  if (rc == 0)
    rc = take_back_jobs(fd);
  if (rc == 0) /* before the queue starts: what Slurm holds is not free for it */
    rc = gs_holds_open(fd->set.ledger, settings->state_dir, NULL, &fd->holds);
  if (rc == 0 && settings->slurm_rest_url[0])
    rc = gs_slurm_rest_open(settings->slurm_rest_url, settings->slurm_jwt_key, &fd->rest);
  if (rc == 0 && fd->rest)
    rc = gs_slurm_accounts_create(settings->slurm_accounts,
                                  settings->slurm_create_accounts ? "sacctmgr" : NULL,
                                  &fd->accounts);
  if (rc == 0)
    gs_fd_warn_unfollowed_slurm_jobs(fd);
  if (rc == 0 && (fd->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
    rc = gs_error(GS_EIO, "eventfd: %s", strerror(errno));
  if (rc == 0) {
    if (pthread_create(&fd->thread, NULL, scheduler_thread, fd) != 0)
      rc = gs_error(GS_EIO, "cannot start the scheduler thread");
    else
      fd->thread_started = true;
  }
  if (rc == 0 && fd->rest) {
    if (pthread_create(&fd->slurm_thread, NULL, gs_fd_slurm_follower, fd) != 0)
      rc = gs_error(GS_EIO, "cannot start the thread that follows Slurm's jobs");
    else
      fd->slurm_thread_started = true;
  }
  if (rc == 0)
    gs_ledger_on_release(fd->set.ledger, booking_released, fd);
  if (rc < 0) {
    gs_frontdesk_close(fd);
    return rc;
  }
  *out = fd;
  return GS_OK;
}

void gs_frontdesk_close(gs_frontdesk *fd) {
  if (!fd)
    return;
  if (fd->thread_started) {
    gs_ledger_on_release(fd->set.ledger, NULL, NULL); /* before wake_fd closes */
    pthread_mutex_lock(&fd->lock);
    fd->stop = true;
    pthread_mutex_unlock(&fd->lock);
    gs_fd_wake(fd);
    pthread_join(fd->thread, NULL);
  }
  if (fd->slurm_thread_started) {
    pthread_mutex_lock(&fd->lock);
    fd->stop = true;
    pthread_cond_signal(&fd->slurm_cond);
    pthread_mutex_unlock(&fd->lock);
    pthread_join(fd->slurm_thread, NULL);
  }
  /* Running jobs go on; the next start adopts them. Their bookings end
   * with this ledger. */
  for (int i = 0; i < fd->n_active; i++) {
    gs_booking_release(fd->active[i].job->booking);
    fd->active[i].job->booking = NULL;
    if (fd->active[i].pidfd >= 0)
      close(fd->active[i].pidfd);
    gs_job_free(fd->active[i].job);
  }
  free(fd->active);
  gs_holds_close(fd->holds);
  gs_slurm_rest_close(fd->rest);
  gs_slurm_accounts_free(fd->accounts);
  free(fd->tenants);
  if (fd->wake_fd >= 0)
    close(fd->wake_fd);
  gs_store_close(fd->store);
  gs_store_close(fd->auth_store);
  pthread_rwlock_destroy(&fd->tenants_lock);
  pthread_cond_destroy(&fd->slurm_cond);
  pthread_mutex_destroy(&fd->lock);
  free(fd);
}

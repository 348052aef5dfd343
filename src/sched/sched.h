/* sched.h - the front desk: a ledger of bookings of device memory and
 * compute share (every use of a device books what it needs; a booking that
 * does not fit is refused with which device and what is free), and the
 * tenants, queue and process jobs built on it (the front desk, below). */
#ifndef GS_SCHED_H
#define GS_SCHED_H

#include "hal/hal.h"
#include "sched/policy.h"

#include <stdbool.h>

typedef struct gs_ledger gs_ledger;
typedef struct gs_booking gs_booking;

/* A ledger over every device of the HAL, each with its memory_total_bytes
 * to hand out. The caller frees it with gs_ledger_free() after releasing
 * every booking. */
int gs_ledger_create(gs_ledger **out);
void gs_ledger_free(gs_ledger *ledger);

/* Books `bytes` of device memory for `owner` (copied, for listings and
 * messages). GS_ENOMEM when it does not fit, saying the device, the size
 * asked for and what is free. The caller releases it. */
int gs_book_memory(gs_ledger *ledger, gs_device_t *device, uint64_t bytes, const char *owner,
                   gs_booking **out);
void gs_booking_release(gs_booking *booking);
/* Calls fn(arg) on every release of a booking, under the ledger's lock (fn
 * must not book or release; it only signals): the front desk, whose pending
 * jobs may be waiting for that memory, looks again at once rather than at
 * its next pass. One listener; fn NULL removes it, and no call is made
 * after that returns. */
void gs_ledger_on_release(gs_ledger *ledger, void (*fn)(void *arg), void *arg);
/* Adds `bytes` to the memory of a booking's first device, in one step (it
 * is never released and booked again, which another booking could get in
 * between): GS_ENOMEM as gs_book_memory when it does not fit, the booking
 * then unchanged. */
int gs_booking_grow(gs_booking *booking, uint64_t bytes);

/* The longest name of a booking's owner, with its terminating zero. */
#define GS_LEDGER_OWNER_MAX 192

/* One device's part of a booking: memory and a percentage of its compute. */
typedef struct gs_booking_part {
  gs_device_t *device;
  uint64_t bytes;
  int share;
} gs_booking_part;

#define GS_BOOKING_MAX_PARTS 64

/* Books every part or none (a gang of devices): GS_ENOMEM naming the first
 * device that lacks memory or compute, and what it has free. */
int gs_book(gs_ledger *ledger, const gs_booking_part *parts, int n_parts, const char *owner,
            gs_booking **out);

/* Books all that is left of each of `devices` (memory and compute share),
 * read and taken under the ledger's lock, so that nothing booked between
 * reading and booking can make it fail. GS_EINVAL as gs_book. */
int gs_book_rest(gs_ledger *ledger, gs_device_t *const *devices, int n, const char *owner,
                 gs_booking **out);

/* Compute share of `device` booked so far, in percent (0..100). */
int gs_ledger_share_booked(gs_ledger *ledger, gs_device_t *device);

/* Whether all of `device`'s compute is booked (a whole GPU given to a job,
 * or to Slurm's job through its prolog); then `owner` (size bytes, the
 * caller's) says who holds most of it. */
bool gs_ledger_held_whole(gs_ledger *ledger, gs_device_t *device, char *owner, size_t size);

/* Calls `fn` for every booking held, under the ledger's lock (fn must not
 * book or release). */
void gs_ledger_each(gs_ledger *ledger,
                    void (*fn)(const char *owner, const gs_booking_part *parts, int n_parts,
                               void *ctx),
                    void *ctx);

/* Memory of `device` booked so far, and in all. */
uint64_t gs_ledger_booked(gs_ledger *ledger, gs_device_t *device);
uint64_t gs_ledger_capacity(gs_ledger *ledger, gs_device_t *device);
/* Sets what the ledger hands out of `device` (default: its memory_total_bytes). */
void gs_ledger_set_capacity(gs_ledger *ledger, gs_device_t *device, uint64_t bytes);

/* ---- tenants ---------------------------------------------------------------------- */

/* A tenant: who may use the machine, how much of it, and as which Unix user
 * its jobs run. Quotas of 0 mean no limit. */
typedef struct gs_tenant {
  char name[64];
  double weight;
  double max_devices;      /* whole devices; a slice counts as its share */
  uint64_t max_device_mem; /* bytes */
  int max_jobs;            /* running at once */
  double max_cpus;
  uint64_t max_host_mem;
  char unix_user[64];
  char unix_group[64];     /* "" : the user's primary group */
  bool allow_root;         /* jobs may run as uid 0 */
  int max_priority;        /* highest priority its jobs may ask for (admins set it) */
  bool admin;              /* may manage tenants and see every job */
  double created;          /* Unix seconds */
  int64_t serial;          /* this tenant's, never given to another (a name may be) */
} gs_tenant;

/* ---- the front desk: tenants, tokens, the queue and process jobs ---------------------- */

typedef struct gs_frontdesk gs_frontdesk;

typedef struct gs_frontdesk_settings {
  char state_dir[512];   /* state.db, admin.token, jobs/<id>/ */
  gs_ledger *ledger;     /* shared with the inference server's model instances */
  char job_devices[256]; /* devices jobs may book: "" every device but the CPUs, "all", or ids */
  int kill_grace_s;      /* SIGTERM, then SIGKILL after this many seconds */
  int64_t job_pids_max;  /* pid limit of each job's cgroup */
  bool preemption;       /* stop lower-priority jobs (and requeue them) for the queue's head */
  bool reset_state;      /* accept a database that lost what the state directory shows */
  uint64_t job_log_max;  /* bytes each of a job's logs may hold (0: no limit) */
  int64_t job_retention_s; /* ended jobs' directories are removed after this (0: kept) */
  double job_default_cpus;   /* CPUs of a job that names none (0: its tenant's quota, if any) */
  uint64_t job_default_mem;  /* memory of a job that names none (0: its tenant's quota, if any) */
  char allowed_images[1024]; /* images jobs may run in: shell patterns, comma-separated ("": none) */
  char cdi_spec[512];        /* the CDI spec (JSON) naming the devices a container can be given */
  bool container_host_network; /* a container job may ask for the host's network */
  bool pull_images;          /* a missing allowed image is pulled when the job starts */
  /* Multi-node jobs go to Slurm (slurm_rest.h): slurmrestd's address ("":
   * none), the cluster's JWT key, and tenants' accounts ("tenant=account,
   * ..."; a tenant not named there uses an account of its own name), made
   * with sacctmgr where slurm_create_accounts (slurm_accounts.h). */
  char slurm_rest_url[512];
  char slurm_jwt_key[512];
  char slurm_accounts[1024];
  bool slurm_create_accounts;
} gs_frontdesk_settings;

/* Opens the state database, creates the admin tenant and its token file at
 * first start (refused, unless settings->reset_state, when the directory
 * holds a previous daemon's files: the database was emptied or replaced;
 * so is a database whose job ids lag behind the job directories, which new
 * jobs would otherwise reuse), takes back the jobs of an earlier run (pending ones stay
 * queued; running ones whose processes survived are adopted, the others
 * become LOST and, with --requeue, queued again), and starts scheduling.
 * The caller closes it; jobs keep running after close and are adopted by
 * the next open. */
int gs_frontdesk_open(const gs_frontdesk_settings *settings, gs_frontdesk **out);
void gs_frontdesk_close(gs_frontdesk *fd);
/* Where the admin token was written ("" if it was not written this run). */
const char *gs_frontdesk_admin_token_path(const gs_frontdesk *fd);
/* How many tokens exist. */
int64_t gs_frontdesk_token_count(gs_frontdesk *fd);

/* Who is asking. */
typedef struct gs_principal {
  char tenant[64];
  int64_t tenant_serial; /* which tenant of that name: jobs are keyed by it */
  bool admin;
} gs_principal;

/* A bearer token's tenant; GS_EPERM when the token is unknown or wrong. */
int gs_frontdesk_authenticate(gs_frontdesk *fd, const char *token, gs_principal *out);

/* Adds a tenant and writes its first token into `token` (cap >= 80). */
int gs_tenant_add(gs_frontdesk *fd, const gs_tenant *t, char *token, size_t cap);
/* Removes a tenant and its tokens; GS_EBUSY while it has unfinished jobs. */
int gs_tenant_remove(gs_frontdesk *fd, const char *name);
/* A further token for a tenant. */
int gs_tenant_new_token(gs_frontdesk *fd, const char *name, char *token, size_t cap);
/* A tenant with how many of its jobs run and wait now. */
typedef struct gs_tenant_info {
  gs_tenant tenant;
  int running, pending;
} gs_tenant_info;

/* Every tenant: *out (the caller frees it) and *n. GS_ENOMEM. */
int gs_tenants_list(gs_frontdesk *fd, gs_tenant_info **out, int *n);

/* What `gpusrv submit` asks for. */
typedef struct gs_job_request {
  const char *name;
  const char *const *argv; /* the command, NULL-terminated, borrowed */
  const char *const *env;  /* "K=V", NULL-terminated, borrowed; may be NULL */
  const char *chdir;       /* may be NULL or "" */
  gs_sched_need need; /* cpus or host_mem 0: the daemon's default (jobs always get a limit) */
  int64_t time_limit_s;
  int priority;
  bool requeue;
  /* In a container (container.h): a local OCI image the server's
   * allowed_images permits, and bind mounts "SRC:DST[:ro]" (NULL-terminated,
   * borrowed; may be NULL). image NULL or "": a plain process job. */
  const char *image;
  const char *const *mounts;
  const char *network; /* "none" (NULL, "": the default) or "host", where the daemon allows it */
  bool writable_root;  /* the image's root filesystem writable (read-only by default) */
  /* nodes > 0: a job handed to Slurm (slurm_batch.h), on that many nodes,
   * with gpus_per_node GPUs and ntasks_per_node tasks on each (0: 1), in
   * `partition` (NULL, "": Slurm's default), launched by srun with PMIx
   * where `mpi`. Refused where the daemon has no slurmrestd. */
  int nodes, gpus_per_node, ntasks_per_node;
  const char *partition;
  bool mpi;
} gs_job_request;

/* Queues a job for `who`; it is on disk when this returns. GS_EINVAL
 * (with why) for a request that can never run here. */
int gs_job_submit(gs_frontdesk *fd, const gs_principal *who, const gs_job_request *req,
                  int64_t *id);
/* Cancels a job: a pending one at once, a running one by SIGTERM to its
 * processes, then SIGKILL after the grace period. GS_ENOENT / GS_EPERM. */
int gs_job_cancel(gs_frontdesk *fd, const gs_principal *who, int64_t id);

/* One change of a job's state, for its audit trail. */
typedef struct gs_job_event {
  double time; /* Unix seconds */
  char state[16];
  char reason[256];
} gs_job_event;

/* A job as the front desk reports it. */
typedef struct gs_job_info {
  int64_t id;
  char tenant[64];
  char name[128];
  char **argv;           /* the command, NULL-terminated */
  gs_sched_need need;
  int64_t time_limit_s;  /* 0: none */
  int priority;
  bool requeue;
  char image[256];       /* "" : not in a container */
  char **mounts;         /* NULL-terminated; empty where none */
  char network[8];       /* a container's: "none" or "host" */
  bool writable_root;
  char state[16];        /* "PENDING", "RUNNING", "COMPLETED", ... */
  bool ended;
  bool unsaved;          /* its state is not yet on disk (a write failed): it is retried */
  char reason[256];
  char devices[256];     /* "cuda0,cuda1" as booked */
  double submit_time, start_time, end_time; /* Unix seconds; 0 if not yet */
  int exit_code;         /* -1 if none */
  int signal;            /* 0 if none */
  int runs;
  double cpu_seconds, device_seconds, device_mem_byte_seconds;
  /* A job handed to Slurm: its id there (0: a job of this machine), what
   * it asked for, and the nodes it got. */
  int64_t slurm_job_id;
  int nodes, gpus_per_node, ntasks_per_node;
  bool mpi;
  char partition[64];
  char node_list[256];
  gs_job_event *events;  /* gs_job_get only: every change of state, oldest first */
  int n_events;
} gs_job_info;

/* One job with its audit trail into *out (free it with gs_job_info_free);
 * GS_ENOENT / GS_EPERM. */
int gs_job_get(gs_frontdesk *fd, const gs_principal *who, int64_t id, gs_job_info *out);
/* The caller's jobs (an admin's: everyone's, or `tenant`'s), newest first;
 * only unfinished ones unless `all` (then also the newest 1000 ended ones).
 * Free the list with gs_job_infos_free. */
int gs_jobs_list(gs_frontdesk *fd, const gs_principal *who, bool all, const char *tenant,
                 gs_job_info **out, int *n);
void gs_job_info_free(gs_job_info *job);
void gs_job_infos_free(gs_job_info *jobs, int n);

/* A process a device reports using it (NVML's on NVIDIA GPUs), and the job
 * it belongs to: 0 and "" when it is none of the front desk's. */
typedef struct gs_device_process {
  gs_device_t *device;
  int pid;
  char name[64];
  uint64_t memory_bytes;
  int64_t job;
  char tenant[64];
} gs_device_process;
/* Every such process on the front desk's devices into *out (malloc'd; the
 * caller frees it), *n of them; devices that cannot list processes give none. */
int gs_frontdesk_processes(gs_frontdesk *fd, gs_device_process **out, int *n);

/* The path of a job's "stdout" or "stderr" log, and whether the job has
 * ended (so that a follower knows when to stop). */
int gs_job_log_path(gs_frontdesk *fd, const gs_principal *who, int64_t id, const char *stream,
                    char *path, size_t cap, bool *ended);

/* A tenant's accounting of its ended jobs. */
typedef struct gs_usage_row {
  char tenant[64];
  int64_t jobs;
  double device_seconds, device_mem_byte_seconds, cpu_seconds, wall_seconds;
} gs_usage_row;

/* A local image a tenant may run jobs in. */
typedef struct gs_image_info {
  char name[256]; /* "localhost/gpusrv-test:1" */
  char id[80];
  uint64_t size_bytes;
  double created; /* Unix seconds */
} gs_image_info;

/* The local images the caller's tenant may run jobs in: its Unix user's
 * podman images that the server's allowed_images permit (container.h);
 * none where it allows none. *out is the caller's to free. */
int gs_images_list(gs_frontdesk *fd, const gs_principal *who, gs_image_info **out, int *n);

/* Accounting of ended jobs per tenant since `since` (Unix seconds): the
 * caller's own, or an admin's choice (`tenant`, or all). *out is the
 * caller's to free. */
int gs_usage_list(gs_frontdesk *fd, const gs_principal *who, const char *tenant, double since,
                  gs_usage_row **out, int *n);

/* A device jobs may book, with what is booked of it. */
typedef struct gs_frontdesk_device {
  gs_device_t *device;
  uint64_t memory_total, memory_booked;
  int share_booked;
} gs_frontdesk_device;

/* The devices jobs may book: up to `cap` into out; returns how many. */
int gs_frontdesk_devices(gs_frontdesk *fd, gs_frontdesk_device *out, int cap);
/* The holds of outside schedulers' jobs (Slurm's) on this node (holds.h),
 * owned by the front desk until gs_frontdesk_close. */
typedef struct gs_holds gs_holds;
gs_holds *gs_frontdesk_holds(gs_frontdesk *fd);
/* The ledger it books in (for listing every booking with gs_ledger_each). */
gs_ledger *gs_frontdesk_ledger(gs_frontdesk *fd);

#endif

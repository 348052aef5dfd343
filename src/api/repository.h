/* repository.h - the model repository: MODELS/<name>/config.json (or a
 * Triton config.pbtxt) and MODELS/<name>/<version>/model.onnx, loaded into
 * the engine, with a cache of plans per input shapes. */
#ifndef GS_API_REPOSITORY_H
#define GS_API_REPOSITORY_H

#include "api/latency.h"
#include "api/load_override.h"
#include "engine/engine.h"
#include "engine/image.h"
#include "engine/pipeline.h"
#include "sched/sched.h"

#include <pthread.h>
#include <stdatomic.h>

#define GS_REPO_MAX_VERSIONS 8
#define GS_REPO_MAX_MODELS 256

typedef enum {
  GS_MODEL_LOADING,
  GS_MODEL_READY,
  GS_MODEL_UNAVAILABLE, /* failed to load: see reason */
  GS_MODEL_UNLOADED,
  GS_MODEL_UNLOADED_IDLE, /* unloaded for want of requests (idle_unload_seconds): the next loads it */
} gs_model_state;

/* Why a model was loaded or unloaded, for the metrics. */
typedef enum { GS_LOAD_STARTUP, GS_LOAD_ADMIN, GS_LOAD_DEMAND, GS_LOAD_REASONS } gs_load_reason;
typedef enum { GS_UNLOAD_ADMIN, GS_UNLOAD_IDLE, GS_UNLOAD_REASONS } gs_unload_reason;

/* A request waiting for a model unloaded while idle to load again
 * (gs_served_wait_load): embedded in the caller's request. */
typedef struct gs_load_waiter {
  /* Runs once the load has ended, ready or not, on the loading thread; the
   * caller looks at the model's state again from there. */
  void (*loaded)(struct gs_load_waiter *w);
  uint64_t since_ns; /* when it began to wait */
  struct gs_load_waiter *next;
} gs_load_waiter;
#define GS_REPO_PLAN_CACHE 8

#define GS_REPO_MAX_INSTANCES 8

typedef struct gs_served_version {
  int64_t number;
  gs_model *model; /* NULL when it failed to load */
  /* Unique to one load of the version in this process (the struct is
   * reused by the model's next load): what caches key on. */
  uint64_t serial;
  char reason[512];
} gs_served_version;

/* The weights the plans of one version share on one device (weight_set.h),
 * whichever of the model's instances there made them: kept while a plan
 * using them is cached or being made (`users`), with one booking of their
 * memory that grows with them. */
typedef struct gs_shared_weights {
  gs_device_t *device; /* NULL: an unused entry */
  struct gs_served_version *version;
  gs_weight_set *set;
  int users;
  gs_booking *booking;
  uint64_t booked_bytes;
  char owner[192]; /* "model NAME weights on DEVICE", for the booking */
} gs_shared_weights;

/* One instance of a model: a device, and the plans made on it (each with
 * its booking of the device's memory), most recently used first. Runs on
 * one instance take turns; instances run side by side. */
typedef struct gs_instance {
  gs_device_t *device;
  /* Host threads its kernels use on a CPU device: its group's `threads`,
   * else the device's cores shared among the model's instances on it. */
  int threads;
  char owner[192]; /* "model NAME instance N", for bookings */
  pthread_mutex_t lock;
  gs_plan *plans[GS_REPO_PLAN_CACHE];
  gs_served_version *plan_version[GS_REPO_PLAN_CACHE];
  gs_shape plan_shapes[GS_REPO_PLAN_CACHE][8];
  gs_booking *bookings[GS_REPO_PLAN_CACHE];
  /* What each booking holds: a plan made in stages grows it after a run
   * that planned later stages (gs_plan_device_bytes). */
  uint64_t booked_bytes[GS_REPO_PLAN_CACHE];
  gs_shared_weights *plan_weights[GS_REPO_PLAN_CACHE]; /* what each cached plan shares */
  /* The figures of the instance's batch pipeline (batcher.c), live while
   * it runs: read them with gs_pipeline_read_stats. */
  gs_pipeline_result pipeline;
} gs_instance;

/* One entry of instance_group as configured. */
typedef struct gs_instance_group {
  int count;
  char kind[32];       /* KIND_CPU, KIND_GPU, KIND_AUTO, or a backend: cpu, opencl, cuda */
  int n_devices;
  char devices[8][32]; /* device ids or indexes; none: every device of the kind */
  int threads;         /* gpusrv's own: host threads per instance (0: a share of the cores) */
  /* "count": "auto": instances follow the load between min and max
   * (autoscale.h), count then being max; queue_delay_budget_us (0: the
   * model's default, gs_served_queue_budget_us) and scale_down_ms tune it. */
  bool autoscale;
  int64_t min, max, queue_budget_us, scale_down_ms;
} gs_instance_group;

/* Device i of a group's devices (a KIND_GPU group's are indexes among the
 * GPUs, or ids), if it is there and of the group's kind; else NULL. */
gs_device_t *gs_instance_group_device(const gs_instance_group *g, int i);

/* Triton's statistics: how many, and how long in all. */
typedef struct gs_duration_stat {
  uint64_t count, ns;
} gs_duration_stat;

#define GS_STATS_MAX_BATCH 256

typedef struct gs_model_stats {
  gs_duration_stat success, fail, queue, compute_input, compute_infer, compute_output;
  uint64_t inference_count; /* samples (batch rows) inferred */
  uint64_t execution_count; /* batches run */
  /* By batch size: compute_input, compute_infer, compute_output of the batches. */
  gs_duration_stat batch[GS_STATS_MAX_BATCH + 1][3];
  uint64_t last_inference_ms;
  /* Successful requests' latency (arrival to reply) by bucket of latency.h. */
  uint64_t latency[GS_LATENCY_BUCKETS];
} gs_model_stats;

/* An ensemble (Triton's platform "ensemble"): models of the repository run
 * in turn, their inputs and outputs wired by name (ensemble.h). */
#define GS_ENSEMBLE_MAX_STEPS 8
#define GS_ENSEMBLE_MAX_WIRES 8
#define GS_ENSEMBLE_NAME 128
typedef struct gs_ensemble_step {
  char model[GS_ENSEMBLE_NAME];
  int64_t version; /* -1: the highest */
  /* input_map: the step model's input `in_from[i]` reads ensemble tensor
   * `in_to[i]`; output_map: its output `out_from[i]` is tensor `out_to[i]` */
  int n_in, n_out;
  /* Its nodes' prefix in the composed model, "<model>" or "<model>#<k>" for
   * a model that is a step twice (model_compose.h); set by the compose. */
  char prefix[GS_ENSEMBLE_NAME + 8];
  /* The repository's entry for the model (its statistics count the step's
   * runs); set by the compose, NULL where the repository has none. */
  struct gs_served_model *served;
  /* Its model's instance_group places it on the CPU alone (KIND_CPU or
   * kind "cpu"): where the ensemble's instance is on a device of its own,
   * the step's kernels run on the host (gs_plan_options.host_sections). */
  bool on_host;
  /* Else the device its model's instance_group names first (NULL: none
   * named, or not here): where the ensemble's instance is on another, the
   * step's kernels run there (gs_plan_options.device_sections). */
  gs_device_t *device;
  char in_from[GS_ENSEMBLE_MAX_WIRES][GS_ENSEMBLE_NAME], in_to[GS_ENSEMBLE_MAX_WIRES][GS_ENSEMBLE_NAME];
  char out_from[GS_ENSEMBLE_MAX_WIRES][GS_ENSEMBLE_NAME], out_to[GS_ENSEMBLE_MAX_WIRES][GS_ENSEMBLE_NAME];
} gs_ensemble_step;

typedef struct gs_ensemble {
  int n_steps, n_inputs, n_outputs;
  _Atomic bool untimed_said; /* the log said a plan of it keeps no figures per step */
  gs_ensemble_step steps[GS_ENSEMBLE_MAX_STEPS];
  /* The prefixes of the steps on_host, for the plans of the composed model. */
  const char *host_sections[GS_ENSEMBLE_MAX_STEPS];
  int n_host_sections;
  /* The prefixes of the steps with a device, and those devices. */
  const char *device_sections[GS_ENSEMBLE_MAX_STEPS];
  gs_device_t *section_devices[GS_ENSEMBLE_MAX_STEPS];
  int n_device_sections;
  char inputs[GS_ENSEMBLE_MAX_WIRES][GS_ENSEMBLE_NAME], outputs[GS_ENSEMBLE_MAX_WIRES][GS_ENSEMBLE_NAME];
} gs_ensemble;

typedef struct gs_served_model {
  char name[128];
  struct gs_repository *repo; /* the repository it is an entry of */
  int64_t max_batch_size; /* 0: inputs carry no batch dimension of their own */
  gs_precision precision;
  /* dynamic_batching of the model's configuration */
  bool dynamic_batching;
  bool no_warmup; /* "warmup": false: no plans made and run at load */
  bool deterministic; /* the same bits from every run and instance (gs_plan_options) */
  /* "preprocess": a recipe (image.h) by which the model's image input also
   * takes encoded images (BYTES) or RGB pixels (UINT8 [n, h, w, 3]);
   * image_input.h. */
  bool has_prep;
  gs_prep prep;
  char prep_spec[256];
  /* The recipe's type, layout and normalisation are part of every version's
   * model (its finish on the device, gs_prep_compose): the image input then
   * takes uint8 [n, h, w, 3], and the CPU only decodes, resizes and crops. */
  bool prep_on_device;
  /* ... and its resize and crop too, in the batcher's h2d stage
   * (engine/image_pack.h): where it has a batcher, its recipe resizes or
   * crops, and every instance's device has the kernel. */
  bool resize_on_device;
  _Atomic uint64_t device_resizes; /* images the devices resized */
  /* platform "ensemble": its versions are its steps composed (ensemble.h) */
  bool is_ensemble;
  gs_ensemble ensemble;
  int n_preferred;
  int64_t preferred_batch_sizes[8];
  uint64_t max_queue_delay_us;
  /* dynamic_batching.adaptive: the wait is learnt within latency_budget_us
   * (adaptive_wait.h) instead of max_queue_delay_us, and batches grow to
   * max_batch_size. */
  bool adaptive_batching;
  int64_t latency_budget_us;
  int64_t max_queue_size;       /* 0: unbounded */
  uint64_t default_timeout_us;  /* 0: none */
  bool timeout_delays;          /* timeout_action DELAY: a timed-out request waits behind the rest */
  int priority_levels;          /* 0 or 1: one level */
  int default_priority;
  struct gs_batcher *batcher;
  /* instance_group: the devices asked for, and the instances made on them */
  int n_groups;
  gs_instance_group groups[4];
  gs_ledger *ledger;
  int n_instances;
  gs_instance instances[GS_REPO_MAX_INSTANCES];
  /* Instances running now: n_instances, or where the model autoscales
   * (groups[0].autoscale) the first this many, which its batcher changes;
   * and its steps up, down and refused, for /metrics. */
  _Atomic int active_instances;
  _Atomic uint64_t scale_ups, scale_downs, scale_refusals;
  pthread_mutex_t weights_lock; /* over weights[] (instances take turns with their own locks) */
  /* One per plan at most, and one being made per instance. */
  gs_shared_weights weights[GS_REPO_MAX_INSTANCES * (GS_REPO_PLAN_CACHE + 1)];
  _Atomic unsigned next_instance; /* round robin for runs outside the batcher */
  pthread_mutex_t stats_lock;
  gs_model_stats stats;
  _Atomic int64_t queue_length; /* requests waiting in its batcher now */
  /* A moving mean of the compute of its runs outside a batcher (0: none
   * yet), for gs_batcher_inline_is_short. */
  _Atomic uint64_t inline_compute_ns;
  /* Idle unloading: the configured limit (0: never), requests between
   * arrival and answer, and when the last one came or went. */
  int64_t idle_unload_s;
  _Atomic int64_t in_flight;
  _Atomic uint64_t last_used_ns;
  /* Kept across an idle unload, to tell a waiting request whether the load
   * will fit its time: the last load's duration, and the configured
   * default_timeout_microseconds. */
  _Atomic uint64_t last_load_ns;
  _Atomic uint64_t idle_timeout_us;
  /* Requests waiting for an on-demand load, and whether one is under way. */
  pthread_mutex_t demand_lock;
  _Atomic bool demand_active;
  gs_load_waiter *waiters;
  /* Counters for /metrics: loads and unloads by reason, and the waits for
   * on-demand loads. */
  _Atomic uint64_t loads[GS_LOAD_REASONS], unloads[GS_UNLOAD_REASONS];
  _Atomic uint64_t load_waits, load_wait_ns;
  _Atomic int state; /* gs_model_state */
  char reason[512];  /* why not ready */
  /* The load in progress: when it must be done by (0: no limit), the limit
   * in seconds for messages, and whether it ran past it. */
  uint64_t load_deadline_ns;
  double load_limit_s;
  bool load_overdue;
  /* Requests hold it shared while they use the model's versions; loading
   * and unloading hold it exclusively. */
  pthread_rwlock_t use;
  /* What the last admin load brought instead of the repository's files
   * (load_override.h): its configuration as JSON text, or the private
   * directory its files were written to (which holds its configuration
   * too). NULL: the repository's. Kept across an idle unload, so that the
   * load on demand reads the same; dropped by an admin unload or a load
   * without parameters. */
  char *load_config;
  char *load_dir;
  int n_versions;   /* highest first */
  gs_served_version versions[GS_REPO_MAX_VERSIONS];
} gs_served_model;

typedef struct gs_repository {
  char dir[512];
  gs_ledger *ledger; /* instances book their plans' memory here */
  _Atomic int n_models;     /* entries in models[], which never moves */
  gs_served_model *models;  /* GS_REPO_MAX_MODELS entries */
  pthread_mutex_t admin;    /* one load or unload at a time */
  pthread_t loader;         /* loads the models found at start, in the background */
  bool loader_started;
  double load_timeout_s; /* each model's load, warm-up included (0: no limit) */
  _Atomic bool closing;
  _Atomic int admin_running; /* gs_repository_admin_async's threads not yet done */
  /* Unloads the models idle past their idle_unload_seconds (idle.c). */
  pthread_t idler;
  bool idler_started;
  pthread_mutex_t idler_lock;
  pthread_cond_t idler_wake; /* at close */
} gs_repository;

/* Takes a share of the model for the request path without waiting: false
 * while a load or unload holds it (the caller answers 503 "loading" at
 * once, or leaves the model out of a listing). gs_served_release() after. */
bool gs_served_try_use(gs_served_model *m);
void gs_served_release(gs_served_model *m);

static inline bool gs_served_ready(gs_served_model *m) {
  return atomic_load(&m->state) == GS_MODEL_READY;
}
const char *gs_model_state_name(int state);

/* Scans `dir` and starts loading every model it finds in the background;
 * until then they are LOADING. A broken model stays listed, UNAVAILABLE
 * with its reason; it does not stop the others. Returns 0, or an error only
 * when the directory itself cannot be read. */
int gs_repository_open(gs_repository *repo, const char *dir, gs_ledger *ledger,
                       double load_timeout_s);
void gs_repository_close(gs_repository *repo);
/* Whether every model has settled: none loading, none unavailable (the
 * server's readiness, for both protocols). */
bool gs_repository_settled(gs_repository *repo);
/* (Re)loads model `name` from its directory now; returns 0 or an error
 * (GS_ENOENT: no such directory; else the model's reason). */
int gs_repository_load(gs_repository *repo, const char *name);
/* The same with what a load request brought (NULL: nothing): its
 * configuration replaces the directory's, and its files, where it has
 * any, replace the whole directory (a model the repository does not hold
 * may be loaded so). The repository copies what it keeps of `ov`. */
int gs_repository_load_with(gs_repository *repo, const char *name, const gs_load_override *ov);
/* Unloads model `name`: its queued requests finish first. */
int gs_repository_unload(gs_repository *repo, const char *name);
/* Loads (load) or unloads model `name` on a detached thread of its own,
 * for the protocols: a load can take seconds, and their threads serve
 * other calls meanwhile. A load takes `ov` (NULL: none; freed here, also
 * on failure). When it is done, done(arg, status, message) runs on that
 * thread: status 200, or 404 (no such model) or 400 with a message for the
 * client. Where no thread can be made it runs on the caller's. Returns 0,
 * or GS_ENOMEM (done is then not called). repository_admin.c */
typedef void (*gs_repository_admin_done)(void *arg, int status, const char *message);
int gs_repository_admin_async(gs_repository *repo, const char *name, bool load,
                              gs_load_override *ov, gs_repository_admin_done done, void *arg);
/* Waits until every gs_repository_admin_async started has called done: a
 * load must not outlive the daemon it answers. */
void gs_repository_admin_wait(gs_repository *repo);
gs_served_model *gs_repository_find(gs_repository *repo, const char *name);

/* For a model unloaded while idle, or loading again after that: starts
 * the load where none is under way, and
 * - GS_WAIT_JOINED: w waits for it; w->loaded runs once it has ended;
 * - GS_WAIT_TOO_SLOW: the model's default_timeout_microseconds is shorter
 *   than its last load took, so w does not wait: the caller answers 503
 *   with Retry-After *retry_after_s, and the load goes on;
 * - GS_WAIT_NONE: m is in neither state (the caller answers as it would
 *   have).
 * The caller may hold a use share of m: the load waits for it. idle.c */
typedef enum { GS_WAIT_NONE, GS_WAIT_JOINED, GS_WAIT_TOO_SLOW } gs_wait_outcome;
gs_wait_outcome gs_served_wait_load(gs_repository *repo, gs_served_model *m, gs_load_waiter *w,
                                    int *retry_after_s);
static inline bool gs_served_autoscaled(const gs_served_model *m) {
  return m->n_groups == 1 && m->groups[0].autoscale;
}
/* The queue delay above which an autoscaled model adds an instance: its
 * group's queue_delay_budget_us, else half the latency budget of adaptive
 * batching, else twice max_queue_delay plus a millisecond. */
int64_t gs_served_queue_budget_us(const gs_served_model *m);

/* For the autoscaling batcher: the version and input shapes of the plan
 * `inst` used last; false (and *v, shapes untouched) when it has none. */
bool gs_served_last_plan(gs_instance *inst, gs_served_version **v, gs_shape *shapes);
/* Makes that plan on `to`, booking its memory, before `to` takes requests:
 * GS_ENOMEM with the ledger's reason when there is no room (nothing then
 * stays booked). `shapes` holds GS_REQ_MAX_IO entries. */
int gs_served_prepare(gs_served_model *m, gs_instance *to, gs_served_version *v,
                      const gs_shape *shapes);
/* Drops every plan of `inst`, giving their memory and bookings back. */
void gs_served_drop_plans(gs_served_model *m, gs_instance *inst);

/* The version `v` ("" or NULL: the highest), or NULL. */
gs_served_version *gs_served_version_find(gs_served_model *m, const char *v);

/* The plan for inputs of these shapes on instance `inst`, whose lock the
 * caller holds: from the instance's cache, or built and booked now (the
 * least recently used plans making room). It stays valid while the lock is
 * held. `inputs` (host memory, or NULL where the caller has none) are the
 * values that models whose shapes depend on an input's values are planned
 * with (engine.h, input_values); such plans are cached by those values too. */
int gs_served_plan(gs_served_model *m, gs_instance *inst, gs_served_version *v,
                   const gs_shape *shapes, const void *const *inputs, gs_plan **out);

/* Runs one request on the next free instance (the batcher's pipelines run
 * theirs through gs_served_plan): inputs in model order, with their shapes.
 * Finds or builds (and books) the plan for those shapes. Output buffers are
 * malloc'd for the caller (freed with free()); out_info receives each
 * output's description. */
int gs_served_run(gs_served_model *m, gs_served_version *v, const gs_shape *shapes,
                  const void *const *inputs, void **outputs, gs_plan_value_info *out_info);

#endif

/* repository.c - the model repository: scanning, configuration, loading,
 * and the plan cache each served model keeps. */
#include "api/repository.h"

#include "api/ensemble.h"
#include "api/image_input.h"

#include "api/batcher.h"
#include "api/idle.h"
#include "api/model_config.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/fileutil.h"
#include "base/log.h"
#include "engine/weight_set.h"

#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- loading ---------------------------------------------------------------------- */

static void warm_up(gs_served_model *m);
static void unload_model(gs_served_model *m);
static int run_on_instance(gs_served_model *m, gs_instance *inst, gs_served_version *v,
                           const gs_shape *shapes, const void *const *inputs, void **outputs,
                           gs_plan_value_info *out_info, int requests);

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

/* A recipe needs an image input, and the batch dimension its images come
 * along (image_input.h). */
static int check_preprocess(const gs_served_model *m, const gs_model *model) {
  bool nchw;
  int h, w;
  if (!m->has_prep)
    return GS_OK;
  if (m->max_batch_size <= 0)
    return gs_error(GS_EINVAL, "preprocess needs max_batch_size above 0: images come one a row");
  return gs_image_input_find(m, model, &nchw, &h, &w) < 0 ? GS_EINVAL : GS_OK;
}

/* Where a recipe's type, layout and normalisation run: gs_prep_finishes_on
 * every instance's device. Called once the instances are made and before
 * any plan; an ensemble keeps the CPU's. */
static bool finish_on_device(const gs_served_model *m) {
  if (!m->has_prep || m->is_ensemble || m->n_instances > GS_REPO_MAX_INSTANCES)
    return false;
  gs_device_t *devices[GS_REPO_MAX_INSTANCES];
  for (int i = 0; i < m->n_instances; i++)
    devices[i] = m->instances[i].device;
  return gs_prep_finishes_on(&m->prep, devices, m->n_instances);
}

/* The recipe joins every version's model where finish_on_device says so,
 * and every version can take it (a float32 image input, a model
 * gs_prep_can_compose takes); where one cannot, finish=auto leaves the
 * recipe to the CPU and finish=device is the load's failure. */
static int place_preprocess(gs_served_model *m) {
  if (!finish_on_device(m))
    return GS_OK;
  struct {
    int idx, h, w;
    bool nchw;
  } image[GS_REPO_MAX_VERSIONS]; /* each version's image input */
  for (int i = 0; i < m->n_versions; i++) {
    gs_served_version *v = &m->versions[i];
    image[i].idx = v->model ? gs_image_input_find(m, v->model, &image[i].nchw, &image[i].h,
                                                  &image[i].w)
                            : -1;
    const gs_value_info *in = image[i].idx >= 0 ? &v->model->inputs[image[i].idx] : NULL;
    int rc = !in ? GS_OK
             : in->dtype != GS_DT_FLOAT32
                 ? gs_error(GS_EINVAL, "preprocess finish=device needs a float32 image input; "
                                       "version %lld's '%s' is %s", (long long)v->number,
                            in->name, gs_dtype_name(in->dtype))
                 : gs_prep_can_compose(v->model);
    if (rc < 0)
      return m->prep.finish == GS_FINISH_AUTO ? GS_OK : rc; /* auto: all versions on the CPU */
  }
  for (int i = 0; i < m->n_versions; i++) {
    gs_served_version *v = &m->versions[i];
    if (image[i].idx < 0)
      continue;
    gs_model *model = v->model, *whole;
    v->model = NULL; /* taken by the composition, whatever it returns */
    int rc = gs_prep_compose(&m->prep, model, image[i].idx, image[i].h, image[i].w,
                             image[i].nchw, m->name, &whole);
    if (rc < 0)
      return rc; /* the load fails as a whole */
    v->model = whole;
  }
  m->prep_on_device = true;
  m->resize_on_device = m->dynamic_batching && gs_prep_has_geometry(&m->prep);
  for (int i = 0; i < m->n_instances; i++)
    m->resize_on_device = m->resize_on_device &&
                          gs_device_supports_op(m->instances[i].device, GS_IMAGE_TAPS_OP);
  GS_LOGI("api", "model %s: the recipe's %stype, layout and normalisation run on its devices; "
                 "its image input takes uint8 pixels", m->name,
          m->resize_on_device ? "resize, crop, " : "");
  return GS_OK;
}

/* Whether device d is of the kind an instance group asks for. */
static bool kind_matches(const char *kind, gs_device_t *d) {
  const gs_device_info *info = gs_device_get_info(d);
  if (!strcmp(kind, "KIND_AUTO") || !strcmp(kind, "KIND_MODEL"))
    return true;
  /* The host's own cores: a CPU-type device reached through a driver (an
   * OpenCL CPU device, whose memory is not host memory) is not KIND_CPU. */
  if (!strcmp(kind, "KIND_CPU"))
    return info->type == GS_DEVICE_CPU && gs_device_get_caps(d)->host_visible_device_memory;
  if (!strcmp(kind, "KIND_GPU"))
    return info->type == GS_DEVICE_GPU;
  return !strcmp(kind, info->backend); /* a backend's name: cpu, opencl, cuda */
}

/* A KIND_GPU group's device: Triton's gpus are indexes among the GPUs;
 * an id ("cuda1") names the device itself. */
static gs_device_t *nth_gpu(const char *entry) {
  char *end;
  long want = strtol(entry, &end, 10);
  if (*end || end == entry)
    return gs_hal_device_find(entry);
  for (int i = 0, seen = 0; i < gs_hal_device_count(); i++)
    if (gs_device_get_info(gs_hal_device(i))->type == GS_DEVICE_GPU && seen++ == want)
      return gs_hal_device(i);
  return NULL;
}

gs_device_t *gs_instance_group_device(const gs_instance_group *g, int i) {
  gs_device_t *d = !strcmp(g->kind, "KIND_GPU") ? nth_gpu(g->devices[i])
                                                 : gs_hal_device_find(g->devices[i]);
  return d && kind_matches(g->kind, d) ? d : NULL;
}

/* Instance i's share of its device's cores: instances of one model on one
 * device run at once, and more threads than cores would only make them
 * take turns. */
static int share_of_cores(gs_device_t *const *chosen, int n, int i) {
  int same = 0;
  for (int k = 0; k < n; k++)
    same += chosen[k] == chosen[i];
  int share = gs_device_get_info(chosen[i])->compute_units / same;
  return share > 0 ? share : 1;
}

/* Whether `d` is held whole (its compute all booked: a job given the whole
 * device, or a Slurm job through its prolog), and then by whom (owner,
 * GS_LEDGER_OWNER_MAX bytes). A served instance would share what its holder
 * was given: refuse_held says so. */
static bool held_whole(const gs_served_model *m, gs_device_t *d, char *owner) {
  return m->ledger && gs_ledger_held_whole(m->ledger, d, owner, GS_LEDGER_OWNER_MAX);
}

static int refuse_held(const gs_served_model *m, gs_device_t *d, const char *owner) {
  return gs_error(GS_EBUSY, "model %s: %s is held whole by %s", m->name,
                  gs_device_get_info(d)->id, owner);
}

/* The instances the groups ask for, on the devices that match (all of a
 * kind in turn when no devices are listed, leaving out those held whole).
 * Default: one on device 0. A device named in a group and held whole is
 * refused. */
static int make_instances(gs_served_model *m) {
  gs_device_t *chosen[GS_REPO_MAX_INSTANCES];
  int threads[GS_REPO_MAX_INSTANCES] = {0};
  int n = 0;
  char owner[GS_LEDGER_OWNER_MAX];
  if (m->n_groups == 0)
    chosen[n++] = gs_hal_device(0);
  for (int gi = 0; gi < m->n_groups; gi++) {
    gs_instance_group *g = &m->groups[gi];
    gs_device_t *pool[64];
    int np = 0;
    if (g->n_devices) {
      for (int i = 0; i < g->n_devices; i++) {
        gs_device_t *d = gs_instance_group_device(g, i);
        if (!d)
          return gs_error(GS_EINVAL, "instance_group: no %s device '%s' here", g->kind, g->devices[i]);
        if (held_whole(m, d, owner))
          return refuse_held(m, d, owner);
        pool[np++] = d;
      }
    } else {
      gs_device_t *held = NULL; /* the last device of the kind held whole, by `owner` */
      for (int i = 0; i < gs_hal_device_count() && np < 64; i++) {
        gs_device_t *d = gs_hal_device(i);
        if (!kind_matches(g->kind, d))
          continue;
        if (held_whole(m, d, owner))
          held = d;
        else
          pool[np++] = d;
      }
      if (np == 0 && held)
        return refuse_held(m, held, owner);
    }
    if (np == 0)
      return gs_error(GS_EINVAL, "instance_group asks for %s, and this machine has no such device",
                      g->kind);
    for (int c = 0; c < g->count; c++) {
      if (n == GS_REPO_MAX_INSTANCES)
        return gs_error(GS_EINVAL, "more than %d instances", GS_REPO_MAX_INSTANCES);
      threads[n] = g->threads;
      chosen[n++] = pool[c % np];
    }
  }
  for (int i = 0; i < n; i++) {
    gs_instance *inst = &m->instances[i];
    memset(inst, 0, sizeof *inst);
    inst->device = chosen[i];
    inst->threads = threads[i] ? threads[i] : share_of_cores(chosen, n, i);
    snprintf(inst->owner, sizeof inst->owner, "model %s instance %d", m->name, i);
    pthread_mutex_init(&inst->lock, NULL);
  }
  m->n_instances = n;
  /* An autoscaled model starts with its min, and at least one: the load's
   * warm-up runs on it, and the first request finds it ready. */
  int64_t first = gs_served_autoscaled(m) ? m->groups[0].min : n;
  atomic_store(&m->active_instances, (int)(first > 0 ? first : 1));
  return GS_OK;
}

/* Version v's shared weights on `device`, made if missing, with one user
 * more; NULL with the error when they cannot be made. */
static gs_shared_weights *acquire_weights(gs_served_model *m, gs_device_t *device,
                                          gs_served_version *v) {
  const int n = (int)(sizeof m->weights / sizeof m->weights[0]);
  pthread_mutex_lock(&m->weights_lock);
  gs_shared_weights *w = NULL, *free_entry = NULL;
  for (int i = 0; i < n && !w; i++) {
    if (m->weights[i].device == device && m->weights[i].version == v)
      w = &m->weights[i];
    else if (!m->weights[i].device && !free_entry)
      free_entry = &m->weights[i];
  }
  if (!w && free_entry && gs_weight_set_create(device, &free_entry->set) == 0) {
    w = free_entry;
    w->device = device;
    w->version = v;
    snprintf(w->owner, sizeof w->owner, "model %s weights on %s", m->name,
             gs_device_get_info(device)->id);
  } else if (!w && !free_entry) {
    gs_error(GS_EINVAL, "model %s: no room for more shared weights", m->name);
  }
  if (w)
    w->users++;
  pthread_mutex_unlock(&m->weights_lock);
  return w;
}

/* One user fewer: with none left, the weights and their booking go. */
static void release_weights(gs_served_model *m, gs_shared_weights *w) {
  if (!w)
    return;
  pthread_mutex_lock(&m->weights_lock);
  if (--w->users == 0) {
    gs_weight_set_destroy(w->set);
    gs_booking_release(w->booking);
    memset(w, 0, sizeof *w);
  }
  pthread_mutex_unlock(&m->weights_lock);
}

/* Books what w's set holds beyond its booking: this plan's uploads, and any
 * that another instance's plan made and has not booked yet, or that a plan
 * which failed left. GS_ENOMEM when that does not fit. */
static int book_weights(gs_served_model *m, gs_shared_weights *w) {
  if (!m->ledger)
    return GS_OK;
  pthread_mutex_lock(&m->weights_lock);
  uint64_t held = gs_weight_set_bytes(w->set);
  int rc = GS_OK;
  if (held > w->booked_bytes) {
    uint64_t need = held - w->booked_bytes;
    rc = w->booking ? gs_booking_grow(w->booking, need)
                    : gs_book_memory(m->ledger, w->device, need, w->owner, &w->booking);
    if (rc == 0)
      w->booked_bytes = held;
  }
  pthread_mutex_unlock(&m->weights_lock);
  return rc;
}

static void clear_plan_slot(gs_instance *inst, int k) {
  inst->plans[k] = NULL;
  inst->bookings[k] = NULL;
  inst->booked_bytes[k] = 0;
  inst->plan_weights[k] = NULL;
}

/* Drops cached plan k of an instance, giving its memory, its booking and its
 * use of the shared weights back. */
static void evict_plan(gs_served_model *m, gs_instance *inst, int k) {
  gs_plan_destroy(inst->plans[k]);
  gs_booking_release(inst->bookings[k]);
  release_weights(m, inst->plan_weights[k]);
  clear_plan_slot(inst, k);
}

/* Cache slot `from` into slot `to` (the slots are parallel arrays). */
static void move_plan(gs_instance *inst, int from, int to) {
  inst->plans[to] = inst->plans[from];
  inst->bookings[to] = inst->bookings[from];
  inst->booked_bytes[to] = inst->booked_bytes[from];
  inst->plan_weights[to] = inst->plan_weights[from];
  inst->plan_version[to] = inst->plan_version[from];
  memcpy(inst->plan_shapes[to], inst->plan_shapes[from], sizeof inst->plan_shapes[to]);
}

/* Every cached plan of an instance, evicted (its lock held, or unshared). */
static void evict_all(gs_served_model *m, gs_instance *inst) {
  for (int k = 0; k < GS_REPO_PLAN_CACHE; k++)
    evict_plan(m, inst, k);
}

static void destroy_instances(gs_served_model *m) {
  for (int i = 0; i < m->n_instances; i++) {
    gs_instance *inst = &m->instances[i];
    evict_all(m, inst);
    pthread_mutex_destroy(&inst->lock);
    memset(inst, 0, sizeof *inst);
  }
  m->n_instances = 0;
}

/* Starts the clock of a load of m (--model-load-timeout). */
static void begin_load(const gs_repository *repo, gs_served_model *m) {
  m->load_limit_s = repo->load_timeout_s;
  m->load_deadline_ns =
      repo->load_timeout_s > 0 ? gs_now_ns() + (uint64_t)(repo->load_timeout_s * 1e9) : 0;
  m->load_overdue = false;
}

static uint64_t next_version_serial(void) {
  static _Atomic uint64_t last;
  return atomic_fetch_add(&last, 1) + 1;
}

/* Whether the load of m has run past its time limit; the first time, its
 * reason says so and names the step it stopped at. Checked between steps:
 * one step (reading a file, running a warm-up plan) is not interrupted. */
static bool load_overdue(gs_served_model *m, const char *step) {
  if (m->load_overdue)
    return true;
  if (!m->load_deadline_ns || gs_now_ns() < m->load_deadline_ns)
    return false;
  snprintf(m->reason, sizeof m->reason, "loading took longer than its limit of %g s "
           "(--model-load-timeout); stopped %s", m->load_limit_s, step);
  m->load_overdue = true;
  return true;
}

/* An ensemble's one version: its steps composed (ensemble.h), numbered as
 * its highest version directory (Triton's ensembles keep an empty "1"), 1
 * without one. */
static void load_ensemble(gs_served_model *m, const char *repo_dir, const char *dir) {
  gs_served_version *ver = &m->versions[m->n_versions++];
  memset(ver, 0, sizeof *ver);
  ver->serial = next_version_serial();
  ver->number = 1;
  DIR *d = opendir(dir);
  for (struct dirent *de; d && (de = readdir(d));) {
    char *end;
    long long v = strtoll(de->d_name, &end, 10);
    if (!*end && end != de->d_name && v > ver->number)
      ver->number = v;
  }
  if (d)
    closedir(d);
  if (gs_ensemble_compose(m, repo_dir, &ver->model) < 0 || check_batching(m, ver->model) < 0 ||
      check_preprocess(m, ver->model) < 0) {
    snprintf(ver->reason, sizeof ver->reason, "%s", gs_error_detail());
    gs_model_free(ver->model);
    ver->model = NULL;
  }
}

/* Reads the configuration and every version of model m from `dir` (the
 * model's use lock held exclusively; begin_load called), or its
 * configuration from m->load_config where a load request brought one; an
 * ensemble's steps come from `repo_dir`. Warms its plans up where `warm`
 * (a load on demand leaves that to the request that waits for it: warming
 * every batch size would make it wait for all of them). Sets state and
 * reason. */
static void load_model(gs_served_model *m, const char *repo_dir, const char *dir, bool warm) {
  char path[1200];
  struct stat st;
  m->reason[0] = '\0';
  m->n_versions = 0;
  /* what only a configuration sets, and an earlier one may have */
  m->has_prep = m->is_ensemble = m->prep_on_device = m->resize_on_device = false;
  m->prep_spec[0] = '\0';
  snprintf(path, sizeof path, "%s/config.json", dir);
  int rc = 0;
  bool json = stat(path, &st) == 0;
  if (!json)
    snprintf(path, sizeof path, "%s/config.pbtxt", dir);
  if (m->load_config) {
    rc = gs_model_config_read_json_text(m, m->load_config, "the load request's config");
  } else if (json || stat(path, &st) == 0) {
    /* A FIFO or a device would hold the load (and the repository) forever. */
    if (!S_ISREG(st.st_mode))
      rc = gs_error(GS_EINVAL, "%s is not a regular file", path);
    else
      rc = json ? gs_model_config_read_json(m, path) : gs_model_config_read_pbtxt(m, path);
  }
  if (rc < 0) {
    snprintf(m->reason, sizeof m->reason, "%s", gs_error_detail());
    atomic_store(&m->state, GS_MODEL_UNAVAILABLE);
    return;
  }
  DIR *d = m->is_ensemble ? NULL : opendir(dir);
  if (m->is_ensemble)
    load_ensemble(m, repo_dir, dir);
  for (struct dirent *de; d && (de = readdir(d));) {
    char *end;
    long long v = strtoll(de->d_name, &end, 10);
    if (*end || end == de->d_name || v < 0 || m->n_versions == GS_REPO_MAX_VERSIONS)
      continue;
    if (load_overdue(m, "while reading its versions"))
      break;
    gs_served_version *ver = &m->versions[m->n_versions++];
    memset(ver, 0, sizeof *ver);
    ver->serial = next_version_serial();
    ver->number = v;
    snprintf(path, sizeof path, "%s/%s/model.onnx", dir, de->d_name);
    if (gs_model_load(path, &ver->model) < 0 || check_batching(m, ver->model) < 0 ||
        check_preprocess(m, ver->model) < 0) {
      snprintf(ver->reason, sizeof ver->reason, "%s", gs_error_detail());
      gs_model_free(ver->model);
      ver->model = NULL;
    }
  }
  if (d)
    closedir(d);
  qsort(m->versions, (size_t)m->n_versions, sizeof m->versions[0], cmp_version_desc);
  if (m->n_versions == 0 && !m->load_overdue) {
    snprintf(m->reason, sizeof m->reason, "no version directory (%s/<n>/model.onnx)", dir);
    atomic_store(&m->state, GS_MODEL_UNAVAILABLE);
    return;
  }
  bool any = false;
  for (int i = 0; i < m->n_versions; i++)
    any = any || m->versions[i].model;
  if (any && load_overdue(m, "before making its instances"))
    any = false;
  if (any && make_instances(m) < 0) {
    snprintf(m->reason, sizeof m->reason, "%s", gs_error_detail());
    any = false;
  }
  if (any && place_preprocess(m) < 0) {
    snprintf(m->reason, sizeof m->reason, "%s", gs_error_detail());
    any = false;
  }
  /* Models without dynamic batching run in the HTTP threads: no batcher. */
  if (any && m->dynamic_batching && gs_batcher_start(m, &m->batcher) < 0) {
    snprintf(m->reason, sizeof m->reason, "%s", gs_error_detail());
    any = false;
  }
  if (any && warm)
    warm_up(m);
  /* Instances follow the load from here: warm-up's runs are not load. */
  if (any && m->batcher && gs_served_autoscaled(m) && gs_batcher_autoscale(m->batcher) < 0)
    GS_LOGW("api", "model %s keeps %d instance(s): %s", m->name,
            atomic_load(&m->active_instances), gs_error_detail());
  /* Past the limit: what ran over says so; a load that failed anyway says
   * why it failed. */
  if (m->load_overdue || (any && load_overdue(m, "after warming up"))) {
    /* Nothing half-made stays: no instance, batcher or weights. */
    char why[sizeof m->reason];
    snprintf(why, sizeof why, "%s", m->reason);
    unload_model(m);
    snprintf(m->reason, sizeof m->reason, "%s", why);
    atomic_store(&m->state, GS_MODEL_UNAVAILABLE);
    GS_LOGW("api", "model %s not ready: %s", m->name, m->reason);
    return;
  }
  if (!any && !m->reason[0])
    snprintf(m->reason, sizeof m->reason, "version %lld: %s", (long long)m->versions[0].number,
             m->versions[0].reason);
  /* A model that cannot serve does not keep its versions' weights in memory. */
  for (int i = 0; !any && i < m->n_versions; i++) {
    gs_model_free(m->versions[i].model);
    m->versions[i].model = NULL;
    if (!m->versions[i].reason[0])
      snprintf(m->versions[i].reason, sizeof m->versions[i].reason, "%s", m->reason);
  }
  atomic_store(&m->state, any ? GS_MODEL_READY : GS_MODEL_UNAVAILABLE);
  if (any)
    GS_LOGI("api", "model %s ready (%d version(s))", m->name, m->n_versions);
  else
    GS_LOGW("api", "model %s not ready: %s", m->name, m->reason);
}

/* The shapes of a batch of `rows` rows (0: the inputs as declared, for a
 * model without batching), each input's bytes and their sum; false when a
 * dimension is not fixed. */
static bool warmup_shapes(const gs_served_model *m, const gs_model *model, int64_t rows,
                          gs_shape *shapes, size_t *in_bytes, uint64_t *bytes) {
  *bytes = 0;
  for (int i = 0; i < model->n_inputs; i++) {
    const gs_value_info *in = &model->inputs[i];
    if (in->rank < 0)
      return false;
    shapes[i].rank = in->rank;
    for (int d = 0; d < in->rank; d++) {
      shapes[i].dims[d] = m->max_batch_size > 0 && d == 0 ? rows : in->dims[d];
      if (shapes[i].dims[d] < 0)
        return false;
    }
    in_bytes[i] = (size_t)gs_shape_numel(&shapes[i]) * gs_dtype_size(in->dtype);
    *bytes += in_bytes[i];
  }
  return true;
}

/* Batches whose inputs take more than this are left to requests: warming
 * them would hold the load (and the repository) for as long as a huge run
 * takes, for a batch size requests may never form. */
#define WARMUP_MAX_INPUT_BYTES (64u << 20)

/* Makes and runs once, on every instance, the plans of the newest version
 * for the batch sizes the server will form (the preferred ones and the
 * maximum, as many as the plan cache holds), so that the first requests
 * wait neither for planning nor for a device library's first call (CLBlast
 * compiles its kernels then). Inputs are zeros. A plan that cannot be made
 * or run is logged; the model loads all the same, and requests make their
 * plans as before. */
static void warm_up(gs_served_model *m) {
  gs_served_version *v = NULL;
  for (int i = 0; !v && i < m->n_versions; i++)
    v = m->versions[i].model ? &m->versions[i] : NULL;
  if (m->no_warmup || !v)
    return;
  if (v->model->n_inputs > GS_REQ_MAX_IO || v->model->n_outputs > GS_REQ_MAX_IO) {
    GS_LOGI("api", "model %s: no warm-up (more than %d inputs or outputs are not served)",
            m->name, GS_REQ_MAX_IO);
    return;
  }
  int64_t sizes[GS_REPO_PLAN_CACHE];
  int n = 0;
  if (m->max_batch_size > 0) /* the maximum first: it is the size under load */
    sizes[n++] = m->max_batch_size;
  for (int i = 0; m->dynamic_batching && i < m->n_preferred && n < GS_REPO_PLAN_CACHE; i++)
    if (m->preferred_batch_sizes[i] < m->max_batch_size)
      sizes[n++] = m->preferred_batch_sizes[i];
  if (n == 0)
    sizes[n++] = 0; /* no batching: the declared shapes */
  uint64_t t0 = gs_now_ns();
  int warmed = 0;
  for (int s = 0; s < n; s++) {
    gs_shape shapes[GS_REQ_MAX_IO];
    size_t in_bytes[GS_REQ_MAX_IO];
    uint64_t bytes;
    if (!warmup_shapes(m, v->model, sizes[s], shapes, in_bytes, &bytes)) {
      GS_LOGI("api", "model %s: no warm-up (an input has a dimension only requests fix)",
              m->name);
      return;
    }
    if (bytes > WARMUP_MAX_INPUT_BYTES) {
      GS_LOGI("api", "model %s: batch size %lld not warmed up (its inputs take %llu bytes)",
              m->name, (long long)sizes[s], (unsigned long long)bytes);
      continue;
    }
    void *zeros[GS_REQ_MAX_IO] = {0}; /* the inputs, for every instance */
    int rc = GS_OK;
    for (int i = 0; rc == 0 && i < v->model->n_inputs; i++)
      if (!(zeros[i] = calloc(1, in_bytes[i] ? in_bytes[i] : 1)))
        rc = gs_error(GS_ENOMEM, "out of memory warming up");
    int active = atomic_load(&m->active_instances);
    for (int k = 0; rc == 0 && k < active && !load_overdue(m, "while warming up"); k++) {
      gs_instance *inst = &m->instances[k];
      void *outputs[GS_REQ_MAX_IO] = {0};
      gs_plan_value_info out_info[GS_REQ_MAX_IO];
      pthread_mutex_lock(&inst->lock);
      int run = run_on_instance(m, inst, v, shapes, (const void *const *)zeros, outputs,
                                out_info, 0);
      pthread_mutex_unlock(&inst->lock);
      for (int i = 0; i < GS_REQ_MAX_IO; i++)
        free(outputs[i]);
      if (run == 0)
        warmed++;
      else
        GS_LOGW("api", "model %s: warming up batch size %lld on %s: %s", m->name,
                (long long)sizes[s], gs_device_get_info(inst->device)->id, gs_error_detail());
    }
    for (int i = 0; i < GS_REQ_MAX_IO; i++)
      free(zeros[i]);
  }
  GS_LOGI("api", "model %s: %d plan(s) warmed up in %.0f ms", m->name, warmed,
          (double)(gs_now_ns() - t0) / 1e6);
}

/* Undoes load_model (use lock held exclusively): queued requests finish
 * first, then the plans and models go. */
static void unload_model(gs_served_model *m) {
  gs_batcher_stop(m->batcher);
  m->batcher = NULL;
  destroy_instances(m);
  for (int v = 0; v < m->n_versions; v++) {
    gs_model_free(m->versions[v].model);
    memset(&m->versions[v], 0, sizeof m->versions[v]);
  }
  m->n_versions = 0;
  /* The configuration is read again by the next load. */
  m->max_batch_size = 0;
  m->precision = GS_PRECISION_FP32;
  m->dynamic_batching = false;
  m->no_warmup = false;
  m->n_preferred = 0;
  m->max_queue_delay_us = 0;
  m->adaptive_batching = false;
  m->latency_budget_us = 0;
  m->max_queue_size = 0;
  m->default_timeout_us = 0;
  m->timeout_delays = false;
  m->priority_levels = 0;
  m->default_priority = 0;
  m->has_prep = m->prep_on_device = m->resize_on_device = false;
  m->n_groups = 0;
  m->idle_unload_s = 0;
}

void gs__repository_load_locked(gs_repository *repo, gs_served_model *m, gs_load_reason why) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", repo->dir, m->name);
  uint64_t t0 = gs_now_ns();
  begin_load(repo, m);
  load_model(m, repo->dir, m->load_dir ? m->load_dir : dir, why != GS_LOAD_DEMAND);
  uint64_t t1 = gs_now_ns();
  atomic_store(&m->last_load_ns, t1 - t0);
  atomic_store(&m->last_used_ns, t1); /* the idle clock starts now */
  atomic_fetch_add(&m->loads[why], 1);
}

void gs__repository_unload_locked(gs_served_model *m) { unload_model(m); }

const char *gs_model_state_name(int state) {
  switch (state) {
  case GS_MODEL_LOADING: return "LOADING";
  case GS_MODEL_READY: return "READY";
  case GS_MODEL_UNAVAILABLE: return "UNAVAILABLE";
  case GS_MODEL_UNLOADED_IDLE: return "UNLOADED_IDLE";
  default: return "UNLOADED";
  }
}

/* A new entry for `name` (admin lock held), or NULL when full. */
static gs_served_model *add_entry(gs_repository *repo, const char *name) {
  int n = atomic_load(&repo->n_models);
  if (n == GS_REPO_MAX_MODELS)
    return NULL;
  gs_served_model *m = &repo->models[n];
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s", name);
  m->repo = repo;
  atomic_init(&m->state, GS_MODEL_LOADING);
  m->ledger = repo->ledger;
  pthread_mutex_init(&m->stats_lock, NULL);
  pthread_mutex_init(&m->weights_lock, NULL);
  pthread_rwlock_init(&m->use, NULL);
  pthread_mutex_init(&m->demand_lock, NULL);
  atomic_store(&repo->n_models, n + 1); /* published once whole */
  return m;
}

static void *loader_main(void *arg) {
  gs_repository *repo = arg;
  int n = atomic_load(&repo->n_models);
  for (int i = 0; i < n && !atomic_load(&repo->closing); i++) {
    gs_served_model *m = &repo->models[i];
    pthread_mutex_lock(&repo->admin);
    pthread_rwlock_wrlock(&m->use);
    if (atomic_load(&m->state) == GS_MODEL_LOADING)
      gs__repository_load_locked(repo, m, GS_LOAD_STARTUP);
    pthread_rwlock_unlock(&m->use);
    pthread_mutex_unlock(&repo->admin);
  }
  return NULL;
}

int gs_repository_open(gs_repository *repo, const char *dir, gs_ledger *ledger,
                       double load_timeout_s) {
  memset(repo, 0, sizeof *repo);
  snprintf(repo->dir, sizeof repo->dir, "%s", dir);
  repo->ledger = ledger;
  repo->load_timeout_s = load_timeout_s;
  pthread_mutex_init(&repo->admin, NULL);
  if (!(repo->models = calloc(GS_REPO_MAX_MODELS, sizeof *repo->models)))
    return gs_error(GS_ENOMEM, "out of memory for the model repository");
  DIR *d = opendir(dir);
  if (!d) {
    free(repo->models);
    repo->models = NULL;
    return gs_error(GS_ENOENT, "cannot read the model repository %s", dir);
  }
  for (struct dirent *de; (de = readdir(d));) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (de->d_name[0] == '.' || stat(path, &st) != 0 || !S_ISDIR(st.st_mode) ||
        strlen(de->d_name) >= sizeof repo->models[0].name)
      continue;
    if (!add_entry(repo, de->d_name)) {
      GS_LOGW("api", "more than %d models in %s; the rest are not served", GS_REPO_MAX_MODELS, dir);
      break;
    }
  }
  closedir(d);
  repo->loader_started = pthread_create(&repo->loader, NULL, loader_main, repo) == 0;
  if (!repo->loader_started)
    loader_main(repo); /* no thread to spare: load now */
  gs__idle_start(repo);
  return GS_OK;
}

bool gs_served_try_use(gs_served_model *m) { return pthread_rwlock_tryrdlock(&m->use) == 0; }

void gs_served_release(gs_served_model *m) { pthread_rwlock_unlock(&m->use); }

/* Replaces what m loads from instead of the repository (use lock held
 * exclusively, or m no longer served); takes `config` and `dir`. */
static void set_load_source(gs_served_model *m, char *config, char *dir) {
  free(m->load_config);
  gs_load_dir_remove(m->load_dir);
  m->load_config = config;
  m->load_dir = dir;
}

int gs_repository_load(gs_repository *repo, const char *name) {
  return gs_repository_load_with(repo, name, NULL);
}

/* What a load with `ov` reads from instead of the repository: a copy of
 * its configuration, or (where it has files) a directory of its own. */
static int take_load_source(gs_repository *repo, const char *name, const gs_load_override *ov,
                            char **config, char **dir) {
  *config = *dir = NULL;
  if (ov && ov->n_files > 0)
    return gs_load_override_stage(ov, dir);
  char path[1024];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", repo->dir, name);
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return gs_error(GS_ENOENT, "no model directory %s", path);
  if (ov && ov->config && !(*config = strdup(ov->config)))
    return gs_error(GS_ENOMEM, "out of memory for the load's config");
  return GS_OK;
}

int gs_repository_load_with(gs_repository *repo, const char *name, const gs_load_override *ov) {
  if (!*name || strchr(name, '/') || name[0] == '.' || strlen(name) >= sizeof repo->models[0].name)
    return gs_error(GS_EINVAL, "'%s' is not a model name", name);
  if (ov && gs_load_override_check(ov) < 0)
    return gs_error_code();
  char *config, *dir;
  if (take_load_source(repo, name, ov, &config, &dir) < 0)
    return gs_error_code();
  pthread_mutex_lock(&repo->admin);
  gs_served_model *m = gs_repository_find(repo, name);
  if (!m && !(m = add_entry(repo, name))) {
    pthread_mutex_unlock(&repo->admin);
    free(config);
    gs_load_dir_remove(dir);
    return gs_error(GS_ERANGE, "the repository holds %d models already", GS_REPO_MAX_MODELS);
  }
  pthread_rwlock_wrlock(&m->use);
  atomic_store(&m->state, GS_MODEL_LOADING);
  unload_model(m);
  set_load_source(m, config, dir);
  gs__repository_load_locked(repo, m, GS_LOAD_ADMIN);
  int rc = gs_served_ready(m) ? GS_OK : gs_error(GS_EINVAL, "%s", m->reason);
  pthread_rwlock_unlock(&m->use);
  pthread_mutex_unlock(&repo->admin);
  return rc;
}

int gs_repository_unload(gs_repository *repo, const char *name) {
  pthread_mutex_lock(&repo->admin);
  gs_served_model *m = gs_repository_find(repo, name);
  if (!m) {
    pthread_mutex_unlock(&repo->admin);
    return gs_error(GS_ENOENT, "unknown model '%s'", name);
  }
  /* New requests see it unloaded at once; those in flight finish first. */
  atomic_store(&m->state, GS_MODEL_UNLOADED);
  pthread_rwlock_wrlock(&m->use);
  unload_model(m);
  set_load_source(m, NULL, NULL); /* a later load reads the repository */
  atomic_fetch_add(&m->unloads[GS_UNLOAD_ADMIN], 1);
  snprintf(m->reason, sizeof m->reason, "unloaded");
  pthread_rwlock_unlock(&m->use);
  pthread_mutex_unlock(&repo->admin);
  return GS_OK;
}

void gs_repository_close(gs_repository *repo) {
  atomic_store(&repo->closing, true);
  gs__idle_stop(repo);
  if (repo->loader_started)
    pthread_join(repo->loader, NULL);
  gs_repository_admin_wait(repo); /* on-demand loads too */
  int n = atomic_load(&repo->n_models);
  for (int i = 0; i < n; i++) {
    gs_served_model *m = &repo->models[i];
    unload_model(m);
    set_load_source(m, NULL, NULL);
    pthread_mutex_destroy(&m->stats_lock);
    pthread_mutex_destroy(&m->weights_lock);
    pthread_rwlock_destroy(&m->use);
    pthread_mutex_destroy(&m->demand_lock);
  }
  pthread_mutex_destroy(&repo->admin);
  free(repo->models);
  memset(repo, 0, sizeof *repo);
}

gs_served_model *gs_repository_find(gs_repository *repo, const char *name) {
  int n = atomic_load(&repo->n_models);
  for (int i = 0; i < n; i++)
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

/* An ensemble's steps placed on a device held whole by another (a job, a
 * Slurm job): refused before anything is made there (plan_elsewhere looks
 * again when booking). */
static int steps_held_elsewhere(const gs_served_model *m, const gs_instance *inst) {
  char owner[GS_LEDGER_OWNER_MAX];
  for (int j = 0; m->is_ensemble && j < m->ensemble.n_device_sections; j++) {
    gs_device_t *d = m->ensemble.section_devices[j];
    if (d != inst->device && held_whole(m, d, owner))
      return refuse_held(m, d, owner);
  }
  return GS_OK;
}

/* A plan across devices also holds memory on devices other than its
 * instance's (an ensemble's steps placed there): booked with it, in the
 * same booking (parts after parts[0]), and refused on a device held whole
 * by another. */
static int plan_elsewhere(const gs_served_model *m, const gs_plan *plan, gs_booking_part *parts,
                          int *n_parts) {
  gs_device_t *devices[GS_ENSEMBLE_MAX_STEPS];
  uint64_t bytes[GS_ENSEMBLE_MAX_STEPS];
  int n = gs_plan_other_devices(plan, devices, bytes, GS_ENSEMBLE_MAX_STEPS);
  if (n > GS_ENSEMBLE_MAX_STEPS)
    return gs_error(GS_ENOTSUP, "model %s: a plan on %d other devices (at most %d)", m->name, n,
                    GS_ENSEMBLE_MAX_STEPS);
  char owner[GS_LEDGER_OWNER_MAX];
  for (int j = 0; j < n; j++) {
    if (held_whole(m, devices[j], owner))
      return refuse_held(m, devices[j], owner);
    parts[(*n_parts)++] = (gs_booking_part){devices[j], bytes[j], 0};
  }
  return GS_OK;
}

/* The plan for these shapes on this instance, from its cache or made now
 * and booked. The cache is a most-recently-used-first prefix of plans[];
 * when full, or when the booking does not fit, the least recently used
 * plans make room. Called with the instance's lock held. */
static int plan_for(gs_served_model *m, gs_instance *inst, gs_served_version *v,
                    const gs_shape *shapes, const void *const *inputs, gs_plan **out) {
  int n = v->model->n_inputs;
  int k = 0;
  while (k < GS_REPO_PLAN_CACHE && inst->plans[k] &&
         !(inst->plan_version[k] == v && same_shapes(inst->plan_shapes[k], shapes, n) &&
           gs_plan_fits(inst->plans[k], inputs)))
    k++;
  gs_plan *plan = k < GS_REPO_PLAN_CACHE ? inst->plans[k] : NULL;
  gs_booking *booking = plan ? inst->bookings[k] : NULL;
  uint64_t booked_bytes = plan ? inst->booked_bytes[k] : 0;
  gs_shared_weights *w = plan ? inst->plan_weights[k] : NULL;
  if (!plan) {
    /* The weights first: evicting the last plan that uses them would drop them. */
    if (!(w = acquire_weights(m, inst->device, v)))
      return gs_error_code();
    k = GS_REPO_PLAN_CACHE - 1;
    evict_plan(m, inst, k); /* before the new plan takes its memory */
    gs_plan_options opt = {.device = inst->device, .precision = m->precision, .weights = w->set,
                           .input_values = inputs, .threads = inst->threads,
                           .deterministic = m->deterministic,
                           .host_sections = m->ensemble.host_sections,
                           .n_host_sections = m->is_ensemble ? m->ensemble.n_host_sections : 0,
                           .device_sections = m->ensemble.device_sections,
                           .section_devices = m->ensemble.section_devices,
                           .n_device_sections = m->is_ensemble ? m->ensemble.n_device_sections
                                                               : 0};
    int rc = steps_held_elsewhere(m, inst);
    if (rc == 0)
      rc = gs_plan_create(v->model, shapes, &opt, &plan);
    gs_plan_report r = {0};
    if (rc == 0)
      gs_plan_get_report(plan, &r);
    int last = k - 1; /* the least recently used plan still cached */
    while (last >= 0 && !inst->plans[last])
      last--;
    /* The plan's own memory, then what the shared weights grew by (kept
     * while a plan using them is cached). */
    int booked = rc;
    booked_bytes = r.arena_bytes + r.weights_bytes;
    gs_booking_part parts[1 + GS_ENSEMBLE_MAX_STEPS] = {{inst->device, booked_bytes, 0}};
    int n_parts = 1;
    if (booked == 0 && m->ledger)
      booked = plan_elsewhere(m, plan, parts, &n_parts);
    if (booked == 0 && m->ledger)
      while ((booked = gs_book(m->ledger, parts, n_parts, inst->owner, &booking)) == GS_ENOMEM &&
             last >= 0)
        evict_plan(m, inst, last--);
    if (booked == 0)
      while ((booked = book_weights(m, w)) == GS_ENOMEM && last >= 0)
        evict_plan(m, inst, last--);
    if (booked < 0) {
      if (rc < 0)
        book_weights(m, w); /* its uploads stay while others use the set: booked if they fit */
      gs_booking_release(booking);
      gs_plan_destroy(plan);
      release_weights(m, w); /* unbooked weights go with the set, when no other plan uses it */
      return rc < 0 ? rc : booked;
    }
  }
  if (!inst->plans[k] && m->is_ensemble)
    gs_ensemble_time_steps(m, plan); /* a new plan */
  /* Move to the front. */
  for (int i = k; i > 0; i--)
    move_plan(inst, i - 1, i);
  inst->plans[0] = plan;
  inst->bookings[0] = booking;
  inst->booked_bytes[0] = booked_bytes;
  inst->plan_weights[0] = w;
  inst->plan_version[0] = v;
  memcpy(inst->plan_shapes[0], shapes, sizeof(gs_shape) * (size_t)n);
  *out = plan;
  return GS_OK;
}

int gs_served_plan(gs_served_model *m, gs_instance *inst, gs_served_version *v,
                   const gs_shape *shapes, const void *const *inputs, gs_plan **out) {
  if (v->model->n_inputs > 8)
    return gs_error(GS_ENOTSUP, "models with more than 8 inputs are not served yet");
  return plan_for(m, inst, v, shapes, inputs, out);
}

/* An instance for a run outside the batcher: a free one if there is, else
 * the next in turn. Returns it locked. */
static gs_instance *take_instance(gs_served_model *m) {
  for (int i = 0; i < m->n_instances; i++)
    if (pthread_mutex_trylock(&m->instances[i].lock) == 0)
      return &m->instances[i];
  gs_instance *inst = &m->instances[atomic_fetch_add(&m->next_instance, 1) % (unsigned)m->n_instances];
  pthread_mutex_lock(&inst->lock);
  return inst;
}

/* After a run of plans[0] made in stages: books what the stages it planned
 * hold beyond its booking (and what they added to the shared weights). When
 * that does not fit, the plan goes, and its memory with it: the run fails
 * with the ledger's reason rather than hold memory nobody booked. The
 * booking only grows: stage plans replaced by smaller ones keep it until
 * the plan is evicted. */
static int book_stages(gs_served_model *m, gs_instance *inst) {
  uint64_t held = gs_plan_device_bytes(inst->plans[0]);
  int rc = GS_OK;
  if (m->ledger && held > inst->booked_bytes[0]) {
    rc = gs_booking_grow(inst->bookings[0], held - inst->booked_bytes[0]);
    if (rc == 0)
      inst->booked_bytes[0] = held;
  }
  if (rc == 0)
    rc = book_weights(m, inst->plan_weights[0]);
  if (rc < 0) {
    GS_LOGW("api", "model %s: the stages its run planned do not fit its booking, so the plan "
            "is dropped: %s", m->name, gs_error_detail());
    evict_plan(m, inst, 0);
    /* The cache stays a prefix: the others move up, the last slot empty. */
    for (int k = 0; k + 1 < GS_REPO_PLAN_CACHE; k++)
      move_plan(inst, k + 1, k);
    clear_plan_slot(inst, GS_REPO_PLAN_CACHE - 1);
  }
  return rc;
}

/* One run of version v on `inst`, whose lock the caller holds: its plan
 * for these shapes, outputs allocated (freed again if it fails). `requests`
 * is 1 for a request's run, 0 for a warm-up's (an ensemble's steps count
 * only requests). */
static int run_on_instance(gs_served_model *m, gs_instance *inst, gs_served_version *v,
                           const gs_shape *shapes, const void *const *inputs, void **outputs,
                           gs_plan_value_info *out_info, int requests) {
  gs_plan *plan = NULL;
  int rc = gs_served_plan(m, inst, v, shapes, inputs, &plan);
  if (rc == 0)
    rc = gs_plan_run_alloc(plan, inputs, outputs, out_info);
  if (rc == 0 && m->is_ensemble) /* a warm-up's run is no request: taken, not counted */
    gs_ensemble_count_steps(m, plan, requests,
                            m->max_batch_size > 0 ? shapes[0].dims[0] : requests);
  /* A run that failed may have planned stages too: booked (or dropped) all the same. */
  if (plan && gs_plan_sizes_at_run(plan)) {
    int booked = book_stages(m, inst);
    if (booked < 0 && rc == 0) {
      for (int i = 0; i < v->model->n_outputs; i++) {
        free(outputs[i]);
        outputs[i] = NULL;
      }
      rc = booked;
    }
  }
  return rc;
}

int gs_served_run(gs_served_model *m, gs_served_version *v, const gs_shape *shapes,
                  const void *const *inputs, void **outputs, gs_plan_value_info *out_info) {
  if (m->n_instances == 0)
    return gs_error(GS_ESTATE, "model %s has no instance", m->name);
  gs_instance *inst = take_instance(m);
  int rc = run_on_instance(m, inst, v, shapes, inputs, outputs, out_info, 1);
  pthread_mutex_unlock(&inst->lock);
  return rc;
}

int64_t gs_served_queue_budget_us(const gs_served_model *m) {
  if (gs_served_autoscaled(m) && m->groups[0].queue_budget_us)
    return m->groups[0].queue_budget_us;
  if (m->adaptive_batching)
    return m->latency_budget_us / 2 > 0 ? m->latency_budget_us / 2 : 1;
  const uint64_t hour_us = 3600ull * 1000000; /* a delay longer than that is no budget anyway */
  uint64_t delay = m->max_queue_delay_us < hour_us ? m->max_queue_delay_us : hour_us;
  return (int64_t)(delay * 2 + 1000);
}

bool gs_served_last_plan(gs_instance *inst, gs_served_version **v, gs_shape *shapes) {
  pthread_mutex_lock(&inst->lock);
  bool has = inst->plans[0] != NULL;
  if (has) {
    *v = inst->plan_version[0];
    memcpy(shapes, inst->plan_shapes[0], sizeof inst->plan_shapes[0]);
  }
  pthread_mutex_unlock(&inst->lock);
  return has;
}

int gs_served_prepare(gs_served_model *m, gs_instance *to, gs_served_version *v,
                      const gs_shape *shapes) {
  pthread_mutex_lock(&to->lock);
  gs_plan *plan;
  int rc = gs_served_plan(m, to, v, shapes, NULL, &plan);
  pthread_mutex_unlock(&to->lock);
  return rc;
}

void gs_served_drop_plans(gs_served_model *m, gs_instance *inst) {
  pthread_mutex_lock(&inst->lock);
  evict_all(m, inst);
  pthread_mutex_unlock(&inst->lock);
}

bool gs_repository_settled(gs_repository *repo) {
  int n = atomic_load(&repo->n_models);
  for (int i = 0; i < n; i++) {
    int st = atomic_load(&repo->models[i].state);
    /* A load on demand (idle.c) is the model's business, not the server's. */
    if ((st == GS_MODEL_LOADING && !atomic_load(&repo->models[i].demand_active)) ||
        st == GS_MODEL_UNAVAILABLE)
      return false;
  }
  return true;
}

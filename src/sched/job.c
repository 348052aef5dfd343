/* job.c - job states by name, and a job as the front desk reports it. */
#include "sched/store.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const state_names[] = {
#define GS__JOB_STATE_NAME(name) #name,
    GS_JOB_STATES(GS__JOB_STATE_NAME)
#undef GS__JOB_STATE_NAME
};

const char *gs_job_state_name(gs_job_state s) {
  return (unsigned)s < sizeof state_names / sizeof state_names[0] ? state_names[s] : "UNKNOWN";
}

int gs_job_state_from_name(const char *name) {
  for (size_t i = 0; i < sizeof state_names / sizeof state_names[0]; i++)
    if (strcmp(state_names[i], name) == 0)
      return (int)i;
  return -1;
}

void gs_job_free(gs_job *j) {
  if (!j)
    return;
  json_decref(j->argv);
  json_decref(j->env);
  json_decref(j->container);
  json_decref(j->slurm);
  free(j);
}

/* The command as C strings, NULL-terminated, from the job's JSON array. */
static char **strings_of(json_t *arr) {
  size_t n = json_array_size(arr);
  char **out = calloc(n + 1, sizeof *out);
  for (size_t i = 0; out && i < n; i++)
    if (!(out[i] = strdup(json_string_value(json_array_get(arr, i)) ?: ""))) {
      for (size_t k = 0; k < i; k++)
        free(out[k]);
      free(out);
      return NULL;
    }
  return out;
}

int gs_job_fill_info(const gs_job *j, gs_job_info *o) {
  *o = (gs_job_info){.id = j->id, .need = j->need, .time_limit_s = j->time_limit_s,
                     .priority = j->priority, .requeue = j->requeue,
                     .submit_time = j->submit_time, .start_time = j->start_time,
                     .end_time = j->end_time, .signal = j->signal, .runs = j->runs,
                     .cpu_seconds = j->cpu_seconds, .device_seconds = j->device_seconds,
                     .device_mem_byte_seconds = j->device_mem_byte_seconds};
  snprintf(o->tenant, sizeof o->tenant, "%s", j->tenant);
  snprintf(o->name, sizeof o->name, "%s", j->name);
  snprintf(o->state, sizeof o->state, "%s", gs_job_state_name(j->state));
  snprintf(o->reason, sizeof o->reason, "%s", j->reason);
  snprintf(o->devices, sizeof o->devices, "%s", j->devices);
  o->ended = j->state != GS_JOB_PENDING && j->state != GS_JOB_RUNNING;
  o->unsaved = j->unsaved;
  o->exit_code = o->ended && j->exit_code >= 0 ? j->exit_code : -1;
  o->argv = strings_of(j->argv);
  json_t *image = json_object_get(j->container, "image");
  snprintf(o->image, sizeof o->image, "%s", json_string_value(image) ?: "");
  snprintf(o->network, sizeof o->network, "%s",
           json_string_value(json_object_get(j->container, "network")) ?: "none");
  o->writable_root = json_is_true(json_object_get(j->container, "writable_root"));
  o->mounts = strings_of(json_object_get(j->container, "mounts"));
  if (j->slurm) {
    o->slurm_job_id = json_integer_value(json_object_get(j->slurm, "job_id"));
    o->nodes = (int)json_integer_value(json_object_get(j->slurm, "nodes"));
    o->gpus_per_node = (int)json_integer_value(json_object_get(j->slurm, "gpus_per_node"));
    o->ntasks_per_node = (int)json_integer_value(json_object_get(j->slurm, "ntasks_per_node"));
    o->mpi = json_is_true(json_object_get(j->slurm, "mpi"));
    snprintf(o->partition, sizeof o->partition, "%s",
             json_string_value(json_object_get(j->slurm, "partition")) ?: "");
    snprintf(o->node_list, sizeof o->node_list, "%s",
             json_string_value(json_object_get(j->slurm, "node_list")) ?: "");
  }
  if (!o->mounts) {
    gs_job_info_free(o);
    return gs_error(GS_ENOMEM, "out of memory listing job %lld", (long long)j->id);
  }
  return o->argv ? GS_OK : gs_error(GS_ENOMEM, "out of memory listing job %lld", (long long)j->id);
}

void gs_job_info_free(gs_job_info *job) {
  if (!job)
    return;
  for (char **a = job->argv; a && *a; a++)
    free(*a);
  free(job->argv);
  for (char **m = job->mounts; m && *m; m++)
    free(*m);
  free(job->mounts);
  job->mounts = NULL;
  free(job->events);
  job->argv = NULL;
  job->events = NULL;
}

void gs_job_infos_free(gs_job_info *jobs, int n) {
  for (int i = 0; jobs && i < n; i++)
    gs_job_info_free(&jobs[i]);
  free(jobs);
}

/* job.c - job states by name, and a job as the API shows it. */
#include "sched/store.h"

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
  free(j);
}

json_t *gs_job_to_json(const gs_job *j) {
  json_t *o = json_object();
  json_object_set_new(o, "id", json_integer(j->id));
  json_object_set_new(o, "name", json_string(j->name));
  json_object_set_new(o, "tenant", json_string(j->tenant));
  json_object_set_new(o, "state", json_string(gs_job_state_name(j->state)));
  json_object_set_new(o, "reason", json_string(j->reason));
  json_object_set(o, "command", j->argv ? j->argv : json_array());
  json_object_set_new(o, "gpus", json_integer(j->need.gpus));
  json_object_set_new(o, "gpu_mem", json_integer((json_int_t)j->need.gpu_mem));
  json_object_set_new(o, "gpu_share", json_integer(j->need.gpu_share));
  json_object_set_new(o, "cpus", json_real(j->need.cpus));
  json_object_set_new(o, "mem", json_integer((json_int_t)j->need.host_mem));
  json_object_set_new(o, "time_limit", json_integer(j->time_limit_s));
  json_object_set_new(o, "priority", json_integer(j->priority));
  json_object_set_new(o, "requeue", json_boolean(j->requeue));
  json_object_set_new(o, "devices", json_string(j->devices));
  json_object_set_new(o, "submit_time", json_real(j->submit_time));
  json_object_set_new(o, "start_time", j->start_time > 0 ? json_real(j->start_time) : json_null());
  json_object_set_new(o, "end_time", j->end_time > 0 ? json_real(j->end_time) : json_null());
  bool ended = j->state != GS_JOB_PENDING && j->state != GS_JOB_RUNNING;
  json_object_set_new(o, "exit_code",
                      ended && j->exit_code >= 0 ? json_integer(j->exit_code) : json_null());
  json_object_set_new(o, "signal", j->signal ? json_integer(j->signal) : json_null());
  json_object_set_new(o, "runs", json_integer(j->runs));
  json_object_set_new(o, "cpu_seconds", json_real(j->cpu_seconds));
  json_object_set_new(o, "device_seconds", json_real(j->device_seconds));
  json_object_set_new(o, "device_memory_byte_seconds", json_real(j->device_mem_byte_seconds));
  return o;
}

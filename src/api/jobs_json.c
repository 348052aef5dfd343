/* jobs_json.c - the front desk's reports as the job API's JSON (the field
 * names docs/api.md gives). */
#include "api/jobs_json.h"

#include <math.h>

static json_t *real_or_null(double v) { return v > 0 ? json_real(v) : json_null(); }

json_t *gs_job_json(const gs_job_info *j) {
  json_t *o = json_object(), *cmd = json_array();
  for (char **a = j->argv; a && *a; a++)
    json_array_append_new(cmd, json_string(*a));
  json_object_set_new(o, "id", json_integer(j->id));
  json_object_set_new(o, "name", json_string(j->name));
  json_object_set_new(o, "tenant", json_string(j->tenant));
  json_object_set_new(o, "state", json_string(j->state));
  json_object_set_new(o, "reason", json_string(j->reason));
  json_object_set_new(o, "command", cmd);
  json_object_set_new(o, "gpus", json_integer(j->need.gpus));
  json_object_set_new(o, "gpu_mem", json_integer((json_int_t)j->need.gpu_mem));
  json_object_set_new(o, "gpu_share", json_integer(j->need.gpu_share));
  json_object_set_new(o, "cpus", json_real(j->need.cpus));
  json_object_set_new(o, "mem", json_integer((json_int_t)j->need.host_mem));
  json_object_set_new(o, "time_limit", json_integer(j->time_limit_s));
  json_object_set_new(o, "priority", json_integer(j->priority));
  json_object_set_new(o, "requeue", json_boolean(j->requeue));
  if (j->image[0]) {
    json_t *mounts = json_array();
    for (char **m = j->mounts; m && *m; m++)
      json_array_append_new(mounts, json_string(*m));
    json_object_set_new(o, "image", json_string(j->image));
    json_object_set_new(o, "mounts", mounts);
    json_object_set_new(o, "network", json_string(j->network));
    json_object_set_new(o, "writable_root", json_boolean(j->writable_root));
  }
  if (j->slurm_job_id > 0) {
    json_object_set_new(o, "nodes", json_integer(j->nodes));
    json_object_set_new(o, "gpus_per_node", json_integer(j->gpus_per_node));
    json_object_set_new(o, "ntasks_per_node", json_integer(j->ntasks_per_node));
    json_object_set_new(o, "partition", json_string(j->partition));
    json_object_set_new(o, "mpi", json_boolean(j->mpi));
    json_object_set_new(o, "slurm_job_id", json_integer(j->slurm_job_id));
    json_object_set_new(o, "node_list", json_string(j->node_list));
  }
  json_object_set_new(o, "devices", json_string(j->devices));
  json_object_set_new(o, "submit_time", json_real(j->submit_time));
  json_object_set_new(o, "start_time", real_or_null(j->start_time));
  json_object_set_new(o, "end_time", real_or_null(j->end_time));
  json_object_set_new(o, "exit_code", j->exit_code >= 0 ? json_integer(j->exit_code) : json_null());
  json_object_set_new(o, "signal", j->signal ? json_integer(j->signal) : json_null());
  json_object_set_new(o, "runs", json_integer(j->runs));
  json_object_set_new(o, "cpu_seconds", json_real(j->cpu_seconds));
  json_object_set_new(o, "device_seconds", json_real(j->device_seconds));
  json_object_set_new(o, "device_memory_byte_seconds", json_real(j->device_mem_byte_seconds));
  if (j->unsaved)
    json_object_set_new(o, "unsaved", json_true());
  if (j->events) {
    json_t *events = json_array();
    for (int i = 0; i < j->n_events; i++)
      json_array_append_new(events, json_pack("{s:f, s:s, s:s}", "time", j->events[i].time,
                                              "state", j->events[i].state, "reason",
                                              j->events[i].reason));
    json_object_set_new(o, "events", events);
  }
  return o;
}

json_t *gs_jobs_json(const gs_job_info *jobs, int n) {
  json_t *arr = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(arr, gs_job_json(&jobs[i]));
  return arr;
}

json_t *gs_tenants_json(const gs_tenant_info *tenants, int n) {
  json_t *arr = json_array();
  for (int i = 0; i < n; i++) {
    const gs_tenant *t = &tenants[i].tenant;
    json_array_append_new(
        arr, json_pack("{s:s, s:f, s:b, s:s, s:s, s:b, s:i, s:{s:f, s:I, s:i, s:f, s:I}, s:i, "
                       "s:i}",
                       "name", t->name, "weight", t->weight, "admin", t->admin, "user",
                       t->unix_user, "group", t->unix_group, "allow_root", t->allow_root,
                       "max_priority", t->max_priority, "quotas", "devices", t->max_devices,
                       "device_mem", (json_int_t)t->max_device_mem, "jobs", t->max_jobs, "cpus",
                       t->max_cpus, "mem", (json_int_t)t->max_host_mem, "running",
                       tenants[i].running, "pending", tenants[i].pending));
  }
  return arr;
}

json_t *gs_usage_json(const gs_usage_row *rows, int n) {
  json_t *arr = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(
        arr, json_pack("{s:s, s:I, s:f, s:f, s:f, s:f}", "tenant", rows[i].tenant, "jobs",
                       (json_int_t)rows[i].jobs, "device_seconds", rows[i].device_seconds,
                       "device_memory_byte_seconds", rows[i].device_mem_byte_seconds,
                       "cpu_seconds", rows[i].cpu_seconds, "wall_seconds",
                       rows[i].wall_seconds));
  return arr;
}

/* v, or null where it is not a finite number (jansson has neither NaN nor
 * infinity). */
static json_t *finite_or_null(bool valid, double v) {
  return valid && isfinite(v) ? json_real(v) : json_null();
}

/* What the device's backend measures now; a field it cannot measure is null. */
static json_t *telemetry_json(gs_device_t *device) {
  gs_telemetry t;
  bool ok = gs_device_telemetry(device, &t) == GS_OK;
  uint32_t v = ok ? t.valid : 0;
  json_t *o = json_object();
  json_object_set_new(o, "memory_used", v & GS_TM_MEMORY ? json_integer((json_int_t)t.memory_used_bytes)
                                                        : json_null());
  json_object_set_new(o, "utilization", finite_or_null(v & GS_TM_UTILIZATION, t.utilization_percent));
  json_object_set_new(o, "temperature_c", finite_or_null(v & GS_TM_TEMPERATURE, t.temperature_c));
  json_object_set_new(o, "power_w", finite_or_null(v & GS_TM_POWER, t.power_w));
  return o;
}

static json_t *device_json(gs_device_t *device, const gs_frontdesk_device *booked) {
  const gs_device_info *info = gs_device_get_info(device);
  return json_pack("{s:s, s:s, s:o, s:o, s:b, s:I, s:I, s:i, s:o}", "id", info->id, "name",
                   info->name, "uuid", info->uuid[0] ? json_string(info->uuid) : json_null(),
                   "pci_bus_id", info->pci_bus_id[0] ? json_string(info->pci_bus_id) : json_null(),
                   "bookable", booked != NULL, "memory_total",
                   (json_int_t)(booked ? booked->memory_total : info->memory_total_bytes),
                   "memory_booked", (json_int_t)(booked ? booked->memory_booked : 0),
                   "share_booked", booked ? booked->share_booked : 0, "telemetry",
                   telemetry_json(device));
}

json_t *gs_devices_json(const gs_frontdesk_device *devices, int n, bool all) {
  json_t *arr = json_array();
  int count = all ? gs_hal_device_count() : n;
  for (int i = 0; i < count; i++) {
    gs_device_t *device = all ? gs_hal_device(i) : devices[i].device;
    const gs_frontdesk_device *booked = NULL;
    for (int k = 0; k < n && !booked; k++)
      booked = devices[k].device == device ? &devices[k] : NULL;
    json_array_append_new(arr, device_json(device, booked));
  }
  return arr;
}

static void add_booking(const char *owner, const gs_booking_part *parts, int n, void *ctx) {
  json_t *ps = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(ps, json_pack("{s:s, s:I, s:i}", "device",
                                        gs_device_get_info(parts[i].device)->id, "memory",
                                        (json_int_t)parts[i].bytes, "share", parts[i].share));
  json_array_append_new(ctx, json_pack("{s:s, s:o}", "owner", owner, "devices", ps));
}

json_t *gs_bookings_json(gs_ledger *ledger) {
  json_t *arr = json_array();
  gs_ledger_each(ledger, add_booking, arr);
  return arr;
}

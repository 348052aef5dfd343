/* history.c - a thread that samples every device's telemetry into a ring
 * per device (history.h). */
#include "api/history.h"

#include "base/clock.h"
#include "base/error.h"
#include "hal/hal.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>

typedef struct sample {
  double time;
  double utilization, memory_used, temperature, power; /* NAN: not measured */
} sample;

/* A device's health as the last sample read it. */
typedef struct health_seen {
  gs_health health;
  char reason[160];
  bool known; /* the read gave a health (a failed read or no health: not known) */
} health_seen;

typedef struct health_event {
  double time;
  int device;
  gs_health health, previous;
  char reason[160];
} health_event;

struct gs_history {
  double interval;
  int keep, n_devices;
  sample *ring; /* n_devices x keep */
  int next, count;
  health_seen *health; /* n_devices */
  health_event events[GS_HISTORY_EVENTS];
  int events_next, events_count;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stop;
  pthread_t thread;
};


static sample read_device(gs_device_t *d, double now, health_seen *health) {
  gs_telemetry t;
  sample s = {now, NAN, NAN, NAN, NAN};
  *health = (health_seen){GS_HEALTH_HEALTHY, "", false};
  if (gs_device_telemetry(d, &t) != GS_OK)
    return s;
  if (t.valid & GS_TM_HEALTH) {
    health->known = true;
    health->health = t.health;
    snprintf(health->reason, sizeof health->reason, "%s", t.health_reason);
  }
  if (t.valid & GS_TM_UTILIZATION)
    s.utilization = t.utilization_percent;
  if (t.valid & GS_TM_MEMORY)
    s.memory_used = (double)t.memory_used_bytes;
  if (t.valid & GS_TM_TEMPERATURE)
    s.temperature = t.temperature_c;
  if (t.valid & GS_TM_POWER)
    s.power = t.power_w;
  return s;
}

/* A change of device d's health (the lock held): an event. */
static void note_health(gs_history *h, int d, const health_seen *now, double at) {
  health_seen *was = &h->health[d];
  if (!now->known || now->health == was->health)
    return; /* an unknown health is no change */
  health_event *e = &h->events[h->events_next];
  *e = (health_event){.time = at, .device = d, .health = now->health, .previous = was->health};
  snprintf(e->reason, sizeof e->reason, "%s", now->reason);
  h->events_next = (h->events_next + 1) % GS_HISTORY_EVENTS;
  h->events_count += h->events_count < GS_HISTORY_EVENTS;
  *was = *now;
}

static void take_samples(gs_history *h) {
  double now = gs_wall_s();
  int n = h->n_devices > 0 ? h->n_devices : 1;
  sample row[n];
  health_seen health[n];
  for (int d = 0; d < h->n_devices; d++) /* outside the lock: a backend may take a while */
    row[d] = read_device(gs_hal_device(d), now, &health[d]);
  pthread_mutex_lock(&h->lock);
  for (int d = 0; d < h->n_devices; d++) {
    h->ring[d * h->keep + h->next] = row[d];
    note_health(h, d, &health[d], now);
  }
  h->next = (h->next + 1) % h->keep;
  h->count += h->count < h->keep;
  pthread_mutex_unlock(&h->lock);
}

static void *history_main(void *arg) {
  gs_history *h = arg;
  pthread_mutex_lock(&h->lock);
  while (!h->stop) {
    pthread_mutex_unlock(&h->lock);
    take_samples(h);
    pthread_mutex_lock(&h->lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double at = (double)until.tv_sec + until.tv_nsec / 1e9 + h->interval;
    until.tv_sec = (time_t)at;
    until.tv_nsec = (long)((at - floor(at)) * 1e9);
    while (!h->stop && pthread_cond_timedwait(&h->wake, &h->lock, &until) == 0)
      ; /* woken early only to stop */
  }
  pthread_mutex_unlock(&h->lock);
  return NULL;
}

int gs_history_start(double interval_s, int keep, gs_history **out) {
  *out = NULL;
  if (!(interval_s > 0) || keep < 1)
    return gs_error(GS_EINVAL, "history: the interval must be positive and keep at least 1");
  gs_history *h = calloc(1, sizeof *h);
  int n = gs_hal_device_count();
  if (h) {
    h->ring = calloc((size_t)(n > 0 ? n : 1) * (size_t)keep, sizeof *h->ring);
    h->health = calloc((size_t)(n > 0 ? n : 1), sizeof *h->health); /* all healthy */
  }
  if (!h || !h->ring || !h->health) {
    if (h) {
      free(h->ring);
      free(h->health);
    }
    free(h);
    return gs_error(GS_ENOMEM, "history: out of memory for %d samples", keep);
  }
  h->interval = interval_s;
  h->keep = keep;
  h->n_devices = n;
  pthread_mutex_init(&h->lock, NULL);
  pthread_cond_init(&h->wake, NULL);
  if (pthread_create(&h->thread, NULL, history_main, h) != 0) {
    free(h->ring);
    free(h->health);
    free(h);
    return gs_error(GS_EINTERNAL, "history: cannot start its thread");
  }
  *out = h;
  return GS_OK;
}

void gs_history_stop(gs_history *h) {
  if (!h)
    return;
  pthread_mutex_lock(&h->lock);
  h->stop = true;
  pthread_cond_signal(&h->wake);
  pthread_mutex_unlock(&h->lock);
  pthread_join(h->thread, NULL);
  pthread_mutex_destroy(&h->lock);
  pthread_cond_destroy(&h->wake);
  free(h->ring);
  free(h->health);
  free(h);
}

json_t *gs_history_events_json(gs_history *h) {
  json_t *events = json_array();
  pthread_mutex_lock(&h->lock);
  for (int i = 0; i < h->events_count; i++) {
    const health_event *e =
        &h->events[(h->events_next - h->events_count + i + GS_HISTORY_EVENTS) % GS_HISTORY_EVENTS];
    json_array_append_new(events, json_pack("{s:f, s:s, s:s, s:s, s:s}", "time", e->time, "device",
                                            gs_device_get_info(gs_hal_device(e->device))->id,
                                            "health", gs_health_name(e->health), "previous",
                                            gs_health_name(e->previous), "reason", e->reason));
  }
  pthread_mutex_unlock(&h->lock);
  return json_pack("{s:o}", "events", events);
}

/* jansson has no NaN or infinity: those are null too. */
static json_t *number_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *gs_history_json(gs_history *h) {
  json_t *devices = json_array();
  pthread_mutex_lock(&h->lock);
  for (int d = 0; d < h->n_devices; d++) {
    const gs_device_info *info = gs_device_get_info(gs_hal_device(d));
    json_t *samples = json_array();
    for (int i = 0; i < h->count; i++) {
      const sample *s = &h->ring[d * h->keep + (h->next - h->count + i + h->keep) % h->keep];
      json_array_append_new(samples, json_pack("[f, o, o, o, o]", s->time,
                                               number_or_null(s->utilization),
                                               number_or_null(s->memory_used),
                                               number_or_null(s->temperature),
                                               number_or_null(s->power)));
    }
    json_array_append_new(devices, json_pack("{s:s, s:s, s:I, s:o}", "id", info->id, "name",
                                             info->name, "memory_total",
                                             (json_int_t)info->memory_total_bytes, "samples",
                                             samples));
  }
  pthread_mutex_unlock(&h->lock);
  return json_pack("{s:f, s:o}", "interval", h->interval, "devices", devices);
}

/* plan_sections.c - a run's time split among sections of the model
 * (engine.h): the nodes named "<section>/...", as an ensemble's steps are
 * (model_compose.h).
 *
 * Events on the plan's stream mark each place where the run passes from
 * one section's kernels to another's, and its end. Once the run has
 * synchronised, the time between a mark and the next is the device's own
 * clock's time for the kernels of the section that mark opened: on a CUDA
 * or OpenCL stream that is when they ran, not when they were queued. */
#include "engine/plan_internal.h"

#include "base/error.h"

#include <stdlib.h>

struct gs_plan_sections {
  int n;           /* sections */
  int *of_step;    /* [p->n_steps]: each step's section, -1 for none */
  int cap;         /* marks one run records at most */
  int *opens;      /* [cap]: the section each mark opens (-1: the end mark) */
  gs_event_t **marks;
  int recorded;    /* marks this run */
  int running;     /* the section whose kernels run now, -1 before the first */
  bool failed;     /* an event failed: this run's marks are not added */
  uint64_t *ns;    /* [n]: summed since the last take */
};

void gs__plan_sections_free(gs_plan_sections *s) {
  if (!s)
    return;
  for (int i = 0; s->marks && i < s->cap; i++)
    if (s->marks[i])
      gs_event_destroy(s->marks[i]);
  free(s->marks);
  free(s->opens);
  free(s->of_step);
  free(s->ns);
  free(s);
}

int gs__plan_section_of(const char *node_name, int n, const char *const *names) {
  for (int k = 0; node_name && k < n; k++) {
    size_t len = strlen(names[k]);
    if (strncmp(node_name, names[k], len) == 0 && node_name[len] == '/')
      return k;
  }
  return -1;
}

static bool launches(const step *st) { return !st->empty && !st->in_place; }

/* The marks a run records: one where the section changes, and the end. */
static int count_marks(const gs_plan *p, const gs_plan_sections *s) {
  int marks = 1, running = -1;
  for (int i = 0; i < p->n_steps; i++)
    if (launches(&p->steps[i]) && s->of_step[i] >= 0 && s->of_step[i] != running) {
      running = s->of_step[i];
      marks++;
    }
  return marks;
}

int gs_plan_time_sections(gs_plan *p, int n, const char *const *names) {
  if (p->stages)
    return gs_error(GS_ENOTSUP, "a plan made in stages is not timed by section");
  if (p->chain)
    return gs_error(GS_ENOTSUP, "a plan across devices is not timed by section");
  if (!gs_device_get_caps(p->device)->event_timing)
    return gs_error(GS_ENOTSUP, "device %s does not time events",
                    gs_device_get_info(p->device)->id);
  gs_plan_sections *s = calloc(1, sizeof *s);
  int rc = s ? GS_OK : GS_ENOMEM;
  if (s) {
    s->n = n;
    s->of_step = calloc((size_t)p->n_steps + 1, sizeof *s->of_step);
    s->ns = calloc((size_t)n + 1, sizeof *s->ns);
    rc = s->of_step && s->ns ? GS_OK : GS_ENOMEM;
  }
  for (int i = 0; rc == 0 && i < p->n_steps; i++)
    s->of_step[i] = gs__plan_section_of(p->steps[i].call->node_name, n, names);
  if (rc == 0) {
    s->cap = count_marks(p, s);
    s->opens = calloc((size_t)s->cap, sizeof *s->opens);
    s->marks = calloc((size_t)s->cap, sizeof *s->marks);
    rc = s->opens && s->marks ? GS_OK : GS_ENOMEM;
  }
  if (rc == GS_ENOMEM)
    rc = gs_error(GS_ENOMEM, "out of memory timing a plan's sections");
  for (int i = 0; rc == 0 && i < s->cap; i++)
    rc = gs_event_create(p->device, &s->marks[i]);
  if (rc < 0) {
    gs__plan_sections_free(s);
    return rc;
  }
  pthread_mutex_lock(&p->run_lock);
  gs__plan_sections_free(p->sections);
  p->sections = s;
  pthread_mutex_unlock(&p->run_lock);
  return GS_OK;
}

static void mark(gs_plan *p, int opens) {
  gs_plan_sections *s = p->sections;
  if (s->failed || s->recorded == s->cap)
    return;
  s->opens[s->recorded] = opens;
  if (gs_event_record(s->marks[s->recorded], p->stream) < 0)
    s->failed = true; /* the run goes on; only its times are lost */
  s->recorded++;
}

void gs__plan_sections_begin(gs_plan *p) {
  p->sections->recorded = 0;
  p->sections->running = -1;
  p->sections->failed = false;
}

void gs__plan_sections_step(gs_plan *p, int step_index) {
  gs_plan_sections *s = p->sections;
  int k = s->of_step[step_index];
  if (k >= 0 && k != s->running && launches(&p->steps[step_index])) {
    s->running = k;
    mark(p, k);
  }
}

void gs__plan_sections_end(gs_plan *p) {
  if (p->sections->running >= 0)
    mark(p, -1);
}

void gs__plan_sections_add(gs_plan *p) {
  gs_plan_sections *s = p->sections;
  if (s->failed)
    return;
  for (int i = 0; i + 1 < s->recorded; i++) {
    uint64_t ns;
    if (gs_event_elapsed_ns(s->marks[i], s->marks[i + 1], &ns) == 0)
      s->ns[s->opens[i]] += ns;
  }
}

bool gs_plan_take_section_times(gs_plan *p, uint64_t *ns, int n) {
  pthread_mutex_lock(&p->run_lock);
  gs_plan_sections *s = p->sections;
  bool timed = s && s->n == n;
  for (int k = 0; timed && k < n; k++) {
    ns[k] = s->ns[k];
    s->ns[k] = 0;
  }
  pthread_mutex_unlock(&p->run_lock);
  return timed;
}

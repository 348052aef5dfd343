/* plan_chain.c - plans whose sections run on devices of their own
 * (plan_chain.h). */
#include "engine/plan_chain.h"

#include "base/error.h"
#include "base/log.h"
#include "engine/model_split.h"
#include "engine/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN_MAX_PARTS 8
#define CHAIN_MAX_VALUES 64

/* Where one input of a part comes from: a graph input (part -1) or an
 * output of an earlier part. */
typedef struct source {
  int part, index;
} source;

typedef struct chain_part {
  gs_model *model; /* a stage of the chain's model (gs_model_cut_at) */
  gs_device_t *device;
  gs_plan *plan;
  gs_stream_t *stream; /* the copies into this part's inputs */
  int n_in, n_out;
  source from[CHAIN_MAX_VALUES];
  /* Inputs copied here from another device or the host (NULL: read where
   * they are), and the outputs, on this part's device. */
  gs_buffer_t *in[CHAIN_MAX_VALUES], *out[CHAIN_MAX_VALUES];
  bool unread[CHAIN_MAX_VALUES]; /* inputs no node of the part reads: not copied */
} chain_part;

struct gs_plan_chain {
  const gs_model *m;
  gs_model ordered; /* m with its nodes in the order the parts run them (borrowed) */
  gs_device_t *home; /* the plan's device: the run's inputs and outputs */
  gs_stream_t *home_stream;
  int n;
  chain_part parts[CHAIN_MAX_PARTS];
  source outputs[CHAIN_MAX_VALUES]; /* each graph output: the part and its output */
};

static gs_device_t *device_of(const gs_model *m, int node, const gs_plan_options *opt) {
  int k = gs__plan_section_of(m->nodes[node].name, opt->n_device_sections, opt->device_sections);
  return k >= 0 && opt->section_devices[k] ? opt->section_devices[k] : opt->device;
}

bool gs__plan_chain_needed(const gs_model *m, const gs_plan_options *opt) {
  if (!opt || opt->n_device_sections <= 0 || !opt->device)
    return false;
  for (int i = 0; i < m->n_nodes; i++)
    if (device_of(m, i, opt) != opt->device)
      return true;
  return false;
}

void gs__plan_chain_destroy(gs_plan_chain *c) {
  if (!c)
    return;
  for (int k = c->n - 1; k >= 0; k--) { /* a part may read weights an earlier part's plan made */
    chain_part *p = &c->parts[k];
    gs_plan_destroy(p->plan);
    for (int i = 0; i < CHAIN_MAX_VALUES; i++) {
      gs_buffer_free(p->in[i], NULL);
      gs_buffer_free(p->out[i], NULL);
    }
    gs_stream_destroy(p->stream);
    gs_model_part_free(p->model);
  }
  gs_stream_destroy(c->home_stream);
  free(c->ordered.nodes);
  free(c);
}

/* Whether node i can run once the nodes marked done have: each input is a
 * graph input, a weight, or made by a done node (producer[] by name). 2
 * where it reads what a node made, 1 where it reads none (a Constant, a
 * node of graph inputs), 0 where it cannot run yet. */
static int ready(const gs_model *m, int i, const gs_strmap *producer, const bool *done) {
  int how = 1;
  for (int k = 0; k < m->nodes[i].n_in; k++) {
    const char *in = m->nodes[i].inputs[k];
    int p = in[0] ? gs_strmap_get(producer, in) : -1;
    if (p >= 0 && !done[p])
      return 0;
    how = p >= 0 ? 2 : how;
  }
  return how;
}

/* The next node: the first ready one on the current device; else the
 * first ready one that reads what a node made, so that a later step's
 * Constant (always ready) does not open a part of its own; else the first
 * ready one. -1: none is ready. */
static int next_node(const gs_model *m, const gs_plan_options *opt, const gs_strmap *producer,
                     const bool *done, gs_device_t *current) {
  int reading = -1, any = -1;
  for (int i = 0; i < m->n_nodes; i++) {
    int how = done[i] ? 0 : ready(m, i, producer, done);
    if (how && device_of(m, i, opt) == current)
      return i;
    if (how == 2 && reading < 0)
      reading = i;
    if (how && any < 0)
      any = i;
  }
  return reading >= 0 ? reading : any;
}

/* c->ordered: m's nodes in an order of data that stays on one device as
 * long as it can (steps that do not depend on each other may be listed
 * interleaved): next_node in turn, whose device becomes current. */
static int order_by_device(gs_plan_chain *c, const gs_plan_options *opt) {
  const gs_model *m = c->m;
  int n = m->n_nodes, rc = GS_OK;
  gs_strmap producer;
  gs_strmap_init(&producer);
  bool *done = calloc((size_t)n + 1, 1);
  c->ordered = *m;
  c->ordered.nodes = malloc(sizeof *m->nodes * ((size_t)n + 1));
  if (!done || !c->ordered.nodes)
    rc = gs_error(GS_ENOMEM, "out of memory planning across devices");
  for (int i = 0; rc == 0 && i < n; i++)
    for (int k = 0; rc == 0 && k < m->nodes[i].n_out; k++)
      if (m->nodes[i].outputs[k][0] && gs_strmap_put(&producer, m->nodes[i].outputs[k], i) < 0)
        rc = gs_error(GS_ENOMEM, "out of memory planning across devices");
  gs_device_t *current = NULL;
  for (int placed = 0; rc == 0 && placed < n; placed++) {
    int pick = next_node(m, opt, &producer, done, current);
    if (pick < 0)
      rc = gs_error(GS_EINVAL, "the model's nodes have no order of data (a cycle)");
    else {
      done[pick] = true;
      current = device_of(m, pick, opt);
      c->ordered.nodes[placed] = m->nodes[pick];
    }
  }
  gs_strmap_free(&producer);
  free(done);
  return rc;
}

/* Node bounds of c->ordered where the device changes: parts [bounds[k],
 * bounds[k + 1]). */
static int cut_by_device(gs_plan_chain *c, const gs_plan_options *opt, int bounds[]) {
  const gs_model *m = &c->ordered;
  c->n = 0;
  bounds[0] = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    gs_device_t *d = device_of(m, i, opt);
    if (c->n > 0 && c->parts[c->n - 1].device == d)
      continue;
    if (c->n == CHAIN_MAX_PARTS)
      return gs_error(GS_ENOTSUP, "the model changes device more than %d times",
                      CHAIN_MAX_PARTS - 1);
    bounds[c->n] = i;
    c->parts[c->n++].device = d;
  }
  bounds[c->n] = m->n_nodes;
  return GS_OK;
}

/* Where input i of part k comes from, by name. */
static int find_source(gs_plan_chain *c, int k, int i) {
  const char *name = c->parts[k].model->inputs[i].name;
  for (int j = 0; j < c->m->n_inputs; j++)
    if (strcmp(c->m->inputs[j].name, name) == 0) {
      c->parts[k].from[i] = (source){-1, j};
      return GS_OK;
    }
  for (int p = k - 1; p >= 0; p--)
    for (int o = 0; o < c->parts[p].n_out; o++)
      if (strcmp(c->parts[p].model->outputs[o].name, name) == 0) {
        c->parts[k].from[i] = (source){p, o};
        return GS_OK;
      }
  return gs_error(GS_EINVAL, "a part of the model reads %s, which no part before it makes",
                  name);
}

/* Whether a node of m reads the value `name`. */
static bool reads(const gs_model *m, const char *name) {
  for (int i = 0; i < m->n_nodes; i++)
    for (int k = 0; k < m->nodes[i].n_in; k++)
      if (strcmp(m->nodes[i].inputs[k], name) == 0)
        return true;
  for (int o = 0; o < m->n_outputs; o++) /* handed on as it came */
    if (strcmp(m->outputs[o].name, name) == 0)
      return true;
  return false;
}

/* Plans part k for the shapes its sources give, with its buffers. */
static int plan_part(gs_plan_chain *c, int k, const gs_shape *shapes, const gs_plan_options *opt) {
  chain_part *p = &c->parts[k];
  p->n_out = p->model->n_outputs;
  if (p->model->n_inputs > CHAIN_MAX_VALUES || p->n_out > CHAIN_MAX_VALUES)
    return gs_error(GS_ENOTSUP, "a part of the chain has over %d inputs or outputs",
                    CHAIN_MAX_VALUES);
  gs_shape in_shapes[CHAIN_MAX_VALUES];
  int rc = GS_OK;
  for (int i = 0; rc == 0 && i < p->model->n_inputs;) {
    if ((rc = find_source(c, k, i)) < 0)
      break;
    source s = p->from[i];
    if (s.part < 0) {
      in_shapes[i++] = shapes[s.index];
      continue;
    }
    gs_plan_value_info info;
    gs_plan_output(c->parts[s.part].plan, s.index, &info);
    p->model->inputs[i].dtype = info.dtype; /* a crossing value is declared untyped */
    if (info.data) { /* known while planning the part before (a shape): a weight here */
      rc = gs_model_part_set_constant(p->model, i, &info.shape, info.data, info.bytes);
      continue;
    }
    in_shapes[i++] = info.shape;
  }
  p->n_in = p->model->n_inputs;
  /* A value an earlier part knew while planning is a weight here whose data
   * that part's plan holds: never shared through the model's weight set,
   * where another plan's data at the same address would pass for it. */
  bool made_weights = false;
  for (int i = 0; i < p->model->n_inits; i++)
    made_weights = made_weights || gs_strmap_get(&c->ordered.init_index,
                                                 p->model->inits[i].name) < 0;
  gs_plan_options part_opt = *opt;
  part_opt.device = p->device;
  part_opt.weights = p->device == opt->device && !made_weights ? opt->weights : NULL;
  part_opt.input_values = NULL;
  part_opt.n_device_sections = 0;
  if (rc == 0 && (rc = gs_plan_create(p->model, in_shapes, &part_opt, &p->plan)) < 0) {
    char where[96]; /* planned without input values: shapes that depend on them fail here */
    snprintf(where, sizeof where, "the part on %s of a model across devices",
             gs_device_get_info(p->device)->id);
    rc = gs_error_prefix(rc, where);
  }
  if (rc == 0)
    rc = gs_stream_create_ex(p->device, GS_STREAM_INLINE, &p->stream);
  gs_pool_t *pool = gs_device_pool(p->device, GS_MEM_DEVICE);
  for (int i = 0; rc == 0 && i < p->n_in; i++) { /* a graph input may come from the host */
    source s = p->from[i];
    gs_plan_value_info info;
    gs_plan_input(p->plan, i, &info);
    p->unread[i] = !reads(p->model, p->model->inputs[i].name); /* the first takes them all */
    if (!p->unread[i] && (s.part < 0 || c->parts[s.part].device != p->device))
      rc = gs_pool_alloc(pool, info.bytes ? info.bytes : 1, NULL, &p->in[i]);
  }
  for (int o = 0; rc == 0 && o < p->n_out; o++) {
    gs_plan_value_info info;
    gs_plan_output(p->plan, o, &info);
    rc = gs_pool_alloc(pool, info.bytes ? info.bytes : 1, NULL, &p->out[o]);
  }
  return rc;
}

static int find_outputs(gs_plan_chain *c) {
  for (int o = 0; o < c->m->n_outputs; o++) {
    bool found = false;
    for (int k = c->n - 1; k >= 0 && !found; k--)
      for (int j = 0; j < c->parts[k].n_out && !found; j++)
        if (strcmp(c->parts[k].model->outputs[j].name, c->m->outputs[o].name) == 0) {
          c->outputs[o] = (source){k, j};
          found = true;
        }
    if (!found)
      return gs_error(GS_ENOTSUP, "output %s of a model across devices is made by no part "
                                  "(an input or a weight handed back)", c->m->outputs[o].name);
  }
  return GS_OK;
}

/* What part k holds on its device: its plan's memory and its buffers. */
static uint64_t part_bytes(const chain_part *p) {
  uint64_t held = gs_plan_device_bytes(p->plan);
  for (int i = 0; i < CHAIN_MAX_VALUES; i++)
    held += (p->in[i] ? gs_buffer_size(p->in[i]) : 0) + (p->out[i] ? gs_buffer_size(p->out[i]) : 0);
  return held;
}

static void sum_report(const gs_plan_chain *c, gs_plan_report *r) {
  memset(r, 0, sizeof *r);
  r->nodes = c->m->n_nodes;
  r->chain_parts = c->n;
  for (int k = 0; k < c->n; k++) {
    gs_plan_report pr;
    gs_plan_get_report(c->parts[k].plan, &pr);
    r->folded += pr.folded; /* what the parts did, wherever they are */
    r->fused += pr.fused;
    r->in_place += pr.in_place;
    r->cpu_fallback += pr.cpu_fallback;
    r->host_steps += pr.host_steps;
    r->host_staging_bytes += pr.host_staging_bytes;
    for (int way = 0; way < 2; way++) {
      r->host_copies[way] += pr.host_copies[way];
      r->host_copy_bytes[way] += pr.host_copy_bytes[way];
    }
    if (pr.fallback_ops[0] && strlen(r->fallback_ops) + strlen(pr.fallback_ops) + 3 <
                                  sizeof r->fallback_ops)
      snprintf(r->fallback_ops + strlen(r->fallback_ops),
               sizeof r->fallback_ops - strlen(r->fallback_ops), "%s%s",
               r->fallback_ops[0] ? ", " : "", pr.fallback_ops);
    uint64_t held = part_bytes(&c->parts[k]);
    if (c->parts[k].device != c->home) {
      r->other_devices_bytes += held;
      continue;
    }
    r->steps += pr.steps;
    r->arena_bytes += held - pr.weights_bytes;
    r->weights_bytes += pr.weights_bytes;
    r->shared_weights_bytes += pr.shared_weights_bytes;
    r->shared_weights_added += pr.shared_weights_added;
  }
}

int gs__plan_chain_create(const gs_model *m, const gs_shape *shapes, const gs_plan_options *opt,
                          gs_plan_chain **out, gs_plan_report *report) {
  if (m->n_inputs > CHAIN_MAX_VALUES || m->n_outputs > CHAIN_MAX_VALUES)
    return gs_error(GS_ENOTSUP, "a model across devices takes at most %d inputs and outputs",
                    CHAIN_MAX_VALUES);
  gs_plan_chain *c = calloc(1, sizeof *c);
  if (!c)
    return gs_error(GS_ENOMEM, "out of memory planning across devices");
  c->m = m;
  c->home = opt->device;
  int bounds[CHAIN_MAX_PARTS + 1];
  gs_model *parts[CHAIN_MAX_PARTS];
  int rc = order_by_device(c, opt);
  if (rc == 0)
    rc = cut_by_device(c, opt, bounds);
  if (rc == 0 && (rc = gs_model_cut_at(&c->ordered, bounds, c->n, parts)) == 0)
    for (int k = 0; k < c->n; k++)
      c->parts[k].model = parts[k];
  for (int k = 0; rc == 0 && k < c->n; k++)
    rc = plan_part(c, k, shapes, opt);
  if (rc == 0)
    rc = find_outputs(c);
  if (rc == 0)
    rc = gs_stream_create_ex(c->home, GS_STREAM_INLINE, &c->home_stream);
  if (rc < 0) {
    gs__plan_chain_destroy(c);
    return rc;
  }
  sum_report(c, report);
  for (int k = 0; k < c->n; k++)
    GS_LOGD("engine", "plan across devices: part %d (%d nodes) on %s", k,
            c->parts[k].model->n_nodes, gs_device_get_info(c->parts[k].device)->id);
  *out = c;
  return GS_OK;
}

/* Input i of part k where the part reads it: in place where it already
 * is on the part's device, else copied into the part's buffer. */
static int part_input(gs_plan_chain *c, int k, int i, const void *const *host_in,
                      gs_buffer_t *const *dev_in, gs_buffer_t **buf) {
  chain_part *p = &c->parts[k];
  source s = p->from[i];
  gs_plan_value_info info;
  gs_plan_input(p->plan, i, &info);
  gs_buffer_t *from = s.part >= 0 ? c->parts[s.part].out[s.index] : dev_in ? dev_in[s.index] : NULL;
  gs_device_t *at = s.part >= 0 ? c->parts[s.part].device : dev_in ? c->home : NULL;
  *buf = at == p->device ? from : p->in[i];
  if (at == p->device || !info.bytes || p->unread[i])
    return GS_OK;
  return from ? gs_stream_copy_peer(p->stream, p->in[i], 0, from, 0, info.bytes)
              : gs_stream_copy_h2d(p->stream, p->in[i], 0, host_in[s.index], info.bytes);
}

/* Graph output o from the part that made it to the caller. */
static int hand_out(gs_plan_chain *c, int o, void *const *host_out, gs_buffer_t *const *dev_out) {
  source s = c->outputs[o];
  chain_part *p = &c->parts[s.part];
  gs_plan_value_info info;
  gs_plan_output(p->plan, s.index, &info);
  if (!info.bytes)
    return GS_OK;
  if (host_out)
    return gs_stream_copy_d2h(p->stream, host_out[o], p->out[s.index], 0, info.bytes);
  if (p->device == c->home)
    return gs_stream_copy_d2d(c->home_stream, dev_out[o], 0, p->out[s.index], 0, info.bytes);
  return gs_stream_copy_peer(c->home_stream, dev_out[o], 0, p->out[s.index], 0, info.bytes);
}

int gs__plan_chain_run(gs_plan_chain *c, const void *const *host_in, void *const *host_out,
                       gs_buffer_t *const *dev_in, gs_buffer_t *const *dev_out) {
  int rc = GS_OK;
  for (int k = 0; rc == 0 && k < c->n; k++) {
    chain_part *p = &c->parts[k];
    gs_buffer_t *in[CHAIN_MAX_VALUES];
    for (int i = 0; rc == 0 && i < p->n_in; i++)
      rc = part_input(c, k, i, host_in, dev_in, &in[i]);
    int sync = gs_stream_synchronize(p->stream);
    rc = rc < 0 ? rc : sync;
    if (rc == 0) /* synchronous: its outputs are there when it returns */
      rc = gs_plan_run_buffers(p->plan, in, p->out);
  }
  for (int o = 0; rc == 0 && o < c->m->n_outputs; o++) {
    rc = hand_out(c, o, host_out, dev_out);
    int sync = gs_stream_synchronize(host_out ? c->parts[c->outputs[o].part].stream
                                              : c->home_stream);
    rc = rc < 0 ? rc : sync;
  }
  return rc;
}

void gs__plan_chain_input(const gs_plan_chain *c, int i, gs_plan_value_info *out) {
  gs_plan_input(c->parts[0].plan, i, out); /* the first stage takes all of them, in order */
}

void gs__plan_chain_output(const gs_plan_chain *c, int i, gs_plan_value_info *out) {
  source s = c->outputs[i];
  gs_plan_output(c->parts[s.part].plan, s.index, out);
  out->name = c->m->outputs[i].name;
}

uint64_t gs__plan_chain_device_bytes(const gs_plan_chain *c) {
  gs_plan_report r;
  sum_report(c, &r);
  return r.arena_bytes + r.weights_bytes;
}

int gs__plan_chain_other_devices(const gs_plan_chain *c, gs_device_t **devices, uint64_t *bytes,
                                 int max) {
  int n = 0;
  for (int k = 0; k < c->n; k++) {
    if (c->parts[k].device == c->home)
      continue;
    int j = 0;
    while (j < n && j < max && devices[j] != c->parts[k].device)
      j++;
    if (j == n && n >= max) {
      n++; /* counted, not filled in */
      continue;
    }
    if (j == n) {
      devices[n] = c->parts[k].device;
      bytes[n++] = 0;
    }
    bytes[j] += part_bytes(&c->parts[k]);
  }
  return n;
}

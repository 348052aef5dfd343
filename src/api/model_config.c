/* model_config.c - a served model's configuration, config.json or Triton's
 * config.pbtxt, read into one JSON shape and applied through one table of
 * fields (name, kind, where it goes, bounds or words) that both formats
 * share. Fields the table does not name (Triton's name, platform, input,
 * output, ...) are ignored, as Triton's own readers of other formats do. */
#include "api/model_config.h"

#include "api/ensemble.h"

#include "base/error.h"
#include "base/fileutil.h"

#include <ctype.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ------------------------------------------------------------------- */

typedef enum {
  FIELD_INT,     /* an integer within [min, max] */
  FIELD_LIST,    /* integers within [min, max], at most `max_count` (one bare value too) */
  FIELD_WORD,    /* one of `words`, stored as its index */
  FIELD_BOOL,    /* true or false (JSON, or the text format's word); `invert` stores !v */
  FIELD_SECTION, /* an object whose presence sets the bool at `offset` */
  FIELD_RECIPE,  /* a preprocessing recipe's spec (image.h): has_prep, prep, prep_spec */
} field_kind;

typedef struct config_field {
  const char *path; /* "dynamic_batching.priority_levels" */
  field_kind kind;
  size_t offset, size;  /* where it goes in gs_served_model, and its width in bytes */
  int64_t min, max;
  const char *const *words;
  bool invert;
  size_t count_offset;  /* FIELD_LIST: the int that counts the values */
  int max_count;
} config_field;

#define AT(field) .offset = offsetof(gs_served_model, field), \
                  .size = sizeof(((gs_served_model *)0)->field)

static const char *const timeout_action_words[] = {"REJECT", "DELAY", NULL};

static const config_field fields[] = {
    {.path = "max_batch_size", .kind = FIELD_INT, AT(max_batch_size), .min = 0, .max = 1 << 20},
    {.path = "precision", .kind = FIELD_WORD, AT(precision), .words = gs_precision_names},
    {.path = "warmup", .kind = FIELD_BOOL, AT(no_warmup), .invert = true},
    {.path = "deterministic", .kind = FIELD_BOOL, AT(deterministic)},
    {.path = "preprocess", .kind = FIELD_RECIPE, AT(prep)},
    {.path = "idle_unload_seconds", .kind = FIELD_INT, AT(idle_unload_s), .min = 0,
     .max = 100L * 365 * 86400},
    {.path = "dynamic_batching", .kind = FIELD_SECTION, AT(dynamic_batching)},
    {.path = "dynamic_batching.preferred_batch_size", .kind = FIELD_LIST,
     AT(preferred_batch_sizes), .min = 1, .max = 1 << 20,
     .count_offset = offsetof(gs_served_model, n_preferred), .max_count = 8},
    {.path = "dynamic_batching.max_queue_delay_microseconds", .kind = FIELD_INT,
     AT(max_queue_delay_us), .min = 0, .max = INT64_MAX},
    {.path = "dynamic_batching.adaptive", .kind = FIELD_BOOL, AT(adaptive_batching)},
    {.path = "dynamic_batching.latency_budget_us", .kind = FIELD_INT, AT(latency_budget_us),
     .min = 1, .max = 3600L * 1000000},
    {.path = "dynamic_batching.priority_levels", .kind = FIELD_INT, AT(priority_levels),
     .min = 0, .max = 100},
    {.path = "dynamic_batching.default_priority_level", .kind = FIELD_INT, AT(default_priority),
     .min = 0, .max = 100},
    {.path = "dynamic_batching.default_queue_policy.max_queue_size", .kind = FIELD_INT,
     AT(max_queue_size), .min = 0, .max = INT64_MAX},
    {.path = "dynamic_batching.default_queue_policy.default_timeout_microseconds",
     .kind = FIELD_INT, AT(default_timeout_us), .min = 0, .max = INT64_MAX},
    {.path = "dynamic_batching.default_queue_policy.timeout_action", .kind = FIELD_WORD,
     AT(timeout_delays), .words = timeout_action_words},
};

/* The value at a dotted path, or NULL. */
static json_t *lookup(json_t *root, const char *path) {
  char key[128];
  json_t *at = root;
  while (at && *path) {
    size_t n = strcspn(path, ".");
    snprintf(key, sizeof key, "%.*s", (int)n, path);
    at = json_is_object(at) ? json_object_get(at, key) : NULL;
    path += n + (path[n] == '.');
  }
  return at;
}

static void store(void *slot, size_t size, int64_t v) {
  switch (size) {
  case 1: *(bool *)slot = v != 0; break;
  case 4: *(int32_t *)slot = (int32_t)v; break;
  default: *(int64_t *)slot = v; break;
  }
}

/* The field's last name, as messages call it. */
static const char *short_name(const config_field *f) {
  const char *dot = strrchr(f->path, '.');
  return dot ? dot + 1 : f->path;
}

static int bad(const config_field *f, const char *path) {
  const char *name = short_name(f);
  switch (f->kind) {
  case FIELD_INT:
    return gs_error(GS_EINVAL, "%s: %s must be an integer in [%lld, %lld]", path, name,
                    (long long)f->min, (long long)f->max);
  case FIELD_LIST:
    return gs_error(GS_EINVAL, "%s: %s holds up to %d integers in [%lld, %lld]", path, name,
                    f->max_count, (long long)f->min, (long long)f->max);
  case FIELD_BOOL:
    return gs_error(GS_EINVAL, "%s: %s must be true or false", path, name);
  case FIELD_SECTION:
    return gs_error(GS_EINVAL, "%s: %s must be a section ({ ... })", path, name);
  case FIELD_RECIPE:
    return gs_error(GS_EINVAL, "%s: %s must be a string of KEY=VALUE, such as "
                               "\"resize=256,center_crop=224,scale=1/255\"", path, name);
  case FIELD_WORD: {
    char list[128] = "";
    for (int i = 0; f->words[i]; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
               i == 0 ? "" : f->words[i + 1] ? ", " : " or ", f->words[i]);
    return gs_error(GS_EINVAL, "%s: %s must be %s", path, name, list);
  }
  }
  return GS_EINVAL;
}

static bool int_in(json_t *v, const config_field *f, int64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < f->min || json_integer_value(v) > f->max)
    return false;
  *out = json_integer_value(v);
  return true;
}

static int apply_field(gs_served_model *m, const config_field *f, json_t *v, const char *path) {
  char *slot = (char *)m + f->offset;
  int64_t n;
  switch (f->kind) {
  case FIELD_INT:
    if (!int_in(v, f, &n))
      return bad(f, path);
    store(slot, f->size, n);
    return GS_OK;
  case FIELD_LIST: {
    json_t *one = json_is_array(v) ? NULL : json_pack("[O]", v); /* a bare value, as text writes one */
    json_t *list = one ? one : v, *e;
    size_t i;
    int count = 0;
    json_array_foreach(list, i, e) {
      if (count == f->max_count || !int_in(e, f, &n))
        break;
      ((int64_t *)(void *)slot)[count++] = n;
    }
    bool ok = (size_t)count == json_array_size(list);
    json_decref(one);
    if (!ok)
      return bad(f, path);
    *(int *)((char *)m + f->count_offset) = count;
    return GS_OK;
  }
  case FIELD_WORD: {
    const char *word = json_string_value(v);
    for (int i = 0; word && f->words[i]; i++)
      if (strcmp(word, f->words[i]) == 0) {
        store(slot, f->size, i);
        return GS_OK;
      }
    return bad(f, path);
  }
  case FIELD_BOOL: {
    const char *word = json_string_value(v); /* the text format writes it as a word */
    bool b;
    if (json_is_boolean(v))
      b = json_is_true(v);
    else if (word && (strcmp(word, "true") == 0 || strcmp(word, "false") == 0))
      b = strcmp(word, "true") == 0;
    else
      return bad(f, path);
    store(slot, f->size, f->invert ? !b : b);
    return GS_OK;
  }
  case FIELD_SECTION:
    if (!json_is_object(v))
      return bad(f, path);
    store(slot, f->size, 1);
    return GS_OK;
  case FIELD_RECIPE: {
    const char *spec = json_string_value(v);
    if (!spec || strlen(spec) >= sizeof m->prep_spec)
      return bad(f, path);
    gs_prep_defaults(&m->prep);
    if (gs_prep_parse(spec, &m->prep) < 0) {
      char why[400];
      snprintf(why, sizeof why, "%s", gs_error_detail());
      return gs_error(GS_EINVAL, "%s: %s", path, why);
    }
    snprintf(m->prep_spec, sizeof m->prep_spec, "%s", spec);
    m->has_prep = true;
    return GS_OK;
  }
  }
  return bad(f, path);
}

/* The integer fields of an instance group: threads (gpusrv's own: host
 * threads per instance on a CPU), and those of "count": "auto". */
typedef struct group_field {
  const char *name;
  size_t offset, size;
  int64_t min, max;
  bool auto_only;
} group_field;

#define GROUP_AT(field) .offset = offsetof(gs_instance_group, field), \
                        .size = sizeof(((gs_instance_group *)0)->field)

static const group_field group_fields[] = {
    {"threads", GROUP_AT(threads), .min = 1, .max = 4096},
    {"min", GROUP_AT(min), .min = 0, .max = GS_REPO_MAX_INSTANCES, .auto_only = true},
    {"max", GROUP_AT(max), .min = 1, .max = GS_REPO_MAX_INSTANCES, .auto_only = true},
    {"queue_delay_budget_us", GROUP_AT(queue_budget_us), .min = 1, .max = 3600L * 1000000,
     .auto_only = true},
    {"scale_down_ms", GROUP_AT(scale_down_ms), .min = 100, .max = 86400L * 1000,
     .auto_only = true},
};

/* count: 1..8, or "auto" with min (default 1) and max (default 4). */
static int group_count(gs_instance_group *grp, json_t *count, const char *path) {
  if (json_is_string(count) && !strcmp(json_string_value(count), "auto")) {
    grp->autoscale = true;
    grp->min = 1;
    grp->max = 4;
    grp->scale_down_ms = 10000;
    return GS_OK;
  }
  json_int_t n = count ? json_integer_value(count) : 1;
  grp->count = n >= 1 && n <= GS_REPO_MAX_INSTANCES ? (int)n : 0;
  if (grp->count == 0)
    return gs_error(GS_EINVAL, "%s: instance_group count must be 1 to %d, or \"auto\"", path,
                    GS_REPO_MAX_INSTANCES);
  return GS_OK;
}

static int group_numbers(gs_instance_group *grp, json_t *g, const char *path) {
  for (size_t i = 0; i < sizeof group_fields / sizeof group_fields[0]; i++) {
    const group_field *f = &group_fields[i];
    json_t *v = json_object_get(g, f->name);
    if (!v)
      continue;
    if (f->auto_only && !grp->autoscale)
      return gs_error(GS_EINVAL, "%s: instance_group %s goes with \"count\": \"auto\"", path,
                      f->name);
    json_int_t n = json_integer_value(v);
    if (!json_is_integer(v) || n < f->min || n > f->max)
      return gs_error(GS_EINVAL, "%s: instance_group %s must be %lld to %lld", path, f->name,
                      (long long)f->min, (long long)f->max);
    store((char *)grp + f->offset, f->size, n);
  }
  if (grp->autoscale && grp->min > grp->max)
    return gs_error(GS_EINVAL, "%s: instance_group min (%lld) is above max (%lld)", path,
                    (long long)grp->min, (long long)grp->max);
  if (grp->autoscale)
    grp->count = (int)grp->max; /* made up front; the batcher runs min to max of them */
  return GS_OK;
}

static void group_devices(gs_instance_group *grp, json_t *g) {
  json_t *kind = json_object_get(g, "kind");
  snprintf(grp->kind, sizeof grp->kind, "%s",
           json_is_string(kind) ? json_string_value(kind) : "KIND_AUTO");
  json_t *devs = json_object_get(g, "devices"), *d;
  if (!devs)
    devs = json_object_get(g, "gpus");
  size_t di;
  json_array_foreach(devs, di, d) {
    if (grp->n_devices == 8)
      break;
    if (json_is_string(d))
      snprintf(grp->devices[grp->n_devices++], 32, "%s", json_string_value(d));
    else if (json_is_integer(d))
      snprintf(grp->devices[grp->n_devices++], 32, "%lld", (long long)json_integer_value(d));
  }
}

/* instance_group: [{count, kind: KIND_CPU|KIND_GPU|KIND_AUTO|cpu|opencl|cuda, devices:
 * ["cpu0", ...] or gpus: [0, ...], and the fields above}], or one group
 * bare (the text format). */
static int apply_groups(gs_served_model *m, json_t *groups, const char *path) {
  json_t *one = groups && !json_is_array(groups) ? json_pack("[O]", groups) : NULL, *g;
  size_t gi;
  int rc = GS_OK;
  json_array_foreach(one ? one : groups, gi, g) {
    if (m->n_groups == 4) {
      rc = gs_error(GS_EINVAL, "%s: at most 4 instance groups", path);
      break;
    }
    gs_instance_group *grp = &m->groups[m->n_groups++];
    memset(grp, 0, sizeof *grp);
    if ((rc = group_count(grp, json_object_get(g, "count"), path)) < 0 ||
        (rc = group_numbers(grp, g, path)) < 0)
      break;
    group_devices(grp, g);
  }
  json_decref(one);
  for (int i = 0; rc == 0 && i < m->n_groups; i++) {
    const gs_instance_group *grp = &m->groups[i];
    if (!grp->autoscale)
      continue;
    if (m->n_groups > 1)
      rc = gs_error(GS_EINVAL, "%s: instance_group count \"auto\" goes in the only instance "
                    "group", path);
    else if (!m->dynamic_batching)
      rc = gs_error(GS_EINVAL, "%s: instance_group count \"auto\" needs dynamic_batching (its "
                    "queue is what the count follows)", path);
    else if (grp->queue_budget_us && (uint64_t)grp->queue_budget_us <= m->max_queue_delay_us)
      rc = gs_error(GS_EINVAL, "%s: instance_group queue_delay_budget_us (%lld) must be above "
                    "max_queue_delay_microseconds (%llu), which requests may wait by design",
                    path, (long long)grp->queue_budget_us,
                    (unsigned long long)m->max_queue_delay_us);
  }
  return rc;
}

int gs_model_config_apply(gs_served_model *m, json_t *root, const char *path) {
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    json_t *v = lookup(root, fields[i].path);
    int rc = v ? apply_field(m, &fields[i], v, path) : GS_OK;
    if (rc < 0)
      return rc;
  }
  int ens = gs_ensemble_read_config(m, root, path);
  if (ens < 0)
    return ens;
  if (m->adaptive_batching && m->latency_budget_us == 0)
    return gs_error(GS_EINVAL, "%s: dynamic_batching.adaptive needs latency_budget_us, the time "
                    "a request may take from arrival to answer", path);
  return apply_groups(m, json_object_get(root, "instance_group"), path);
}

/* ---- the two formats ------------------------------------------------------------- */

int gs_model_config_read_json(gs_served_model *m, const char *path) {
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return gs_error(GS_EINVAL, "%s, line %d: %s", path, jerr.line, jerr.text);
  int rc = gs_model_config_apply(m, root, path);
  json_decref(root);
  return rc;
}

int gs_model_config_read_json_text(gs_served_model *m, const char *text, const char *origin) {
  json_error_t jerr;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return gs_error(GS_EINVAL, "%s, line %d: %s", origin, jerr.line, jerr.text);
  int rc = json_is_object(root) ? gs_model_config_apply(m, root, origin)
                                : gs_error(GS_EINVAL, "%s is not a JSON object", origin);
  json_decref(root);
  return rc;
}

/* config.pbtxt: Triton's configuration in the protobuf text format, read
 * into the same JSON shape as config.json (a field given more than once
 * becomes an array; enum values become strings), so that one reader serves
 * both. Written by hand: the text format needs only a small tokenizer, and
 * the protobuf runtime would bring a schema compiler for it. */
typedef struct pbt {
  const char *p;
  int line;
  char err[160];
} pbt;

static void pbt_skip(pbt *t) {
  for (;;) {
    while (*t->p == ' ' || *t->p == '\t' || *t->p == '\r' || *t->p == '\n') {
      if (*t->p == '\n')
        t->line++;
      t->p++;
    }
    if (*t->p != '#')
      return;
    while (*t->p && *t->p != '\n')
      t->p++;
  }
}

static json_t *pbt_value(pbt *t);

/* Fields up to `end` ('}' or NUL) into an object. */
static json_t *pbt_fields(pbt *t, char end) {
  json_t *obj = json_object();
  for (;;) {
    pbt_skip(t);
    if (*t->p == end) {
      if (end)
        t->p++;
      return obj;
    }
    if (!isalpha((unsigned char)*t->p) && *t->p != '_') {
      snprintf(t->err, sizeof t->err, "line %d: expected a field name", t->line);
      json_decref(obj);
      return NULL;
    }
    char key[64];
    size_t n = 0;
    while ((isalnum((unsigned char)*t->p) || *t->p == '_') && n + 1 < sizeof key)
      key[n++] = *t->p++;
    key[n] = '\0';
    pbt_skip(t);
    if (*t->p == ':') {
      t->p++;
      pbt_skip(t);
    } else if (*t->p != '{' && *t->p != '[') {
      snprintf(t->err, sizeof t->err, "line %d: expected ':' after %s", t->line, key);
      json_decref(obj);
      return NULL;
    }
    json_t *v = pbt_value(t);
    if (!v) {
      json_decref(obj);
      return NULL;
    }
    json_t *prev = json_object_get(obj, key);
    if (!prev) {
      json_object_set_new(obj, key, v);
    } else if (json_is_array(prev) && !json_is_array(v)) {
      json_array_append_new(prev, v);
    } else {
      json_t *arr = json_array();
      json_array_append(arr, prev);
      if (json_is_array(v))
        json_array_extend(arr, v), json_decref(v);
      else
        json_array_append_new(arr, v);
      json_object_set_new(obj, key, arr);
    }
    pbt_skip(t);
    if (*t->p == ',' || *t->p == ';')
      t->p++;
  }
}

static json_t *pbt_value(pbt *t) {
  pbt_skip(t);
  const char *p = t->p;
  if (*p == '{') {
    t->p++;
    return pbt_fields(t, '}');
  }
  if (*p == '[') {
    t->p++;
    json_t *arr = json_array();
    for (;;) {
      pbt_skip(t);
      if (*t->p == ']') {
        t->p++;
        return arr;
      }
      json_t *v = pbt_value(t);
      if (!v) {
        json_decref(arr);
        return NULL;
      }
      json_array_append_new(arr, v);
      pbt_skip(t);
      if (*t->p == ',')
        t->p++;
    }
  }
  if (*p == '"' || *p == '\'') {
    char q = *p++;
    const char *e = strchr(p, q);
    if (!e) {
      snprintf(t->err, sizeof t->err, "line %d: unterminated string", t->line);
      return NULL;
    }
    t->p = e + 1;
    return json_stringn(p, (size_t)(e - p));
  }
  if (*p == '-' || isdigit((unsigned char)*p)) {
    char *end;
    double d = strtod(p, &end);
    if (end == p) { /* "-" alone: no number, and nothing consumed */
      snprintf(t->err, sizeof t->err, "line %d: expected a number", t->line);
      return NULL;
    }
    bool integral = true;
    for (const char *c = p; c < end; c++)
      integral = integral && *c != '.' && *c != 'e' && *c != 'E';
    t->p = end;
    return integral ? json_integer(strtoll(p, NULL, 10)) : json_real(d);
  }
  if (isalpha((unsigned char)*p) || *p == '_') { /* enum value, true, false */
    const char *s0 = p;
    while (isalnum((unsigned char)*t->p) || *t->p == '_')
      t->p++;
    size_t n = (size_t)(t->p - s0);
    if (n == 4 && !strncmp(s0, "true", 4))
      return json_true();
    if (n == 5 && !strncmp(s0, "false", 5))
      return json_false();
    return json_stringn(s0, n);
  }
  snprintf(t->err, sizeof t->err, "line %d: unexpected '%c'", t->line, *p ? *p : ' ');
  return NULL;
}

int gs_model_config_read_pbtxt(gs_served_model *m, const char *path) {
  const size_t cap = 1 << 20;
  char *text = malloc(cap);
  if (!text)
    return gs_error(GS_ENOMEM, "out of memory reading %s", path);
  long len = gs_read_text_file(path, text, cap);
  if (len < 0 || (size_t)len == cap - 1) {
    free(text);
    return len < 0 ? (int)len : gs_error(GS_EINVAL, "%s is over 1 MiB", path);
  }
  pbt t = {.p = text, .line = 1};
  json_t *root = pbt_fields(&t, '\0');
  free(text);
  if (!root)
    return gs_error(GS_EINVAL, "%s, %s", path, t.err);
  int rc = gs_model_config_apply(m, root, path);
  json_decref(root);
  return rc;
}

/* config.c - settings from one table: defaults, config files, flags, help. */
#include "base/config.h"

#include "base/error.h"
#include "base/units.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const gs_config_option *gs_config_find(const gs_config_option *t, const char *name) {
  for (; t->name; t++)
    if (strcmp(t->name, name) == 0)
      return t;
  return NULL;
}

static const char *type_name(gs_config_type type) {
  switch (type) {
  case GS_CFG_STRING: return "a string";
  case GS_CFG_INT: return "an integer";
  case GS_CFG_REAL: return "a number";
  case GS_CFG_BYTES: return "a size (bytes, or text such as \"512M\")";
  case GS_CFG_BOOL: return "true or false";
  }
  return "?";
}

int gs_config_set(const gs_config_option *table, void *settings, const char *name,
                  const char *value) {
  const gs_config_option *o = gs_config_find(table, name);
  if (!o)
    return gs_error(GS_EINVAL, "unknown setting '%s'", name);
  char *slot = (char *)settings + o->offset;
  if (o->type == GS_CFG_STRING) {
    if (strlen(value) >= GS_CONFIG_STR)
      return gs_error(GS_EINVAL, "%s: value longer than %d characters", name, GS_CONFIG_STR - 1);
    snprintf(slot, GS_CONFIG_STR, "%s", value);
    return GS_OK;
  }
  if (o->type == GS_CFG_BOOL) {
    bool on = !strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes");
    if (!on && strcmp(value, "false") && strcmp(value, "0") && strcmp(value, "no"))
      return gs_error(GS_EINVAL, "%s: '%s' is not true or false", name, value);
    memcpy(slot, &on, sizeof on);
    return GS_OK;
  }
  char *end;
  errno = 0;
  double v;
  if (o->type == GS_CFG_INT) {
    long long i = strtoll(value, &end, 10);
    if (end == value || *end || errno)
      return gs_error(GS_EINVAL, "%s: '%s' is not an integer", name, value);
    v = (double)i;
  } else if (o->type == GS_CFG_REAL) {
    v = strtod(value, &end);
    if (end == value || *end || errno || !isfinite(v))
      return gs_error(GS_EINVAL, "%s: '%s' is not a number", name, value);
  } else {
    uint64_t bytes;
    if (gs_parse_bytes(value, &bytes) < 0)
      return gs_error(GS_EINVAL, "%s: '%s' is not a size (such as 512M or 2G)", name, value);
    v = (double)bytes;
  }
  if (v < o->min || v > o->max)
    return gs_error(GS_EINVAL, "%s: %s is outside [%.15g, %.15g]", name, value, o->min, o->max);
  if (o->type == GS_CFG_REAL)
    memcpy(slot, &v, sizeof v);
  else
    memcpy(slot, &(int64_t){(int64_t)v}, sizeof(int64_t));
  return GS_OK;
}

int gs_config_defaults(const gs_config_option *table, void *settings) {
  for (const gs_config_option *o = table; o->name; o++) {
    int rc = gs_config_set(table, settings, o->name, o->dflt);
    if (rc < 0)
      return rc;
  }
  return GS_OK;
}

int gs_config_load_file(const gs_config_option *table, void *settings, const char *path) {
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return gs_error(GS_EINVAL, "config file %s, line %d: %s", path, jerr.line, jerr.text);
  if (!json_is_object(root)) {
    json_decref(root);
    return gs_error(GS_EINVAL, "config file %s: expected a JSON object of settings", path);
  }
  const char *key;
  json_t *val;
  int rc = GS_OK;
  json_object_foreach(root, key, val) {
    const gs_config_option *o = gs_config_find(table, key);
    char text[64];
    const char *value = text;
    if (!o)
      rc = gs_error(GS_EINVAL, "config file %s: unknown setting '%s'", path, key);
    else if (o->type == GS_CFG_STRING && json_is_string(val))
      value = json_string_value(val);
    else if (o->type != GS_CFG_REAL && o->type != GS_CFG_STRING && json_is_integer(val))
      snprintf(text, sizeof text, "%lld", (long long)json_integer_value(val));
    else if (o->type == GS_CFG_REAL && json_is_number(val))
      snprintf(text, sizeof text, "%.17g", json_number_value(val));
    else if (o->type == GS_CFG_BYTES && json_is_string(val))
      value = json_string_value(val);
    else if (o->type == GS_CFG_BOOL && json_is_boolean(val))
      value = json_is_true(val) ? "true" : "false";
    else
      rc = gs_error(GS_EINVAL, "config file %s: '%s' must be %s", path, key, type_name(o->type));
    if (rc == 0 && (rc = gs_config_set(table, settings, key, value)) < 0) {
      char why[300];
      snprintf(why, sizeof why, "%s", gs_error_detail());
      rc = gs_error(rc, "config file %s: %s", path, why);
    }
    if (rc < 0)
      break;
  }
  json_decref(root);
  return rc;
}

void gs_config_print_help(const gs_config_option *table, FILE *out) {
  for (const gs_config_option *o = table; o->name; o++) {
    char flag[64];
    static const char *const metavar[] = {[GS_CFG_STRING] = "VALUE", [GS_CFG_INT] = "N",
                                          [GS_CFG_REAL] = "X", [GS_CFG_BYTES] = "SIZE"};
    if (o->type == GS_CFG_BOOL)
      snprintf(flag, sizeof flag, "--%s", o->name);
    else
      snprintf(flag, sizeof flag, "--%s=%s", o->name, metavar[o->type]);
    fprintf(out, "  %-30s %s (default: %s", flag, o->help, o->dflt[0] ? o->dflt : "none");
    if (o->type == GS_CFG_INT || o->type == GS_CFG_REAL)
      fprintf(out, "; %.15g..%.15g", o->min, o->max);
    fprintf(out, ")\n");
  }
}

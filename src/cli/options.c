/* options.c - parsing a subcommand's flags from its table, and its help. */
#include "cli/options.h"

#include "cli/cli.h"

#include "base/error.h"
#include "base/fileutil.h"
#include "base/units.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const gs_cli_option *find_long(const gs_cli_option *t, const char *name, size_t len) {
  for (; t->name; t++)
    if (strlen(t->name) == len && strncmp(t->name, name, len) == 0)
      return t;
  return NULL;
}

static const gs_cli_option *find_short(const gs_cli_option *t, char c) {
  for (; t->name; t++)
    if (t->short_name && t->short_name == c)
      return t;
  return NULL;
}

static bool in_bounds(const gs_cli_option *o, double v) {
  return (o->min == 0 && o->max == 0) || (v >= o->min && v <= o->max);
}

/* Stores `value` into the row's field; false when it is not a valid value. */
static bool store(const gs_cli_option *o, const char *value, char *base) {
  void *slot = base + o->offset;
  char *end = NULL;
  errno = 0;
  switch (o->type) {
  case GS_OPT_BOOL:
    *(bool *)slot = true;
    return true;
  case GS_OPT_STRING:
    *(const char **)slot = value;
    return true;
  case GS_OPT_INT: {
    long long v = strtoll(value, &end, 10);
    if (end == value || *end || errno || !in_bounds(o, (double)v))
      return false;
    *(long long *)slot = v;
    return true;
  }
  case GS_OPT_REAL: {
    double v = strtod(value, &end);
    if (end == value || *end || errno || !isfinite(v) || !in_bounds(o, v))
      return false;
    *(double *)slot = v;
    return true;
  }
  case GS_OPT_BYTES:
    return gs_parse_bytes(value, (uint64_t *)slot) == 0;
  case GS_OPT_DURATION:
    return gs_parse_duration(value, (int64_t *)slot) == 0;
  case GS_OPT_LIST: {
    gs_cli_list *l = slot;
    if (l->n >= GS_CLI_LIST_MAX)
      return false;
    l->items[l->n++] = value;
    return true;
  }
  }
  return false;
}

static void describe_bounds(const gs_cli_option *o, char *buf, size_t cap) {
  buf[0] = '\0';
  if ((o->type == GS_OPT_INT || o->type == GS_OPT_REAL) && !(o->min == 0 && o->max == 0))
    snprintf(buf, cap, " (%.15g to %.15g)", o->min, o->max);
  else if (o->type == GS_OPT_BYTES)
    snprintf(buf, cap, " (a size such as 512M or 16G)");
  else if (o->type == GS_OPT_DURATION)
    snprintf(buf, cap, " (such as 90s, 30m, 2h or HH:MM:SS)");
  else if (o->type == GS_OPT_LIST)
    snprintf(buf, cap, " (at most %d)", GS_CLI_LIST_MAX);
}

/* A token given on the command line is in /proc/PID/cmdline for every local
 * user to read: keep a copy and blank the argument at once. */
static const char *take_secret(char *arg) {
  static char *copy; /* the process's one token, kept for as long as it runs */
  free(copy);
  copy = strdup(arg);
  if (!copy)
    return NULL;
  memset(arg, 'x', strlen(arg));
  fprintf(stderr, "gpusrv: warning: --token on the command line was visible to other users "
                  "until now; use GPUSRV_TOKEN or --token-file\n");
  return copy;
}

/* The --token-file's first line into the token's field, when the table
 * has both rows and no --token was given. */
static int read_token_file(const gs_cli_command *cmd, char *base, uint64_t given) {
  const gs_cli_option *token = NULL, *file = NULL;
  for (const gs_cli_option *o = cmd->options; o->name; o++) {
    if (strcmp(o->name, "token") == 0)
      token = o;
    else if (strcmp(o->name, "token-file") == 0)
      file = o;
  }
  if (!token || !file || !(given >> (file - cmd->options) & 1) ||
      (given >> (token - cmd->options) & 1))
    return GS_EXIT_OK;
  const char *path = *(const char **)(base + file->offset);
  static char text[512];
  long len = gs_read_text_file(path, text, sizeof text);
  text[len > 0 ? strcspn(text, "\r\n") : 0] = '\0';
  if (!text[0]) {
    gs_cli_error("%s: cannot read a token from %s: %s", cmd->name, path,
                 len < 0 ? gs_error_detail() : "its first line is empty");
    return GS_EXIT_FAILED;
  }
  *(const char **)(base + token->offset) = text;
  return GS_EXIT_OK;
}

/* Short options at argv[*i], "-f" or a cluster "-fq FIELDS" / "-qFIELDS":
 * flags until one that takes a value, which takes the rest or the next word. */
static int take_short(const gs_cli_command *cmd, int argc, char **argv, int *i, char *base,
                      uint64_t *given);
static int store_option(const gs_cli_command *cmd, const gs_cli_option *o, char *value,
                        char *base, uint64_t *given);

/* One option at argv[*i]: its row, its value, stored. */
static int take_option(const gs_cli_command *cmd, int argc, char **argv, int *i, char *base,
                       uint64_t *given) {
  char *a = argv[*i], *value = NULL, *eq = NULL;
  if (a[1] != '-')
    return take_short(cmd, argc, argv, i, base, given);
  eq = strchr(a, '=');
  const gs_cli_option *o =
      find_long(cmd->options, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
  if (eq)
    value = eq + 1;
  if (!o)
    return gs_cli_usage_error(cmd, "unknown option '%.*s'", eq ? (int)(eq - a) : (int)strlen(a),
                              a);
  if (o->type == GS_OPT_BOOL && eq)
    return gs_cli_usage_error(cmd, "--%s takes no value", o->name);
  if (o->type != GS_OPT_BOOL && !value) {
    if (*i + 1 >= argc)
      return gs_cli_usage_error(cmd, "option '%s' needs a value", a);
    value = argv[++*i];
  }
  return store_option(cmd, o, value, base, given);
}

static int take_short(const gs_cli_command *cmd, int argc, char **argv, int *i, char *base,
                      uint64_t *given) {
  for (char *c = argv[*i] + 1; *c; c++) {
    const gs_cli_option *o = find_short(cmd->options, *c);
    if (!o)
      return gs_cli_usage_error(cmd, "unknown option '-%c'", *c);
    char *value = NULL;
    if (o->type != GS_OPT_BOOL) {
      if (c[1])
        value = c + 1;
      else if (*i + 1 < argc)
        value = argv[++*i];
      else
        return gs_cli_usage_error(cmd, "option '-%c' needs a value", *c);
    }
    int rc = store_option(cmd, o, value, base, given);
    if (rc != GS_EXIT_OK || value)
      return rc;
  }
  return GS_EXIT_OK;
}

static int store_option(const gs_cli_command *cmd, const gs_cli_option *o, char *value,
                        char *base, uint64_t *given) {
  if (value && strcmp(o->name, "token") == 0 && !(value = (char *)take_secret(value))) {
    gs_cli_error("%s: out of memory", cmd->name);
    return GS_EXIT_FAILED;
  }
  if (!store(o, value, base)) {
    char bounds[64];
    describe_bounds(o, bounds, sizeof bounds);
    return gs_cli_usage_error(cmd, "bad value '%s' for --%s%s", value, o->name, bounds);
  }
  *given |= (uint64_t)1 << ((o - cmd->options) & 63);
  return GS_EXIT_OK;
}

int gs_cli_parse(const gs_cli_command *cmd, int argc, char **argv, void *opts, gs_cli_args *out) {
  *out = (gs_cli_args){0};
  for (int i = 1; i < argc; i++) {
    char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      if (!cmd->takes_command && i + 1 < argc)
        return gs_cli_usage_error(cmd, "unexpected '%s' after --", argv[i + 1]);
      out->after = argv + i + 1;
      out->n_after = argc - i - 1;
      break;
    }
    if (a[0] != '-' || a[1] == '\0') {
      if (out->n == GS_CLI_MAX_WORDS || (cmd->max_args >= 0 && out->n >= cmd->max_args))
        return gs_cli_usage_error(cmd, cmd->takes_command ? "unexpected '%s' (put the command "
                                                           "after --)" : "unexpected '%s'", a);
      out->words[out->n++] = a;
      continue;
    }
    int rc = take_option(cmd, argc, argv, &i, opts, &out->given);
    if (rc != GS_EXIT_OK)
      return rc;
  }
  if (out->n < cmd->min_args)
    return gs_cli_usage_error(cmd, "%s", cmd->min_args == 1 && cmd->max_args == 1
                                             ? "it takes one argument"
                                             : "an argument is missing");
  if (cmd->takes_command && out->n_after == 0)
    return gs_cli_usage_error(cmd, "no command to run (give it after --)");
  return read_token_file(cmd, opts, out->given);
}

bool gs_cli_given(const gs_cli_command *cmd, const gs_cli_args *args, const char *name) {
  const gs_cli_option *o = find_long(cmd->options, name, strlen(name));
  return o && (args->given >> (o - cmd->options) & 1);
}

void gs_cli_print_options(const gs_cli_option *table, FILE *out) {
  for (const gs_cli_option *o = table; o->name; o++) {
    char flag[64];
    int n = o->short_name ? snprintf(flag, sizeof flag, "-%c, ", o->short_name) : 0;
    snprintf(flag + n, sizeof flag - (size_t)n, "--%s%s%s", o->name, o->metavar ? " " : "",
             o->metavar ? o->metavar : "");
    fprintf(out, "  %-22s %s\n", flag, o->help);
  }
}

/* options.c - parsing a subcommand's flags from its table, and its help. */
#include "cli/options.h"

#include "cli/cli.h"

#include "base/error.h"
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
    snprintf(buf, cap, " (%g to %g)", o->min, o->max);
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
  char *copy = strdup(arg);
  if (!copy)
    return NULL;
  memset(arg, 'x', strlen(arg));
  fprintf(stderr, "gpusrv: warning: --token on the command line was visible to other users "
                  "until now; use GPUSRV_TOKEN or --token-file\n");
  return copy;
}

int gs_cli_parse(const gs_cli_command *cmd, int argc, char **argv, void *opts, bool allow_after,
                 gs_cli_args *out) {
  *out = (gs_cli_args){0};
  out->words = calloc((size_t)argc + 1, sizeof *out->words);
  if (!out->words) {
    gs_cli_error("%s: out of memory", cmd->name);
    return GS_EXIT_FAILED;
  }
  for (int i = 1; i < argc; i++) {
    char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      if (!allow_after && i + 1 < argc)
        return gs_cli_usage_error(cmd, "unexpected '%s' after --", argv[i + 1]);
      out->after = argv + i + 1;
      out->n_after = argc - i - 1;
      break;
    }
    if (a[0] != '-' || a[1] == '\0') {
      out->words[out->n++] = a;
      continue;
    }
    const gs_cli_option *o;
    char *value = NULL, *eq = NULL;
    if (a[1] == '-') {
      eq = strchr(a, '=');
      o = find_long(cmd->options, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
      if (eq)
        value = eq + 1;
    } else {
      o = a[2] == '\0' ? find_short(cmd->options, a[1]) : NULL;
    }
    if (!o)
      return gs_cli_usage_error(cmd, "unknown option '%s'", a);
    if (o->type == GS_OPT_BOOL && eq)
      return gs_cli_usage_error(cmd, "--%s takes no value", o->name);
    if (o->type != GS_OPT_BOOL && !value) {
      if (i + 1 >= argc)
        return gs_cli_usage_error(cmd, "option '%s' needs a value", a);
      value = argv[++i];
    }
    if (value && strcmp(o->name, "token") == 0 && !(value = (char *)take_secret(value))) {
      gs_cli_error("%s: out of memory", cmd->name);
      return GS_EXIT_FAILED;
    }
    if (!store(o, value, opts)) {
      char bounds[64];
      describe_bounds(o, bounds, sizeof bounds);
      return gs_cli_usage_error(cmd, "bad value '%s' for --%s%s", value, o->name, bounds);
    }
    out->given |= (uint64_t)1 << ((o - cmd->options) & 63);
  }
  return GS_EXIT_OK;
}

void gs_cli_args_free(gs_cli_args *args) {
  free(args->words);
  args->words = NULL;
}

bool gs_cli_daemon_token(const char *command, gs_cli_daemon_opts *o) {
  if (o->token || !o->token_file)
    return true;
  FILE *f = fopen(o->token_file, "r");
  static char token[512];
  if (!f || !fgets(token, sizeof token, f)) {
    gs_cli_error("%s: cannot read a token from %s: %s", command, o->token_file,
                 f ? "it is empty" : strerror(errno));
    if (f)
      fclose(f);
    return false;
  }
  fclose(f);
  token[strcspn(token, "\r\n")] = '\0';
  o->token = token;
  return true;
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

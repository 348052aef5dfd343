/* config.h - settings declared once, as a table of rows (name, type,
 * default, bounds, help), from which the config file, the command-line flags
 * and the --help text are all derived. */
#ifndef GS_BASE_CONFIG_H
#define GS_BASE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* STRING: char[GS_CONFIG_STR]; INT: int64_t; REAL: double; BYTES: int64_t
 * written as a size ("512M", "2GiB", a number of bytes); BOOL: bool, "true"
 * or "false" (a flag alone on the command line means true). */
typedef enum { GS_CFG_STRING, GS_CFG_INT, GS_CFG_REAL, GS_CFG_BYTES, GS_CFG_BOOL } gs_config_type;

typedef struct gs_config_option {
  const char *name;  /* "http-port": the flag --http-port and the file key */
  gs_config_type type;
  const char *dflt;  /* the default, as it would be written on the command line */
  double min, max;   /* bounds of the numeric types, inclusive */
  const char *help;
  size_t offset;     /* where the value lives in the settings struct */
} gs_config_option;

/* Strings are stored as fixed char arrays of this size in settings structs. */
#define GS_CONFIG_STR 512

/* Fills `settings` with every default. */
int gs_config_defaults(const gs_config_option *table, void *settings);
/* Reads a JSON object of name -> value from `path` into `settings`. An
 * unknown name, a wrong type or a value out of bounds is GS_EINVAL naming
 * the file, the setting and the bounds. */
int gs_config_load_file(const gs_config_option *table, void *settings, const char *path);
/* The option named `name`, or NULL. */
const gs_config_option *gs_config_find(const gs_config_option *table, const char *name);
/* Sets one option from its text. */
int gs_config_set(const gs_config_option *table, void *settings, const char *name,
                  const char *value);
/* The --help lines of every option. */
void gs_config_print_help(const gs_config_option *table, FILE *out);

#endif

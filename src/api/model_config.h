/* model_config.h - a served model's configuration (config.json, or
 * Triton's config.pbtxt) applied to its gs_served_model through one table
 * of fields that both formats share. */
#ifndef GS_API_MODEL_CONFIG_H
#define GS_API_MODEL_CONFIG_H

#include "api/repository.h"

#include <jansson.h>

/* Each reads its file and applies it; GS_EINVAL naming the file and the
 * field, with what it must be, when a value is out of bounds or the file
 * does not parse. Fields left out keep what `m` holds. */
int gs_model_config_read_json(gs_served_model *m, const char *path);
int gs_model_config_read_pbtxt(gs_served_model *m, const char *path);
/* The same from JSON text (a load request's "config"); `origin` names it
 * in messages. */
int gs_model_config_read_json_text(gs_served_model *m, const char *text, const char *origin);
/* Applies a configuration already in JSON form. */
int gs_model_config_apply(gs_served_model *m, json_t *root, const char *path);

#endif

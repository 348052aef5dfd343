/* cmd_infer.c - `gpusrv infer`: one inference request to a running daemon
 * through the client library, inputs from .npy files sent as binary
 * tensors; outputs written as .npy files, or printed as JSON. */
#include "api/kserve_data.h"
#include "cli/cli.h"
#include "gpusrv/client.h"
#include "engine/npy.h"

#include "base/error.h"
#include "base/fileutil.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_INPUTS 16
#define MAX_OUTPUTS 16

typedef struct infer_opts {
  gs_cli_list inputs;
  const char *outdir, *version;
  gs_cli_daemon_opts daemon;
} infer_opts;

static const gs_cli_option infer_options[] = {
    {"input", 'i', GS_OPT_LIST, offsetof(infer_opts, inputs), "NAME=FILE",
     "A .npy file for the model input NAME (one per input)", 0, 0},
    {"output", 'o', GS_OPT_STRING, offsetof(infer_opts, outdir), "DIR",
     "Where the outputs go (created if missing)", 0, 0},
    GS_CLI_OPT("version", GS_OPT_STRING, infer_opts, version, "V",
               "The model version (default: the newest ready one)"),
    GS_CLI_DAEMON_ROWS(infer_opts),
    GS_CLI_OPTIONS_END,
};

/* BYTES elements as the binary form has them, as JSON strings; NULL when
 * they do not add up or one is not UTF-8. */
static json_t *strings_of(const char *p, size_t len, int64_t count) {
  void *recs = NULL;
  char why[200];
  if (gs_kserve_strings_from_binary(p, len, count, &recs, "output", why, sizeof why) < 0)
    return NULL;
  json_t *a = gs_kserve_strings_json(recs, count);
  free(recs);
  return a;
}

static int infer_run(int argc, char **argv) {
  infer_opts opts = {0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_infer, argc, argv, &opts, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  const char *model = args.words[0], *outdir = opts.outdir, *version = opts.version;
  const char *const *specs = opts.inputs.items;
  int n = opts.inputs.n;
  if (n > MAX_INPUTS)
    return gs_cli_usage_error(&gs_cli_infer, "at most %d inputs", MAX_INPUTS);
  for (int i = 0; i < n; i++)
    if (!strchr(specs[i], '=') || specs[i][0] == '=')
      return gs_cli_usage_error(&gs_cli_infer, "-i wants NAME=FILE.npy, got '%s'", specs[i]);
  if (n == 0)
    return gs_cli_usage_error(&gs_cli_infer, "no input (-i NAME=FILE.npy)");

  int status = GS_EXIT_FAILED;
  gs_npy npys[MAX_INPUTS] = {{0}};
  gs_client_tensor in[MAX_INPUTS] = {{0}}, out[MAX_OUTPUTS] = {{0}};
  char in_names[MAX_INPUTS][256];
  int n_out = 0;
  char *meta_text = NULL;
  json_t *meta = NULL, *printed = NULL;
  gs_client *client = NULL;
  if (gs_client_open(opts.daemon.url, opts.daemon.token, &client) != GS_OK) {
    gs_cli_error("infer: %s", gs_client_last_error(NULL));
    return GS_EXIT_FAILED;
  }
  for (int i = 0; i < n; i++) {
    const char *eq = strchr(specs[i], '=');
    if (gs_npy_read(eq + 1, &npys[i]) < 0) {
      gs_cli_error("infer: %s", gs_error_detail());
      goto done;
    }
    snprintf(in_names[i], sizeof in_names[i], "%.*s", (int)(eq - specs[i]), specs[i]);
    in[i].name = in_names[i];
    snprintf(in[i].datatype, sizeof in[i].datatype, "%s", gs_kserve_dtype_name(npys[i].dtype));
    in[i].rank = npys[i].shape.rank;
    for (int d = 0; d < in[i].rank; d++)
      in[i].shape[d] = npys[i].shape.dims[d];
    in[i].data = npys[i].data;
    in[i].bytes = npys[i].bytes;
  }
  /* The model's outputs, by name, from its metadata. */
  if (gs_client_model_metadata(client, model, version, &meta_text) != GS_OK) {
    gs_cli_error("infer: %s", gs_client_last_error(client));
    goto done;
  }
  meta = json_loads(meta_text, 0, NULL);
  /* A .npy holds bfloat16 as its bits (<u2, read as UINT16): where the model
   * takes BF16 there, send it as such. */
  json_t *ins = json_object_get(meta, "inputs"), *mi;
  size_t mk;
  json_array_foreach(ins, mk, mi) {
    const char *name = json_string_value(json_object_get(mi, "name"));
    const char *dt = json_string_value(json_object_get(mi, "datatype"));
    for (int i = 0; name && dt && i < n; i++)
      if (!strcmp(in_names[i], name) && !strcmp(dt, "BF16") && !strcmp(in[i].datatype, "UINT16"))
        snprintf(in[i].datatype, sizeof in[i].datatype, "BF16");
  }
  json_t *outs = json_object_get(meta, "outputs"), *o;
  size_t k;
  json_array_foreach(outs, k, o) {
    if (n_out < MAX_OUTPUTS && json_is_string(json_object_get(o, "name")))
      out[n_out++].name = json_string_value(json_object_get(o, "name"));
  }
  if (gs_client_infer(client, model, version, in, n, out, n_out) != GS_OK) {
    gs_cli_error("infer: %s", gs_client_last_error(client));
    goto done;
  }
  if (outdir && gs_mkdir_p(outdir) < 0) {
    gs_cli_error("infer: cannot create %s: %s", outdir, strerror(errno));
    goto done;
  }
  printed = json_array();
  status = GS_EXIT_OK;
  for (int i = 0; i < n_out && status == GS_EXIT_OK; i++) {
    gs_dtype dt = gs_kserve_dtype_from_name(out[i].datatype);
    gs_shape s = {.rank = out[i].rank};
    for (int d = 0; d < s.rank; d++)
      s.dims[d] = out[i].shape[d];
    if (dt == GS_DT_INVALID || (dt != GS_DT_BYTES && (size_t)gs_shape_numel(&s) *
                                                         gs_dtype_size(dt) != out[i].bytes)) {
      gs_cli_error("infer: the daemon's answer describes output %s inconsistently", out[i].name);
      status = GS_EXIT_FAILED;
    } else if (outdir) {
      char file[1024], safe[256];
      gs_file_name_of(out[i].name, safe, sizeof safe);
      snprintf(file, sizeof file, "%s/%s.npy", outdir, safe);
      if (dt == GS_DT_BYTES || gs_npy_write(file, dt, &s, out[i].data) < 0) {
        gs_cli_error("infer: %s", dt == GS_DT_BYTES ? "BYTES outputs cannot be written as .npy; "
                                                      "leave out -o to print them"
                                                    : gs_error_detail());
        status = GS_EXIT_FAILED;
      }
    } else {
      json_t *shape = json_array();
      for (int d = 0; d < s.rank; d++)
        json_array_append_new(shape, json_integer(s.dims[d]));
      json_t *data = dt == GS_DT_BYTES ? strings_of(out[i].data, out[i].bytes, gs_shape_numel(&s))
                                       : gs_kserve_data_json(dt, out[i].data, gs_shape_numel(&s));
      if (!data) {
        gs_cli_error("infer: output %s holds %s, which JSON cannot show: write it with -o DIR",
                     out[i].name, dt == GS_DT_BYTES ? "bytes that are not UTF-8"
                                                    : "NaN or an infinity");
        json_decref(shape);
        status = GS_EXIT_FAILED;
        continue;
      }
      json_array_append_new(printed, json_pack("{s:s, s:s, s:o, s:o}", "name", out[i].name,
                                               "datatype", out[i].datatype, "shape", shape,
                                               "data", data));
    }
  }
  if (status == GS_EXIT_OK && !outdir) {
    json_dumpf(printed, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
  }
done:
  for (int i = 0; i < n; i++)
    free(npys[i].data);
  for (int i = 0; i < n_out; i++)
    free(out[i].data);
  json_decref(printed);
  json_decref(meta); /* after out[].name, which points into it, is done with */
  free(meta_text);
  gs_client_close(client);
  return status;
}

const gs_cli_command gs_cli_infer = {
    .name = "infer",
    .usage = "gpusrv infer MODEL -i NAME=FILE.npy [-i ...] [-o OUTDIR] [--url URL]",
    .about = "Sends one inference request (KServe v2, binary tensors) to a running `gpusrv serve`.\n"
             "With -o, each output is written to OUTDIR/<name>.npy; without, the outputs are\n"
             "printed as JSON.",
    .options = infer_options,
    .min_args = 1,
    .max_args = 1,
    .run = infer_run,
};

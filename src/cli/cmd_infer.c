/* cmd_infer.c - `gpusrv infer`: one inference request to a running daemon
 * through the client library, inputs from .npy files sent as binary
 * tensors; outputs written as .npy files, or printed as JSON. */
#include "api/kserve.h"
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

static const char infer_help[] =
    "Usage: gpusrv infer MODEL -i NAME=FILE.npy [-i ...] [-o OUTDIR] [--url URL] [--token T]\n"
    "\n"
    "Sends one inference request (KServe v2, binary tensors) to a running `gpusrv serve`.\n"
    "With -o, each output is written to OUTDIR/<name>.npy; without, the outputs are printed\n"
    "as JSON.\n"
    "\n"
    "Options:\n"
    "  -i, --input NAME=FILE   A .npy file for the model input NAME (one per input)\n"
    "  -o, --output DIR        Where the outputs go (created if missing)\n"
    "  --version V             The model version (default: the newest ready one)\n"
    "  --url URL               The daemon (default: GPUSRV_URL, else http://127.0.0.1:8000)\n"
    "  --token TOKEN           Bearer token (default: GPUSRV_TOKEN)\n";

#define MAX_INPUTS 16
#define MAX_OUTPUTS 16

/* BYTES elements as the binary form has them (a 4-byte little-endian
 * length, then the bytes) as JSON strings; NULL when one is not UTF-8. */
static json_t *strings_of(const char *p, size_t len) {
  json_t *a = json_array();
  for (size_t at = 0; a && at + 4 <= len;) {
    const unsigned char *b = (const unsigned char *)p + at;
    size_t n = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
    at += 4;
    json_t *s = n <= len - at ? json_stringn(p + at, n) : NULL;
    if (!s) {
      json_decref(a);
      return NULL;
    }
    json_array_append_new(a, s);
    at += n;
  }
  return a;
}

static int infer_run(int argc, char **argv) {
  const char *model = NULL, *outdir = NULL, *url = NULL, *token = NULL, *version = NULL;
  const char *specs[MAX_INPUTS];
  int n = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if ((!strcmp(a, "-i") || !strcmp(a, "--input")) && val) {
      if (n == MAX_INPUTS)
        return gs_cli_usage_error(&gs_cli_infer, "at most %d inputs", MAX_INPUTS);
      if (!strchr(val, '=') || val[0] == '=')
        return gs_cli_usage_error(&gs_cli_infer, "-i wants NAME=FILE.npy, got '%s'", val);
      specs[n++] = val;
      i++;
    } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && val) {
      outdir = val;
      i++;
    } else if (!strcmp(a, "--url") && val) {
      url = val;
      i++;
    } else if (!strcmp(a, "--token") && val) {
      token = val;
      i++;
    } else if (!strcmp(a, "--version") && val) {
      version = val;
      i++;
    } else if (a[0] == '-') {
      return gs_cli_usage_error(&gs_cli_infer, "unknown option '%s' (or it needs a value)", a);
    } else if (model) {
      return gs_cli_usage_error(&gs_cli_infer, "unexpected argument '%s'", a);
    } else {
      model = a;
    }
  }
  if (!model)
    return gs_cli_usage_error(&gs_cli_infer, "which model?");
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
  if (gs_client_open(url, token, &client) != GS_OK) {
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
      json_t *data = dt == GS_DT_BYTES ? strings_of(out[i].data, out[i].bytes)
                                       : gs_kserve_data_json(dt, out[i].data, gs_shape_numel(&s));
      json_array_append_new(printed, json_pack("{s:s, s:s, s:o, s:o}", "name", out[i].name,
                                               "datatype", out[i].datatype, "shape", shape,
                                               "data", data ? data : json_null()));
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
    .summary = "Send one inference request to a running daemon",
    .help = infer_help,
    .run = infer_run,
};

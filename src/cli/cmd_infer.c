/* cmd_infer.c - `gpusrv infer`: one inference request to a running daemon,
 * inputs from .npy files sent as binary tensors; outputs written as .npy
 * files, or printed as JSON. */
#include "api/kserve.h"
#include "cli/cli.h"
#include "cli/http.h"
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
  char *body = NULL, *header = NULL;
  gs_http_response r = {0};
  json_t *req = json_object(), *inputs = json_array(), *params = json_object();
  size_t data_bytes = 0;
  for (int i = 0; i < n; i++) {
    const char *eq = strchr(specs[i], '=');
    if (gs_npy_read(eq + 1, &npys[i]) < 0) {
      gs_cli_error("infer: %s", gs_error_detail());
      goto done;
    }
    json_t *in = json_object(), *shape = json_array(), *p = json_object();
    json_object_set_new(in, "name", json_stringn(specs[i], (size_t)(eq - specs[i])));
    for (int d = 0; d < npys[i].shape.rank; d++)
      json_array_append_new(shape, json_integer(npys[i].shape.dims[d]));
    json_object_set_new(in, "shape", shape);
    json_object_set_new(in, "datatype", json_string(gs_kserve_dtype_name(npys[i].dtype)));
    json_object_set_new(p, "binary_data_size", json_integer((json_int_t)npys[i].bytes));
    json_object_set_new(in, "parameters", p);
    json_array_append_new(inputs, in);
    data_bytes += npys[i].bytes;
  }
  json_object_set_new(req, "inputs", inputs);
  json_object_set_new(params, "binary_data_output", json_boolean(outdir != NULL));
  json_object_set_new(req, "parameters", params);
  header = json_dumps(req, JSON_COMPACT);
  size_t hl = header ? strlen(header) : 0;
  body = header ? malloc(hl + data_bytes + 1) : NULL;
  if (!body) {
    gs_cli_error("infer: out of memory");
    goto done;
  }
  memcpy(body, header, hl);
  for (int i = 0, at = (int)hl; i < n; at += (int)npys[i].bytes, i++)
    memcpy(body + at, npys[i].data, npys[i].bytes);
  char path[512];
  if (version)
    snprintf(path, sizeof path, "/v2/models/%s/versions/%s/infer", model, version);
  else
    snprintf(path, sizeof path, "/v2/models/%s/infer", model);
  if (gs_cli_http("POST", gs_cli_url(url), path, token, body, hl + data_bytes, hl, &r) < 0) {
    gs_cli_error("infer: %s", gs_error_detail());
    goto done;
  }
  char why[600];
  if (r.status != 200) {
    gs_cli_error("infer: %s", gs_cli_http_error(&r, why, sizeof why));
    goto done;
  }
  size_t json_len = r.header_len ? r.header_len : r.len;
  json_t *res = json_loadb(r.body, json_len, 0, NULL);
  json_t *outs = res ? json_object_get(res, "outputs") : NULL;
  if (!json_is_array(outs)) {
    gs_cli_error("infer: the daemon's answer has no outputs");
    json_decref(res);
    goto done;
  }
  if (!outdir) {
    json_dumpf(outs, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
    json_decref(res);
    status = GS_EXIT_OK;
    goto done;
  }
  if (gs_mkdir_p(outdir) < 0) {
    gs_cli_error("infer: cannot create %s: %s", outdir, strerror(errno));
    json_decref(res);
    goto done;
  }
  size_t at = json_len, k;
  json_t *o;
  status = GS_EXIT_OK;
  json_array_foreach(outs, k, o) {
    const char *name = json_string_value(json_object_get(o, "name"));
    gs_dtype dt = gs_kserve_dtype_from_name(json_string_value(json_object_get(o, "datatype")));
    json_t *shape = json_object_get(o, "shape");
    json_t *size = json_object_get(json_object_get(o, "parameters"), "binary_data_size");
    gs_shape s = {.rank = (int)json_array_size(shape)};
    for (int d = 0; d < s.rank && d < 8; d++)
      s.dims[d] = json_integer_value(json_array_get(shape, (size_t)d));
    size_t bytes = (size_t)json_integer_value(size);
    if (!name || dt == GS_DT_INVALID || s.rank > 8 || !size || at + bytes > r.len ||
        (size_t)gs_shape_numel(&s) * gs_dtype_size(dt) != bytes) {
      gs_cli_error("infer: the daemon's answer describes output %zu inconsistently", k);
      status = GS_EXIT_FAILED;
      break;
    }
    char file[1024], safe[256];
    gs_file_name_of(name, safe, sizeof safe);
    snprintf(file, sizeof file, "%s/%s.npy", outdir, safe);
    if (gs_npy_write(file, dt, &s, r.body + at) < 0) {
      gs_cli_error("infer: %s", gs_error_detail());
      status = GS_EXIT_FAILED;
      break;
    }
    at += bytes;
  }
  json_decref(res);
done:
  for (int i = 0; i < n; i++)
    free(npys[i].data);
  json_decref(req);
  free(header);
  free(body);
  free(r.body);
  return status;
}

const gs_cli_command gs_cli_infer = {
    .name = "infer",
    .summary = "Send one inference request to a running daemon",
    .help = infer_help,
    .run = infer_run,
};

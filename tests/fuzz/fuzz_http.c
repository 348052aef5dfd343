/* fuzz_http.c - libFuzzer over what the HTTP server parses of a request
 * (hardening): the URL and header values the routes read, inference bodies
 * in JSON, with the binary extension and raw, and the job API's job and
 * tenant bodies. libmicrohttpd has split the request line and headers
 * before any of this runs; what it hands over is what is fuzzed here.
 *
 * Input: byte 0 picks the parser; the rest is its input:
 *   0  URL, Inference-Header-Content-Length and Authorization values, split at '\n'
 *   1  inference JSON for a batching model; 2 the same model without batching
 *   3  bytes 1-2 (little-endian) are Inference-Header-Content-Length, then JSON + binary
 *   4  raw binary input (Inference-Header-Content-Length: 0) of a one-input model
 *   5  a job's body; 6 a tenant's body
 * The served models come from tests/fuzz/http_model*.onnx (make_seeds.py):
 * identities of FP32, INT64, BYTES, FP16, BOOL and UINT8 inputs, and one Relu. */
#include "api/http_parse.h"
#include "api/jobs_api.h"
#include "api/kserve.h"
#include "api/repository.h"
#include "engine/engine.h"
#include "engine/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef GS_FUZZ_HTTP_DIR
#error "GS_FUZZ_HTTP_DIR names the directory of http_model.onnx"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gs_served_model batched, unbatched, raw;
static gs_served_version io_version, raw_version;

static gs_model *load(const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", GS_FUZZ_HTTP_DIR, file);
  gs_model *m = NULL;
  if (gs_model_load(path, &m) < 0) {
    fprintf(stderr, "fuzz_http: cannot load %s\n", path);
    abort();
  }
  return m;
}

static void serve(gs_served_model *m, const char *name, int64_t max_batch,
                  gs_served_version *v) {
  snprintf(m->name, sizeof m->name, "%s", name);
  m->max_batch_size = max_batch;
  m->priority_levels = 2;
  m->n_versions = 1;
  m->versions[0] = *v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (gs_hal_init() < 0 || gs_engine_init() < 0)
    abort();
  io_version = (gs_served_version){.number = 1, .model = load("http_model.onnx")};
  raw_version = (gs_served_version){.number = 1, .model = load("http_model_raw.onnx")};
  serve(&batched, "io", 8, &io_version);
  serve(&unbatched, "io0", 0, &io_version);
  serve(&raw, "raw", 8, &raw_version);
  return 0;
}

/* The three header-ish values, each NUL-terminated. */
static void fuzz_url_and_headers(const char *text) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", text);
  char *hl = strchr(buf, '\n'), *auth = NULL;
  if (hl) {
    *hl++ = '\0';
    if ((auth = strchr(hl, '\n')))
      *auth++ = '\0';
  }
  char name[128], version[32], action[32];
  /* A URL it splits is rebuilt by its parts: nothing lost, nothing cut. */
  if (gs_http_model_url(buf, name, sizeof name, version, sizeof version, action, sizeof action)) {
    char again[4096];
    snprintf(again, sizeof again, "/v2/models/%s%s%s%s%s", name, version[0] ? "/versions/" : "",
             version, action[0] ? "/" : "", action);
    size_t n_again = strlen(again);
    bool same = strcmp(again, buf) == 0 || (!action[0] && strncmp(again, buf, n_again) == 0 &&
                                            strcmp(buf + n_again, "/") == 0);
    if (!name[0] || strchr(name, '/') || strchr(action, '/') || !same)
      abort();
  }
  /* A length it takes is all digits and the number they spell. */
  size_t n;
  if (hl && gs_http_header_length(hl, &n)) {
    size_t want = 0;
    for (const char *p = hl; *p; p++)
      if (*p < '0' || *p > '9' || want > ((size_t)-1 - (size_t)(*p - '0')) / 10)
        abort();
      else
        want = want * 10 + (size_t)(*p - '0');
    if (want != n)
      abort();
  }
  /* A token comes only after "Bearer " (in any case), and is the rest. */
  const char *token = gs_http_bearer_token(auth);
  if (token && (strncasecmp(auth, "bearer ", 7) != 0 || strcmp(token, auth + 7) != 0))
    abort();
  if (!token && auth && strncasecmp(auth, "bearer ", 7) == 0)
    abort();
}

static void fuzz_infer(gs_served_model *m, const char *body, size_t len, size_t header_len,
                       bool raw_form) {
  gs_infer_request r;
  gs_http_reply err = {0};
  memset(&r, 0, sizeof r);
  gs_served_version *v = &m->versions[0];
  int rc = raw_form ? gs_kserve_parse_raw(m, v, body, len, &r, &err)
                    : gs_kserve_parse(m, v, body, len, header_len, &r, &err);
  if (rc < 0 && (err.status < 400 || err.status > 599 || !err.body))
    abort(); /* every refusal is a client or server error with a message */
  if (getenv("FUZZ_HTTP_VERBOSE")) /* to see what a seed reaches */
    fprintf(stderr, "fuzz_http: %s\n", rc < 0 ? err.body : "parsed");
  gs_http_reply_free(&err);
  if (rc == 0)
    gs_infer_request_clear(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  /* The body in a buffer of its own, exactly its size: reads past it are
   * caught by AddressSanitizer. */
  size_t len = size - 1;
  char *body = malloc(len ? len : 1);
  memcpy(body, data + 1, len);
  gs_http_reply err = {0};
  switch (data[0] % 7) {
  case 0: {
    char *text = strndup(body, len);
    fuzz_url_and_headers(text);
    free(text);
    break;
  }
  case 1: fuzz_infer(&batched, body, len, 0, false); break;
  case 2: fuzz_infer(&unbatched, body, len, 0, false); break;
  case 3:
    if (len >= 2) {
      size_t header_len = (size_t)(uint8_t)body[0] | (size_t)(uint8_t)body[1] << 8;
      fuzz_infer(&batched, body + 2, len - 2, header_len, false);
    }
    break;
  case 4: fuzz_infer(&raw, body, len, 0, true); break;
  case 5: {
    gs_job_body b;
    if (gs_job_body_parse(body, len, &b, &err) == 0) {
      if (!b.req.argv || !b.req.argv[0])
        abort(); /* an accepted job has a command */
      gs_job_body_free(&b);
    }
    break;
  }
  case 6: {
    gs_tenant t;
    if (gs_tenant_body_parse(body, len, &t, &err) == 0 && (!t.name[0] || !t.unix_user[0]))
      abort(); /* an accepted tenant has a name and a user */
    break;
  }
  }
  gs_http_reply_free(&err);
  free(body);
  return 0;
}

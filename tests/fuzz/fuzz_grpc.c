/* fuzz_grpc.c - libFuzzer over what the gRPC endpoint makes of a client's
 * ModelInferRequest: protobuf-c's unpacking (through a budgeted allocator
 * like the server's), then gs_grpc_infer_parse against the models
 * fuzz_http serves (tests/fuzz/http_model*.onnx: FP32, INT64, BYTES, FP16,
 * BOOL and UINT8 inputs).
 *
 * Input: byte 0 picks the model (even: batching, max 8 rows; odd: none);
 * the rest is the message's bytes. */
#include "api/grpc_call.h"
#include "engine/engine.h"
#include "engine/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GS_FUZZ_HTTP_DIR
#error "GS_FUZZ_HTTP_DIR names the directory of http_model.onnx"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gs_served_model batched, unbatched;
static gs_served_version version;

/* The server's allocator in spirit: a budget for what one message may take
 * once unpacked (here 64 MiB), so that a small message that asks for a huge
 * structure is refused, not allocated. */
static size_t in_use;
#define BUDGET ((size_t)64 << 20)

static void *budget_alloc(void *data, size_t size) {
  (void)data;
  if (size > BUDGET - in_use)
    return NULL;
  size_t *p = malloc(size + 16);
  if (!p)
    return NULL;
  *p = size;
  in_use += size;
  return (char *)p + 16;
}

static void budget_free(void *data, void *ptr) {
  (void)data;
  if (!ptr)
    return;
  size_t *p = (size_t *)((char *)ptr - 16);
  in_use -= *p;
  free(p);
}

static ProtobufCAllocator allocator = {budget_alloc, budget_free, NULL};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (gs_hal_init() < 0 || gs_engine_init() < 0)
    abort();
  char path[1024];
  snprintf(path, sizeof path, "%s/http_model.onnx", GS_FUZZ_HTTP_DIR);
  version.number = 1;
  if (gs_model_load(path, &version.model) < 0) {
    fprintf(stderr, "fuzz_grpc: cannot load %s\n", path);
    abort();
  }
  gs_served_model *models[2] = {&batched, &unbatched};
  for (int i = 0; i < 2; i++) {
    snprintf(models[i]->name, sizeof models[i]->name, "io");
    models[i]->max_batch_size = i == 0 ? 8 : 0;
    models[i]->priority_levels = 2;
    models[i]->n_versions = 1;
    models[i]->versions[0] = version;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  /* The message in a buffer of its own, exactly its size. */
  size_t len = size - 1;
  uint8_t *bytes = malloc(len ? len : 1);
  memcpy(bytes, data + 1, len);
  Inference__ModelInferRequest *q = inference__model_infer_request__unpack(&allocator, len, bytes);
  if (q) {
    gs_infer_request r;
    memset(&r, 0, sizeof r);
    r.model = data[0] % 2 ? &unbatched : &batched;
    r.version = &r.model->versions[0];
    char why[600] = "";
    int status = gs_grpc_infer_parse(q, len, &r, why, sizeof why);
    if (status != 0 && (status < 400 || status > 599 || !why[0]))
      abort(); /* every refusal is a client or server error with a reason */
    if (status == 0) {
      const gs_model *m = r.version->model;
      for (int i = 0; i < m->n_inputs; i++)
        if (!r.inputs[i] || r.shapes[i].rank != m->inputs[i].rank)
          abort(); /* an accepted request has every input, of its rank */
    }
    if (getenv("FUZZ_GRPC_VERBOSE"))
      fprintf(stderr, "fuzz_grpc: %s\n", status ? why : "parsed");
    gs_infer_request_clear(&r);
    inference__model_infer_request__free_unpacked(q, &allocator);
  }
  if (in_use != 0)
    abort(); /* everything unpacked was freed */
  free(bytes);
  return 0;
}

/* fuzz_onnx.c - libFuzzer target for the ONNX decoder and the model checks:
 * any bytes must give a model or a clean error, never a crash, a leak or a
 * huge allocation. Run by ctest for a bounded time in the sanitizer build. */
#include "engine/model.h"
#include "engine/npy.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gs_model *m = NULL;
  if (gs_model_load_bytes(data, size, NULL, &m) == 0)
    gs_model_free(m);
  /* The same bytes through the unchecked loader, as `model inspect` does. */
  if (gs_model_load_bytes_ex(data, size, NULL, false, &m) == 0) {
    gs_model_check_support(m);
    gs_model_free(m);
  }
  gs_npy npy;
  if (gs_npy_parse(data, size, &npy) == 0)
    free(npy.data);
  return 0;
}

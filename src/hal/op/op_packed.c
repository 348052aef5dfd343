/* op_packed.c - B into the packed layout of op_packed.h. */
#include "hal/op/op_packed.h"

void gs_pack_b(const float *b, bool trans_b, int64_t k, int64_t n, float *packed) {
  int64_t panels = (n + GS_PACKED_PANEL - 1) / GS_PACKED_PANEL;
  for (int64_t q = 0; q < panels; q++)
    for (int64_t p = 0; p < k; p++) {
      float *row = packed + (q * k + p) * GS_PACKED_PANEL;
      for (int64_t j = 0; j < GS_PACKED_PANEL; j++) {
        int64_t col = q * GS_PACKED_PANEL + j;
        row[j] = col >= n ? 0.0f : trans_b ? b[col * k + p] : b[p * n + col];
      }
    }
}

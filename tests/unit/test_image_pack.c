/* test_image_pack.c - images packed for a device's resize (image_pack.h),
 * run through the CPU device's kernel of GS_IMAGE_TAPS_OP: every row equals
 * the CPU's own recipe (gs_prep_image) byte for byte, for each filter, for
 * shrinking, enlarging, one edge left as it is, crops with and without a
 * resize. Images the passes do not take are counted: a padded crop, pixels
 * over the staging; a geometry refused is a zero row with the reason. The
 * sanitizer build runs it too, over the staging arithmetic. */
#include "harness.h"

#include "engine/image_pack.h"
#include "hal/hal.h"

#include <stdlib.h>
#include <string.h>

enum { BATCH = 3 };

static void setup(void) { CHECK(gs_hal_init() == 0); }
static void teardown(void) { gs_hal_shutdown(); }

/* Smooth gradients and noise, as a photo; the whole image held. */
static gs_image photo(int w, int h, unsigned seed) {
  gs_image img = {.width = w, .height = h, .w = w, .h = h, .stride = (size_t)w * 3};
  img.rgb = malloc(img.stride * (size_t)h);
  CHECK(img.rgb != NULL);
  srand(seed);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        int v = (c == 0 ? x * 255 / w : c == 1 ? y * 255 / h : (x + y) * 128 / (w + h)) +
                rand() % 49 - 24;
        v = v < 0 ? 0 : v > 255 ? 255 : v;
        img.rgb[(size_t)y * img.stride + (size_t)x * 3 + c] = (uint8_t)v;
      }
  return img;
}

typedef struct run {
  gs_image_pack *pk;
  gs_device_t *cpu;
  gs_stream_t *stream;
  gs_buffer_t *staged, *mid, *rows;
  gs_prep prep;
  int out_h, out_w;
} run;

static void run_open(run *r, const char *spec, gs_image_filter filter, int out_h, int out_w) {
  memset(r, 0, sizeof *r);
  gs_prep_defaults(&r->prep);
  CHECK_OK(gs_prep_parse(spec, &r->prep));
  r->prep.interpolation = filter;
  r->out_h = out_h;
  r->out_w = out_w;
  size_t staging, mid;
  CHECK_OK(gs_image_pack_create(&r->prep, BATCH, out_h, out_w, &r->pk, &staging, &mid));
  r->cpu = gs_hal_device(0);
  CHECK(r->cpu && gs_device_get_info(r->cpu)->type == GS_DEVICE_CPU);
  gs_pool_t *pool = gs_device_pool(r->cpu, GS_MEM_DEVICE);
  CHECK_OK(gs_pool_alloc(pool, staging, NULL, &r->staged));
  CHECK_OK(gs_pool_alloc(pool, mid, NULL, &r->mid));
  CHECK_OK(gs_pool_alloc(pool, (size_t)BATCH * out_h * out_w * 3, NULL, &r->rows));
  CHECK_OK(gs_stream_create(r->cpu, &r->stream));
}

static void run_close(run *r) {
  gs_stream_destroy(r->stream);
  gs_buffer_free(r->staged, NULL);
  gs_buffer_free(r->mid, NULL);
  gs_buffer_free(r->rows, NULL);
  gs_image_pack_free(r->pk);
}

/* Packs up to BATCH images, runs both passes, and compares each row with
 * the CPU's recipe; returns how many went to the passes. */
static int pack_and_compare(run *r, const gs_image *imgs, int n) {
  gs_image_pack_begin(r->pk, gs_buffer_host_ptr(r->staged));
  for (int i = 0; i < n; i++)
    CHECK_OK(gs_image_pack_image(r->pk, &imgs[i]));
  CHECK(gs_image_pack_used(r->pk) > 0);
  CHECK_OK(gs_image_pack_launch(r->pk, r->stream, r->staged, r->mid, r->rows));
  CHECK_OK(gs_stream_synchronize(r->stream));
  size_t row_bytes = (size_t)r->out_h * r->out_w * 3;
  uint8_t *want = malloc(row_bytes);
  const uint8_t *got = gs_buffer_host_ptr(r->rows);
  gs_prep geometry = r->prep;
  gs_prep_geometry_only(&geometry);
  for (int i = 0; i < n; i++) {
    CHECK_OK(gs_prep_image(&geometry, &imgs[i], r->out_h, r->out_w, false, GS_DT_UINT8, want));
    CHECK_MSG(memcmp(got + (size_t)i * row_bytes, want, row_bytes) == 0,
              "row %d (%dx%d) differs from the CPU's", i, imgs[i].width, imgs[i].height);
  }
  free(want);
  return gs_image_pack_on_device(r->pk);
}

static void every_filter(const char *spec, int out_h, int out_w, const int sizes[][2], int n,
                         const int expect_there[]) {
  static const gs_image_filter filters[] = {GS_FILTER_BILINEAR, GS_FILTER_BICUBIC,
                                            GS_FILTER_NEAREST};
  gs_image imgs[BATCH * 4];
  for (int i = 0; i < n; i++)
    imgs[i] = photo(sizes[i][0], sizes[i][1], (unsigned)i + 7);
  for (int f = 0; f < 3; f++) {
    run r;
    run_open(&r, spec, filters[f], out_h, out_w);
    for (int at = 0, b = 0; at < n; at += BATCH, b++) {
      int there = pack_and_compare(&r, imgs + at, n - at < BATCH ? n - at : BATCH);
      CHECK_MSG(there == expect_there[b], "%s, filter %d, batch %d: %d of its images resized "
                "by the passes, not %d", spec, f, b, there, expect_there[b]);
    }
    run_close(&r);
  }
  for (int i = 0; i < n; i++)
    free(imgs[i].rgb);
}

static void test_resize_and_crop_equal_the_cpu_s(void) {
  /* 2000x1500 reads 1750x1312 pixels, over the 3 MiB a batch of three has:
   * the CPU resizes it */
  static const int sizes[][2] = {{500, 375}, {375, 500}, {2000, 1500}, {60, 40},
                                 {257, 256}, {256, 900}, {224, 224}};
  static const int there[] = {2, 3, 1};
  every_filter("resize=256,center_crop=224", 224, 224, sizes, 7, there);
}

static void test_a_crop_alone_and_a_fixed_size(void) {
  static const int sizes[][2] = {{300, 250}, {100, 80}, {224, 224}, {2000, 1500}};
  static const int crop_there[] = {2, 1}; /* 100x80 is padded: the CPU's */
  every_filter("center_crop=224", 224, 224, sizes, 4, crop_there);
  /* resize=HxW: 200x150 left as it is, then one edge left each way */
  static const int fixed_there[] = {3, 1};
  static const int fixed[][2] = {{200, 150}, {640, 150}, {200, 700}, {800, 600}};
  every_filter("resize=150x200", 150, 200, fixed, 4, fixed_there);
}

static void test_a_refused_geometry_is_a_zero_row(void) {
  run r;
  run_open(&r, "resize=256,center_crop=224", GS_FILTER_BILINEAR, 224, 224);
  gs_image thin = photo(1, 700, 3); /* its long side would be 179,200 */
  gs_image_pack_begin(r.pk, gs_buffer_host_ptr(r.staged));
  CHECK(gs_image_pack_image(r.pk, &thin) == GS_EINVAL);
  CHECK(strstr(gs_error_detail(), "over 65536 pixels a side") != NULL);
  gs_image_pack_zeros(r.pk);
  gs_image_pack_zeros(r.pk);
  gs_image_pack_zeros(r.pk); /* a fourth: the pack is full, nothing written */
  CHECK(gs_image_pack_image(r.pk, &thin) == GS_EINVAL);
  CHECK(strstr(gs_error_detail(), "is full") != NULL);
  uint8_t *rows = gs_buffer_host_ptr(r.rows);
  memset(rows, 0x5a, (size_t)BATCH * 224 * 224 * 3);
  CHECK_OK(gs_image_pack_launch(r.pk, r.stream, r.staged, r.mid, r.rows));
  CHECK_OK(gs_stream_synchronize(r.stream));
  for (size_t i = 0; i < (size_t)BATCH * 224 * 224 * 3; i++)
    CHECK_MSG(rows[i] == 0, "byte %zu is %d", i, rows[i]);
  CHECK(gs_image_pack_on_device(r.pk) == 0);
  free(thin.rgb);
  run_close(&r);
}

static const gs_test tests[] = {
    {"resize_and_crop_equal_the_cpu_s", test_resize_and_crop_equal_the_cpu_s},
    {"a_crop_alone_and_a_fixed_size", test_a_crop_alone_and_a_fixed_size},
    {"a_refused_geometry_is_a_zero_row", test_a_refused_geometry_is_a_zero_row},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {"image_pack", tests, setup, teardown, 120};
  return gs_test_run(&suite, argc, argv);
}

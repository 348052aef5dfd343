/* image_decode.c - JPEG (libjpeg-turbo) and PNG (libpng) to 8-bit RGB
 * (image.h). Both libraries report errors by longjmp; each decoder keeps
 * what it allocates where the jump can find it. */
#include "engine/image.h"

#include "base/error.h"

#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <jerror.h> /* the warnings' codes */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

void gs_image_free(gs_image *img) {
  if (img) {
    free(img->rgb);
    img->rgb = NULL;
  }
}

static int size_checked(const char *format, long long w, long long h, int64_t max_pixels) {
  if (w <= 0 || h <= 0)
    return gs_error(GS_EINVAL, "a %s of %lldx%lld pixels", format, w, h);
  if (w * h > max_pixels)
    return gs_error(GS_EINVAL, "a %s of %lldx%lld pixels, over the limit of %lld (a "
                               "decompression bomb?)", format, w, h, (long long)max_pixels);
  return GS_OK;
}

/* ---- JPEG ------------------------------------------------------------------------------ */

typedef struct jpeg_failure {
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
} jpeg_failure;

static void jpeg_fail(j_common_ptr c) {
  jpeg_failure *f = (jpeg_failure *)c->err;
  c->err->format_message(c, f->message);
  longjmp(f->jump, 1);
}

/* Level -1 is a warning about the data (a file cut short, a bad Huffman
 * code): libjpeg would fill the rest with grey and go on; such an image is
 * refused, as Pillow refuses a truncated one. Warnings about the file's
 * wrapping, common in cameras' files, leave the pixels whole and pass.
 * Trace messages are ignored. */
static void jpeg_message(j_common_ptr c, int level) {
  int code = c->err->msg_code;
  if (level < 0 && code != JWRN_EXTRANEOUS_DATA && code != JWRN_JFIF_MAJOR &&
      code != JWRN_ADOBE_XFORM && code != JWRN_BOGUS_ICC)
    jpeg_fail(c);
}

/* A progressive JPEG of thousands of scans costs minutes to decode (as
 * djpeg -maxscans guards against): past this many, refused. */
#define JPEG_MAX_SCANS 256

static void jpeg_scan_limit(j_common_ptr c) {
  j_decompress_ptr d = (j_decompress_ptr)c;
  if (d->is_decompressor && d->input_scan_number > JPEG_MAX_SCANS) {
    jpeg_failure *f = (jpeg_failure *)c->err;
    snprintf(f->message, sizeof f->message, "over %d progressive scans", JPEG_MAX_SCANS);
    longjmp(f->jump, 1);
  }
}

/* The rows asked for, and only the blocks of the columns asked for (libjpeg-
 * turbo's crop widens them to whole blocks); the rows above and below are
 * entropy-decoded, which finds a damaged file, but not transformed. */
static void jpeg_read_part(struct jpeg_decompress_struct *cinfo, const int box[4],
                           uint8_t *rgb, size_t stride) {
  jpeg_skip_scanlines(cinfo, (JDIMENSION)box[1]);
  while (cinfo->output_scanline < (JDIMENSION)box[3]) {
    JSAMPROW row = rgb + (size_t)(cinfo->output_scanline - (JDIMENSION)box[1]) * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_skip_scanlines(cinfo, cinfo->output_height - cinfo->output_scanline);
}

/* The box asked for, within the image, widened by a margin: where a crop
 * cuts a block's neighbours away, upsampled chroma at the cut may differ
 * from a whole decode; 16 pixels keep that out of what is read. */
static void jpeg_box(int width, int height, gs_image_need_fn *need, void *ctx, int box[4]) {
  enum { MARGIN = 16 };
  box[0] = 0, box[1] = 0, box[2] = width, box[3] = height;
  if (!need)
    return;
  need(width, height, ctx, box);
  box[0] = box[0] - MARGIN < 0 ? 0 : box[0] - MARGIN;
  box[1] = box[1] - MARGIN < 0 ? 0 : box[1] - MARGIN;
  box[2] = box[2] + MARGIN > width ? width : box[2] + MARGIN;
  box[3] = box[3] + MARGIN > height ? height : box[3] + MARGIN;
  if (box[2] <= box[0] || box[3] <= box[1]) { /* nothing: the whole, rather than none */
    box[0] = 0, box[1] = 0, box[2] = width, box[3] = height;
  }
}

static int decode_jpeg(const void *data, size_t size, int64_t max_pixels, gs_image_need_fn *need,
                       void *need_ctx, gs_image *out) {
  struct jpeg_decompress_struct cinfo;
  jpeg_failure failure;
  uint8_t *volatile rgb = NULL;
  cinfo.err = jpeg_std_error(&failure.mgr);
  failure.mgr.error_exit = jpeg_fail;
  failure.mgr.emit_message = jpeg_message;
  if (setjmp(failure.jump)) {
    jpeg_destroy_decompress(&cinfo);
    free(rgb);
    return gs_error(GS_EINVAL, "not a readable JPEG: %s", failure.message);
  }
  jpeg_create_decompress(&cinfo);
  struct jpeg_progress_mgr progress = {.progress_monitor = jpeg_scan_limit};
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, (unsigned long)size);
  jpeg_read_header(&cinfo, TRUE);
  int rc = GS_OK;
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK)
    rc = gs_error(GS_EINVAL, "a CMYK JPEG: not supported, convert it to RGB first");
  else
    rc = size_checked("JPEG", cinfo.image_width, cinfo.image_height, max_pixels);
  if (rc == 0) {
    cinfo.out_color_space = JCS_RGB; /* greyscale too: each grey value three times */
    int width = (int)cinfo.image_width, height = (int)cinfo.image_height, box[4];
    jpeg_box(width, height, need, need_ctx, box);
    jpeg_start_decompress(&cinfo);
    JDIMENSION x0 = (JDIMENSION)box[0], w = (JDIMENSION)(box[2] - box[0]);
    if (w < cinfo.output_width)
      jpeg_crop_scanline(&cinfo, &x0, &w);
    size_t stride = (size_t)cinfo.output_width * 3;
    if (!(rgb = malloc(stride * (size_t)(box[3] - box[1]))))
      rc = gs_error(GS_ENOMEM, "out of memory for a %dx%d image", width, height);
    if (rc == 0) {
      jpeg_read_part(&cinfo, box, rgb, stride);
      jpeg_finish_decompress(&cinfo);
      *out = (gs_image){.width = width, .height = height, .x0 = (int)x0, .y0 = box[1],
                        .w = (int)cinfo.output_width, .h = box[3] - box[1], .stride = stride,
                        .rgb = rgb};
      rgb = NULL;
    }
  }
  jpeg_destroy_decompress(&cinfo);
  free(rgb);
  return rc;
}

/* ---- PNG ------------------------------------------------------------------------------- */

typedef struct png_source {
  const uint8_t *data;
  size_t size, at;
  char message[200];
} png_source;

static void png_read_memory(png_structp png, png_bytep dst, size_t n) {
  png_source *s = png_get_io_ptr(png);
  if (n > s->size - s->at)
    png_error(png, "the file ends early");
  memcpy(dst, s->data + s->at, n);
  s->at += n;
}

static void png_fail(png_structp png, png_const_charp message) {
  png_source *s = png_get_error_ptr(png);
  snprintf(s->message, sizeof s->message, "%s", message);
  png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp message) {
  (void)png; /* an ICC profile's complaint and the like: the pixels are fine */
  (void)message;
}

/* PNG rows come whole (no gain in leaving some out): `need` is not asked.
 * 8-bit RGB whatever the file's type: palette and grey expanded, alpha and
 * the high byte's partner dropped. */
static void png_ask_rgb8(png_structp png, png_infop info) {
  int depth = png_get_bit_depth(png, info), type = png_get_color_type(png, info);
  if (depth == 16)
    png_set_strip_16(png);
  if (type == PNG_COLOR_TYPE_PALETTE)
    png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
    png_set_expand_gray_1_2_4_to_8(png);
  /* an alpha channel, or the one a palette's tRNS chunk becomes */
  if ((type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
    png_set_strip_alpha(png);
  if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA)
    png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

static int decode_png(const void *data, size_t size, int64_t max_pixels, gs_image *out) {
  png_source src = {.data = data, .size = size, .message = "unknown error"};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  uint8_t *volatile rgb = NULL;
  png_bytep *volatile rows = NULL;
  if (!info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return gs_error(GS_ENOMEM, "out of memory for a PNG decoder");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    free(rgb);
    free(rows);
    return gs_error(GS_EINVAL, "not a readable PNG: %s", src.message);
  }
  png_set_read_fn(png, &src, png_read_memory);
  png_read_info(png, info);
  uint32_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  int rc = size_checked("PNG", w, h, max_pixels);
  if (rc == 0) {
    png_ask_rgb8(png, info);
    size_t stride = (size_t)w * 3;
    if (png_get_rowbytes(png, info) != stride)
      rc = gs_error(GS_EINVAL, "a PNG whose rows libpng would not make RGB");
    else if (!(rgb = malloc(stride * h)) || !(rows = malloc(h * sizeof *rows)))
      rc = gs_error(GS_ENOMEM, "out of memory for a %ux%u image", w, h);
  }
  if (rc == 0) {
    for (uint32_t y = 0; y < h; y++)
      rows[y] = rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    *out = (gs_image){.width = (int)w, .height = (int)h, .w = (int)w, .h = (int)h,
                      .stride = (size_t)w * 3, .rgb = rgb};
    rgb = NULL;
  }
  png_destroy_read_struct(&png, &info, NULL);
  free(rgb);
  free(rows);
  return rc;
}

int gs_image_decode(const void *data, size_t size, int64_t max_pixels, gs_image_need_fn *need,
                    void *need_ctx, gs_image *out) {
  const uint8_t *b = data;
  memset(out, 0, sizeof *out);
  if (size >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
    return decode_jpeg(data, size, max_pixels, need, need_ctx, out);
  if (size >= 8 && png_sig_cmp(b, 0, 8) == 0)
    return decode_png(data, size, max_pixels, out);
  return gs_error(GS_EINVAL, size == 0 ? "an empty file" : "neither a JPEG nor a PNG");
}

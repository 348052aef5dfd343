/* image_prep.c - preprocessing recipes (image.h): the spec's keys, declared
 * in one table, and an image made into a model's input row the way
 * torchvision's Resize, CenterCrop, ToTensor and Normalize make it from a
 * PIL image. */
#include "engine/image.h"

#include "base/error.h"
#include "hal/cpu/ops/kernels.h" /* gs_st, GS_VECTOR_CLONES */

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gs_prep_defaults(gs_prep *p) {
  *p = (gs_prep){.scale = 1, .mean = {0, 0, 0}, .std = {1, 1, 1}, .n_mean = 1, .n_std = 1,
                 .interpolation = GS_FILTER_BILINEAR, .layout = GS_LAYOUT_AUTO};
}

void gs_prep_geometry_only(gs_prep *p) {
  p->scale = 1;
  p->n_mean = p->n_std = 1;
  p->mean[0] = 0;
  p->std[0] = 1;
  p->layout = GS_LAYOUT_NHWC;
}

bool gs_prep_has_geometry(const gs_prep *p) {
  return p->resize_short || p->resize_h || p->crop_h;
}

/* ---- the spec's values ------------------------------------------------------------------- */

/* A finite number, or a fraction of two ("1/255"). */
static int parse_number(const char *text, size_t n, double *out) {
  char buf[64];
  if (n == 0 || n >= sizeof buf)
    return GS_EINVAL;
  memcpy(buf, text, n);
  buf[n] = '\0';
  char *end;
  double num = strtod(buf, &end), den = 1;
  if (end == buf)
    return GS_EINVAL;
  if (*end == '/') {
    char *start = end + 1;
    den = strtod(start, &end);
    if (end == start || den == 0)
      return GS_EINVAL;
  }
  if (*end)
    return GS_EINVAL;
  *out = num / den;
  return isfinite(*out) ? GS_OK : GS_EINVAL;
}

/* N, or HxW: whole numbers from 1 to 65536. */
static int parse_size(const char *text, size_t n, int *h, int *w) {
  char buf[32];
  if (n == 0 || n >= sizeof buf)
    return GS_EINVAL;
  memcpy(buf, text, n);
  buf[n] = '\0';
  char *end;
  long a = strtol(buf, &end, 10), b = a;
  if (end == buf)
    return GS_EINVAL;
  if (*end == 'x') {
    char *start = end + 1;
    b = strtol(start, &end, 10);
    if (end == start)
      return GS_EINVAL;
  }
  if (*end || a < 1 || b < 1 || a > 65536 || b > 65536)
    return GS_EINVAL;
  *h = (int)a;
  *w = (int)b;
  return GS_OK;
}

/* A key of the spec: its parser stores what its value says into the
 * recipe, at `field` (an enum as an int: its index in `words`). */
struct prep_key;
typedef int (*key_parser)(const char *v, size_t n, gs_prep *p, const struct prep_key *key);

struct prep_key {
  const char *name;
  key_parser parse;
  size_t field;
  const char *const *words;
  const char *values; /* for the error message */
};

static int key_number(const char *v, size_t n, gs_prep *p, const struct prep_key *key) {
  return parse_number(v, n, (double *)((char *)p + key->field));
}

/* One value, or one per channel separated by colons; a std of 0 is refused. */
static int key_channels(const char *v, size_t n, gs_prep *p, const struct prep_key *key) {
  double *values = (double *)((char *)p + key->field);
  int count = 0;
  for (const char *at = v, *end = v + n; at <= end && count < 4;) {
    const char *colon = memchr(at, ':', (size_t)(end - at));
    const char *stop = colon ? colon : end;
    double x;
    if (count == 3 || parse_number(at, (size_t)(stop - at), &x) < 0)
      return GS_EINVAL;
    if (key->field == offsetof(gs_prep, std) && x == 0)
      return GS_EINVAL;
    values[count++] = x;
    at = stop + 1;
  }
  if (count != 1 && count != 3)
    return GS_EINVAL;
  *(key->field == offsetof(gs_prep, mean) ? &p->n_mean : &p->n_std) = count;
  return GS_OK;
}

/* resize=N: the shorter edge; resize=HxW: both. */
static int key_resize(const char *v, size_t n, gs_prep *p, const struct prep_key *key) {
  (void)key;
  int h, w;
  if (parse_size(v, n, &h, &w) < 0)
    return GS_EINVAL;
  bool one = !memchr(v, 'x', n);
  p->resize_short = one ? h : 0;
  p->resize_h = one ? 0 : h;
  p->resize_w = one ? 0 : w;
  return GS_OK;
}

static int key_crop(const char *v, size_t n, gs_prep *p, const struct prep_key *key) {
  (void)key;
  return parse_size(v, n, &p->crop_h, &p->crop_w);
}

/* One of the key's words, stored as its index. */
static int key_word(const char *v, size_t n, gs_prep *p, const struct prep_key *key) {
  for (int i = 0; key->words[i]; i++)
    if (strlen(key->words[i]) == n && !strncmp(v, key->words[i], n)) {
      *(int *)((char *)p + key->field) = i;
      return GS_OK;
    }
  return GS_EINVAL;
}

_Static_assert(sizeof(gs_image_filter) == sizeof(int) && sizeof(gs_image_layout) == sizeof(int) &&
                   sizeof(gs_prep_finish) == sizeof(int),
               "key_word stores the recipe's enums as int");

static const char *const filter_words[] = {"bilinear", "bicubic", "nearest", NULL};
static const char *const layout_words[] = {"auto", "nchw", "nhwc", NULL};
static const char *const finish_words[] = {"auto", "cpu", "device", NULL};

static const struct prep_key prep_keys[] = {
    {"scale", key_number, offsetof(gs_prep, scale), NULL, "a number or a fraction such as 1/255"},
    {"mean", key_channels, offsetof(gs_prep, mean), NULL,
     "one number, or three as 0.485:0.456:0.406"},
    {"std", key_channels, offsetof(gs_prep, std), NULL, "one non-zero number, or three"},
    {"resize", key_resize, 0, NULL, "N (the shorter edge) or HxW"},
    {"center_crop", key_crop, 0, NULL, "N or HxW"},
    {"interpolation", key_word, offsetof(gs_prep, interpolation), filter_words,
     "bilinear, bicubic or nearest"},
    {"layout", key_word, offsetof(gs_prep, layout), layout_words, "nchw, nhwc or auto"},
    {"finish", key_word, offsetof(gs_prep, finish), finish_words, "auto, cpu or device"},
};

int gs_prep_parse(const char *spec, gs_prep *p) {
  for (const char *at = spec; *at;) {
    const char *comma = strchr(at, ','), *end = comma ? comma : at + strlen(at);
    const char *eq = memchr(at, '=', (size_t)(end - at));
    size_t klen = eq ? (size_t)(eq - at) : (size_t)(end - at);
    const struct prep_key *key = NULL;
    for (size_t i = 0; i < sizeof prep_keys / sizeof *prep_keys; i++)
      if (strlen(prep_keys[i].name) == klen && !strncmp(at, prep_keys[i].name, klen))
        key = &prep_keys[i];
    if (!key)
      return gs_error(GS_EINVAL, "unknown preprocess key '%.*s' (scale, mean, std, resize, "
                                 "center_crop, interpolation, layout, finish)", (int)klen, at);
    if (!eq || key->parse(eq + 1, (size_t)(end - eq - 1), p, key) < 0)
      return gs_error(GS_EINVAL, "preprocess '%.*s': %s takes %s", (int)(end - at), at,
                      key->name, key->values);
    at = comma ? comma + 1 : end;
  }
  return GS_OK;
}

/* ---- an image into a row ------------------------------------------------------------------- */

typedef gs_prep_geometry geometry;

/* The largest side a resize may make. */
#define RESIZED_MAX 65536

/* torchvision's Resize: HxW as given; N makes the shorter edge N and the
 * longer int(N * long / short). */
static void resized_size(const gs_prep *p, int w, int h, int *rw, int *rh) {
  *rw = w;
  *rh = h;
  if (p->resize_h) {
    *rw = p->resize_w;
    *rh = p->resize_h;
  } else if (p->resize_short) {
    int64_t n = p->resize_short;
    /* a long thin image's long side may go past int: held at RESIZED_MAX + 1,
     * which gs_prep_image refuses */
    double along = w <= h ? (double)(n * h) / w : (double)(n * w) / h;
    int longer = along > RESIZED_MAX ? RESIZED_MAX + 1 : (int)along;
    *rw = w <= h ? (int)n : longer;
    *rh = w <= h ? longer : (int)n;
  }
}

/* CenterCrop along one edge of `size`: where the crop starts in the
 * resized image (its offset rounded half to even, as Python's round()),
 * and where the image starts in the crop when the crop is larger (padded
 * with zeros, the left or top pad the smaller). */
static void crop_edge(int size, int crop, int *from, int *shown, int *pad) {
  if (crop <= size) {
    *from = (int)nearbyint((size - crop) / 2.0);
    *shown = crop;
    *pad = 0;
  } else {
    *from = 0;
    *shown = size;
    *pad = (crop - size) / 2;
  }
}

void gs_prep_geometry_of(const gs_prep *p, int w, int h, geometry *g) {
  resized_size(p, w, h, &g->rw, &g->rh);
  g->cw = p->crop_h ? p->crop_w : g->rw;
  g->ch = p->crop_h ? p->crop_h : g->rh;
  crop_edge(g->rw, g->cw, &g->x0, &g->ww, &g->pad_x);
  crop_edge(g->rh, g->ch, &g->y0, &g->wh, &g->pad_y);
}

bool gs_prep_keeps_size(const gs_prep *p, int w, int h) {
  geometry g;
  gs_prep_geometry_of(p, w, h, &g);
  return g.rw == w && g.rh == h && g.cw == w && g.ch == h && g.x0 == 0 && g.y0 == 0;
}

/* gs_image_need_fn: the source pixels the recipe reads. */
static void recipe_needs(int width, int height, void *ctx, int box[4]) {
  const gs_prep *p = ctx;
  geometry g;
  gs_prep_geometry_of(p, width, height, &g);
  gs_image_resize_needs(width, height, g.rw, g.rh, p->interpolation, g.x0, g.y0, g.ww, g.wh, box);
}

/* (v * scale - mean) / std for each byte value and channel. */
static void value_table(const gs_prep *p, double table[3][256]) {
  for (int c = 0; c < 3; c++) {
    double mean = p->mean[p->n_mean == 3 ? c : 0], std = p->std[p->n_std == 3 ? c : 0];
    for (int v = 0; v < 256; v++)
      table[c][v] = (v * p->scale - mean) / std;
  }
}

/* float32, one channel: v * a + b, from every third byte. */
GS_VECTOR_CLONES static void affine_channel(const uint8_t *rgb, size_t n, float a, float b,
                                            float *out, size_t step) {
  if (step == 1)
    for (size_t i = 0; i < n; i++)
      out[i] = (float)rgb[3 * i] * a + b;
  else
    for (size_t i = 0; i < n; i++)
      out[3 * i] = (float)rgb[3 * i] * a + b;
}

static void write_row(const gs_prep *p, const uint8_t *rgb, int h, int w, bool nchw,
                      gs_dtype dtype, void *out) {
  size_t plane = (size_t)h * w;
  if (dtype == GS_DT_FLOAT32) {
    /* (v * scale - mean) / std as v * a + b: within 2 float32 roundings of
     * the exact value, and a loop that vectorises */
    for (int c = 0; c < 3; c++) {
      double mean = p->mean[p->n_mean == 3 ? c : 0], std = p->std[p->n_std == 3 ? c : 0];
      affine_channel(rgb + c, plane, (float)(p->scale / std), (float)(-mean / std),
                     (float *)out + (nchw ? c * plane : (size_t)c), nchw ? 1 : 3);
    }
    return;
  }
  double table[3][256];
  value_table(p, table);
  for (size_t i = 0; i < plane; i++)
    for (int c = 0; c < 3; c++)
      gs_st(dtype, out, (int64_t)(nchw ? c * plane + i : 3 * i + c), table[c][rgb[3 * i + c]]);
}

/* The image resized and cropped into `canvas` (out_w x out_h, RGB). */
static int place_image(const gs_prep *p, const gs_image *img, const geometry *g, uint8_t *canvas) {
  bool padded = g->ww < g->cw || g->wh < g->ch;
  if (!padded)
    return gs_image_resize(img, g->rw, g->rh, p->interpolation, g->x0, g->y0, g->ww, g->wh,
                           canvas);
  uint8_t *window = malloc((size_t)g->ww * g->wh * 3);
  if (!window)
    return gs_error(GS_ENOMEM, "out of memory preprocessing a %dx%d image", img->width,
                    img->height);
  int rc = gs_image_resize(img, g->rw, g->rh, p->interpolation, g->x0, g->y0, g->ww, g->wh,
                           window);
  if (rc == 0) {
    memset(canvas, 0, (size_t)g->cw * g->ch * 3);
    for (int y = 0; y < g->wh; y++)
      memcpy(canvas + ((size_t)(y + g->pad_y) * g->cw + g->pad_x) * 3,
             window + (size_t)y * g->ww * 3, (size_t)g->ww * 3);
  }
  free(window);
  return rc;
}

int gs_prep_image(const gs_prep *p, const gs_image *img, int out_h, int out_w, bool nchw,
                  gs_dtype dtype, void *out) {
  geometry g;
  gs_prep_geometry_of(p, img->width, img->height, &g);
  int rc = gs_prep_check_geometry(&g, img->width, img->height, out_h, out_w);
  if (rc < 0)
    return rc;
  uint8_t *canvas = malloc((size_t)out_h * out_w * 3);
  if (!canvas)
    return gs_error(GS_ENOMEM, "out of memory preprocessing a %dx%d image", img->width,
                    img->height);
  rc = place_image(p, img, &g, canvas);
  if (rc == 0)
    write_row(p, canvas, out_h, out_w, nchw, dtype, out);
  free(canvas);
  return rc;
}

int gs_prep_check_geometry(const geometry *g, int w, int h, int out_h, int out_w) {
  if (g->rw > RESIZED_MAX || g->rh > RESIZED_MAX)
    return gs_error(GS_EINVAL, "a %dx%d image would be resized to over %d pixels a side", w, h,
                    RESIZED_MAX);
  if (g->cw != out_w || g->ch != out_h)
    return gs_error(GS_EINVAL, "a %dx%d image becomes %dx%d (width x height) through the "
                               "preprocess recipe; the model takes %dx%d",
                    w, h, g->cw, g->ch, out_w, out_h);
  return GS_OK;
}

int gs_prep_decode(const gs_prep *p, const void *data, size_t size, gs_image *out) {
  return gs_image_decode(data, size, GS_IMAGE_MAX_PIXELS, recipe_needs, (void *)p, out);
}

int gs_prep_encoded(const gs_prep *p, const void *data, size_t size, int out_h, int out_w,
                    bool nchw, gs_dtype dtype, void *out) {
  gs_image img;
  int rc = gs_prep_decode(p, data, size, &img);
  if (rc < 0)
    return rc;
  rc = gs_prep_image(p, &img, out_h, out_w, nchw, dtype, out);
  gs_image_free(&img);
  return rc;
}

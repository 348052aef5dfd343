/* image.h - images for models that take them: JPEG and PNG decoded to 8-bit
 * RGB (libjpeg-turbo, libpng), resized as Pillow resizes (the arithmetic
 * torchvision's transforms run on a PIL image), cropped and normalised into
 * a model's input row. What a recipe does is declared in a spec string, the
 * torchvision recipe's words: "resize=256,center_crop=224,scale=1/255,
 * mean=0.485:0.456:0.406,std=0.229:0.224:0.225". */
#ifndef GS_ENGINE_IMAGE_H
#define GS_ENGINE_IMAGE_H

#include "hal/op/op_attrs.h" /* GS_IMAGE_TAPS_FRACTION_BITS */
#include "hal/op/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pillow's decompression-bomb limit: 2 x its warning threshold of
 * 89,478,485 pixels (a 3 GiB RGBA image). Larger images are refused. */
#define GS_IMAGE_MAX_PIXELS ((int64_t)2 * 89478485)

/* 8-bit RGB, rows top to bottom, 3 bytes a pixel: the whole image, or the
 * part of it a decoder was asked for. */
typedef struct gs_image {
  int width, height; /* the whole image's */
  int x0, y0, w, h;  /* the part held: pixels [x0, x0 + w) x [y0, y0 + h) */
  size_t stride;     /* bytes from a row held to the next */
  uint8_t *rgb;      /* pixel (x0, y0); gs_image_free frees it */
} gs_image;

/* Told the image's size, sets box to the pixels [box[0], box[2]) x
 * [box[1], box[3]) that will be read; a decoder may then leave the rest
 * out (a JPEG's other blocks are not transformed). */
typedef void gs_image_need_fn(int width, int height, void *ctx, int box[4]);

/* Decodes a JPEG or PNG held in memory (the format from its first bytes),
 * all of it or, where `need` is not NULL, at least the part it names.
 * Greyscale and palette images become RGB, alpha is dropped, 16-bit
 * samples keep their high byte (as Pillow's RGB conversion does). Refused,
 * with GS_EINVAL and a reason: other formats, CMYK JPEGs, a file that is
 * corrupt or cut short (a libjpeg warning counts), more than `max_pixels`
 * pixels. */
int gs_image_decode(const void *data, size_t size, int64_t max_pixels, gs_image_need_fn *need,
                    void *need_ctx, gs_image *out);
void gs_image_free(gs_image *img);

typedef enum { GS_FILTER_BILINEAR, GS_FILTER_BICUBIC, GS_FILTER_NEAREST } gs_image_filter;
typedef enum { GS_LAYOUT_AUTO, GS_LAYOUT_NCHW, GS_LAYOUT_NHWC } gs_image_layout;
/* Where `gpusrv batch` does the recipe's type, layout and normalisation:
 * auto puts them on a GPU or accelerator (gs_prep_graph) and leaves them to the CPU on a
 * device that shares the CPU's cores (an OpenCL CPU device); device asks for
 * any device with memory of its own. */
typedef enum { GS_FINISH_AUTO, GS_FINISH_CPU, GS_FINISH_DEVICE } gs_prep_finish;

/* A preprocessing recipe. Every value becomes (v * scale - mean[c]) / std[c]
 * for its channel c (one mean or std: the same for every channel). */
typedef struct gs_prep {
  double scale;
  double mean[3], std[3];
  int n_mean, n_std;          /* values given: 1 or 3 */
  int resize_short;           /* resize=N: the shorter edge to N, the other in proportion */
  int resize_h, resize_w;     /* resize=HxW */
  int crop_h, crop_w;         /* center_crop=N or HxW (0: none) */
  gs_image_filter interpolation;
  gs_image_layout layout;
  gs_prep_finish finish;
} gs_prep;

/* scale 1, mean 0, std 1, no resize or crop, bilinear, layout auto. */
void gs_prep_defaults(gs_prep *p);
/* Parses a spec of comma-separated KEY=VALUE into *p (from its present
 * values). GS_EINVAL naming what is wrong. */
int gs_prep_parse(const char *spec, gs_prep *p);
/* Keeps the recipe's resize and crop, and makes it leave values as they
 * are (scale 1, mean 0, std 1) in rows of h x w x 3: what the CPU does
 * where gs_prep_compose leaves the rest to the model. */
void gs_prep_geometry_only(gs_prep *p);
/* Whether the recipe's resize and crop leave a w x h image as it is. */
bool gs_prep_keeps_size(const gs_prep *p, int w, int h);
/* Whether the recipe changes an image's size (resize or crop). */
bool gs_prep_has_geometry(const gs_prep *p);

/* Where the recipe puts a w x h image: resized to rw x rh, of which the
 * window [x0, x0 + ww) x [y0, y0 + wh) shows, at (pad_x, pad_y) of a crop
 * of cw x ch (zeros around it where the crop is the larger). */
typedef struct gs_prep_geometry {
  int rw, rh, cw, ch, x0, y0, ww, wh, pad_x, pad_y;
} gs_prep_geometry;
void gs_prep_geometry_of(const gs_prep *p, int w, int h, gs_prep_geometry *g);
/* Whether that geometry of a w x h image makes a row of out_w x out_h
 * within gs_prep_image's limits (no resized side over 65,536 pixels);
 * GS_EINVAL saying why where not. */
int gs_prep_check_geometry(const gs_prep_geometry *g, int w, int h, int out_h, int out_w);

/* Decodes an image file's bytes, only the part the recipe reads, with
 * gs_image_decode's refusals. The caller frees *out with gs_image_free. */
int gs_prep_decode(const gs_prep *p, const void *data, size_t size, gs_image *out);

/* Makes a decoded image one row of the model's input by the recipe:
 * out_h x out_w after resize and crop, written as 3 x out_h x out_w (nchw)
 * or out_h x out_w x 3 (nhwc) values of `dtype`. GS_EINVAL where the
 * recipe makes another size. */
int gs_prep_image(const gs_prep *p, const gs_image *img, int out_h, int out_w, bool nchw,
                  gs_dtype dtype, void *out);
/* The same from an image file's bytes: decoded (only the part the recipe
 * reads), then as gs_prep_image. GS_EINVAL with the reason where the image
 * cannot be decoded. */
int gs_prep_encoded(const gs_prep *p, const void *data, size_t size, int out_h, int out_w,
                    bool nchw, gs_dtype dtype, void *out);

/* The recipe's last steps as a model of ONNX ops (Cast, Transpose, Mul,
 * Add): input "pixels", uint8 [N, h, w, 3] (resized and cropped), output
 * "normalised", float32 [N, 3, h, w] (nchw) or [N, h, w, 3], the values
 * gs_prep_image computes. Composed before a model (model_compose.h), it
 * lets a device do that work, after a quarter of float32's bytes crossed
 * the bus. The caller frees *out with gs_model_free. */
typedef struct gs_model gs_model;
int gs_prep_graph(const gs_prep *p, int h, int w, bool nchw, int64_t opset, gs_model **out);

/* Where the recipe's finish runs for a model on `devices` (n of them):
 * in the model, on them (true) only where each has memory of its own, and
 * there with finish=device, or with finish=auto where moreover none is a
 * CPU (an OpenCL CPU device would run the kernels on the CPU's cores,
 * slower than its own loop: bench/images). On the CPU (false) otherwise,
 * and for no devices. */
typedef struct gs_device gs_device_t;
bool gs_prep_finishes_on(const gs_prep *p, gs_device_t *const *devices, int n);

/* `model` (taken, whatever this returns) with gs_prep_graph's steps joined
 * before its input `input`: the whole (*out, named `name`) takes that input
 * as uint8 [N, h, w, 3] pixels under the same name, and its other inputs
 * and outputs as the model does. The caller frees *out with gs_model_free.
 * GS_ENOTSUP where gs_prep_can_compose says so. */
#define GS_PREP_MAX_VALUES 8
int gs_prep_compose(const gs_prep *p, gs_model *model, int input, int h, int w, bool nchw,
                    const char *name, gs_model **out);
/* Whether gs_prep_compose can join the recipe to `model`: GS_ENOTSUP with
 * the reason for more than GS_PREP_MAX_VALUES inputs or outputs, graph
 * attributes (If, Loop, Scan), or an input or output named gs_normalised. */
int gs_prep_can_compose(const gs_model *model);

/* Resizes src (src->width x src->height) to a dw x dh image, as Pillow's
 * resize does with that filter, and writes only the window [x0, x0 + ww) x
 * [y0, y0 + wh) of it into dst (ww x wh, RGB): a crop needs no more. src
 * must hold the pixels gs_image_resize_needs names. */
int gs_image_resize(const gs_image *src, int dw, int dh, gs_image_filter mode, int x0, int y0,
                    int ww, int wh, uint8_t *dst);

/* A resize's weights along one edge, as gs_image_resize applies them:
 * output i of n reads count[i] inputs from start[i], with ksize weights
 * each (k[i * ksize + j]), fixed point of GS_RESIZE_FRACTION_BITS; each
 * pass sums from one half, then clamps and keeps the integer part as 8
 * bits. Nearest is one input of weight 1, so is an edge left as it is. */
#define GS_RESIZE_FRACTION_BITS GS_IMAGE_TAPS_FRACTION_BITS
typedef struct gs_resize_taps {
  int n, ksize;
  int *start, *count;
  int32_t *k;
} gs_resize_taps;
/* The taps of outputs [from, from + n) of a resize of in_size to out_size;
 * the caller frees them with gs_resize_taps_free. */
int gs_image_resize_taps(int in_size, int out_size, int from, int n, gs_image_filter mode,
                         gs_resize_taps *t);
void gs_resize_taps_free(gs_resize_taps *t);
/* The source pixels that window reads, as gs_image_need_fn's box. */
void gs_image_resize_needs(int sw, int sh, int dw, int dh, gs_image_filter mode, int x0, int y0,
                           int ww, int wh, int box[4]);

#endif

/* image_input.h - a served model whose config names a "preprocess" recipe
 * (image.h) takes images on its image input: the one input shaped
 * [n, 3, H, W] or [n, H, W, 3]. Besides the model's own tensor, a request
 * may send there
 *   BYTES [n] or [n, 1]: encoded JPEG or PNG files, as Triton's image
 *     clients send them;
 *   UINT8 [n, h, w, 3]: RGB pixels of any size.
 * Either is decoded and made the model's tensor by the recipe, on the
 * request's thread, before the request is queued. */
#ifndef GS_API_IMAGE_INPUT_H
#define GS_API_IMAGE_INPUT_H

#include "api/infer_request.h"

#include <stdbool.h>
#include <stddef.h>

/* The image input's index, and its rows' layout and size; -1 with the
 * reason (for the model's load) where the model has none. */
int gs_image_input_find(const gs_served_model *m, const gs_model *model, bool *nchw, int *h,
                        int *w);

/* Whether input idx, sent as `given` with this rank and shape, is an image
 * form the model takes instead of its own tensor. */
bool gs_image_input_form(const gs_served_model *m, const gs_model *model, int idx, gs_dtype given,
                         int rank, const int64_t *dims);

/* Replaces input idx of r, sent in an image form (r->given[idx], shape
 * r->shapes[idx]), by the model's tensor. An HTTP status: 0, 400 naming
 * the image that cannot be made a row and why, 500 out of memory. */
int gs_image_input_convert(gs_infer_request *r, int idx, char *why, size_t whylen);

#endif

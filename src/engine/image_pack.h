/* image_pack.h - a batch's images resized and cropped on a device. The CPU
 * decodes each image (only the part the recipe reads) and packs its pixels
 * with the resize's taps (image.h: Pillow's weights, fixed point) into
 * host staging. Once that has crossed to the device, two launches for the
 * whole batch (GS_IMAGE_TAPS_OP: the horizontal pass of every image, then
 * the vertical) write each image's uint8 [h, w, 3] row of the model's
 * input there. The sums are integers, so the rows hold the bytes that
 * gs_prep_image's resize makes on the CPU.
 *
 * An image the passes do not take is resized on the CPU and packed as its
 * row, which the passes copy as it is (one tap of weight 1): a crop larger
 * than the resized image (it pads), or one whose pixels would not fit the
 * staging. A row of zeros stands for an image that cannot be read. */
#ifndef GS_ENGINE_IMAGE_PACK_H
#define GS_ENGINE_IMAGE_PACK_H

#include "engine/image.h"
#include "hal/hal.h"
#include "hal/op/op_call.h"

/* Staging bytes per image of a batch, on average: a 500 x 375 photo's
 * pixels with room to spare. */
#define GS_IMAGE_PACK_BUDGET ((size_t)1 << 20)

typedef struct gs_image_pack gs_image_pack;

/* A pack for batches of up to `batch` images becoming out_h x out_w rows
 * by `prep`'s resize and crop (borrowed; its other steps are not done
 * here). *staging_bytes: the pinned host buffer and the device buffer it
 * crosses to; *mid_bytes: the device buffer the horizontal pass writes.
 * The caller frees it with gs_image_pack_free. */
int gs_image_pack_create(const gs_prep *prep, int batch, int out_h, int out_w,
                         gs_image_pack **out, size_t *staging_bytes, size_t *mid_bytes);
void gs_image_pack_free(gs_image_pack *pk);

/* Starts packing a batch into `staging` (staging_bytes, host memory). */
void gs_image_pack_begin(gs_image_pack *pk, void *staging);
/* Packs the next image from its file's bytes. Where it cannot be decoded
 * or made a row, a row of zeros is packed in its place and this returns
 * GS_EINVAL with the reason, for the caller to note and go on. */
int gs_image_pack_encoded(gs_image_pack *pk, const void *data, size_t size);
/* The same from a decoded image, which must hold the part the recipe
 * reads (gs_prep_decode's). */
int gs_image_pack_image(gs_image_pack *pk, const gs_image *img);
/* Packs a row of the model's own out_h x out_w x 3 bytes, which the passes
 * copy as they are (the recipe is not applied to it). */
void gs_image_pack_row(gs_image_pack *pk, const uint8_t *row);
/* Packs a row of zeros (an image that could not be read). */
void gs_image_pack_zeros(gs_image_pack *pk);
/* The staging bytes packed so far, the first that must cross. */
size_t gs_image_pack_used(const gs_image_pack *pk);
/* How many images went to the device passes (the rest: the CPU's rows). */
int gs_image_pack_on_device(const gs_image_pack *pk);

/* Queues both passes over the images packed on `s`: `staged` holds the
 * staging's bytes on the device (from offset 0), `mid` has mid_bytes, and
 * image i's row goes to `rows` at byte i * out_h * out_w * 3. The pack
 * must not be begun again before the stream has run them. */
int gs_image_pack_launch(gs_image_pack *pk, gs_stream_t *s, gs_buffer_t *staged, gs_buffer_t *mid,
                         gs_buffer_t *rows);

#endif

/* image_set.h - the images of a batch run, in order: a directory's JPEG and
 * PNG files (its subdirectories too, as torchvision's ImageFolder keeps one
 * class in each), in name order; a .txt file of paths, one a line; or a
 * .csv file whose first column holds paths (a header line is skipped).
 * Paths in a list are relative to the list's directory. */
#ifndef GS_ENGINE_IMAGE_SET_H
#define GS_ENGINE_IMAGE_SET_H

#include <stdint.h>

typedef struct gs_image_set gs_image_set;

/* *out gets the set when `path` names images, NULL when it names a data
 * set of numbers (.npy, a directory of them, a CSV of numbers): that is
 * dataset.h's. The caller closes the set. */
int gs_image_set_open(const char *path, gs_image_set **out);
void gs_image_set_close(gs_image_set *set);

int64_t gs_image_set_count(const gs_image_set *set);
/* The i-th image's path; valid until the set is closed. */
const char *gs_image_set_path(const gs_image_set *set, int64_t i);

#endif

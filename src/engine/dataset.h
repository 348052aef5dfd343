/* dataset.h - the rows of a data set for batch inference: a .npy file
 * (rows along its first dimension), a directory of .npy files (taken in
 * name order; each holds one row or several), or a CSV file (one row per
 * line, numbers separated by commas; a first line that is not numbers is a
 * header). Rows are read by range with pread, so that several reader
 * threads can read ahead; malformed input is refused naming the file and
 * the position. */
#ifndef GS_ENGINE_DATASET_H
#define GS_ENGINE_DATASET_H

#include "hal/op/tensor.h"

#include <stdint.h>

typedef struct gs_dataset gs_dataset;

/* Opens `path` for rows of `row_elems` elements each. Every .npy header
 * and the CSV's line structure are checked here; a CSV cell that is not a
 * number is found when its rows are read. The caller closes it. */
int gs_dataset_open(const char *path, int64_t row_elems, gs_dataset **out);
void gs_dataset_close(gs_dataset *ds);

int64_t gs_dataset_rows(const gs_dataset *ds);
/* The element type rows are read in: the .npy files' own, float64 for CSV. */
gs_dtype gs_dataset_dtype(const gs_dataset *ds);

/* Reads rows [first, first + count) into `out` (count x row_elems elements
 * of gs_dataset_dtype). Safe from several threads at once. */
int gs_dataset_read(gs_dataset *ds, int64_t first, int64_t count, void *out);

/* Asks the kernel to drop the data set's files from the page cache, so that
 * the next read comes from storage (benchmarks). */
void gs_dataset_drop_cache(gs_dataset *ds);

#endif

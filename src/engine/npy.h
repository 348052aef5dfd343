/* npy.h - NumPy .npy files: what `gpusrv model run` and batch jobs read
 * their inputs from and write their outputs to. Format versions 1 to 3,
 * little-endian, C order. */
#ifndef GS_ENGINE_NPY_H
#define GS_ENGINE_NPY_H

#include "hal/op/tensor.h"

typedef struct gs_npy {
  gs_dtype dtype;
  gs_shape shape;
  void *data; /* owned: free() */
  size_t bytes;
} gs_npy;

/* Reads a whole .npy file. Fails with GS_EINVAL naming the file and what is
 * wrong (not .npy, big-endian, Fortran order, an unsupported type, a shape
 * that does not match the bytes present). */
int gs_npy_read(const char *path, gs_npy *out);
/* Parses .npy bytes in memory (data is copied). */
int gs_npy_parse(const void *bytes, size_t len, gs_npy *out);
/* Parses only the header of .npy bytes (dtype and shape into out, data
 * NULL) and where the data starts; the data need not be present. */
int gs_npy_parse_header(const void *bytes, size_t len, gs_npy *out, size_t *data_offset);
/* The version 1 header of an array (data then starts 64-byte aligned). */
int gs_npy_format_header(gs_dtype dtype, const gs_shape *shape, unsigned char *buf, size_t cap,
                         size_t *len);
/* Writes a .npy file (version 1). float16 is written as '<f2'; bfloat16,
 * which NumPy lacks, as its raw 16-bit patterns ('<u2'). */
int gs_npy_write(const char *path, gs_dtype dtype, const gs_shape *shape, const void *data);

#endif

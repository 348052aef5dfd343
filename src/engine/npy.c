/* npy.c - reading and writing NumPy .npy files. */
#include "engine/npy.h"

#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *descr;
  gs_dtype dtype;
} descrs[] = {
    {"<f4", GS_DT_FLOAT32}, {"<f8", GS_DT_FLOAT64}, {"<f2", GS_DT_FLOAT16}, {"<i8", GS_DT_INT64},
    {"<i4", GS_DT_INT32},   {"<i2", GS_DT_INT16},   {"|i1", GS_DT_INT8},    {"|u1", GS_DT_UINT8},
    {"|b1", GS_DT_BOOL},
    /* bfloat16 is written as its bits, <u2 (numpy has no bfloat16); read
     * back, <u2 is uint16 (the later entry), which bfloat16 inputs take. */
    {"<u2", GS_DT_BFLOAT16}, {"<u2", GS_DT_UINT16}, {"<u4", GS_DT_UINT32}, {"<u8", GS_DT_UINT64},
};

/* The value text after 'key': in a header dict, or NULL. */
static const char *dict_value(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p)
    return NULL;
  p += strlen(pat);
  while (*p == ' ' || *p == ':')
    p++;
  return p;
}

int gs_npy_parse_header(const void *bytes, size_t len, gs_npy *out, size_t *data_offset) {
  const unsigned char *b = bytes;
  memset(out, 0, sizeof *out);
  if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
    return gs_error(GS_EINVAL, "not a .npy file (no \\x93NUMPY magic)");
  int major = b[6];
  size_t hlen, start;
  if (major == 1) {
    hlen = (size_t)b[8] | (size_t)b[9] << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12)
      return gs_error(GS_EINVAL, "truncated .npy header");
    hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    start = 12;
  } else {
    return gs_error(GS_EINVAL, ".npy format version %d is not supported", major);
  }
  if (hlen > 1 << 20 || start + hlen > len)
    return gs_error(GS_EINVAL, "the .npy header of %zu bytes runs past the file", hlen);
  char *h = malloc(hlen + 1);
  if (!h)
    return gs_error(GS_ENOMEM, "out of memory");
  memcpy(h, b + start, hlen);
  h[hlen] = '\0';
  int rc = 0;
  const char *descr = dict_value(h, "descr"), *order = dict_value(h, "fortran_order"),
             *shape = dict_value(h, "shape");
  if (!descr || !order || !shape)
    rc = gs_error(GS_EINVAL, "the .npy header lacks descr, fortran_order or shape");
  if (rc == 0 && strncmp(order, "False", 5) != 0)
    rc = gs_error(GS_EINVAL, "Fortran-ordered arrays are not supported; save with C order");
  if (rc == 0) {
    out->dtype = GS_DT_INVALID;
    for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++) {
      size_t n = strlen(descrs[i].descr);
      if (descr[0] == '\'' && strncmp(descr + 1, descrs[i].descr, n) == 0 && descr[1 + n] == '\'')
        out->dtype = descrs[i].dtype;
    }
    /* Single-byte types may be written with '<' or '=' too. */
    if (out->dtype == GS_DT_INVALID && descr[0] == '\'' && descr[1] && strchr("<=", descr[1])) {
      if (!strncmp(descr + 2, "i1'", 3))
        out->dtype = GS_DT_INT8;
      else if (!strncmp(descr + 2, "u1'", 3))
        out->dtype = GS_DT_UINT8;
      else if (!strncmp(descr + 2, "b1'", 3))
        out->dtype = GS_DT_BOOL;
    }
    if (out->dtype == GS_DT_INVALID) {
      int n = 0;
      while (descr[n] && descr[n] != ',' && n < 16)
        n++;
      rc = gs_error(GS_EINVAL, "array type %.*s is not supported (little-endian bool, int8..int64, "
                               "uint8..uint64, float16, float32, float64)", n, descr);
    }
  }
  if (rc == 0) {
    const char *p = shape;
    if (*p++ != '(')
      rc = gs_error(GS_EINVAL, "unreadable shape in the .npy header");
    out->shape.rank = 0;
    while (rc == 0 && *p && *p != ')') {
      while (*p == ' ' || *p == ',')
        p++;
      if (*p == ')')
        break;
      char *end;
      errno = 0;
      long long d = strtoll(p, &end, 10);
      if (end == p || errno || d < 0)
        rc = gs_error(GS_EINVAL, "unreadable shape in the .npy header");
      else if (out->shape.rank == GS_MAX_DIMS)
        rc = gs_error(GS_EINVAL, "the array has more than %d dimensions", GS_MAX_DIMS);
      else
        out->shape.dims[out->shape.rank++] = d;
      p = end;
    }
    if (rc == 0 && *p != ')')
      rc = gs_error(GS_EINVAL, "unreadable shape in the .npy header");
  }
  free(h);
  if (rc < 0)
    return rc;
  *data_offset = start + hlen;
  return GS_OK;
}

int gs_npy_parse(const void *bytes, size_t len, gs_npy *out) {
  const unsigned char *b = bytes;
  size_t offset;
  int rc = gs_npy_parse_header(bytes, len, out, &offset);
  if (rc < 0)
    return rc;
  int64_t n = gs_shape_numel(&out->shape);
  size_t have = len - offset, es = gs_dtype_size(out->dtype);
  if (n < 0 || (uint64_t)n > SIZE_MAX / es || (size_t)n * es != have)
    return gs_error(GS_EINVAL, "the .npy file holds %zu bytes of data; its shape needs %lld x %zu",
                    have, (long long)n, es);
  out->bytes = have;
  out->data = malloc(have ? have : 1);
  if (!out->data)
    return gs_error(GS_ENOMEM, "out of memory for %zu bytes", have);
  memcpy(out->data, b + offset, have);
  return GS_OK;
}

int gs_npy_read(const char *path, gs_npy *out) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return gs_error(errno == ENOENT ? GS_ENOENT : GS_EIO, "cannot open %s: %s", path,
                    strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return gs_error(GS_EIO, "%s: cannot seek", path);
  }
  long len = ftell(f);
  rewind(f);
  void *buf = len > 0 ? malloc((size_t)len) : NULL;
  if (len <= 0 || !buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
    fclose(f);
    free(buf);
    return gs_error(len <= 0 ? GS_EINVAL : GS_EIO, "%s: cannot read (empty or unreadable)", path);
  }
  fclose(f);
  int rc = gs_npy_parse(buf, (size_t)len, out);
  free(buf);
  return rc < 0 ? gs_error_prefix(rc, path) : GS_OK;
}

int gs_npy_format_header(gs_dtype dtype, const gs_shape *shape, unsigned char *buf, size_t cap,
                         size_t *len) {
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
    if (descrs[i].dtype == dtype)
      descr = descrs[i].descr;
  if (!descr)
    return gs_error(GS_EINVAL, "cannot write %s arrays to .npy", gs_dtype_name(dtype));
  char dims[256] = "";
  size_t n = 0;
  for (int i = 0; i < shape->rank; i++)
    n += (size_t)snprintf(dims + n, sizeof dims - n, "%lld,%s", (long long)shape->dims[i],
                          i + 1 < shape->rank ? " " : "");
  if (shape->rank > 1)
    dims[n - 1] = '\0'; /* (2, 3) rather than (2, 3,) */
  char header[512];
  int hl = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                    descr, dims);
  /* Pad with spaces and a newline so that data starts on a 64-byte boundary. */
  int total = 10 + hl + 1;
  int pad = (64 - total % 64) % 64;
  unsigned hlen = (unsigned)(hl + pad + 1);
  if (cap < 10 + (size_t)hlen)
    return gs_error(GS_EINVAL, "no room for a .npy header");
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  memcpy(buf, pre, 10);
  memcpy(buf + 10, header, (size_t)hl);
  memset(buf + 10 + hl, ' ', (size_t)pad);
  buf[10 + hl + pad] = '\n';
  *len = 10 + (size_t)hlen;
  return GS_OK;
}

int gs_npy_write(const char *path, gs_dtype dtype, const gs_shape *shape, const void *data) {
  unsigned char header[640];
  size_t hlen;
  int rc = gs_npy_format_header(dtype, shape, header, sizeof header, &hlen);
  if (rc < 0)
    return rc;
  FILE *f = fopen(path, "wb");
  if (!f)
    return gs_error(GS_EIO, "cannot create %s: %s", path, strerror(errno));
  size_t bytes = (size_t)gs_shape_numel(shape) * gs_dtype_size(dtype);
  bool ok = fwrite(header, 1, hlen, f) == hlen && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
  if (fclose(f) != 0)
    ok = false;
  if (!ok)
    return gs_error(GS_EIO, "cannot write %s: %s", path, strerror(errno));
  return GS_OK;
}

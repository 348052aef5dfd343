/* onnx.c - reads an ONNX ModelProto into a gs_model: the graph, its nodes
 * and attributes, its initializers (raw_data, typed fields or external data
 * files) and its declared inputs and outputs. Every length and count is
 * checked against the bytes actually present before anything is allocated
 * for it, so a hostile file cannot ask for more memory than it is long. */
#include "engine/model.h"

#include "base/error.h"
#include "base/fileutil.h"
#include "engine/pb.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Field numbers of onnx.proto, the messages and fields in use. */
enum {
  MODEL_IR_VERSION = 1, MODEL_PRODUCER = 2, MODEL_GRAPH = 7, MODEL_OPSET = 8,
  MODEL_FUNCTIONS = 25,
  OPSET_DOMAIN = 1, OPSET_VERSION = 2,
  GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12,
  GRAPH_SPARSE_INITIALIZER = 15,
  NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
  NODE_DOMAIN = 7,
  ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_S = 4, ATTR_T = 5, ATTR_FLOATS = 7, ATTR_INTS = 8,
  ATTR_STRINGS = 9, ATTR_G = 6, ATTR_TYPE = 20,
  TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_SEGMENT = 3, TENSOR_FLOAT_DATA = 4,
  TENSOR_INT32_DATA = 5, TENSOR_STRING_DATA = 6, TENSOR_INT64_DATA = 7, TENSOR_NAME = 8,
  TENSOR_RAW_DATA = 9, TENSOR_DOUBLE_DATA = 10, TENSOR_UINT64_DATA = 11,
  TENSOR_EXTERNAL_DATA = 13, TENSOR_DATA_LOCATION = 14,
  ENTRY_KEY = 1, ENTRY_VALUE = 2,
  VALUE_NAME = 1, VALUE_TYPE = 2,
  TYPE_TENSOR = 1,
  TTYPE_ELEM_TYPE = 1, TTYPE_SHAPE = 2,
  SHAPE_DIM = 1,
  DIM_VALUE = 1, DIM_PARAM = 2,
};

/* AttributeProto.AttributeType */
enum { AT_FLOAT = 1, AT_INT = 2, AT_STRING = 3, AT_TENSOR = 4, AT_GRAPH = 5, AT_FLOATS = 6,
       AT_INTS = 7, AT_STRINGS = 8 };

/* Graphs inside graphs (If's branches) nest at most this deep: a hostile
 * file must not exhaust the stack. */
#define MAX_GRAPH_DEPTH 16

typedef struct loader {
  const char *dir; /* for external data; NULL: refused */
  int depth;       /* of the graph being read: 0 for the model's */
} loader;

static int parse_graph(const loader *ld, gs_pb *r, int r_wire, gs_model *m);

/* ---- small helpers ---------------------------------------------------------- */

/* A known field must arrive with its own wire type: a file that disagrees is
 * corrupt, and reading it as something else would only make things up. */
static int want_wire(const gs_pb *r, int wire, int expected) {
  if (wire != expected)
    return gs_error(GS_EINVAL, "field with wire type %d where %d belongs, at byte %zu", wire,
                    expected, gs_pb_offset(r));
  return 0;
}

static int read_sub(gs_pb *r, int wire, gs_pb *sub) {
  int rc = want_wire(r, wire, GS_PB_LEN);
  return rc < 0 ? rc : gs_pb_sub(r, sub);
}

static int read_varint(gs_pb *r, int wire, uint64_t *v) {
  int rc = want_wire(r, wire, GS_PB_VARINT);
  return rc < 0 ? rc : gs_pb_varint(r, v);
}

static int read_string(gs_pb *r, int wire, char **out) {
  gs_pb s;
  int rc = read_sub(r, wire, &s);
  if (rc < 0)
    return rc;
  size_t len = (size_t)(s.end - s.p);
  char *str = malloc(len + 1);
  if (!str)
    return gs_error(GS_ENOMEM, "out of memory reading a string of %zu bytes", len);
  memcpy(str, s.p, len);
  str[len] = '\0';
  if (strlen(str) != len) {
    free(str);
    return gs_error(GS_EINVAL, "string with a NUL byte at byte %zu", gs_pb_offset(r));
  }
  free(*out);
  *out = str;
  return 0;
}

/* Appends one element to a growing array. Counts stay bounded by the file's
 * size, since every element costs at least one byte of input. */
static int push(void **arr, int *n, int *cap, size_t elem, const void *value) {
  if (*n == *cap) {
    if (*cap > (1 << 28))
      return gs_error(GS_EINVAL, "too many repeated elements");
    int ncap = *cap ? *cap * 2 : 4;
    void *grown = realloc(*arr, (size_t)ncap * elem);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory growing an array to %d elements", ncap);
    *arr = grown;
    *cap = ncap;
  }
  memcpy((char *)*arr + (size_t)*n * elem, value, elem);
  (*n)++;
  return 0;
}

/* A repeated varint field, packed (wire 2) or not (wire 0). */
static int read_varints(gs_pb *r, int wire, int64_t **arr, int *n, int *cap) {
  uint64_t v;
  int rc;
  if (wire == GS_PB_VARINT) {
    if ((rc = gs_pb_varint(r, &v)) < 0)
      return rc;
    int64_t s = (int64_t)v;
    return push((void **)arr, n, cap, sizeof s, &s);
  }
  if (wire != GS_PB_LEN)
    return gs_error(GS_EINVAL, "integer list with wire type %d at byte %zu", wire, gs_pb_offset(r));
  gs_pb sub;
  if ((rc = gs_pb_sub(r, &sub)) < 0)
    return rc;
  while (sub.p < sub.end) {
    if ((rc = gs_pb_varint(&sub, &v)) < 0)
      return rc;
    int64_t s = (int64_t)v;
    if ((rc = push((void **)arr, n, cap, sizeof s, &s)) < 0)
      return rc;
  }
  return 0;
}

/* A repeated fixed-width field (float: 4 bytes, double: 8), packed or not. */
static int read_fixed(gs_pb *r, int wire, size_t width, void **arr, int *n, int *cap) {
  int want = width == 4 ? GS_PB_I32 : GS_PB_I64;
  int rc;
  if (wire == want) {
    uint64_t v = 0;
    uint32_t v32;
    rc = width == 4 ? gs_pb_fixed32(r, &v32) : gs_pb_fixed64(r, &v);
    if (rc < 0)
      return rc;
    if (width == 4)
      return push(arr, n, cap, 4, &v32);
    return push(arr, n, cap, 8, &v);
  }
  if (wire != GS_PB_LEN)
    return gs_error(GS_EINVAL, "number list with wire type %d at byte %zu", wire, gs_pb_offset(r));
  gs_pb sub;
  if ((rc = gs_pb_sub(r, &sub)) < 0)
    return rc;
  size_t len = (size_t)(sub.end - sub.p);
  if (len % width)
    return gs_error(GS_EINVAL, "packed list of %zu bytes is not a multiple of %zu at byte %zu", len,
                    width, gs_pb_offset(r));
  for (const uint8_t *p = sub.p; p < sub.end; p += width)
    if ((rc = push(arr, n, cap, width, p)) < 0)
      return rc;
  return 0;
}

/* ---- tensors ------------------------------------------------------------------- */

static void const_tensor_clear(gs_const_tensor *t) {
  free(t->name);
  free(t->data);
  memset(t, 0, sizeof *t);
}

/* External data: a relative path to a regular file inside the model's
 * directory, reached through no symlink (a repository entry must not serve
 * /etc/shadow), never a FIFO or a device (which would hang the load or
 * read forever). */
static int open_external(const loader *ld, const char *tensor, const char *location, char *path,
                         size_t cap, int *fd) {
  if (!ld->dir)
    return gs_error(GS_EINVAL, "tensor %s keeps its data in an external file, but the model "
                               "was not loaded from a file", tensor);
  if (location[0] == '/' || strstr(location, "..") || location[0] == '\0')
    return gs_error(GS_EINVAL, "tensor %s: external data location \"%s\" must be a relative path "
                               "inside the model's directory", tensor, location);
  snprintf(path, cap, "%s/%s", ld->dir, location);
  *fd = gs_open_regular_beneath(ld->dir, location);
  if (*fd >= 0)
    return GS_OK;
  if (errno == ELOOP || errno == EXDEV || errno == EINVAL)
    return gs_error(GS_EINVAL, "tensor %s: external data %s must be a regular file inside the "
                               "model's directory, reached through no symlink (%s)", tensor, path,
                    errno == ELOOP ? "a symlink is on its way" : errno == EXDEV
                                                                     ? "it leaves the directory"
                                                                     : "it is no regular file");
  return gs_error(GS_EINVAL, "tensor %s: cannot open external data %s: %s", tensor, path,
                  strerror(errno));
}

static int read_external(const loader *ld, gs_const_tensor *t, const char *location,
                         uint64_t offset, int64_t length, void *dst, size_t bytes) {
  char path[4096];
  int fd = -1;
  int rc = open_external(ld, t->name, location, path, sizeof path, &fd);
  if (rc < 0)
    return rc;
  if (length >= 0 && (uint64_t)length != bytes) {
    close(fd);
    return gs_error(GS_EINVAL, "tensor %s: external length %lld but its shape needs %zu bytes",
                    t->name, (long long)length, bytes);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || offset > (uint64_t)st.st_size || bytes > (uint64_t)st.st_size - offset) {
    close(fd);
    return gs_error(GS_EINVAL, "tensor %s: external data %s holds %lld bytes, fewer than offset "
                               "%llu + %zu",
                    t->name, path, (long long)st.st_size, (unsigned long long)offset, bytes);
  }
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = pread(fd, (char *)dst + done, bytes - done, (off_t)(offset + done));
    if (n <= 0) {
      close(fd);
      return gs_error(GS_EIO, "tensor %s: reading %s: %s", t->name, path,
                      n < 0 ? strerror(errno) : "unexpected end of file");
    }
    done += (size_t)n;
  }
  close(fd);
  return 0;
}

/* Copies typed-field values into t->data, converting to the tensor's type.
 * Each type has its own field: float_data (4-byte), double_data (8-byte),
 * int64_data, or int32_data for the narrower types. */
static int typed_to_data(gs_const_tensor *t, int onnx_type, const int64_t *ints, int n_ints,
                         int ints_field, const void *fixed, int n_fixed, size_t fixed_width,
                         int64_t numel) {
  uint8_t *d = t->data;
  switch (t->dtype) {
  case GS_DT_FLOAT32:
  case GS_DT_FLOAT64:
    if (fixed_width != gs_dtype_size(t->dtype))
      goto field;
    if (n_fixed != numel)
      goto count;
    memcpy(d, fixed, t->bytes);
    return 0;
  case GS_DT_INT64:
    if (n_ints && ints_field != TENSOR_INT64_DATA)
      goto field;
    if (n_ints != numel)
      goto count;
    memcpy(d, ints, t->bytes);
    return 0;
  case GS_DT_UINT64:
  case GS_DT_UINT32: /* uint64_data holds these */
    if (n_ints && ints_field != TENSOR_UINT64_DATA)
      goto field;
    if (n_ints != numel)
      goto count;
    for (int64_t i = 0; i < numel; i++) {
      uint64_t v = (uint64_t)ints[i];
      uint32_t v32 = (uint32_t)v;
      if (t->dtype == GS_DT_UINT64)
        memcpy(d + 8 * i, &v, 8);
      else
        memcpy(d + 4 * i, &v32, 4);
    }
    return 0;
  case GS_DT_UINT16:
  case GS_DT_BOOL:
  case GS_DT_UINT8:
  case GS_DT_INT8:
  case GS_DT_INT16:
  case GS_DT_INT32:
  case GS_DT_FLOAT16:
  case GS_DT_BFLOAT16: {
    /* int32_data holds these, one per element (halves as their bit pattern). */
    if (n_ints && ints_field != TENSOR_INT32_DATA)
      goto field;
    if (n_ints != numel)
      goto count;
    size_t w = gs_dtype_size(t->dtype);
    for (int64_t i = 0; i < numel; i++) {
      int32_t v = (int32_t)ints[i];
      if (w == 1) {
        int8_t b = (int8_t)v;
        memcpy(d + i, &b, 1);
      } else if (w == 2) {
        int16_t h = (int16_t)v;
        memcpy(d + 2 * i, &h, 2);
      } else {
        memcpy(d + 4 * i, &v, 4);
      }
    }
    return 0;
  }
  default:
    break;
  }
  return gs_error(GS_EINVAL, "tensor %s: typed data of ONNX type %d is not supported", t->name,
                  onnx_type);
count:
  return gs_error(GS_EINVAL, "tensor %s has %d values for its %lld elements", t->name,
                  n_fixed ? n_fixed : n_ints, (long long)numel);
field:
  return gs_error(GS_EINVAL, "tensor %s of ONNX type %d keeps its values in the wrong field",
                  t->name, onnx_type);
}

static int parse_tensor(const loader *ld, gs_pb *r, int r_wire, gs_const_tensor *t) {
  gs_pb m;
  int rc = read_sub(r, r_wire, &m);
  if (rc < 0)
    return rc;
  memset(t, 0, sizeof *t);
  int64_t *dims = NULL, *ints = NULL;
  int n_dims = 0, cap_dims = 0, n_ints = 0, cap_ints = 0, n_fixed = 0, cap_fixed = 0;
  void *fixed = NULL;
  size_t fixed_width = 0;
  int64_t onnx_type = 0, location = 0, ext_length = -1;
  int ints_field = 0;
  uint64_t ext_offset = 0;
  char *ext_location = NULL;
  gs_pb raw = {0};
  bool has_raw = false;
  uint32_t field;
  int wire;
  while ((rc = gs_pb_next(&m, &field, &wire)) == 1) {
    uint64_t v;
    switch (field) {
    case TENSOR_DIMS: rc = read_varints(&m, wire, &dims, &n_dims, &cap_dims); break;
    case TENSOR_DATA_TYPE:
      rc = read_varint(&m, wire, &v);
      onnx_type = (int64_t)v;
      break;
    case TENSOR_NAME: rc = read_string(&m, wire, &t->name); break;
    case TENSOR_RAW_DATA:
      rc = read_sub(&m, wire, &raw);
      has_raw = true;
      break;
    case TENSOR_INT32_DATA:
    case TENSOR_INT64_DATA:
    case TENSOR_UINT64_DATA:
      if (ints_field && ints_field != (int)field)
        rc = gs_error(GS_EINVAL, "tensor mixes integer data fields");
      else
        rc = read_varints(&m, wire, &ints, &n_ints, &cap_ints);
      ints_field = (int)field;
      break;
    case TENSOR_FLOAT_DATA:
    case TENSOR_DOUBLE_DATA: {
      size_t w = field == TENSOR_FLOAT_DATA ? 4 : 8;
      if (fixed_width && fixed_width != w)
        rc = gs_error(GS_EINVAL, "tensor mixes float_data and double_data");
      else {
        fixed_width = w;
        rc = read_fixed(&m, wire, w, &fixed, &n_fixed, &cap_fixed);
      }
      break;
    }
    case TENSOR_EXTERNAL_DATA: {
      gs_pb e;
      char *key = NULL, *value = NULL;
      rc = read_sub(&m, wire, &e);
      uint32_t f2;
      int w2;
      while (rc >= 0 && (rc = gs_pb_next(&e, &f2, &w2)) == 1)
        rc = f2 == ENTRY_KEY ? read_string(&e, w2, &key)
             : f2 == ENTRY_VALUE ? read_string(&e, w2, &value)
                                 : gs_pb_skip(&e, w2);
      if (rc >= 0 && key && value) {
        if (strcmp(key, "location") == 0) {
          free(ext_location);
          ext_location = value;
          value = NULL;
        } else if (strcmp(key, "offset") == 0) {
          ext_offset = strtoull(value, NULL, 10);
        } else if (strcmp(key, "length") == 0) {
          ext_length = strtoll(value, NULL, 10);
        }
      }
      free(key);
      free(value);
      break;
    }
    case TENSOR_DATA_LOCATION:
      rc = read_varint(&m, wire, &v);
      location = (int64_t)v;
      break;
    case TENSOR_SEGMENT:
      rc = gs_error(GS_EINVAL, "segmented tensors are not supported");
      break;
    case TENSOR_STRING_DATA:
      rc = gs_error(GS_ENOTSUP, "constant string tensors are not supported in models (strings "
                                "may only come in as inputs)");
      break;
    default: rc = gs_pb_skip(&m, wire); break;
    }
    if (rc < 0)
      break;
  }
  const char *name = t->name ? t->name : "(unnamed)";
  if (rc >= 0) {
    t->dtype = gs_dtype_from_onnx((int)onnx_type);
    if (t->dtype == GS_DT_INVALID)
      rc = gs_error(GS_ENOTSUP, "tensor %s has type %s (ONNX data type %lld), which gpusrv "
                                "does not support", name, gs_onnx_type_name((int)onnx_type),
                    (long long)onnx_type);
    else if (t->dtype == GS_DT_BYTES)
      rc = gs_error(GS_ENOTSUP, "constant string tensor %s is not supported (strings may only "
                                "come in as inputs)", name);
    else if (n_dims > GS_MAX_DIMS)
      rc = gs_error(GS_EINVAL, "tensor %s has %d dimensions (at most %d)", name, n_dims,
                    GS_MAX_DIMS);
  }
  int64_t numel = 0;
  if (rc >= 0) {
    t->shape.rank = n_dims;
    for (int i = 0; i < n_dims; i++)
      t->shape.dims[i] = dims[i];
    numel = gs_shape_numel(&t->shape);
    size_t esz = gs_dtype_size(t->dtype);
    if (numel < 0 || (uint64_t)numel > SIZE_MAX / esz)
      rc = gs_error(GS_EINVAL, "tensor %s has an impossible shape", name);
    else
      t->bytes = (size_t)numel * esz;
  }
  /* The data must be present before memory is allocated for it. */
  if (rc >= 0) {
    bool external = location == 1;
    if (external && !ext_location)
      rc = gs_error(GS_EINVAL, "tensor %s is external but names no location", name);
    else if (!external && has_raw && (size_t)(raw.end - raw.p) != t->bytes)
      rc = gs_error(GS_EINVAL, "tensor %s: raw_data has %zu bytes, its shape needs %zu", name,
                    (size_t)(raw.end - raw.p), t->bytes);
    else if (!external && !has_raw && numel > n_ints && numel > n_fixed)
      rc = gs_error(GS_EINVAL, "tensor %s has %d values for its %lld elements", name,
                    n_fixed > n_ints ? n_fixed : n_ints, (long long)numel);
    else if (t->bytes && !(t->data = malloc(t->bytes)))
      rc = gs_error(GS_ENOMEM, "out of memory for tensor %s (%zu bytes)", name, t->bytes);
    else if (t->bytes == 0)
      ;
    else if (external)
      rc = read_external(ld, t, ext_location, ext_offset, ext_length, t->data, t->bytes);
    else if (has_raw)
      memcpy(t->data, raw.p, t->bytes);
    else
      rc = typed_to_data(t, (int)onnx_type, ints, n_ints, ints_field, fixed, n_fixed, fixed_width,
                         numel);
  }
  free(dims);
  free(ints);
  free(fixed);
  free(ext_location);
  if (rc < 0)
    const_tensor_clear(t);
  if (rc >= 0 && !t->name && !(t->name = strdup("")))
    rc = gs_error(GS_ENOMEM, "out of memory");
  return rc < 0 ? rc : 0;
}

/* ---- attributes, nodes, value infos ---------------------------------------------- */

static void attr_clear(gs_attr *a) {
  free(a->name);
  free(a->s);
  if (a->t) {
    const_tensor_clear(a->t);
    free(a->t);
  }
  gs_model_free(a->g);
  free(a->floats);
  free(a->ints);
  for (int i = 0; a->strings && i < a->n_strings; i++)
    free(a->strings[i]);
  free(a->strings);
  memset(a, 0, sizeof *a);
}

/* A graph attribute: a model of its own (its inputs, nodes, weights and
 * outputs), checked with the model (model_check.c). */
static int parse_subgraph(const loader *ld, gs_pb *r, int wire, gs_attr *a) {
  if (a->g)
    return gs_error(GS_EINVAL, "attribute with two graphs");
  if (ld->depth >= MAX_GRAPH_DEPTH)
    return gs_error(GS_ENOTSUP, "graphs nest deeper than %d levels", MAX_GRAPH_DEPTH);
  if (!(a->g = calloc(1, sizeof *a->g)))
    return gs_error(GS_ENOMEM, "out of memory");
  gs_strmap_init(&a->g->init_index);
  loader inner = *ld;
  inner.depth++;
  int rc = parse_graph(&inner, r, wire, a->g);
  if (rc < 0) {
    gs_model_free(a->g);
    a->g = NULL;
  }
  return rc;
}

static int parse_attr(const loader *ld, gs_pb *r, int r_wire, gs_attr *a) {
  gs_pb m;
  int rc = read_sub(r, r_wire, &m);
  if (rc < 0)
    return rc;
  memset(a, 0, sizeof *a);
  int64_t type = 0;
  int cap_floats = 0, cap_ints = 0, cap_strings = 0, n_floats = 0, n_ints = 0;
  bool other = false;
  uint32_t field;
  int wire;
  while ((rc = gs_pb_next(&m, &field, &wire)) == 1) {
    uint64_t v;
    uint32_t v32;
    switch (field) {
    case ATTR_NAME: rc = read_string(&m, wire, &a->name); break;
    case ATTR_TYPE:
      rc = read_varint(&m, wire, &v);
      type = (int64_t)v;
      break;
    case ATTR_F:
      rc = want_wire(&m, wire, GS_PB_I32);
      if (rc == 0)
        rc = gs_pb_fixed32(&m, &v32);
      memcpy(&a->f, &v32, 4);
      break;
    case ATTR_I:
      rc = read_varint(&m, wire, &v);
      a->i = (int64_t)v;
      break;
    case ATTR_S:
      rc = read_string(&m, wire, &a->s);
      break;
    case ATTR_T:
      if (a->t) {
        rc = gs_error(GS_EINVAL, "attribute with two tensors");
        break;
      }
      if (!(a->t = calloc(1, sizeof *a->t)))
        rc = gs_error(GS_ENOMEM, "out of memory");
      else if ((rc = parse_tensor(ld, &m, wire, a->t)) < 0) {
        free(a->t);
        a->t = NULL;
      }
      break;
    case ATTR_FLOATS:
      rc = read_fixed(&m, wire, 4, (void **)&a->floats, &n_floats, &cap_floats);
      break;
    case ATTR_INTS:
      rc = read_varints(&m, wire, &a->ints, &n_ints, &cap_ints);
      break;
    case ATTR_G:
      rc = parse_subgraph(ld, &m, wire, a);
      break;
    case ATTR_STRINGS: {
      char *s = NULL;
      rc = read_string(&m, wire, &s);
      if (rc >= 0 && (rc = push((void **)&a->strings, &a->n_strings, &cap_strings, sizeof s, &s)) < 0)
        free(s);
      break;
    }
    default:
      other = field == 10 || field == 11 || field == 14 || field == 15 ||
              field == 22 || field == 23 || other;
      rc = gs_pb_skip(&m, wire);
      break;
    }
    if (rc < 0)
      break;
  }
  if (rc >= 0 && !a->name)
    rc = gs_error(GS_EINVAL, "attribute without a name at byte %zu", gs_pb_offset(r));
  if (rc < 0) {
    attr_clear(a);
    return rc;
  }
  switch (type) {
  case AT_FLOAT: a->type = GS_ATTR_FLOAT; break;
  case AT_INT: a->type = GS_ATTR_INT; break;
  case AT_STRING: a->type = a->s ? GS_ATTR_STRING : GS_ATTR_UNDEFINED; break;
  case AT_TENSOR: a->type = a->t ? GS_ATTR_TENSOR : GS_ATTR_UNDEFINED; break;
  case AT_GRAPH: a->type = a->g ? GS_ATTR_GRAPH : GS_ATTR_UNDEFINED; break;
  case AT_FLOATS: a->type = GS_ATTR_FLOATS; a->n = n_floats; break;
  case AT_INTS: a->type = GS_ATTR_INTS; a->n = n_ints; break;
  case AT_STRINGS: a->type = GS_ATTR_STRINGS; a->n = a->n_strings; break;
  default: a->type = other || type ? GS_ATTR_UNSUPPORTED : GS_ATTR_UNDEFINED; break;
  }
  if (a->type == GS_ATTR_UNDEFINED) {
    char name[64];
    snprintf(name, sizeof name, "%s", a->name);
    attr_clear(a);
    return gs_error(GS_EINVAL, "attribute %s has no usable type (type %lld)", name,
                    (long long)type);
  }
  return 0;
}

static void node_clear(gs_node *n) {
  free(n->name);
  free(n->op_type);
  free(n->domain);
  for (int i = 0; i < n->n_in; i++)
    free(n->inputs[i]);
  for (int i = 0; i < n->n_out; i++)
    free(n->outputs[i]);
  free(n->inputs);
  free(n->outputs);
  for (int i = 0; i < n->n_attrs; i++)
    attr_clear(&n->attrs[i]);
  free(n->attrs);
  memset(n, 0, sizeof *n);
}

/* For the rewrites (model_qdq.c), which replace nodes. */
void gs__node_clear(gs_node *n);
void gs__node_clear(gs_node *n) { node_clear(n); }

static int parse_node(const loader *ld, gs_pb *r, int r_wire, gs_node *n) {
  gs_pb m;
  int rc = read_sub(r, r_wire, &m);
  if (rc < 0)
    return rc;
  memset(n, 0, sizeof *n);
  int cap_in = 0, cap_out = 0, cap_attr = 0;
  uint32_t field;
  int wire;
  while ((rc = gs_pb_next(&m, &field, &wire)) == 1) {
    char *s = NULL;
    switch (field) {
    case NODE_INPUT:
    case NODE_OUTPUT:
      rc = read_string(&m, wire, &s);
      if (rc >= 0)
        rc = field == NODE_INPUT ? push((void **)&n->inputs, &n->n_in, &cap_in, sizeof s, &s)
                                 : push((void **)&n->outputs, &n->n_out, &cap_out, sizeof s, &s);
      if (rc < 0)
        free(s);
      break;
    case NODE_NAME: rc = read_string(&m, wire, &n->name); break;
    case NODE_OP_TYPE: rc = read_string(&m, wire, &n->op_type); break;
    case NODE_DOMAIN: rc = read_string(&m, wire, &n->domain); break;
    case NODE_ATTRIBUTE: {
      gs_attr a;
      rc = parse_attr(ld, &m, wire, &a);
      if (rc >= 0 && (rc = push((void **)&n->attrs, &n->n_attrs, &cap_attr, sizeof a, &a)) < 0)
        attr_clear(&a);
      break;
    }
    default: rc = gs_pb_skip(&m, wire); break;
    }
    if (rc < 0)
      break;
  }
  if (rc >= 0 && (!n->op_type || !*n->op_type))
    rc = gs_error(GS_EINVAL, "node %s has no op_type", n->name ? n->name : "(unnamed)");
  if (rc >= 0 && !n->domain && !(n->domain = strdup("")))
    rc = gs_error(GS_ENOMEM, "out of memory");
  if (rc < 0) {
    char where[400];
    snprintf(where, sizeof where, "%s", gs_error_detail());
    char name[64];
    snprintf(name, sizeof name, "%s", n->name ? n->name : "(unnamed)");
    node_clear(n);
    /* A node inside a graph attribute names itself: its name and reason
     * are kept whole rather than every enclosing node's. */
    if (strncmp(where, "node ", 5) == 0)
      return gs_error(rc, "%s", where);
    return gs_error(rc, "node %s: %s", name, where);
  }
  return 0;
}

static void value_info_clear(gs_value_info *v) {
  free(v->name);
  for (int i = 0; i < GS_MAX_DIMS; i++)
    free(v->dim_params[i]);
  memset(v, 0, sizeof *v);
}

static int parse_shape(gs_pb *r, int r_wire, gs_value_info *v) {
  gs_pb m;
  int rc = read_sub(r, r_wire, &m);
  if (rc < 0)
    return rc;
  v->rank = 0;
  uint32_t field;
  int wire;
  while ((rc = gs_pb_next(&m, &field, &wire)) == 1) {
    if (field != SHAPE_DIM) {
      if ((rc = gs_pb_skip(&m, wire)) < 0)
        return rc;
      continue;
    }
    if (v->rank == GS_MAX_DIMS)
      return gs_error(GS_EINVAL, "value %s has more than %d dimensions", v->name ? v->name : "?",
                      GS_MAX_DIMS);
    gs_pb d;
    if ((rc = read_sub(&m, wire, &d)) < 0)
      return rc;
    int k = v->rank++;
    v->dims[k] = -1;
    uint32_t f2;
    int w2;
    while ((rc = gs_pb_next(&d, &f2, &w2)) == 1) {
      uint64_t val;
      if (f2 == DIM_VALUE && (rc = read_varint(&d, w2, &val)) >= 0)
        v->dims[k] = (int64_t)val < 0 ? -1 : (int64_t)val;
      else if (f2 == DIM_PARAM)
        rc = read_string(&d, w2, &v->dim_params[k]);
      else if (f2 != DIM_VALUE)
        rc = gs_pb_skip(&d, w2);
      if (rc < 0)
        return rc;
    }
    if (rc < 0)
      return rc;
  }
  return rc;
}

/* A graph input or output. Inside a graph attribute (untyped_ok) the type
 * may be left out: it is then what the values are when planned. */
static int parse_value_info(gs_pb *r, int r_wire, bool untyped_ok, gs_value_info *v) {
  gs_pb m;
  int rc = read_sub(r, r_wire, &m);
  if (rc < 0)
    return rc;
  memset(v, 0, sizeof *v);
  v->rank = -1;
  bool tensor = false, typed = false;
  uint32_t field;
  int wire;
  while ((rc = gs_pb_next(&m, &field, &wire)) == 1) {
    if (field == VALUE_NAME) {
      rc = read_string(&m, wire, &v->name);
    } else if (field == VALUE_TYPE) {
      typed = true;
      gs_pb type;
      rc = read_sub(&m, wire, &type);
      uint32_t f2;
      int w2;
      while (rc >= 0 && (rc = gs_pb_next(&type, &f2, &w2)) == 1) {
        if (f2 != TYPE_TENSOR) {
          rc = gs_pb_skip(&type, w2);
          continue;
        }
        tensor = true;
        gs_pb tt;
        rc = read_sub(&type, w2, &tt);
        uint32_t f3;
        int w3;
        while (rc >= 0 && (rc = gs_pb_next(&tt, &f3, &w3)) == 1) {
          uint64_t et;
          if (f3 == TTYPE_ELEM_TYPE && (rc = read_varint(&tt, w3, &et)) >= 0)
            v->dtype = gs_dtype_from_onnx((int)et), v->onnx_type = (int)et;
          else if (f3 == TTYPE_SHAPE)
            rc = parse_shape(&tt, w3, v);
          else if (f3 != TTYPE_ELEM_TYPE)
            rc = gs_pb_skip(&tt, w3);
        }
      }
    } else {
      rc = gs_pb_skip(&m, wire);
    }
    if (rc < 0)
      break;
  }
  if (rc >= 0 && !v->name)
    rc = gs_error(GS_EINVAL, "graph input or output without a name");
  else if (rc >= 0 && !typed && untyped_ok)
    return 0;
  else if (rc >= 0 && !tensor)
    rc = gs_error(GS_ENOTSUP, "graph value %s is not a tensor (sequences, maps and optionals are "
                              "not supported)", v->name);
  else if (rc >= 0 && v->dtype == GS_DT_INVALID)
    rc = gs_error(GS_ENOTSUP, "graph value %s has type %s (ONNX data type %d), which gpusrv "
                              "does not support",
                  v->name, gs_onnx_type_name(v->onnx_type), v->onnx_type);
  if (rc < 0)
    value_info_clear(v);
  return rc < 0 ? rc : 0;
}

/* ---- graph and model --------------------------------------------------------------- */

static int parse_graph(const loader *ld, gs_pb *r, int r_wire, gs_model *m) {
  gs_pb g;
  int rc = read_sub(r, r_wire, &g);
  if (rc < 0)
    return rc;
  int cap_nodes = 0, cap_inits = 0, cap_in = 0, cap_out = 0;
  gs_value_info *all_inputs = NULL;
  int n_all_inputs = 0;
  uint32_t field;
  int wire;
  while ((rc = gs_pb_next(&g, &field, &wire)) == 1) {
    switch (field) {
    case GRAPH_NODE: {
      gs_node n;
      if ((rc = parse_node(ld, &g, wire, &n)) >= 0 &&
          (rc = push((void **)&m->nodes, &m->n_nodes, &cap_nodes, sizeof n, &n)) < 0)
        node_clear(&n);
      break;
    }
    case GRAPH_NAME: rc = read_string(&g, wire, &m->graph_name); break;
    case GRAPH_INITIALIZER: {
      gs_const_tensor t;
      if ((rc = parse_tensor(ld, &g, wire, &t)) >= 0 &&
          (rc = push((void **)&m->inits, &m->n_inits, &cap_inits, sizeof t, &t)) < 0)
        const_tensor_clear(&t);
      break;
    }
    case GRAPH_INPUT:
    case GRAPH_OUTPUT: {
      gs_value_info v;
      if ((rc = parse_value_info(&g, wire, ld->depth > 0, &v)) < 0)
        break;
      rc = field == GRAPH_INPUT ? push((void **)&all_inputs, &n_all_inputs, &cap_in, sizeof v, &v)
                                : push((void **)&m->outputs, &m->n_outputs, &cap_out, sizeof v, &v);
      if (rc < 0)
        value_info_clear(&v);
      break;
    }
    case GRAPH_SPARSE_INITIALIZER:
      rc = gs_error(GS_ENOTSUP, "sparse initializers are not supported");
      break;
    default: rc = gs_pb_skip(&g, wire); break;
    }
    if (rc < 0)
      break;
  }
  /* Index initializers; inputs that are initializers too are not inputs. */
  for (int i = 0; rc >= 0 && i < m->n_inits; i++) {
    if (gs_strmap_get(&m->init_index, m->inits[i].name) >= 0)
      rc = gs_error(GS_EINVAL, "initializer %s is defined twice", m->inits[i].name);
    else
      rc = gs_strmap_put(&m->init_index, m->inits[i].name, i);
  }
  int cap_keep = 0;
  for (int i = 0; i < n_all_inputs; i++) {
    if (rc >= 0 && gs_strmap_get(&m->init_index, all_inputs[i].name) < 0) {
      if ((rc = push((void **)&m->inputs, &m->n_inputs, &cap_keep, sizeof all_inputs[i],
                     &all_inputs[i])) >= 0)
        continue;
    }
    value_info_clear(&all_inputs[i]);
  }
  free(all_inputs);
  return rc < 0 ? rc : 0;
}

void gs_model_free(gs_model *m) {
  if (!m)
    return;
  for (int i = 0; i < m->n_nodes; i++)
    node_clear(&m->nodes[i]);
  free(m->nodes);
  for (int i = 0; i < m->n_inits; i++)
    const_tensor_clear(&m->inits[i]);
  free(m->inits);
  for (int i = 0; i < m->n_inputs; i++)
    value_info_clear(&m->inputs[i]);
  free(m->inputs);
  for (int i = 0; i < m->n_outputs; i++)
    value_info_clear(&m->outputs[i]);
  free(m->outputs);
  gs_strmap_free(&m->init_index);
  free(m->path);
  free(m->producer);
  free(m->graph_name);
  free(m);
}

/* Checks of the whole model: model_check.c. */
int gs__model_check(gs_model *m, bool check_support);

/* The default domain's opset on every node, those of subgraphs included. */
static void stamp_opset(gs_model *m, int64_t opset) {
  m->opset = opset;
  for (int i = 0; i < m->n_nodes; i++) {
    gs_node *n = &m->nodes[i];
    n->opset = opset;
    for (int a = 0; a < n->n_attrs; a++)
      if (n->attrs[a].type == GS_ATTR_GRAPH && n->attrs[a].g)
        stamp_opset(n->attrs[a].g, opset);
  }
}

int gs_model_load_bytes(const void *data, size_t len, const char *dir, gs_model **out) {
  return gs_model_load_bytes_ex(data, len, dir, true, out);
}

int gs_model_load_bytes_ex(const void *data, size_t len, const char *dir, bool check_support,
                           gs_model **out) {
  gs_model *m = calloc(1, sizeof *m);
  if (!m)
    return gs_error(GS_ENOMEM, "out of memory loading a model");
  gs_strmap_init(&m->init_index);
  loader ld = {.dir = dir};
  gs_pb r = gs_pb_init(data, len);
  bool has_graph = false, has_opset = false;
  int rc;
  uint32_t field;
  int wire;
  while ((rc = gs_pb_next(&r, &field, &wire)) == 1) {
    uint64_t v;
    switch (field) {
    case MODEL_IR_VERSION:
      rc = read_varint(&r, wire, &v);
      m->ir_version = (int64_t)v;
      break;
    case MODEL_PRODUCER: rc = read_string(&r, wire, &m->producer); break;
    case MODEL_GRAPH:
      if (has_graph) {
        rc = gs_error(GS_EINVAL, "the model has two graphs");
        break;
      }
      has_graph = true;
      rc = parse_graph(&ld, &r, wire, m);
      break;
    case MODEL_OPSET: {
      gs_pb o;
      char *domain = NULL;
      int64_t version = -1;
      rc = read_sub(&r, wire, &o);
      uint32_t f2;
      int w2;
      while (rc >= 0 && (rc = gs_pb_next(&o, &f2, &w2)) == 1) {
        if (f2 == OPSET_DOMAIN)
          rc = read_string(&o, w2, &domain);
        else if (f2 == OPSET_VERSION && (rc = read_varint(&o, w2, &v)) >= 0)
          version = (int64_t)v;
        else if (f2 != OPSET_VERSION)
          rc = gs_pb_skip(&o, w2);
      }
      if (rc >= 0 && (!domain || !*domain || strcmp(domain, "ai.onnx") == 0)) {
        m->opset = version;
        has_opset = true;
      }
      free(domain);
      break;
    }
    case MODEL_FUNCTIONS:
      rc = gs_error(GS_ENOTSUP, "model-local functions are not supported");
      break;
    default: rc = gs_pb_skip(&r, wire); break;
    }
    if (rc < 0)
      break;
  }
  if (rc >= 0 && !has_graph)
    rc = gs_error(GS_EINVAL, "not an ONNX model: no graph (is the file an ONNX ModelProto?)");
  else if (rc >= 0 && !has_opset)
    rc = gs_error(GS_EINVAL, "the model imports no opset of the default ONNX domain");
  else if (rc >= 0 && (m->opset < GS_OPSET_MIN || m->opset > GS_OPSET_MAX))
    rc = gs_error(GS_ENOTSUP, "the model uses opset %lld; gpusrv supports opsets %d to %d",
                  (long long)m->opset, GS_OPSET_MIN, GS_OPSET_MAX);
  if (rc >= 0) {
    stamp_opset(m, m->opset);
    rc = gs__model_check(m, check_support);
  }
  if (rc < 0) {
    gs_model_free(m);
    return rc;
  }
  *out = m;
  return GS_OK;
}

int gs_model_load(const char *path, gs_model **out) { return gs_model_load_ex(path, true, out); }

int gs_model_load_ex(const char *path, bool check_support, gs_model **out) {
  void *data;
  size_t len;
  int read_rc = gs_read_whole_file(path, &data, &len);
  if (read_rc < 0)
    return read_rc;
  char *dir = strdup(path);
  if (!dir) {
    free(data);
    return gs_error(GS_ENOMEM, "out of memory");
  }
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  else
    strcpy(dir, ".");
  int rc = gs_model_load_bytes_ex(data, len, dir, check_support, out);
  free(data);
  free(dir);
  if (rc < 0)
    return gs_error_prefix(rc, path);
  (*out)->path = strdup(path);
  return GS_OK;
}

const gs_attr *gs_node_attr(const gs_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0)
      return &n->attrs[i];
  return NULL;
}

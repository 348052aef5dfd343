/* model.h - a loaded model: the graph as the file describes it (nodes,
 * attributes, constant tensors, declared inputs and outputs), before any
 * shape is fixed. Plans (plan.h) are built from it per input shape. */
#ifndef GS_ENGINE_MODEL_H
#define GS_ENGINE_MODEL_H

#include "base/strmap.h"
#include "hal/op/tensor.h"

/* A tensor whose bytes are known at load time, in host memory it owns. */
typedef struct gs_const_tensor {
  char *name;
  gs_dtype dtype;
  gs_shape shape;
  void *data; /* gs_shape_numel * gs_dtype_size bytes; may be NULL when empty */
  size_t bytes;
} gs_const_tensor;

typedef enum {
  GS_ATTR_UNDEFINED,
  GS_ATTR_FLOAT,
  GS_ATTR_INT,
  GS_ATTR_STRING,
  GS_ATTR_TENSOR,
  GS_ATTR_FLOATS,
  GS_ATTR_INTS,
  GS_ATTR_STRINGS,
  GS_ATTR_GRAPH,
  GS_ATTR_UNSUPPORTED, /* lists of graphs, sparse tensors, type protos: refused by every op */
} gs_attr_type;

typedef struct gs_model gs_model;

typedef struct gs_attr {
  char *name;
  gs_attr_type type;
  float f;
  int64_t i;
  char *s;            /* NUL-terminated; STRING */
  gs_const_tensor *t; /* TENSOR */
  /* GRAPH (If's branches): a model of its own, whose inputs are followed
   * by the values it reads from the graphs around it (captured: declared
   * with no type and no shape), which the loader adds to the node's own
   * inputs after those the file gives. */
  gs_model *g;
  int n;              /* FLOATS, INTS, STRINGS: count */
  float *floats;
  int64_t *ints;
  char **strings;
  int n_strings; /* strings held, whatever the type says (for freeing) */
} gs_attr;

typedef struct gs_node {
  char *name;    /* may be "" in the file; the loader names it "<op>_<index>" then */
  char *op_type;
  char *domain;  /* "" for the default ONNX domain */
  int n_in, n_out;
  /* "" marks an omitted optional input. The last n_captured are not in
   * the file: what the node's graph attributes read from around them. */
  char **inputs;
  int n_captured;
  char **outputs;
  int n_attrs;
  gs_attr *attrs;
  /* The model's opset of the default domain, for ops whose defaults changed
   * between opsets (DFT's axis); the loader sets it on subgraphs' nodes too. */
  int64_t opset;
} gs_node;

/* A declared graph input or output. dims[i] < 0 is a symbolic or unknown
 * dimension, named by dim_params[i] where the file names it. */
typedef struct gs_value_info {
  char *name;
  gs_dtype dtype;
  int onnx_type; /* the file's element type, kept for messages when dtype is invalid */
  int rank; /* -1: not declared */
  int64_t dims[GS_MAX_DIMS];
  char *dim_params[GS_MAX_DIMS];
} gs_value_info;

struct gs_model {
  char *path;
  int64_t ir_version;
  int64_t opset; /* of the default domain */
  char *producer;
  char *graph_name;
  int n_nodes;
  gs_node *nodes; /* in file order; gs_model_load() checks that a topological order exists */
  int n_inits;
  gs_const_tensor *inits;
  int n_inputs; /* graph inputs that are not initializers */
  gs_value_info *inputs;
  int n_outputs;
  gs_value_info *outputs;
  gs_strmap init_index; /* initializer name -> index */
  int n_captured; /* of a graph attribute: the last inputs, read from around it */
};

/* Loads an ONNX file. Every op and attribute is checked against what gpusrv
 * supports: a model using anything else is refused, naming every unsupported
 * op and its nodes. A truncated, corrupt or hostile file gives GS_EINVAL with
 * the reason. The caller frees the model with gs_model_free(). */
int gs_model_load(const char *path, gs_model **out);
/* The same from bytes in memory (`dir` resolves external data; may be NULL). */
int gs_model_load_bytes(const void *data, size_t len, const char *dir, gs_model **out);
void gs_model_free(gs_model *m);
/* The same, optionally without refusing unsupported ops and attributes (for
 * `gpusrv model inspect`, which lists them); the file must still be a
 * well-formed graph. */
int gs_model_load_ex(const char *path, bool check_support, gs_model **out);
int gs_model_load_bytes_ex(const void *data, size_t len, const char *dir, bool check_support,
                           gs_model **out);
/* 0 when every op and attribute is supported, else GS_ENOTSUP naming them. */
int gs_model_check_support(const gs_model *m);

/* Attribute lookups for op definitions; NULL when absent. */
const gs_attr *gs_node_attr(const gs_node *n, const char *name);

/* Minimum and maximum opset of the default domain gpusrv implements. */
#define GS_OPSET_MIN 13
#define GS_OPSET_MAX 25

#endif

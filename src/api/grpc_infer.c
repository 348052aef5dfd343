/* grpc_infer.c - ModelInferRequest into a gs_infer_request, and a finished
 * request into ModelInferResponse: raw tensors read in place and written
 * as raw_output_contents (what Triton sends and tritonclient reads), typed
 * contents converted to the model's datatype. The checks of names, types
 * and shapes are HTTP's (gs_kserve_check_input). */
#include "api/grpc_call.h"

#include "api/image_input.h"
#include "api/kserve.h"
#include "api/kserve_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An empty tensor's data: any pointer but NULL, which means "not given". */
static const char no_bytes[1];

/* An integer parameter (int64_param or uint64_param); false when the
 * parameter holds something else or does not fit. */
static bool int_parameter(const Inference__InferParameter *p, int64_t *out) {
  if (!p)
    return false;
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM) {
    *out = p->int64_param;
    return true;
  }
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM &&
      p->uint64_param <= INT64_MAX) {
    *out = (int64_t)p->uint64_param;
    return true;
  }
  return false;
}

/* The request's "priority" and "timeout" parameters, as HTTP reads them. */
static int read_parameters(const Inference__ModelInferRequest *q, gs_infer_request *r, char *why,
                           size_t whylen) {
  for (size_t i = 0; i < q->n_parameters; i++) {
    int64_t v = 0;
    bool is_int = int_parameter(q->parameters[i]->value, &v);
    if (gs_kserve_apply_parameter(r, q->parameters[i]->key, is_int, v, why, whylen) < 0)
      return 400;
  }
  return 0;
}

/* How many values the typed list for datatype dt holds; -1 where dt has no list. */
static int64_t typed_count(const Inference__InferTensorContents *t, gs_dtype dt) {
  switch (dt) {
  case GS_DT_BOOL:
    return (int64_t)t->n_bool_contents;
  case GS_DT_INT8:
  case GS_DT_INT16:
  case GS_DT_INT32:
    return (int64_t)t->n_int_contents;
  case GS_DT_UINT8:
  case GS_DT_UINT16:
  case GS_DT_UINT32:
    return (int64_t)t->n_uint_contents;
  case GS_DT_INT64:
    return (int64_t)t->n_int64_contents;
  case GS_DT_UINT64:
    return (int64_t)t->n_uint64_contents;
  case GS_DT_FLOAT32:
    return (int64_t)t->n_fp32_contents;
  case GS_DT_FLOAT64:
    return (int64_t)t->n_fp64_contents;
  case GS_DT_BYTES:
    return (int64_t)t->n_bytes_contents;
  default:
    return -1;
  }
}

/* Typed contents of a non-BYTES input converted to its datatype, into buf
 * (count values: typed_count has checked that the list holds that many). */
#define CONVERT(list, ctype, lo, hi)                                                            \
  for (int64_t i = 0; i < count; i++) {                                                         \
    if ((int64_t)t->list[i] < (lo) || (int64_t)t->list[i] > (hi)) {                             \
      snprintf(why, whylen, "input '%s': value %lld is out of range for %s", name,              \
               (long long)t->list[i], gs_kserve_dtype_name(dt));                                \
      return 400;                                                                               \
    }                                                                                           \
    ((ctype *)buf)[i] = (ctype)t->list[i];                                                      \
  }

#define COPY(list, ctype)                                                                        \
  for (int64_t i = 0; i < count; i++)                                                           \
    ((ctype *)buf)[i] = (ctype)t->list[i];

static int typed_numbers(const Inference__InferTensorContents *t, gs_dtype dt, int64_t count,
                         const char *name, char *buf, char *why, size_t whylen) {
  switch (dt) {
  case GS_DT_BOOL: COPY(bool_contents, uint8_t) break;
  case GS_DT_INT8: CONVERT(int_contents, int8_t, INT8_MIN, INT8_MAX) break;
  case GS_DT_INT16: CONVERT(int_contents, int16_t, INT16_MIN, INT16_MAX) break;
  case GS_DT_INT32: COPY(int_contents, int32_t) break;
  case GS_DT_UINT8: CONVERT(uint_contents, uint8_t, 0, UINT8_MAX) break;
  case GS_DT_UINT16: CONVERT(uint_contents, uint16_t, 0, UINT16_MAX) break;
  case GS_DT_UINT32: COPY(uint_contents, uint32_t) break;
  case GS_DT_INT64: COPY(int64_contents, int64_t) break;
  case GS_DT_UINT64: COPY(uint64_contents, uint64_t) break;
  case GS_DT_FLOAT32: COPY(fp32_contents, float) break;
  case GS_DT_FLOAT64: COPY(fp64_contents, double) break;
  default: break; /* typed_count refused every other datatype */
  }
  return 0;
}

static int typed_input(const Inference__InferTensorContents *t, gs_dtype dt, int64_t count,
                       const char *name, void **out, char *why, size_t whylen) {
  int64_t n = typed_count(t, dt);
  if (n < 0) {
    snprintf(why, whylen, "input '%s': %s data travel only in raw_input_contents", name,
             gs_kserve_dtype_name(dt));
    return 400;
  }
  if (n != count) { /* before allocating what the shape claims */
    snprintf(why, whylen, "input '%s': its contents hold %lld %s values, its shape %lld", name,
             (long long)n, gs_kserve_dtype_name(dt), (long long)count);
    return 400;
  }
  size_t bytes = (size_t)count * gs_dtype_size(dt);
  char *buf = malloc(bytes ? bytes : 1);
  if (!buf) {
    snprintf(why, whylen, "out of memory for input '%s'", name);
    return 500;
  }
  *out = buf;
  if (dt != GS_DT_BYTES)
    return typed_numbers(t, dt, count, name, buf, why, whylen);
  gs_bytes_ref *recs = (gs_bytes_ref *)buf; /* into the message, which outlives the request */
  for (int64_t i = 0; i < count; i++) /* protobuf-c leaves an empty entry's data NULL */
    recs[i] = (gs_bytes_ref){.data = t->bytes_contents[i].data
                                         ? (const char *)t->bytes_contents[i].data : no_bytes,
                             .len = t->bytes_contents[i].len};
  return 0;
}

/* Input k of the request, at model index idx with `count` values. */
static int input_data(const Inference__ModelInferRequest *q, size_t k, int idx, int64_t count,
                      gs_infer_request *r, char *why, size_t whylen) {
  const Inference__ModelInferRequest__InferInputTensor *in = q->inputs[k];
  gs_dtype dt = r->given[idx]; /* the model's, or an image form */
  if (q->n_raw_input_contents) {
    const ProtobufCBinaryData *raw = &q->raw_input_contents[k];
    if (dt == GS_DT_BYTES) {
      int rc = gs_kserve_strings_from_binary((const char *)raw->data, raw->len, count,
                                             &r->owned[idx], in->name, why, whylen);
      if (rc < 0)
        return rc == GS_ENOMEM ? 500 : 400;
      r->inputs[idx] = r->owned[idx];
      return 0;
    }
    size_t bytes = (size_t)count * gs_dtype_size(dt);
    if (raw->len != bytes) {
      snprintf(why, whylen, "input '%s': raw_input_contents holds %zu bytes, its shape and "
               "datatype need %zu", in->name, raw->len, bytes);
      return 400;
    }
    r->inputs[idx] = raw->len ? (const void *)raw->data : no_bytes;
    return 0;
  }
  if (!in->contents) {
    snprintf(why, whylen, "input '%s' has neither raw_input_contents nor contents", in->name);
    return 400;
  }
  int st = typed_input(in->contents, dt, count, in->name, &r->owned[idx], why, whylen);
  r->inputs[idx] = r->owned[idx];
  return st;
}

static int requested_outputs(const Inference__ModelInferRequest *q, gs_infer_request *r,
                             char *why, size_t whylen) {
  const gs_model *model = r->version->model;
  for (int i = 0; i < model->n_outputs; i++)
    r->send[i] = r->binary[i] = q->n_outputs == 0;
  for (size_t k = 0; k < q->n_outputs; k++) {
    int idx = gs_kserve_output_index(r, q->outputs[k]->name, why, whylen);
    if (idx < 0)
      return 400;
    r->send[idx] = r->binary[idx] = true;
  }
  return 0;
}

int gs_grpc_infer_parse(const Inference__ModelInferRequest *q, size_t message_bytes,
                        gs_infer_request *r, char *why, size_t whylen) {
  const gs_model *model = r->version->model;
  r->batch = 1;
  int st = 0;
  if (model->n_inputs > GS_REQ_MAX_IO || model->n_outputs > GS_REQ_MAX_IO) {
    snprintf(why, whylen, "models with more than %d inputs or outputs are not served yet",
             GS_REQ_MAX_IO);
    return 400;
  }
  if (q->id[0]) {
    snprintf(r->id, sizeof r->id, "%s", q->id);
    r->has_id = true;
  }
  if ((st = read_parameters(q, r, why, whylen)))
    return st;
  if (q->n_raw_input_contents && q->n_raw_input_contents != q->n_inputs) {
    snprintf(why, whylen, "raw_input_contents has %zu entries for %zu inputs: give one per "
             "input or none", q->n_raw_input_contents, q->n_inputs);
    return 400;
  }
  for (size_t k = 0; k < q->n_inputs; k++) {
    const Inference__ModelInferRequest__InferInputTensor *in = q->inputs[k];
    int64_t count;
    int idx = gs_kserve_check_input(r, in->name, in->datatype, in->shape,
                                    in->n_shape > 64 ? -1 : (int)in->n_shape, k == 0,
                                    message_bytes, &count, why, whylen);
    if (idx < 0)
      return 400;
    if ((st = input_data(q, k, idx, count, r, why, whylen)))
      return st;
  }
  for (int i = 0; i < model->n_inputs; i++)
    if (!r->inputs[i]) {
      snprintf(why, whylen, "input '%s' is missing", model->inputs[i].name);
      return 400;
    }
  for (int i = 0; i < model->n_inputs; i++)
    if (r->image[i] && (st = gs_image_input_convert(r, i, why, whylen)))
      return st;
  return requested_outputs(q, r, why, whylen);
}

grpc_byte_buffer *gs_grpc_infer_encode(const gs_infer_request *r, bool stream, char *why,
                                       size_t whylen) {
  const gs_model *model = r->version->model;
  Inference__ModelInferResponse res = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  Inference__ModelInferResponse__InferOutputTensor tensors[GS_REQ_MAX_IO], *list[GS_REQ_MAX_IO];
  ProtobufCBinaryData raw[GS_REQ_MAX_IO];
  int64_t shapes[GS_REQ_MAX_IO][GS_MAX_DIMS];
  char *strings[GS_REQ_MAX_IO] = {0}; /* BYTES outputs in their binary form */
  char version[32];
  snprintf(version, sizeof version, "%lld", (long long)r->version->number);
  res.model_name = r->model->name;
  res.model_version = version;
  if (r->has_id)
    res.id = (char *)r->id;
  grpc_byte_buffer *b = NULL;
  size_t n = 0;
  for (int i = 0; i < model->n_outputs; i++) {
    if (!r->send[i])
      continue;
    const gs_plan_value_info *info = &r->out_info[i];
    Inference__ModelInferResponse__InferOutputTensor *t = &tensors[n];
    inference__model_infer_response__infer_output_tensor__init(t);
    t->name = (char *)info->name;
    t->datatype = (char *)gs_kserve_dtype_name(info->dtype);
    t->n_shape = (size_t)info->shape.rank;
    t->shape = shapes[n];
    for (int d = 0; d < info->shape.rank; d++)
      shapes[n][d] = info->shape.dims[d];
    raw[n] = (ProtobufCBinaryData){.len = info->bytes, .data = r->outputs[i]};
    if (info->dtype == GS_DT_BYTES) {
      int64_t numel = gs_shape_numel(&info->shape);
      size_t size = gs_kserve_strings_binary_size(r->outputs[i], numel);
      if (size == SIZE_MAX) {
        snprintf(why, whylen, "output '%s' holds a string longer than 4 GiB", info->name);
        goto done;
      }
      if (!(strings[n] = malloc(size ? size : 1))) {
        snprintf(why, whylen, "out of memory encoding output '%s'", info->name);
        goto done;
      }
      gs_kserve_strings_to_binary(r->outputs[i], numel, strings[n]);
      raw[n] = (ProtobufCBinaryData){.len = size, .data = (uint8_t *)strings[n]};
    }
    list[n++] = t;
  }
  res.n_outputs = res.n_raw_output_contents = n;
  res.outputs = list;
  res.raw_output_contents = raw;
  if (stream) {
    Inference__ModelStreamInferResponse sr = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    sr.infer_response = &res;
    b = gs_grpc_pack(&sr.base);
  } else {
    b = gs_grpc_pack(&res.base);
  }
  if (!b)
    snprintf(why, whylen, "out of memory encoding the reply");
done:
  for (size_t i = 0; i < n + 1 && i < GS_REQ_MAX_IO; i++)
    free(strings[i]);
  return b;
}

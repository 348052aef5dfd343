/* infer_request.h - one inference request between the protocol (kserve.c),
 * the dynamic batcher (batcher.c) and the server (server.c). */
#ifndef GS_API_INFER_REQUEST_H
#define GS_API_INFER_REQUEST_H

#include "api/repository.h"

#define GS_REQ_MAX_IO 8

typedef struct gs_infer_request gs_infer_request;

/* An image of a request's image input where the device resizes: decoded
 * (or seen where the request's pixels are), or, where that was too large
 * to hold while the request waits, already made its row by the CPU
 * (as_is). owned: pixels the request frees. */
typedef struct gs_request_image {
  gs_image img;
  bool as_is, owned;
} gs_request_image;

struct gs_infer_request {
  gs_served_model *model;
  gs_served_version *version;
  char id[128];
  bool has_id;
  int priority;        /* 1 is the highest; 0: the model's default */
  uint64_t timeout_us; /* in the queue; 0: the model's default (or none) */
  bool delayed;        /* timed out under timeout_action DELAY */
  int64_t batch;       /* rows along the batch dimension (1 without batching) */
  gs_shape shapes[GS_REQ_MAX_IO];
  /* Each input's datatype as sent: the model's, or an image form
   * (image_input.h) until gs_image_input_convert makes it the model's. */
  gs_dtype given[GS_REQ_MAX_IO];
  /* Sent in an image form, not yet made the model's tensor. */
  bool image[GS_REQ_MAX_IO];
  const void *inputs[GS_REQ_MAX_IO]; /* into the request body, or owned[] */
  void *owned[GS_REQ_MAX_IO];
  /* Where the model's device resizes (gs_served_model.resize_on_device):
   * the image input's images (image_input.h), n_decoded of them, for the
   * batcher to pack; NULL otherwise. */
  gs_request_image *decoded[GS_REQ_MAX_IO];
  int64_t n_decoded[GS_REQ_MAX_IO];
  bool send[GS_REQ_MAX_IO], binary[GS_REQ_MAX_IO]; /* which outputs, and how */
  /* Results, filled by the batcher: outputs (malloc'd) or status + error. */
  void *outputs[GS_REQ_MAX_IO];
  bool output_borrowed[GS_REQ_MAX_IO]; /* into the batcher's staging: valid in done() only */
  gs_plan_value_info out_info[GS_REQ_MAX_IO];
  int status; /* 0 while pending; 200 or an HTTP error status */
  char error[600];
  uint64_t t_arrive, t_batch; /* when it was queued, when its batch started */
  /* Called from the batcher's thread when the request is finished. */
  void (*done)(gs_infer_request *r, void *ctx);
  void *ctx;
  gs_infer_request *next; /* in the batcher's queue */
};

/* Frees what the request owns (inputs it copied, outputs), not the struct. */
void gs_infer_request_clear(gs_infer_request *r);

#endif

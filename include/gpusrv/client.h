/* gpusrv/client.h - the C client of a gpusrv daemon: health and metadata,
 * models, inference, jobs, devices, bookings, usage and tenants, over the
 * daemon's HTTP API (docs/api.md).
 *
 *   gs_client *c;
 *   if (gs_client_open("http://127.0.0.1:8000", NULL, &c) != GS_OK) ...
 *   float x[64] = {0}, probs[10];
 *   gs_client_tensor in = {.name = "pixels", .datatype = "FP32", .rank = 2,
 *                          .shape = {1, 64}, .data = x, .bytes = sizeof x};
 *   gs_client_tensor out = {.name = "probs", .data = probs, .bytes = sizeof probs};
 *   if (gs_client_infer(c, "digits", NULL, &in, 1, &out, 1) != GS_OK)
 *     fprintf(stderr, "%s\n", gs_client_last_error(c));
 *   gs_client_close(c);
 *
 * Every call returns GS_OK (0) or a negative GS_E code (gpusrv/errors.h);
 * gs_client_last_error() then says why, with the daemon's own message
 * where it sent one. The HTTP status maps to codes: 400 GS_EINVAL,
 * 401/403 GS_EPERM, 404 GS_ENOENT, 409 GS_ESTATE, 413 GS_ERANGE,
 * 503 GS_EBUSY, other failures GS_EIO.
 *
 * A client is safe to use from several threads at once; it keeps its
 * connections open between calls (libcurl), one per concurrent caller.
 *
 * Memory: text the library returns (char **json and the like) is malloc'd
 * and the caller frees it with free(). Inference outputs go where the
 * caller says (see gs_client_tensor). */
#ifndef GPUSRV_CLIENT_H
#define GPUSRV_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpusrv/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GS_CLIENT_API __attribute__((visibility("default")))
#else
#define GS_CLIENT_API
#endif

typedef struct gs_client gs_client;

/* Opens a client of the daemon at `url` (NULL: GPUSRV_URL, else
 * http://127.0.0.1:8000). The bearer token is `token`, else GPUSRV_TOKEN,
 * else the daemon's admin token file if this user can read it
 * (GPUSRV_TOKEN_FILE, else /var/lib/gpusrv/admin.token: the installed
 * service's), else none. For https:// URLs, GPUSRV_CA_FILE names the CA
 * bundle (PEM) that signed the daemon's certificate (else the system's),
 * and GPUSRV_CLIENT_CERT and GPUSRV_CLIENT_KEY this client's certificate
 * and key, for a daemon started with --tls-client-ca. Nothing is sent until
 * the first call. */
GS_CLIENT_API int gs_client_open(const char *url, const char *token, gs_client **out);
GS_CLIENT_API void gs_client_close(gs_client *c);
/* Why the calling thread's last failed call failed, if that call was on
 * `c` (NULL: a failed gs_client_open); "" otherwise. Kept per thread, so
 * that threads sharing a client never see each other's errors. */
GS_CLIENT_API const char *gs_client_last_error(const gs_client *c);
/* The URL the client talks to. */
GS_CLIENT_API const char *gs_client_url(const gs_client *c);

/* ---- health and metadata ---------------------------------------------------------------- */

/* GS_OK when the daemon is live (ready: every model loaded); GS_EBUSY when
 * it answers but is not ready; GS_EIO when it cannot be reached. */
GS_CLIENT_API int gs_client_live(gs_client *c);
GS_CLIENT_API int gs_client_ready(gs_client *c);
/* GET /v2: name, version, extensions (JSON). */
GS_CLIENT_API int gs_client_server_metadata(gs_client *c, char **json);

/* ---- models ---------------------------------------------------------------------------- */

/* The repository index: [{name, version, state, reason}] (JSON). */
GS_CLIENT_API int gs_client_models(gs_client *c, char **json);
/* Loads or unloads a model (an admin's token). */
GS_CLIENT_API int gs_client_model_load(gs_client *c, const char *model);
GS_CLIENT_API int gs_client_model_unload(gs_client *c, const char *model);
/* A model's metadata or configuration (JSON); version NULL: the newest. */
GS_CLIENT_API int gs_client_model_metadata(gs_client *c, const char *model, const char *version,
                                           char **json);
GS_CLIENT_API int gs_client_model_config(gs_client *c, const char *model, const char *version,
                                         char **json);
/* GS_OK when ready, GS_EBUSY when not (yet), GS_ENOENT when unknown. */
GS_CLIENT_API int gs_client_model_ready(gs_client *c, const char *model, const char *version);
/* Triton's statistics of a model (NULL: every model), JSON. */
GS_CLIENT_API int gs_client_model_stats(gs_client *c, const char *model, char **json);

/* ---- inference -------------------------------------------------------------------------- */

#define GS_CLIENT_MAX_DIMS 8

/* One tensor. Inputs: name, datatype (KServe's: "FP32", "INT64", "BYTES",
 * ...), shape, and `bytes` of `data` in row-major order (BYTES: each
 * element a 4-byte little-endian length and its bytes). The data are sent
 * as they are, straight from `data`, without a copy.
 *
 * Outputs: name every one (those are asked for), or none (the model's
 * outputs, in order; a model with fewer fails GS_ENOENT). With `data` set,
 * the output is written there and `bytes` is its capacity: a larger output
 * fails the call with GS_ERANGE (`bytes` then says how many it needs).
 * With `data` NULL the library allocates it (free() it). Either way the
 * call fills datatype, rank, shape and bytes. */
typedef struct gs_client_tensor {
  const char *name;
  char datatype[16];
  int rank;
  int64_t shape[GS_CLIENT_MAX_DIMS];
  void *data;
  size_t bytes;
} gs_client_tensor;

/* Runs the model on the inputs and fills the outputs asked for (n_outputs
 * may be 0). Tensors travel as binary data (Triton's binary tensor
 * extension); version NULL: the newest. */
GS_CLIENT_API int gs_client_infer(gs_client *c, const char *model, const char *version,
                                  const gs_client_tensor *inputs, int n_inputs,
                                  gs_client_tensor *outputs, int n_outputs);

/* ---- jobs ----------------------------------------------------------------------------- */

/* What `gpusrv submit` takes. Zero/NULL fields take the daemon's defaults. */
typedef struct gs_client_job_spec {
  const char *const *argv; /* the command, NULL-terminated */
  const char *name;
  int gpus;                /* whole devices */
  const char *gpu_mem;     /* instead: memory on one device ("16G") ... */
  int gpu_share;           /* ... and this percentage of its compute (0-100) */
  double cpus;
  const char *mem;         /* host memory limit ("4G") */
  const char *time_limit;  /* "90s", "2h", "HH:MM:SS", "D-HH:MM:SS" */
  int priority;
  bool requeue;
  const char *const *env;  /* "NAME=VALUE", NULL-terminated */
  const char *chdir;       /* in a container: a directory inside it (default /job) */
  /* In a container: a local image the server allows, and bind mounts
   * "SRC:DST[:ro]" (NULL-terminated; may be NULL). NULL image: a process. */
  const char *image;
  const char *const *mounts;
  const char *network;     /* in a container: "none" (NULL) or "host", where allowed */
  bool writable_root;      /* in a container: its root filesystem writable */
  /* nodes > 0: a job on that many nodes, which the daemon hands to Slurm
   * (where it is set up to), with GPUs and tasks per node (0: none, 1), a
   * partition (NULL: Slurm's default), and srun --mpi=pmix for MPI. */
  int nodes, gpus_per_node, ntasks_per_node;
  const char *partition;
  bool mpi;
} gs_client_job_spec;

/* Queues a job; *id gets its number, *json (if not NULL) the job. */
GS_CLIENT_API int gs_client_job_submit(gs_client *c, const gs_client_job_spec *spec, int64_t *id,
                                       char **json);
/* The tenant's jobs (all: finished ones too), one job (with its events). */
GS_CLIENT_API int gs_client_jobs(gs_client *c, bool all, char **json);
/* The local images the tenant may run jobs in: {"images": [{"name", "id",
 * "size", "created"}]}. */
GS_CLIENT_API int gs_client_images(gs_client *c, char **json);
GS_CLIENT_API int gs_client_job(gs_client *c, int64_t id, char **json);
GS_CLIENT_API int gs_client_job_cancel(gs_client *c, int64_t id);
/* Waits until job `id` has finished (timeout_s <= 0: no limit; GS_ETIMEDOUT
 * when it runs out); *state gets its final state ("COMPLETED", "FAILED",
 * ...) and *exit_code its exit code (128 + signal when killed), either may
 * be NULL. */
GS_CLIENT_API int gs_client_job_wait(gs_client *c, int64_t id, double timeout_s, char state[32],
                                     int *exit_code);
/* Streams a job's output (stderr: its error stream) to `on_data` from the
 * start; with `follow`, until the job has finished and everything is read.
 * A non-zero return from on_data stops it (GS_ECANCELED). */
typedef int (*gs_client_data_fn)(const char *data, size_t len, void *ctx);
GS_CLIENT_API int gs_client_job_logs(gs_client *c, int64_t id, bool stderr_stream, bool follow,
                                     gs_client_data_fn on_data, void *ctx);

/* ---- devices, bookings, usage, tenants ------------------------------------------------------ */

GS_CLIENT_API int gs_client_devices(gs_client *c, char **json);
GS_CLIENT_API int gs_client_bookings(gs_client *c, char **json);
/* Accounting per tenant; tenant NULL: yours (all, for an admin); since: a
 * Unix time, 0 for all time. */
GS_CLIENT_API int gs_client_usage(gs_client *c, const char *tenant, double since, char **json);
/* Admin: the tenants; add one from its JSON description (name, weight,
 * quotas, user, group, admin, allow_root: docs/api.md), getting it back
 * with its first token; remove one; issue a new token. */
GS_CLIENT_API int gs_client_tenants(gs_client *c, char **json);
GS_CLIENT_API int gs_client_tenant_add(gs_client *c, const char *tenant_json, char **json);
GS_CLIENT_API int gs_client_tenant_remove(gs_client *c, const char *name);
GS_CLIENT_API int gs_client_tenant_token(gs_client *c, const char *name, char **json);

/* ---- anything else ----------------------------------------------------------------------- */

/* One JSON request: method, path ("/api/v1/..."), a body (NULL: none).
 * On a 2xx answer returns GS_OK with the body in *json (if not NULL);
 * otherwise the error its status maps to, with the daemon's message. */
GS_CLIENT_API int gs_client_request(gs_client *c, const char *method, const char *path,
                                    const char *body, char **json);

#ifdef __cplusplus
}
#endif

#endif

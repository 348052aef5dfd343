/* client_check.c - the client library against a real daemon (started by
 * test_client.py): every family of calls, the errors they give, outputs in
 * the caller's and in allocated buffers, one client shared by threads.
 *
 *   client_check URL ADMIN_TOKEN      prints "ok ..." lines; exits 1 on a failure */
#include "gpusrv/client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      failures++;                                                          \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
    }                                                                      \
  } while (0)

static const char *url, *admin_token;

static float pixels[64];

/* digits on pixels into probs; returns the call's code. */
static int classify(gs_client *c, float probs[10], size_t cap) {
  gs_client_tensor in = {.name = "pixels", .datatype = "FP32", .rank = 2, .shape = {1, 64},
                         .data = pixels, .bytes = sizeof pixels};
  gs_client_tensor out = {.name = "probs", .data = probs, .bytes = cap};
  return gs_client_infer(c, "digits", NULL, &in, 1, &out, 1);
}

static void unreachable(void) {
  gs_client *c;
  CHECK(gs_client_open("http://127.0.0.1:1", "x", &c) == GS_OK, "open");
  CHECK(gs_client_live(c) == GS_EIO, "live on a closed port");
  CHECK(strstr(gs_client_last_error(c), "cannot reach"), "%s", gs_client_last_error(c));
  gs_client_close(c);
  printf("ok unreachable\n");
}

static void health_and_models(gs_client *c) {
  char *json = NULL;
  CHECK(gs_client_live(c) == GS_OK, "%s", gs_client_last_error(c));
  CHECK(gs_client_ready(c) == GS_OK, "%s", gs_client_last_error(c));
  CHECK(gs_client_server_metadata(c, &json) == GS_OK && strstr(json, "binary_tensor_data"), "%s",
        json ? json : gs_client_last_error(c));
  free(json);
  json = NULL;
  CHECK(gs_client_models(c, &json) == GS_OK && strstr(json, "\"digits\""), "%s",
        json ? json : gs_client_last_error(c));
  free(json);
  json = NULL;
  CHECK(gs_client_model_metadata(c, "digits", NULL, &json) == GS_OK && strstr(json, "pixels"),
        "metadata");
  free(json);
  json = NULL;
  CHECK(gs_client_model_config(c, "digits", "1", &json) == GS_OK && strstr(json, "max_batch_size"),
        "config");
  free(json);
  json = NULL;
  CHECK(gs_client_model_stats(c, "digits", &json) == GS_OK && strstr(json, "inference_stats"),
        "stats");
  free(json);
  CHECK(gs_client_model_ready(c, "digits", NULL) == GS_OK, "ready");
  CHECK(gs_client_model_ready(c, "nope", NULL) == GS_ENOENT, "unknown model is GS_ENOENT");
  CHECK(gs_client_model_metadata(c, "nope", NULL, &json) == GS_ENOENT &&
            strstr(gs_client_last_error(c), "unknown model 'nope'"),
        "%s", gs_client_last_error(c));
  CHECK(gs_client_model_unload(c, "digits") == GS_OK, "%s", gs_client_last_error(c));
  CHECK(gs_client_model_ready(c, "digits", NULL) == GS_EBUSY, "unloaded is not ready");
  CHECK(gs_client_model_load(c, "digits") == GS_OK, "%s", gs_client_last_error(c));
  CHECK(gs_client_model_ready(c, "digits", NULL) == GS_OK, "ready again");
  printf("ok health_and_models\n");
}

static void inference(gs_client *c) {
  float mine[10] = {0}, tiny[4];
  CHECK(classify(c, mine, sizeof mine) == GS_OK, "%s", gs_client_last_error(c));
  float sum = 0;
  for (int k = 0; k < 10; k++)
    sum += mine[k];
  CHECK(sum > 0.99f && sum < 1.01f, "probabilities sum to %f", sum);
  /* Allocated by the library, by position (no names). */
  gs_client_tensor in = {.name = "pixels", .datatype = "FP32", .rank = 2, .shape = {1, 64},
                         .data = pixels, .bytes = sizeof pixels};
  gs_client_tensor out = {0};
  CHECK(gs_client_infer(c, "digits", NULL, &in, 1, &out, 1) == GS_OK, "%s",
        gs_client_last_error(c));
  CHECK(out.data && out.bytes == sizeof mine && !strcmp(out.datatype, "FP32") && out.rank == 2 &&
            out.shape[0] == 1 && out.shape[1] == 10,
        "allocated output: %zu bytes, %s, rank %d", out.bytes, out.datatype, out.rank);
  CHECK(out.data && memcmp(out.data, mine, sizeof mine) == 0, "same answer either way");
  free(out.data);
  /* A buffer too small: GS_ERANGE, saying how many bytes it needs. */
  gs_client_tensor small = {.name = "probs", .data = tiny, .bytes = sizeof tiny};
  CHECK(gs_client_infer(c, "digits", NULL, &in, 1, &small, 1) == GS_ERANGE && small.bytes == 40 &&
            strstr(gs_client_last_error(c), "output probs has 40 bytes, its buffer holds 16"),
        "%s (bytes %zu)", gs_client_last_error(c), small.bytes);
  /* Outputs named, or not: never a mix; by position, no more than the model has. */
  gs_client_tensor mixed[2] = {{.name = "probs"}, {0}};
  CHECK(gs_client_infer(c, "digits", NULL, &in, 1, mixed, 2) == GS_EINVAL &&
            strstr(gs_client_last_error(c), "name every output or none"),
        "%s", gs_client_last_error(c));
  gs_client_tensor two[2] = {{0}, {0}};
  CHECK(gs_client_infer(c, "digits", NULL, &in, 1, two, 2) == GS_ENOENT && !two[0].data &&
            strstr(gs_client_last_error(c), "fewer than 2 outputs"),
        "%s", gs_client_last_error(c));
  gs_client_tensor ghost = {.name = "ghost"};
  CHECK(gs_client_infer(c, "digits", NULL, &in, 1, &ghost, 1) == GS_EINVAL &&
            strstr(gs_client_last_error(c), "unknown output 'ghost'"),
        "%s", gs_client_last_error(c));
  /* The daemon's own message for a bad input. */
  gs_client_tensor wrong = in;
  wrong.name = "pixelz";
  CHECK(gs_client_infer(c, "digits", NULL, &wrong, 1, NULL, 0) == GS_EINVAL &&
            strstr(gs_client_last_error(c), "unknown input 'pixelz'"),
        "%s", gs_client_last_error(c));
  printf("ok inference\n");
}

typedef struct worker {
  gs_client *c;
  const float *want;
  int bad;
} worker;

static void *infer_many(void *arg) {
  worker *w = arg;
  for (int i = 0; i < 40; i++) {
    float probs[10];
    if (classify(w->c, probs, sizeof probs) != GS_OK || memcmp(probs, w->want, sizeof probs))
      w->bad++;
  }
  return NULL;
}

static void threads_share_a_client(gs_client *c) {
  float want[10];
  CHECK(classify(c, want, sizeof want) == GS_OK, "%s", gs_client_last_error(c));
  worker w[8];
  pthread_t t[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (worker){.c = c, .want = want};
    pthread_create(&t[i], NULL, infer_many, &w[i]);
  }
  int bad = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    bad += w[i].bad;
  }
  CHECK(bad == 0, "%d of 320 concurrent calls failed or differed", bad);
  printf("ok threads_share_a_client\n");
}

typedef struct text {
  char buf[256];
  size_t len;
  int calls_left; /* -1: unlimited */
} text;

static int gather(const char *data, size_t len, void *ctx) {
  text *t = ctx;
  if (t->calls_left == 0)
    return 1; /* stop */
  if (t->calls_left > 0)
    t->calls_left--;
  size_t take = len < sizeof t->buf - 1 - t->len ? len : sizeof t->buf - 1 - t->len;
  memcpy(t->buf + t->len, data, take);
  t->len += take;
  t->buf[t->len] = '\0';
  return 0;
}

static void jobs(gs_client *c) {
  const char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 7", NULL};
  gs_client_job_spec spec = {.argv = argv, .name = "client-check", .cpus = 0.5, .mem = "256M",
                             .time_limit = "1m"};
  int64_t id = 0;
  char *json = NULL, state[32] = "";
  int code = 0;
  CHECK(gs_client_job_submit(c, &spec, &id, &json) == GS_OK && id > 0 && strstr(json, "client-check"),
        "%s", gs_client_last_error(c));
  free(json);
  CHECK(gs_client_job_wait(c, id, 60, state, &code) == GS_OK, "%s", gs_client_last_error(c));
  CHECK(!strcmp(state, "FAILED") && code == 7, "state %s, exit code %d", state, code);
  text out = {.calls_left = -1}, err = {.calls_left = -1};
  CHECK(gs_client_job_logs(c, id, false, true, gather, &out) == GS_OK && !strcmp(out.buf, "out\n"),
        "stdout '%s' %s", out.buf, gs_client_last_error(c));
  CHECK(gs_client_job_logs(c, id, true, false, gather, &err) == GS_OK && !strcmp(err.buf, "err\n"),
        "stderr '%s'", err.buf);
  text stop = {.calls_left = 0};
  CHECK(gs_client_job_logs(c, id, false, false, gather, &stop) == GS_ECANCELED,
        "a callback that stops");
  json = NULL;
  CHECK(gs_client_jobs(c, true, &json) == GS_OK && strstr(json, "client-check"), "list");
  free(json);
  json = NULL;
  CHECK(gs_client_job(c, id, &json) == GS_OK && strstr(json, "\"events\""), "get");
  free(json);
  CHECK(gs_client_job(c, 999999, &json) == GS_ENOENT, "an unknown job");
  /* Cancel one that would run for a while. */
  const char *sleeper[] = {"sleep", "30", NULL};
  gs_client_job_spec s2 = {.argv = sleeper};
  CHECK(gs_client_job_submit(c, &s2, &id, NULL) == GS_OK, "%s", gs_client_last_error(c));
  CHECK(gs_client_job_cancel(c, id) == GS_OK, "%s", gs_client_last_error(c));
  CHECK(gs_client_job_wait(c, id, 60, state, NULL) == GS_OK && !strcmp(state, "CANCELLED"),
        "state %s", state);
  const char *bad[] = {NULL};
  gs_client_job_spec s3 = {.argv = bad};
  CHECK(gs_client_job_submit(c, &s3, &id, NULL) == GS_EINVAL, "no command");
  printf("ok jobs\n");
}

static void tenants_and_the_rest(gs_client *admin) {
  char *json = NULL;
  CHECK(gs_client_tenant_add(admin, "{\"name\": \"alice\", \"weight\": 2, \"user\": \"nobody\"}",
                             &json) == GS_OK,
        "%s", gs_client_last_error(admin));
  char token[200] = "";
  const char *t = json ? strstr(json, "\"token\"") : NULL;
  if (t && sscanf(t, "\"token\": \"%199[^\"]\"", token) != 1)
    sscanf(t, "\"token\":\"%199[^\"]\"", token);
  CHECK(token[0], "a token in %s", json ? json : "(nothing)");
  free(json);
  json = NULL;
  CHECK(gs_client_tenants(admin, &json) == GS_OK && strstr(json, "alice"), "list");
  free(json);
  gs_client *alice;
  CHECK(gs_client_open(url, token, &alice) == GS_OK, "open as alice");
  json = NULL;
  CHECK(gs_client_tenants(alice, &json) == GS_EPERM, "alice is no admin");
  CHECK(gs_client_devices(alice, &json) == GS_OK && strstr(json, "devices"), "devices");
  free(json);
  json = NULL;
  CHECK(gs_client_bookings(alice, &json) == GS_OK && strstr(json, "bookings"), "bookings");
  free(json);
  json = NULL;
  CHECK(gs_client_usage(admin, NULL, 0, &json) == GS_OK && strstr(json, "usage"), "usage");
  free(json);
  json = NULL;
  CHECK(gs_client_tenant_token(admin, "alice", &json) == GS_OK && strstr(json, "gs_"), "token");
  free(json);
  gs_client_close(alice);
  CHECK(gs_client_tenant_remove(admin, "alice") == GS_OK, "%s", gs_client_last_error(admin));
  gs_client *nobody;
  CHECK(gs_client_open(url, "gs_1_0000", &nobody) == GS_OK, "open");
  const char *argv[] = {"true", NULL};
  gs_client_job_spec spec = {.argv = argv};
  CHECK(gs_client_job_submit(nobody, &spec, NULL, NULL) == GS_EPERM &&
            strstr(gs_client_last_error(nobody), "401"),
        "%s", gs_client_last_error(nobody));
  gs_client_close(nobody);
  printf("ok tenants_and_the_rest\n");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: client_check URL ADMIN_TOKEN\n");
    return 2;
  }
  url = argv[1];
  admin_token = argv[2];
  for (int i = 0; i < 64; i++)
    pixels[i] = (float)(i % 17);
  gs_client *c;
  if (gs_client_open(url, admin_token, &c) != GS_OK) {
    fprintf(stderr, "open: %s\n", gs_client_last_error(NULL));
    return 1;
  }
  unreachable();
  health_and_models(c);
  inference(c);
  threads_share_a_client(c);
  jobs(c);
  tenants_and_the_rest(c);
  gs_client_close(c);
  return failures ? 1 : 0;
}

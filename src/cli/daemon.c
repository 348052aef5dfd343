/* daemon.c - the CLI's calls to a running daemon, through the client library. */
#include "cli/daemon.h"

#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

gs_client *gs_cli_client(const char *what, const char *url, const char *token) {
  gs_client *c;
  if (gs_client_open(url, token, &c) != GS_OK) {
    fprintf(stderr, "gpusrv: %s: %s\n", what, gs_client_last_error(NULL));
    return NULL;
  }
  return c;
}

void gs_cli_job_elapsed(json_t *job, char *buf, size_t cap) {
  double start = json_number_value(json_object_get(job, "start_time"));
  double end = json_number_value(json_object_get(job, "end_time"));
  if (start <= 0) {
    snprintf(buf, cap, "-");
    return;
  }
  if (end <= 0)
    end = (double)time(NULL);
  long s = end > start ? (long)(end - start) : 0;
  if (s >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

int gs_cli_write_to(const char *data, size_t len, void *file) {
  fwrite(data, 1, len, file);
  fflush(file);
  return 0;
}

json_t *gs_cli_await_job(const char *what, const char *url, const char *token, long long id) {
  gs_client *c = gs_cli_client(what, url, token);
  if (!c)
    return NULL;
  char *text = NULL;
  int rc = gs_client_job_wait(c, id, 0, NULL, NULL);
  if (rc == GS_OK)
    rc = gs_client_job(c, id, &text);
  json_t *job = rc == GS_OK ? json_loads(text, 0, NULL) : NULL;
  if (rc != GS_OK)
    fprintf(stderr, "gpusrv: %s: %s\n", what, gs_client_last_error(c));
  else if (!job)
    fprintf(stderr, "gpusrv: %s: the daemon's answer is not JSON\n", what);
  free(text);
  gs_client_close(c);
  return job;
}

int gs_cli_call_json(const char *what, const char *url, const char *token, const char *method,
                     const char *path, json_t *body, json_t **out) {
  gs_client *c = gs_cli_client(what, url, token);
  if (!c)
    return GS_EXIT_FAILED;
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL, *answer = NULL;
  bool encoded = !body || text;
  int rc = encoded ? gs_client_request(c, method, path, text, out ? &answer : NULL) : GS_ENOMEM;
  free(text);
  if (rc != GS_OK) {
    fprintf(stderr, "gpusrv: %s: %s\n", what, encoded ? gs_client_last_error(c) : "out of memory");
    gs_client_close(c);
    return GS_EXIT_FAILED;
  }
  gs_client_close(c);
  if (out && !(*out = json_loads(answer, 0, NULL))) {
    fprintf(stderr, "gpusrv: %s: the daemon's answer is not JSON\n", what);
    free(answer);
    return GS_EXIT_FAILED;
  }
  free(answer);
  return GS_EXIT_OK;
}

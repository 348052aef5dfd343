/* submit.c - queues a process job with a running gpusrv daemon, follows its
 * output as it runs, and exits with the job's exit code, through the C
 * client library.
 *
 *   cc submit.c $(pkg-config --cflags --libs gpusrv-client) -o submit
 *   ./submit [--url URL] -- COMMAND [ARGS...]
 *
 * The token comes from GPUSRV_TOKEN, else the daemon's admin token file
 * when this user can read it. */
#include <gpusrv/client.h>

#include <stdio.h>
#include <string.h>

static int print_output(const char *data, size_t len, void *ctx) {
  (void)ctx;
  fwrite(data, 1, len, stdout);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  const char *url = NULL;
  int i = 1;
  if (i + 1 < argc && strcmp(argv[i], "--url") == 0) {
    url = argv[i + 1];
    i += 2;
  }
  if (i < argc && strcmp(argv[i], "--") == 0)
    i++;
  if (i >= argc) {
    fprintf(stderr, "usage: submit [--url URL] -- COMMAND [ARGS...]\n");
    return 2;
  }
  gs_client *client;
  if (gs_client_open(url, NULL, &client) != GS_OK) {
    fprintf(stderr, "submit: %s\n", gs_client_last_error(NULL));
    return 1;
  }
  gs_client_job_spec spec = {.argv = (const char *const *)&argv[i], .cpus = 1};
  int64_t id;
  char state[32];
  int code = -1;
  int rc = gs_client_job_submit(client, &spec, &id, NULL);
  if (rc == GS_OK) {
    fprintf(stderr, "submit: job %lld queued\n", (long long)id);
    rc = gs_client_job_logs(client, id, false, true, print_output, NULL);
  }
  if (rc == GS_OK)
    rc = gs_client_job_wait(client, id, 0, state, &code);
  if (rc != GS_OK) {
    fprintf(stderr, "submit: %s\n", gs_client_last_error(client));
    gs_client_close(client);
    return 1;
  }
  fprintf(stderr, "submit: job %lld %s, exit code %d\n", (long long)id, state, code);
  gs_client_close(client);
  return code < 0 ? 1 : code;
}

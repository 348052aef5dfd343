/* daemon.h - how `gpusrv` subcommands reach a running daemon: through the
 * client library (include/gpusrv/client.h), with the --url/GPUSRV_URL and
 * --token/GPUSRV_TOKEN conventions of DESIGN.md and errors printed as
 * "gpusrv: WHAT: why". */
#ifndef GS_CLI_DAEMON_H
#define GS_CLI_DAEMON_H

#include "gpusrv/client.h"

#include <jansson.h>

/* A client of the daemon (url and token may be NULL: the library's
 * defaults), or NULL after printing why. gs_client_close() it. */
gs_client *gs_cli_client(const char *what, const char *url, const char *token);

/* One JSON request to the daemon (body may be NULL). On success returns 0
 * with the JSON answer in *out when out is not NULL (the caller decrefs
 * it); otherwise prints "gpusrv: WHAT: why" and returns 1 (GS_EXIT_FAILED). */
int gs_cli_call_json(const char *what, const char *url, const char *token, const char *method,
                     const char *path, json_t *body, json_t **out);

/* A job's run time from its JSON ("1:02:03", "4:05"; "-" before it
 * started), until its end or now, into buf. */
void gs_cli_job_elapsed(json_t *job, char *buf, size_t cap);

/* A gs_client_data_fn that writes to the FILE * given as ctx, flushed. */
int gs_cli_write_to(const char *data, size_t len, void *file);

/* Waits until job `id` has finished (gs_client_job_wait) and returns its
 * final JSON (decref it), or NULL after printing "gpusrv: WHAT: why". */
json_t *gs_cli_await_job(const char *what, const char *url, const char *token, long long id);

#endif

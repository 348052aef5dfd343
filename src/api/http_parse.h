/* http_parse.h - the parts of a request's URL and headers that the server's
 * routes read (libmicrohttpd has split the request into them already):
 * kept apart from server.c so that the HTTP fuzz target reaches them. */
#ifndef GS_API_HTTP_PARSE_H
#define GS_API_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

/* Splits "/v2/models/NAME[/versions/V][/ACTION]" into its parts (each
 * NUL-terminated in the caller's buffers; version and action "" when
 * absent). False when the URL is not of that form or a part does not fit. */
bool gs_http_model_url(const char *url, char *name, size_t ncap, char *version, size_t vcap,
                       char *action, size_t acap);

/* Inference-Header-Content-Length's value: a decimal count of bytes and
 * nothing else. False for anything else (sign, spaces, overflow). */
bool gs_http_header_length(const char *value, size_t *out);

/* The token in an Authorization header of the form "Bearer TOKEN" (the
 * scheme's case ignored), pointing into `value`; NULL for any other form. */
const char *gs_http_bearer_token(const char *value);

#endif

/* http_parse.c - a request's URL and headers as the routes read them. */
#include "api/http_parse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Copies the n bytes at p into a buffer of cap; false when they do not fit
 * or there are none. */
static bool take_part(const char *p, size_t n, char *to, size_t cap) {
  if (n == 0 || n >= cap)
    return false;
  memcpy(to, p, n);
  to[n] = '\0';
  return true;
}

bool gs_http_model_url(const char *url, char *name, size_t ncap, char *version, size_t vcap,
                       char *action, size_t acap) {
  static const char prefix[] = "/v2/models/";
  if (strncmp(url, prefix, sizeof prefix - 1) != 0)
    return false;
  const char *p = url + sizeof prefix - 1;
  const char *slash = strchr(p, '/');
  if (!take_part(p, slash ? (size_t)(slash - p) : strlen(p), name, ncap))
    return false;
  version[0] = action[0] = '\0';
  if (!slash)
    return true;
  p = slash + 1;
  if (strncmp(p, "versions/", 9) == 0) {
    p += 9;
    slash = strchr(p, '/');
    if (!take_part(p, slash ? (size_t)(slash - p) : strlen(p), version, vcap))
      return false;
    if (!slash)
      return true;
    p = slash + 1;
  }
  if (strlen(p) >= acap || strchr(p, '/'))
    return false;
  snprintf(action, acap, "%s", p);
  return true;
}

bool gs_http_header_length(const char *value, size_t *out) {
  if (!value || *value < '0' || *value > '9')
    return false;
  errno = 0;
  char *end = NULL;
  unsigned long long n = strtoull(value, &end, 10);
  if (errno || *end || n > (unsigned long long)((size_t)-1))
    return false;
  *out = (size_t)n;
  return true;
}

const char *gs_http_bearer_token(const char *value) {
  if (!value || strncasecmp(value, "Bearer ", 7) != 0)
    return NULL;
  return value + 7;
}

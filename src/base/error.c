/* error.c - error names, messages and the per-thread failure detail. */
#include "base/error.h"

#include <stdio.h>

const char *gs_strerror(int code) {
  switch (code) {
  case GS_OK: return "success";
#define GS__ERR_MSG(name, value, msg) case GS_##name: return msg;
    GS_ERRNO_MAP(GS__ERR_MSG)
#undef GS__ERR_MSG
  }
  return "unknown error";
}

const char *gs_err_name(int code) {
  switch (code) {
  case GS_OK: return "GS_OK";
#define GS__ERR_NAME(name, value, msg) case GS_##name: return "GS_" #name;
    GS_ERRNO_MAP(GS__ERR_NAME)
#undef GS__ERR_NAME
  }
  return "GS_E?";
}

/* Per-thread, like errno: no lock needed and no cross-talk between threads. */
static _Thread_local char last_detail[512];
static _Thread_local int last_code;

int gs_verror(int code, const char *fmt, va_list ap) {
  last_code = code;
  if (fmt)
    vsnprintf(last_detail, sizeof last_detail, fmt, ap);
  else
    snprintf(last_detail, sizeof last_detail, "%s", gs_strerror(code));
  return code;
}

int gs_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gs_verror(code, fmt, ap);
  va_end(ap);
  return code;
}

const char *gs_error_detail(void) {
  if (last_detail[0] == '\0')
    return gs_strerror(last_code);
  return last_detail;
}

int gs_error_code(void) { return last_code; }

int gs_error_prefix(int code, const char *prefix) {
  char detail[sizeof last_detail];
  snprintf(detail, sizeof detail, "%s", gs_error_detail());
  return gs_error(code, "%s: %s", prefix, detail);
}

void gs_error_clear(void) {
  last_code = GS_OK;
  last_detail[0] = '\0';
}

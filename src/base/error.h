/* error.h - gpusrv's error codes, their names and messages, and the per-thread
 * "why" detail that a failing function leaves for its caller. */
#ifndef GS_BASE_ERROR_H
#define GS_BASE_ERROR_H

#include <stdarg.h>

/* The codes themselves are public: the client library returns them too. */
#include "gpusrv/errors.h"

/* Message for a code, such as "out of memory"; never NULL. */
const char *gs_strerror(int code);
/* Symbolic name for a code, such as "GS_ENOMEM"; never NULL. */
const char *gs_err_name(int code);

/* Records why the calling thread's last operation failed and returns `code`,
 * so that a failing function can end with `return gs_error(GS_EINVAL, ...)`. */
int gs_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gs_verror(int code, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* The detail recorded by the last gs_error() on this thread, or the plain
 * message of the code if none was recorded. Valid until the next gs_error()
 * on the same thread. */
const char *gs_error_detail(void);
/* Puts `prefix: ` (a file name, a setting) before the recorded detail and
 * returns `code`: `return gs_error_prefix(rc, path);` */
int gs_error_prefix(int code, const char *prefix);
int gs_error_code(void);
void gs_error_clear(void);

#endif

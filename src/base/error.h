/* error.h - gpusrv's error codes, their names and messages, and the per-thread
 * "why" detail that a failing function leaves for its caller. */
#ifndef GS_BASE_ERROR_H
#define GS_BASE_ERROR_H

#include <stdarg.h>

/* One table: code name, value, message. Codes are negative; 0 is success. */
#define GS_ERRNO_MAP(X)                                                     \
  X(EINVAL, -1, "invalid argument")                                         \
  X(ENOMEM, -2, "out of memory")                                            \
  X(ENOTSUP, -3, "not supported")                                           \
  X(ENOENT, -4, "not found")                                                \
  X(EIO, -5, "input/output error")                                          \
  X(EBUSY, -6, "resource busy")                                             \
  X(ETIMEDOUT, -7, "timed out")                                             \
  X(EEXIST, -8, "already exists")                                           \
  X(ERANGE, -9, "value out of range")                                       \
  X(EVERSION, -10, "incompatible version")                                  \
  X(EDEVICE, -11, "device error")                                           \
  X(ESTATE, -12, "object in the wrong state for this call")                 \
  X(EINTERNAL, -13, "internal error")                                       \
  X(EPERM, -14, "permission denied")                                        \
  X(ECANCELED, -15, "cancelled")

enum {
  GS_OK = 0,
#define GS__ERR_ENUM(name, value, msg) GS_##name = (value),
  GS_ERRNO_MAP(GS__ERR_ENUM)
#undef GS__ERR_ENUM
};

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

/* gpusrv/errors.h - gpusrv's error codes, shared by the daemon and the
 * client library: 0 is success, every error is negative. */
#ifndef GPUSRV_ERRORS_H
#define GPUSRV_ERRORS_H

/* One table: code name, value, message. */
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

#endif

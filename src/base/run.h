/* run.h - running a helper program (podman, sacctmgr, squeue) and taking
 * what it prints, within a deadline, without a shell. */
#ifndef GS_BASE_RUN_H
#define GS_BASE_RUN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gs_run_options {
  char *const *envp; /* its environment; NULL: the caller's */
  bool errors_too;   /* its stderr into the capture as well (else /dev/null) */
  double timeout_s;  /* then its session is killed (SIGKILL): GS_ETIMEDOUT */
} gs_run_options;

/* Runs argv[0] (found on PATH when it has no '/') in a session of its own,
 * stdin /dev/null, every signal at its default, and no descriptor of the
 * caller's but its output pipe. What it prints goes into `out` (`cap`
 * bytes, NUL-terminated; NULL or 0: dropped); more is read and dropped, and
 * *truncated (where not NULL) says so. Returns its exit status (128 + N
 * when signal N ended it); GS_ENOENT when the program is not there,
 * GS_ETIMEDOUT past the deadline (also when something it left running
 * still holds its output: what came is then not taken as whole), GS_EIO
 * when it cannot be started. */
int gs_run_capture(char *const argv[], const gs_run_options *options, char *out, size_t cap,
                   bool *truncated);

#endif

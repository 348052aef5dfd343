/* fileutil.h - small readers for /proc and /sys style files. */
#ifndef GS_BASE_FILEUTIL_H
#define GS_BASE_FILEUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Reads up to cap-1 bytes of `path` into buf, NUL-terminated. Returns the
 * length, or a negative GS_E code (with detail) when the file cannot be read. */
long gs_read_text_file(const char *path, char *buf, size_t cap);
/* Reads one unsigned decimal integer from `path`. Returns 0 or a GS_E code. */
int gs_read_u64_file(const char *path, uint64_t *out);

/* Reads the whole regular file `path` into *data (malloc'd: the caller
 * frees it) and its size into *len. FIFOs and directories are refused
 * without blocking. Returns 0 or a GS_E code with the detail. */
int gs_read_whole_file(const char *path, void **data, size_t *len);

/* Creates directory `dir` and any missing parents (mode 0755). Returns 0, or
 * -1 with errno set. */
int gs_mkdir_p(const char *dir);

/* The start time of process `pid` in clock ticks since boot (field 22 of
 * /proc/PID/stat), 0 if there is no such process. It tells a process from a
 * later one that reuses its pid. */
uint64_t gs_process_start_ticks(int pid);
/* The session of process `pid` (field 6 of /proc/PID/stat); -1 if gone. */
int gs_process_session(int pid);
/* This boot's id (/proc/sys/kernel/random/boot_id) without its newline;
 * -1 if it cannot be read. */
int gs_boot_id(char *out, size_t cap);

/* Opens `rel` (a relative path) for reading as a regular file inside
 * directory `dir`: no component may be a symlink, and ".." cannot leave
 * `dir` (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the kernel
 * has it, else a walk with O_NOFOLLOW). FIFOs, devices and directories are
 * refused without blocking. Returns the descriptor (the caller closes it),
 * or -1 with errno set (ELOOP for a symlink, EXDEV for an escape, EINVAL for
 * what is not a regular file). */
int gs_open_regular_beneath(const char *dir, const char *rel);

/* Removes `dir` and everything below it, without following symlinks: each
 * entry is removed relative to its directory's descriptor, so a path that
 * another user rewrites meanwhile cannot redirect it. Returns 0, or -1
 * with errno set. */
int gs_remove_tree(const char *dir);

/* A tensor name as a file name: characters other than letters, digits, '.',
 * '-' and '_' become '_' ("output" if nothing, "." or ".." is left). */
void gs_file_name_of(const char *name, char *out, size_t cap);

#endif

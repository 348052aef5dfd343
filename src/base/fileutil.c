/* fileutil.c - small file helpers: readers for /proc and /sys style files, mkdir -p, opening
 * a file inside a directory without following links. */
#include "base/fileutil.h"

#include "base/error.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

long gs_read_text_file(const char *path, char *buf, size_t cap) {
  if (cap == 0)
    return gs_error(GS_EINVAL, "read %s: zero-sized buffer", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return gs_error(errno == ENOENT ? GS_ENOENT : GS_EIO, "open %s: %s", path, strerror(errno));
  size_t len = 0;
  while (len + 1 < cap) {
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int saved = errno;
      close(fd);
      return gs_error(GS_EIO, "read %s: %s", path, strerror(saved));
    }
    if (n == 0)
      break;
    len += (size_t)n;
  }
  close(fd);
  buf[len] = '\0';
  return (long)len;
}

int gs_read_u64_file(const char *path, uint64_t *out) {
  char buf[64];
  long n = gs_read_text_file(path, buf, sizeof buf);
  if (n < 0)
    return (int)n;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 10);
  if (end == buf || errno != 0)
    return gs_error(GS_EIO, "%s: expected an unsigned integer, got \"%.20s\"", path, buf);
  *out = v;
  return GS_OK;
}

int gs_read_whole_file(const char *path, void **data, size_t *len) {
  /* O_NONBLOCK: opening a FIFO would wait for a writer; it is refused below. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return gs_error(errno == ENOENT ? GS_ENOENT : GS_EIO, "cannot open %s: %s", path,
                    strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return gs_error(GS_EINVAL, "%s is not a regular file", path);
  }
  size_t size = (size_t)st.st_size;
  char *buf = malloc(size ? size : 1);
  if (!buf) {
    close(fd);
    return gs_error(GS_ENOMEM, "out of memory reading %s (%zu bytes)", path, size);
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, buf + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    done += (size_t)n;
  }
  close(fd);
  if (done != size) {
    free(buf);
    return gs_error(GS_EIO, "cannot read %s", path);
  }
  *data = buf;
  *len = size;
  return 0;
}

int gs_mkdir_p(const char *dir) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return mkdir(buf, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* Process `pid`'s /proc/PID/stat from after its command name (which may
 * hold spaces and ')'): field 3 on. NULL if it is gone. */
static const char *stat_after_name(int pid, char *text, size_t cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  if (gs_read_text_file(path, text, cap) < 0)
    return NULL;
  const char *p = strrchr(text, ')');
  return p ? p + 1 : NULL;
}

int gs_process_session(int pid) {
  char text[1024], state;
  int ppid, pgrp, session;
  const char *p = stat_after_name(pid, text, sizeof text);
  return p && sscanf(p, " %c %d %d %d", &state, &ppid, &pgrp, &session) == 4 ? session : -1;
}

int gs_boot_id(char *out, size_t cap) {
  if (gs_read_text_file("/proc/sys/kernel/random/boot_id", out, cap) <= 0)
    return -1;
  out[strcspn(out, "\n")] = '\0';
  return 0;
}

uint64_t gs_process_start_ticks(int pid) {
  char text[1024];
  const char *p = stat_after_name(pid, text, sizeof text);
  if (!p)
    return 0;
  unsigned long long start = 0;
  int field = 2; /* the name was field 2 */
  for (; *p && field < 22; p++)
    if (*p == ' ')
      field++;
  if (field == 22)
    sscanf(p, "%llu", &start);
  return start;
}

void gs_file_name_of(const char *name, char *out, size_t cap) {
  size_t i = 0;
  for (; name[i] && i + 1 < cap; i++) {
    char ch = name[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '-' || ch == '_';
    out[i] = ok ? ch : '_';
  }
  out[i] = '\0';
  if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0 || i == 0)
    snprintf(out, cap, "output");
}

/* The walk for kernels without openat2: each directory with O_NOFOLLOW, so
 * no symlink is followed; ".." is refused outright. */
static int open_walk(int dirfd, const char *rel) {
  char part[256];
  int fd = dup(dirfd);
  while (fd >= 0 && *rel) {
    size_t n = strcspn(rel, "/");
    if (n == 0 || n >= sizeof part || (n == 2 && rel[0] == '.' && rel[1] == '.')) {
      close(fd);
      errno = n == 0 || n >= sizeof part ? EINVAL : EXDEV;
      return -1;
    }
    memcpy(part, rel, n);
    part[n] = '\0';
    bool last = rel[n] == '\0';
    int next = openat(fd, part, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
                                    (last ? 0 : O_DIRECTORY));
    int saved = errno;
    close(fd);
    errno = saved;
    fd = next;
    rel += n + !last;
  }
  return fd;
}

int gs_open_regular_beneath(const char *dir, const char *rel) {
  if (rel[0] == '/' || rel[0] == '\0') {
    errno = EXDEV;
    return -1;
  }
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return -1;
  struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) /* no openat2, or a filter forbids it */
    fd = open_walk(dirfd, rel);
  int saved = errno;
  close(dirfd);
  errno = saved;
  struct stat sb;
  if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
    close(fd);
    errno = EINVAL;
    return -1;
  }
  if (fd >= 0) /* reads block as usual from here on */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

/* Empties the directory open as `fd` (which it closes), entry by entry
 * relative to it: a name another process swaps for a symlink meanwhile is
 * removed as the link, never followed. */
static int empty_dir(int fd, int depth) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  int rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0 || errno == ENOENT)
      continue;
    int sub = errno == EISDIR && depth < 256
                  ? openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                  : -1;
    if (sub < 0 || empty_dir(sub, depth + 1) < 0 ||
        (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT))
      rc = -1;
  }
  closedir(d);
  return rc;
}

int gs_remove_tree(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : -1;
  if (empty_dir(fd, 0) < 0)
    return -1;
  return rmdir(dir) < 0 && errno != ENOENT ? -1 : 0;
}

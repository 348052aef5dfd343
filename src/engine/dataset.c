/* dataset.c - rows of .npy files, directories of them, and CSV files, read
 * by range with pread (see dataset.h). */
#include "engine/dataset.h"

#include "base/error.h"
#include "engine/npy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* One .npy file. Files are opened for each read, not held: a directory of
 * one-row files may hold more of them than a process may keep open. */
#define CSV_LINE_MAX (64 << 20)

typedef struct npy_part {
  char *path;
  int64_t first_row, rows;
  size_t data_offset;
} npy_part;

struct gs_dataset {
  bool csv;
  gs_dtype dtype;
  int64_t row_elems;
  size_t row_bytes;
  int64_t rows;
  /* .npy */
  npy_part *parts;
  int n_parts, cap_parts;
  /* CSV: where each data row's line starts and ends, and its line number */
  char csv_path[PATH_MAX];
  int csv_fd;
  int64_t *line_start, *line_end, *line_no;
};

void gs_dataset_close(gs_dataset *ds) {
  if (!ds)
    return;
  for (int i = 0; i < ds->n_parts; i++)
    free(ds->parts[i].path);
  free(ds->parts);
  if (ds->csv_fd >= 0)
    close(ds->csv_fd);
  free(ds->line_start);
  free(ds->line_end);
  free(ds->line_no);
  free(ds);
}

int64_t gs_dataset_rows(const gs_dataset *ds) { return ds->rows; }
gs_dtype gs_dataset_dtype(const gs_dataset *ds) { return ds->dtype; }

/* ---- .npy ------------------------------------------------------------------------------ */

/* The largest .npy header read (the format allows up to 4 GiB; numpy
 * writes a few hundred bytes). */
#define NPY_HEADER_MAX ((size_t)1 << 20)

static int add_npy(gs_dataset *ds, const char *path) {
  if (ds->n_parts == ds->cap_parts) {
    int cap = ds->cap_parts ? 2 * ds->cap_parts : 16;
    npy_part *grown = realloc(ds->parts, (size_t)cap * sizeof *grown);
    if (!grown)
      return gs_error(GS_ENOMEM, "out of memory opening %s", path);
    ds->parts = grown;
    ds->cap_parts = cap;
  }
  npy_part *p = &ds->parts[ds->n_parts];
  memset(p, 0, sizeof *p);
  if (!(p->path = strdup(path)))
    return gs_error(GS_ENOMEM, "out of memory opening %s", path);
  ds->n_parts++;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return gs_error(errno == ENOENT ? GS_ENOENT : GS_EIO, "cannot open %s: %s", path,
                    strerror(errno));
  unsigned char *head = malloc(NPY_HEADER_MAX + 16);
  ssize_t got = head ? pread(fd, head, NPY_HEADER_MAX + 16, 0) : -1;
  struct stat sb;
  gs_npy info;
  int rc = !head ? gs_error(GS_ENOMEM, "out of memory reading %s", path)
           : got < 0 || fstat(fd, &sb) < 0
               ? gs_error(GS_EIO, "cannot read %s: %s", path, strerror(errno))
               : gs_npy_parse_header(head, (size_t)got, &info, &p->data_offset);
  free(head);
  close(fd);
  if (rc < 0)
    return gs_error_prefix(rc, path);
  int64_t numel = gs_shape_numel(&info.shape);
  size_t es = gs_dtype_size(info.dtype);
  uint64_t need;
  uint64_t have = (uint64_t)sb.st_size - p->data_offset;
  if (numel < 0 || __builtin_mul_overflow((uint64_t)numel, (uint64_t)es, &need) || need != have)
    return gs_error(GS_EINVAL, "%s: holds %llu bytes of data; its shape %s needs %zu per element",
                    path, (unsigned long long)have,
                    gs_shape_str(&info.shape, (char[128]){0}, 128), es);
  if (ds->n_parts > 1 && info.dtype != ds->dtype)
    return gs_error(GS_EINVAL, "%s: holds %s, the files before it %s", path,
                    gs_dtype_name(info.dtype), gs_dtype_name(ds->dtype));
  ds->dtype = info.dtype;
  /* Rows along the first dimension, or the whole file as one row. */
  int64_t inner = 1; /* no overflow: numel fits, and it is their product */
  for (int d = 1; d < info.shape.rank; d++)
    inner *= info.shape.dims[d];
  if (info.shape.rank >= 1 && inner == ds->row_elems)
    p->rows = info.shape.dims[0];
  else if (numel == ds->row_elems)
    p->rows = 1;
  else {
    char shape[128];
    return gs_error(GS_EINVAL, "%s: an array of %lld elements (shape %s) is neither one row of "
                               "%lld elements nor rows of them", path, (long long)numel,
                    gs_shape_str(&info.shape, shape, sizeof shape), (long long)ds->row_elems);
  }
  p->first_row = ds->rows;
  if (__builtin_add_overflow(ds->rows, p->rows, &ds->rows))
    return gs_error(GS_EINVAL, "%s: too many rows in all", path);
  return GS_OK;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_npy_dir(gs_dataset *ds, const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return gs_error(GS_EIO, "cannot open the directory %s: %s", dir, strerror(errno));
  char **names = NULL;
  int n = 0, rc = GS_OK;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".npy") != 0)
      continue;
    char **grown = realloc(names, (size_t)(n + 1) * sizeof *names);
    if (!grown || !(grown[n] = strdup(e->d_name))) {
      names = grown ? grown : names;
      rc = gs_error(GS_ENOMEM, "out of memory listing %s", dir);
      break;
    }
    names = grown;
    n++;
  }
  closedir(d);
  if (rc == 0 && n == 0)
    rc = gs_error(GS_EINVAL, "the directory %s holds no .npy files", dir);
  if (rc == 0)
    qsort(names, (size_t)n, sizeof *names, by_name);
  for (int i = 0; rc == 0 && i < n; i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    rc = add_npy(ds, path);
  }
  for (int i = 0; i < n; i++)
    free(names[i]);
  free(names);
  return rc;
}

static int read_npy(gs_dataset *ds, int64_t first, int64_t count, void *out) {
  char *dst = out;
  /* The file holding row `first`: the last whose first_row is not past it. */
  int lo = 0, hi = ds->n_parts - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (ds->parts[mid].first_row <= first)
      lo = mid;
    else
      hi = mid - 1;
  }
  for (int i = lo; i < ds->n_parts && count > 0; i++) {
    npy_part *p = &ds->parts[i];
    if (first >= p->first_row + p->rows)
      continue;
    int fd = open(p->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return gs_error(GS_EIO, "cannot open %s: %s", p->path, strerror(errno));
    int64_t from = first - p->first_row, take = p->rows - from < count ? p->rows - from : count;
    size_t bytes = (size_t)take * ds->row_bytes;
    off_t at = (off_t)(p->data_offset + (size_t)from * ds->row_bytes);
    for (size_t done = 0; done < bytes;) {
      ssize_t got = pread(fd, dst + done, bytes - done, at + (off_t)done);
      if (got <= 0) {
        int rc = gs_error(GS_EIO, "%s: cannot read rows %lld..%lld: %s", p->path,
                          (long long)from, (long long)(from + take - 1),
                          got < 0 ? strerror(errno) : "the file got shorter");
        close(fd);
        return rc;
      }
      done += (size_t)got;
    }
    close(fd);
    dst += bytes;
    first += take;
    count -= take;
  }
  return count == 0 ? GS_OK : gs_error(GS_EINVAL, "rows past the end of the data set");
}

/* ---- CSV ------------------------------------------------------------------------------- */

static bool is_number(const char *s, size_t n) {
  char buf[64];
  while (n && (*s == ' ' || *s == '\t')) {
    s++;
    n--;
  }
  if (n == 0 || n >= sizeof buf)
    return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  strtod(buf, &end);
  while (*end == ' ' || *end == '\t' || *end == '\r')
    end++;
  return end != buf && *end == '\0';
}

/* One pass over the file: where each data line is, and that it has
 * row_elems cells. */
static int index_csv(gs_dataset *ds, const char *path) {
  snprintf(ds->csv_path, sizeof ds->csv_path, "%s", path);
  ds->csv_fd = open(path, O_RDONLY | O_CLOEXEC);
  if (ds->csv_fd < 0)
    return gs_error(errno == ENOENT ? GS_ENOENT : GS_EIO, "cannot open %s: %s", path,
                    strerror(errno));
  int copy = dup(ds->csv_fd);
  FILE *f = copy >= 0 ? fdopen(copy, "r") : NULL;
  if (!f) {
    if (copy >= 0)
      close(copy);
    return gs_error(GS_EIO, "cannot read %s: %s", path, strerror(errno));
  }
  char *line = NULL;
  size_t cap = 0, n_cap = 0;
  ssize_t len;
  int64_t offset = 0, line_no = 0;
  int rc = GS_OK;
  while ((len = getline(&line, &cap, f)) > 0) {
    line_no++;
    int64_t start = offset;
    offset += len;
    size_t l = (size_t)len;
    if (l > CSV_LINE_MAX) {
      rc = gs_error(GS_EINVAL, "%s:%lld: a line of %zu bytes (at most %d)", path,
                    (long long)line_no, l, CSV_LINE_MAX);
      break;
    }
    if (memchr(line, '\0', l)) {
      rc = gs_error(GS_EINVAL, "%s:%lld: holds a NUL byte; not a text file", path,
                    (long long)line_no);
      break;
    }
    if (line_no == 1 && l >= 3 && !memcmp(line, "\xef\xbb\xbf", 3)) { /* a UTF-8 BOM */
      memmove(line, line + 3, l - 2);
      l -= 3;
      start += 3;
    }
    while (l && (line[l - 1] == '\n' || line[l - 1] == '\r'))
      l--;
    if (l == 0)
      continue; /* blank lines, such as a last newline */
    int64_t cells = 1;
    for (size_t i = 0; i < l; i++)
      cells += line[i] == ',';
    size_t first_len = strcspn(line, ",\r\n");
    if (ds->rows == 0 && line_no == 1 && !is_number(line, first_len))
      continue; /* a header */
    if (cells != ds->row_elems) {
      rc = gs_error(GS_EINVAL, "%s:%lld: %lld values; the model's rows have %lld", path,
                    (long long)line_no, (long long)cells, (long long)ds->row_elems);
      break;
    }
    if ((size_t)ds->rows == n_cap) {
      n_cap = n_cap ? 2 * n_cap : 1024;
      int64_t *a = realloc(ds->line_start, n_cap * sizeof *a);
      if (a)
        ds->line_start = a;
      int64_t *b = realloc(ds->line_end, n_cap * sizeof *b);
      if (b)
        ds->line_end = b;
      int64_t *c = realloc(ds->line_no, n_cap * sizeof *c);
      if (c)
        ds->line_no = c;
      if (!a || !b || !c) {
        rc = gs_error(GS_ENOMEM, "out of memory indexing %s", path);
        break;
      }
    }
    ds->line_start[ds->rows] = start;
    ds->line_end[ds->rows] = start + (int64_t)l;
    ds->line_no[ds->rows] = line_no;
    ds->rows++;
  }
  if (rc == 0 && ferror(f))
    rc = gs_error(GS_EIO, "%s: cannot read past line %lld: %s", path, (long long)line_no,
                  strerror(errno));
  free(line);
  fclose(f);
  if (rc == 0 && ds->rows == 0)
    rc = gs_error(GS_EINVAL, "%s holds no rows", path);
  ds->dtype = GS_DT_FLOAT64;
  return rc;
}

static int read_csv(gs_dataset *ds, int64_t first, int64_t count, void *out) {
  if (count == 0)
    return GS_OK;
  int64_t from = ds->line_start[first], to = ds->line_end[first + count - 1];
  size_t bytes = (size_t)(to - from);
  char *text = malloc(bytes + 1);
  if (!text)
    return gs_error(GS_ENOMEM, "out of memory reading %s", ds->csv_path);
  for (size_t done = 0; done < bytes;) {
    ssize_t got = pread(ds->csv_fd, text + done, bytes - done, (off_t)from + (off_t)done);
    if (got <= 0) {
      free(text);
      return gs_error(GS_EIO, "%s: cannot read: %s", ds->csv_path,
                      got < 0 ? strerror(errno) : "the file got shorter");
    }
    done += (size_t)got;
  }
  text[bytes] = '\0';
  double *dst = out;
  int rc = GS_OK;
  for (int64_t r = 0; rc == 0 && r < count; r++) {
    char *p = text + (ds->line_start[first + r] - from);
    char *line_end = text + (ds->line_end[first + r] - from);
    *line_end = '\0';
    for (int64_t c = 0; c < ds->row_elems; c++) {
      if (p > line_end) { /* fewer cells than when it was indexed: the file changed */
        rc = gs_error(GS_EINVAL, "%s:%lld: fewer values than before", ds->csv_path,
                      (long long)ds->line_no[first + r]);
        break;
      }
      char *cell_end = memchr(p, ',', (size_t)(line_end - p));
      if (!cell_end)
        cell_end = line_end;
      char saved = *cell_end;
      *cell_end = '\0';
      char *end;
      double v = strtod(p, &end);
      while (*end == ' ' || *end == '\t' || *end == '\r')
        end++;
      if (end == p || *end) {
        rc = gs_error(GS_EINVAL, "%s:%lld: value %lld ('%.20s') is not a number", ds->csv_path,
                      (long long)ds->line_no[first + r], (long long)c + 1, p);
        break;
      }
      *cell_end = saved;
      *dst++ = v;
      p = cell_end + 1;
    }
  }
  free(text);
  return rc;
}

/* ---- the calls --------------------------------------------------------------------------- */

int gs_dataset_open(const char *path, int64_t row_elems, gs_dataset **out) {
  if (row_elems <= 0)
    return gs_error(GS_EINVAL, "rows of %lld elements", (long long)row_elems);
  gs_dataset *ds = calloc(1, sizeof *ds);
  if (!ds)
    return gs_error(GS_ENOMEM, "out of memory opening %s", path);
  ds->csv_fd = -1;
  ds->row_elems = row_elems;
  struct stat sb;
  size_t len = strlen(path);
  int rc;
  if (stat(path, &sb) < 0)
    rc = gs_error(errno == ENOENT ? GS_ENOENT : GS_EIO, "cannot open %s: %s", path,
                  strerror(errno));
  else if (S_ISDIR(sb.st_mode))
    rc = add_npy_dir(ds, path);
  else if (len > 4 && strcmp(path + len - 4, ".npy") == 0)
    rc = add_npy(ds, path);
  else if (len > 4 && strcasecmp(path + len - 4, ".csv") == 0) {
    ds->csv = true;
    rc = index_csv(ds, path);
  } else
    rc = gs_error(GS_EINVAL, "%s: a data set is a .npy file, a directory of them, or a .csv file; "
                  "or images: .jpg, .jpeg or .png files, a directory of them, or a .txt list",
                  path);
  if (rc == 0 && ds->rows == 0)
    rc = gs_error(GS_EINVAL, "%s holds no rows", path);
  if (rc < 0) {
    gs_dataset_close(ds);
    return rc;
  }
  ds->row_bytes = (size_t)row_elems * gs_dtype_size(ds->dtype);
  *out = ds;
  return GS_OK;
}

int gs_dataset_read(gs_dataset *ds, int64_t first, int64_t count, void *out) {
  if (first < 0 || count < 0 || first + count > ds->rows)
    return gs_error(GS_EINVAL, "rows %lld..%lld of a data set of %lld", (long long)first,
                    (long long)(first + count - 1), (long long)ds->rows);
  return ds->csv ? read_csv(ds, first, count, out) : read_npy(ds, first, count, out);
}

void gs_dataset_drop_cache(gs_dataset *ds) {
  for (int i = 0; i < ds->n_parts; i++) {
    int fd = open(ds->parts[i].path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      close(fd);
    }
  }
  if (ds->csv_fd >= 0)
    posix_fadvise(ds->csv_fd, 0, 0, POSIX_FADV_DONTNEED);
}

/* table.c - boxed text tables for people. */
#include "cli/table.h"

#include <stdlib.h>
#include <string.h>

#define MAX_COLS 16

struct gs_table {
  int ncols, nrows, cap;
  bool right[MAX_COLS];
  char **cells; /* (nrows + 1) * ncols, the header row first */
};

gs_table_t *gs_table_new(int ncols, const char *const *headers, const bool *right) {
  if (ncols < 1 || ncols > MAX_COLS)
    return NULL;
  gs_table_t *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  t->ncols = ncols;
  for (int i = 0; i < ncols; i++)
    t->right[i] = right && right[i];
  t->nrows = -1; /* the header row is row -1 */
  if (gs_table_add_row(t, headers) < 0) {
    free(t->cells);
    free(t);
    return NULL;
  }
  return t;
}

int gs_table_add_row(gs_table_t *t, const char *const *cells) {
  int rows = t->nrows + 2;
  if (rows > t->cap) {
    int cap = t->cap ? t->cap * 2 : 8;
    char **grown = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof *grown);
    if (!grown)
      return -1;
    t->cells = grown;
    t->cap = cap;
  }
  char **row = t->cells + (size_t)(rows - 1) * (size_t)t->ncols;
  for (int i = 0; i < t->ncols; i++) {
    row[i] = strdup(cells[i] ? cells[i] : "");
    if (!row[i]) {
      while (i-- > 0)
        free(row[i]);
      return -1;
    }
  }
  t->nrows++;
  return 0;
}

static void rule(const gs_table_t *t, const size_t *w, char fill, FILE *out) {
  for (int c = 0; c < t->ncols; c++) {
    fputc(c == 0 ? (fill == '=' ? '|' : '+') : '+', out);
    for (size_t i = 0; i < w[c] + 2; i++)
      fputc(fill, out);
  }
  fputs(fill == '=' ? "|\n" : "+\n", out);
}

void gs_table_print(const gs_table_t *t, FILE *out) {
  size_t w[MAX_COLS] = {0};
  for (int r = 0; r <= t->nrows; r++)
    for (int c = 0; c < t->ncols; c++) {
      size_t len = strlen(t->cells[(size_t)r * (size_t)t->ncols + (size_t)c]);
      if (len > w[c])
        w[c] = len;
    }
  rule(t, w, '-', out);
  for (int r = 0; r <= t->nrows; r++) {
    for (int c = 0; c < t->ncols; c++) {
      const char *s = t->cells[(size_t)r * (size_t)t->ncols + (size_t)c];
      fprintf(out, t->right[c] ? "| %*s " : "| %-*s ", (int)w[c], s);
    }
    fputs("|\n", out);
    if (r == 0)
      rule(t, w, '=', out);
  }
  rule(t, w, '-', out);
}

void gs_table_free(gs_table_t *t) {
  if (!t)
    return;
  for (int r = 0; r <= t->nrows; r++)
    for (int c = 0; c < t->ncols; c++)
      free(t->cells[(size_t)r * (size_t)t->ncols + (size_t)c]);
  free(t->cells);
  free(t);
}

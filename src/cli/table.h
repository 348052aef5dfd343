/* table.h - boxed text tables for people, in the manner of nvidia-smi. */
#ifndef GS_CLI_TABLE_H
#define GS_CLI_TABLE_H

#include <stdbool.h>
#include <stdio.h>

typedef struct gs_table gs_table_t;

/* A table of `ncols` columns. `right[i]` aligns column i to the right (NULL:
 * all left). Headers are copied. Returns NULL when out of memory. The caller
 * frees the table with gs_table_free(). */
gs_table_t *gs_table_new(int ncols, const char *const *headers, const bool *right);
/* Adds a row of `ncols` cells (copied; NULL prints as empty). 0 or -1. */
int gs_table_add_row(gs_table_t *t, const char *const *cells);
void gs_table_print(const gs_table_t *t, FILE *out);
void gs_table_free(gs_table_t *t);

#endif

/* dl_table.h - a library opened at run time and a table of its functions
 * looked up by name: how the CUDA plugin reaches cuBLAS, cuFFT and NCCL,
 * so that it loads (and says what is missing) where they are not installed. */
#ifndef GS_HAL_CUDA_DL_TABLE_H
#define GS_HAL_CUDA_DL_TABLE_H

/* One function: its symbol, and where its address goes. */
typedef struct gs_dl_entry {
  const char *symbol;
  void **slot;
} gs_dl_entry;

/* dlopens `soname` into *library and fills every entry's slot. GS_ENOENT
 * naming `what` when the library cannot be opened or lacks a symbol (then
 * nothing stays open and *library is NULL). */
int gs_dl_load(const char *soname, const char *what, const gs_dl_entry *entries, int count,
               void **library);

#endif

/* strmap.h - a map from strings to ints (open addressing, FNV-1a), for the
 * name lookups of graphs and registries. Keys are copied. */
#ifndef GS_BASE_STRMAP_H
#define GS_BASE_STRMAP_H

#include <stddef.h>

typedef struct gs_strmap {
  struct gs_strmap_slot *slots;
  size_t cap, count;
} gs_strmap;

void gs_strmap_init(gs_strmap *m);
void gs_strmap_free(gs_strmap *m);
/* Sets key -> value. Returns 0 or GS_ENOMEM. */
int gs_strmap_put(gs_strmap *m, const char *key, int value);
/* The value of key, or -1 when absent. */
int gs_strmap_get(const gs_strmap *m, const char *key);

#endif

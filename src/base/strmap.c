/* strmap.c - a map from strings to ints with open addressing. */
#include "base/strmap.h"

#include "base/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct gs_strmap_slot {
  char *key; /* NULL: empty */
  int value;
};

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

void gs_strmap_init(gs_strmap *m) { memset(m, 0, sizeof *m); }

void gs_strmap_free(gs_strmap *m) {
  for (size_t i = 0; i < m->cap; i++)
    free(m->slots[i].key);
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static struct gs_strmap_slot *find(const gs_strmap *m, const char *key) {
  size_t mask = m->cap - 1;
  for (size_t i = hash(key) & mask;; i = (i + 1) & mask)
    if (!m->slots[i].key || strcmp(m->slots[i].key, key) == 0)
      return &m->slots[i];
}

static int grow(gs_strmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 16;
  struct gs_strmap_slot *old = m->slots;
  size_t old_cap = m->cap;
  m->slots = calloc(cap, sizeof *m->slots);
  if (!m->slots) {
    m->slots = old;
    return gs_error(GS_ENOMEM, "out of memory growing a name table to %zu entries", cap);
  }
  m->cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].key)
      *find(m, old[i].key) = old[i];
  free(old);
  return GS_OK;
}

int gs_strmap_put(gs_strmap *m, const char *key, int value) {
  if (2 * (m->count + 1) > m->cap && grow(m) < 0)
    return GS_ENOMEM;
  struct gs_strmap_slot *s = find(m, key);
  if (!s->key) {
    if (!(s->key = strdup(key)))
      return gs_error(GS_ENOMEM, "out of memory adding \"%.64s\" to a name table", key);
    m->count++;
  }
  s->value = value;
  return GS_OK;
}

int gs_strmap_get(const gs_strmap *m, const char *key) {
  if (m->cap == 0)
    return -1;
  const struct gs_strmap_slot *s = find(m, key);
  return s->key ? s->value : -1;
}

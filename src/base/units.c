/* units.c - quantities written for people. */
#include "base/units.h"

#include <stdio.h>

char *gs_format_bytes(uint64_t bytes, char *buf, size_t cap) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

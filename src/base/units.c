/* units.c - quantities written for people. */
#include "base/units.h"

#include "base/error.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int gs_parse_bytes(const char *text, uint64_t *out) {
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || !(v >= 0) || !isfinite(v))
    return gs_error(GS_EINVAL, "'%s' is not a size (such as 512M or 16G)", text);
  static const char units[] = "BKMGTP";
  double mult = 1;
  if (*end) {
    const char *u = strchr(units, toupper((unsigned char)*end));
    if (!u)
      return gs_error(GS_EINVAL, "'%s' is not a size (such as 512M or 16G)", text);
    mult = ldexp(1.0, 10 * (int)(u - units));
    end++;
    if (u != units && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0 || strcmp(end, "ib") == 0 ||
                       strcmp(end, "b") == 0))
      end += strlen(end);
    if (*end)
      return gs_error(GS_EINVAL, "'%s' is not a size (such as 512M or 16G)", text);
  }
  double bytes = v * mult;
  if (bytes > 9.2e18)
    return gs_error(GS_ERANGE, "size '%s' is too large", text);
  *out = (uint64_t)bytes;
  return GS_OK;
}

/* Any field of a time limit past this is beyond the 100 years allowed
 * anyway; bounding each keeps the arithmetic below far from overflow. */
#define MAX_PART 10000000000LL

int gs_parse_duration(const char *text, int64_t *seconds) {
  const char *p = text;
  long long part[4];
  int n = 0;
  long long days = 0;
  const char *dash = strchr(text, '-');
  if (dash) {
    char *end = NULL;
    days = strtoll(text, &end, 10);
    if (end != dash || days < 0 || days > MAX_PART)
      goto bad;
    p = dash + 1;
  }
  while (*p && n < 3) {
    if (!isdigit((unsigned char)*p))
      goto bad;
    char *end = NULL;
    part[n++] = strtoll(p, &end, 10);
    if (part[n - 1] > MAX_PART) /* no product below can overflow */
      goto bad;
    p = end;
    if (*p == ':')
      p++;
    else
      break;
  }
  if (n == 0)
    goto bad;
  long long s;
  if (*p && !dash && n == 1 && p[1] == '\0') {
    long long mult = *p == 's' ? 1 : *p == 'm' ? 60 : *p == 'h' ? 3600 : *p == 'd' ? 86400 : 0;
    if (!mult)
      goto bad;
    s = part[0] * mult;
  } else if (*p) {
    goto bad;
  } else if (dash) { /* D-HH[:MM[:SS]] */
    s = part[0] * 3600 + (n > 1 ? part[1] * 60 : 0) + (n > 2 ? part[2] : 0);
  } else {
    s = n == 1 ? part[0] * 60 : n == 2 ? part[0] * 60 + part[1]
                                       : part[0] * 3600 + part[1] * 60 + part[2];
  }
  s += days * 86400;
  if (s <= 0 || s > 366LL * 86400 * 100)
    goto bad;
  *seconds = s;
  return GS_OK;
bad:
  return gs_error(GS_EINVAL, "'%s' is not a time limit (such as 90s, 30m, 2h or HH:MM:SS)",
                  text);
}

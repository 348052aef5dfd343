/* units.h - quantities written for people. */
#ifndef GS_BASE_UNITS_H
#define GS_BASE_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* `bytes` in binary units ("512 B", "1.5 MiB") into buf; returns buf. */
char *gs_format_bytes(uint64_t bytes, char *buf, size_t cap);

/* "512", "64K", "1.5G", "16GiB", "100MB" (binary multiples either way) into
 * bytes. GS_EINVAL with the text quoted when it is not a size. */
int gs_parse_bytes(const char *text, uint64_t *out);

/* A time limit in seconds: "90s", "30m", "2h", "1d", Slurm's "MM", "MM:SS",
 * "HH:MM:SS" and "D-HH:MM:SS" (a bare number is minutes, as in Slurm).
 * GS_EINVAL when it is none of these. */
int gs_parse_duration(const char *text, int64_t *seconds);

#endif

/* units.h - quantities written for people. */
#ifndef GS_BASE_UNITS_H
#define GS_BASE_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* `bytes` in binary units ("512 B", "1.5 MiB") into buf; returns buf. */
char *gs_format_bytes(uint64_t bytes, char *buf, size_t cap);

#endif

/* header_cache.h - what parsing an inference request's JSON header gave,
 * kept for the next request that repeats the header byte for byte.
 *
 * Clients of the binary tensor extension (perf_analyzer, tritonclient in a
 * loop) send the same header with every request: only the binary data after
 * it changes. Parsing that header with jansson took 2.9 us, a tenth of the
 * server's CPU per request at 16 clients (bench/RESULTS.md). A header is
 * kept only when every input came as binary data of the model's own
 * datatype, so that what it set depends on the header and the model
 * version alone; a version loaded again is another version (its serial).
 *
 * Each thread keeps its own few headers: the HTTP threads parse with no lock
 * between them. */
#ifndef GS_API_HEADER_CACHE_H
#define GS_API_HEADER_CACHE_H

#include "api/infer_request.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* When this thread kept `header` (len bytes) for version v of m, fills r
 * (zeroed by the caller) as its parse did, reading the inputs from
 * `binary` (binary_len bytes, the body after the header), and returns
 * true. False when not kept, or when `binary` is shorter than the inputs
 * the header names (the full parse then says what is wrong). */
bool gs_header_cache_take(gs_served_model *m, gs_served_version *v, const char *header,
                          size_t len, const char *binary, size_t binary_len,
                          gs_infer_request *r);

/* Requests that took a kept parse, in all threads since the start. */
uint64_t gs_header_cache_hits(void);

/* Keeps what parsing `header` set in r, when every input of r is read in
 * place from `binary` (binary_len bytes after the header) as the model's
 * datatype. Otherwise, or for a header over the size kept, does nothing. */
void gs_header_cache_keep(const gs_served_version *v, const char *header, size_t len,
                          const char *binary, size_t binary_len, const gs_infer_request *r);

#endif

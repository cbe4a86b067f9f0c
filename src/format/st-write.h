/* st-write.h: streaming safetensors writer (implementation: st-write.c).
 *
 * A safetensors file is: u64 little-endian header length, the JSON header
 * {"__metadata__": {...}, "name": {"dtype", "shape", "data_offsets": [begin, end]}, ...}
 * (padded with spaces to a multiple of 8), then the data section.
 *
 * The header must be complete before any data, so the writer works in two phases:
 *   1. stw_create(path), stw_add() every tensor (name, dtype, shape) in the order its data
 *      will follow, optionally stw_meta();
 *   2. stw_begin() writes the header (data offsets in stw_add order, keys sorted by name as
 *      the reference implementation does), then the data is appended with stw_write() in any
 *      chunk sizes, crossing tensor boundaries freely; stw_end() checks that exactly the
 *      declared number of bytes came and closes the file.
 * Nothing is held in memory but the header, so a multi-GB shard is written in streaming.
 * stw_free() releases everything (call it after stw_end, or instead of it on failure: the
 * partial file is left for the caller to remove). Errors name the file.
 */
#pragma once
#include "k3-impl.h"
#include "st.h"

#include <stdint.h>

typedef struct stw_file stw_file;

/* Start a writer for path (the file is created by stw_begin). */
k3_status stw_create(const char *path, stw_file **out);
/* Declare the next tensor. ndim 0..ST_MAX_DIMS; duplicate names are rejected. */
k3_status stw_add(stw_file *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape);
/* A string entry of "__metadata__" ("format": "pt" is always present). */
k3_status stw_meta(stw_file *w, const char *key, const char *value);
/* Create the file and write the header (data 8-byte aligned, as the format asks). */
k3_status stw_begin(stw_file *w);
/* Instead of stw_begin, for a writer of its own (k3-repack writes shards with pwrite from several
 * threads): the whole header, u64 length + JSON + spaces so that the data section starts at a
 * multiple of align (8, 64, ...), malloc'ed into *out (free()); no file is created. */
k3_status stw_header(stw_file *w, size_t align, char **out, size_t *len);
/* Append n bytes of data (the tensors' bytes in declaration order). */
k3_status stw_write(stw_file *w, const void *data, size_t n);
/* Skip n data bytes: left as a hole (reads as zeros; a sparse file takes no disk for it). */
k3_status stw_skip(stw_file *w, uint64_t n);
/* Check every declared byte was written; flush and close the file. */
k3_status stw_end(stw_file *w);
void      stw_free(stw_file *w);

/* Bytes of the data section (sum of the declared tensors), and of the whole file. */
uint64_t stw_data_bytes(const stw_file *w);
uint64_t stw_file_bytes(const stw_file *w); /* valid after stw_begin */
/* Element sizes and header names of the dtypes: st_dtype_size / st_dtype_name (st.h, one table). */

/* st.h: safetensors model directory reader (implementation: st.c).
 *
 * A model directory holds either model.safetensors.index.json + shards, or a single
 * model.safetensors. st_open() parses and validates every header of every shard that
 * holds a text tensor (header length within the file, JSON well formed, known dtype,
 * product(shape) * dtype size == end - begin, ranges inside the data section and not
 * overlapping). With an index, only the entries it names are recorded as tensors (the others
 * are checked all the same). Shards holding only vision_tower.* / mm_projector.* tensors are never
 * opened. Tensor names are stored without the optional "language_model." prefix;
 * st_find() accepts either form.
 */
#pragma once
#include "k3-impl.h"
#include <stdint.h>

typedef enum st_dtype {
    ST_F64,
    ST_F32,
    ST_F16,
    ST_BF16,
    ST_I64,
    ST_I32,
    ST_I16,
    ST_I8,
    ST_U8,
    ST_BOOL,
    ST_DTYPE_COUNT
} st_dtype;

size_t      st_dtype_size(st_dtype t);
const char *st_dtype_name(st_dtype t);

#define ST_MAX_DIMS 8
/* The release's text tensors are "language_model.NAME"; the engine names them NAME. */
#define ST_PREFIX "language_model."
#define ST_PREFIX_LEN (sizeof ST_PREFIX - 1)

typedef struct st_tensor {
    const char *name; /* without "language_model." prefix                 */
    st_dtype    dtype;
    int         ndim;
    int64_t     shape[ST_MAX_DIMS];
    int         shard;  /* index into the directory's shard list            */
    uint64_t    offset; /* absolute byte offset of the data in the shard     */
    uint64_t    nbytes;
} st_tensor;

typedef struct st_dir st_dir;

k3_status st_open(const char *dir, st_dir **out);
void      st_close(st_dir *d);

const char      *st_path(const st_dir *d); /* the directory            */
int              st_n_tensors(const st_dir *d);
const st_tensor *st_tensor_at(const st_dir *d, int i);
const st_tensor *st_find(const st_dir *d, const char *name); /* NULL if absent          */
int              st_has_prefix(const st_dir *d);             /* names carried language_model. */

int         st_n_shards(const st_dir *d);
const char *st_shard_path(const st_dir *d, int shard); /* full path                */
uint64_t    st_shard_size(const st_dir *d, int shard);
int         st_shard_fd(const st_dir *d, int shard); /* -1 for never-opened shards */

/* Raw bytes of the whole tensor into dst (t->nbytes). Positioned reads; errors name the file. */
k3_status st_read(const st_dir *d, const st_tensor *t, void *dst);
/* Any float tensor (F32/F16/BF16/F64) converted to f32; dst holds numel floats. */
k3_status st_read_f32(const st_dir *d, const st_tensor *t, float *dst);
/* Elements [first, first+count) of a float tensor, converted to f32 (a band of rows). */
k3_status st_read_f32_part(const st_dir *d, const st_tensor *t, int64_t first, int64_t count, float *dst);
int64_t   st_numel(const st_tensor *t);

/* ---- additions (loader) ---- */
const char *st_shard_name(const st_dir *d, int shard);   /* file name as in the index  */
int         st_shard_opened(const st_dir *d, int shard); /* 0 for vision-only shards   */
/* Raw bytes [off, off+n) of a shard (absolute offsets, e.g. one expert's six tensors at once).
 * Positioned reads: safe from any thread. */
k3_status st_read_at(const st_dir *d, int shard, void *dst, uint64_t n, uint64_t off);
/* The tensor's bytes in a new block the caller frees (*block, *block_bytes long); *data points
 * at them inside it. A tensor of at least direct_min bytes (0: none; the loader's default is
 * ST_DIRECT_MIN), 64-byte aligned in its file, is read with O_DIRECT as the 4096-aligned span around it,
 * straight into the block (no page cache copy and no page fault per 4 KB: most of a container's open, with
 * buffered reads of the release's 4 GB); a filesystem that refuses O_DIRECT (tmpfs) gets buffered reads.
 * *data is 64-byte aligned either way. Not thread-safe on a shard's first O_DIRECT read. */
enum { ST_DIRECT_MIN = 1 << 20 };
k3_status st_read_block(st_dir *d, const st_tensor *t, uint64_t direct_min, void **block, const void **data,
                        uint64_t *block_bytes);
/* Tensor data read so far (st_read*, st_read_at, st_read_block; not headers or the index): read
 * calls, bytes, and the bytes read with O_DIRECT (a span's alignment slack included). */
typedef struct st_io {
    uint64_t calls, bytes, direct_bytes;
} st_io;
void st_io_get(const st_dir *d, st_io *out);
/* Pointer to the tensor's bytes in a read-only shared mapping of its whole shard (mapped on
 * first use, unmapped by st_close). Not thread-safe on first use of a shard: call it from one
 * thread. A mapped page the file no longer holds (truncated after st_open) or cannot give reads
 * as zeros instead of killing the process with SIGBUS (st.c's handler); such a fault is counted
 * (st_map_gen) and recorded with its shard and offset: the reader of the data fails what it
 * computed with st_map_check's error. Prefer st_read for data that is read once. */
k3_status st_map(st_dir *d, const st_tensor *t, const void **out);
/* Faults on mapped shards handled so far, in any st_dir (an atomic counter: compare it before and
 * after work that read mapped data). */
unsigned long st_map_gen(void);
/* K3_OK, or the error of a fault on one of d's mappings: the file, the offset, the tensor there, the
 * file's size now and when opened. Stays until st_map_repair. */
k3_status st_map_check(const st_dir *d);
/* Before reading mapped data again: each faulted shard of d is reopened by path and mapped at its
 * old address when the file is back at the size and header st_open read (then its fault is
 * cleared); else the error says why (the shard stays faulted). Thread-safe. */
k3_status st_map_repair(st_dir *d);

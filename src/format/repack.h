/* repack.h: the pre-quantized "k3 container" format, shared by tools/k3-repack.c (writer) and
 * the engine (load.c, config.c: readers) (implementation: repack.c).
 *
 * A container is an ordinary model directory (config.json, safetensors shards + index,
 * tokenizer files) written by k3-repack from a release checkpoint:
 *   - big weight matrices (those load.c quantizes at load) are stored already quantized, in the
 *     qmat byte layout of quant.h, with the same quant.c row functions the engine uses, so the
 *     bytes are bit-identical to load-time quantization:
 *       Q_I8  NAME      U8  [rows, cols]                 NAME.qs F32 [rows]
 *       Q_I4  NAME      U8  [rows, (cols+1)/2]           NAME.qs F32 [rows, (cols+63)/64]
 *       Q_F32 NAME      F32 [rows, cols]                 (no sidecar; a class kept at 32 bits)
 *   - MLA kv_b_proj is stored as the engine uses it: per head h, uk_t[h] = (nope rows of head h)^T
 *     (kv_lora, nope) then uv[h] = (v rows of head h) (v, kv_lora), each quantized by rows:
 *       NAME U8 [Hm * (wbytes(kl, nope) + wbytes(v, kl))], NAME.qs F32 [Hm * (scales of both)]
 *       (or NAME F32 [Hm * (kl*nope + v*kl)] at 32 bits), heads back to back, uk_t before uv;
 *   - routed experts are copied byte for byte (MXFP4 as released), experts in id order, the six
 *     tensors of one expert back to back (one contiguous read per expert);
 *   - every other text tensor is copied as stored; vision tensors are dropped.
 * Inside a shard, 4-byte tensors come first, then 2-byte, then 1-byte ones, so every F32 tensor
 * (scales) is 4-byte aligned in the file and can be used in place from a mapping (K3_MMAP=1).
 * config.json carries "k3_container": {"version", "bits", "mla_bits", "head_bits", "i4_group"};
 * each shard's __metadata__ carries "k3.container" and one "k3.q.NAME" entry per quantized
 * matrix ("I8 rows cols" / "I4 rows cols group" / "F32 rows cols"), describing the format.
 *
 * Readers detect a container matrix from the tensor itself (U8 + NAME.qs, or a 1-D kv_b), with
 * every shape checked against the logical shape the configuration implies.
 */
#pragma once
#include "k3-impl.h"
#include "quant.h"
#include "st.h"

#define RP_VERSION 1
#define RP_SIDECAR ".qs"             /* scale tensor suffix                                  */
#define RP_CONFIG_KEY "k3_container" /* config.json section                                */

/* The container section of DIR/config.json. */
typedef struct rp_info {
    int present;                   /* config.json has a k3_container section                   */
    int bits, mla_bits, head_bits; /* 4, 8 or 32 each                                     */
} rp_info;

/* Read DIR/config.json's k3_container section (info->present = 0 when absent).
 * K3_ERR_CONFIG naming the key when present but malformed. */
k3_status rp_info_load(const char *dir, rp_info *info);

/* The bits a model runs at (load.c at open, inspect.c for its report), one rule: P holds
 * k3_params_default's (defaults, then K3_*); for a container (CI->present), K3_BITS /
 * K3_MLA_BITS / K3_HEAD_BITS left unset take the stored bits, except that with K3_BITS set the
 * unset two follow K3_BITS. Returns the RP_FROM_* mask of the bits taken from the container
 * (0 when CI is not one). */
enum { RP_FROM_BITS = 1, RP_FROM_MLA = 2, RP_FROM_HEAD = 4 };
int rp_run_bits(const rp_info *ci, k3_params *p);

/* How a logical rows x cols matrix is stored. */
typedef struct rp_form {
    int type;           /* Q_I8 / Q_I4 (container), Q_F32 (F32 as stored), -1: another float
                           dtype (BF16/F16/F64) that needs conversion                      */
    const st_tensor *w; /* the weight tensor                                          */
    const st_tensor *s; /* NAME.qs for Q_I8/Q_I4, else NULL                           */
} rp_form;

/* Find NAME (a rows x cols matrix) and classify how it is stored. K3_ERR_FORMAT naming the
 * shard and tensor when it is missing, a U8 tensor without a valid sidecar, or shapes that fit
 * no layout. */
k3_status rp_matrix_form(const st_dir *d, const char *name, int rows, int cols, rp_form *out);

/* kv_b_proj: heads Hm, per head nope + v rows of kv_lora columns. Stored either as the release's
 * float [Hm*(nope+v), kv_lora] (type -1 or Q_F32 with w->ndim == 2) or split (w->ndim == 1). */
typedef struct rp_kvb {
    int Hm, nope, v, kl;
} rp_kvb;
/* Bytes of one head's weights and number of one head's scale floats, split layout. */
size_t rp_kvb_head_wbytes(int type, const rp_kvb *k);
size_t rp_kvb_head_sfloats(int type, const rp_kvb *k);
/* Classify kv_b. out->type as in rp_form; split = 1 for the container's per-head layout. */
k3_status rp_kvb_form(const st_dir *d, const char *name, const rp_kvb *k, rp_form *out, int *split);

/* Bits (4, 8, 32) -> qmat type. */
int         rp_bits_type(int bits);
const char *rp_type_name(int type); /* "F32", "I8", "I4" */

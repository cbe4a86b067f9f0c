/* wmap.h: the weight_map of model.safetensors.index.json (tensor name -> shard file), read fast.
 *
 * The release's index is 60 MB (497,052 entries); jansson takes ~2.3 s of CPU to build a tree of
 * it, which the bad-input cases of a checkpoint (a missing or truncated shard) paid before any
 * check. wm_scan reads exactly what st.c needs in one pass and stops, without a verdict, on
 * anything outside the index's plain form; the caller then parses the whole text with jansson
 * (wm_parse_full: JSON_REJECT_DUPLICATES, the reader st.c always used), which either accepts it
 * (the same entries) or gives the error. So the result, and every error, is jansson's on every input; the
 * scanner only makes the common case fast. tests/test-wmap.c checks the two against each other.
 * The same scanner reads each shard's header (wm_scan_header): jansson's tree of a header cost
 * 60 % of an --inspect of the release replica, and a hostile 85 MB header 1.7 GB of memory.
 */
#pragma once
#include "k3-impl.h"
#include "st.h"

#include <stddef.h>

typedef struct wm_entry {
    const char *name; /* tensor name, decoded (every JSON escape resolved), NUL-terminated */
    const char *key;  /* name without ST_PREFIX (the engine's name; a pointer into name)   */
    const char *file; /* its shard file, decoded                                           */
} wm_entry;

typedef struct wm_map {
    wm_entry *e; /* (n) entries, in the order of the document */
    size_t    n;
    char     *arena; /* the decoded strings (owned; NULL: they live in the caller's text) */
    k3_names  names; /* the entries by key; of two with one key (X and ST_PREFIX X) the first.
                        Built by the duplicate check of the index's names: one pass over them */
} wm_map;

/* The scanner, which decodes text's strings in place (text is spent either way). 0: text[0..len)
 * is one JSON object (whitespace around it) whose members are a "weight_map" object with string
 * values and other members of any value, with no duplicate key and nothing jansson would refuse
 * (checked exactly: escapes, surrogate pairs, UTF-8, \u0000, numbers, depth); *out's entries
 * point into text (out->arena NULL: text stays the caller's). -1: it stopped at byte *at (invalid
 * JSON, or valid but beyond what it handles: a value that is not a string, a large number, deep
 * nesting, an object of more than 16 members outside weight_map); *out is empty. */
int wm_scan(char *text, size_t len, wm_map *out, size_t *at);
/* The full parse with jansson: the same entries (in out->arena), or K3_ERR_FORMAT naming file,
 * line, column and byte offset (or the member that is wrong). K3_ERR_NOMEM when out of memory. */
k3_status wm_parse_full(const char *file, const char *text, size_t len, wm_map *out);
void      wm_free(wm_map *m); /* frees e and arena */

/* One tensor of a safetensors header as the scanner read it, its figures not checked yet. */
typedef struct wm_tensor {
    const char *name, *dtype; /* decoded, in the text */
    int         ndim;         /* shape[0..ndim), each >= 0 */
    int64_t     shape[ST_MAX_DIMS];
    uint64_t    begin, end; /* data_offsets */
} wm_tensor;
/* Called for each tensor in the order of the header; nonzero stops the scan. */
typedef int (*wm_tensor_cb)(void *ud, const wm_tensor *t);
/* A shard's header text (the JSON after the length field) by the same scanner, in place, with no
 * tree: each tensor's entry goes to cb as it is read ("__metadata__" is skipped). 0: text is an
 * object whose members are "__metadata__" (any value) and tensors, each an object with a string
 * dtype, a shape of at most ST_MAX_DIMS integers and data_offsets of two (non-negative, at most 18
 * digits; other members of any value), no key twice at any level, nothing jansson would refuse.
 * -1: it stopped at byte *at (invalid JSON, or a form it leaves to the full parse: a negative or
 * real number, a missing member, ...); -2: cb stopped it. After -1 or -2 the tensors cb was given
 * are not the header's: the caller undoes what it did with them and parses the text again, read
 * anew, with jansson. */
int wm_scan_header(char *text, size_t len, wm_tensor_cb cb, void *ud, size_t *at);

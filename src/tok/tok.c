/* tok.c: vocabulary loading, rank BPE, encoding and decoding (tiktoken, exactly).
 *
 * DESIGN
 * Vocabulary: tiktoken.model lines "base64 rank" with ranks 0..N-1 in order; the bytes
 * go back to back into one blob, and an open-addressing hash table (power-of-two
 * slots, linear probing, 32-bit hash kept per slot) maps a byte string to its rank.
 * The 256 ids after N are the reserved specials, named from tokenizer_config.json
 * (added_tokens_decoder) or "<|reserved_token_{id}|>".
 *
 * Encoding = tiktoken's encode: (kimi only) cut the input like the release's wrapper,
 * then (when the caller allows) split at special-token names, pre-tokenize each
 * stretch (tok-pre.c) and BPE each piece: a piece that is a vocabulary entry is one
 * token; otherwise start from bytes and repeatedly merge the adjacent pair whose
 * concatenation has the lowest rank (ties: leftmost), until no pair is in the vocab.
 * tiktoken rescans all pairs after each merge (quadratic on long pieces); we keep the
 * parts in a linked list over byte offsets and the candidate pairs in a min-heap keyed
 * (rank, start), so ties resolve leftmost exactly as the scan does; an entry is stale
 * when its start was merged away or its pair end moved. Short pieces use the scan.
 *
 * Decoding concatenates bytes. Text decoding replaces invalid UTF-8 with U+FFFD using
 * the maximal-subpart rule (Unicode ch. 3 / WHATWG): the streaming decoder holds an
 * incomplete tail until the next token decides it.
 */
#include "tok.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* ==== id arrays ========================================================== */

void k3_ids_free(k3_ids *ids) {
    if (!ids)
        return;
    free(ids->v);
    memset(ids, 0, sizeof *ids);
}

static k3_status ids_reserve(k3_ids *ids, size_t extra) {
    if (extra > SIZE_MAX - ids->n)
        return k3_err(K3_ERR_NOMEM, "token ids: out of memory for %zu + %zu ids", ids->n, extra);
    if (ids->n + extra <= ids->cap)
        return K3_OK; /* nothing to add to an empty one allocates nothing */
    int32_t *v = k3_grow_z(ids->v, &ids->cap, ids->n + extra, sizeof *v, 64);
    if (!v)
        return k3_err(K3_ERR_NOMEM, "token ids: out of memory for %zu ids", ids->n + extra);
    ids->v = v;
    return K3_OK;
}

k3_status k3_ids_append(k3_ids *ids, const int32_t *v, size_t n) {
    if (!n)
        return K3_OK; /* v may be NULL then (an empty k3_ids) */
    k3_status st = ids_reserve(ids, n);
    if (!st) {
        memcpy(ids->v + ids->n, v, n * sizeof *v);
        ids->n += n;
    }
    return st;
}

k3_status k3_ids_push(k3_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        k3_status st = ids_reserve(ids, 1);
        if (st)
            return st;
    }
    ids->v[ids->n++] = id;
    return K3_OK;
}

k3_status k3_ids_parse(const char *text, int32_t max_id, k3_ids *out) {
    static const char sep[] = " \t\r\n,";
    for (size_t k = 1;; k++) {
        text += strspn(text, sep);
        if (!*text)
            return K3_OK;
        char *end;
        errno  = 0;
        long v = strtol(text, &end, 10);
        if (end == text || errno || v < 0 || v > max_id || (*end && !strchr(sep, *end))) {
            size_t w = strcspn(text, sep);
            return k3_err(K3_ERR_ARG, "token %zu: '%.*s' is not an id in 0..%d", k, (int)(w < 40 ? w : 40),
                          text, (int)max_id);
        }
        k3_status st = k3_ids_push(out, (int32_t)v);
        if (st)
            return st;
        text = end;
    }
}

/* ==== hash =============================================================== */

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t mix(uint64_t h) {
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 8 bytes that determine s[0..n) exactly given n <= 8 (overlapping loads, no byte-wise
 * copy: a partial copy followed by a wide read stalls store forwarding on every lookup). */
static inline uint64_t key8(const uint8_t *s, size_t n) {
    if (n >= 8)
        return rd64(s);
    if (n >= 4)
        return rd32(s) | (uint64_t)rd32(s + n - 4) << 32;
    return (uint64_t)s[0] | (uint64_t)s[n / 2] << 8 | (uint64_t)s[n - 1] << 16;
}

static inline uint32_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    if (n <= 8) {
        h = mix(h ^ key8(s, n)) * 0x9E3779B97F4A7C15ull;
    } else {
        size_t i = 0;
        for (; i + 8 < n; i += 8)
            h = mix(h ^ rd64(s + i)) * 0x9E3779B97F4A7C15ull;
        h = mix(h ^ rd64(s + n - 8)) * 0x9E3779B97F4A7C15ull; /* last 8, overlapping */
    }
    return (uint32_t)(mix(h) >> 32);
}

static inline uint32_t filter_bit(uint32_t h) {
    return (h * 0x9E3779B1u) >> (32 - TOK_FILTER_LOG2);
}

static inline uint32_t slot_tag(uint32_t h, size_t n) {
    return (h & ~0xFFu) | (uint32_t)(n < 255 ? n : 255);
}

int32_t tok_rank(const k3_tok *t, const uint8_t *s, size_t n) {
    if (n == 2)
        return t->pair_rank[s[0] | s[1] << 8];
    if (n == 1)
        return t->byte_rank[s[0]];
    if (n == 0 || n > (size_t)t->max_len)
        return TOK_RANK_NONE;
    uint32_t h = hash_bytes(s, n), tag = slot_tag(h, n);
    uint32_t fb = filter_bit(h);
    if (!(t->filter[fb >> 6] >> (fb & 63) & 1))
        return TOK_RANK_NONE;
    uint64_t hd = key8(s, n);
    for (uint32_t i = h & t->ht_mask;; i = (i + 1) & t->ht_mask) {
        const struct tok_slot *sl = &t->ht[i];
        if (sl->rank < 0)
            return TOK_RANK_NONE;
        if (sl->tag == tag && sl->head == hd &&
            (n <= 8 ||
             (t->off[sl->rank + 1] - t->off[sl->rank] == n && !memcmp(t->blob + t->off[sl->rank], s, n))))
            return sl->rank;
    }
}

/* ==== loading ============================================================ */

void k3_tok_free(k3_tok *t) {
    if (!t)
        return;
    free(t->blob);
    free(t->off);
    free(t->ht);
    free(t->pair_rank);
    free(t->filter);
    if (t->sp_name)
        for (int i = 0; i < TOK_N_RESERVED; i++)
            free(t->sp_name[i]);
    free(t->sp_name);
    free(t->sp_len);
    free(t);
}

static int b64val(uint8_t c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict standard base64 with padding; returns decoded length or -1. */
static long b64_decode(const uint8_t *in, size_t n, uint8_t *out) {
    if (n == 0 || n % 4)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (in[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                if (pad)
                    return -1; /* data after '=' */
                v[k] = b64val(in[i + k]);
                if (v[k] < 0)
                    return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++]   = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
        if ((pad == 1 && (w & 0xFF)) || (pad == 2 && (w & 0xFFFF)))
            return -1; /* non-canonical */
    }
    return (long)o;
}

static k3_status set_special(k3_tok *t, int i, const char *name, const char *file, const char *where) {
    size_t len = strlen(name);
    if (len == 0)
        return k3_err(K3_ERR_FORMAT, "%s: %s: empty special token name", file, where);
    free(t->sp_name[i]);
    t->sp_name[i] = k3_strdup(name);
    if (!t->sp_name[i])
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
    t->sp_len[i] = (uint32_t)len;
    return K3_OK;
}

static k3_status parse_model(k3_tok *t, const char *txt, size_t n, const char *file) {
    /* count lines for the capacity */
    size_t lines = 1;
    for (size_t i = 0; i < n; i++)
        lines += txt[i] == '\n';
    t->off  = malloc((lines + 1) * sizeof *t->off);
    t->blob = malloc(n / 4 * 3 + 4);
    if (!t->off || !t->blob)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
    int *line_of = malloc((lines + 1) * sizeof *line_of); /* (ranks) line of each rank */
    if (!line_of)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
    k3_status st     = K3_OK;
    uint32_t  blob_n = 0;
    int32_t   r      = 0;
    size_t    pos    = 0;
    int       lineno = 0;
    t->off[0]        = 0;
    while (pos < n) {
        lineno++;
        size_t e = pos;
        while (e < n && txt[e] != '\n')
            e++;
        size_t le = e;
        if (le > pos && txt[le - 1] == '\r')
            le--;
        const uint8_t *L  = (const uint8_t *)txt + pos;
        size_t         ln = le - pos;
        pos               = e + 1;
        if (ln == 0)
            continue; /* blank line (e.g. at the end) */
        size_t sp = 0;
        while (sp < ln && L[sp] != ' ' && L[sp] != '\t')
            sp++;
        if (sp == ln) {
            st = k3_err(K3_ERR_FORMAT, "%s: line %d: expected 'BASE64 RANK', found no separator", file,
                        lineno);
            goto done;
        }
        long bl = b64_decode(L, sp, t->blob + blob_n);
        if (bl <= 0) {
            st = k3_err(K3_ERR_FORMAT, "%s: line %d: bad base64 '%.*s'", file, lineno,
                        (int)(sp < 60 ? sp : 60), L);
            goto done;
        }
        size_t q = sp;
        while (q < ln && (L[q] == ' ' || L[q] == '\t'))
            q++;
        long   rank   = 0;
        size_t dstart = q;
        while (q < ln && L[q] >= '0' && L[q] <= '9' && rank < 0x7fffffff)
            rank = rank * 10 + (L[q++] - '0');
        if (q == dstart || q != ln) {
            st = k3_err(K3_ERR_FORMAT, "%s: line %d: rank '%.*s' is not a decimal number", file, lineno,
                        (int)(ln - dstart), L + dstart);
            goto done;
        }
        if (rank != r) {
            st = k3_err(K3_ERR_FORMAT,
                        "%s: line %d: rank %ld is %s (expected %d: ranks are 0, 1, 2, ... in order)", file,
                        lineno, rank, rank < r ? "duplicated" : "out of order", r);
            goto done;
        }
        line_of[r] = lineno;
        blob_n += (uint32_t)bl;
        if (bl > t->max_len)
            t->max_len = (int32_t)bl;
        t->off[++r] = blob_n;
    }
    if (r == 0) {
        st = k3_err(K3_ERR_FORMAT, "%s: no tokens", file);
        goto done;
    }
    t->n_base = r;
    /* hash table, with duplicate detection */
    uint32_t slots = 1;
    while (slots < (uint32_t)r * 2u)
        slots <<= 1;
    t->ht_mask   = slots - 1;
    t->ht        = malloc(slots * sizeof *t->ht);
    t->pair_rank = malloc(65536 * sizeof *t->pair_rank);
    t->filter    = calloc(TOK_FILTER_BITS / 64, sizeof *t->filter);
    if (!t->ht || !t->pair_rank || !t->filter) {
        st = k3_err(K3_ERR_NOMEM, "%s: out of memory", file);
        goto done;
    }
    for (uint32_t i = 0; i < slots; i++)
        t->ht[i].rank = -1;
    for (int b = 0; b < 256; b++)
        t->byte_rank[b] = TOK_RANK_NONE;
    for (int b = 0; b < 65536; b++)
        t->pair_rank[b] = TOK_RANK_NONE;
    for (int32_t k = 0; k < r; k++) {
        const uint8_t *s   = t->blob + t->off[k];
        uint32_t       len = t->off[k + 1] - t->off[k];
        uint32_t       h = hash_bytes(s, len), tag = slot_tag(h, len);
        uint32_t       i = h & t->ht_mask;
        for (;; i = (i + 1) & t->ht_mask) {
            int32_t o = t->ht[i].rank;
            if (o < 0)
                break;
            if (t->ht[i].tag == tag && t->off[o + 1] - t->off[o] == len &&
                !memcmp(t->blob + t->off[o], s, len)) {
                st = k3_err(K3_ERR_FORMAT,
                            "%s: line %d: duplicate token bytes (rank %d has the same bytes, line %d)", file,
                            line_of[k], o, line_of[o]);
                goto done;
            }
        }
        uint32_t fb = filter_bit(h);
        t->filter[fb >> 6] |= 1ull << (fb & 63);
        t->ht[i].head = key8(s, len);
        t->ht[i].tag  = tag;
        t->ht[i].rank = k;
        if (len == 1)
            t->byte_rank[s[0]] = k;
        if (len == 2)
            t->pair_rank[s[0] | s[1] << 8] = k;
    }
    for (int b = 0; b < 256; b++)
        if (t->byte_rank[b] == TOK_RANK_NONE) {
            st =
                k3_err(K3_ERR_FORMAT,
                       "%s: byte 0x%02X has no token (every single byte must be in the vocabulary)", file, b);
            goto done;
        }
done:
    free(line_of);
    return st;
}

static k3_status parse_config(k3_tok *t, const char *js, const char *file) {
    json_error_t je;
    json_t      *root = json_loads(js, JSON_REJECT_DUPLICATES, &je); /* as config.json: one value a key */
    if (!root)
        return k3_err(K3_ERR_FORMAT, "%s: line %d: %s", file, je.line, je.text);
    k3_status st  = K3_OK;
    json_t   *dec = json_object_get(root, "added_tokens_decoder");
    if (!json_is_object(dec)) {
        st = k3_err(K3_ERR_FORMAT, "%s: 'added_tokens_decoder' missing or not an object", file);
        goto done;
    }
    const char *key;
    json_t     *v;
    json_object_foreach(dec, key, v) {
        char *end;
        errno   = 0;
        long id = strtol(key, &end, 10);
        /* plain decimal only: strtol also reads " 7", "+7" and "007", the same id as "7" */
        if (!(*key >= '1' && *key <= '9') || *end || errno) {
            st = k3_err(K3_ERR_FORMAT, "%s: added_tokens_decoder: key '%s' is not a token id", file, key);
            goto done;
        }
        json_t *c = json_object_get(v, "content");
        if (!json_is_string(c)) {
            st = k3_err(K3_ERR_FORMAT, "%s: added_tokens_decoder.%s.content missing or not a string", file,
                        key);
            goto done;
        }
        if (id < t->n_base || id >= (long)t->n_base + TOK_N_RESERVED) {
            st = k3_err(K3_ERR_FORMAT, "%s: added_tokens_decoder.%s: id outside the reserved range %d..%d",
                        file, key, t->n_base, t->n_base + TOK_N_RESERVED - 1);
            goto done;
        }
        char where[64];
        snprintf(where, sizeof where, "added_tokens_decoder.%s", key);
        if ((st = set_special(t, (int)(id - t->n_base), json_string_value(c), file, where)))
            goto done;
    }
    /* the chat format needs these four: the release names them all */
    static const char *const need[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        if (k3_tok_special(t, need[i]) < 0) {
            st = k3_err(K3_ERR_FORMAT, "%s: added_tokens_decoder has no special token '%s'", file, need[i]);
            goto done;
        }
    }
done:
    json_decref(root);
    return st;
}

k3_status tok_load_mem(const char *model_txt, size_t model_len, const char *model_name,
                       const char *config_json, const char *config_name, enum tok_family f, k3_tok **out) {
    *out      = NULL;
    k3_tok *t = calloc(1, sizeof *t);
    if (!t)
        return k3_err(K3_ERR_NOMEM, "tokenizer: out of memory");
    t->family    = f;
    k3_status st = parse_model(t, model_txt, model_len, model_name);
    if (st)
        goto fail;
    t->sp_name = calloc(TOK_N_RESERVED, sizeof *t->sp_name);
    t->sp_len  = calloc(TOK_N_RESERVED, sizeof *t->sp_len);
    if (!t->sp_name || !t->sp_len) {
        st = k3_err(K3_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    if (config_json && (st = parse_config(t, config_json, config_name)))
        goto fail;
    /* unnamed reserved ids; then check names are unique */
    for (int i = 0; i < TOK_N_RESERVED; i++) {
        if (t->sp_name[i])
            continue;
        char nm[48];
        snprintf(nm, sizeof nm, "<|reserved_token_%d|>", t->n_base + i);
        if ((st = set_special(t, i, nm, model_name, "reserved ids")))
            goto fail;
    }
    for (int i = 0; i < TOK_N_RESERVED; i++) {
        for (int j = 0; j < i; j++)
            if (t->sp_len[i] == t->sp_len[j] && !memcmp(t->sp_name[i], t->sp_name[j], t->sp_len[i])) {
                st = k3_err(K3_ERR_FORMAT, "%s: special token name '%s' is used by ids %d and %d",
                            config_name ? config_name : model_name, t->sp_name[i], t->n_base + j,
                            t->n_base + i);
                goto fail;
            }
        t->sp_first[(uint8_t)t->sp_name[i][0]] = 1;
        if ((int32_t)t->sp_len[i] > t->max_sp_len)
            t->max_sp_len = (int32_t)t->sp_len[i];
    }
    tok_pre_init();
    *out = t;
    return K3_OK;
fail:
    k3_tok_free(t);
    return st;
}

/* k3_tok_load, and for a model's tokenizer (need_cfg) a missing tokenizer_config.json is an error:
 * it names the reserved ids the chat format needs and picks the kimi pattern, and without it the
 * model loaded (and --inspect passed it) only for every turn to fail at the chat encoder. */
static k3_status tok_load_dir(const char *dir, const char *pattern, int need_cfg, k3_tok **out) {
    *out = NULL;
    char mp[4096], cp[4096];
    snprintf(mp, sizeof mp, "%s/tiktoken.model", dir);
    snprintf(cp, sizeof cp, "%s/tokenizer_config.json", dir);
    char     *model = NULL, *cfg = NULL;
    size_t    mlen = 0, clen = 0;
    int       missing = 0;
    double    t0      = k3_time();
    k3_status st      = k3_read_regular(mp, mp, &model, &mlen, NULL);
    if (st)
        return st;
    if ((st = k3_read_regular(cp, cp, &cfg, &clen, &missing)))
        goto done;
    if (missing && need_cfg) {
        st = k3_err(K3_ERR_FORMAT,
                    "%s: missing (a model's tokenizer names its reserved ids there: the chat format's "
                    "<|open|>, <|close|>, <|sep|>, <|end_of_msg|>)",
                    cp);
        goto done;
    }
    enum tok_family f = cfg ? TOK_KIMI : TOK_O200K;
    if (pattern) {
        if (!strcmp(pattern, "kimi"))
            f = TOK_KIMI;
        else if (!strcmp(pattern, "o200k"))
            f = TOK_O200K;
        else {
            st = k3_err(K3_ERR_ARG, "pattern '%s': expected kimi or o200k", pattern);
            goto done;
        }
    }
    st = tok_load_mem(model, mlen, mp, cfg, cp, f, out);
    if (!st) /* K3_VERBOSE: what a model's open spends on its tokenizer, and how often it is read */
        K3_LOG_INFO("%s: %d ranks and %d reserved ids read in %.0f ms", mp, (*out)->n_base, TOK_N_RESERVED,
                    1e3 * (k3_time() - t0));
done:
    free(model);
    free(cfg);
    return st;
}

k3_status k3_tok_load(const char *dir, const char *pattern, k3_tok **out) {
    return tok_load_dir(dir, pattern, 0, out);
}

k3_status k3_tok_load_model(const char *dir, int32_t vocab, k3_tok **out) {
    k3_status st = tok_load_dir(dir, NULL, 1, out);
    if (st || k3_tok_n_vocab(*out) <= vocab)
        return st;
    st = k3_err(K3_ERR_FORMAT,
                "%s/tiktoken.model: %d tokens and %d reserved ids do not fit config.json's vocab_size %d "
                "(the model has no embedding row for ids %d..%d)",
                dir, (*out)->n_base, TOK_N_RESERVED, vocab, vocab, k3_tok_n_vocab(*out) - 1);
    k3_tok_free(*out);
    *out = NULL;
    return st;
}

int32_t k3_tok_n_vocab(const k3_tok *t) {
    return t->n_base + TOK_N_RESERVED;
}
int32_t k3_tok_special(const k3_tok *t, const char *name) {
    size_t len = strlen(name);
    for (int i = 0; i < TOK_N_RESERVED; i++)
        if (t->sp_name[i] && t->sp_len[i] == len && !memcmp(t->sp_name[i], name, len))
            return t->n_base + i;
    return -1;
}

int k3_tok_is_special(const k3_tok *t, int32_t id) {
    return id >= t->n_base && id < t->n_base + TOK_N_RESERVED;
}

const char *k3_tok_piece(const k3_tok *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_base + TOK_N_RESERVED)
        return NULL;
    if (id >= t->n_base) {
        *len = t->sp_len[id - t->n_base];
        return t->sp_name[id - t->n_base];
    }
    *len = t->off[id + 1] - t->off[id];
    return (const char *)t->blob + t->off[id];
}

/* ==== BPE ================================================================ */

void tok_scratch_free(tok_scratch *sc) {
    free(sc->next);
    free(sc->prev);
    free(sc->heap);
    free(sc->heap_end);
    memset(sc, 0, sizeof *sc);
}

/* tiktoken's _byte_pair_merge loop as written: parts in an array, rescan for the
 * lowest pair rank (leftmost on ties), merge, refresh the two neighbouring ranks.
 * start/rank have n + 1 entries. Quadratic: used for short pieces and as the reference. */
static k3_status bpe_scan(const k3_tok *t, const uint8_t *s, size_t n, uint32_t *start, int32_t *rank,
                          k3_ids *out) {
    size_t np = n + 1; /* parts: start[0..np), the last one is the end sentinel */
    for (size_t i = 0; i <= n; i++)
        start[i] = (uint32_t)i;
    for (size_t i = 0; i + 2 <= n; i++)
        rank[i] = tok_rank(t, s + i, 2);
    rank[n - 1] = rank[n] = TOK_RANK_NONE;
    for (;;) {
        int32_t mr = TOK_RANK_NONE;
        size_t  mi = 0;
        for (size_t i = 0; i + 1 < np; i++)
            if (rank[i] < mr) {
                mr = rank[i];
                mi = i;
            }
        if (mr == TOK_RANK_NONE)
            break;
        memmove(start + mi + 1, start + mi + 2, (np - mi - 2) * sizeof *start);
        memmove(rank + mi + 1, rank + mi + 2, (np - mi - 2) * sizeof *rank);
        np--;
        rank[mi] = mi + 2 < np ? tok_rank(t, s + start[mi], start[mi + 2] - start[mi]) : TOK_RANK_NONE;
        if (mi > 0)
            rank[mi - 1] = tok_rank(t, s + start[mi - 1], start[mi + 1] - start[mi - 1]);
    }
    k3_status st = ids_reserve(out, np - 1);
    if (st)
        return st;
    for (size_t i = 0; i + 1 < np; i++)
        out->v[out->n++] = tok_rank(t, s + start[i], start[i + 1] - start[i]);
    return K3_OK;
}

k3_status tok_bpe_ref(const k3_tok *t, const uint8_t *s, size_t n, k3_ids *out) {
    if (n == 0)
        return K3_OK;
    int32_t whole = tok_rank(t, s, n);
    if (whole != TOK_RANK_NONE)
        return k3_ids_push(out, whole);
    uint32_t *start = malloc((n + 1) * sizeof *start);
    int32_t  *rank  = malloc((n + 1) * sizeof *rank);
    k3_status st =
        start && rank ? bpe_scan(t, s, n, start, rank, out) : k3_err(K3_ERR_NOMEM, "bpe: out of memory");
    free(start);
    free(rank);
    return st;
}

static k3_status scratch_reserve(tok_scratch *sc, size_t n) {
    if (n <= sc->cap)
        return K3_OK;
    size_t cap = sc->cap ? sc->cap : 256;
    while (cap < n)
        cap *= 2;
    uint32_t *nx = realloc(sc->next, (cap + 1) * sizeof *nx);
    if (nx)
        sc->next = nx;
    uint32_t *pv = realloc(sc->prev, (cap + 1) * sizeof *pv);
    if (pv)
        sc->prev = pv;
    uint64_t *hp = realloc(sc->heap, 3 * cap * sizeof *hp);
    if (hp)
        sc->heap = hp;
    uint32_t *he = realloc(sc->heap_end, 3 * cap * sizeof *he);
    if (he)
        sc->heap_end = he;
    if (!nx || !pv || !hp || !he)
        return k3_err(K3_ERR_NOMEM, "bpe: out of memory for a %zu-byte piece", n);
    sc->cap      = cap;
    sc->heap_cap = 3 * cap;
    return K3_OK;
}

typedef struct heap {
    uint64_t *k; /* (cap) rank << 32 | start */
    uint32_t *e; /* (cap) pair end           */
    size_t    n;
} heap;

static inline void heap_push(heap *h, uint64_t key, uint32_t end) {
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->k[p] <= key)
            break;
        h->k[i] = h->k[p];
        h->e[i] = h->e[p];
        i       = p;
    }
    h->k[i] = key;
    h->e[i] = end;
}

static inline void heap_pop(heap *h) {
    uint64_t key = h->k[--h->n];
    uint32_t end = h->e[h->n];
    size_t   i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h->k[c + 1] < h->k[c])
            c++;
        if (key <= h->k[c])
            break;
        h->k[i] = h->k[c];
        h->e[i] = h->e[c];
        i       = c;
    }
    h->k[i] = key;
    h->e[i] = end;
}

/* Short pieces: the scan on stack arrays (same result as the heap, no allocation). */
#define BPE_SMALL 48

k3_status tok_bpe(const k3_tok *t, const uint8_t *s, size_t n, tok_scratch *sc, k3_ids *out) {
    if (n == 0)
        return K3_OK;
    int32_t whole = tok_rank(t, s, n);
    if (whole != TOK_RANK_NONE)
        return k3_ids_push(out, whole);
    if (n <= BPE_SMALL) {
        uint32_t start[BPE_SMALL + 1];
        int32_t  rank[BPE_SMALL + 1];
        return bpe_scan(t, s, n, start, rank, out);
    }
    if (n > UINT32_MAX - 1)
        return k3_err(K3_ERR_ARG, "bpe: piece of %zu bytes is too long", n);
    k3_status st = scratch_reserve(sc, n);
    if (st)
        return st;
    uint32_t *next = sc->next, *prev = sc->prev;
    heap      h = {sc->heap, sc->heap_end, 0};
    for (uint32_t i = 0; i <= n; i++) {
        next[i] = i + 1;
        prev[i] = i ? i - 1 : UINT32_MAX;
    }
    for (uint32_t i = 0; i + 1 < n; i++) {
        int32_t r = tok_rank(t, s + i, 2);
        if (r != TOK_RANK_NONE)
            heap_push(&h, (uint64_t)r << 32 | i, i + 2);
    }
    /* next[p] == 0 marks a dead part start (no live part can point to 0) */
    while (h.n) {
        uint64_t key = h.k[0];
        uint32_t end = h.e[0];
        heap_pop(&h);
        uint32_t p = (uint32_t)key;
        if (p && next[p] == 0)
            continue; /* p was merged into its left neighbour */
        uint32_t q = next[p];
        if (q >= n || next[q] != end)
            continue; /* the pair changed since the push    */
        /* merge p and q */
        next[p]   = end;
        prev[end] = p;
        next[q]   = 0;
        K3_ASSERT(h.n + 2 <= sc->heap_cap); /* at most n - 1 + 2 (n - 1) pushes */
        if (end < n) {
            uint32_t e2 = next[end];
            int32_t  r  = tok_rank(t, s + p, e2 - p);
            if (r != TOK_RANK_NONE)
                heap_push(&h, (uint64_t)r << 32 | p, e2);
        }
        if (p > 0) {
            uint32_t l = prev[p];
            int32_t  r = tok_rank(t, s + l, end - l);
            if (r != TOK_RANK_NONE)
                heap_push(&h, (uint64_t)r << 32 | l, end);
        }
    }
    for (uint32_t p = 0; p < n; p = next[p])
        if ((st = k3_ids_push(out, tok_rank(t, s + p, next[p] - p))))
            return st;
    return K3_OK;
}

/* ==== encoding =========================================================== */

k3_status tok_encode_segment(const k3_tok *t, const uint8_t *s, size_t n, tok_scratch *sc, k3_ids *out) {
    size_t i = 0;
    while (i < n) {
        size_t    e  = tok_pre_next(t->family, s, n, i);
        k3_status st = tok_bpe(t, s + i, e - i, sc, out);
        if (st)
            return st;
        i = e;
    }
    return K3_OK;
}

/* Leftmost special name at or after i (longest at the same start): its start, *id set;
 * n when none. */
static size_t find_special(const k3_tok *t, const uint8_t *s, size_t n, size_t i, int32_t *id) {
    for (; i < n; i++) {
        if (!t->sp_first[s[i]])
            continue;
        int best = -1;
        for (int k = 0; k < TOK_N_RESERVED; k++) {
            uint32_t L = t->sp_len[k];
            if (L <= n - i && (uint8_t)t->sp_name[k][0] == s[i] && !memcmp(t->sp_name[k], s + i, L) &&
                (best < 0 || L > t->sp_len[best]))
                best = k;
        }
        if (best >= 0) {
            *id = t->n_base + best;
            return i;
        }
    }
    return n;
}

/* tiktoken's encode on one string: specials (when allowed) split it into stretches. */
static k3_status encode_core(const k3_tok *t, const uint8_t *s, size_t n, int allow_special, tok_scratch *sc,
                             k3_ids *out) {
    if (!allow_special)
        return tok_encode_segment(t, s, n, sc, out);
    size_t i = 0;
    while (i < n) {
        int32_t   id = -1;
        size_t    sp = find_special(t, s, n, i, &id);
        k3_status st = tok_encode_segment(t, s + i, sp - i, sc, out);
        if (st)
            return st;
        if (sp == n)
            break;
        if ((st = k3_ids_push(out, id)))
            return st;
        i = sp + t->sp_len[id - t->n_base];
    }
    return K3_OK;
}

k3_status k3_tok_encode(const k3_tok *t, const char *text, size_t len, int allow_special, k3_ids *out) {
    const uint8_t *s  = (const uint8_t *)text;
    tok_scratch    sc = {0};
    size_t         n0 = out->n;
    k3_status      st = K3_OK;
    if (t->family == TOK_O200K) {
        st = encode_core(t, s, len, allow_special, &sc, out);
    } else {
        /* the release's wrapper: 400,000-char chunks, then same-class runs <= 25,000 */
        for (size_t c = 0; c < len && !st;) {
            size_t ce = tok_kimi_chunk_end(s, len, c);
            for (size_t i = c; i < ce && !st;) {
                size_t e = tok_kimi_cut_next(s, ce, i);
                st       = encode_core(t, s + i, e - i, allow_special, &sc, out);
                i        = e;
            }
            c = ce;
        }
    }
    tok_scratch_free(&sc);
    if (st)
        out->n = n0;
    return st;
}

/* ==== decoding =========================================================== */

k3_status k3_tok_decode(const k3_tok *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    *out         = NULL;
    size_t total = 0, pl;
    for (size_t i = 0; i < n; i++) {
        if (!k3_tok_piece(t, ids[i], &pl))
            return k3_err(K3_ERR_ARG, "token %zu: id %d is outside 0..%d", i, ids[i], k3_tok_n_vocab(t) - 1);
        total += pl;
    }
    char *b = malloc(total + 1);
    if (!b)
        return k3_err(K3_ERR_NOMEM, "decode: out of memory for %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = k3_tok_piece(t, ids[i], &pl);
        memcpy(b + o, p, pl);
        o += pl;
    }
    b[o] = 0;
    *out = b;
    *len = o;
    return K3_OK;
}

/* Length of the valid UTF-8 prefix of a sequence starting at b[0] (of n bytes):
 * returns the full sequence length when complete and valid (1..4); otherwise -k where
 * k >= 1 is the maximal subpart (bytes that could still start a valid sequence), and
 * *incomplete = 1 when all n bytes were a valid prefix that ran out. */
static int utf8_seq(const uint8_t *b, size_t n, int *incomplete) {
    *incomplete = 0;
    uint8_t c   = b[0];
    if (c < 0x80)
        return 1;
    int     need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) {
            *incomplete = 1;
            return -k;
        }
        uint8_t cb = b[k];
        if (cb < lo || cb > hi)
            return -k;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

static const char REPL[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

k3_status tok_utf8_sanitize(const uint8_t *b, size_t n, char **out, size_t *len) {
    char *o = malloc(n * 3 + 1);
    if (!o)
        return k3_err(K3_ERR_NOMEM, "decode: out of memory");
    size_t on = 0;
    for (size_t i = 0; i < n;) {
        int inc, r = utf8_seq(b + i, n - i, &inc);
        if (r > 0) {
            memcpy(o + on, b + i, (size_t)r);
            on += (size_t)r;
            i += (size_t)r;
        } else {
            memcpy(o + on, REPL, 3);
            on += 3;
            i += (size_t)-r;
        }
    }
    o[on] = 0;
    *out  = o;
    *len  = on;
    return K3_OK;
}

long k3_utf8_repair(const char *s, size_t n, char **out, size_t *first_bad) {
    const uint8_t *b   = (const uint8_t *)s;
    long           bad = 0;
    size_t         on  = 0;
    char          *o   = NULL;
    if (out && !(o = *out = malloc(n * 3 + 1)))
        return -1;
    for (size_t i = 0; i < n;) {
        int inc, r = utf8_seq(b + i, n - i, &inc);
        if (r > 0) {
            if (o)
                memcpy(o + on, b + i, (size_t)r);
            on += (size_t)r;
            i += (size_t)r;
            continue;
        }
        if (!bad++ && first_bad)
            *first_bad = i;
        if (o)
            memcpy(o + on, REPL, 3);
        on += 3;
        i += (size_t)-r;
    }
    if (o)
        o[on] = 0;
    return bad;
}

k3_status k3_tok_decode_text(const k3_tok *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    char     *raw;
    size_t    rn;
    k3_status st = k3_tok_decode(t, ids, n, &raw, &rn);
    if (st)
        return st;
    st = tok_utf8_sanitize((const uint8_t *)raw, rn, out, len);
    free(raw);
    return st;
}

/* ---- streaming decoder ---- */

struct k3_detok {
    const k3_tok *tok;
    uint8_t       tail[4]; /* (n_tail) a valid but incomplete UTF-8 prefix */
    int           n_tail;
    char         *buf; /* (cap) output of the last call                */
    size_t        cap;
};

k3_status k3_detok_new(const k3_tok *t, k3_detok **out) {
    k3_detok *d = calloc(1, sizeof *d);
    if (!d)
        return k3_err(K3_ERR_NOMEM, "detok: out of memory");
    d->tok = t;
    *out   = d;
    return K3_OK;
}

void k3_detok_free(k3_detok *d) {
    if (!d)
        return;
    free(d->buf);
    free(d);
}

/* Incremental form of the maximal-subpart rule: bytes are consumed one at a time; the
 * tail is always a valid incomplete prefix, so an invalid continuation emits U+FFFD for
 * the tail and the byte is then looked at again as a fresh start. */
static void detok_byte(k3_detok *d, uint8_t c, size_t *on) {
    for (;;) {
        if (d->n_tail == 0) {
            int inc;
            int r = utf8_seq(&c, 1, &inc);
            if (r == 1)
                d->buf[(*on)++] = (char)c;
            else if (inc)
                d->tail[d->n_tail++] = c;
            else {
                memcpy(d->buf + *on, REPL, 3);
                *on += 3;
            }
            return;
        }
        uint8_t tmp[4];
        memcpy(tmp, d->tail, (size_t)d->n_tail);
        tmp[d->n_tail] = c;
        int inc, r = utf8_seq(tmp, (size_t)d->n_tail + 1, &inc);
        if (r > 0) {
            memcpy(d->buf + *on, tmp, (size_t)r);
            *on += (size_t)r;
            d->n_tail = 0;
            return;
        }
        if (inc) {
            d->tail[d->n_tail++] = c;
            return;
        }
        memcpy(d->buf + *on, REPL, 3); /* the tail is a maximal subpart: replace, retry c */
        *on += 3;
        d->n_tail = 0;
    }
}

k3_status k3_detok_feed_bytes(k3_detok *d, const char *b, size_t n, const char **text, size_t *len) {
    size_t need = (n + 4) * 3 + 1;
    if (need > d->cap) {
        char *nb = realloc(d->buf, need);
        if (!nb)
            return k3_err(K3_ERR_NOMEM, "detok: out of memory");
        d->buf = nb;
        d->cap = need;
    }
    size_t on = 0;
    for (size_t i = 0; i < n; i++)
        detok_byte(d, (uint8_t)b[i], &on);
    d->buf[on] = 0;
    *text      = d->buf;
    *len       = on;
    return K3_OK;
}

k3_status k3_detok_feed(k3_detok *d, int32_t id, const char **text, size_t *len) {
    size_t      pl;
    const char *p = k3_tok_piece(d->tok, id, &pl);
    if (!p)
        return k3_err(K3_ERR_ARG, "detok: id %d is outside 0..%d", id, k3_tok_n_vocab(d->tok) - 1);
    return k3_detok_feed_bytes(d, p, pl, text, len);
}

void k3_detok_flush(k3_detok *d, const char **text, size_t *len) {
    static const char empty[1] = "";
    *text                      = empty;
    *len                       = 0;
    if (d->n_tail == 0)
        return;
    d->n_tail = 0;
    K3_ASSERT(d->cap >= 4); /* a tail implies an earlier feed, which sized buf */
    memcpy(d->buf, REPL, 3);
    d->buf[3] = 0;
    *text     = d->buf;
    *len      = 3;
}

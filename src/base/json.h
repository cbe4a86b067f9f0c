/* json.h: a small JSON reader/writer with Python's json semantics, for the chat format's
 * tool rendering and parsing (doc/tool-calls.md). Engine internal.
 *
 * Why not jansson (which st.c uses for headers): the release's encoder is Python, and the
 * rendered bytes depend on Python's json: integers of any size stay as written
 * (12345678901234567890), other numbers are floats printed by repr (1e2 -> 100.0, 1e16 ->
 * 1e+16), object keys keep their order (a duplicate key keeps its first place and takes
 * the last value, like a dict), and json.dumps has two separator styles. This module keeps
 * integer literals as text and writes both styles exactly.
 */
#pragma once
#include "k3-impl.h"

#include <stddef.h>

typedef enum jv_kind {
    JV_NULL = 0,
    JV_FALSE,
    JV_TRUE,
    JV_INT,
    JV_FLOAT,
    JV_STRING,
    JV_ARRAY,
    JV_OBJECT
} jv_kind;

typedef struct jv {
    jv_kind    kind;
    char      *s;     /* STRING: (n) UTF-8 bytes (may hold NUL); INT: the literal ("-0" -> "0") */
    size_t     n;     /* STRING/INT: bytes of s; ARRAY/OBJECT: elements                  */
    double     d;     /* FLOAT                                                          */
    struct jv *items; /* ARRAY: (n) values; OBJECT: (n) values                          */
    struct jv *keys;  /* OBJECT: (n) JV_STRING keys, in order of first appearance       */
    size_t     cap;
} jv;

/* The engine's growable buffer (k3.h), appended with a k3_status (K3_ERR_NOMEM recorded). */
typedef k3_buf jbuf;
k3_status      jbuf_add(jbuf *b, const char *s, size_t n);

/* Parse len bytes (one JSON value, whitespace around it). On failure: K3_ERR_FORMAT with
 * "what at byte N" in k3_errmsg(), *out NULL. Accepts NaN/Infinity/-Infinity as Python. */
k3_status jv_parse(const char *text, size_t len, jv **out);
void      jv_free(jv *v);
/* Member of an object by key, NULL when absent (or v is not an object). */
const jv *jv_get(const jv *v, const char *key);

enum jv_style {
    JV_SORTED_COMPACT, /* json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False) */
    JV_PY_DEFAULT,     /* json.dumps(v, ensure_ascii=False): ", " and ": ", keys in order      */
    JV_COMPACT,        /* json.dumps(v, separators=(",", ":"), ensure_ascii=False): keys in order */
};
/* Appends v written in that style. */
k3_status jv_dump(const jv *v, enum jv_style style, jbuf *out);
/* Appends s[0..n) as a JSON string literal (quotes included, ensure_ascii=False escaping). */
k3_status jv_dump_str(const char *s, size_t n, jbuf *out);
/* Appends the JSON-escaped bytes of s[0..n) (no quotes). */
k3_status jv_escape(const char *s, size_t n, jbuf *out);
/* The four hex digits of a \u escape at s (no NUL needed): 0 and *out, or -1. */
int jv_hex4(const char *s, uint32_t *out);
/* Code point cp (<= 0x10FFFF) as UTF-8 at u (room for 4 bytes); returns the byte count. */
size_t jv_utf8(uint32_t cp, char *u);

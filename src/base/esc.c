/* esc.c: outside text made visible (k3.h, "outside text"): which code points are control
 * characters to a reader of text that came from the model, a server or a file, and the one
 * escaping of them (\xHH, \uHHHH).
 *
 * DESIGN
 * The terminal front ends print the model's answer, a server's error, a file's line through
 * this escaping (ui/common/text.h, txt_escape is this function), and the Markdown export
 * (transcript.c) writes through it too: `cat chat.md` must not run an OSC 52 clipboard write
 * the model put in an answer, and what was there shows as the same escapes in both places.
 * Decoding is strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as
 * utf8proc_iterate, which the display code uses; a byte that starts no valid sequence is
 * escaped alone and the next byte is read afresh.
 */
#include "k3-impl.h"

#include <stdio.h>
#include <string.h>

int k3_ctrl_cp(int32_t cp) {
    return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || cp == 0x061C || cp == 0x200E ||
           cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 ||
           cp == 0x2029;
}

/* Bytes a UTF-8 sequence starting with lead byte c has (0: c cannot start one). */
static size_t utf8_need(unsigned char c) {
    return c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
}

/* The code point of the valid UTF-8 sequence at s (n > 0 bytes) and its length; -1 and a length
 * of 1 when s does not start one (a stray continuation, an overlong form, a surrogate, a code
 * point past U+10FFFF, a sequence cut by the end of s). */
static int32_t utf8_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *b      = (const unsigned char *)s;
    size_t               need   = utf8_need(b[0]);
    static const int32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    *len                        = 1;
    if (need <= 1 || need > n)
        return need == 1 ? b[0] : -1;
    int32_t cp = b[0] & (0x7F >> need);
    for (size_t k = 1; k < need; k++) {
        if ((b[k] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (b[k] & 0x3F);
    }
    if (cp < min[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *len = need;
    return cp;
}

/* Whether s[0..n) (n >= 1) is the start of a UTF-8 sequence that more bytes could complete. */
static int utf8_partial(const char *s, size_t n) {
    size_t need = utf8_need((unsigned char)s[0]);
    if (need <= n)
        return 0;
    for (size_t k = 1; k < n; k++)
        if (((unsigned char)s[k] & 0xC0) != 0x80)
            return 0;
    return 1;
}

static int escape_run(k3_buf *out, k3_esc *st, const char *s, size_t n) {
    char   esc[8];
    size_t i = 0, run = 0; /* s[run..i) is printable: appended in one piece */
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        int32_t       cp;
        size_t        len;
        if (c >= 0x20 && c < 0x7f) {
            i++;
            continue;
        }
        if (c >= 0x80)
            cp = utf8_decode(s + i, n - i, &len);
        else
            cp = c, len = 1;
        if (cp == '\n' || cp == '\t' || (cp >= 0xA0 && !k3_ctrl_cp(cp))) {
            i += len;
            continue;
        }
        if (k3_buf_add(out, s + run, i - run))
            return -1;
        if (cp < 0 && st && utf8_partial(s + i, n - i)) {
            memcpy(st->hold, s + i, n - i); /* at most 3 bytes */
            st->n = (int)(n - i);
            return 0;
        }
        int k = cp < 0      ? snprintf(esc, sizeof esc, "\\x%02X", c)
                : cp < 0x80 ? snprintf(esc, sizeof esc, "\\x%02X", (unsigned)cp)
                            : snprintf(esc, sizeof esc, "\\u%04X", (unsigned)cp);
        if (k3_buf_add(out, esc, (size_t)k))
            return -1;
        i += len;
        run = i;
    }
    return k3_buf_add(out, s + run, n - run);
}

int k3_escape(k3_buf *out, k3_esc *st, const char *s, size_t n) {
    if (!st || st->n == 0)
        return escape_run(out, st, s, n);
    /* complete the held character with the first bytes of s, then go on with the rest */
    char   buf[8];
    size_t h = (size_t)st->n, take = utf8_need((unsigned char)st->hold[0]) - h;
    if (take > n)
        take = n;
    memcpy(buf, st->hold, h);
    memcpy(buf + h, s, take);
    st->n      = 0;
    size_t len = h + take;
    if (utf8_partial(buf, len)) { /* still incomplete: hold it all */
        memcpy(st->hold, buf, len);
        st->n = (int)len;
        return 0;
    }
    /* buf is one whole character, or bytes that are not UTF-8: those before the first
     * continuation that fails are escaped, and the rest of s is read afresh */
    size_t l;
    if (utf8_decode(buf, len, &l) >= 0 && l == len)
        return escape_run(out, NULL, buf, len) || escape_run(out, st, s + take, n - take) ? -1 : 0;
    if (escape_run(out, NULL, buf, h))
        return -1;
    return escape_run(out, st, s, n);
}

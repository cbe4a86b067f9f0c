/* tok-pre.c: the pre-tokenizer, hand-written matchers for tiktoken's split patterns.
 *
 * DESIGN
 * tiktoken splits text with a regex (fancy-regex: backtracking, leftmost-first: the
 * first alternative that matches at a position wins, quantifiers greedy with
 * backtracking). We do not carry a regex engine: each alternative is a small function
 * that computes the end the backtracking engine would reach. The patterns (kimi adds
 * the Han rule and removes Han from the letter classes; o200k allows '/' in the
 * punctuation tail):
 *
 *   0 [\p{Han}]+                                                       (kimi only)
 *   1
 * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *   2 [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?
 *   3 \p{N}{1,3}
 *   4  ?[^\s\p{L}\p{N}]+[\r\n]*            (o200k: [\r\n/]*)
 *   5 \s*[\r\n]+
 *   6 \s+(?!\S)
 *   7 \s+
 *
 * How backtracking resolves each one (P = [^\r\n\p{L}\p{N}], A = the upper class,
 * B = the lower class; A and B share Lm, Lo and M, and a mark is also in P):
 *   1: take P if possible (else retry without). A* greedily runs to a_end; B+ then
 *      needs a B: at a_end (an Ll), else at the last A-run char that is also B (then
 *      B+ is that one char, since what follows it in the run is not B). No B: retry.
 *   2: A+ needs one A; B* and the contraction cannot fail.
 *   5: \s* backs off to the last \r or \n of the whitespace run; the match ends after it.
 *   6: the whole run at the end of the text, else the run minus its last char (>= 2).
 * \s is Unicode White_Space (Rust regex), (?i) folds s to S and U+017F (long s).
 * Letters, marks and numbers come from utf8proc's general categories; Han from the
 * generated tok-han.h. Both are cached in one flag byte per code point below 0x40000.
 * Invalid UTF-8 bytes are one "character" each, in no class (like punctuation).
 */
#include "tok.h"
#include "tok-han.h"

#include <pthread.h>
#include <utf8proc.h>

enum {
    CL_L    = 1 << 0, /* \p{L}                                   */
    CL_N    = 1 << 1, /* \p{N}                                   */
    CL_WS   = 1 << 2, /* \s: White_Space                          */
    CL_HAN  = 1 << 3, /* Script=Han                               */
    CL_A    = 1 << 4, /* Lu Lt Lm Lo M                            */
    CL_B    = 1 << 5, /* Ll Lm Lo M                               */
    CL_PYSP = 1 << 6, /* Python str.isspace() (kimi input cutting) */
};

#define TAB_N 0x40000u
static uint8_t       *cls_tab; /* (TAB_N) flags per code point */
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;

int tok_is_han(uint32_t cp) {
    size_t lo = 0, hi = TOK_HAN_N_RANGES;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < tok_han_ranges[mid][0])
            hi = mid;
        else if (cp > tok_han_ranges[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* White_Space (PropList.txt), stable since Unicode 6.3. */
static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Python's str.isspace(): bidi class WS, B or S, or category Zs. */
static int is_py_space(uint32_t c) {
    return is_white_space(c) || (c >= 0x1C && c <= 0x1F);
}
int tok_is_py_space(uint32_t c) {
    return is_py_space(c);
}

static uint8_t classify(uint32_t c) {
    if (c > 0x10FFFF)
        return 0;
    uint8_t f = 0;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LT:
        f = CL_L | CL_A;
        break;
    case UTF8PROC_CATEGORY_LL:
        f = CL_L | CL_B;
        break;
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        f = CL_L | CL_A | CL_B;
        break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
        f = CL_A | CL_B;
        break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        f = CL_N;
        break;
    default:
        break;
    }
    if (is_white_space(c))
        f |= CL_WS;
    if (is_py_space(c))
        f |= CL_PYSP;
    if (tok_is_han(c))
        f |= CL_HAN;
    return f;
}

static void cls_init(void) {
    uint8_t *tab = malloc(TAB_N);
    if (!tab)
        return; /* cls() falls back to classify() */
    for (uint32_t c = 0; c < TAB_N; c++)
        tab[c] = classify(c);
    cls_tab = tab;
}

static inline uint8_t cls(uint32_t c) {
    if (c < TAB_N && cls_tab)
        return cls_tab[c];
    return c == TOK_CP_INVALID ? 0 : classify(c);
}

uint32_t tok_utf8_next(const uint8_t *s, size_t n, size_t i, int *len) {
    uint8_t b = s[i];
    if (b < 0x80) {
        *len = 1;
        return b;
    }
    *len = 1;
    int      need;
    uint32_t c, min;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        c    = b & 0x1F;
        min  = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        c    = b & 0x0F;
        min  = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        c    = b & 0x07;
        min  = 0x10000;
    } else
        return TOK_CP_INVALID;
    if (n - i <= (size_t)need)
        return TOK_CP_INVALID;
    for (int k = 1; k <= need; k++) {
        uint8_t cb = s[i + (size_t)k];
        if ((cb & 0xC0) != 0x80)
            return TOK_CP_INVALID;
        c = (c << 6) | (cb & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return TOK_CP_INVALID;
    *len = need + 1;
    return c;
}

/* ---- matchers: each returns the end of its match at i, or 0 for no match ---- */

typedef struct pre_ctx {
    const uint8_t *s;
    size_t         n;
    uint8_t        han_mask; /* kimi: CL_A | CL_B removed from Han; o200k: 0 */
    int            o200k;
} pre_ctx;

/* Code point and flags at i (kimi: Han is neither A nor B). */
static inline uint8_t at(const pre_ctx *x, size_t i, uint32_t *cp, int *len) {
    uint32_t c;
    if (x->s[i] < 0x80) {
        c    = x->s[i];
        *len = 1;
    } else {
        c = tok_utf8_next(x->s, x->n, i, len);
    }
    *cp       = c;
    uint8_t f = cls(c);
    if ((f & CL_HAN) && x->han_mask)
        f &= (uint8_t)~x->han_mask;
    return f;
}

static inline int is_p(uint8_t f, uint32_t c) {
    return !(f & (CL_L | CL_N)) && c != '\r' && c != '\n';
}

static inline uint8_t lower_ascii(uint8_t b) {
    return (b >= 'A' && b <= 'Z') ? (uint8_t)(b | 0x20) : b;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: its end, or i when it does not match. */
static size_t contraction(const pre_ctx *x, size_t i) {
    const uint8_t *s = x->s;
    size_t         n = x->n;
    if (i + 1 >= n || s[i] != '\'')
        return i;
    uint8_t a = lower_ascii(s[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return i + 2;
    if (i + 2 < n && s[i + 1] == 0xC5 && s[i + 2] == 0xBF)
        return i + 3; /* U+017F folds to s */
    if (i + 2 < n) {
        uint8_t b = lower_ascii(s[i + 2]);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return i + 3;
    }
    return i;
}

/* Alternatives 1 and 2 (letters); rule2 = 0: rule 1, 1: rule 2. */
static size_t m_letters(const pre_ctx *x, size_t i, int rule2) {
    uint32_t c;
    int      len;
    uint8_t  f0 = at(x, i, &c, &len);
    for (int with_p = 1; with_p >= 0; with_p--) {
        size_t j = i;
        if (with_p) {
            if (!is_p(f0, c))
                continue;
            j = i + (size_t)len;
        }
        /* A* (rule 1) / A+ (rule 2): run of A from j, remembering the last A that is B */
        size_t   k = j, last_b = SIZE_MAX;
        uint8_t  fk = 0;
        int      lk = 0;
        uint32_t ck;
        while (k < x->n) {
            fk = at(x, k, &ck, &lk);
            if (!(fk & CL_A))
                break;
            if (fk & CL_B)
                last_b = k;
            k += (size_t)lk;
        }
        size_t e;
        if (!rule2) {
            size_t bstart;
            if (k < x->n && (fk & CL_B))
                bstart = k;
            else if (last_b != SIZE_MAX)
                bstart = last_b;
            else
                continue;
            e = bstart;
            while (e < x->n) {
                uint8_t fe = at(x, e, &ck, &lk);
                if (!(fe & CL_B))
                    break;
                e += (size_t)lk;
            }
        } else {
            if (k == j)
                continue;
            e = k;
            while (e < x->n) {
                uint8_t fe = at(x, e, &ck, &lk);
                if (!(fe & CL_B))
                    break;
                e += (size_t)lk;
            }
        }
        return contraction(x, e);
    }
    return 0;
}

static size_t m_numbers(const pre_ctx *x, size_t i) {
    size_t e = i;
    for (int k = 0; k < 3 && e < x->n; k++) {
        uint32_t c;
        int      len;
        if (!(at(x, e, &c, &len) & CL_N))
            break;
        e += (size_t)len;
    }
    return e > i ? e : 0;
}

/* " ?[^\s\p{L}\p{N}]+[\r\n]*" (o200k: "[\r\n/]*") */
static size_t m_punct(const pre_ctx *x, size_t i) {
    uint32_t c;
    int      len;
    size_t   j = i;
    if (x->s[i] == ' ' && i + 1 < x->n && !(at(x, i + 1, &c, &len) & (CL_WS | CL_L | CL_N)))
        j = i + 1;
    size_t e = j;
    while (e < x->n && !(at(x, e, &c, &len) & (CL_WS | CL_L | CL_N)))
        e += (size_t)len;
    if (e == j)
        return 0;
    while (e < x->n && (x->s[e] == '\r' || x->s[e] == '\n' || (x->o200k && x->s[e] == '/')))
        e++;
    return e;
}

/* Alternatives 5, 6, 7 at a whitespace char. */
static size_t m_space(const pre_ctx *x, size_t i) {
    size_t   e = i, last_nl = SIZE_MAX, last_start = i;
    uint32_t c;
    int      len;
    while (e < x->n && (at(x, e, &c, &len) & CL_WS)) {
        if (c == '\r' || c == '\n')
            last_nl = e;
        last_start = e;
        e += (size_t)len;
    }
    if (e == i)
        return 0;
    if (last_nl != SIZE_MAX)
        return last_nl + 1; /* \s*[\r\n]+          */
    if (e == x->n)
        return e; /* \s+(?!\S) at the end */
    if (last_start > i)
        return last_start; /* \s+(?!\S)          */
    return e;              /* \s+                */
}

void tok_pre_init(void) {
    pthread_once(&cls_once, cls_init);
}

size_t tok_pre_next(enum tok_family f, const uint8_t *s, size_t n, size_t i) {
    pthread_once(&cls_once, cls_init);
    pre_ctx  x = {s, n, f == TOK_KIMI ? (uint8_t)(CL_A | CL_B) : 0, f == TOK_O200K};
    uint32_t c;
    int      len;
    uint8_t  f0 = at(&x, i, &c, &len);
    size_t   e;
    if (f == TOK_KIMI && (f0 & CL_HAN)) { /* [\p{Han}]+ */
        e = i + (size_t)len;
        while (e < n && (at(&x, e, &c, &len) & CL_HAN))
            e += (size_t)len;
        return e;
    }
    /* rules 1-2 start at a letter or mark, or at a P char (never at a number, \r, \n) */
    if (!(f0 & CL_N) && c != '\r' && c != '\n') {
        if ((e = m_letters(&x, i, 0)))
            return e;
        if ((e = m_letters(&x, i, 1)))
            return e;
    }
    if ((f0 & CL_N) && (e = m_numbers(&x, i)))
        return e;
    if ((e = m_punct(&x, i)))
        return e;
    if ((e = m_space(&x, i)))
        return e;
    K3_ASSERT(0 && "every character starts some piece");
    return i + 1;
}

size_t tok_kimi_chunk_end(const uint8_t *s, size_t n, size_t i) {
    for (size_t k = 0; k < 400000 && i < n; k++) {
        int len = 1;
        if (s[i] >= 0x80)
            (void)tok_utf8_next(s, n, i, &len);
        i += (size_t)len;
    }
    return i;
}

/* Python's _split_whitespaces_or_nonwhitespaces, resumable: a cut always falls inside a
 * run, so a call that starts at a previous cut restarts the count at that char with
 * the same class, exactly as the Python loop does after its yield. */
size_t tok_kimi_cut_next(const uint8_t *s, size_t n, size_t i) {
    pthread_once(&cls_once, cls_init);
    size_t e = i, run = 0;
    int    cur_space = -1;
    while (e < n) {
        int      len = 1;
        uint32_t c   = s[e] < 0x80 ? s[e] : tok_utf8_next(s, n, e, &len);
        int      sp  = (cls(c) & CL_PYSP) != 0;
        if (sp != cur_space) {
            cur_space = sp;
            run       = 1;
        } else if (++run > 25000) {
            return e;
        }
        e += (size_t)len;
    }
    return e;
}

/* k3-ab.c: A/B quality tool: the logits of one model under two settings, compared position by
 * position over a token sequence.
 *
 *   k3-ab [options] MODEL_DIR 'A settings' 'B settings'
 *
 * A setting is a space-separated list of K3_* environment assignments, applied on top of the
 * caller's environment for that run only ("" = the defaults; each name a row of the settings
 * table and its value read by that row before any model loads, else exit 2), e.g.
 *   k3-ab m/ 'K3_BITS=32 K3_MLA_BITS=32 K3_HEAD_BITS=32 K3_IDOT=0' 'K3_BITS=4'
 * Tokens, given one way (two of these options: exit 2): --text FILE (UTF-8 text, encoded with
 * the model's tokenizer, special-token names as plain text), --ids 'ID ID ...' or --ids-file
 * FILE (whitespace-separated ids), or --random N (N ids drawn uniformly from the vocabulary
 * with --seed S, default 1; the default is --random 64). --max N keeps the first N tokens. Each setting loads
 * the model, feeds the whole sequence once (chunked prefill; the engine's K3_LOGITS hook writes every
 * position's logits to a scratch file) and frees it.
 *
 * Report (A is the reference): per position the softmax of each side; then
 *   top1      fraction of positions where argmax A == argmax B
 *   kl        mean and max over positions of KL(P_A || P_B) in nats
 *   maxerr    max |logit_A - logit_B| over all positions and vocabulary
 *   rel_l2    ||logits_A - logits_B|| / ||logits_A|| over everything
 * as human lines and one machine line: "AB top1 T kl_mean K kl_max K maxerr E rel_l2 R n N".
 * Exit 0 when both runs worked, 1 on a model/engine error, 2 on bad usage.
 */
#include "k3.h"
#include "quant.h"
#include "tool-opt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_VARS 32

static void usage(FILE *f) {
    fprintf(f, "usage: k3-ab [--text FILE | --ids 'ID ...' | --ids-file FILE | --random N]\n"
               "             [--seed S] [--max N] MODEL_DIR 'A settings' 'B settings'\n"
               "Compares the logits of MODEL_DIR under settings B with those under A, position\n"
               "by position over one token sequence: top-1 agreement, KL(A||B) mean and max,\n"
               "max |logit difference|, relative L2; last line: AB top1 T kl_mean K ... n N.\n"
               "  settings         space-separated K3_*=VALUE assignments for that run, on top\n"
               "                   of the environment ('' = as it is), e.g. 'K3_BITS=4'\n"
               "  --text FILE      the tokens of FILE's UTF-8 text (the model's tokenizer)\n"
               "  --ids 'ID ...'   these token ids (white space between them)\n"
               "  --ids-file FILE  the token ids in FILE\n"
               "  --random N       N ids drawn uniformly from the vocabulary (1..16777216;\n"
               "                   the default: --random 64)\n"
               "  --seed S         seed of --random (default 1)\n"
               "  --max N          keep the first N tokens (default 0: all)\n"
               "  -h, --help       this text\n"
               "Exit status: 0 both runs worked, 1 a model or engine error, 2 a usage error.\n");
}

/* ---- settings --------------------------------------------------------------------------- */

typedef struct setting {
    char *buf;             /* owned copy of the text, split in place */
    char *name[MAX_VARS];  /* variable names                         */
    char *value[MAX_VARS]; /* their values                           */
    char *saved[MAX_VARS]; /* the caller's values (strdup) or NULL   */
    int   n;
} setting;

/* The row of the settings table whose variable is name, or -1: a name that is no row (a typo,
 * K3_BTIS=4) changed nothing, and the two runs were reported as identical. */
static int setting_row(const char *name) {
    for (int i = 0; i < K3_SETTING_N; i++)
        if (k3_setting(i)->env && !strcmp(k3_setting(i)->env, name))
            return i;
    return -1;
}

/* side: "A" or "B", for the messages. 0, or -1 after saying what is wrong (a usage error). */
static int setting_parse(setting *s, const char *side, const char *text) {
    memset(s, 0, sizeof *s);
    s->buf = strdup(text);
    if (!s->buf)
        return -1;
    for (char *save = NULL, *tok = strtok_r(s->buf, " \t\n", &save); tok;
         tok = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || strncmp(tok, "K3_", 3) != 0 || s->n == MAX_VARS) {
            txt_term_printf(stderr,
                            "k3-ab: setting %s '%s': expected K3_NAME=VALUE assignments (at most %d)\n", side,
                            tok, MAX_VARS);
            return -1;
        }
        *eq     = '\0';
        int row = setting_row(tok);
        if (row < 0) {
            txt_term_printf(stderr,
                            "k3-ab: setting %s: %s is not a variable of k3chat (k3chat(1), ENVIRONMENT)\n",
                            side, tok);
            return -1;
        }
        double               v;
        uint64_t             u;
        char                 err[256];
        enum k3_setting_type ty = k3_setting(row)->type; /* an empty value unsets it for the run */
        if (ty != K3_TYPE_TEXT && eq[1] &&
            (ty == K3_TYPE_U64 ? k3_setting_parse_u64(row, K3_SRC_ENV, eq + 1, &u, err, sizeof err)
                               : k3_setting_parse(row, K3_SRC_ENV, eq + 1, &v, err, sizeof err))) {
            txt_term_printf(stderr, "k3-ab: setting %s: %s\n", side, err); /* "K3_X: 'V' is not ..." */
            return -1;
        }
        s->name[s->n]  = tok;
        s->value[s->n] = eq + 1;
        s->n++;
    }
    return 0;
}

static void setting_apply(setting *s) {
    for (int i = 0; i < s->n; i++) {
        const char *old = getenv(s->name[i]);
        s->saved[i]     = old ? strdup(old) : NULL;
        setenv(s->name[i], s->value[i], 1);
    }
    /* the kernel knobs (K3_IDOT, ...), K3_ISA and K3_ACT are read again by k3_init (run_setting),
     * which also refuses a malformed value */
}

static void setting_restore(setting *s) {
    for (int i = s->n - 1; i >= 0; i--) {
        if (s->saved[i])
            setenv(s->name[i], s->saved[i], 1);
        else
            unsetenv(s->name[i]);
        free(s->saved[i]);
        s->saved[i] = NULL;
    }
}

/* ---- one run ------------------------------------------------------------------------------ */

/* Logits of every position (n x vocab, malloc'd into *out) of the model under setting s. */
static int run_setting(const char *dir, setting *s, const int32_t *ids, int n, int *vocab, float **out) {
    char path[] = "/tmp/k3-ab.XXXXXX";
    int  fd = mkstemp(path), rc = 1;
    if (fd < 0) {
        fprintf(stderr, "k3-ab: scratch file: %s\n", strerror(errno));
        return 1;
    }
    close(fd);
    setting_apply(s);
    k3_params   p;
    k3_model   *m  = NULL;
    k3_session *se = NULL;
    FILE       *f  = NULL;
    k3_status   st = k3_init(); /* this setting's process variables */
    if (st == K3_OK)
        st = k3_params_default(&p);
    if (st == K3_OK) {
        p.logits_path = path;
        if (p.max_ctx < n)
            p.max_ctx = n;
        st = k3_model_open(dir, &p, &m);
    }
    if (st == K3_OK)
        st = k3_session_new(m, &se);
    if (st == K3_OK)
        st = k3_session_feed(se, ids, n);
    if (st != K3_OK) {
        txt_term_printf(stderr, "k3-ab: %s: %s\n", k3_status_str(st), k3_errmsg());
        goto done;
    }
    k3_session_free(se); /* flushes and closes the K3_LOGITS file */
    se = NULL;
    k3_model_info info;
    k3_model_get_info(m, &info);
    *vocab = info.vocab;
    *out   = malloc((size_t)n * info.vocab * sizeof(float));
    f      = fopen(path, "rb");
    if (!*out || !f || fread(*out, sizeof(float) * info.vocab, (size_t)n, f) != (size_t)n) {
        txt_term_printf(stderr, "k3-ab: reading %d x %d logits from %s failed\n", n, info.vocab, path);
        free(*out);
        *out = NULL;
        goto done;
    }
    rc = 0;
done:
    if (f)
        fclose(f);
    k3_session_free(se);
    k3_model_free(m);
    setting_restore(s);
    unlink(path);
    return rc;
}

/* ---- comparison ----------------------------------------------------------------------------- */

/* log-softmax of x[n] into out (double) */
static void log_softmax(const float *x, int n, double *out) {
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, (double)x[i]);
    for (int i = 0; i < n; i++)
        sum += exp((double)x[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        out[i] = (double)x[i] - lse;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int main(int argc, char **argv) {
    const char        *ids_text = NULL, *ids_file = NULL, *text_file = NULL;
    int                n_random = 64, n_max = 0;
    unsigned long long seed = 1;
    int                ai   = 1;
    const char        *src  = NULL; /* the option that gave the tokens: one of the four at most */
    for (; ai < argc && argv[ai][0] == '-' && argv[ai][1]; ai++) {
        const char *o = argv[ai];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        static const char *const opts[] = {"--ids", "--ids-file", "--text", "--random", "--seed", "--max"};
        int                      known  = 0;
        for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
            known |= !strcmp(o, opts[k]);
        if (!known) { /* said as such, not as "--bogus needs a value" when it came last */
            txt_term_printf(stderr, "k3-ab: unknown option '%s'\n", o);
            usage(stderr);
            return 2;
        }
        if (ai + 1 >= argc) {
            txt_term_printf(stderr, "k3-ab: %s needs a value\n", o);
            return 2;
        }
        const char *v = argv[++ai];
        if (!strcmp(o, "--ids") || !strcmp(o, "--ids-file") || !strcmp(o, "--text") ||
            !strcmp(o, "--random")) {
            if (src && strcmp(src, o)) {
                txt_term_printf(
                    stderr,
                    "k3-ab: %s and %s: give the tokens one way (--text, --ids, --ids-file or --random)\n",
                    src, o);
                return 2;
            }
            src = o;
        }
        if (!strcmp(o, "--ids"))
            ids_text = v;
        else if (!strcmp(o, "--ids-file"))
            ids_file = v;
        else if (!strcmp(o, "--text"))
            text_file = v;
        else if (!strcmp(o, "--max")) {
            if (tool_int("k3-ab", "max", v, 0, INT_MAX, &n_max))
                return 2;
        } else if (!strcmp(o, "--random")) {
            if (tool_int("k3-ab", "random", v, 1, 1 << 24, &n_random))
                return 2;
        } else if (tool_u64("k3-ab", "seed", v, &seed)) /* --seed, the one left */
            return 2;
    }
    if (argc - ai != 3) { /* said, not only the usage: '' for defaults is easy to leave out */
        fprintf(stderr, "k3-ab: expected MODEL_DIR 'A settings' 'B settings' (3 arguments), got %d\n",
                argc - ai);
        usage(stderr);
        return 2;
    }
    const char *dir = argv[ai];
    setting     sa = {0}, sb = {0};
    int32_t    *ids = NULL;
    int         n = 0, rc = 2;
    char       *text = NULL;
    float      *la = NULL, *lb = NULL;
    double     *pa = NULL, *pb = NULL;
    if (setting_parse(&sa, "A", argv[ai + 1]) || setting_parse(&sb, "B", argv[ai + 2]))
        goto out;

    /* token ids */
    size_t len = 0;
    if (ids_file || text_file) {
        const char *fn = text_file ? text_file : ids_file;
        FILE       *f  = fopen(fn, "rb");
        if (!f) {
            txt_term_printf(stderr, "k3-ab: %s: %s\n", fn, strerror(errno));
            goto out;
        }
        k3_buf b   = {0};
        int    err = k3_buf_read(&b, f);
        fclose(f);
        if (err) { /* a directory was read as empty: "no token ids" */
            txt_term_printf(stderr, "k3-ab: %s: %s\n", fn, strerror(err));
            free(b.p);
            rc = 1;
            goto out;
        }
        text = b.p;
        len  = b.n;
        if (ids_file)
            ids_text = text;
    }
    if (text_file) {
        k3_tok   *tok = NULL;
        k3_ids    v   = {0};
        k3_status st  = k3_tok_load(dir, NULL, &tok);
        if (st == K3_OK)
            st = k3_tok_encode(tok, text, len, 0, &v);
        k3_tok_free(tok);
        if (st != K3_OK) {
            txt_term_printf(stderr, "k3-ab: %s: %s\n", text_file, k3_errmsg());
            k3_ids_free(&v);
            rc = 1;
            goto out;
        }
        ids = v.v; /* k3_ids owns a malloc'ed array: take it */
        n   = (int)v.n;
    } else if (ids_text) {
        k3_ids    v  = {0};
        k3_status st = k3_ids_parse(ids_text, INT32_MAX, &v);
        if (st) {
            txt_term_printf(stderr, "k3-ab: token ids: %s\n", k3_errmsg());
            k3_ids_free(&v);
            rc = st == K3_ERR_ARG ? 2 : 1; /* a bad id is a usage error */
            goto out;
        }
        ids = v.v; /* k3_ids owns a malloc'ed array: take it */
        n   = (int)v.n;
    } else {
        /* random ids need the vocabulary size: open the model once with the caller's env */
        k3_params p;
        k3_model *m = NULL;
        if (k3_params_default(&p) || k3_model_open(dir, &p, &m)) {
            txt_term_printf(stderr, "k3-ab: %s\n", k3_errmsg());
            rc = 1;
            goto out;
        }
        k3_model_info info;
        k3_model_get_info(m, &info);
        k3_model_free(m);
        ids = n_random > 0 ? malloc((size_t)n_random * sizeof *ids) : NULL;
        for (int i = 0; ids && i < n_random; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            ids[n++] = (int32_t)(seed % (unsigned long long)info.vocab);
        }
    }
    if (!ids || n == 0) {
        fprintf(stderr, "k3-ab: no token ids\n");
        goto out;
    }
    if (n_max > 0 && n > n_max)
        n = n_max;

    int va = 0, vb = 0;
    rc = 1;
    if (run_setting(dir, &sa, ids, n, &va, &la) || run_setting(dir, &sb, ids, n, &vb, &lb))
        goto out;
    if (va != vb) {
        fprintf(stderr, "k3-ab: vocabularies differ (%d vs %d)\n", va, vb);
        goto out;
    }
    const int V = va;
    pa          = malloc((size_t)V * sizeof(double));
    pb          = malloc((size_t)V * sizeof(double));
    if (!pa || !pb)
        goto out;
    int    agree  = 0;
    double kl_sum = 0.0, kl_max = 0.0, maxerr = 0.0, d2 = 0.0, a2 = 0.0;
    for (int t = 0; t < n; t++) {
        const float *xa = la + (size_t)t * V, *xb = lb + (size_t)t * V;
        agree += argmax(xa, V) == argmax(xb, V);
        log_softmax(xa, V, pa);
        log_softmax(xb, V, pb);
        double kl = 0.0;
        for (int i = 0; i < V; i++) {
            kl += exp(pa[i]) * (pa[i] - pb[i]);
            double d = (double)xa[i] - (double)xb[i];
            maxerr   = fmax(maxerr, fabs(d));
            d2 += d * d;
            a2 += (double)xa[i] * (double)xa[i];
        }
        kl_sum += kl;
        kl_max = fmax(kl_max, kl);
    }
    const double rel = a2 > 0 ? sqrt(d2 / a2) : 0.0;
    txt_term_printf(stdout, "A: '%s'\nB: '%s'\n", argv[ai + 1], argv[ai + 2]); /* the user's text */
    printf("positions %d, vocabulary %d\n", n, V);
    printf("top-1 agreement   %.4f (%d of %d)\n", (double)agree / n, agree, n);
    printf("KL(A||B) nats     mean %.3e  max %.3e\n", kl_sum / n, kl_max);
    printf("max logit error   %.4g\n", maxerr);
    printf("rel L2 of logits  %.3e\n", rel);
    printf("AB top1 %.4f kl_mean %.3e kl_max %.3e maxerr %.4g rel_l2 %.3e n %d\n", (double)agree / n,
           kl_sum / n, kl_max, maxerr, rel, n);
    rc = 0;
    if (fflush(stdout) || ferror(stdout)) { /* a report cut short (a full disk) is no result */
        fprintf(stderr, "k3-ab: cannot write the report to standard output: %s\n",
                strerror(errno ? errno : EIO));
        rc = 1;
    }
out:
    free(pa), free(pb), free(la), free(lb), free(ids), free(text);
    free(sa.buf), free(sb.buf);
    return rc;
}

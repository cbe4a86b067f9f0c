/* sample.c: next-token sampling from logits: greedy, temperature, top-k, min-p, top-p, seed.
 *
 * DESIGN
 * temp <= 0 is greedy (the first maximum, NaN logits ignored). Otherwise the chain is
 * temperature -> top-k -> softmax (double) -> min-p (p >= min_p * p_max) -> top-p (smallest
 * prefix of the sorted distribution whose mass reaches top_p) -> renormalise -> one draw.
 * Without any truncation no sort is needed: a single pass draws from the full softmax.
 * The PRNG is our own xoshiro256** seeded through splitmix64, so a seed reproduces a run on
 * every platform. Candidates are sorted by logit, ties by id, so the support is deterministic.
 *
 * A logit bias and the penalties come first: the logits are copied once and the few ids they
 * touch (the bias list, the ids seen so far) adjusted; the chain then reads the copy. Without
 * them (the default) the logits are read in place, as before: the hot path has one extra branch
 * per token. The order is vLLM's: bias, then the repetition penalty (vLLM's and HF's: a positive
 * logit divided by it, a negative one multiplied, for every id of the prompt or the answer), then
 * OpenAI's frequency and presence penalties (the answer's ids only). The ids seen are a dense
 * array over the ids (grown on demand; the answer's count and a prompt mark per id) plus the list
 * of distinct ids, so applying them costs the distinct ids seen, not n.
 *
 * k3_logprobs is independent of the sampler: log_softmax of the raw logits (the model's own
 * distribution, as vLLM reports by default), the top k kept by insertion into a sorted list of
 * at most 20 (one pass over n; most ids fail the first comparison).
 */
#include "model-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float   logit;
    int32_t id;
} cand;

struct k3_sampler {
    k3_sampler_params p;
    uint64_t          rng[4]; /* xoshiro256** state */
    cand             *c;      /* (cap) candidates   */
    double           *prob;   /* (cap)              */
    int               cap;
    float            *masked; /* (mcap) logits with the masked ids at -inf */
    int               mcap;
    k3_logit_bias    *bias; /* (n_bias) k3_sampler_set_bias's, copied */
    int               n_bias;
    int               adjust; /* 1: bias and penalties apply (k3_sampler_set_adjust) */
    int32_t          *count;  /* (ccap) times each id was accepted (penalties on) */
    uint8_t          *mark;   /* (ccap) 1: the id is in seen                      */
    int               ccap;
    int32_t *seen; /* (n_seen, seen_cap) the distinct ids accepted or in the prompt, in first order */
    int      n_seen, seen_cap;
    float   *work; /* (wcap) the adjusted logits */
    int      wcap;
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z          = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1). */
static double next_unit(uint64_t *s) {
    return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

void k3_sampler_params_default(const k3_model *m, k3_sampler_params *p) {
    p->temp  = m ? m->cfg.gen_temp : 1.0f;
    p->top_p = m ? m->cfg.gen_top_p : 1.0f;
    p->min_p = 0.0f;
    p->top_k = 0;
    p->seed  = 0;

    p->presence_penalty = p->frequency_penalty = 0.0f;
    p->repetition_penalty                      = 1.0f;
}

k3_sampler *k3_sampler_new(const k3_sampler_params *p) {
    k3_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (p)
        s->p = *p;
    else
        k3_sampler_params_default(NULL, &s->p);
    s->adjust  = 1;
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    return s;
}

void k3_sampler_free(k3_sampler *s) {
    if (!s)
        return;
    free(s->c);
    free(s->prob);
    free(s->masked);
    free(s->bias);
    free(s->count);
    free(s->mark);
    free(s->seen);
    free(s->work);
    free(s);
}

k3_status k3_sampler_set_bias(k3_sampler *s, const k3_logit_bias *b, int n) {
    if (n < 0 || (n && !b))
        return k3_err(K3_ERR_ARG, "logit bias: %d entries", n);
    for (int i = 0; i < n; i++)
        if (b[i].id < 0 || !(b[i].bias >= -100.0f && b[i].bias <= 100.0f))
            return k3_err(K3_ERR_ARG,
                          "logit bias: id %d, bias %g (expected an id >= 0 and a bias in [-100, 100])",
                          (int)b[i].id, (double)b[i].bias);
    if (!s)
        return K3_OK; /* checked only */
    k3_logit_bias *c = n ? malloc((size_t)n * sizeof *c) : NULL;
    if (n && !c)
        return k3_err(K3_ERR_NOMEM, "logit bias: out of memory");
    if (n)
        memcpy(c, b, (size_t)n * sizeof *c);
    free(s->bias);
    s->bias   = c;
    s->n_bias = n;
    return K3_OK;
}

void k3_sampler_set_adjust(k3_sampler *s, int on) {
    s->adjust = on != 0;
}

/* 1: the repetition penalty is on (a zeroed struct's 0 reads as off, as 1 does). */
static int rep_on(const k3_sampler *s) {
    return s->p.repetition_penalty != 0.0f && s->p.repetition_penalty != 1.0f;
}

/* Puts id in the seen list (its count and mark grown to hold it). 0, or -1 when out of memory. */
static int see(k3_sampler *s, int32_t id) {
    if (id >= s->ccap) { /* grown to hold the id (doubling) */
        int      old = s->ccap, cap = s->ccap;
        int32_t *c = k3_grow(s->count, &cap, (size_t)id + 1, sizeof *c, 1024);
        if (!c)
            return -1;
        s->count   = c;
        uint8_t *m = realloc(s->mark, (size_t)cap);
        if (!m)
            return -1; /* count is larger than ccap says: harmless, grown again next time */
        s->mark = m;
        memset(c + old, 0, (size_t)(cap - old) * sizeof *c);
        memset(m + old, 0, (size_t)(cap - old));
        s->ccap = cap;
    }
    if (!s->mark[id]) {
        int32_t *q = k3_grow(s->seen, &s->seen_cap, (size_t)s->n_seen + 1, sizeof *q, 64);
        if (!q)
            return -1;
        s->seen              = q;
        s->seen[s->n_seen++] = id;
        s->mark[id]          = 1;
    }
    return 0;
}

void k3_sampler_accept(k3_sampler *s, int32_t id) {
    if ((s->p.presence_penalty == 0.0f && s->p.frequency_penalty == 0.0f && !rep_on(s)) || id < 0)
        return;
    if (!see(s, id)) /* out of memory: this token goes uncounted rather than fail the turn */
        s->count[id]++;
}

k3_status k3_sampler_accept_prompt(k3_sampler *s, const int32_t *ids, int n) {
    for (int i = 0; rep_on(s) && i < n; i++)
        if (ids[i] >= 0 && see(s, ids[i]))
            return k3_err(K3_ERR_NOMEM, "sampler: out of memory for the prompt's ids");
    return K3_OK;
}

/* The logits the chain reads: as given when nothing adjusts them, else a copy with the bias
 * and penalties applied (NULL when out of memory). */
static const float *adjusted(k3_sampler *s, const float *logits, int n) {
    if (!s->adjust || (!s->n_bias && !s->n_seen))
        return logits;
    if (s->wcap < n) {
        float *w = realloc(s->work, (size_t)n * sizeof *w);
        if (!w)
            return NULL;
        s->work = w;
        s->wcap = n;
    }
    memcpy(s->work, logits, (size_t)n * sizeof *s->work);
    for (int i = 0; i < s->n_bias; i++)
        if (s->bias[i].id < n)
            s->work[s->bias[i].id] += s->bias[i].bias;
    const double fp = s->p.frequency_penalty, pp = s->p.presence_penalty, rp = s->p.repetition_penalty;
    const int    rep = rep_on(s);
    for (int i = 0; i < s->n_seen; i++) { /* the ids seen: the prompt's (rep only), the answer's */
        int32_t id = s->seen[i];
        if (id >= n)
            continue;
        double l = (double)s->work[id];
        if (rep) /* vLLM's and HF's: toward 0 for rp > 1, on either side */
            l = l > 0 ? l / rp : l * rp;
        s->work[id] = (float)(l - (s->count[id] * fp + (s->count[id] > 0) * pp));
    }
    return s->work;
}

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int32_t argmax(const float *l, int n) {
    int32_t best = 0;
    for (int i = 0; i < n; i++)
        if (l[i] > l[best] || isnan(l[best]))
            best = i;
    return best;
}

/* The chain after the adjustments, on logits as they are. */
static int32_t draw(k3_sampler *s, const float *logits, int n) {
    const k3_sampler_params *p    = &s->p;
    int32_t                  best = argmax(logits, n);
    if (!(p->temp > 0) || isnan(logits[best]))
        return best;
    const double inv_t = 1.0 / (double)p->temp, mx = (double)logits[best];
    const int    trunc = (p->top_k > 0 && p->top_k < n) || p->top_p < 1.0f || p->min_p > 0.0f;

    if (!trunc) { /* full softmax, one pass, no sort */
        double sum = 0;
        for (int i = 0; i < n; i++)
            if (!isnan(logits[i]))
                sum += exp(((double)logits[i] - mx) * inv_t);
        double r = next_unit(s->rng) * sum, acc = 0;
        for (int i = 0; i < n; i++)
            if (!isnan(logits[i]) && (acc += exp(((double)logits[i] - mx) * inv_t)) > r)
                return i;
        return best;
    }
    if (s->cap < n) {
        cand   *c = realloc(s->c, (size_t)n * sizeof *c);
        double *q = c ? realloc(s->prob, (size_t)n * sizeof *q) : NULL;
        if (c)
            s->c = c;
        if (!q)
            return best; /* out of memory: degrade to greedy rather than fail a turn */
        s->prob = q;
        s->cap  = n;
    }
    /* min-p is a logit threshold: p/p_max >= min_p  <=>  (l - max)/T >= log(min_p) */
    double lo = p->min_p > 0 ? mx + log((double)p->min_p) * (double)p->temp : -(double)INFINITY;
    int    nc = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(logits[i]) && (double)logits[i] >= lo)
            s->c[nc++] = (cand){logits[i], i};
    qsort(s->c, (size_t)nc, sizeof *s->c, cand_cmp);
    if (p->top_k > 0 && p->top_k < nc)
        nc = p->top_k;
    double sum = 0;
    for (int i = 0; i < nc; i++)
        sum += s->prob[i] = exp(((double)s->c[i].logit - mx) * inv_t);
    if (p->top_p < 1.0f) {
        double acc  = 0;
        int    keep = 0;
        while (keep < nc) {
            acc += s->prob[keep++] / sum;
            if (acc >= (double)p->top_p)
                break;
        }
        nc  = keep;
        sum = 0;
        for (int i = 0; i < nc; i++)
            sum += s->prob[i];
    }
    double r = next_unit(s->rng) * sum, acc = 0;
    for (int i = 0; i < nc; i++)
        if ((acc += s->prob[i]) > r)
            return s->c[i].id;
    return s->c[nc - 1].id;
}

int32_t k3_sampler_sample(k3_sampler *s, const float *logits, int n) {
    if (n <= 0 || !logits || !(logits = adjusted(s, logits, n)))
        return -1;
    return draw(s, logits, n);
}

/* The mask is applied by copying the logits with -inf for the ids it removes: the draw below
 * then never picks them (exp(-inf) is 0), and the order of the chain is unchanged. */
int32_t k3_sampler_sample_masked(k3_sampler *s, const float *logits, int n, const uint64_t *mask) {
    if (!mask)
        return k3_sampler_sample(s, logits, n);
    if (n <= 0 || !logits || !(logits = adjusted(s, logits, n)))
        return -1;
    if (!(s->p.temp > 0)) { /* greedy: the first maximum among the allowed ids, no copy */
        int32_t best = -1, first = -1;
        float   bv = 0;
        for (int k = 0; k < (n + 63) / 64; k++) /* only the set bits, in id order */
            for (uint64_t w = mask[k] & (k == n / 64 ? (1ull << (n & 63)) - 1 : ~0ull); w; w &= w - 1) {
                int i = k * 64 + __builtin_ctzll(w);
                if (first < 0)
                    first = i;
                if (!isnan(logits[i]) && (best < 0 || logits[i] > bv)) {
                    best = i;
                    bv   = logits[i];
                }
            }
        return best >= 0 ? best
                         : first; /* every allowed logit NaN: the first allowed id, as greedy takes id 0 */
    }
    if (s->mcap < n) {
        float *m = realloc(s->masked, (size_t)n * sizeof *m);
        if (!m)
            return -1;
        s->masked = m;
        s->mcap   = n;
    }
    int any = 0;
    for (int i = 0; i < n; i++) {
        int on       = (int)(mask[i >> 6] >> (i & 63) & 1);
        s->masked[i] = on && !isnan(logits[i]) ? logits[i] : -INFINITY;
        any |= on;
    }
    if (!any)
        return -1;
    int32_t id = draw(s, s->masked, n);
    return id >= 0 && (mask[id >> 6] >> (id & 63) & 1) ? id : -1;
}

/* ---- log-probabilities ------------------------------------------------------------- */

float k3_logprobs(const float *logits, int n, int32_t id, int k, k3_logprob *top, int *n_top) {
    int nt = 0;
    k      = k < 0 ? 0 : k > K3_TOP_LOGPROBS ? K3_TOP_LOGPROBS : k;
    if (n_top)
        *n_top = 0;
    if (n <= 0 || !logits)
        return NAN;
    int32_t best = argmax(logits, n);
    if (isnan(logits[best]) || isinf(logits[best]))
        return NAN; /* no number, or +inf (a distribution with no finite normaliser) */
    const double mx  = logits[best];
    double       sum = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(logits[i]))
            continue;
        /* expf of the float difference, summed in double: each term within 1e-7 relative (the
         * result is a float anyway), at a third of the cost of exp in double */
        sum += (double)expf(logits[i] - logits[best]);
        if (k && !isinf(logits[i]) &&
            (nt < k || logits[i] > top[nt - 1].logprob)) { /* sorted insertion, ties: lower id */
            int at = nt < k ? nt++ : k - 1;
            while (at > 0 && logits[i] > top[at - 1].logprob) {
                top[at] = top[at - 1];
                at--;
            }
            top[at] = (k3_logprob){i, logits[i]};
        }
    }
    const double lse = mx + log(sum);
    for (int i = 0; i < nt; i++)
        top[i].logprob = (float)((double)top[i].logprob - lse);
    if (n_top)
        *n_top = nt;
    return id >= 0 && id < n && !isnan(logits[id]) ? (float)((double)logits[id] - lse) : NAN;
}

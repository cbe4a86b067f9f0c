/* test-sample.c: sampler properties (sample.c): greedy is argmax, a seed reproduces a run,
 * top-k / top-p / min-p restrict the support to exactly the expected ids, and the draw
 * frequencies follow the tempered softmax; the logit bias and OpenAI's penalties move greedy
 * choices exactly where hand arithmetic on binary fractions says (ties go to the lower id), and
 * k3_logprobs is log_softmax with its top list. All draws are seeded, so nothing here is flaky. */
#include "k3.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define V 64

/* Draw n samples; count[id]++. */
static void draw(const k3_sampler_params *p, const float *l, int n, int *count) {
    k3_sampler *s = k3_sampler_new(p);
    memset(count, 0, V * sizeof(int));
    for (int i = 0; i < n; i++) {
        int32_t t = k3_sampler_sample(s, l, V);
        if (t >= 0 && t < V)
            count[t]++;
    }
    k3_sampler_free(s);
}

/* The support is exactly the ids listed (each drawn at least once, nothing else). */
static int support_is(const int *count, const int *ids, int n) {
    int in[V] = {0};
    for (int i = 0; i < n; i++)
        in[ids[i]] = 1;
    for (int v = 0; v < V; v++)
        if ((count[v] > 0) != in[v])
            return 0;
    return 1;
}

static int32_t greedy_biased(const float *l, const k3_logit_bias *b, int nb, const uint64_t *mask) {
    k3_sampler_params p = {.temp = 0.0f, .top_p = 1.0f};
    k3_sampler       *s = k3_sampler_new(&p);
    int32_t           t = -2;
    if (!k3_sampler_set_bias(s, b, nb))
        t = mask ? k3_sampler_sample_masked(s, l, V, mask) : k3_sampler_sample(s, l, V);
    k3_sampler_free(s);
    return t;
}

static void test_bias(const float *l) {
    T_CHECK(greedy_biased(l, (k3_logit_bias[]){{5, -100.0f}}, 1, NULL) == 9,
            "bias -100 on the greedy id: the next");
    T_CHECK(greedy_biased(l, (k3_logit_bias[]){{63, 100.0f}}, 1, NULL) == 63, "bias +100 forces an id");
    /* l[9] = log .25 = -1.386; l[40] = log .1 + 1.1 = -1.203 > l[9] */
    T_CHECK(greedy_biased(l, (k3_logit_bias[]){{5, -100.0f}, {40, 1.1f}}, 2, NULL) == 40,
            "two entries add up independently");
    T_CHECK(greedy_biased(l, (k3_logit_bias[]){{64, 100.0f}, {5, -0.5f}}, 2, NULL) == 5,
            "an id past n is ignored; -0.5 leaves 5 (-1.19) above 9 (-1.39)");
    uint64_t mask[1] = {(1ull << 9) | (1ull << 40)};
    T_CHECK(greedy_biased(l, NULL, 0, mask) == 9, "masked greedy without a bias: 9 of {9, 40}");
    T_CHECK(greedy_biased(l, (k3_logit_bias[]){{40, 1.1f}, {5, 100.0f}}, 2, mask) == 40,
            "the mask after the bias: +1.1 lifts 40 over 9, and +100 cannot bring back masked 5");
    k3_sampler_params p = {.temp = 0.0f, .top_p = 1.0f};
    k3_sampler       *s = k3_sampler_new(&p);
    T_CHECK(k3_sampler_set_bias(s, (k3_logit_bias[]){{3, 100.5f}}, 1) == K3_ERR_ARG &&
                strstr(k3_errmsg(), "100.5"),
            "a bias past 100 is refused, named (%s)", k3_errmsg());
    T_CHECK(k3_sampler_set_bias(s, (k3_logit_bias[]){{-1, 1.0f}}, 1) == K3_ERR_ARG,
            "a negative id is refused");
    T_CHECK(k3_sampler_set_bias(s, (k3_logit_bias[]){{5, -100.0f}}, 1) == K3_OK &&
                k3_sampler_sample(s, l, V) == 9,
            "set");
    k3_sampler_set_adjust(s, 0);
    T_CHECK(k3_sampler_sample(s, l, V) == 5, "set_adjust 0: the logits as they are");
    k3_sampler_set_adjust(s, 1);
    T_CHECK(k3_sampler_set_bias(s, NULL, 0) == K3_OK && k3_sampler_sample(s, l, V) == 5,
            "n 0 clears the bias");
    k3_sampler_free(s);

    /* seeded draws: a bias of -100 removes the id (e^-100 of the mass); an empty bias and zero
     * penalties leave the draw sequence exactly as without them */
    p             = (k3_sampler_params){.temp = 1.0f, .top_p = 1.0f, .seed = 42};
    k3_sampler *a = k3_sampler_new(&p), *b = k3_sampler_new(&p);
    k3_sampler_set_bias(b, (k3_logit_bias[]){{5, -100.0f}}, 1);
    int same = 1, five = 0;
    for (int i = 0; i < 2000; i++)
        five += k3_sampler_sample(b, l, V) == 5;
    k3_sampler_free(b);
    b = k3_sampler_new(&p);
    k3_sampler_set_bias(b, NULL, 0);
    for (int i = 0; i < 2000; i++)
        same &= k3_sampler_sample(a, l, V) == k3_sampler_sample(b, l, V);
    T_CHECK(five == 0, "temp 1 with bias -100 on id 5 (p 0.5): never drawn in 2000 (%d)", five);
    T_CHECK(same, "no bias: the same draws as a sampler that never had one");
    k3_sampler_free(a);
    k3_sampler_free(b);
}

/* Greedy choices after accepting ids: logits 1, 0.75, 0.5 (binary fractions, so each
 * subtraction below is exact). */
static void test_penalties(const float *l) {
    float x[V];
    for (int i = 0; i < V; i++)
        x[i] = -40.0f;
    x[0] = 1.0f, x[1] = 0.75f, x[2] = 0.5f;
    k3_sampler_params p = {.temp = 0.0f, .top_p = 1.0f, .frequency_penalty = 0.25f};
    k3_sampler       *s = k3_sampler_new(&p);
    int32_t           t[4];
    for (int k = 0; k < 4; k++) {
        t[k] = k3_sampler_sample(s, x, V);
        k3_sampler_accept(s, 0); /* id 0 counted k + 1 times: 1 - 0.25 (k + 1) */
    }
    /* counts 0, 1 (0.75: tie with id 1, the lower id wins), 2 (0.5 < 0.75), 3 */
    T_CHECK(t[0] == 0 && t[1] == 0 && t[2] == 1 && t[3] == 1,
            "frequency 0.25: id 0 leads until its count makes it 0.5 (%d %d %d %d)", t[0], t[1], t[2], t[3]);
    k3_sampler_accept(s, 1); /* id 1: 0.75 - 0.25 = 0.5, id 2 0.5, id 0 0: the tie goes to 1 */
    T_CHECK(k3_sampler_sample(s, x, V) == 1, "a tie at 0.5 between ids 1 and 2: the lower");
    k3_sampler_accept(s, 1);
    T_CHECK(k3_sampler_sample(s, x, V) == 2, "id 1 counted twice (0.25): id 2 (0.5)");
    k3_sampler_free(s);

    p = (k3_sampler_params){.temp = 0.0f, .top_p = 1.0f, .presence_penalty = 0.25f};
    s = k3_sampler_new(&p);
    k3_sampler_accept(s, 0);
    int32_t once = k3_sampler_sample(s, x, V);
    k3_sampler_accept(s, 0);
    k3_sampler_accept(s, 0);
    int32_t thrice = k3_sampler_sample(s, x, V);
    k3_sampler_accept(s, 1); /* 0.5 for id 1; id 0 0.75 again the best */
    int32_t both = k3_sampler_sample(s, x, V);
    T_CHECK(once == 0 && thrice == 0 && both == 0,
            "presence 0.25: a flat 0.25 whatever the count (0.75 ties id 1; lower id) (%d %d %d)", once,
            thrice, both);
    k3_sampler_free(s);

    p = (k3_sampler_params){
        .temp = 0.0f, .top_p = 1.0f, .presence_penalty = 0.125f, .frequency_penalty = 0.125f};
    s = k3_sampler_new(&p);
    k3_sampler_accept(s, 0); /* 1 - 0.125 - 0.125 = 0.75: the tie, id 0 */
    int32_t a = k3_sampler_sample(s, x, V);
    k3_sampler_accept(s, 0); /* 1 - 0.25 - 0.125 = 0.625 < 0.75 */
    int32_t b = k3_sampler_sample(s, x, V);
    k3_sampler_set_adjust(s, 0);
    int32_t c = k3_sampler_sample(s, x, V);
    T_CHECK(a == 0 && b == 1 && c == 0, "both: count * 0.125 + 0.125 (%d %d); off while set_adjust 0 (%d)", a,
            b, c);
    k3_sampler_free(s);

    p = (k3_sampler_params){.temp = 0.0f, .top_p = 1.0f, .frequency_penalty = -2.0f};
    s = k3_sampler_new(&p);
    k3_sampler_accept(s, 40);
    T_CHECK(k3_sampler_sample(s, l, V) == 40,
            "a negative penalty raises: 40 (log .1 + 2 = -0.30) over 5 (-0.69)");
    k3_sampler_free(s);
}

/* vLLM's and HF's repetition penalty, greedy, on binary fractions (each division and product
 * below is exact): a positive logit divided by it, a negative one multiplied, over the prompt's
 * ids (k3_sampler_accept_prompt) and the answer's; after the bias, before frequency/presence. */
static void test_repetition(void) {
    float x[V];
    for (int i = 0; i < V; i++)
        x[i] = -40.0f;
    x[0] = 2.0f, x[1] = 0.875f, x[2] = -0.5f, x[3] = -0.75f;
    k3_sampler_params p        = {.temp = 0.0f, .top_p = 1.0f, .repetition_penalty = 2.0f};
    k3_sampler       *s        = k3_sampler_new(&p);
    int32_t           prompt[] = {0, -1, 0};
    T_CHECK(k3_sampler_accept_prompt(s, prompt, 3) == K3_OK && k3_sampler_sample(s, x, V) == 0,
            "2 on a prompt id of logit 2: 1.0, still above 0.875 (a negative id skipped)");
    k3_sampler_accept(s, 1); /* 0.875 / 2 = 0.4375 */
    x[1] = 1.5f;             /* 0.75 < 1.0 */
    T_CHECK(k3_sampler_sample(s, x, V) == 0, "an answer's id is divided too: 1.5 -> 0.75 < 1.0");
    x[0] = -0.5f, x[1] = -0.625f; /* ids 0 and 1 seen: -1.0, -1.25; id 2 -0.5 unseen */
    T_CHECK(k3_sampler_sample(s, x, V) == 2, "a negative logit is multiplied: -0.5 -> -1.0 < -0.5 of id 2");
    k3_sampler_set_adjust(s, 0);
    T_CHECK(k3_sampler_sample(s, x, V) == 0, "off while set_adjust 0 (the reasoning): -0.5 wins");
    k3_sampler_free(s);

    p    = (k3_sampler_params){.temp = 0.0f, .top_p = 1.0f, .repetition_penalty = 0.5f};
    s    = k3_sampler_new(&p);
    x[0] = -0.5f, x[1] = -0.75f, x[2] = -40.0f;
    k3_sampler_accept_prompt(s, (const int32_t[]){1}, 1);
    T_CHECK(k3_sampler_sample(s, x, V) == 1, "0.5 encourages a repeat: -0.75 -> -0.375 > -0.5");
    k3_sampler_free(s);

    /* the prompt's ids do not count for frequency/presence: 2 / 2 = 1.0 > 0.875 (with the
     * frequency penalty on them it would be 1.0 - 0.75 = 0.25 < 0.875) */
    x[0] = 2.0f, x[1] = 0.875f;
    p = (k3_sampler_params){
        .temp = 0.0f, .top_p = 1.0f, .repetition_penalty = 2.0f, .frequency_penalty = 0.75f};
    s = k3_sampler_new(&p);
    k3_sampler_accept_prompt(s, (const int32_t[]){0}, 1);
    T_CHECK(k3_sampler_sample(s, x, V) == 0, "a prompt id gets the repetition penalty, not frequency's");
    k3_sampler_free(s);

    /* vLLM's order: repetition, then frequency: 2 / 2 - 0.5 = 0.5 < 0.625 (the other order gives
     * (2 - 0.5) / 2 = 0.75 > 0.625) */
    x[1] = 0.625f;
    p    = (k3_sampler_params){
           .temp = 0.0f, .top_p = 1.0f, .repetition_penalty = 2.0f, .frequency_penalty = 0.5f};
    s = k3_sampler_new(&p);
    k3_sampler_accept(s, 0);
    T_CHECK(k3_sampler_sample(s, x, V) == 1, "repetition before frequency: 2 -> 1.0 - 0.5 = 0.5 < 0.625");
    k3_sampler_free(s);

    /* the bias first: (-0.5 + 1) / 2 = 0.25 > 0.125 (repetition first: -1.0 + 1 = 0 < 0.125) */
    for (int i = 0; i < V; i++)
        x[i] = -40.0f;
    x[2] = -0.5f, x[5] = 0.125f;
    p = (k3_sampler_params){.temp = 0.0f, .top_p = 1.0f, .repetition_penalty = 2.0f};
    s = k3_sampler_new(&p);
    k3_sampler_set_bias(s, &(k3_logit_bias){2, 1.0f}, 1);
    k3_sampler_accept_prompt(s, (const int32_t[]){2}, 1);
    T_CHECK(k3_sampler_sample(s, x, V) == 2, "the bias before the repetition penalty: 0.25 > 0.125");
    k3_sampler_free(s);

    /* a zeroed struct's 0 is off, as 1 is: nothing counted, nothing divided */
    x[5] = 0.5f, x[2] = 0.75f;
    p = (k3_sampler_params){.temp = 0.0f, .top_p = 1.0f};
    s = k3_sampler_new(&p);
    k3_sampler_accept_prompt(s, (const int32_t[]){2}, 1);
    T_CHECK(k3_sampler_sample(s, x, V) == 2, "repetition_penalty 0 (a zeroed struct) is off");
    k3_sampler_free(s);
    k3_sampler_params d;
    k3_sampler_params_default(NULL, &d);
    T_CHECK(d.repetition_penalty == 1.0f && k3_setting(K3_SETTING_REPETITION_PENALTY)->def == 1.0,
            "the default is 1 (off), as the settings row's (%g)", (double)d.repetition_penalty);
}

static void test_logprobs(void) {
    float      x[4] = {logf(0.5f), logf(0.25f), logf(0.25f), NAN};
    k3_logprob top[K3_TOP_LOGPROBS];
    int        nt = -1;
    float      lp = k3_logprobs(x, 4, 1, 2, top, &nt);
    T_NEAR(lp, log(0.25), 1e-6, "log_softmax of id 1: log 0.25 (%g)", (double)lp);
    T_CHECK(nt == 2 && top[0].id == 0 && top[1].id == 1,
            "top 2: ids 0 and 1 (a tie with 2: the lower) (%d: %d %d)", nt, top[0].id, top[1].id);
    T_NEAR(top[0].logprob, log(0.5), 1e-6, "top[0] is log 0.5 (%g)", (double)top[0].logprob);
    lp = k3_logprobs(x, 4, 2, K3_TOP_LOGPROBS, top, &nt);
    T_CHECK(nt == 3 && top[2].id == 2, "asked 20 of 3 numbers: 3, the NaN left out (%d)", nt);
    double sum = 0;
    for (int i = 0; i < nt; i++)
        sum += exp((double)top[i].logprob);
    T_NEAR(sum, 1.0, 1e-6, "the whole distribution sums to 1 (%g)", sum);
    T_CHECK(isnan(k3_logprobs(x, 4, 3, 0, top, &nt)) && nt == 0, "a NaN id: NAN, k 0: no list");
    T_CHECK(isnan(k3_logprobs(x, 4, 4, 1, top, &nt)), "an id out of range: NAN");
    float y[3] = {1000.0f, 999.0f, -INFINITY};
    lp         = k3_logprobs(y, 3, 1, 3, top, &nt);
    T_NEAR(lp, -1.0 - log1p(exp(-1.0)), 1e-6, "no overflow at logit 1000 (%g)", (double)lp);
    T_CHECK(nt == 2, "-inf (probability 0) is not an alternative (%d)", nt);
    T_CHECK(k3_setting(K3_SETTING_TOP_LOGPROBS)->hi == K3_TOP_LOGPROBS,
            "top_logprobs' row allows what k3_logprobs lists (%g, %d)",
            k3_setting(K3_SETTING_TOP_LOGPROBS)->hi, K3_TOP_LOGPROBS);
}

int main(void) {
    float l[V];
    /* probabilities at temp 1 over ids 5, 9, 2, 40: 0.5, 0.25, 0.15, 0.10 (rest ~0) */
    for (int i = 0; i < V; i++)
        l[i] = -40.0f;
    l[5]  = logf(0.5f);
    l[9]  = logf(0.25f);
    l[2]  = logf(0.15f);
    l[40] = logf(0.10f);
    int               count[V], count2[V];
    k3_sampler_params p = {.temp = 0.0f, .top_p = 1.0f};

    draw(&p, l, 50, count);
    T_CHECK(count[5] == 50, "temp 0 is greedy: always the argmax");
    float tie[V] = {0};
    tie[7] = tie[3] = 1.0f;
    k3_sampler *g   = k3_sampler_new(&p);
    T_CHECK(k3_sampler_sample(g, tie, V) == 3, "greedy picks the first of tied maxima");
    k3_sampler_free(g);

    p = (k3_sampler_params){.temp = 1.0f, .top_p = 1.0f, .seed = 42};
    draw(&p, l, 20000, count);
    T_CHECK(fabs(count[5] / 20000.0 - 0.5) < 0.02 && fabs(count[9] / 20000.0 - 0.25) < 0.02 &&
                fabs(count[2] / 20000.0 - 0.15) < 0.02 && fabs(count[40] / 20000.0 - 0.10) < 0.02,
            "temp 1 frequencies follow softmax (%d %d %d %d of 20000)", count[5], count[9], count[2],
            count[40]);
    draw(&p, l, 2000, count);
    draw(&p, l, 2000, count2);
    T_CHECK(!memcmp(count, count2, sizeof count), "the same seed gives the same draws");
    k3_sampler *a = k3_sampler_new(&p), *b;
    p.seed        = 43;
    b             = k3_sampler_new(&p);
    int diff      = 0;
    for (int i = 0; i < 200; i++)
        diff += k3_sampler_sample(a, l, V) != k3_sampler_sample(b, l, V);
    T_CHECK(diff > 0, "another seed gives other draws (%d of 200 differ)", diff);
    k3_sampler_free(a);
    k3_sampler_free(b);

    p.temp = 0.5f; /* p ∝ p1^2: 0.25/0.395 = 0.633 for id 5 */
    draw(&p, l, 20000, count);
    double want = 0.25 / (0.25 + 0.0625 + 0.0225 + 0.01);
    T_CHECK(fabs(count[5] / 20000.0 - want) < 0.02, "temp 0.5 sharpens (id 5: %.3f, want %.3f)",
            count[5] / 20000.0, want);

    p = (k3_sampler_params){.temp = 1.0f, .top_p = 1.0f, .top_k = 2, .seed = 1};
    draw(&p, l, 5000, count);
    T_CHECK(support_is(count, (int[]){5, 9}, 2), "top-k 2: support is the two best ids");
    p.top_k = 1;
    draw(&p, l, 500, count);
    T_CHECK(count[5] == 500, "top-k 1 is greedy");

    p = (k3_sampler_params){.temp = 1.0f, .top_p = 0.7f, .seed = 2};
    draw(&p, l, 5000, count);
    T_CHECK(support_is(count, (int[]){5, 9}, 2), "top-p 0.7: support {5, 9} (0.5 + 0.25 reaches 0.7)");
    p.top_p = 0.8f;
    draw(&p, l, 5000, count);
    T_CHECK(support_is(count, (int[]){5, 9, 2}, 3), "top-p 0.8: support {5, 9, 2}");
    p.top_p = 0.3f;
    draw(&p, l, 500, count);
    T_CHECK(count[5] == 500, "top-p 0.3: only the best id");

    p = (k3_sampler_params){.temp = 1.0f, .top_p = 1.0f, .min_p = 0.25f, .seed = 3};
    draw(&p, l, 5000, count);
    T_CHECK(support_is(count, (int[]){5, 9, 2}, 3), "min-p 0.25: p >= 0.125 keeps {5, 9, 2}");
    p.min_p = 0.4f;
    draw(&p, l, 5000, count);
    T_CHECK(support_is(count, (int[]){5, 9}, 2), "min-p 0.4: p >= 0.2 keeps {5, 9}");
    T_CHECK(fabs(count[5] / 5000.0 - 2.0 / 3) < 0.03,
            "renormalised after truncation (id 5: %.3f, want 0.667)", count[5] / 5000.0);

    p = (k3_sampler_params){.temp = 1.0f, .top_p = 0.8f, .top_k = 2, .min_p = 0.0f, .seed = 4};
    draw(&p, l, 5000, count);
    T_CHECK(support_is(count, (int[]){5, 9}, 2), "top-k 2 then top-p 0.8 (of the renormalised pair): {5, 9}");

    test_bias(l);
    test_penalties(l);
    test_repetition();
    test_logprobs();

    k3_sampler_params d;
    k3_sampler_params_default(NULL, &d);
    T_CHECK(d.temp == 1.0f && d.top_p == 1.0f && d.top_k == 0 && d.min_p == 0.0f,
            "defaults without a model: temp 1, top-p 1, no top-k / min-p");
    return t_done();
}

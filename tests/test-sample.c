/* test-sample.c: sampler properties (sample.c): greedy is argmax, a seed reproduces a run,
 * top-k / top-p / min-p restrict the support to exactly the expected ids, and the draw
 * frequencies follow the tempered softmax. All draws are seeded, so nothing here is flaky. */
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

    k3_sampler_params d;
    k3_sampler_params_default(NULL, &d);
    T_CHECK(d.temp == 1.0f && d.top_p == 1.0f && d.top_k == 0 && d.min_p == 0.0f,
            "defaults without a model: temp 1, top-p 1, no top-k / min-p");
    return t_done();
}

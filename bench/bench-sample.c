/* bench-sample.c: what one draw of the sampler costs over the release's 163,840 logits, and what
 * the OpenAI extras add to it: a logit bias, the penalties, k3_logprobs.
 *
 *   BENCH sample_greedy         X us ref Y us   greedy, nothing asked vs greedy with an empty bias
 *                                               and zero penalties set (the hot path: same cost)
 *   BENCH sample_temp1          X us ref Y us   temperature 1 (full softmax, one pass), likewise
 *   BENCH sample_bias           X us ref Y us   greedy with a 300-entry bias vs greedy
 *   BENCH sample_penalties      X us ref Y us   greedy with both penalties after 200 tokens (100
 *                                               distinct) vs greedy
 *   BENCH sample_logprobs_top20 X us ref Y us   k3_logprobs with 20 alternatives vs greedy
 *   BENCH sample_logprobs_top0  X us ref Y us   k3_logprobs alone vs greedy
 *
 * Each figure is the median of 101 draws (one warm-up first) on fixed pseudo-random logits.
 */
#include "bench.h"

#include <stdlib.h>
#include <time.h>

#define SB_VOCAB 163840
#define SB_ROUNDS 101

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median seconds of one k3_sampler_sample on s (or of k3_logprobs with k alternatives when
 * k >= 0). */
static double timed(k3_sampler *s, const float *lg, int k) {
    double         t[SB_ROUNDS];
    k3_logprob     top[K3_TOP_LOGPROBS];
    int            nt;
    volatile float sink = 0;
    for (int r = -1; r < SB_ROUNDS; r++) {
        double x = now();
        if (k >= 0)
            sink += k3_logprobs(lg, SB_VOCAB, 7, k, top, &nt);
        else
            sink += (float)k3_sampler_sample(s, lg, SB_VOCAB);
        if (r >= 0)
            t[r] = now() - x;
    }
    (void)sink;
    return bench_median(t, SB_ROUNDS);
}

int bench_sample(void);
int bench_sample(void) {
    float         *lg   = malloc(SB_VOCAB * sizeof *lg);
    k3_logit_bias *bias = malloc(300 * sizeof *bias);
    if (!lg || !bias) {
        free(lg);
        free(bias);
        return 1;
    }
    for (int i = 0; i < SB_VOCAB; i++)
        lg[i] = (float)((i * 2654435761u) % 100000) / 5000.0f - 10.0f; /* -10..10 */
    for (int i = 0; i < 300; i++)
        bias[i] = (k3_logit_bias){(int32_t)((i * 7919u) % SB_VOCAB), (float)(i % 7) - 3.0f};
    k3_sampler_params g = {.temp = 0, .top_p = 1, .seed = 1}, t1 = {.temp = 1, .top_p = 1, .seed = 1};
    k3_sampler_params pen = g;
    pen.presence_penalty = 0.5f, pen.frequency_penalty = 0.25f;
    k3_sampler *plain = k3_sampler_new(&g), *empty = k3_sampler_new(&g);
    k3_sampler *hot = k3_sampler_new(&t1), *hot_empty = k3_sampler_new(&t1);
    k3_sampler *biased = k3_sampler_new(&g), *penal = k3_sampler_new(&pen);
    int         rc = 1;
    if (!plain || !empty || !hot || !hot_empty || !biased || !penal)
        goto done;
    k3_sampler_set_bias(empty, NULL, 0); /* set and cleared: nothing to apply */
    k3_sampler_set_bias(hot_empty, NULL, 0);
    k3_sampler_set_bias(biased, bias, 300);
    for (int i = 0; i < 200; i++)
        k3_sampler_accept(penal, (int32_t)((i % 100) * 1637));
    double greedy = timed(plain, lg, -1);
    if (bench_want("sample_greedy"))
        bench_report("sample_greedy", 1e6 * timed(empty, lg, -1), "us", 1e6 * greedy, "us");
    if (bench_want("sample_temp1"))
        bench_report("sample_temp1", 1e6 * timed(hot_empty, lg, -1), "us", 1e6 * timed(hot, lg, -1), "us");
    if (bench_want("sample_bias"))
        bench_report("sample_bias", 1e6 * timed(biased, lg, -1), "us", 1e6 * greedy, "us");
    if (bench_want("sample_penalties"))
        bench_report("sample_penalties", 1e6 * timed(penal, lg, -1), "us", 1e6 * greedy, "us");
    if (bench_want("sample_logprobs_top20"))
        bench_report("sample_logprobs_top20", 1e6 * timed(NULL, lg, K3_TOP_LOGPROBS), "us", 1e6 * greedy,
                     "us");
    if (bench_want("sample_logprobs_top0"))
        bench_report("sample_logprobs_top0", 1e6 * timed(NULL, lg, 0), "us", 1e6 * greedy, "us");
    rc = 0;
done:
    k3_sampler_free(plain);
    k3_sampler_free(empty);
    k3_sampler_free(hot);
    k3_sampler_free(hot_empty);
    k3_sampler_free(biased);
    k3_sampler_free(penal);
    free(lg);
    free(bias);
    return rc;
}

/* test-vk-tier.c: the engine with the Vulkan tier on and off gives the same answers.
 *
 * On a generated tiny checkpoint, greedy decoding with K3_VK=1 (lavapipe here; resident shared
 * experts and a routed tier that fills as experts are read) and K3_VK=0 must produce the same
 * tokens, with logits within 1e-5 relative L2 at every step. Both runs use the exact-float CPU
 * kernels (K3_IDOT=0): the shaders compute exact-float too. Skips cleanly without a device.
 */
#include "k3.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "detect_leaks=0"; /* the Vulkan driver's own allocations */
}

#define NTOK 24

typedef struct run {
    int32_t  toks[NTOK];
    float   *logits; /* (NTOK, V) */
    k3_stats st;
} run;

static int greedy(const char *dir, const char *vk, const char *vk_gb, run *r, int *vocab) {
    setenv("K3_VK", vk, 1);
    if (vk_gb)
        setenv("K3_VK_GB", vk_gb, 1);
    else
        unsetenv("K3_VK_GB");
    k3_params   p;
    k3_model   *m  = NULL;
    k3_session *s  = NULL;
    int         rc = -1;
    if (k3_params_default(&p) || k3_model_open(dir, &p, &m) || k3_session_new(m, &s)) {
        printf("# open (K3_VK=%s): %s\n", vk, k3_errmsg());
        goto out;
    }
    k3_model_info info;
    k3_model_get_info(m, &info);
    *vocab           = info.vocab;
    r->logits        = malloc((size_t)NTOK * info.vocab * sizeof(float));
    int32_t prompt[] = {5, 77, 300, 12, 901, 44, 3, 250};
    if (k3_session_feed(s, prompt, 8))
        goto out;
    for (int i = 0; i < NTOK; i++) {
        const float *lg = k3_session_logits(s);
        memcpy(r->logits + (size_t)i * info.vocab, lg, (size_t)info.vocab * sizeof(float));
        int best = 0;
        for (int v = 1; v < info.vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        r->toks[i] = best;
        if (k3_session_feed(s, &r->toks[i], 1))
            goto out;
    }
    k3_session_stats(s, &r->st);
    rc = 0;
out:
    k3_session_free(s);
    k3_model_free(m);
    return rc;
}

int main(void) {
#if !K3_VK
    T_SKIP("built with VK=0: no Vulkan tier");
    return t_done();
#else
    const char *b   = getenv("K3_BUILD") ? getenv("K3_BUILD") : "build";
    const char *tmp = getenv("K3_TMP") ? getenv("K3_TMP") : "/tmp";
    char        dir[512], cmd[1200];
    snprintf(dir, sizeof dir, "%s/vk-tier-model", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && '%s/k3-mkmodel' --preset tiny --seed 5 --quiet '%s'", dir, b,
             dir);
    if (system(cmd) != 0) {
        T_CHECK(0, "generate a tiny checkpoint (%s)", cmd);
        return t_done();
    }
    setenv("K3_IDOT", "0", 1);
    setenv("K3_BITS", "8", 1); /* a quantized shared expert (int8) goes through the device too */
    run off = {0}, on = {0}, small = {0};
    int V = 0;
    if (greedy(dir, "0", NULL, &off, &V)) {
        T_CHECK(0, "tier off: generation ran");
        return t_done();
    }
    if (greedy(dir, "1", NULL, &on, &V)) {
        T_CHECK(0, "tier on: generation ran");
        return t_done();
    }
    if (on.st.vk_budget == 0) {
        T_SKIP("no Vulkan device: the tier stayed off");
        return t_done();
    }
    T_CHECK(!memcmp(on.toks, off.toks, sizeof on.toks),
            "greedy tokens identical with the tier on and off (%d tokens)", NTOK);
    double worst = 0;
    for (int i = 0; i < NTOK; i++) {
        double num = 0, den = 0;
        for (int v = 0; v < V; v++) {
            double d = (double)on.logits[(size_t)i * V + v] - (double)off.logits[(size_t)i * V + v];
            num += d * d;
            den += (double)off.logits[(size_t)i * V + v] * (double)off.logits[(size_t)i * V + v];
        }
        double e = sqrt(num / den);
        if (e > worst)
            worst = e;
    }
    T_CHECK(worst <= 1e-5, "logits within 1e-5 relative L2 at every step (worst %.2e)", worst);
    T_CHECK(on.st.vk_hits > 0 && on.st.vk_experts > 0,
            "routed experts resident on the device and used at decode (%d resident, %llu hits)",
            on.st.vk_experts, (unsigned long long)on.st.vk_hits);
    T_CHECK(off.st.vk_hits == 0 && off.st.vk_budget == 0, "K3_VK=0: the tier is off");
    /* a budget too small for any routed expert: shared experts only, or nothing; same tokens */
    if (greedy(dir, "1", "0.00002", &small, &V) == 0) {
        T_CHECK(!memcmp(small.toks, off.toks, sizeof small.toks) && small.st.vk_experts == 0,
                "K3_VK_GB=0.00002: no routed expert fits, same tokens (%d resident)", small.st.vk_experts);
    } else {
        T_CHECK(0, "tier with a tiny budget: generation ran");
    }
    free(off.logits);
    free(on.logits);
    free(small.logits);
    return t_done();
#endif
}

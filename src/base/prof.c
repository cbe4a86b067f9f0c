/* prof.c: the phase timers of prof.h. */
#include "prof.h"

#include <stdlib.h>
#include <time.h>

#include "k3-impl.h"

int prof_on;

static prof_t   acc[PROF_N];
static uint64_t mm_bytes, mm_calls;

static const char *const names[PROF_N] = {"matmul",    "act_quant", "norm_mix", "kda_conv", "kda_gate",
                                          "kda_recur", "mla_attn",  "route",    "moe_move", "glu"};

k3_status prof_init(void) {
    int on = 0;
    if (k3_setting_env_int(K3_SETTING_PROFILE, &on))
        return K3_ERR_ARG;
    prof_on = on;
    return K3_OK;
}

prof_t prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (prof_t){k3_time(), (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec};
}

void prof_end(prof_phase ph, prof_t t0) {
    if (!prof_on)
        return;
    prof_t t = prof_now();
    acc[ph].wall += t.wall - t0.wall;
    acc[ph].cpu += t.cpu - t0.cpu;
}

void prof_add_bytes(uint64_t bytes) {
    mm_bytes += bytes;
    mm_calls++;
}

void prof_mm_counts(uint64_t *bytes, uint64_t *calls) {
    *bytes = mm_bytes, *calls = mm_calls;
}

void prof_reset(void) {
    memset(acc, 0, sizeof acc);
    mm_bytes = mm_calls = 0;
}

prof_t prof_get(prof_phase ph) {
    prof_t t = acc[ph];
    if (ph == PROF_MATMUL) /* the quantization ran inside the matmuls */
        t.wall -= acc[PROF_QUANT].wall, t.cpu -= acc[PROF_QUANT].cpu;
    return t;
}

const char *prof_name(prof_phase ph) {
    return ph < PROF_N ? names[ph] : "?";
}

/* prof.h: phase timers of the forward pass (K3_PROFILE=1), for finding where a chunk's time goes.
 *
 * DESIGN
 * - Off unless K3_PROFILE=1 (read at each k3_params_default; not 0 or 1: an error); then each
 *   phase of forward.c adds the wall time and the process CPU time (every thread, OpenMP spin
 *   waits included) of its calls. prof_begin costs one load and a branch when off.
 * - Process-wide counters (not per session): a diagnostic for k3-bench and K3_PROFILE runs of a
 *   single session, not for concurrent sessions. Phases nest nowhere: a phase's time is its own.
 * - PROF_QUANT is measured inside the matmul entry (kern.c) and so is part of PROF_MATMUL's time;
 *   prof_get subtracts it, so every phase it reports is the phase's own time.
 */
#pragma once
#include "k3.h"

#include <stdio.h>

typedef enum prof_phase {
    PROF_MATMUL,   /* mm(): qmat_matmul / qmat_matvec, OpenMP fork and join included          */
    PROF_QUANT,    /* IDOT activation quantization (inside PROF_MATMUL)                         */
    PROF_NORM,     /* Attention Residuals mixes, RMSNorms, residual adds of the layer and head  */
    PROF_KDA_CONV, /* KDA causal conv + SiLU and window copies                                 */
    PROF_KDA_GATE, /* KDA decay gates and beta sigmoids                                         */
    PROF_KDA_REC,  /* KDA per-head delta-rule recurrence and output norm                        */
    PROF_MLA_ATT,  /* MLA attention over the latent cache, gather of per-head queries, gating    */
    PROF_ROUTE,    /* router sigmoid and top-k (its matmul is PROF_MATMUL)                      */
    PROF_MOE_MOVE, /* expert gather, scatter, weighted combine + latent norm                    */
    PROF_GLU,      /* SiTU-GLU of the shared, dense and routed experts                          */
    PROF_N
} prof_phase;

typedef struct prof_t {
    double wall, cpu;
} prof_t;

extern int prof_on; /* K3_PROFILE, set by prof_init */

/* Read K3_PROFILE (idempotent): 0 or 1, else K3_ERR_ARG naming it (prof_on unchanged). */
k3_status            prof_init(void);
prof_t               prof_now(void);
static inline prof_t prof_begin(void) {
    return prof_on ? prof_now() : (prof_t){0, 0};
}
void prof_end(prof_phase ph, prof_t t0);
/* Count one matmul call that read `bytes` of weights (weights + scales); prof_mm_counts: the
 * bytes and calls since the last reset. */
void prof_add_bytes(uint64_t bytes);
void prof_mm_counts(uint64_t *bytes, uint64_t *calls);
/* Zero the counters. */
void prof_reset(void);
/* Wall and CPU seconds of phase ph since the last reset (PROF_MATMUL without PROF_QUANT). */
prof_t      prof_get(prof_phase ph);
const char *prof_name(prof_phase ph);

/* kda-rec.h: the KDA delta-rule recurrence of one head over one sequence's columns (kda-rec.c),
 * built for each kernel level with the same IEEE operations, so every level gives the same bits.
 */
#pragma once

/* One head h of one sequence: columns t0 .. t0+n-1 of the pass, token by token in order. */
typedef struct kda_rec {
    int          d, P, H, h; /* head width, row stride of the (cols, P) buffers (H·d), heads, head */
    int          t0, n;      /* the sequence's columns                                            */
    const float *S0;         /* the head's state before column t0 (d, d), S[key][value]            */
    float       *S;          /* the head's new state (d, d) (may not alias S0)                     */
    float       *q, *k;      /* (cols, P) conv outputs: normalised in place; q's head slot then
                                gets σ(gate) ⊙ RMSNorm_head(o, o_norm)                            */
    const float *v, *decay;  /* (cols, P) values and decays e^g                                    */
    const float *sgate;      /* (cols, P) σ(g_proj x)                                              */
    const float *beta;       /* (cols, H) β                                                        */
    const float *o_norm;     /* (d)                                                                */
    double       eps;        /* rms_norm_eps                                                       */
    double      *u, *o;      /* scratch (d) each                                                   */
} kda_rec;

/* Columns x heads x d x d at which a pass runs the heads' recurrences on the threads (less work
 * than this costs less than waking them): forward.c, and speed.c's probe of it. */
#define KDA_REC_PAR_MIN K3_PAR_MIN_OPS

/* At the running kernel level (kern_isa()); kda_rec_isa at a given one (a level the CPU lacks
 * runs the baseline build). Every level gives the same bits (tests/test-model). */
void kda_rec_run(const kda_rec *r);
void kda_rec_isa(int isa, const kda_rec *r);

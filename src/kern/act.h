/* act.h: element-wise activations of the forward pass in float, vectorised (act.c).
 *
 * kern_situ_glu is the float path of SiTU-GLU (spec 5). It is not the libm double formula the
 * engine used before (forward.c keeps that one, K3_ACT=double): tests/test-act bounds the
 * difference. Every kernel level gives the same bits (the scalar twin does the same IEEE float
 * operations, fmaf where the vector code has an FMA), so K3_ISA never changes a result.
 * The betas are the config's, in (0, 1e6]: positive, with a finite inverse.
 */
#pragma once
#include "k3-impl.h"

#include <stddef.h>

/* g[i] = SiTU-GLU(g[i], u[i]) = b1·tanh(g/b1)·σ(g) · b2·tanh(u/b2), in float, at the running
 * kernel level. NaN in g[i] or u[i] gives NaN; ±inf give the limits. */
void kern_situ_glu(float *g, const float *u, size_t n, float b1, float b2);
/* The same at a given level (enum kern_isa; a level this CPU lacks runs the scalar twin); the
 * scalar twin is kern_situ_glu_isa(KERN_SCALAR, ...). For tests. */
void kern_situ_glu_isa(int isa, float *g, const float *u, size_t n, float b1, float b2);

/* The same in double through libm, rounded once to float at the end: the formula before the
 * float path (K3_ACT=double). Scalar at every level. */
void kern_situ_glu_double(float *g, const float *u, size_t n, float b1, float b2);

/* Unary element-wise operations, in place. */
enum kern_act_op {
    KERN_SIGMOID, /* σ(x)                                  */
    KERN_SILU,    /* x·σ(x)                                */
    KERN_EXP      /* e^x, for x <= 0 only (x > 0 gives 1)  */
};
/* x[i] = op(x[i]) on the path K3_ACT selects: float at the running kernel level, or the libm
 * double formula rounded once (K3_ACT=double: the forward pass's formulas before). NaN stays
 * NaN. kern_unary_at: at a given level (enum kern_isa; -1 = the double formula). */
void kern_unary(int op, float *x, size_t n);
void kern_unary_at(int op, int isa, float *x, size_t n);

/* Which SiTU-GLU the forward pass runs: K3_ACT=float (default, kern_situ_glu) or K3_ACT=double
 * (the libm double formula, the path before): 1 for double. As kern_act_env last read it (or
 * the environment, read once, if it never ran). */
int kern_act_double(void);
/* Set it (1 double, 0 float) for the whole process: tests and benchmarks. */
void kern_set_act_double(int on);
/* Read K3_ACT (k3_params_default does, like K3_ISA): K3_OK, or K3_ERR_ARG naming the value
 * and what was expected (the setting then stays as it was). */
k3_status kern_act_env(void);

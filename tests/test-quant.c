/* test-quant.c: load-time quantization (quant.c): error bounds per format, known values,
 * determinism, ownership and bad input.
 *
 * Bounds (Gaussian-like rows with outliers, the shape of real weight rows):
 *   Q_I8: every element within s/2 of its float (s = maxabs/127), exact 0 and extremes.
 *   Q_I4: every group's squared error <= that of plain maxabs/7 (the search includes it); the
 *         relative Frobenius error of the matrix and of W x stays under the measured bound.
 */
#include "quant.h"
#include "test.h"

#include <float.h>
#include <omp.h>
#include <stdlib.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double   urnd(void) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static float grnd(void) { /* standard normal (Box-Muller) */
    return (float)(sqrt(-2.0 * log(urnd())) * cos(6.283185307179586 * urnd()));
}

/* relative Frobenius error of the dequantized matrix, and of W x for a random x */
static void rel_errors(const qmat *m, const float *w, double *ew, double *ey) {
    float *row = malloc((size_t)m->cols * sizeof(float));
    float *x   = malloc((size_t)m->cols * sizeof(float));
    for (int c = 0; c < m->cols; c++)
        x[c] = grnd();
    double n2 = 0, e2 = 0, yn2 = 0, ye2 = 0;
    for (int r = 0; r < m->rows; r++) {
        qmat_dequant_row(m, r, row);
        double y = 0, yq = 0;
        for (int c = 0; c < m->cols; c++) {
            double a = w[(size_t)r * m->cols + c], b = row[c];
            n2 += a * a;
            e2 += (a - b) * (a - b);
            y += a * (double)x[c];
            yq += b * (double)x[c];
        }
        yn2 += y * y;
        ye2 += (y - yq) * (y - yq);
    }
    *ew = sqrt(e2 / n2);
    *ey = sqrt(ye2 / yn2);
    free(row);
    free(x);
}

/* squared error of one int4 group quantized with plain s = maxabs/7 (independent oracle) */
static double plain7_err(const float *x, int n) {
    float amax = 0;
    for (int c = 0; c < n; c++)
        amax = fmaxf(amax, fabsf(x[c]));
    if (amax == 0)
        return 0;
    double s = (double)(amax / 7.0f), e = 0;
    for (int c = 0; c < n; c++) {
        double q = round((double)x[c] / s);
        q        = q > 7 ? 7 : q < -8 ? -8 : q;
        e += ((double)x[c] - q * s) * ((double)x[c] - q * s);
    }
    return e;
}

int main(void) {
    const int rows = 96, cols = 1000; /* cols: not a multiple of 64 (last int4 group of 40) */
    float    *w = malloc((size_t)rows * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        w[i] = grnd() * 0.02f * (i % 97 == 0 ? 8.0f : 1.0f); /* a few outliers */
    for (int c = 0; c < cols; c++)
        w[5 * cols + c] = 0.0f; /* an all-zero row */

    /* ---- int8 ---- */
    qmat m8;
    T_CHECK(qmat_quantize(&m8, Q_I8, w, rows, cols) == K3_OK, "int8 quantize");
    T_CHECK(m8.own && m8.w == m8.own && m8.s, "int8 owns one block (weights first)");
    float *row = malloc((size_t)cols * sizeof(float));
    int    ok = 1, ext = 1;
    for (int r = 0; r < rows; r++) {
        qmat_dequant_row(&m8, r, row);
        const int8_t *q = (const int8_t *)m8.w + (size_t)r * cols;
        for (int c = 0; c < cols; c++) {
            ok &= fabsf(row[c] - w[(size_t)r * cols + c]) <= m8.s[r] * 0.5f * (1.0f + 1e-5f);
            ext &= q[c] != -128;
        }
    }
    T_CHECK(ok, "int8: every element within s/2 of its float");
    T_CHECK(ext, "int8: codes in -127..127");
    T_CHECK(m8.s[5] == 0.0f && ((const int8_t *)m8.w)[5 * cols] == 0, "int8: zero row has s = 0");
    /* relative errors on a pure Gaussian matrix (no outliers) */
    float *wg = malloc((size_t)rows * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        wg[i] = grnd() * 0.02f;
    qmat   g8, g4;
    double ew, ey;
    T_CHECK(qmat_quantize(&g8, Q_I8, wg, rows, cols) == K3_OK, "int8 quantize gaussian");
    rel_errors(&g8, wg, &ew, &ey);
    T_CHECK(ew < 0.01 && ey < 0.01, "int8: relative error of W %.5f and of W x %.5f < 1%%", ew, ey);

    /* ---- int4 ---- */
    qmat m4;
    T_CHECK(qmat_quantize(&m4, Q_I4, w, rows, cols) == K3_OK, "int4 quantize");
    int ng = (cols + 63) / 64, better = 1, strict = 0;
    for (int r = 0; r < rows; r++) {
        qmat_dequant_row(&m4, r, row);
        for (int g = 0; g < ng; g++) {
            int    c0 = g * 64, len = cols - c0 < 64 ? cols - c0 : 64;
            double e = 0;
            for (int c = c0; c < c0 + len; c++)
                e += ((double)row[c] - (double)w[(size_t)r * cols + c]) *
                     ((double)row[c] - (double)w[(size_t)r * cols + c]);
            double p7 = plain7_err(w + (size_t)r * cols + c0, len);
            better &= e <= p7 * (1.0 + 1e-5) + 1e-20;
            strict += e < p7 * 0.999;
        }
    }
    T_CHECK(better, "int4: every group's error <= plain maxabs/7");
    T_CHECK(strict > rows * ng / 4, "int4: the scale search improves on maxabs/7 in many groups (%d of %d)",
            strict, rows * ng);
    T_CHECK(qmat_quantize(&g4, Q_I4, wg, rows, cols) == K3_OK, "int4 quantize gaussian");
    rel_errors(&g4, wg, &ew, &ey);
    T_CHECK(ew < 0.12 && ey < 0.12, "int4: relative error of W %.4f and of W x %.4f < 12%%", ew, ey);
    T_CHECK(((const uint8_t *)m4.w)[5 * ((cols + 1) / 2)] == 0x88 && m4.s[5 * ng] == 0.0f,
            "int4: zero group is nibble 8 with s = 0");

    /* known values */
    {
        const float x[5] = {1.0f, -2.0f, 0.5f, 0.0f, -0.25f};
        qmat        a, b;
        T_CHECK(qmat_quantize(&a, Q_I8, x, 1, 5) == K3_OK, "int8 known row");
        const int8_t *q = a.w;
        /* s = 2/127, x * 63.5: 63.5 -> 64 (half away from zero), -127, 31.75 -> 32, 0, -15.875 -> -16 */
        T_CHECK(q[0] == 64 && q[1] == -127 && q[2] == 32 && q[3] == 0 && q[4] == -16 &&
                    a.s[0] == 2.0f / 127.0f,
                "int8 known codes 64 -127 32 0 -16 (got %d %d %d %d %d)", q[0], q[1], q[2], q[3], q[4]);
        T_CHECK(qmat_quantize(&b, Q_I4, x, 1, 5) == K3_OK, "int4 known row");
        float d[5];
        qmat_dequant_row(&b, 0, d);
        /* -2 is the extreme and negative: D = 8 puts it exactly on -8 with step 0.25, and then
         * 1, 0.5, 0, -0.25 are exact too: zero error, the unique best candidate */
        T_CHECK(b.s[0] == 0.25f && !memcmp(d, x, sizeof x), "int4 known row exact with s = 0.25 (s = %g)",
                (double)b.s[0]);
        T_CHECK((((const uint8_t *)b.w)[2] >> 4) == 8, "int4 odd-width pad nibble is 8");
        qmat_free(&a);
        qmat_free(&b);
        T_CHECK(a.own == NULL && a.w == NULL, "qmat_free zeroes the matrix");
        qmat_free(NULL);
    }

    /* the row maximum |x| (the int8 scale's amax) wherever it lies: in a block of eight, in the
     * tail after the last full block, first or last, negative; a NaN beside it is passed over */
    {
        int   all = 1;
        float x[70];
        for (int n = 1; n <= 70; n++)
            for (int p = 0; p < n; p++) {
                for (int c = 0; c < n; c++)
                    x[c] = 0.01f * (float)(c % 5) - 0.02f;
                x[p] = -3.0f;
                if (n > 1)
                    x[(p + 1) % n] = NAN;
                int8_t q[70];
                float  s = -1.0f;
                q_quantize_row_i8(x, n, q, &s);
                all &= s == 3.0f / 127.0f && q[p] == -127;
            }
        T_CHECK(all, "int8 row scale: max |x| found at every position of rows of 1 to 70, NaNs passed over");
    }

    /* determinism: thread counts, f32 vs bf16 input on bf16-representable values */
    {
        uint16_t *wb = malloc((size_t)rows * cols * 2);
        float    *wr = malloc((size_t)rows * cols * sizeof(float));
        for (size_t i = 0; i < (size_t)rows * cols; i++) {
            wb[i] = k3_f32_to_bf16(w[i]);
            wr[i] = k3_bf16_to_f32(wb[i]);
        }
        for (int type = Q_F32; type <= Q_I4; type++) {
            qmat a, b, c;
            omp_set_num_threads(1);
            qmat_quantize(&a, type, wr, rows, cols);
            omp_set_num_threads(2);
            qmat_quantize(&b, type, wr, rows, cols);
            qmat_quantize_bf16(&c, type, wb, rows, cols);
            size_t n = q_wbytes(type, rows, cols), ns = q_sbytes(type, rows, cols);
            T_CHECK(!memcmp(a.w, b.w, n) && !memcmp(a.w, c.w, n) &&
                        (!ns || (!memcmp(a.s, b.s, ns) && !memcmp(a.s, c.s, ns))),
                    "type %d: same bytes at 1 and 2 threads and from bf16", type);
            qmat_free(&a), qmat_free(&b), qmat_free(&c);
        }
        free(wb);
        free(wr);
    }

    /* bad input */
    {
        qmat a;
        w[7 * cols + 3] = NAN;
        T_CHECK(qmat_quantize(&a, Q_I4, w, rows, cols) == K3_ERR_NUMERIC && a.own == NULL,
                "NaN weight: K3_ERR_NUMERIC, nothing owned");
        T_CHECK(strstr(k3_errmsg(), "[7][3]") != NULL, "message names row and column (%s)", k3_errmsg());
        w[7 * cols + 3] = INFINITY;
        T_CHECK(qmat_quantize(&a, Q_I8, w, rows, cols) == K3_ERR_NUMERIC, "inf weight rejected");
        T_CHECK(qmat_quantize(&a, Q_MXFP4, w, rows, cols) == K3_ERR_ARG, "MXFP4 is not a target (%s)",
                k3_errmsg());
        T_CHECK(qmat_quantize(&a, Q_I8, w, 0, cols) == K3_ERR_ARG, "empty shape rejected");
    }
    qmat_free(&m8);
    qmat_free(&m4);
    qmat_free(&g8);
    qmat_free(&g4);
    free(wg);
    free(row);
    free(w);
    return t_done();
}

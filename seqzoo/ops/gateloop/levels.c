/* The per-level passes of GateLoop's blocked softmax form on CPU (levels_native.py states the math):

   At the level of half-blocks of h tokens, block j (tokens base = 2hj .. base + 2h - 1, midpoint mid = base + h)
   lets the queries τ of its second half meet the keys σ of its first half through

       q_j[τ] = q̂_τ ⊙ Π_{mid<=i<=τ} a_i,      k_j[σ] = k̂_σ ⊙ Π_{σ<i<mid} a_i      (a = e^λ <= 1 per dimension d)

   Both factors are running products from the midpoint outwards, kept in float64 (h up to thousands of tokens:
   a float32 product would gather h roundings), and set to 0 once they fall below `flush` (the threshold of the
   PyTorch path: no product of two kept factors is subnormal, where CPU arithmetic is ~100x slower); once 0 a
   product stays 0, as the true one only shrinks. The fused attention kernel (PyTorch's) then gives each level's
   output o_j and log-sum-exp l_j, and `merge` folds them into the running output y and log-sum-exp l:

       l' = log(e^l + e^{l_j}),   y' = e^{l - l'} y + e^{l_j - l'} o_j.

   Backward: `scaled_dy` gives the level's share of the output gradient, dy_j = e^{l_j - L} dy (L the final
   log-sum-exp), and `grads` adds the kernel's dq, dk (times the same factors) into dq̂, dk̂ and its dv into dv.
   Layouts: q̂, k̂, dq̂, dk̂ (N, P, RK) contiguous; a (N, P, K) float64; y (N, P, W), dv (N, P, V) and dy
   (N, P, ldy) contiguous; l, L (N, P);
   the level tensors (q_j, k_j, o_j, dy_j, the kernel's dq, dk, dv: (N, nb, h, W), l_j: (N, nb, h)) come with
   their strides over (N, nb, h) (the kernel returns transposed views), their last axis contiguous. Every
   function returns 0, or -1 when it could not allocate its buffers (then it wrote nothing). Columns from RK
   (from V for values) to W are the kernel's zero padding: written as 0 and never read.
*/

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* a running product of the factors one token further, flushed below `flush` (0 stays 0) */
static inline void advance(double *restrict prod, const double *restrict a, int64_t K, double flush) {
    for (int64_t d = 0; d < K; d++) {
        const double p = prod[d] * a[d];
        prod[d] = p < flush ? 0.0 : p;
    }
}

static inline void ones(double *restrict prod, int64_t K) {
    for (int64_t d = 0; d < K; d++) prod[d] = 1.0;
}

#define DEFINE_LEVELS(T, SFX, EXP, LOG1P, FABS)                                                                 \
    /* out[r·K + d] = in[r·K + d]·prod[d] for the R parts, then zeros up to W */                               \
    static inline void scaled_row_##SFX(T *restrict out, const T *restrict in, const double *restrict prod,     \
                                        int64_t R, int64_t K, int64_t W) {                                      \
        for (int64_t r = 0; r < R; r++)                                                                         \
            for (int64_t d = 0; d < K; d++) out[r * K + d] = in[r * K + d] * (T)prod[d];                        \
        for (int64_t c = R * K; c < W; c++) out[c] = 0;                                                         \
    }                                                                                                           \
    /* out[r·K + d] += g[r·K + d]·prod[d] */                                                                    \
    static inline void add_scaled_row_##SFX(T *restrict out, const T *restrict g, const double *restrict prod,  \
                                            int64_t R, int64_t K) {                                             \
        for (int64_t r = 0; r < R; r++)                                                                         \
            for (int64_t d = 0; d < K; d++) out[r * K + d] += g[r * K + d] * (T)prod[d];                        \
    }                                                                                                           \
                                                                                                                \
    /* q_j, k_j of every block of one level (written whole, padding included) */                               \
    int gateloop_level_operands_##SFX(int64_t N, int64_t P, int64_t h, int64_t R, int64_t K, int64_t W,         \
                                      const T *qh, const T *kh, const double *a, double flush, T *qj, T *kj) {  \
        const int64_t RK = R * K, nb = P / (2 * h);                                                             \
        double *prod = malloc((size_t)K * sizeof(double));                                                     \
        if (!prod) return -1;                                                                                   \
        for (int64_t n = 0; n < N; n++)                                                                         \
            for (int64_t j = 0; j < nb; j++) {                                                                  \
                const int64_t base = n * P + 2 * h * j, mid = base + h;                                         \
                T *qout = qj + (n * nb + j) * h * W, *kout = kj + (n * nb + j) * h * W;                        \
                ones(prod, K);                                                                                  \
                for (int64_t t = 0; t < h; t++) { /* rows: the product includes a_τ */                         \
                    advance(prod, a + (mid + t) * K, K, flush);                                                 \
                    scaled_row_##SFX(qout + t * W, qh + (mid + t) * RK, prod, R, K, W);                         \
                }                                                                                               \
                ones(prod, K);                                                                                  \
                for (int64_t t = h - 1; t >= 0; t--) { /* columns, from the midpoint down: a_σ excluded */     \
                    scaled_row_##SFX(kout + t * W, kh + (base + t) * RK, prod, R, K, W);                        \
                    advance(prod, a + (base + t) * K, K, flush);                                                \
                }                                                                                               \
            }                                                                                                   \
        free(prod);                                                                                             \
        return 0;                                                                                               \
    }                                                                                                           \
                                                                                                                \
    /* y, l of the second halves merged in place with the level's o_j, l_j (the first V columns of y):         \
       with e = e^{-|l - l_j|} <= 1, l' = max + log1p(e) and the weights 1/(1+e), e/(1+e) */                   \
    int gateloop_level_merge_##SFX(int64_t N, int64_t P, int64_t h, int64_t W, int64_t V, T *y, T *l,           \
                                   const T *o, int64_t o0, int64_t o1, int64_t o2, const T *lj, int64_t l0,     \
                                   int64_t l1, int64_t l2) {                                                    \
        const int64_t nb = P / (2 * h);                                                                         \
        for (int64_t n = 0; n < N; n++)                                                                         \
            for (int64_t j = 0; j < nb; j++)                                                                    \
                for (int64_t t = 0; t < h; t++) {                                                               \
                    const int64_t tau = n * P + 2 * h * j + h + t;                                              \
                    const T a = l[tau], b = lj[n * l0 + j * l1 + t * l2];                                       \
                    const T e = EXP(-FABS(a - b)), inv = 1 / (1 + e);                                           \
                    const T wa = a >= b ? inv : e * inv, wb = a >= b ? e * inv : inv;                           \
                    T *restrict yt = y + tau * W;                                                               \
                    const T *restrict ot = o + n * o0 + j * o1 + t * o2;                                        \
                    for (int64_t c = 0; c < V; c++) yt[c] = wa * yt[c] + wb * ot[c];                            \
                    l[tau] = (a >= b ? a : b) + LOG1P(e);                                                       \
                }                                                                                               \
        return 0;                                                                                               \
    }                                                                                                           \
                                                                                                                \
    /* dy_j (N, nb, h, W) contiguous, padding written as 0: e^{l_j - L} times dy's second halves */             \
    int gateloop_level_dy_##SFX(int64_t N, int64_t P, int64_t h, int64_t W, int64_t V, const T *dy,             \
                                int64_t ldy, const T *L, const T *lj, int64_t l0, int64_t l1, int64_t l2,       \
                                T *dyj) {                                                                       \
        const int64_t nb = P / (2 * h);                                                                         \
        for (int64_t n = 0; n < N; n++)                                                                         \
            for (int64_t j = 0; j < nb; j++)                                                                    \
                for (int64_t t = 0; t < h; t++) {                                                               \
                    const int64_t tau = n * P + 2 * h * j + h + t;                                              \
                    const T w = EXP(lj[n * l0 + j * l1 + t * l2] - L[tau]);                                     \
                    const T *restrict in = dy + tau * ldy;                                                      \
                    T *restrict out = dyj + ((n * nb + j) * h + t) * W;                                         \
                    for (int64_t c = 0; c < V; c++) out[c] = w * in[c];                                         \
                    for (int64_t c = V; c < W; c++) out[c] = 0;                                                 \
                }                                                                                               \
        return 0;                                                                                               \
    }                                                                                                           \
                                                                                                                \
    /* dq̂ (second halves) += dq ⊙ row factors, dk̂ (first halves) += dk ⊙ column factors, dv (first halves) \
       += dv_j; the factors recomputed as in `operands` */                                                      \
    int gateloop_level_grads_##SFX(int64_t N, int64_t P, int64_t h, int64_t R, int64_t K, int64_t V,            \
                                   const double *a, double flush, const T *dq, const T *dk, const T *dvj,       \
                                   int64_t s0, int64_t s1, int64_t s2, T *dqh, T *dkh, T *dv) {                \
        const int64_t RK = R * K, nb = P / (2 * h);                                                             \
        double *prod = malloc((size_t)K * sizeof(double));                                                     \
        if (!prod) return -1;                                                                                   \
        for (int64_t n = 0; n < N; n++)                                                                         \
            for (int64_t j = 0; j < nb; j++) {                                                                  \
                const int64_t base = n * P + 2 * h * j, mid = base + h, at0 = n * s0 + j * s1;                  \
                ones(prod, K);                                                                                  \
                for (int64_t t = 0; t < h; t++) {                                                               \
                    advance(prod, a + (mid + t) * K, K, flush);                                                 \
                    add_scaled_row_##SFX(dqh + (mid + t) * RK, dq + at0 + t * s2, prod, R, K);                  \
                }                                                                                               \
                ones(prod, K);                                                                                  \
                for (int64_t t = h - 1; t >= 0; t--) {                                                          \
                    add_scaled_row_##SFX(dkh + (base + t) * RK, dk + at0 + t * s2, prod, R, K);                 \
                    T *restrict vout = dv + (base + t) * V;                                                     \
                    const T *restrict gv = dvj + at0 + t * s2;                                                  \
                    for (int64_t c = 0; c < V; c++) vout[c] += gv[c];                                           \
                    advance(prod, a + (base + t) * K, K, flush);                                                \
                }                                                                                               \
            }                                                                                                   \
        free(prod);                                                                                             \
        return 0;                                                                                               \
    }

/* dλ_j = Σ_{τ>=j} Σ_r (q̂_τ dq̂_τ - k̂_τ dk̂_τ)[r] for λ that enters only through the level factors (the identity of
   scores._dlam_from), summed from the last token down in float64; -1 if no buffer */
#define DEFINE_DLAM(T, SFX)                                                                                     \
    int gateloop_level_dlam_##SFX(int64_t N, int64_t P, int64_t R, int64_t K, const T *qh, const T *kh,         \
                                  const T *dqh, const T *dkh, T *dlam) {                                        \
        const int64_t RK = R * K;                                                                               \
        double *acc = malloc((size_t)K * sizeof(double));                                                      \
        if (!acc) return -1;                                                                                    \
        for (int64_t n = 0; n < N; n++) {                                                                       \
            for (int64_t d = 0; d < K; d++) acc[d] = 0.0;                                                       \
            for (int64_t t = P - 1; t >= 0; t--) {                                                              \
                const int64_t i = (n * P + t) * RK;                                                             \
                const T *restrict q = qh + i, *restrict k = kh + i, *restrict dq = dqh + i, *restrict dk = dkh + i; \
                for (int64_t r = 0; r < R; r++)                                                                 \
                    for (int64_t d = 0; d < K; d++)                                                             \
                        acc[d] += (double)q[r * K + d] * dq[r * K + d] - (double)k[r * K + d] * dk[r * K + d];  \
                T *restrict out = dlam + (n * P + t) * K;                                                       \
                for (int64_t d = 0; d < K; d++) out[d] = (T)acc[d];                                             \
            }                                                                                                   \
        }                                                                                                       \
        free(acc);                                                                                              \
        return 0;                                                                                               \
    }

DEFINE_LEVELS(float, f32, expf, log1pf, fabsf)
DEFINE_LEVELS(double, f64, exp, log1p, fabs)
DEFINE_DLAM(float, f32)
DEFINE_DLAM(double, f64)

/* GateLoop's decayed scores of short blocks on CPU, forward and backward (scores_native.py states it):

       A_ts = Σ_{r,d} q_trd k_srd w_tsd,   w_tsd = Π_{s<j<=t} a_jd,   a = e^λ   (s <= t; `upper` above)

   Row by row: w_t,s = w_t-1,s * a_t, so moving to the next row multiplies the kept factors W[d][s] (s < t) by a_t
   and sets W[d][t] = 1: a running product of factors <= 1, no exponent of a sum, so no overflow for any decay
   strength and one multiply per (t, s, d) instead of an exponential. Keys and factors are kept transposed per
   block (kT[r][d][s], W[d][s], rows padded with zeros to whole vectors) and the loops run over vectors of LANES
   consecutive s (GCC / Clang vector extensions): a row's scores stay in a register while d and r run, where an
   auto-vectorised loop over s stored and reloaded them for every (d, r) (3x slower). A factor below THR is
   set to 0, and so is a product that falls below it, so no product reaches the subnormal range, where CPU
   arithmetic is ~100x slower (THR^2 must be a normal number; a dropped term is < THR relative to the diagonal's).
   The factors a come in (computed and flushed by the caller, with `flush` the threshold THR); the backward
   recomputes w the same way and writes dq, dk; dλ is left to the caller (it follows from dq and dk). q, k are
   contiguous (N, P, R, K), a (N, P, K), A and dA (N, P, P).
*/

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 8

/* s = 0..t rounded up to whole vectors */
static inline int64_t span(int64_t t) { return (t + LANES) / LANES * LANES; }

#define DEFINE_SCORES(T, SFX, IT)                                                             \
    typedef T vec_##SFX __attribute__((vector_size(LANES * sizeof(T))));                                    \
    typedef IT ivec_##SFX __attribute__((vector_size(LANES * sizeof(T))));                                  \
                                                                                                            \
    static T *buffer_##SFX(int64_t n) {                                                                     \
        void *p = NULL;                                                                                     \
        return posix_memalign(&p, 64, (size_t)n * sizeof(T)) == 0 ? p : NULL;                               \
    }                                                                                                       \
    /* kT[i][s] = k[s][i] zero-padded to Pp, W = 0 */                                                      \
    static void block_setup_##SFX(const T *restrict k, int64_t P, int64_t Pp, int64_t RK, int64_t K,        \
                                  T *restrict kT, T *restrict W) {                                          \
        for (int64_t i = 0; i < RK; i++) {                                                                  \
            for (int64_t s = 0; s < P; s++) kT[i * Pp + s] = k[s * RK + i];                                 \
            for (int64_t s = P; s < Pp; s++) kT[i * Pp + s] = 0;                                            \
        }                                                                                                   \
        memset(W, 0, (size_t)(Pp * K) * sizeof(T));                                                         \
    }                                                                                                       \
    /* row t's factors of the vector at c: w_t,s = w_t-1,s a_t for s < t (flushed below thr), w_t,t = 1 */  \
    static inline vec_##SFX next_factors_##SFX(vec_##SFX *wp, T at, vec_##SFX unit, vec_##SFX thr) {       \
        vec_##SFX w = *wp * at;                                                                             \
        w = (vec_##SFX)((ivec_##SFX)w & ~(ivec_##SFX)(w < thr)) + unit; /* NaN kept, not flushed */        \
        *wp = w;                                                                                            \
        return w;                                                                                           \
    }                                                                                                       \
    /* the vector with 1 in lane t - c (t in [c, c + LANES)), else 0 */                                     \
    static inline vec_##SFX unit_##SFX(int64_t t, int64_t c) {                                              \
        vec_##SFX u = {0};                                                                                  \
        if (t >= c && t < c + LANES) u[t - c] = 1;                                                          \
        return u;                                                                                           \
    }                                                                                                       \
                                                                                                            \
    /* 0, or -1 when its buffers cannot be allocated (nothing written) */                                   \
    int gateloop_scores_forward_##SFX(int64_t N, int64_t P, int64_t R, int64_t K, const T *q, const T *k,   \
                                      const T *a, double flush, double upper, T *A) {                       \
        const int64_t RK = R * K, Pp = span(P - 1);                                                         \
        const vec_##SFX thr = (vec_##SFX){0} + (T)flush;                                             \
        T *W = buffer_##SFX(Pp * K + Pp * RK);                                                              \
        if (!W) return -1;                                                                                  \
        T *kT = W + Pp * K;                                                                                 \
        for (int64_t n = 0; n < N; n++) {                                                                   \
            const T *qn = q + n * P * RK;                                                                   \
            T *An = A + n * P * P;                                                                          \
            const T *an = a + n * P * K;                                                                    \
            block_setup_##SFX(k + n * P * RK, P, Pp, RK, K, kT, W);                                         \
            for (int64_t t = 0; t < P; t++) {                                                               \
                const T *qt = qn + t * RK, *at = an + t * K;                                                \
                T *row = An + t * P;                                                                        \
                for (int64_t c = 0; c <= t; c += LANES) {                                                   \
                    const vec_##SFX unit = unit_##SFX(t, c);                                                \
                    vec_##SFX acc = {0};                                                                    \
                    for (int64_t d = 0; d < K; d++) {                                                       \
                        const vec_##SFX w = next_factors_##SFX((vec_##SFX *)(W + d * Pp + c), at[d], unit, thr); \
                        vec_##SFX x = qt[d] * *(const vec_##SFX *)(kT + d * Pp + c);                        \
                        for (int64_t r = 1; r < R; r++)                                                     \
                            x += qt[r * K + d] * *(const vec_##SFX *)(kT + (r * K + d) * Pp + c);           \
                        acc += w * x;                                                                       \
                    }                                                                                       \
                    for (int64_t l = 0; l < LANES && c + l <= t; l++) row[c + l] = acc[l];                  \
                }                                                                                           \
                for (int64_t s = t + 1; s < P; s++) row[s] = (T)upper;                                      \
            }                                                                                               \
        }                                                                                                   \
        free(W);                                                                                            \
        return 0;                                                                                           \
    }                                                                                                       \
                                                                                                            \
    /* dq_t = Σ_{s<=t} dA_ts w_ts ⊙ k_s,  dk_s = Σ_{t>=s} dA_ts w_ts ⊙ q_t (entries above the diagonal unread). \
       d runs outside the vectors here, so that dq's two sums per d stay in registers across them */        \
    int gateloop_scores_backward_##SFX(int64_t N, int64_t P, int64_t R, int64_t K, const T *q, const T *k,  \
                                       const T *a, double flush, const T *dA, T *dq, T *dk) {               \
        const int64_t RK = R * K, Pp = span(P - 1);                                                         \
        const vec_##SFX thr = (vec_##SFX){0} + (T)flush;                                                    \
        T *W = buffer_##SFX(Pp * K + 2 * Pp * RK + Pp);                                                     \
        if (!W) return -1;                                                                                  \
        T *kT = W + Pp * K, *dkT = kT + Pp * RK, *dArow = dkT + Pp * RK;                                    \
        for (int64_t n = 0; n < N; n++) {                                                                   \
            const T *qn = q + n * P * RK, *dAn = dA + n * P * P, *an = a + n * P * K;                      \
            T *dqn = dq + n * P * RK, *dkn = dk + n * P * RK;                                              \
            block_setup_##SFX(k + n * P * RK, P, Pp, RK, K, kT, W);                                         \
            memset(dkT, 0, (size_t)(Pp * RK) * sizeof(T));                                                  \
            for (int64_t t = 0; t < P; t++) {                                                               \
                const T *qt = qn + t * RK, *at = an + t * K;                                                \
                T *dqt = dqn + t * RK;                                                                      \
                memset(dArow, 0, (size_t)Pp * sizeof(T)); /* the row's dA up to t, zeros beyond */          \
                memcpy(dArow, dAn + t * P, (size_t)(t + 1) * sizeof(T));                                    \
                /* the unit lane is in the row's last vector, built once per row: a lane insert at a variable \
                   index goes through memory, and inside the loop over d it made the backward 1.5-1.7x slower */ \
                const vec_##SFX ulast = unit_##SFX(t, t / LANES * LANES), zero = {0};                       \
                for (int64_t d = 0; d < K; d++) {                                                           \
                    for (int64_t r0 = 0; r0 < R; r0 += 2) { /* two r at a time (R = 2: cos, sin) */        \
                        const int64_t i0 = r0 * K + d, i1 = (r0 + 1 < R ? r0 + 1 : r0) * K + d;              \
                        const T q0 = qt[i0], q1 = r0 + 1 < R ? qt[i1] : (T)0;                               \
                        vec_##SFX s0 = {0}, s1 = {0};                                                       \
                        for (int64_t c = 0; c <= t; c += LANES) {                                           \
                            vec_##SFX *wp = (vec_##SFX *)(W + d * Pp + c);                                  \
                            /* the factors advance once per row: with the first pair of r */                \
                            const vec_##SFX unit = c + LANES > t ? ulast : zero;                    \
                            const vec_##SFX w = r0 == 0 ? next_factors_##SFX(wp, at[d], unit, thr) : *wp; \
                            const vec_##SFX g = *(const vec_##SFX *)(dArow + c) * w;                        \
                            s0 += g * *(const vec_##SFX *)(kT + i0 * Pp + c);                               \
                            *(vec_##SFX *)(dkT + i0 * Pp + c) += g * q0;                                    \
                            if (r0 + 1 < R) {                                                               \
                                s1 += g * *(const vec_##SFX *)(kT + i1 * Pp + c);                           \
                                *(vec_##SFX *)(dkT + i1 * Pp + c) += g * q1;                                \
                            }                                                                               \
                        }                                                                                   \
                        T t0 = 0, t1 = 0;                                                                   \
                        for (int l = 0; l < LANES; l++) t0 += s0[l], t1 += s1[l];                           \
                        dqt[i0] = t0;                                                                       \
                        if (r0 + 1 < R) dqt[i1] = t1;                                                       \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
            for (int64_t s = 0; s < P; s++)                                                                 \
                for (int64_t i = 0; i < RK; i++) dkn[s * RK + i] = dkT[i * Pp + s];                         \
        }                                                                                                   \
        free(W);                                                                                            \
        return 0;                                                                                           \
    }

DEFINE_SCORES(float, f32, int32_t)
DEFINE_SCORES(double, f64, int64_t)

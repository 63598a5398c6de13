/* GateLoop's rotating frame on CPU, forward and backward in one pass each (rotation_native.py states it):

       q̂_t = [q_t cos Θ_t, q_t sin Θ_t],   k̂_t alike,   Θ_t = Σ_{j<=t} θ_j   (per dimension d)

   Forward: rot = [cos Θ, sin Θ] comes in (float64 angles, cast; common.py); q̂, k̂ are written as (M, T, 2, K).
   Backward: dq = dq̂_0 cos + dq̂_1 sin (k alike) and, with dΘ_t = cos·(q dq̂_1 + k dk̂_1) - sin·(q dq̂_0 + k dk̂_0),
   dθ_t = dΘ_T + Σ_{j>=t} dΘ_j (the final angle Θ_T = Σ_t θ_t is an output too), summed from the last token down in
   float64. PyTorch took about fifteen passes for the same (the products with [q, q], autograd's sums of the
   broadcast operands, the reverse cumulative sum through two flips). Layouts contiguous: q, k, dq, dk, dθ
   (M, T, K); rot, q̂, k̂, dq̂, dk̂ (M, T, 2, K); dΘ_T (M, K) or NULL.
*/

#include <stdint.h>
#include <stdlib.h>

#define DEFINE_ROTATION(T, SFX)                                                                                 \
    int gateloop_rotate_forward_##SFX(int64_t M, int64_t Tn, int64_t K, const T *q, const T *k, const T *rot,  \
                                      T *qh, T *kh) {                                                           \
        for (int64_t i = 0; i < M * Tn; i++) {                                                                  \
            const T *restrict c = rot + i * 2 * K, *restrict s = c + K;                                        \
            const T *restrict qi = q + i * K, *restrict ki = k + i * K;                                        \
            T *restrict qo = qh + i * 2 * K, *restrict ko = kh + i * 2 * K;                                    \
            for (int64_t d = 0; d < K; d++) {                                                                   \
                qo[d] = qi[d] * c[d];                                                                           \
                qo[K + d] = qi[d] * s[d];                                                                       \
                ko[d] = ki[d] * c[d];                                                                           \
                ko[K + d] = ki[d] * s[d];                                                                       \
            }                                                                                                   \
        }                                                                                                       \
        return 0;                                                                                               \
    }                                                                                                           \
                                                                                                                \
    /* 0, or -1 when its buffer cannot be allocated (nothing written) */                                        \
    int gateloop_rotate_backward_##SFX(int64_t M, int64_t Tn, int64_t K, const T *q, const T *k, const T *rot, \
                                       const T *dqh, const T *dkh, const T *dlast, T *dq, T *dk, T *dtheta) {  \
        double *acc = malloc((size_t)K * sizeof(double));                                                      \
        if (!acc) return -1;                                                                                    \
        for (int64_t m = 0; m < M; m++) {                                                                       \
            for (int64_t d = 0; d < K; d++) acc[d] = dlast ? (double)dlast[m * K + d] : 0.0;                    \
            for (int64_t t = Tn - 1; t >= 0; t--) {                                                             \
                const int64_t i = m * Tn + t;                                                                   \
                const T *restrict c = rot + i * 2 * K, *restrict s = c + K;                                    \
                const T *restrict qi = q + i * K, *restrict ki = k + i * K;                                    \
                const T *restrict gq = dqh + i * 2 * K, *restrict gk = dkh + i * 2 * K;                        \
                T *restrict dqi = dq + i * K, *restrict dki = dk + i * K, *restrict dti = dtheta + i * K;      \
                for (int64_t d = 0; d < K; d++) {                                                               \
                    dqi[d] = gq[d] * c[d] + gq[K + d] * s[d];                                                   \
                    dki[d] = gk[d] * c[d] + gk[K + d] * s[d];                                                   \
                    const T r0 = qi[d] * gq[d] + ki[d] * gk[d], r1 = qi[d] * gq[K + d] + ki[d] * gk[K + d];     \
                    acc[d] += (double)(c[d] * r1 - s[d] * r0);                                                  \
                    dti[d] = (T)acc[d];                                                                         \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
        free(acc);                                                                                              \
        return 0;                                                                                               \
    }

DEFINE_ROTATION(float, f32)
DEFINE_ROTATION(double, f64)

/* Depthwise causal conv1d on the (B, T, C) layout, forward and backward, one pass each (CPU).

   y[b, t, c] = bias[c] + sum_{i<K} w[i, c] * xin[b, t - K + 1 + i, c]

   where xin is the carried history (B, K-1, C) (zeros when hist is NULL) followed by x (B, T, C), and w is the
   weight transposed to (K, C) so that the channel loop reads it contiguously. Document masking: with cs, the count
   of document starts up to each position of xin (B, K-1+T; common.py: starts_cumsum), the tap reading position p
   for output t is dropped when a start lies in (p, t], i.e. when cs[t + K - 1] != cs[p + K - 1]. The PyTorch path (torch_conv.py)
   makes K passes over the (B, T, C) tensors forward and about 3K backward; here each output row is built while
   its K input rows sit in L1. Backward gathers gx rows (no zeroing pass, one write per element) and sums the
   weight and bias gradients in double (for float32 inputs too: more exact than a float32 running sum over B*T).
   Built by native.py through ops/native_build.py.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEFINE_CONV(T, SFX)                                                                                  \
    /* the input row at position s (history for s < 0), or NULL for a zero row */                          \
    static inline const T *row_##SFX(const T *xb, const T *hb, int64_t s, int64_t K, int64_t C) {           \
        if (s >= 0) return xb + s * C;                                                                      \
        return hb ? hb + (s + K - 1) * C : NULL;                                                            \
    }                                                                                                       \
                                                                                                            \
    void conv_forward_##SFX(int64_t B, int64_t L, int64_t C, int64_t K, const T *x, const T *hist,          \
                            const T *w, const T *bias, const int64_t *cs, T *y) {                           \
        for (int64_t b = 0; b < B; b++) {                                                                   \
            const T *xb = x + b * L * C;                                                                    \
            const T *hb = hist ? hist + b * (K - 1) * C : NULL;                                             \
            const int64_t *csb = cs ? cs + b * (K - 1 + L) : NULL;                                          \
            for (int64_t t = 0; t < L; t++) {                                                               \
                T *restrict yt = y + (b * L + t) * C;                                                       \
                const T *src = row_##SFX(xb, hb, t, K, C);                                                  \
                const T *restrict wl = w + (K - 1) * C; /* the current token's tap first */                 \
                if (bias)                                                                                   \
                    for (int64_t c = 0; c < C; c++) yt[c] = bias[c] + wl[c] * src[c];                       \
                else                                                                                        \
                    for (int64_t c = 0; c < C; c++) yt[c] = wl[c] * src[c];                                 \
                for (int64_t i = 0; i < K - 1; i++) {                                                       \
                    const T *restrict s = row_##SFX(xb, hb, t - K + 1 + i, K, C);                           \
                    if (!s || (csb && csb[t + K - 1] != csb[t + i])) continue;                              \
                    const T *restrict wi = w + i * C;                                                       \
                    for (int64_t c = 0; c < C; c++) yt[c] += wi[c] * s[c];                                  \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    }                                                                                                       \
                                                                                                            \
    /* gx (B, T, C); ghist (B, K-1, C) or NULL; gw (K, C) and gb (C) or NULL, written (not accumulated).    \
       Returns 0, or -1 when the double accumulators cannot be allocated. */                                \
    int conv_backward_##SFX(int64_t B, int64_t L, int64_t C, int64_t K, const T *gy, const T *x,            \
                            const T *hist, const T *w, const int64_t *cs, T *gx, T *ghist, T *gw, T *gb) {  \
        double *acc = calloc((size_t)((K + 1) * C), sizeof(double)); /* K weight rows, then the bias */     \
        if (!acc) return -1;                                                                                \
        double *restrict gbacc = acc + K * C;                                                               \
        for (int64_t b = 0; b < B; b++) {                                                                   \
            const T *xb = x + b * L * C;                                                                    \
            const T *hb = hist ? hist + b * (K - 1) * C : NULL;                                             \
            const T *gyb = gy + b * L * C;                                                                  \
            const int64_t *csb = cs ? cs + b * (K - 1 + L) : NULL;                                          \
            /* input position s = -(K-1) .. L-1: its gradient gathers gy rows s .. s+K-1 */                 \
            for (int64_t s = -(K - 1); s < L; s++) {                                                        \
                T *restrict d = s >= 0 ? gx + (b * L + s) * C : (ghist ? ghist + (b * (K - 1) + s + K - 1) * C : NULL); \
                const T *restrict in = row_##SFX(xb, hb, s, K, C);                                          \
                if (d) memset(d, 0, (size_t)C * sizeof(T));                                                 \
                for (int64_t i = 0; i < K; i++) {                                                           \
                    int64_t t = s + K - 1 - i; /* the output that reads input s through tap i */            \
                    if (t < 0 || t >= L) continue;                                                          \
                    if (csb && csb[t + K - 1] != csb[s + K - 1]) continue; /* a start in (s, t] */          \
                    const T *restrict g = gyb + t * C;                                                      \
                    const T *restrict wi = w + i * C;                                                       \
                    if (d)                                                                                  \
                        for (int64_t c = 0; c < C; c++) d[c] += wi[c] * g[c];                               \
                    if (in) {                                                                               \
                        double *restrict a = acc + i * C;                                                   \
                        for (int64_t c = 0; c < C; c++) a[c] += (double)g[c] * (double)in[c];               \
                    }                                                                                       \
                }                                                                                           \
                if (s >= 0)                                                                                 \
                    for (int64_t c = 0; c < C; c++) gbacc[c] += (double)gyb[s * C + c];                     \
            }                                                                                               \
        }                                                                                                   \
        if (gw)                                                                                             \
            for (int64_t j = 0; j < K * C; j++) gw[j] = (T)acc[j];                                          \
        if (gb)                                                                                             \
            for (int64_t c = 0; c < C; c++) gb[c] = (T)gbacc[c];                                            \
        free(acc);                                                                                          \
        return 0;                                                                                           \
    }

DEFINE_CONV(float, f32)
DEFINE_CONV(double, f64)

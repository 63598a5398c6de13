/* The NeurIPS mLSTM layer's output path on CPU, forward and backward in one pass each (output.py states it):

       hn = LayerNorm_V(h) per head (no affine),   u = (hn * w + skip * xc) * s

   h is read through strides (the chunkwise cell returns a (B, T, H, V) view of its (B, H, T, V) buffer), xc and s
   are (B, T, H*V) with row stride E = H*V, z's gradient is left to PyTorch (s = SiLU(z) comes in, ds goes out).
   The forward keeps each row's mean and 1/std; the backward recomputes hn from them and sums the gradients of w
   and skip over blocks of BLOCK rows, then across blocks in double. Built by output.py through ops/native_build.py.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* sums in 16 independent lanes: a single running sum is one serial chain of adds that the compiler may not
   reorder (no -ffast-math), 4x slower than the rest of a row's work */
#define LANES 16
/* the weight and skip gradients are summed over this many rows in the input type, then added in double */
#define BLOCK 64
#define DEFINE_OUT(T, SFX)                                                                                   \
    static inline double lane_sum_##SFX(const T *restrict x, int64_t n) {                                   \
        T p[LANES] = {0};                                                                                   \
        int64_t c = 0;                                                                                      \
        for (; c + LANES <= n; c += LANES)                                                                  \
            for (int l = 0; l < LANES; l++) p[l] += x[c + l];                                               \
        double total = 0.0;                                                                                 \
        for (int l = 0; l < LANES; l++) total += p[l];                                                      \
        for (; c < n; c++) total += x[c];                                                                   \
        return total;                                                                                       \
    }                                                                                                       \
    static inline double lane_dot_##SFX(const T *restrict x, const T *restrict y, int64_t n) {              \
        T p[LANES] = {0};                                                                                   \
        int64_t c = 0;                                                                                      \
        for (; c + LANES <= n; c += LANES)                                                                  \
            for (int l = 0; l < LANES; l++) p[l] += x[c + l] * y[c + l];                                    \
        double total = 0.0;                                                                                 \
        for (int l = 0; l < LANES; l++) total += p[l];                                                      \
        for (; c < n; c++) total += (double)x[c] * y[c];                                                    \
        return total;                                                                                       \
    }                                                                                                       \
                                                                                                            \
    /* 0, or -1 when its one-row buffer cannot be allocated (nothing written) */                            \
    int mlstm_out_forward_##SFX(int64_t B, int64_t L, int64_t H, int64_t V, const T *h, int64_t sb,        \
                                 int64_t st, int64_t sh, const T *xc, const T *s, const T *w,               \
                                 const T *skip, double eps, T *u, T *mean, T *rstd) {                       \
        const int64_t E = H * V;                                                                            \
        T *cen = malloc((size_t)V * sizeof(T)); /* one head's centred row */                                \
        if (!cen) return -1;                                                                                \
        for (int64_t b = 0; b < B; b++)                                                                     \
            for (int64_t t = 0; t < L; t++)                                                                 \
                for (int64_t j = 0; j < H; j++) {                                                           \
                    const T *restrict hr = h + b * sb + t * st + j * sh;                                    \
                    const int64_t o = (b * L + t) * E + j * V, r = (b * L + t) * H + j;                     \
                    const T m = (T)(lane_sum_##SFX(hr, V) / V);                                             \
                    for (int64_t c = 0; c < V; c++) cen[c] = hr[c] - m;                                     \
                    const T rs = (T)(1.0 / sqrt(lane_dot_##SFX(cen, cen, V) / V + eps));                    \
                    mean[r] = m;                                                                            \
                    rstd[r] = rs;                                                                           \
                    const T *restrict x = xc + o, *restrict g = s + o;                                      \
                    const T *restrict wj = w + j * V, *restrict kj = skip + j * V;                          \
                    T *restrict ur = u + o;                                                                 \
                    for (int64_t c = 0; c < V; c++) ur[c] = (cen[c] * rs * wj[c] + kj[c] * x[c]) * g[c];     \
                }                                                                                           \
        free(cen);                                                                                          \
        return 0;                                                                                           \
    }                                                                                                       \
                                                                                                            \
    /* dh (B, T, H, V) contiguous, dxc and ds (B, T, E); dw, dskip (E) written. 0, or -1 without memory. */ \
    int mlstm_out_backward_##SFX(int64_t B, int64_t L, int64_t H, int64_t V, const T *du, const T *h,       \
                                 int64_t sb, int64_t st, int64_t sh, const T *xc, const T *s, const T *w,   \
                                 const T *skip, const T *mean, const T *rstd, T *dh, T *dxc, T *ds, T *dw,  \
                                 T *dskip) {                                                                \
        const int64_t E = H * V;                                                                            \
        double *acc = calloc((size_t)(2 * E), sizeof(double)); /* dw, then dskip */                         \
        T *part = calloc((size_t)(2 * E), sizeof(T));          /* the current block's partial sums */        \
        T *tmp = malloc((size_t)(2 * V) * sizeof(T));          /* one head's hn and d(hn) */                 \
        if (!acc || !part || !tmp) {                                                                        \
            free(acc);                                                                                      \
            free(part);                                                                                     \
            free(tmp);                                                                                      \
            return -1;                                                                                      \
        }                                                                                                   \
        T *restrict hn = tmp, *restrict dhn = tmp + V;                                                      \
        int64_t rows = 0;                                                                                   \
        for (int64_t b = 0; b < B; b++)                                                                     \
            for (int64_t t = 0; t < L; t++) {                                                               \
                if (++rows % BLOCK == 0) /* the T-typed partial sums of BLOCK rows go into the doubles */   \
                    for (int64_t c = 0; c < 2 * E; c++) {                                                   \
                        acc[c] += part[c];                                                                  \
                        part[c] = 0;                                                                        \
                    }                                                                                       \
                for (int64_t j = 0; j < H; j++) {                                                           \
                    const T *restrict hr = h + b * sb + t * st + j * sh;                                    \
                    const int64_t o = (b * L + t) * E + j * V, r = (b * L + t) * H + j;                     \
                    const T m = mean[r], rs = rstd[r];                                                      \
                    const T *restrict g = du + o, *restrict x = xc + o, *restrict sg = s + o;               \
                    const T *restrict wj = w + j * V, *restrict kj = skip + j * V;                          \
                    T *restrict dx = dxc + o, *restrict dsr = ds + o;                                       \
                    T *restrict aw = part + j * V, *restrict ak = part + E + j * V;                         \
                    _Pragma("GCC ivdep") /* restrict in a block scope does not convince gcc: no aliasing */  \
                    for (int64_t c = 0; c < V; c++) {                                                       \
                        const T n = (hr[c] - m) * rs;                                                       \
                        const T d2 = g[c] * sg[c]; /* d(hn * w + skip * xc) */                              \
                        hn[c] = n;                                                                          \
                        dsr[c] = g[c] * (n * wj[c] + kj[c] * x[c]);                                         \
                        dx[c] = d2 * kj[c];                                                                 \
                        ak[c] += d2 * x[c];                                                                 \
                        aw[c] += d2 * n;                                                                    \
                        dhn[c] = d2 * wj[c];                                                                \
                    }                                                                                       \
                    const T a = (T)(lane_sum_##SFX(dhn, V) / V), bb = (T)(lane_dot_##SFX(dhn, hn, V) / V);  \
                    T *restrict dr = dh + ((b * L + t) * H + j) * V;                                        \
                    for (int64_t c = 0; c < V; c++) dr[c] = rs * (dhn[c] - a - hn[c] * bb);                 \
                }                                                                                           \
            }                                                                                               \
        for (int64_t c = 0; c < E; c++) {                                                                   \
            dw[c] = (T)(acc[c] + part[c]);                                                                  \
            dskip[c] = (T)(acc[E + c] + part[E + c]);                                                       \
        }                                                                                                   \
        free(acc);                                                                                          \
        free(part);                                                                                         \
        free(tmp);                                                                                          \
        return 0;                                                                                           \
    }

DEFINE_OUT(float, f32)
DEFINE_OUT(double, f64)

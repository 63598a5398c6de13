/* The mLSTM layer's headwise maps with blocks of 4 x 4 on CPU (headwise.py states them), forward and backward:

       y[4n + o] = sum_i W[n, o, i] x[4n + i]

   in the rotated form  y = sum_s D_s * rot_s(x),  rot_s(x)[4n + o] = x[4n + (o + s) % 4],  D_s[4n + o] =
   W[n, o, (o + s) % 4]: per block of 4 channels, four element-wise multiply-adds of vectors and three in-register
   rotations (a vector of 32 bytes holds two blocks of float32 or one of float64; E is a multiple of it), where a
   matmul with the tokens as rows makes rows of 4 (or block-diagonal groups of mostly zeros). The backward is the
   same form with E_s[4n + i] = W[n, (i + s) % 4, i]; the gradient of D_s is the element-wise sum over rows of
   gy * rot_s(x), summed in the input type over blocks of BLOCK rows, then added to the caller's doubles. Gate
   pre-activations sum_c Wg[j, c] y[c] are taken from y while it is in registers, and their gradient joins y's.
   x and gx have a row stride (an mLSTM layer's x_m is a view of every other half-row of the up-projection), y and
   gy the layout "lay" below. Built by headwise.py through ops/native_build.py.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 64
#define MAX_GATES 16 /* gate outputs computed beside the map (the mLSTM layer has 2 per head) */
#define VBYTES 32 /* one AVX register: two blocks of float32, one of float64 */

/* The layout of y (and of its gradient), lay = {T, sb, st, sh, K}: row r = b T + t, channel c = j K + k at
   b sb + t st + j sh + k; {T, T E, E, E, E} is (N, E) contiguous, {T, H T K, K, T K, K} the (B, H, T, K) that
   the chunkwise cell reads. K is a multiple of the vector width, so that no vector straddles two heads. */
static inline int64_t row_offset(const int64_t *lay, int64_t r) { return r / lay[0] * lay[1] + r % lay[0] * lay[2]; }
/* for each vector of LN channels: c its first channel, off its offset in the layout (no division per vector) */
#define FOR_VECTORS(lay, E, LN, c, off)                                      \
    for (int64_t j_ = 0, c = 0; j_ < (E) / (lay)[4]; j_++)                   \
        for (int64_t k_ = 0, off = j_ * (lay)[3]; k_ < (lay)[4]; k_ += (LN), c += (LN), off += (LN))

#define DEFINE_HEADWISE(T, SFX)                                                                              \
    enum { LANES_##SFX = VBYTES / sizeof(T) };                                                               \
    typedef T vec_##SFX __attribute__((vector_size(VBYTES)));                                                \
    static inline vec_##SFX load_##SFX(const T *p) {                                                         \
        vec_##SFX v;                                                                                        \
        memcpy(&v, p, sizeof v);                                                                            \
        return v;                                                                                           \
    }                                                                                                       \
    static inline void store_##SFX(T *p, vec_##SFX v) { memcpy(p, &v, sizeof v); }                         \
    /* rot_s within each block of 4 lanes (s a constant after inlining: one in-lane permute) */             \
    static inline vec_##SFX rot_##SFX(vec_##SFX v, int s) {                                                  \
        vec_##SFX r;                                                                                        \
        for (int l = 0; l < LANES_##SFX; l++) r[l] = v[(l & ~3) | ((l + s) & 3)];                           \
        return r;                                                                                           \
    }                                                                                                       \
    /* sum_s W_s * rot_s(v) over the lanes at W (the 4 rotated weight rows, E apart) */                    \
    static inline vec_##SFX rotated_##SFX(const T *restrict W, int64_t E, vec_##SFX v) {                    \
        return load_##SFX(W) * v + load_##SFX(W + E) * rot_##SFX(v, 1) + load_##SFX(W + 2 * E) * rot_##SFX(v, 2) + \
               load_##SFX(W + 3 * E) * rot_##SFX(v, 3);                                                     \
    }                                                                                                       \
    static inline T hsum_##SFX(vec_##SFX v) {                                                                \
        T total = 0;                                                                                        \
        for (int l = 0; l < LANES_##SFX; l++) total += v[l];                                                \
        return total;                                                                                       \
    }                                                                                                       \
                                                                                                            \
    /* rows r0 .. r0 + N - 1 of x (row stride sx) -> y in the layout of ``lay``; D (4, E). With G > 0 gate  \
       outputs, also gates[r, j] += sum_c Wg[j, c] y[r, c] (Wg (G, E), gates (N, G) from row r0).            \
       0, or -1 for G > MAX_GATES or a head width not a multiple of the vector width. */                    \
    int headwise4_forward_##SFX(int64_t r0, int64_t N, int64_t E, const T *x, int64_t sx, const T *D, T *y,  \
                                const int64_t *lay, int64_t G, const T *Wg, T *gates) {                     \
        if (G > MAX_GATES || lay[4] % LANES_##SFX) return -1;                                               \
        for (int64_t r = 0; r < N; r++) {                                                                   \
            const T *restrict xr = x + (r0 + r) * sx;                                                       \
            T *restrict yr = y + row_offset(lay, r0 + r);                                                   \
            vec_##SFX acc[MAX_GATES];                                                                       \
            for (int64_t j = 0; j < G; j++) acc[j] = (vec_##SFX){0};                                        \
            FOR_VECTORS(lay, E, LANES_##SFX, c, off) {                                                      \
                const vec_##SFX yv = rotated_##SFX(D + c, E, load_##SFX(xr + c));                           \
                store_##SFX(yr + off, yv);                                               \
                for (int64_t j = 0; j < G; j++) acc[j] += load_##SFX(Wg + j * E + c) * yv;                  \
            }                                                                                               \
            for (int64_t j = 0; j < G; j++) gates[r * G + j] += hsum_##SFX(acc[j]);                         \
        }                                                                                                   \
        return 0;                                                                                           \
    }                                                                                                       \
                                                                                                            \
    /* The backward of the forward above, with gy (N, E) the gradient of y from elsewhere and gg (N, G) that \
       of the gates (G = 0: none): the whole gradient of y is gy + gg Wg. Writes gx (N, E) contiguous, or    \
       adds to it when add_gx (NULL: skipped); adds D's gradient (the rotated form) to acc (4, E) in double; \
       Wg's, gg^T y, is a matmul left to the caller. 0, or -1 when its partial sums cannot be allocated or   \
       for a head width not a multiple of the vector width. */                                              \
    int headwise4_backward_##SFX(int64_t r0, int64_t N, int64_t E, const T *gy, const int64_t *lay,          \
                                 const T *x, int64_t sx, const T *Et, int64_t G, const T *Wg, const T *gg,   \
                                 T *gx, int add_gx, double *acc) {                                          \
        if (lay[4] % LANES_##SFX) return -1;                                                                \
        const int64_t P = 4 * E; /* the partial sums, acc's rows */                                         \
        T *part = calloc((size_t)P, sizeof(T));                                                             \
        if (!part) return -1;                                                                               \
        for (int64_t r = 0; r < N; r++) {                                                                   \
            if (r > 0 && r % BLOCK == 0) /* the block's partial sums go into the doubles */                 \
                for (int64_t c = 0; c < P; c++) {                                                           \
                    acc[c] += part[c];                                                                      \
                    part[c] = 0;                                                                            \
                }                                                                                           \
            const T *restrict xr = x + (r0 + r) * sx, *restrict ggr = gg + r * G;                           \
            const T *restrict gr = gy + row_offset(lay, r0 + r);                                            \
            T *restrict gxr = gx ? gx + r * E : NULL;                                                       \
            FOR_VECTORS(lay, E, LANES_##SFX, c, off) {                                                      \
                const vec_##SFX v = load_##SFX(xr + c);                                                     \
                vec_##SFX g = load_##SFX(gr + off);                                                         \
                for (int64_t j = 0; j < G; j++) g += ggr[j] * load_##SFX(Wg + j * E + c); /* y's whole gradient */ \
                T *restrict p = part + c;                                                                   \
                for (int s = 0; s < 4; s++) store_##SFX(p + s * E, load_##SFX(p + s * E) + g * rot_##SFX(v, s));\
                if (gxr) {                                                                                  \
                    const vec_##SFX d = rotated_##SFX(Et + c, E, g);                                        \
                    store_##SFX(gxr + c, add_gx ? load_##SFX(gxr + c) + d : d);                             \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
        for (int64_t c = 0; c < P; c++) acc[c] += part[c];                                                  \
        free(part);                                                                                         \
        return 0;                                                                                           \
    }

DEFINE_HEADWISE(float, f32)
DEFINE_HEADWISE(double, f64)

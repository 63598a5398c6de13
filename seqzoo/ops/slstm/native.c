/* The two sequential loops of the sLSTM (arXiv:2405.04517 §2.2) in C, for CPUs: seqzoo/ops/slstm/native.py
 * compiles this file on first use (cc -O3 -shared) and calls it through ctypes; seqzoo/ops/slstm/fused.py holds
 * the same loops in PyTorch, against which the tests compare it.
 *
 * Why: at batch 1 a step of the PyTorch loop is some 20 tiny ATen calls forward and 20 backward on (H, B, d)
 * tensors, and their dispatch, not their arithmetic, is the time. Here a step is one pass over the heads.
 *
 * Layouts (contiguous): gx, G (T, H, B, 4d) gate pre-activations in the order i, f, z, o; Rm (H, d, 4d);
 * Hs, Cs, Ns, Ms (T+1, H, B, d) with the initial state at index 0; fresh (T, B) uint8 or NULL: 1 where a packed
 * document starts, so that step reads the zero state (h R = 0, c = n = m = 0: a first step) instead of the carried
 * one, and the backward chain through (h, c, n, m) stops there (nothing flows to the previous document).
 *
 * Forward, per step t, head, batch row: g = gx_t + h_{t-1} R (stored in G, the backward's input), then
 *   log f = logsigmoid(f~);  first step from a zero state (n_{t-1} = 0): m_t = i~, f' = 0;
 *   else m_t = max(i~, log f + m_{t-1}), f' = exp(log f + m_{t-1} - m_t);  i' = exp(i~ - m_t)
 *   c_t = f' c_{t-1} + i' tanh(z~),  n_t = f' n_{t-1} + i',  h_t = sigmoid(o~) c_t / n_t
 *
 * Backward (R^T given as RmT (H, 4d, d)): the chain through (h, c, n, m) only. The local derivatives of every
 * step are computed beforehand for all t at once in PyTorch (fused.py: _SLSTMFunction.backward) and passed as the
 * 11 planes of D (11, T, H, B, d):
 *   P_c, P_n, C_f, N_f, Z_i, i', sel, S_f, Z_d, P_o, f'. Per step, with dh_r = dG_{t+1} R^T:
 *   dh = dHs_t + dh_r;  dc = dc + dh P_c;  dn = dn - dh P_n;  B = dc C_f + dn N_f;  A = dc Z_i + dn i'
 *   dm_t = dm - A - B;  dlogf = B + (1 - sel) dm_t
 *   dG_t = [A + sel dm_t, dlogf S_f, dc Z_d, dh P_o];  then dc *= f', dn *= f', dm = dlogf, dh_r = dG_t R^T.
 */
#include <math.h>
#include <stdint.h>

#define SLSTM_LOOPS(T_, SFX, EXP, LOG1P, TANH, ABS)                                                                     \
    void slstm_forward_##SFX(int64_t T, int64_t H, int64_t B, int64_t d, const T_ *gx, const T_ *Rm, T_ *G,      \
                             T_ *Hs, T_ *Cs, T_ *Ns, T_ *Ms, const uint8_t *fresh) {                             \
        const int64_t D4 = 4 * d, S = H * B * d;                                                                 \
        for (int64_t t = 0; t < T; t++) {                                                                        \
            for (int64_t hb = 0; hb < H * B; hb++) {                                                             \
                const T_ *R = Rm + (hb / B) * d * D4;                                                            \
                const T_ *x = gx + (t * H * B + hb) * D4;                                                        \
                T_ *g = G + (t * H * B + hb) * D4;                                                               \
                const int64_t s0 = t * S + hb * d, s1 = s0 + S;                                                  \
                const T_ *h = Hs + s0;                                                                           \
                const int start = fresh != 0 && fresh[t * B + hb % B];                                           \
                for (int64_t j = 0; j < D4; j++) g[j] = x[j];                                                    \
                for (int64_t i = 0; i < d && !start; i++) {                                                      \
                    const T_ hv = h[i];                                                                          \
                    const T_ *row = R + i * D4;                                                                  \
                    for (int64_t j = 0; j < D4; j++) g[j] += hv * row[j];                                        \
                }                                                                                                \
                for (int64_t k = 0; k < d; k++) {                                                                \
                    const T_ ig = g[k], fg = g[d + k], zg = g[2 * d + k], og = g[3 * d + k];                     \
                    const T_ logf = (fg < 0 ? fg : (T_)0) - LOG1P(EXP(-ABS(fg)));                              \
                    const T_ c = start ? 0 : Cs[s0 + k], n = start ? 0 : Ns[s0 + k], m = start ? 0 : Ms[s0 + k];\
                    T_ m_new, fp;                                                                                \
                    if (n == 0) {                                                                                \
                        m_new = ig;                                                                              \
                        fp = 0;                                                                                  \
                    } else {                                                                                     \
                        const T_ a = logf + m;                                                                   \
                        m_new = ig > a ? ig : a;                                                                 \
                        fp = EXP(a - m_new);                                                                     \
                    }                                                                                            \
                    const T_ ip = EXP(ig - m_new);                                                               \
                    const T_ c_new = fp * c + ip * TANH(zg), n_new = fp * n + ip;                                \
                    Cs[s1 + k] = c_new;                                                                          \
                    Ns[s1 + k] = n_new;                                                                          \
                    Ms[s1 + k] = m_new;                                                                          \
                    Hs[s1 + k] = c_new / n_new / (1 + EXP(-og));                                                 \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
                                                                                                                 \
    void slstm_backward_##SFX(int64_t T, int64_t H, int64_t B, int64_t d, const T_ *RmT, const T_ *D,            \
                              const T_ *dHs, T_ *dG, T_ *dh_r, T_ *dc, T_ *dn, T_ *dm, const uint8_t *fresh) {   \
        const int64_t D4 = 4 * d, S = H * B * d, N = T * S;                                                      \
        const T_ *P_c = D, *P_n = D + N, *C_f = D + 2 * N, *N_f = D + 3 * N, *Z_i = D + 4 * N;                   \
        const T_ *ip = D + 5 * N, *sel = D + 6 * N, *S_f = D + 7 * N, *Z_d = D + 8 * N, *P_o = D + 9 * N;       \
        const T_ *fp = D + 10 * N;                                                                               \
        for (int64_t t = T - 1; t >= 0; t--) {                                                                   \
            for (int64_t hb = 0; hb < H * B; hb++) {                                                             \
                const T_ *RT = RmT + (hb / B) * D4 * d;                                                          \
                T_ *g = dG + (t * H * B + hb) * D4;                                                              \
                const int64_t e0 = t * S + hb * d, s0 = hb * d;                                                  \
                for (int64_t k = 0; k < d; k++) {                                                                \
                    const int64_t e = e0 + k, s = s0 + k;                                                        \
                    const T_ dht = dHs[e] + dh_r[s];                                                             \
                    const T_ dct = dc[s] + dht * P_c[e];                                                         \
                    const T_ dnt = dn[s] - dht * P_n[e];                                                         \
                    const T_ Bf = dct * C_f[e] + dnt * N_f[e];                                                   \
                    const T_ A = dct * Z_i[e] + dnt * ip[e];                                                     \
                    const T_ dmt = dm[s] - A - Bf;                                                               \
                    const T_ dlf = Bf + (1 - sel[e]) * dmt;                                                      \
                    g[k] = A + sel[e] * dmt;                                                                     \
                    g[d + k] = dlf * S_f[e];                                                                     \
                    g[2 * d + k] = dct * Z_d[e];                                                                 \
                    g[3 * d + k] = dht * P_o[e];                                                                 \
                    dc[s] = dct * fp[e];                                                                         \
                    dn[s] = dnt * fp[e];                                                                         \
                    dm[s] = dlf;                                                                                 \
                }                                                                                                \
                T_ *dh = dh_r + s0; /* dG_t R^T as a sum of rows of R^T (H, 4d, d): contiguous, vectorisable */    \
                for (int64_t i = 0; i < d; i++) dh[i] = 0;                                                       \
                for (int64_t j = 0; j < D4; j++) {                                                               \
                    const T_ gj = g[j];                                                                          \
                    const T_ *row = RT + j * d;                                                                  \
                    for (int64_t i = 0; i < d; i++) dh[i] += gj * row[i];                                        \
                }                                                                                                \
                if (fresh != 0 && fresh[t * B + hb % B]) /* step t read zeros: no gradient to the state before */ \
                    for (int64_t k = 0; k < d; k++) dh[k] = dc[s0 + k] = dn[s0 + k] = dm[s0 + k] = 0;              \
            }                                                                                                    \
        }                                                                                                        \
    }

SLSTM_LOOPS(float, f32, expf, log1pf, tanhf, fabsf)
SLSTM_LOOPS(double, f64, exp, log1p, tanh, fabs)

"""The sLSTM step and its local derivatives as Triton device functions, shared by both Triton sLSTM paths.

``triton.py`` (R on chip, d <= 64) and ``triton_streamed.py`` (R streamed from memory, wider heads) differ only in
how they form g_t = wx_t + h_{t-1} R and dh_{t-1} = dG_t R^T; the pointwise step (arXiv:2405.04517 §2.2, as
``naive.py``) and its backward are these functions, so the two paths cannot drift apart::

    m_t = max(i, logsigmoid(f) + m_{t-1})       (m_t = i where n_{t-1} == 0: the first step)
    i' = exp(i - m_t),  f' = exp(logsigmoid(f) + m_{t-1} - m_t)
    c_t = f' c_{t-1} + i' tanh(z),  n_t = f' n_{t-1} + i',  h_t = sigmoid(o) c_t / n_t
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def logsigmoid(x):
    """log(sigmoid(x)) = min(x, 0) - log(1 + e^{-|x|}), never exp of a large positive number."""
    return tl.minimum(x, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def tanh(x):
    """tanh through e^{-2|x|} (in (0, 1], no overflow) and the sign of x."""
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def load_planes(ptr, plane, st, ok):
    """Four tiles at ``st`` of planes ``plane`` apart (h, c, n, m or their gradients), fp32."""
    x0 = tl.load(ptr + st, mask=ok, other=0.0).to(tl.float32)
    x1 = tl.load(ptr + plane + st, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(ptr + 2 * plane + st, mask=ok, other=0.0).to(tl.float32)
    x3 = tl.load(ptr + 3 * plane + st, mask=ok, other=0.0).to(tl.float32)
    return x0, x1, x2, x3


@triton.jit
def store_planes(ptr, plane, st, ok, x0, x1, x2, x3):
    tl.store(ptr + st, x0, mask=ok)
    tl.store(ptr + plane + st, x1, mask=ok)
    tl.store(ptr + 2 * plane + st, x2, mask=ok)
    tl.store(ptr + 3 * plane + st, x3, mask=ok)


@triton.jit
def cell_step(ig, fg, zg, og, c, n, m):
    """One step from the pre-activations (i, f, z, o) and the state entering it -> (h, c, n, m) after it (fp32).
    Padded lanes read zeros: a first step from a zero state (n = 1, h = 0), never NaN."""
    logf = logsigmoid(fg)
    first = n == 0.0
    m_new = tl.where(first, ig, tl.maximum(ig, logf + m))
    ip = tl.exp(ig - m_new)
    # f' = 0 on a first step (it multiplies the zero state); logf + m - m_new <= 0 otherwise, so no overflow
    fp = tl.where(first, 0.0, tl.exp(tl.where(first, 0.0, logf + m - m_new)))
    c = fp * c + ip * tanh(zg)
    n = fp * n + ip
    h = sigmoid(og) * c / n
    return h, c, n, m_new


@triton.jit
def cell_grads(ig, fg, zg, og, c_prev, n_prev, m_prev, c_t, n_t, m_t, dht, dc, dn, dm, ok):
    """Backward of ``cell_step`` (the local derivatives of ``fused.py: _SLSTMFunction.backward``): from the step's
    pre-activations, the state it read (``*_prev``) and wrote (``*_t``), the gradient ``dht`` of h_t (output plus
    later steps) and ``dc, dn, dm`` of c_t, n_t, m_t -> the gradients of (i, f, z, o) (zero outside ``ok``) and of
    c_{t-1}, n_{t-1}, m_{t-1}. The path through h_{t-1} (dG R^T) is the caller's."""
    first = n_prev == 0.0
    logf = logsigmoid(fg)
    sel = tl.where(first | (ig >= logf + m_prev), 1.0, 0.0)  # m_t was i~ (else logf + m_{t-1})
    ip = tl.exp(ig - m_t)
    fp = tl.where(first, 0.0, tl.exp(tl.where(first, 0.0, logf + m_prev - m_t)))
    zt = tanh(zg)
    so = sigmoid(og)
    q = c_t / n_t
    dct = dc + dht * so / n_t
    dnt = dn - dht * so * q / n_t
    Bf = (dct * c_prev + dnt * n_prev) * fp
    A = (dct * zt + dnt) * ip
    dmt = dm - A - Bf
    dlf = Bf + (1.0 - sel) * dmt
    dgi = tl.where(ok, A + sel * dmt, 0.0)
    dgf = tl.where(ok, dlf * sigmoid(-fg), 0.0)
    dgz = tl.where(ok, dct * ip * (1.0 - zt * zt), 0.0)
    dgo = tl.where(ok, dht * q * so * (1.0 - so), 0.0)
    return dgi, dgf, dgz, dgo, dct * fp, dnt * fp, dlf


@triton.jit
def saved_step(g_ptr, gate, s_ptr, plane, SP, ok, fresh, HAS_SEG: tl.constexpr):
    """What the backward of one step reads from the forward's records: the pre-activations (i, f, z, o) at ``g_ptr``
    (gates ``gate`` apart) and, from the saved states at ``s_ptr`` (the state entering the step; ``plane`` on to the
    one it wrote, ``SP`` between h, c, n, m), c, n, m read (zeros where ``fresh``: a document start) and written.
    Padded lanes read n_t = 1, never 0/0."""
    ig, fg, zg, og = load_planes(g_ptr, gate, 0, ok)
    c_prev = tl.load(s_ptr + SP, mask=ok, other=0.0)
    n_prev = tl.load(s_ptr + 2 * SP, mask=ok, other=0.0)
    m_prev = tl.load(s_ptr + 3 * SP, mask=ok, other=0.0)
    if HAS_SEG:
        c_prev = tl.where(fresh, 0.0, c_prev)
        n_prev = tl.where(fresh, 0.0, n_prev)
        m_prev = tl.where(fresh, 0.0, m_prev)
    c_t = tl.load(s_ptr + plane + SP, mask=ok, other=0.0)
    n_t = tl.load(s_ptr + plane + 2 * SP, mask=ok, other=1.0)
    m_t = tl.load(s_ptr + plane + 3 * SP, mask=ok, other=0.0)
    return ig, fg, zg, og, c_prev, n_prev, m_prev, c_t, n_t, m_t

"""The states entering each chunk of a chunkwise linear-attention op, with a hand-written backward.

Chunkwise forms (mLSTM, GateLoop) pass one matrix state between chunks of L tokens:

    Z_{c+1} = d_c ⊙ Z_c + U_c        c = 0 .. N-1,   Z_0 = the incoming state

where ``U_c`` is the chunk's own contribution (a matmul done for all chunks at once beforehand) and ``d_c`` its
decay, broadcast over the state (a scalar per head for mLSTM, one value per key dim for GateLoop). The chunk
queries then read every entering state ``Z_0 .. Z_{N-1}`` in one batched matmul; ``Z_N`` is the final state.

Why not autograd over a Python loop: the loop costs three ops per chunk forward and more backward, its N entering
states have to be stacked into one tensor (a copy), and unstacking their gradients is another. Here the forward
writes each state straight into the stacked output with one ``addcmul`` per chunk, and the backward is the reverse
recurrence, also one ``addcmul`` per chunk:

    G_N = dZ_N,   G_c = dZ_c + d_c ⊙ G_{c+1}        dU_c = G_{c+1},   dd_c = Σ_{broadcast dims} G_{c+1} ⊙ Z_c

``reference_chunk_states`` is the plain autograd loop it is tested against (tests/ops/test_chunk_states.py).
"""

from __future__ import annotations

import torch

from ..errors import InputError


def _check(decay: torch.Tensor, U: torch.Tensor, Z0: torch.Tensor) -> None:
    if U.dim() < 4:
        raise InputError(f"chunk_states: U must have shape (B, H, N, *state), got {tuple(U.shape)}")
    if Z0.shape != U.shape[:2] + U.shape[3:]:
        raise InputError(f"chunk_states: Z0 must have shape {tuple(U.shape[:2] + U.shape[3:])}, got {tuple(Z0.shape)}")
    fits = all(d in (1, u) for d, u in zip(decay.shape[3:], U.shape[3:]))
    if decay.dim() != U.dim() or decay.shape[:3] != U.shape[:3] or not fits:
        raise InputError(
            f"chunk_states: decay must have shape (B, H, N, ...) broadcastable to U {tuple(U.shape)}, "
            f"got {tuple(decay.shape)}"
        )


def reference_chunk_states(decay: torch.Tensor, U: torch.Tensor, Z0: torch.Tensor):
    """The obvious loop (autograd through everything): ``decay (B, H, N, ...)`` broadcastable to ``U (B, H, N, *S)``,
    ``Z0 (B, H, *S)`` -> entering states ``(B, H, N, *S)`` and the final state ``(B, H, *S)``."""
    _check(decay, U, Z0)
    Z, starts = Z0, []
    for d_c, U_c in zip(decay.unbind(2), U.unbind(2)):
        starts.append(Z)
        Z = d_c * Z + U_c
    return torch.stack(starts, 2), Z


# rows of the state-sized product per pass of _row_dots: a temporary of about 1 MB (float32), which stays in cache
_DOT_BLOCK_ELEMENTS = 1 << 18


def _row_dots(G: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
    """``G, Z (B, H, N, *S)`` -> ``Σ_S G ⊙ Z`` per (B, H, N), flat. In blocks of rows whose product fits in cache:
    as one batched (1 × S)·(S × 1) matmul this took 22 ms for 512 states of 128 × 128 on CPU, a single
    ``(G * Z).sum`` 24 ms (a state-sized temporary written and read back), the blocks 10-12 ms."""
    rows = G.shape[:3].numel()
    Gf, Zf = G.reshape(rows, -1), Z.reshape(rows, -1)
    out = G.new_empty(rows)
    step = max(1, _DOT_BLOCK_ELEMENTS // max(1, Gf.shape[1]))
    for r in range(0, rows, step):
        torch.sum(Gf[r : r + step] * Zf[r : r + step], -1, out=out[r : r + step])
    return out


class _ChunkStates(torch.autograd.Function):
    @staticmethod
    def forward(ctx, decay, U, Z0):
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None: no zero tensor is built
        N = U.shape[2]
        starts = torch.empty_like(U, memory_format=torch.contiguous_format)
        starts[:, :, 0] = Z0
        for c in range(N - 1):  # Z_{c+1} = d_c Z_c + U_c, written in place into the stacked output
            torch.addcmul(U[:, :, c], decay[:, :, c], starts[:, :, c], out=starts[:, :, c + 1])
        final = torch.addcmul(U[:, :, N - 1], decay[:, :, N - 1], starts[:, :, N - 1])
        ctx.save_for_backward(decay, starts)
        return starts, final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_starts, d_final):
        decay, starts = ctx.saved_tensors
        N = starts.shape[2]
        # G[:, :, c] holds G_{c+1} = dL/dZ_{c+1}, which is exactly dU_c: the buffer is returned as U's gradient
        G = torch.empty_like(starts)
        if d_final is None:
            G[:, :, N - 1] = 0
        else:
            G[:, :, N - 1] = d_final
        for c in range(N - 1, 0, -1):  # G_c = dZ_c + d_c G_{c+1}
            if d_starts is None:
                torch.mul(decay[:, :, c], G[:, :, c], out=G[:, :, c - 1])
            else:
                torch.addcmul(d_starts[:, :, c], decay[:, :, c], G[:, :, c], out=G[:, :, c - 1])
        d_decay = d_Z0 = None
        if ctx.needs_input_grad[0]:
            reduce = tuple(i for i in range(3, starts.dim()) if decay.shape[i] == 1)
            if len(reduce) == starts.dim() - 3:  # a scalar per chunk: one dot per state
                d_decay = _row_dots(G, starts).view(decay.shape)
            else:
                d_decay = (G * starts).sum(reduce, keepdim=True) if reduce else G * starts
        if ctx.needs_input_grad[2]:
            d_Z0 = decay[:, :, 0] * G[:, :, 0]
            if d_starts is not None:
                d_Z0 = d_Z0 + d_starts[:, :, 0]
        return d_decay, G, d_Z0


def chunk_states(decay: torch.Tensor, U: torch.Tensor, Z0: torch.Tensor):
    """``decay (B, H, N, ...)`` broadcastable to ``U (B, H, N, *S)``, ``Z0 (B, H, *S)`` (one dtype) -> the states
    entering the N chunks ``(B, H, N, *S)`` (contiguous, ready for one batched matmul) and the final state
    ``(B, H, *S)``. Differentiable in all three (module docstring)."""
    _check(decay, U, Z0)
    if not (decay.dtype == U.dtype == Z0.dtype):
        raise InputError(f"chunk_states: decay, U, Z0 must share a dtype, got {decay.dtype}, {U.dtype}, {Z0.dtype}")
    return _ChunkStates.apply(decay, U, Z0)

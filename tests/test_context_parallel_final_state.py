"""The state after a sequence split along time is gathered from the last rank only when the caller reads it
(``return_state`` / ``return_states``): training under context parallelism issues no all-gather of final states,
while inference still returns the one-process states on every rank. Gloo CPU ranks, 2 of them, one spawn."""

import dataclasses
import json
import os
from pathlib import Path

import torch
from cp_harness import all_gathers, hybrid_lm, run_ranks

from seqzoo.mixers import build_mixer
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, train

B, T = 2, 16
# every mixer that splits along time; the recurrences gather their final state from the last rank
MIXERS = {
    "gateloop": ("gateloop", {"d_model": 8, "n_heads": 2, "chunk_size": 3}),
    "mlstm": ("mlstm", {"d_model": 8, "n_heads": 2, "round_to": 8, "chunk_size": 3}),
    "mlstm_7b": ("mlstm", {"d_model": 8, "n_heads": 2, "variant": "7b", "chunk_size": 3}),
    "rglru": ("rglru", {"d_model": 8, "d_rnn": 8, "n_blocks": 2}),
    "attention": ("attention", {"d_model": 8, "n_heads": 2, "short_conv": 3}),
}
RECURRENT_LAYERS = 3  # in hybrid_lm


def _cfg(out, context_parallel):
    return TrainConfig(
        steps=2, batch_size=4, lr=3e-3, warmup_steps=0, log_every=1, eval_every=0, eval_samples=8,
        eval_batch_size=8, device="cpu", precision="fp32", progress=False, out_dir=str(out),
        context_parallel=context_parallel, distributed="ddp" if context_parallel > 1 else "none", seed=3,
    )  # fmt: skip


def _task():
    return build_task("mqar", vocab_size=64, num_pairs=4, seq_len=32)


def _tensors(state) -> list[torch.Tensor]:
    """The tensors of a mixer state (a tensor, a tuple or a dataclass of them, or None), in a fixed order."""
    if state is None:
        return []
    if isinstance(state, torch.Tensor):
        return [state]
    if dataclasses.is_dataclass(state):
        state = [getattr(state, f.name) for f in dataclasses.fields(state)]
    return [t for part in state for t in _tensors(part)]


def _final_state_gathers(gathers) -> int:
    return sum("from_last_rank" in g.callers for g in gathers)


def _ranked(rank: int, n: int, out: str) -> dict:
    import torch.distributed as dist

    group = dist.group.WORLD
    L = T // n
    result: dict = {"mixers": {}}
    for key, (name, kwargs) in MIXERS.items():
        torch.manual_seed(0)
        mixer = build_mixer(name, **kwargs).double()
        x = torch.randn(B, T, kwargs["d_model"], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        whole_y, whole_state = mixer(x)  # one process, on this rank alone
        block = x[:, rank * L : (rank + 1) * L]
        with all_gathers() as kept:
            y, state = mixer(block, context_parallel=group)
        with all_gathers() as skipped:
            lean_y, lean_state = mixer(block, context_parallel=group, return_state=False)
        result["mixers"][key] = {
            "y": (y, lean_y, whole_y[:, rank * L : (rank + 1) * L]),
            "state": (_tensors(state), _tensors(whole_state)),
            "lean_state": lean_state,
            "gathers": (_final_state_gathers(kept), _final_state_gathers(skipped)),
        }

    model = hybrid_lm().double()
    ids = torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(2))
    whole = model(ids)
    block = ids[:, rank * L : (rank + 1) * L]
    with all_gathers() as kept:
        split = model(block, context_parallel=group)
    with all_gathers() as skipped:
        lean = model(block, context_parallel=group, return_states=False)
    result["model"] = {
        "logits": (split.logits, lean.logits, whole.logits[:, rank * L : (rank + 1) * L]),
        "states": ([_tensors(s) for s in split.states], [_tensors(s) for s in whole.states]),
        "lean_states": lean.states,
        "gathers": (_final_state_gathers(kept), _final_state_gathers(skipped)),
    }

    os.environ.update(WORLD_SIZE=str(n), RANK=str(rank), LOCAL_RANK=str(rank))  # as torchrun sets them
    with all_gathers() as trained:
        train(hybrid_lm(), _task(), _cfg(Path(out), n))
    result["training"] = {"gathers": len(trained), "final_state_gathers": _final_state_gathers(trained)}
    return result


def _close(got, want, what):
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=lambda m: f"{what}: {m}")


def test_training_gathers_no_final_state_and_inference_returns_the_one_process_states(tmp_path):
    ranks = run_ranks(_ranked, 2, str(tmp_path / "split"))
    for r in ranks:
        for key, got in r["mixers"].items():
            y, lean_y, want_y = got["y"]
            _close(y, want_y, f"{key} y")
            _close(lean_y, want_y, f"{key} y without the state")
            for i, (s, want) in enumerate(zip(*got["state"], strict=True)):
                _close(s, want, f"{key} state[{i}]")
            assert got["lean_state"] is None, key
            kept, skipped = got["gathers"]
            assert (kept, skipped) == ((0, 0) if key == "attention" else (1, 0)), (key, kept, skipped)
        got = r["model"]
        for i, logits in enumerate(got["logits"][:2]):
            _close(logits, got["logits"][2], f"model logits ({'without' if i else 'with'} states)")
        for layer, (states, want) in enumerate(zip(*got["states"], strict=True)):
            for i, (s, w) in enumerate(zip(states, want, strict=True)):
                _close(s, w, f"layer {layer} state[{i}]")
        assert got["lean_states"] is None
        assert got["gathers"] == (RECURRENT_LAYERS, 0)
        # the incoming states and the attention keys are still gathered; the final states no longer are
        assert r["training"]["gathers"] > 0 and r["training"]["final_state_gathers"] == 0, r["training"]

    one = hybrid_lm()
    train(one, _task(), _cfg(tmp_path / "one", 1))
    losses = [(tmp_path / d / "metrics.jsonl").read_text() for d in ("one", "split")]
    want, got = ([r["loss"] for r in map(json.loads, text.splitlines()) if r["split"] == "train"] for text in losses)
    assert len(got) == len(want) == 2
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=0)


def test_without_a_group_return_states_false_only_drops_the_states():
    model = hybrid_lm().double()
    ids = torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(2))
    full, lean = model(ids), model(ids, return_states=False)
    assert lean.states is None and all(s is not None for s in full.states)
    _close(lean.logits, full.logits, "logits")
    for key, (name, kwargs) in MIXERS.items():
        mixer = build_mixer(name, **kwargs).double()
        x = torch.randn(B, T, kwargs["d_model"], dtype=torch.float64)
        (y, state), (lean_y, lean_state) = mixer(x), mixer(x, return_state=False)
        assert state is not None and lean_state is None, key
        _close(lean_y, y, f"{key} y")

"""The measurement scripts under tools/ still run against the library (they reach into private op internals, which
a refactor could move): each runs once at a tiny size and prints every row it promises."""

from helpers import run_tool


def _run(script: str, *args: str) -> str:
    proc = run_tool(script, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_gateloop_softmax_parts_prints_every_part():
    out = _run(
        "gateloop_softmax_parts.py", "--T", "256", "--batch", "1", "--d-model", "16", "--n-heads", "2", "--repeats", "1"
    )
    for row in (
        "attention: whole mixer",
        "gateloop_softmax: whole mixer",
        "attention: causal fused kernel (head 8), fwd",
        "part: projections and gates",
        "part: rotation",
        "part: diagonal blocks of 32",
        "part: levels and merges",
        "level kernels as run (width 16), bwd",
        "level kernels cut to width 8, fwd",
        "gateloop_softmax / attention (whole mixers)",
    ):
        assert row in out, (row, out)
    assert "level half-blocks 32, 64, 128" in out


def test_mlstm_layer_parts_prints_every_part():
    out = _run("mlstm_layer_parts.py", "--T", "64", "--tokens", "128", "--repeats", "1")
    for row in ("layer", "cell (chunkwise)", "q, k, v and gates", "up-projection", "conv + SiLU", "output path"):
        assert f"  {row} " in out, (row, out)


def test_orchid_filter_probe_reads_a_run_at_init_checkpoint_and_final(tmp_path):
    import json

    import torch

    from seqzoo.sweep.train_run import build

    config = {
        "seed": 3,
        "model": {
            "builder": "seqzoo.experiments.orchid_models:ar_model",
            "args": {"mixer": "orchid", "d_model": 16, "n_layers": 2},
        },
        "task": {"name": "associative_recall", "vocab_size": 10, "seq_len": 16},
        "train": {"steps": 5},
    }
    run = tmp_path / "runs" / "abc"
    (run / "train").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"config": config, "labels": {"model": "orchid", "seed": 3}}))
    model, _ = build(config)
    with torch.no_grad():  # the "trained" weights differ from the initial ones, so each --at reads its own file
        model.blocks[0].mixer.cond.freq_conv.bias.normal_(generator=torch.Generator().manual_seed(0))
    torch.save({"model": model.state_dict(), "step": 4}, run / "train" / "checkpoint.pt")
    rows = {}
    for at in ("init", "checkpoint"):
        out = _run("orchid_filter_probe.py", str(run), "--at", at, "--samples", "16")
        (rows[at],) = [line for line in out.splitlines() if line.startswith("| abc ")]
    assert "| model=orchid, seed=3 | 0 |" in rows["init"] and "| 4 |" in rows["checkpoint"]
    assert rows["init"].split("|")[5:] != rows["checkpoint"].split("|")[5:]
    proc = run_tool("orchid_filter_probe.py", str(run))
    assert proc.returncode != 0 and "no train/model" in proc.stderr
    model.save_pretrained(run / "train" / "model")
    out = _run("orchid_filter_probe.py", str(run), "--samples", "16")
    (final,) = [line for line in out.splitlines() if line.startswith("| abc ")]
    assert "| 5 |" in final and final.split("|")[5:] == rows["checkpoint"].split("|")[5:]

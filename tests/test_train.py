"""Training loop: learning, exact resume (also after a real kill), accumulation, optimiser groups, DDP/FSDP."""

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seqzoo import LanguageModel, ModelConfig
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, lr_factor, param_groups, train

TASK = {"vocab_size": 16, "num_pairs": 2, "seq_len": 16}


def small_model(seed=0, dropout=0.1):
    torch.manual_seed(seed)
    return LanguageModel(
        ModelConfig(
            vocab_size=16,
            d_model=32,
            n_layers=2,
            pattern=["attention"],
            dropout=dropout,
            mixer_kwargs={"attention": {"n_heads": 2}},
            mlp_ratio=2.0,
        )
    )


def cfg(out=None, **kw):
    base = dict(
        steps=30,
        batch_size=16,
        lr=3e-3,
        warmup_steps=5,
        eval_every=10,
        eval_samples=64,
        log_every=1,
        out_dir=str(out) if out else None,
        progress=False,
    )
    base.update(kw)
    return TrainConfig(**base)


def train_losses(path: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, path.read_text().splitlines()) if r["split"] == "train"]


def test_loss_goes_down_and_files_are_written(tmp_path):
    res = train(small_model(), build_task("mqar", **TASK), cfg(tmp_path, steps=60))
    losses = train_losses(tmp_path / "metrics.jsonl")
    assert len(losses) == 60 and sum(losses[-10:]) / 10 < sum(losses[:10]) / 10
    for name in (
        "train_config.json",
        "task.json",
        "model_config.json",
        "final.json",
        "checkpoint.pt",
        "model/config.json",
        "model/model.safetensors",
    ):
        assert (tmp_path / name).exists(), name
    assert 0.0 <= res["valid_accuracy"] <= 1.0 and res["step"] == 60


@pytest.mark.parametrize("preset", ["xlstm10-tiny", "xlstm71-tiny", "gateloop-tiny-heads", "griffin-tiny"])
def test_bf16_mixed_precision_trains_each_family(tmp_path, preset):
    """``precision="bf16"`` (what ``auto`` picks on a CUDA GPU) on CPU: every step's loss is finite and the loss
    falls. The xLSTM's q/k/v map failed its backward with bf16 / float32 operands on the first CUDA training run."""
    from seqzoo.models.presets import build_model

    torch.manual_seed(0)
    model = build_model(preset, vocab_size=16)
    res = train(model, build_task("mqar", **TASK), cfg(tmp_path, steps=40, precision="bf16", eval_every=0))
    losses = train_losses(tmp_path / "metrics.jsonl")
    assert len(losses) == 40 and all(map(math.isfinite, losses)) and math.isfinite(res["valid_loss"])
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5


def test_resume_gives_the_identical_loss_curve(tmp_path):
    task = build_task("mqar", **TASK)
    train(small_model(), task, cfg(tmp_path / "whole", ckpt_every=10))
    # first process stops after step 20 (as if killed right after the checkpoint); the second resumes
    train(small_model(), task, cfg(tmp_path / "split", ckpt_every=10, stop_after=20))
    assert len(train_losses(tmp_path / "split" / "metrics.jsonl")) == 20
    train(small_model(seed=123), task, cfg(tmp_path / "split", ckpt_every=10))  # weights come from the checkpoint
    assert train_losses(tmp_path / "split" / "metrics.jsonl") == train_losses(tmp_path / "whole" / "metrics.jsonl")


def _cli(out: Path, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "seqzoo",
        "train",
        "--model",
        "attention-tiny",
        "--task",
        "mqar",
        "--task-arg",
        "vocab_size=16",
        "--task-arg",
        "num_pairs=2",
        "--task-arg",
        "seq_len=16",
        "--model-arg",
        "d_model=32",
        "--model-arg",
        "dropout=0.1",
        "--steps",
        str(steps),
        "--batch-size",
        "16",
        "--ckpt-every",
        "5",
        "--eval-every",
        "0",
        "--set",
        "train.log_every=1",
        "--out",
        str(out),
        "--no-progress",
    ]


def test_killed_run_resumes_to_the_same_losses(tmp_path):
    steps = 60
    subprocess.run(_cli(tmp_path / "whole", steps), check=True, capture_output=True)
    proc = subprocess.Popen(_cli(tmp_path / "killed", steps), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before_kill = len(train_losses(tmp_path / "killed" / "metrics.jsonl"))
    assert done_before_kill < steps, "the run finished before it could be killed; make it longer"
    subprocess.run(_cli(tmp_path / "killed", steps), check=True, capture_output=True)
    assert train_losses(tmp_path / "killed" / "metrics.jsonl") == train_losses(tmp_path / "whole" / "metrics.jsonl")


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    task = build_task("mqar", **TASK)
    m1, m2 = small_model(), small_model()
    for m in (m1, m2):
        for mod in m.modules():
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
    train(m1, task, cfg(tmp_path / "b", steps=10))
    train(m2, task, cfg(tmp_path / "c", steps=10, grad_accum=4))
    la, lb = train_losses(tmp_path / "b" / "metrics.jsonl"), train_losses(tmp_path / "c" / "metrics.jsonl")
    assert max(abs(x - y) for x, y in zip(la, lb)) < 1e-5


def test_param_groups_follow_the_rules_and_the_mixers_overrides():
    m = small_model()
    m.blocks[0].mixer.optim_overrides = lambda: {
        "q_proj.weight": {"lr": 1e-4, "weight_decay": 0.0},
        "k_proj.weight": {"lr_scale": 0.5},
    }
    groups = param_groups(m, cfg(), m.optim_overrides())
    by_name = {n: g for g in groups for n in g["names"]}
    assert by_name["blocks.0.mixer.q_proj.weight"]["lr"] == 1e-4
    assert by_name["blocks.0.mixer.q_proj.weight"]["weight_decay"] == 0.0
    assert by_name["blocks.0.mixer.k_proj.weight"]["lr"] == pytest.approx(1.5e-3)
    assert by_name["blocks.1.mixer.q_proj.weight"]["weight_decay"] == 0.1
    assert by_name["embed.weight"]["weight_decay"] == 0.0
    assert by_name["blocks.0.norm1.weight"]["weight_decay"] == 0.0
    assert sum(len(g["params"]) for g in groups) == len({id(p) for p in m.parameters()})
    with pytest.raises(ValueError, match="unknown parameters"):
        param_groups(m, cfg(), {"nope.weight": {"lr": 1.0}})


def test_schedule_warms_up_then_decays_to_the_floor():
    c = TrainConfig(steps=100, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(0, c) == pytest.approx(0.1) and lr_factor(9, c) == pytest.approx(1.0)
    assert lr_factor(10, c) == pytest.approx(1.0)
    assert lr_factor(99, c) == pytest.approx(0.1, abs=1e-3)
    f = [lr_factor(s, c) for s in range(10, 100)]
    assert all(a >= b for a, b in itertools.pairwise(f))


@pytest.mark.parametrize(("steps", "warmup"), [(100, 10), (1000, 100), (7, 2), (50, 49)])
def test_onecycle_follows_torchs_onecycle_lr(steps, warmup):
    """The stateless one-cycle schedule equals ``torch.optim.lr_scheduler.OneCycleLR`` (rates of two groups with
    their own base rates, and Adam's beta1) at every step, as ``set_lr`` (called by the training loop) sets them."""
    from seqzoo.train.optim import set_lr

    c = TrainConfig(steps=steps, warmup_steps=warmup, schedule="onecycle", lr=2e-3)
    w = [torch.nn.Parameter(torch.zeros(1)) for _ in range(2)]
    ref = torch.optim.AdamW([{"params": [w[0]]}, {"params": [w[1]]}], lr=2e-3, betas=(0.9, 0.999))
    sched = torch.optim.lr_scheduler.OneCycleLR(ref, max_lr=[2e-3, 1e-3], total_steps=steps, pct_start=warmup / steps)
    ours = torch.optim.AdamW(
        [{"params": [w[0]], "base_lr": 2e-3}, {"params": [w[1]], "base_lr": 1e-3}], lr=2e-3, betas=(0.9, 0.999)
    )
    for step in range(steps):
        set_lr(ours, step, c)
        for g_ref, g in zip(ref.param_groups, ours.param_groups):
            assert g["lr"] == pytest.approx(g_ref["lr"], rel=1e-9, abs=1e-15), step
            assert g["betas"] == pytest.approx(g_ref["betas"], rel=1e-12), step
        ref.step()
        sched.step() if step < steps - 1 else None  # OneCycleLR refuses a step past total_steps
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(steps=10, warmup_steps=0, schedule="onecycle")


def test_bad_train_config_is_rejected():
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="grad_accum"):
        TrainConfig(batch_size=10, grad_accum=3)
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp8")
    with pytest.raises(ValueError, match="compile"):
        TrainConfig(compile="yes")
    with pytest.raises(ValueError, match="torchrun"):
        train(small_model(), build_task("mqar", **TASK), cfg(distributed="ddp"))


def test_compiled_training_follows_the_eager_losses_and_saves_plain_weights(tmp_path):
    """``compile=True`` runs the training forward through torch.compile (Inductor on CPU): the same losses as eager
    training to float tolerance, a checkpoint and exported model whose keys are the plain module's (no
    ``_orig_mod.`` prefix) that loads again."""
    task = build_task("mqar", **TASK)
    # no dropout: Inductor draws its own random numbers, so dropout masks would differ from eager ones
    eager = train(small_model(dropout=0.0), task, cfg(tmp_path / "eager", steps=6))
    compiled = train(small_model(dropout=0.0), task, cfg(tmp_path / "compiled", steps=6, compile=True))
    a, b = train_losses(tmp_path / "eager" / "metrics.jsonl"), train_losses(tmp_path / "compiled" / "metrics.jsonl")
    assert len(a) == len(b) == 6
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4, (a, b)
    assert abs(eager["valid_loss"] - compiled["valid_loss"]) < 1e-4
    ckpt = torch.load(tmp_path / "compiled" / "checkpoint.pt", weights_only=False)
    keys = set(ckpt["model"]) if "model" in ckpt else set()
    assert keys and not any("_orig_mod" in k for k in keys)
    assert LanguageModel.from_pretrained(tmp_path / "compiled" / "model") is not None


def _run_folder_without(out, setting: str):
    """A 4-step run in ``out`` whose train_config.json then loses ``setting`` (as if written before it existed)."""
    task = build_task("mqar", **TASK)
    train(small_model(), task, cfg(out, steps=4))
    path = out / "train_config.json"
    saved = json.loads(path.read_text())
    del saved[setting]
    path.write_text(json.dumps(saved))
    return task


def test_a_run_folder_from_before_the_compile_option_resumes(tmp_path):
    """``compile`` is an execution setting: a folder whose train_config.json predates it (no such key) resumes, and
    a run may be resumed with compile switched (here: checked by the configuration check alone)."""
    task = _run_folder_without(tmp_path, "compile")
    res = train(small_model(), task, cfg(tmp_path, steps=6))
    assert res["step"] == 6 and len(train_losses(tmp_path / "metrics.jsonl")) == 6


def test_a_run_folder_from_before_the_schedule_option_resumes_only_with_the_default(tmp_path):
    """A train_config.json without ``schedule`` (written before it existed) was a cosine run: it resumes with the
    default, and a resume that asks for another schedule is refused as another run."""
    task = _run_folder_without(tmp_path, "schedule")
    with pytest.raises(ValueError, match=r"train_config.schedule: 'cosine' -> 'onecycle'"):
        train(small_model(), task, cfg(tmp_path, steps=6, schedule="onecycle", warmup_steps=2))
    res = train(small_model(), task, cfg(tmp_path, steps=6))
    assert res["step"] == 6 and len(train_losses(tmp_path / "metrics.jsonl")) == 6


def _torchrun_args(out: Path, distributed: str, nproc: int) -> list[str]:
    cmd = _cli(out, 12)
    cmd[cmd.index("--ckpt-every") + 1] = "0"
    i = cmd.index("-m")
    cmd = cmd[i + 2 :]  # drop "python -m seqzoo"
    cmd[cmd.index("--model-arg") + 3] = "dropout=0.0"
    if nproc == 1:
        return [sys.executable, "-m", "seqzoo", *cmd, "--distributed", "none"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "seqzoo",
        *cmd,
        "--distributed",
        distributed,
    ]


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_two_processes_match_one(tmp_path, kind):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(_torchrun_args(tmp_path / "one", kind, 1), check=True, capture_output=True, env=env)
    # FSDP2's warning that a module returned a view tensor (its backward hook can be lost: wrong gradients) is an
    # error in the ranks, so the run fails on it
    env["PYTHONWARNINGS"] = "error:FSDP2-wrapped module"
    res = subprocess.run(_torchrun_args(tmp_path / "two", kind, 2), capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "view tensor" not in res.stderr, res.stderr[-3000:]
    a, b = train_losses(tmp_path / "one" / "metrics.jsonl"), train_losses(tmp_path / "two" / "metrics.jsonl")
    assert len(a) == len(b) == 12
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4, (a, b)
    from seqzoo import LanguageModel as LM

    x = torch.randint(0, 16, (2, 16))
    torch.testing.assert_close(
        LM.from_pretrained(tmp_path / "one" / "model")(x).logits,
        LM.from_pretrained(tmp_path / "two" / "model")(x).logits,
        atol=1e-4,
        rtol=1e-4,
    )

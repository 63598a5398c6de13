"""One training loop for every seqzoo model and task.

Reproducibility by construction: the global batch of optimiser step s is a pure function of (seed, s), so
a run resumed from a checkpoint (model, optimiser, step, RNG state) replays the same batches and gives
the same losses as an uninterrupted run. Each rank takes its rows of the global batch, and every
micro-batch loss is normalised by the scored-token count of the whole global batch, so DDP / FSDP /
gradient accumulation compute the gradient of the same global mean loss as one process.
"""

from __future__ import annotations

import functools
import json
import math
import signal
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .. import settings
from ..errors import InputError, TrainingDivergedError, TrainingInterrupted
from ..eval.evaluate import check_scored_logits, evaluate, scored_forward, scored_loss_sum, segment_pos_refusal
from ..outputs import check_output_dir
from ..tasks.base import IGNORE_INDEX, Batch, Task
from .checkpoint import (
    CHECKPOINT_NAME,
    export_model,
    load_checkpoint,
    load_optimizer_state,
    remove_stale_temporaries,
    save_checkpoint,
)
from .config import TrainConfig
from .context_parallel import check_context_parallel, make_layout, sum_context_gradients
from .distributed import (
    all_reduce_mean,
    init_distributed,
    launched_by_torchrun,
    shutdown_distributed,
    unwrap,
    world,
    wrap_model,
)
from .interrupt import StopRequest
from .optim import build_optimizer, set_lr
from .tensorboard import TENSORBOARD_DIR, TensorBoardLog, check_tensorboard


def resolve_device(name: str) -> torch.device:
    """The device a run trains on; a device this machine lacks is refused here, before any file is written."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"device={name!r}: CUDA is not available here; use device 'cpu' or 'auto'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InputError(f"device={name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"device={name!r}: MPS is not available here; use device 'cpu' or 'auto'")
    return device


def distributed_kind(cfg: TrainConfig) -> str:
    """``none``, ``ddp`` or ``fsdp`` for this process; a multi-process kind without a torchrun launch is refused."""
    kind = cfg.distributed
    if kind == "auto":
        kind = "ddp" if launched_by_torchrun() else "none"
    if kind != "none" and not launched_by_torchrun():
        raise InputError(f"distributed={kind!r} needs a torchrun launch (WORLD_SIZE > 1)")
    return kind


def check_can_start(cfg: TrainConfig) -> None:
    """What ``train`` refuses before its first write, for callers that write into the run folder first (the CLI's
    run.json): the device exists, the launch fits ``distributed``, ``out_dir`` can be a folder."""
    resolve_device(cfg.device)
    distributed_kind(cfg)
    if cfg.out_dir:
        check_output_dir(cfg.out_dir, "out_dir (--out)")
    if cfg.tensorboard:
        check_tensorboard(cfg.out_dir)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "bf16":
        return torch.bfloat16
    if precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


class BatchSource:
    """The global batch of each step, deterministic in (seed, step)."""

    def __init__(self, task: Task, cfg: TrainConfig):
        self.task, self.cfg = task, cfg
        self.fixed = None
        if task.train_size:
            self.fixed = task.build_batch(task.train_size, cfg.seed, "train")

    def global_batch(self, step: int) -> Batch:
        """Inputs, targets and (packed documents) segment_pos of step ``step``."""
        B = self.cfg.batch_size
        if self.fixed is None:
            return self.task.build_batch(B, self.cfg.seed * 1_000_003 + step, "train")
        n = self.fixed.inputs.shape[0]
        per_epoch = max(1, n // B)
        epoch, k = divmod(step, per_epoch)
        g = torch.Generator().manual_seed(self.cfg.seed * 7919 + epoch)
        idx = torch.randperm(n, generator=g)[k * B : (k + 1) * B]
        return self.fixed.rows(idx)


class MetricsLog:
    """Append-only JSONL (rank 0); on resume, lines after the checkpoint's step are dropped first."""

    def __init__(self, path: Path | None, resume_step: int | None):
        self.path = path
        if path is None:
            return
        if resume_step is not None and path.exists():
            kept = [l for l in path.read_text().splitlines() if l and json.loads(l).get("step", 0) <= resume_step]
            path.write_text("".join(l + "\n" for l in kept))
        elif path.exists():
            path.unlink()

    def write(self, record: dict[str, Any]) -> None:
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


# training settings that do not change what the weights become: a resumed run may differ in these. ``compile`` and
# ``context_parallel`` change how the same step is computed (float-tolerance equal).
RESUMABLE_CHANGES = (
    "steps",
    "out_dir",
    "resume",
    "progress",
    "stop_after",
    "ckpt_every",
    "log_every",
    "eval_every",
    "compile",
    "tensorboard",
    "context_parallel",
)


def _run_files(cfg, task, model) -> dict[str, Any]:
    """The run's resolved configuration as the JSON files written into its folder."""
    files = {
        "train_config.json": cfg.to_dict(),
        "task.json": {"name": task.name, **task.config()},
    }
    if hasattr(unwrap(model), "config") and hasattr(unwrap(model).config, "to_dict"):
        files["model_config.json"] = unwrap(model).config.to_dict()
    return json.loads(json.dumps(files, default=str))  # the form they take on disk (tuples -> lists, ...)


def check_same_run(out: Path, run_files: dict[str, Any]) -> None:
    """Refuse to resume a checkpoint written by another run (other model, task or training settings). A training
    setting that the folder's train_config.json lacks (written before the setting existed, e.g. ``schedule``)
    counts as its default, which is what that run trained with."""
    defaults = json.loads(json.dumps(TrainConfig().to_dict(), default=str))
    differences = []
    for name, new in run_files.items():
        path = out / name
        if not path.is_file():
            differences.append(f"{name}: missing in the run folder")
            continue
        old = json.loads(path.read_text())
        if name == "train_config.json":
            old = {**{k: v for k, v in defaults.items() if k in new}, **old}
        for key in sorted(set(old) | set(new)):
            if name == "train_config.json" and key in RESUMABLE_CHANGES:
                continue
            if old.get(key) != new.get(key):
                differences.append(f"{name.removesuffix('.json')}.{key}: {old.get(key)!r} -> {new.get(key)!r}")
    if differences:
        raise InputError(
            f"{out} holds a checkpoint of another run; resuming needs the same model, task and training settings "
            f"(only steps may grow). Differences: {'; '.join(differences)}. Pass --no-resume (--overwrite) to "
            "start fresh in this folder, or choose another --out"
        )


def check_resume(out: Path, cfg: TrainConfig, task: Task, model) -> None:
    """Before anything is written: ``out``'s checkpoint must come from this run, with no more steps than asked."""
    check_same_run(out, _run_files(cfg, task, model))
    # mmap: the step without reading the weights into memory
    trained = int(torch.load(out / CHECKPOINT_NAME, map_location="cpu", weights_only=False, mmap=True)["step"])
    if trained > cfg.steps:
        raise InputError(
            f"steps={cfg.steps} is fewer than the {trained} steps the checkpoint in {out} has already trained: "
            "pass steps >= that to extend the run, or --no-resume (--overwrite) to start fresh"
        )


def _interrupted(
    done: int, cfg: TrainConfig, saved: int, ckpt_path: Path | None, save, signum: int
) -> TrainingInterrupted:
    """Save step ``done`` unless the checkpoint holds it already (step ``saved``), and say how to go on."""
    where = f"interrupted by {signal.Signals(signum).name} after step {done} of {cfg.steps}"
    if ckpt_path is None:
        return TrainingInterrupted(f"{where}; the run has no out_dir, so nothing was saved", done, None, signum)
    if done == 0:
        return TrainingInterrupted(f"{where}; no step to save, a rerun starts from step 0", done, None, signum)
    if done > saved:
        save()
    return TrainingInterrupted(
        f"{where}; checkpoint saved in {ckpt_path}; run the same command again to resume from step {done}",
        done,
        str(ckpt_path),
        signum,
    )


def determinism_note(device: torch.device, world_size: int) -> str:
    """What a rerun of the same command and seed reproduces, written into ``final.json``."""
    if device.type == "cpu" and world_size == 1:
        return "bitwise: same seed and command give identical metrics on CPU (tests/test_reproducibility.py)"
    return (
        f"not bitwise on {device.type} with {world_size} process(es): GPU kernels (cuBLAS/SDPA backward, autotuned "
        "Triton configs) and collective reductions may sum in another order; expect differences at float precision"
    )


def train(model, task: Task, cfg: TrainConfig | None = None, **overrides: Any) -> dict[str, Any]:
    """Train ``model`` on ``task``; returns the final metrics. Writes files to ``cfg.out_dir`` when set.

    Ctrl-C (SIGINT) or SIGTERM (single process) ends the step under way, saves its checkpoint and raises
    :class:`~seqzoo.errors.TrainingInterrupted`; the same call again resumes from that step (``interrupt.py``)."""
    cfg = cfg or TrainConfig()
    if overrides:
        cfg = TrainConfig.from_dict({**cfg.to_dict(), **overrides})
    # under torchrun every rank would have to stop at the same step: there SIGINT/SIGTERM keep their default behaviour
    with StopRequest(enabled=not launched_by_torchrun(), notice=cfg.progress) as stop:
        return _train(model, task, cfg, stop)


def _train(model, task: Task, cfg: TrainConfig, stop: StopRequest) -> dict[str, Any]:
    check_can_start(cfg)
    check_context_parallel(cfg, model, task)
    device = resolve_device(cfg.device)
    kind = distributed_kind(cfg)
    if kind != "none":
        if device.type == "cuda":
            local = settings.local_rank()
            device = torch.device("cuda", local)
            torch.cuda.set_device(device)
        owns_group = init_distributed(device)
    else:
        owns_group = False
    rank, world_size = world()
    per_rank = cfg.batch_size // cfg.grad_accum
    data_size = world_size // cfg.context_parallel  # ranks that read different rows (context_parallel.py)
    if per_rank % data_size:
        raise InputError(
            f"batch_size/grad_accum={per_rank} must be divisible by the number of data-parallel processes {data_size}"
        )
    micro = per_rank // data_size
    amp = autocast_dtype(cfg.precision, device)
    main = rank == 0
    out = Path(cfg.out_dir) if cfg.out_dir else None
    ckpt_path = out / CHECKPOINT_NAME if out is not None else None
    resuming = cfg.resume and ckpt_path is not None and ckpt_path.exists()
    run_files = _run_files(cfg, task, model)
    if cfg.scored_logits:  # before anything is written
        check_scored_logits(model, getattr(task, "kind", "lm"))
    if resuming:  # before anything in the folder is written
        check_resume(out, cfg, task, model)
    why = segment_pos_refusal(model) if getattr(task, "packed", False) else None
    if why:  # packed documents need every layer to restart at their starts
        raise InputError(f"task {task.name!r} packs documents (segment_pos), but {why}; pass packed=false to the task")

    torch.manual_seed(cfg.seed)
    model.to(device)
    start_step = 0
    resume_state = None
    if resuming:
        resume_state = load_checkpoint(ckpt_path, model)
        start_step = resume_state["step"]
        if main:
            print(f"resuming from step {start_step} of {cfg.steps} ({ckpt_path})", flush=True)
    if out is not None and main:
        out.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(ckpt_path)
        for name, content in run_files.items():
            (out / name).write_text(json.dumps(content, indent=2, default=str) + "\n")
    layout = make_layout(cfg.context_parallel, rank, world_size, device)
    # a context group alone (data_size 1) needs no wrapper: its gradients are summed by sum_context_gradients
    wrapped = kind != "none" and data_size > 1
    train_model = wrap_model(model, kind, device, layout.data_mesh) if wrapped else model
    # compiled for the training forward only: checkpoints, the optimiser and evaluation keep the plain module
    # (a compiled wrapper would prefix every state-dict key, and evaluation batches have other shapes)
    forward_model = torch.compile(train_model, dynamic=False) if cfg.compile else train_model
    if layout.context_size > 1:  # each rank runs its time block; the model splits the sequence over the group
        # the final states are not read in training: no all-gather of them per recurrent layer and step
        forward_model = functools.partial(forward_model, context_parallel=layout.context_group, return_states=False)
    optimizer = build_optimizer(model, cfg)  # groups from the mixers' hints, wrapped models included
    if resume_state is not None:
        load_optimizer_state(train_model, optimizer, resume_state["optimizer"])
        torch.set_rng_state(resume_state["rng"])
    log = MetricsLog(
        out / "metrics.jsonl" if (out is not None and main) else None, start_step if resume_state is not None else None
    )
    if cfg.tensorboard and main:  # the same records as TensorBoard scalars (train/tensorboard.py)
        log = TensorBoardLog(log, out / TENSORBOARD_DIR, start_step if resume_state is not None else None)

    source = BatchSource(task, cfg)
    valid = task.build_batch(cfg.eval_samples, cfg.seed, "valid")
    task_kind = getattr(task, "kind", "lm")

    def run_eval(step: int) -> dict[str, float]:
        m = evaluate(
            unwrap(train_model) if kind == "ddp" else train_model,
            valid.inputs,
            valid.targets,
            segment_pos=valid.segment_pos,
            batch_size=cfg.eval_batch_size,
            kind=task_kind,
            device=device,
            autocast_dtype=amp,
            scored_logits=cfg.scored_logits,
        )
        rec = {"step": step, "split": "valid", "loss": m["loss"], "accuracy": m["accuracy"]}
        log.write(rec)
        return rec

    bar = tqdm(
        total=cfg.steps,
        initial=start_step,
        disable=not (cfg.progress and main),
        desc="train",
        dynamic_ncols=True,
        leave=True,
    )
    t0 = time.time()
    last_eval: dict[str, float] = {}
    loss_value = float("nan")
    stop_at = cfg.steps if cfg.stop_after is None else min(cfg.steps, cfg.stop_after)
    train_model.train()
    done = saved = start_step  # a resumed run's checkpoint holds start_step
    for step in range(start_step, stop_at):
        if stop.requested:  # SIGINT/SIGTERM: between two whole steps, never inside optimizer.step()
            break
        lr = set_lr(optimizer, step, cfg)
        xs, ys, sps = source.global_batch(step)
        n_scored = int((ys != IGNORE_INDEX).sum()) if task_kind == "lm" else ys.shape[0]
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for a in range(cfg.grad_accum):
            lo = a * per_rank + layout.data_rank * micro
            x, y = layout.time_block(xs[lo : lo + micro]).to(device), layout.time_block(ys[lo : lo + micro]).to(device)
            sp = None if sps is None else layout.time_block(sps[lo : lo + micro]).to(device)  # packed documents
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                logits, y = scored_forward(forward_model, x, y, task_kind, cfg.scored_logits, sp)
            loss_sum, _ = scored_loss_sum(logits, y)
            # gradient of the global mean: DDP averages over the data ranks, hence the data_size factor
            (loss_sum * (data_size if wrapped or cfg.context_parallel == 1 else 1) / max(1, n_scored)).backward()
            step_loss += float(loss_sum.detach())
        sum_context_gradients(train_model, layout)  # each rank of a context group holds its tokens' part
        grad_norm = None
        if cfg.grad_clip:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(train_model.parameters(), cfg.grad_clip))
        optimizer.step()
        loss_value = all_reduce_mean(step_loss, device) * world_size / max(1, n_scored)
        if not math.isfinite(loss_value):  # before the step is logged or checkpointed: the last good one stays
            kept = (
                f"; the last good checkpoint stays in {ckpt_path}"
                if ckpt_path is not None and ckpt_path.exists()
                else ""
            )
            raise TrainingDivergedError(
                f"training loss became {loss_value} at step {step + 1} (lr {lr:.3g}){kept}; nothing was written "
                "for this step. Lower the learning rate, add warmup or gradient clipping, or use fp32"
            )
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            log.write(
                {
                    "step": done,
                    "split": "train",
                    "loss": loss_value,
                    "lr": lr,
                    "grad_norm": grad_norm,
                    "time_s": round(time.time() - t0, 3),
                }
            )
        if cfg.eval_every and done % cfg.eval_every == 0 and done != cfg.steps:
            last_eval = run_eval(done)
        if cfg.ckpt_every and done % cfg.ckpt_every == 0 and out is not None:
            save_checkpoint(ckpt_path, train_model, optimizer, done, main)
            saved = done
        bar.update(1)
        bar.set_postfix(
            loss=f"{loss_value:.4f}", lr=f"{lr:.2e}", **({"acc": f"{last_eval['accuracy']:.3f}"} if last_eval else {})
        )
    bar.close()
    if stop.requested and done < stop_at:
        raise _interrupted(
            done,
            cfg,
            saved,
            ckpt_path,
            lambda: save_checkpoint(ckpt_path, train_model, optimizer, done, main),
            stop.signum,
        )
    result: dict[str, Any] = {
        "step": stop_at,
        "train_loss": loss_value,
        "time_s": round(time.time() - t0, 3),
        "params": unwrap(model).num_parameters() if hasattr(unwrap(model), "num_parameters") else None,
        "determinism": determinism_note(device, world_size),
    }
    if stop_at == cfg.steps:
        last_eval = run_eval(cfg.steps)
        result.update(valid_loss=last_eval["loss"], valid_accuracy=last_eval["accuracy"])
    if out is not None:
        save_checkpoint(ckpt_path, train_model, optimizer, stop_at, main)
        if stop_at == cfg.steps and hasattr(unwrap(model), "save_pretrained"):
            export_model(train_model, model, out / "model", main)
        if main:
            (out / "final.json").write_text(json.dumps(result, indent=2) + "\n")
    if isinstance(log, TensorBoardLog):
        log.close()
    if owns_group:
        shutdown_distributed()
    return result

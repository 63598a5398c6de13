"""The public builders refuse wrong types, non-finite numbers, missing devices and unwritable outputs with an
``InputError`` naming the argument, before any work (issue #42, part A; the CLI cases are in test_bad_input.py)."""

import math

import pytest
import torch

from seqzoo import ModelConfig, build_model
from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.field_types import check_value
from seqzoo.outputs import check_output_dir, check_output_file
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, train
from seqzoo.train.loop import check_can_start, resolve_device


@pytest.mark.parametrize(
    "field, value",
    [
        ("lr", math.nan),
        ("lr", math.inf),
        ("lr", "abc"),
        ("grad_clip", math.nan),
        ("grad_clip", -1.0),
        ("weight_decay", -1),
        ("weight_decay", math.inf),
        ("eps", 0.0),
        ("betas", (0.9, 1.0)),
        ("betas", [0.9]),
        ("min_lr_ratio", math.nan),
        ("steps", True),
        ("steps", 3.0),
        ("seed", "0"),
        ("device", "no-such-device"),
        ("out_dir", 5),
        ("progress", "yes"),
        ("stop_after", 0),
    ],
)
def test_train_config_refuses_by_name(field, value):
    with pytest.raises(InputError, match=field):
        TrainConfig(**{field: value})


@pytest.mark.parametrize(
    "field, value",
    [("mlp_ratio", "abc"), ("norm_eps", math.nan), ("embed_init_std", math.inf), ("d_model", 64.0), ("norm", 3)],
)
def test_model_config_and_build_model_refuse_by_name(field, value):
    with pytest.raises(InputError, match=field):
        ModelConfig(**{field: value})
    with pytest.raises(InputError, match=field):
        build_model("attention-tiny", **{field: value})


def test_build_task_refuses_unknown_and_wrong_typed_arguments():
    with pytest.raises(InputError, match="num_pair.*num_pairs"):
        build_task("mqar", num_pair=2)
    with pytest.raises(InputError, match="seq_len"):
        build_task("mqar", seq_len="abc")
    with pytest.raises(InputError, match="query_at_end"):
        build_task("mqar", query_at_end="no")
    assert build_task("mqar", num_pairs=2, seq_len=16, train_size=None).seq_len == 16


def test_a_missing_device_is_refused_before_anything_is_written(tmp_path):
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="CUDA is not available"):
            resolve_device("cuda")
    with pytest.raises(InputError, match="cuda:99"):
        resolve_device("cuda:99")
    out = tmp_path / "run"
    model, task = build_model("attention-tiny", vocab_size=64), build_task("mqar", num_pairs=2, seq_len=16)
    with pytest.raises(InputError, match="cuda:99"):
        train(model, task, TrainConfig(steps=2, device="cuda:99", out_dir=str(out), progress=False))
    assert not out.exists()


def test_an_output_below_a_file_is_refused_before_training(tmp_path):
    (tmp_path / "file").write_text("x")
    cfg = TrainConfig(steps=2, out_dir=str(tmp_path / "file" / "run"), progress=False)
    with pytest.raises(InputError, match="below the file"):
        check_can_start(cfg)
    model, task = build_model("attention-tiny", vocab_size=64), build_task("mqar", num_pairs=2, seq_len=16)
    with pytest.raises(InputError, match="out_dir"):
        train(model, task, cfg)


def test_output_checks_create_nothing(tmp_path):
    (tmp_path / "file").write_text("x")
    assert check_output_dir(tmp_path / "a" / "b", "--out") == tmp_path / "a" / "b"
    assert check_output_file(tmp_path / "c" / "m.json", "--out") == tmp_path / "c" / "m.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    for bad in (tmp_path / "file", tmp_path / "file" / "x" / "y"):
        with pytest.raises(InputError, match="--out"):
            check_output_dir(bad, "--out")
    with pytest.raises(InputError, match="is a folder"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(InputError, match="empty"):
        check_output_dir("", "--out")


def test_experiment_options_declared_as_numbers_are_checked_before_the_run(tmp_path):
    exp = get_experiment("griffin-mqar")
    for option, value in (("steps", "abc"), ("lr", math.nan), ("lr", math.inf), ("steps", 2.5)):
        with pytest.raises(InputError, match=option):
            exp.run(out_dir=tmp_path, **{option: value})
    assert not any(tmp_path.iterdir())


def test_check_value_reads_annotations():
    check_value(None, "float | None", "x")
    check_value(3, "float", "x")  # an int is a number
    check_value(["a"], "list[str]", "x")
    check_value(object(), "Path", "x")  # not a type this check knows: left to the callee
    with pytest.raises(InputError, match="x must be a finite number or null"):
        check_value(math.nan, "float | None", "x")
    with pytest.raises(InputError, match="x must be an int"):
        check_value(True, "int", "x")


def test_a_saved_train_config_still_loads(tmp_path):
    """Every default passes the new checks, so train_config.json files written before them still load."""
    d = TrainConfig().to_dict()
    assert TrainConfig.from_dict(d) == TrainConfig()

"""Overrides merge at every depth: a nested setting that is not named keeps its value (issue #42, part A).

``--set model.mixer_kwargs.mlstm.chunk_size=32`` on ``xlstm10-tiny`` used to save ``{"mlstm": {"chunk_size": 32}}``,
dropping the preset's heads, blocks and conv size without a word.
"""

import json

import pytest

from seqzoo.cli import build_run_spec, main, make_parser
from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.models import PRESETS, build_model
from seqzoo.overrides import deep_merge
from seqzoo.sweep.options import resolve_options
from seqzoo.train.spec import apply_dotted

TINY = ["--task", "mqar", "--task-arg", "num_pairs=2", "--task-arg", "seq_len=16", "--steps", "1", "--no-progress"]


def _preset_mlstm():
    return PRESETS["xlstm10-tiny"].make().mixer_kwargs["mlstm"]


def test_deep_merge_keeps_what_is_not_named_and_changes_no_input():
    base = {"a": {"b": {"c": 1, "d": 2}, "e": 3}, "f": [1, 2]}
    over = {"a": {"b": {"c": 10}}, "f": [3]}
    assert deep_merge(base, over) == {"a": {"b": {"c": 10, "d": 2}, "e": 3}, "f": [3]}
    assert base == {"a": {"b": {"c": 1, "d": 2}, "e": 3}, "f": [1, 2]} and over == {"a": {"b": {"c": 10}}, "f": [3]}
    assert deep_merge({"a": {"b": 1}}, {"a": 5}) == {"a": 5}  # a non-dict value replaces the whole entry


def test_cli_set_on_a_preset_keeps_the_presets_other_mixer_settings(tmp_path):
    """The issue's command: the saved model config keeps every other mLSTM setting of the preset."""
    argv = ["train", "--model", "xlstm10-tiny", *TINY, "--out", str(tmp_path)]
    assert main(argv + ["--set", "model.mixer_kwargs.mlstm.chunk_size=32"]) == 0
    saved = json.loads((tmp_path / "model_config.json").read_text())["mixer_kwargs"]["mlstm"]
    assert saved == {**_preset_mlstm(), "chunk_size": 32}
    assert len(saved) > 1


@pytest.mark.parametrize(
    "flags",
    [
        ["--set", "model.mixer_kwargs.mlstm.chunk_size=32"],
        ["--set", 'model.mixer_kwargs={"mlstm": {"chunk_size": 32}}'],
        ["--model-arg", 'mixer_kwargs={"mlstm": {"chunk_size": 32}}'],
    ],
)
def test_every_cli_spelling_of_a_nested_override_merges_into_the_preset(flags):
    from seqzoo.train.spec import RunSpec

    args = make_parser().parse_args(["train", "--model", "xlstm10-tiny", *TINY, *flags])
    model, _, _ = RunSpec.from_dict(build_run_spec(args)).build()
    assert model.config.mixer_kwargs["mlstm"] == {**_preset_mlstm(), "chunk_size": 32}


def test_config_file_then_flags_then_set_merge_at_every_depth(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        '[model]\npreset = "xlstm10-tiny"\n[model.mixer_kwargs.mlstm]\nchunk_size = 16\nconv_size = 2\n'
        '[task]\nname = "mqar"\nnum_pairs = 2\nseq_len = 16\n[train]\nsteps = 3\nlr = 0.002\n'
    )
    args = make_parser().parse_args(
        ["train", "--config", str(cfg), "--model-arg", 'mixer_kwargs={"mlstm": {"n_heads": 4}}', "--steps", "5"]
        + ["--set", "model.mixer_kwargs.mlstm.chunk_size=32", "--task-arg", "seq_len=20"]
    )
    spec = build_run_spec(args)
    assert spec["model"]["mixer_kwargs"] == {"mlstm": {"chunk_size": 32, "conv_size": 2, "n_heads": 4}}
    assert spec["task"] == {"name": "mqar", "num_pairs": 2, "seq_len": 20}
    assert spec["train"]["steps"] == 5 and spec["train"]["lr"] == 0.002
    from seqzoo.train.spec import RunSpec

    model, _, _ = RunSpec.from_dict(spec).build()
    assert model.config.mixer_kwargs["mlstm"] == {**_preset_mlstm(), "chunk_size": 32, "conv_size": 2, "n_heads": 4}


def test_apply_dotted_merges_dict_values_and_refuses_a_path_through_a_number():
    spec = {"model": {"mixer_kwargs": {"mlstm": {"n_heads": 2, "chunk_size": 64}}}, "train": {"lr": 0.1}}
    out = apply_dotted(spec, {"model.mixer_kwargs": {"mlstm": {"chunk_size": 32}}})
    assert out["model"]["mixer_kwargs"]["mlstm"] == {"n_heads": 2, "chunk_size": 32}
    assert spec["model"]["mixer_kwargs"]["mlstm"]["chunk_size"] == 64  # the input is not changed
    with pytest.raises(InputError, match="train.lr"):
        apply_dotted(spec, {"train.lr.x": 1})
    with pytest.raises(InputError, match="model"):
        apply_dotted(spec, {"model..x": 1})


def test_build_model_merges_preset_overrides():
    model = build_model("xlstm10-tiny", vocab_size=32, mixer_kwargs={"mlstm": {"chunk_size": 32}})
    assert model.config.mixer_kwargs["mlstm"] == {**_preset_mlstm(), "chunk_size": 32}
    assert model.blocks[0].mixer.chunk_size == 32  # it reaches the layer


def test_a_preset_whose_pattern_is_overridden_drops_only_its_own_settings_for_mixers_gone():
    """The preset's mLSTM settings have no layer left once the pattern is attention only; settings the caller gives
    for a mixer no layer uses are still refused by name."""
    model = build_model("xlstm10-tiny", vocab_size=32, pattern=["attention"])
    assert model.config.mixer_kwargs == {} and model.config.layer_mixers()[0] == "attention"
    with pytest.raises(InputError, match="mlstm"):
        build_model("xlstm10-tiny", vocab_size=32, pattern=["attention"], mixer_kwargs={"mlstm": {"chunk_size": 32}})


def test_experiment_options_with_dict_defaults_merge():
    out = resolve_options({"model": {"a": 1, "b": 2}, "steps": 3}, {"model": {"b": 5}}, "exp")
    assert out == {"model": {"a": 1, "b": 5}, "steps": 3}
    assert get_experiment("griffin-mqar")  # the registry still loads

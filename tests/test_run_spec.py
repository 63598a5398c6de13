"""The one run schema (``train/spec.py: RunSpec``): JSON round trip, strict refusal of unknown keys, one model builder
for ``seqzoo train`` and the sweep, and run keys pinned to the values they had before the schema was unified (result
folders are named by them)."""

import hashlib
import json
import sys

import pytest
import torch

import seqzoo.train.run_key as run_key
from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.train.spec import TRAIN_RUN, RunSpec, build_model

CODE = "0.0.0+pinned"  # a fixed code version: the pins check the key's recipe, not the sources of the day
MODEL = {"vocab_size": 16, "d_model": 8, "n_layers": 1, "mixer": "attention"}
TRAIN = {"steps": 4, "batch_size": 2, "lr": 3e-3, "eval_every": 0}
MQAR = {"name": "mqar", "num_pairs": 2, "seq_len": 16, "vocab_size": 16}

# (fn, config) -> key with CODE, computed with the sweep's former RunSpec (sweep/grid.py) before the schema moved
PINNED_KEYS = [
    (TRAIN_RUN, {"seed": 0, "model": {"type": "lm", "config": MODEL}, "task": MQAR, "train": TRAIN}, "6f56b1982f20"),
    (
        TRAIN_RUN,
        {
            "seed": 1,
            "model": {"type": "lm", "config": MODEL, "init": "xlstm"},
            "task": MQAR,
            "train": TRAIN,
            "eval": {"task_lengths": [16, 32], "samples": 8},
        },
        "e7d4c92d03d2",
    ),
    (  # a custom run function with a setting of its own and a model builder (its module's hash fixed below)
        "seqzoo.experiments.gateloop:mh_run",
        {
            "seed": 0,
            "model": {"builder": "seqzoo.experiments.gateloop:mh_model", "args": {"variant": "data"}},
            "task": MQAR,
            "train": TRAIN,
            "span_bin": 10,
        },
        "6c0d7edff9a8",
    ),
    (  # RMT's curriculum runs: no train section, settings at the top level
        "seqzoo.experiments.rmt:copy_run",
        {
            "seed": 2,
            "task": MQAR,
            "model": {"preset": "attention-tiny", "num_mem_tokens": 2},
            "eval_every": 50,
            "valid_samples": 200,
        },
        "2cd6b2c8901c",
    ),
]

# sha256 (16 hex) of the list of each spec's sha256(canonical {fn, config}) (16 hex), in order, that these
# experiments built before their grids moved to data; SEQZOO_DATA unset, so the zoo skips its text probe
PINNED_GRIDS = {
    "zoology-mqar": (
        dict(models="attention,hawk", seq_lens="64", num_pairs="4", d_models="64", seeds="0", steps=20, eval_every=500),
        8,
        "ff5aef3bb13cf278",
    ),
    "griffin-mqar": (dict(steps=20), 3, "6ef68c739e93a922"),
    "xlstm-mqar": (dict(steps=20), 3, "bc1c85afdc96f7a4"),
    "gateloop-memory-horizon": (dict(steps=20), 3, "85ff7e034167abe2"),
    "griffin-copying": (dict(steps=20, seeds="0"), 6, "17ee7814bbbd8bf3"),
    "xlstm-formal": (dict(steps=20, seeds="0"), 10, "40e64bbb030882b2"),
    "zoo": (dict(progress=False), 56, "7db357ec5241ce7a"),
    "orchid-images": (
        dict(models="orchid,attention", seeds="0,1", steps=2, d_model=16, n_layers=1),
        4,
        "11fcf62ca40aba97",
    ),
    "orchid-mlm": (dict(path="corpus.txt", seeds="0,1", steps=7), 6, "91eb1d5a998bd94a"),  # a corpus in the folder
}


@pytest.fixture
def fixed_builder_hash(monkeypatch):
    monkeypatch.setattr(run_key, "_module_hash", lambda module: "b" * 12)


@pytest.mark.parametrize("fn, config, key", PINNED_KEYS)
def test_known_runs_keep_their_keys(fn, config, key, fixed_builder_hash):
    spec = RunSpec.of(fn, config, {"any": "label"})
    assert spec.config == config
    assert spec.key(CODE) == key


def test_a_run_reading_a_file_keeps_its_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("to be or not to be\n" * 20)
    task = {"name": "text", "path": "corpus.txt", "seq_len": 8}
    spec = RunSpec(model={"type": "lm", "config": MODEL}, task=task, train=TRAIN, seed=0)
    assert spec.key(CODE) == "efe79822a769"


class _Built(Exception):
    pass


def _grid_of(name, options, monkeypatch, tmp_path):
    """The specs experiment ``name`` hands to the sweep runner (caught there: nothing trains)."""
    import seqzoo.sweep.runner as runner

    def catch(specs, *args, **kwargs):
        raise _Built(specs)

    monkeypatch.setattr(runner, "run_sweep", catch)
    for module_name, module in list(sys.modules.items()):  # the modules that imported it by name
        if module_name.startswith("seqzoo.experiments") and hasattr(module, "run_sweep"):
            monkeypatch.setattr(module, "run_sweep", catch)
    with pytest.raises(_Built) as got:
        get_experiment(name).run(out_dir=tmp_path / name, **options)
    return got.value.args[0]


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(PINNED_GRIDS))
def test_experiments_build_the_run_configurations_they_built_before(name, monkeypatch, tmp_path):
    if name == "orchid-images":
        pytest.importorskip("sklearn")  # its digits
    monkeypatch.delenv("SEQZOO_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # a relative corpus path: the same run configuration wherever the test runs
    (tmp_path / "corpus.txt").write_text("to be or not to be, that is the question. " * 300)
    options, count, digest = PINNED_GRIDS[name]
    specs = _grid_of(name, options, monkeypatch, tmp_path)
    assert all(isinstance(s, RunSpec) for s in specs)
    assert len(specs) == count
    digests = [_digest({"fn": s.fn, "config": s.config}) for s in specs]
    assert hashlib.sha256(json.dumps(digests).encode()).hexdigest()[:16] == digest


def test_json_round_trip_gives_the_same_spec_and_key():
    spec = RunSpec(
        model={"preset": "attention-tiny", "d_model": 32},
        task=MQAR,
        train=TRAIN,
        seed=3,
        eval={"task_lengths": [32]},
        labels={"model": "attention", "seed": 3},
    )
    back = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec and back.key(CODE) == spec.key(CODE)
    custom = RunSpec.of("seqzoo.experiments.gateloop:mh_run", {"seed": 0, "task": MQAR, "span_bin": 10})
    assert RunSpec.from_dict(json.loads(json.dumps(custom.to_dict()))) == custom
    assert custom.config == {"seed": 0, "task": MQAR, "span_bin": 10}  # sections left out stay out of the key


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"model": {}, "trian": {}}, "trian"),  # a misspelt section
        ({"train": [1]}, "train"),
        ({"seed": "0"}, "seed"),
        ({"seed": True}, "seed"),
        ({"fn": "no_colon"}, "module:function"),
        ({"extra": {"seed": 1}, "fn": "m:f"}, "seed"),  # a section smuggled in as a custom setting
        ({"extra": {"span_bin": 10}}, "span_bin"),  # the standard run reads no custom setting
        ({"train": {"stepz": 3}}, "stepz"),  # not a TrainConfig field
        ({"eval": {"task_length": [32]}}, "task_length"),  # not an evaluation of the standard run
    ],
)
def test_unknown_or_unused_keys_are_refused_by_name(bad, words):
    with pytest.raises(InputError, match=words):
        RunSpec.from_dict(bad)


def test_a_standard_run_configuration_with_an_unknown_top_level_key_is_refused():
    with pytest.raises(InputError, match="span_bin"):
        RunSpec.of(TRAIN_RUN, {"seed": 0, "task": MQAR, "span_bin": 10})


@pytest.mark.parametrize(
    "section, words",
    [
        ({"type": "lm", "config": MODEL, "int": "xlstm"}, "int"),
        ({"builder": "m:f", "args": {}, "config": MODEL}, "config"),
        ({"type": "lm", "config": MODEL, "init": "xavier"}, "xavier"),
        ({"preset": "attention-tiny", "d_modle": 8}, "d_modle"),
    ],
)
def test_a_model_section_with_keys_its_form_does_not_read_is_refused(section, words):
    from seqzoo.tasks import build_task

    with pytest.raises(InputError, match=words):
        build_model(section, build_task(**MQAR))


def test_the_cli_form_and_the_sweep_form_of_one_model_build_the_same_weights():
    """``seqzoo train``'s preset form and the sweep's resolved-config form are one schema: same seed, same model."""
    from seqzoo.models import PRESETS

    spec = RunSpec(model={"preset": "attention-tiny", "d_model": 16}, task=MQAR, train=TRAIN, seed=5)
    model, task, cfg = spec.build()
    assert cfg.seed == 5
    config = PRESETS["attention-tiny"].config(d_model=16, vocab_size=task.vocab_size).to_dict()
    torch.manual_seed(5)
    again = build_model({"type": "lm", "config": config}, task)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name

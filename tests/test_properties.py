"""Property tests: any model config or task arguments give either a clear ``InputError`` or something that works.

Hypothesis draws configurations far outside the presets (zero or negative sizes, unknown names, settings for
mixers no layer uses, unknown mixer arguments, odd head counts); whatever it draws must be refused with
``InputError`` (the one type the CLI turns into a one-line message) or build a model whose forward pass gives
finite logits of the right shape. The same for every registered task's numeric arguments: refused, or
``build`` returns well-formed data. Derandomised, so CI sees the same examples on every run.
"""

import inspect
from collections import Counter

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqzoo.blocks import BLOCKS
from seqzoo.errors import InputError
from seqzoo.mixers import MIXERS
from seqzoo.models.base import MODEL_TYPES
from seqzoo.models.config import ModelConfig
from seqzoo.tasks import TASKS, build_task

PROPERTY = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow], database=None
)

mixer_names = st.sampled_from([*sorted(MIXERS), "no_such_mixer"])
# small argument dicts: real argument names of some mixers (with odd values) and names no mixer has
mixer_args = st.dictionaries(
    st.sampled_from(["n_heads", "n_blocks", "window", "chunk_size", "no_such_arg"]),
    st.integers(-1, 9),
    max_size=2,
)


@st.composite
def model_configs(draw):
    pattern = draw(st.lists(mixer_names, min_size=0, max_size=3))
    named = draw(st.lists(st.sampled_from(pattern or ["attention"]), max_size=2)) + draw(
        st.lists(mixer_names, max_size=1)
    )
    return {
        "vocab_size": draw(st.integers(-2, 40)),
        "d_model": draw(st.sampled_from([-4, 0, 3, 8, 16, 24])),
        "n_layers": draw(st.integers(-1, 3)),
        "pattern": pattern,
        "mixer_kwargs": {name: draw(mixer_args) for name in named},
        "block": draw(st.sampled_from([*sorted(BLOCKS), "no_such_block"])),
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm", "no_such_norm"])),
        "mlp": draw(st.sampled_from(["swiglu", "gelu", "none", "no_such_mlp"])),
        "dropout": draw(st.sampled_from([-0.1, 0.0, 0.5, 1.0])),
        "model_type": draw(st.sampled_from(sorted(MODEL_TYPES))),
    }


@st.composite
def valid_model_configs(draw):
    """Configurations inside every range: registered mixers with their tiny contract-test arguments, sizes > 0, a
    dropout below 1. Without them nearly every draw above is refused and the "runs" branch is never taken."""
    pattern = draw(st.lists(st.sampled_from(sorted(MIXERS)), min_size=1, max_size=3))
    return {
        "vocab_size": draw(st.integers(2, 40)),
        "d_model": 16,  # the width the mixers' test_kwargs are made for (tests/test_mixer_contract.py)
        "n_layers": draw(st.integers(1, 3)),
        "pattern": pattern,
        "mixer_kwargs": {name: dict(MIXERS[name].test_kwargs) for name in pattern},
        "block": draw(st.sampled_from(sorted(BLOCKS))),
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm"])),
        "mlp": draw(st.sampled_from(["swiglu", "gelu", "none"])),
        "dropout": draw(st.sampled_from([0.0, 0.5])),
        "model_type": draw(st.sampled_from(sorted(MODEL_TYPES))),
    }


def _build(fields):
    fields = dict(fields)
    model_type = fields.pop("model_type")
    return MODEL_TYPES[model_type](ModelConfig(**fields))


def _refused_clearly_or_runs(fields) -> str:
    """``"refused"`` (an ``InputError`` that says what is wrong) or ``"ran"`` (finite logits of the right shape)."""
    try:
        model = _build(fields)
    except InputError as e:
        assert str(e), "an InputError must say what is wrong"
        return "refused"
    model.eval()
    ids = torch.randint(0, fields["vocab_size"], (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(ids)
    logits = out.logits
    assert logits.shape[:2] == (2, 6) and torch.isfinite(logits).all()
    return "ran"


def test_model_config_is_refused_clearly_or_runs():
    """Both branches must occur: a property whose every draw is refused never checks that a model runs."""
    outcomes = Counter()

    @PROPERTY
    @given(st.one_of(model_configs(), valid_model_configs()))
    def check(fields):
        outcomes[_refused_clearly_or_runs(fields)] += 1

    check()
    assert outcomes["refused"] > 0 and outcomes["ran"] > 0, dict(outcomes)


def _int_params(task_cls):
    """The task constructor's int-valued arguments (defaults that are ints), the only ones drawn here."""
    return {
        name: p.default
        for name, p in inspect.signature(task_cls.__init__).parameters.items()
        if isinstance(p.default, int) and not isinstance(p.default, bool)
    }


OFFLINE_TASKS = sorted(
    name for name, cls in TASKS.items() if "path" not in inspect.signature(cls.__init__).parameters and _int_params(cls)
)


@st.composite
def task_arguments(draw):
    name = draw(st.sampled_from(OFFLINE_TASKS))
    params = _int_params(TASKS[name])
    chosen = draw(st.lists(st.sampled_from(sorted(params)), unique=True, max_size=3))
    return name, {k: draw(st.integers(-2, 2 * max(params[k], 2) + 3)) for k in chosen}


@PROPERTY
@given(task_arguments())
def test_task_arguments_are_refused_clearly_or_build(name_args):
    name, args = name_args
    try:
        task = build_task(name, **args)
        x, y = task.build(3, seed=0, split="train")
    except InputError as e:
        assert str(e)
        return
    except ImportError:  # an optional dependency (e.g. scikit-learn for digits) is absent: not bad input
        return
    assert x.shape[0] == 3 and y.shape[0] == 3
    assert int(x.min()) >= 0 and int(x.max()) < task.vocab_size
    if getattr(task, "kind", "lm") == "lm":
        assert x.shape == y.shape and x.shape[1] <= task.seq_len
        scored = y[y >= 0]
        assert scored.numel() == 0 or int(scored.max()) < task.vocab_size


# ------------------------------------------------------------------ the findings, as explicit cases
def test_settings_for_a_mixer_no_layer_uses_are_refused():
    """Found: ``mixer_kwargs`` under a mixer name the pattern does not use was silently ignored."""
    import pytest

    with pytest.raises(InputError, match=r"mixer_kwargs has settings for \['local_attention'\]"):
        ModelConfig(d_model=16, pattern=["attention"], mixer_kwargs={"local_attention": {"window": 4}})
    with pytest.raises(InputError, match=r"mixer 'attention' has no argument\(s\) \['windw'\]"):
        MODEL_TYPES["lm"](ModelConfig(d_model=16, pattern=["attention"], mixer_kwargs={"attention": {"windw": 4}}))


def test_a_saved_config_with_unused_settings_loads_with_a_warning(tmp_path):
    import json

    import pytest

    import seqzoo

    model = seqzoo.build_model("xlstm10-tiny").eval()
    model.save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["mixer_kwargs"]["slstm"] = {"n_heads": 4}  # what the xLSTM[1:0] presets used to write
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.warns(FutureWarning, match=r"mixer_kwargs for \['slstm'\] is ignored"):
        loaded = type(model).from_pretrained(tmp_path).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_an_unknown_argument_of_a_mixer_that_passes_kwargs_on_is_refused_by_name():
    """Found by drawing valid configs beside invalid ones: ``local_attention`` and ``gateloop_softmax`` pass
    ``**kwargs`` to their base class, so an unknown argument escaped the named check as a bare ``TypeError``."""
    import pytest

    for name in ("local_attention", "gateloop_softmax"):
        with pytest.raises(InputError, match=rf"mixer '{name}' has no argument\(s\) \['n_blocks'\]"):
            MODEL_TYPES["lm"](ModelConfig(d_model=16, pattern=[name], mixer_kwargs={name: {"n_blocks": 2}}))

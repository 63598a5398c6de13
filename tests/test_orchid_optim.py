"""Hyena's optimiser rule for the implicit filters of Orchid and the static long conv (arXiv:2302.10866): the
filter FFN and its Sin frequencies at the filter rate without weight decay, the positional features at their own
rate without weight decay, everything else at the trainer's default; honoured by every trainer (``train`` and
the sweep built on it, the RMT curriculum) through the mixers' ``optim_overrides`` (docs/orchid.md)."""

import json
import re

import pytest
import torch
from torch import nn

from seqzoo.errors import InputError
from seqzoo.experiments import EXPERIMENTS
from seqzoo.experiments.orchid import filter_optim
from seqzoo.models import Encoder
from seqzoo.models.presets.orchid import orchid_ar_config
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, build_optimizer, param_groups, train
from seqzoo.train.curriculum import OptimConfig, build_stage_optimizer

FILTER = re.compile(r"blocks\.\d+\.mixer\.filter(_res)?\.(freq|linears\.\d+\.(weight|bias))$")
POS = re.compile(r"blocks\.\d+\.mixer\.filter(_res)?\.pos_z$")
RULE = {"param_groups": True, "filter_lr": 3e-3, "pos_lr": 7e-6, "filter_wd": 0.0}


def ar_encoder(mixer="orchid", **kw):
    torch.manual_seed(0)
    return Encoder(orchid_ar_config(mixer, 10, 18, d_model=16, n_layers=2, filter_width=8, **kw))


def settings(groups):
    return {n: (g["lr"], g["weight_decay"]) for g in groups for n in g["names"]}


@pytest.mark.parametrize("mixer", ["orchid", "long_conv"])
def test_exactly_the_filter_parameters_get_their_own_rate_and_no_decay(mixer):
    model = ar_encoder(mixer, **RULE)
    cfg = TrainConfig(lr=2e-3, weight_decay=0.1)
    got = settings(build_optimizer(model, cfg).param_groups)
    params = dict(model.named_parameters())
    assert set(got) == set(params)
    assert sum(n.endswith(".freq") for n in got) == 4  # 2 layers x (h0, residual filter), each with Sin frequencies
    assert sum(bool(POS.match(n)) for n in got) == 4
    for name, p in params.items():
        if FILTER.match(name):
            want = (3e-3, 0.0)
        elif POS.match(name):
            want = (7e-6, 0.0)
        else:  # the default rule: decay on matrices except embeddings (skip, conditioning, projections included)
            want = (2e-3, 0.1 if p.dim() >= 2 and not name.startswith("embed.") else 0.0)
        assert got[name] == want, name
    # one group for everything without the rule: pos_z and freq are matrices, so they are decayed
    one = settings(param_groups(ar_encoder(mixer), cfg))
    assert one["blocks.0.mixer.filter.pos_z"] == one["blocks.0.mixer.filter.freq"] == (2e-3, 0.1)


def test_train_honours_the_rule(tmp_path):
    """A frozen positional feature (pos_lr 0, as Hyena's recall configs) does not move; the filter does."""
    model = ar_encoder(**{**RULE, "pos_lr": 0.0})
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    task = build_task("associative_recall", vocab_size=10, seq_len=16)
    train(model, task, TrainConfig(steps=2, batch_size=4, eval_every=2, eval_samples=8, progress=False))
    after = dict(model.named_parameters())
    assert torch.equal(after["blocks.0.mixer.filter.pos_z"], before["blocks.0.mixer.filter.pos_z"])
    assert not torch.equal(after["blocks.0.mixer.filter.freq"], before["blocks.0.mixer.filter.freq"])


class Wrapper(nn.Module):
    """A model that is not a SeqzooModel (as RMT wraps its backbone): the hints are still found."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner


def test_curriculum_and_wrapped_models_honour_the_rule():
    opt = build_stage_optimizer(Wrapper(ar_encoder(**RULE)), OptimConfig(lr=1e-3, weight_decay=0.01))
    got = settings(opt.param_groups)
    assert got["inner.blocks.1.mixer.filter_res.freq"] == (3e-3, 0.0)
    assert got["inner.blocks.1.mixer.filter_res.pos_z"] == (7e-6, 0.0)
    assert got["inner.blocks.1.mixer.filter_res.skip"] == (1e-3, 0.01)  # the curriculum decays every other parameter
    assert got["inner.embed.weight"] == (1e-3, 0.01)
    # no hints: one group over every parameter, as the curriculum always built it
    plain = build_stage_optimizer(Wrapper(ar_encoder()), OptimConfig(lr=1e-3, weight_decay=0.01))
    assert len(plain.param_groups) == 1 and len(plain.param_groups[0]["params"]) == len(got)
    with pytest.raises(InputError, match="decay"):
        param_groups(ar_encoder(), TrainConfig(), decay="vectors")


def test_orchid_ar_runs_with_the_rule_and_keys_it(tmp_path):
    base = dict(vocab_sizes="10", lengths="8", seeds="0", steps=2, eval_every=2, eval_samples=8, batch_size=4)
    EXPERIMENTS["orchid-ar"].run(tmp_path, models="long_conv,attention", d_model=16, **base)
    rows = {r["model"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    args = {
        m: json.loads((tmp_path / "runs" / r["run"] / "config.json").read_text())["config"]["model"]["args"]
        for m, r in rows.items()
    }
    assert args["long_conv"] == {
        "mixer": "long_conv",
        "d_model": 16,
        "n_layers": 2,
        "param_groups": True,
        "filter_lr": 1e-3,
        "pos_lr": 1e-5,
        "filter_wd": 0.0,
    }
    assert args["attention"] == {"mixer": "attention", "d_model": 16, "n_layers": 2}
    ckpt = torch.load(tmp_path / "runs" / rows["long_conv"]["run"] / "train" / "checkpoint.pt", weights_only=False)
    got = {n: (g["base_lr"], g["weight_decay"]) for g in ckpt["optimizer"]["param_groups"] for n in g["names"]}
    assert got["blocks.0.mixer.filter.freq"] == (1e-3, 0.0) and got["blocks.0.mixer.filter.pos_z"] == (1e-5, 0.0)
    assert got["blocks.0.mixer.in_proj.weight"] == (2e-3, 0.1)
    EXPERIMENTS["orchid-ar"].run(tmp_path, models="long_conv", d_model=16, filter_lr=5e-4, **base)
    other = json.loads((tmp_path / "results.json").read_text())[0]["run"]
    assert other != rows["long_conv"]["run"]  # another filter rate is another run


def test_filter_optim_options():
    assert filter_optim(1e-3, "0", 0, "false") == {"param_groups": False}
    assert filter_optim("2e-3", 0, 0.1, True) == {
        "param_groups": True,
        "filter_lr": 2e-3,
        "pos_lr": 0.0,
        "filter_wd": 0.1,
    }
    for bad in ({"filter_lr": -1.0}, {"pos_lr": "fast"}, {"filter_wd": float("inf")}):
        name = next(iter(bad))
        with pytest.raises(InputError, match=name):
            filter_optim(**{"filter_lr": 1e-3, "pos_lr": 1e-5, "filter_wd": 0.0, "param_groups": True, **bad})

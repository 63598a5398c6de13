"""seqzoo.convert on disk: sharded reading / writing with bounded memory, dtype handling, errors, the CLI.

No transformers needed: the transformers-format folders are written by seqzoo's own way out (``to_transformers``),
whose equality with transformers' classes tests/test_convert.py checks.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import seqzoo
from seqzoo import LanguageModel
from seqzoo.cli import main
from seqzoo.convert import convert, from_transformers, to_transformers
from seqzoo.convert.safetensors_io import INDEX, CheckpointReader, ShardedWriter, parse_size
from seqzoo.errors import InputError
from seqzoo.models.presets.griffin import bf16_sqrt


@pytest.fixture
def griffin():
    torch.manual_seed(0)
    config = seqzoo.build_model("griffin-tiny", vocab_size=64).config  # 4 heads = 4 RG-LRU gate blocks
    # RecurrentGemma always scales embeddings by sqrt(D) (in bf16) and soft-caps logits
    model = LanguageModel(config.replace(embed_scale=bf16_sqrt(config.d_model), logit_softcap=30.0)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _tensor_bytes(folder) -> dict[str, int]:
    reader = CheckpointReader(folder)
    names = reader.keys()
    return {k: reader.get(k).numel() * reader.get(k).element_size() for k in names}


def test_sharded_conversion_keeps_memory_bounded(griffin, tmp_path):
    """A model of N bytes in shards of N/10: the reader never holds more than a few tensors alive and the writer
    never buffers more than one shard (instrumented byte counts, not timings)."""
    to_transformers(griffin, tmp_path / "hf", max_shard_bytes=10**9)
    sizes = _tensor_bytes(tmp_path / "hf")
    total, biggest = sum(sizes.values()), max(sizes.values())
    shard = total // 10
    stats = convert(tmp_path / "hf", tmp_path / "sz", max_shard_bytes=shard)
    assert stats["total_bytes"] == total and stats["read_bytes"] == total
    assert stats["peak_read_bytes"] <= 2 * biggest < total / 4  # one rule's tensors at a time, never all
    assert stats["peak_shard_bytes"] <= max(shard, biggest)
    assert len(stats["files"]) >= 8 and (tmp_path / "sz" / INDEX).is_file()
    index = json.loads((tmp_path / "sz" / INDEX).read_text())
    assert index["metadata"]["total_size"] == total and set(index["weight_map"].values()) == set(stats["files"])
    loaded = LanguageModel.from_pretrained(tmp_path / "sz")  # seqzoo reads the sharded folder
    for k, v in griffin.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    # the way back from a sharded seqzoo folder, into shards again, reads lazily too
    back = convert(tmp_path / "sz", tmp_path / "hf2", max_shard_bytes=shard)
    assert back["peak_read_bytes"] <= 2 * biggest and len(back["files"]) >= 8
    again = from_transformers(tmp_path / "hf2")
    for k, v in griffin.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k


def test_reader_counts_live_tensors(tmp_path):
    save_file({"a": torch.zeros(1000), "b": torch.zeros(500)}, str(tmp_path / "model.safetensors"))
    r = CheckpointReader(tmp_path)
    a = r.get("a")
    assert r.live_bytes == 4000
    b = r.get("b")
    assert r.live_bytes == 6000 and r.peak_live_bytes == 6000
    del a, b
    assert r.live_bytes == 0 and r.peak_live_bytes == 6000 and r.bytes_read == 6000


def test_writer_shards_and_replaces_stale_files(tmp_path):
    (tmp_path / "model-00009-of-00009.safetensors").write_text("stale")
    w = ShardedWriter(tmp_path, max_shard_bytes=4000)
    for i in range(5):
        w.add(f"t{i}", torch.full((400,), float(i)))  # 1600 bytes each: two per shard
    files = w.close()
    assert [f.name for f in files] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert not (tmp_path / "model-00009-of-00009.safetensors").exists()
    r = CheckpointReader(tmp_path)
    assert sorted(r.keys()) == [f"t{i}" for i in range(5)] and float(r.get("t4")[0]) == 4.0
    assert w.peak_pending_bytes == 3200


def test_dtype_is_kept_unless_asked(griffin, tmp_path):
    griffin.to(torch.bfloat16)
    to_transformers(griffin, tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(str(tmp_path / "hf" / "model.safetensors")).values()} == {torch.bfloat16}
    convert(tmp_path / "hf", tmp_path / "sz")
    assert {t.dtype for t in load_file(str(tmp_path / "sz" / "model.safetensors")).values()} == {torch.bfloat16}
    convert(tmp_path / "hf", tmp_path / "sz32", dtype="float32")
    assert {t.dtype for t in load_file(str(tmp_path / "sz32" / "model.safetensors")).values()} == {torch.float32}
    assert LanguageModel.from_pretrained(tmp_path / "sz32").embed.weight.dtype == torch.float32


def test_other_model_type_is_refused(tmp_path, capsys):
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(InputError, match="model_type 'llama' is not supported"):
        convert(tmp_path / "llama", tmp_path / "out")
    assert main(["convert", str(tmp_path / "llama"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "model_type 'llama'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_shard_is_refused(griffin, tmp_path, capsys):
    to_transformers(griffin, tmp_path / "hf", max_shard_bytes=20_000)
    shards = sorted(p.name for p in (tmp_path / "hf").glob("model-*.safetensors"))
    assert len(shards) > 2
    (tmp_path / "hf" / shards[1]).unlink()
    with pytest.raises(InputError, match=f"missing shard '{shards[1]}'"):
        convert(tmp_path / "hf", tmp_path / "out")
    assert main(["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert f"missing shard '{shards[1]}'" in capsys.readouterr().err


def _rewrite(folder, edit) -> None:
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


def test_wrong_shape_is_refused(griffin, tmp_path, capsys):
    to_transformers(griffin, tmp_path / "hf")
    key = "model.layers.0.temporal_block.linear_x.weight"

    def shrink(t):
        t[key] = t[key][:-1].clone()

    _rewrite(tmp_path / "hf", shrink)
    with pytest.raises(InputError, match=f"{key}.*shape"):
        convert(tmp_path / "hf", tmp_path / "out")
    assert main(["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert key in capsys.readouterr().err

    def flatten_conv(t):  # a layout transform on the wrong rank is refused by name too, not a traceback
        k = "model.layers.0.temporal_block.conv_1d.weight"
        t[k] = t[k][:, 0, :].clone()

    to_transformers(griffin, tmp_path / "hf")
    _rewrite(tmp_path / "hf", flatten_conv)
    with pytest.raises(InputError, match="conv_1d.weight"):
        from_transformers(tmp_path / "hf")


def test_unknown_and_missing_tensors_are_refused_by_name(griffin, tmp_path):
    to_transformers(griffin, tmp_path / "hf")
    _rewrite(tmp_path / "hf", lambda t: t.update({"model.layers.0.extra.weight": torch.zeros(2)}))
    with pytest.raises(InputError, match="unknown tensor.*model.layers.0.extra.weight"):
        convert(tmp_path / "hf", tmp_path / "out")
    to_transformers(griffin, tmp_path / "hf")
    _rewrite(tmp_path / "hf", lambda t: t.pop("model.final_norm.weight"))
    with pytest.raises(InputError, match="missing tensor.*model.final_norm.weight"):
        convert(tmp_path / "hf", tmp_path / "out")


def test_unsupported_settings_are_refused_by_name(griffin, tmp_path):
    to_transformers(griffin, tmp_path / "hf")
    cfg_path = tmp_path / "hf" / "config.json"
    good = json.loads(cfg_path.read_text())
    for field, value in (("hidden_activation", "relu"), ("block_types", ["recurrent", "mamba"])):
        cfg_path.write_text(json.dumps({**good, field: value}))
        with pytest.raises(InputError, match=field):
            convert(tmp_path / "hf", tmp_path / "out")
    # the way out refuses a model transformers cannot express
    with pytest.raises(InputError, match="no transformers class"):
        to_transformers(seqzoo.build_model("attention-tiny", vocab_size=64), tmp_path / "x")
    with pytest.raises(InputError, match="no transformers class"):
        to_transformers(seqzoo.build_model("xlstm-tiny"), tmp_path / "x")  # has sLSTM layers
    with pytest.raises(InputError, match="variant '7b'"):
        to_transformers(seqzoo.build_model("xlstm10-tiny"), tmp_path / "x")  # NeurIPS mLSTM layers


def test_xlstm_use_bias_is_refused(tmp_path):
    model = seqzoo.build_model("xlstm7b-tiny", d_model=128)  # q/k width 64: transformers' cache fits
    to_transformers(model, tmp_path / "hf")
    cfg_path = tmp_path / "hf" / "config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "use_bias": True}))
    with pytest.raises(InputError, match="use_bias"):
        from_transformers(tmp_path / "hf")


def test_parse_size():
    assert parse_size("2GB") == 2 * 10**9 and parse_size("64KiB") == 65536 and parse_size("123") == 123
    for bad in ("lots", "-1MB", "0"):
        with pytest.raises(InputError, match="max-shard-size"):
            parse_size(bad)


def test_convert_cli_round_trip(griffin, tmp_path, capsys):
    griffin.save_pretrained(tmp_path / "sz")
    assert main(["convert", str(tmp_path / "sz"), "--out", str(tmp_path / "hf"), "--max-shard-size", "50KB"]) == 0
    assert "shards" in capsys.readouterr().out
    with safe_open(str(next((tmp_path / "hf").glob("model-00001-*.safetensors"))), "pt") as f:
        assert all(k.startswith(("model.", "lm_head.")) for k in f.keys())  # noqa: SIM118
    assert main(["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "sz2"), "--no-progress"]) == 0
    again = LanguageModel.from_pretrained(tmp_path / "sz2")
    for k, v in griffin.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k


@pytest.mark.parametrize(
    ("kind", "case", "config_key"),
    [("recurrentgemma", "recurrentgemma/griffin", "griffin_config"), ("xlstm_large", "xlstm/xlstm_large", "config")],
)
def test_from_official_package_weights(shared, kind, case, config_key):
    """The official packages' state dicts (parity fixtures, no install) through ``from_official``: their logits."""
    from seqzoo.convert import from_official
    from seqzoo.parity.fixtures import load_fixture

    f = load_fixture(shared / "fixtures" / case)
    model = from_official(f["official"], f["meta"][config_key], kind)
    ids = f["input"]["tokens" if kind == "recurrentgemma" else "input_ids"]
    extra = {"segment_pos": f["input"]["segment_pos"]} if kind == "recurrentgemma" else {}
    with torch.no_grad():
        got, ref = model(ids, **extra).logits, f["output"]["logits"]
    assert float((got - ref).abs().max() / ref.abs().max()) <= 1e-5
    with pytest.raises(InputError, match="kind must be one of"):
        from_official(f["official"], f["meta"][config_key], "mamba")


def test_convert_help(capsys):
    from seqzoo.cli import make_parser

    with pytest.raises(SystemExit) as e:
        main(["convert", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--out" in out and "--dtype" in out and "--max-shard-size" in out
    assert "convert" in make_parser().format_help()

"""Orchid models, blocks, tasks and presets: block-diagonal MLP, M2 layer, ViT classifier, recall and image tasks."""

import pytest
import torch

import seqzoo
from seqzoo.blocks.orchid import BlockDiagonalLinear
from seqzoo.errors import InputError, MissingFileError
from seqzoo.models.presets.orchid import orchid_ar_config, orchid_bert_config
from seqzoo.tasks import IGNORE_INDEX, build_task


def test_block_diagonal_linear_equals_dense_block_matrix():
    torch.manual_seed(0)
    lin = BlockDiagonalLinear(8, 12, nb=4).double()
    dense = torch.block_diag(*lin.weight)  # (12, 8)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(lin(x), x @ dense.T + lin.bias)
    with pytest.raises(ValueError, match="nb"):
        BlockDiagonalLinear(8, 10, nb=4)
    with pytest.raises(ValueError, match="in_features=8"):
        lin(torch.randn(2, 7, dtype=torch.float64))


def test_orchid_bert_tiny_mlm_and_cls():
    model = seqzoo.build_model("orchid-bert-tiny")
    ids = torch.randint(0, 256, (2, 37))
    out = model(ids, labels=ids)
    assert out.logits.shape == (2, 37, 256) and torch.isfinite(out.loss)
    out.loss.backward()
    cls = model(ids, labels=torch.tensor([0, 1]), head="cls")
    assert cls.logits.shape == (2, 2)
    assert type(model.blocks[0]).__name__ == "M2Block"


@pytest.mark.parametrize("name,published", [("orchid-bert-base", 77e6), ("orchid-bert-large", 254e6)])
def test_bert_parameter_counts(name, published):
    with torch.device("meta"):  # shapes only: no memory, no init cost
        n = seqzoo.build_model(name).num_parameters()
    assert abs(n - published) / published <= 0.02, n


def test_vision_classifier_patches_and_roundtrip(tmp_path):
    model = seqzoo.build_model(
        "orchid-vit-digits",
        n_layers=1,
        d_model=32,
        mixer_kwargs={"orchid": {"l_max": 16, "filter_width": 16}},
        extra={"mlp_nblocks": 4, "image_size": 8, "patch_size": 2, "channels": 1, "max_value": 16.0},
    )
    pix = torch.randint(0, 17, (3, 64))
    patches = model.patchify(pix)
    assert patches.shape == (3, 16, 4)
    img = pix.reshape(3, 8, 8)
    assert torch.equal(patches[:, 1], img[:, 0:2, 2:4].reshape(3, 4).float() / 16)  # raster order, 2nd patch
    out = model(pix, labels=torch.tensor([0, 3, 9]))
    assert out.logits.shape == (3, 10) and torch.isfinite(out.loss)
    model.save_pretrained(tmp_path)
    again = seqzoo.models.SeqzooModel.from_pretrained(tmp_path)
    torch.testing.assert_close(again(pix).logits, model(pix).logits)
    with pytest.raises(ValueError, match="pixels"):
        model(torch.randint(0, 17, (3, 63)))


def test_associative_recall_task():
    task = build_task("associative_recall", vocab_size=20, seq_len=16)
    x, y = task.build(50, seed=0)
    assert x.shape == y.shape == (50, 18)
    assert (y[:, :-1] == IGNORE_INDEX).all()
    assert (x[:, -2] == task.query_token).all()
    keys, vals = x[:, 0:16:2], x[:, 1:16:2]
    assert (keys < task.n_keys).all() and (vals >= task.n_keys).all() and (vals < task.vocab_size - 2).all()
    for i in range(50):  # the answer is the value paired with the query key in the context
        hit = keys[i] == x[i, -1]
        assert hit.any() and (vals[i][hit] == y[i, -1]).all()
    x2, _ = task.build(50, seed=0)
    assert torch.equal(x, x2) and not torch.equal(task.build(50, seed=0, split="valid")[0], x)
    with pytest.raises(ValueError, match="even"):
        build_task("associative_recall", vocab_size=20, seq_len=15)
    with pytest.raises(ValueError, match="vocab_size"):
        build_task("associative_recall", vocab_size=4, seq_len=16)


def test_ar_models_are_equal_size():
    n = {m: seqzoo.Encoder(orchid_ar_config(m, 30, 130)).num_parameters() for m in ("orchid", "long_conv")}
    assert abs(n["orchid"] - n["long_conv"]) / n["orchid"] <= 0.02


def test_digits_task():
    pytest.importorskip("sklearn")
    task = build_task("digits")
    x, y = task.build(40, seed=0)
    assert x.shape == (40, 64) and y.shape == (40,) and x.dtype == torch.long
    assert int(x.max()) <= 16 and int(x.min()) >= 0 and int(y.max()) <= 9
    sizes = {split: task.split_size(split) for split in ("train", "valid", "test")}
    assert sizes == {"train": 1293, "valid": 144, "test": 360}
    from seqzoo.tasks.images import digits_split_indices

    idx = {k: set(v.tolist()) for k, v in digits_split_indices().items()}
    assert not (idx["train"] & idx["valid"]) and not (idx["train"] & idx["test"]) and not (idx["valid"] & idx["test"])
    assert idx["train"] | idx["valid"] | idx["test"] == set(range(1797))


def _write_idx(path, array):
    import gzip
    import struct

    header = struct.pack(">HBB", 0, 0x08, array.dim()) + struct.pack(">" + "I" * array.dim(), *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + bytes(array.flatten().tolist()))


def test_fashion_mnist_reader_on_generated_idx_files(tmp_path):
    """The IDX gzip reader and the splits, on 24 train / 6 test 28x28 images written here (pixel = image index)."""
    train = torch.arange(24).view(24, 1, 1).expand(24, 28, 28).to(torch.uint8)
    test = (100 + torch.arange(6)).view(6, 1, 1).expand(6, 28, 28).to(torch.uint8)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", train)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", (torch.arange(24) % 10).to(torch.uint8))
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", test)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", (torch.arange(6) % 10).to(torch.uint8))
    task = build_task("fashion-mnist", path=str(tmp_path))
    assert {s: task.split_size(s) for s in ("train", "valid", "test")} == {"train": 22, "valid": 2, "test": 6}
    x, y = task.build(22, seed=0, split="train")
    assert x.shape == (22, 784) and x.dtype == torch.long
    assert torch.equal(x[:, 0], x[:, 783]) and torch.equal(y, x[:, 0] % 10)  # rows intact, labels aligned
    assert sorted(x[:, 0].tolist()) == list(range(22))  # the first 22 images, each once
    xv, _ = task.build(2, seed=0, split="valid")
    assert sorted(xv[:, 0].tolist()) == [22, 23]
    xt, yt = task.build(6, seed=0, split="test")
    assert sorted(xt[:, 0].tolist()) == list(range(100, 106)) and torch.equal(yt, (xt[:, 0] - 100) % 10)

    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", torch.zeros(5, dtype=torch.uint8))  # one label short
    with pytest.raises(InputError, match="6 t10k images but 5 labels"):
        build_task("fashion-mnist", path=str(tmp_path)).build(2, seed=0, split="test")
    with pytest.raises(MissingFileError, match="Fashion-MNIST IDX files not found"):
        build_task("fashion-mnist", path=str(tmp_path / "absent")).build(2, seed=0)


def test_fashion_mnist_task_if_installed():
    task = build_task("fashion-mnist")
    try:
        x, y = task.build(8, seed=0, split="test")
    except FileNotFoundError:
        pytest.skip("dataset-fashion-mnist is not installed")
    assert x.shape == (8, 784) and int(x.max()) <= 255


def test_orchid_encoder_runs_and_lm_refuses_generation():
    """Orchid is non-causal: an encoder uses it; a LanguageModel over it cannot generate."""
    assert seqzoo.MIXERS["orchid"].causal is False
    enc = seqzoo.Encoder(orchid_bert_config(32, n_layers=1, filter_width=8, seq_len=16, vocab_size=50))
    assert enc(torch.randint(0, 50, (1, 16))).logits.shape == (1, 16, 50)
    lm = seqzoo.LanguageModel(orchid_ar_config("orchid", 50, 16, d_model=16, n_layers=1))
    with pytest.raises(ValueError, match="causal"):
        lm.generate(torch.randint(0, 50, (1, 4)), max_new_tokens=2)


# ------------------------------------------------------------------ BERT / M2-BERT encoder pieces
def _bert(**kw):
    cfg = orchid_bert_config(16, n_layers=2, filter_width=8, seq_len=12, vocab_size=30)
    return seqzoo.Encoder(cfg.replace(**kw)).double()


def test_bert_embeddings_positions_types_and_norm():
    torch.manual_seed(0)
    enc = _bert()
    ids = torch.randint(0, 30, (2, 10))
    types = torch.randint(0, 2, (2, 10))
    x, readd = enc.embed_inputs(ids, token_type_ids=types)
    pos = enc.pos_embed_table.weight[:10]
    manual = enc.embed_norm(enc.embed.weight[ids] + pos + enc.type_embed.weight[types])
    torch.testing.assert_close(x, manual, rtol=0, atol=1e-12)
    torch.testing.assert_close(readd[0], pos, rtol=0, atol=0)
    # default token type is 0, as in BERT
    x0, _ = enc.embed_inputs(ids)
    torch.testing.assert_close(x0, enc.embed_inputs(ids, token_type_ids=torch.zeros_like(ids))[0])
    # token types change the output
    assert not torch.allclose(enc(ids).logits, enc(ids, token_type_ids=torch.ones_like(ids)).logits)


def test_m2_readds_positions_after_every_layer():
    torch.manual_seed(0)
    enc = _bert()
    ids = torch.randint(0, 30, (2, 10))
    x, pos = enc.embed_inputs(ids)
    for block in enc.blocks:
        x = block(x)[0] + pos
    torch.testing.assert_close(enc(ids).hidden, enc.norm(x), rtol=0, atol=1e-12)
    plain = _bert(readd_positions=False)
    plain.load_state_dict(enc.state_dict())
    assert not torch.allclose(plain(ids).hidden, enc(ids).hidden)


def test_bert_mlm_transform_and_pooler_heads():
    torch.manual_seed(0)
    enc = _bert()
    ids = torch.randint(0, 30, (3, 12))
    out = enc(ids)
    h = out.hidden
    torch.testing.assert_close(out.logits, enc.mlm_head(enc.mlm_transform(h)), rtol=0, atol=0)
    assert enc.mlm_head.weight is enc.embed.weight  # tied decoder, own bias
    cls = enc(ids, head="cls", labels=torch.tensor([0, 1, 1]))
    torch.testing.assert_close(cls.logits, enc.cls_head(torch.tanh(enc.pooler[0](h[:, 0]))), rtol=0, atol=1e-12)
    cls.loss.backward()
    assert enc.pooler[0].weight.grad is not None and enc.pos_embed_table.weight.grad.abs().sum() > 0


def test_bert_pieces_roundtrip(tmp_path):
    torch.manual_seed(0)
    enc = _bert().float()
    enc.save_pretrained(tmp_path)
    back = seqzoo.Encoder.from_pretrained(tmp_path)
    ids = torch.randint(0, 30, (2, 12))
    torch.testing.assert_close(back(ids).logits, enc(ids).logits)


def test_bert_pieces_bad_input():
    enc = _bert()
    with pytest.raises(ValueError, match="max_positions=12"):
        enc(torch.randint(0, 30, (1, 13)))
    with pytest.raises(ValueError, match="type_vocab_size=2"):
        enc(torch.randint(0, 30, (1, 5)), token_type_ids=torch.full((1, 5), 2))
    with pytest.raises(ValueError, match=r"token_type_ids must have shape \(1, 5\)"):
        enc(torch.randint(0, 30, (1, 5)), token_type_ids=torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="no token-type embeddings"):
        _bert(type_vocab_size=0)(torch.randint(0, 30, (1, 5)), token_type_ids=torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="readd_positions needs max_positions"):
        orchid_bert_config(16, n_layers=1, seq_len=12, vocab_size=30).replace(max_positions=None)
    with pytest.raises(ValueError, match="max_positions must be None or a positive int"):
        orchid_bert_config(16, n_layers=1, seq_len=12, vocab_size=30).replace(max_positions=0)
    with pytest.raises(ValueError, match="Encoder only"):  # a causal LM refuses, rather than ignores, them
        seqzoo.LanguageModel(seqzoo.ModelConfig(vocab_size=30, d_model=16, n_layers=1, max_positions=8))

"""``seqzoo convert SRC --out DIR``: transformers RecurrentGemma / xLSTM folder -> seqzoo folder, or back."""

from __future__ import annotations

import argparse

DESCRIPTION = (
    "Convert a checkpoint folder. A transformers folder (config.json with model_type 'recurrent_gemma' or 'xlstm' "
    "+ model.safetensors or shards with model.safetensors.index.json) becomes a seqzoo folder "
    "(LanguageModel.from_pretrained); a seqzoo folder of a Griffin or xLSTM-7B-style model becomes a folder that "
    "transformers loads with RecurrentGemmaForCausalLM / xLSTMForCausalLM. Tensors are read memory-mapped one at a "
    "time and written in shards of at most --max-shard-size; the dtype is kept unless --dtype is given."
)


def cmd_convert(args: argparse.Namespace) -> int:
    from ..outputs import check_output_dir
    from . import convert
    from .safetensors_io import parse_size

    check_output_dir(args.out, "--out")

    stats = convert(
        args.src,
        args.out,
        dtype=args.dtype,
        max_shard_bytes=parse_size(args.max_shard_size),
        progress=not args.no_progress,
    )
    files = stats["files"]
    shown = files[0] if len(files) == 1 else f"{len(files)} shards ({files[0]} ...)"
    print(f"wrote {stats['out']}: {stats['total_bytes'] / 1e6:.1f} MB of tensors in {shown}")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    s = subparsers.add_parser(
        "convert", help="convert RecurrentGemma / xLSTM checkpoints: transformers <-> seqzoo", description=DESCRIPTION
    )
    s.add_argument("src", help="checkpoint folder (transformers or seqzoo format)")
    s.add_argument("--out", required=True, help="output folder (created; its old weight files are replaced)")
    s.add_argument(
        "--dtype", choices=["float32", "bfloat16", "float16"], help="cast floating tensors (default: keep each dtype)"
    )
    s.add_argument("--max-shard-size", default="2GB", help="largest shard written, e.g. 2GB, 500MB (default 2GB)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_convert)
    return s

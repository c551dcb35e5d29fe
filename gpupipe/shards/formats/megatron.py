"""Megatron-LM ``MMIDIDX`` shards (``P.bin`` + ``P.idx``, `gpupipe.shards.megatron`), with
``data_args.txt`` and ``per_split_data_args.json`` for Megatron's ``--data-args-path`` and
``--per-split-data-args-path``."""

from __future__ import annotations

import os

from gpupipe.io.writer import write_json
from gpupipe.shards.formats.base import ShardFormat
from gpupipe.shards.megatron import IndexedDataset, write_indexed
from gpupipe.shards.routing import SPLIT_ORDER


class MegatronFormat(ShardFormat):
    name = "megatron"
    manifest_format = "megatron-mmidx-v1"
    suffixes = (".bin", ".idx")
    reader = IndexedDataset
    writes_data_args = True

    @classmethod
    def write(cls, prefix, tokens, lengths, *, tokenizer_name):
        return write_indexed(prefix, tokens, lengths)

    @classmethod
    def write_data_args(cls, shards_dir, shards, weights):
        """Every shard prefix (absolute) after its weight, by split: the blend weight from
        ``weights`` (a mixture in weights mode), else the shard's tokens."""
        abs_dir = os.path.abspath(shards_dir)
        per_split = {s: [] for s in SPLIT_ORDER}
        for s in shards:
            w = str(s["tokens"]) if weights is None else repr(float(weights[s["prefix"]]))
            per_split[s["split"]] += [w, os.path.join(abs_dir, s["prefix"])]
        with open(os.path.join(shards_dir, "data_args.txt"), "w", encoding="utf-8") as f:
            f.write(" ".join(per_split["train"]) + "\n")
        write_json(per_split, os.path.join(shards_dir, "per_split_data_args.json"))

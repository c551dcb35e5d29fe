"""datatrove / nanotron ``.ds`` shards: ``P.ds`` (tokens), ``P.ds.index`` (cumulative document
ends, uint64) and ``P.ds.metadata`` (``<tokenizer>|<bytes per token>`` and the token count).
gpupipe writes them and checks them against the manifest; it has no reader of its own."""

from __future__ import annotations

import numpy as np

from gpupipe.io.writer import write_bytes
from gpupipe.shards.formats.base import ShardFormat


def write_datatrove(prefix: str, tokens: np.ndarray, lengths: np.ndarray, tokenizer_name: str):
    """datatrove / nanotron ``.ds`` files: tokens, cumulative end offsets, metadata."""
    dt = np.dtype("<u2") if tokens.dtype.itemsize == 2 else np.dtype("<u4")
    data = tokens.astype(dt)
    ends = np.cumsum(lengths).astype("<u8")
    files = {".ds": data.tobytes(), ".ds.index": ends.tobytes(),
             ".ds.metadata": f"{tokenizer_name}|{dt.itemsize}\n{data.size}\n".encode()}
    return {suffix: write_bytes(payload, prefix + suffix) for suffix, payload in files.items()}


class DatatroveFormat(ShardFormat):
    name = "datatrove"
    manifest_format = "datatrove-ds"
    suffixes = (".ds", ".ds.index", ".ds.metadata")

    @classmethod
    def write(cls, prefix, tokens, lengths, *, tokenizer_name):
        return write_datatrove(prefix, tokens, lengths, tokenizer_name)

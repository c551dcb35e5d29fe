"""exact_dedup: keep one document per identical (optionally normalised) text."""

from __future__ import annotations

import hashlib
import os
from typing import ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from gpupipe import seam
from gpupipe.backend import meta_on, read_partition
from gpupipe.frame import ID, TEXT, text_array
from gpupipe.kernels.hashing import xxh64_strings
from gpupipe.kernels.utf8 import utf8_buffers
from gpupipe.stages.base import GlobalStage, stage
from gpupipe.stages.dedup.common import (
    POS,
    ROW,
    DropLosers,
    Keep,
    clear_audit,
    losers,
    write_losers,
)


def normalized_texts(df: pd.DataFrame, normalize: bool) -> pa.Array:
    arr = text_array(df[TEXT])
    if not normalize:
        return arr
    import pyarrow.compute as pc

    arr = pc.utf8_normalize(arr, form="NFKC")
    arr = pc.utf8_lower(arr)
    return pc.utf8_trim_whitespace(pc.replace_substring_regex(arr, pattern=r"\s+",
                                                              replacement=" "))


def text_hashes(texts: pa.Array | list[str], algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    """Two uint64 halves of md5 (as cuDF's md5 hex, first 16 bytes) or (xxh64, 0)."""
    if not isinstance(texts, pa.Array):
        texts = pa.array(list(texts), pa.large_string())
    n = len(texts)
    if algorithm == "xxhash64":  # compiled, over the Arrow buffers
        return xxh64_strings(*utf8_buffers(texts)), np.zeros(n, dtype=np.uint64)
    raw = b"".join(hashlib.md5(t.encode("utf-8")).digest() for t in texts.to_pylist())
    both = np.frombuffer(raw, dtype=">u8").reshape(n, 2) if n else np.zeros((0, 2), ">u8")
    return both[:, 0].astype(np.uint64), both[:, 1].astype(np.uint64)


def partition_hashes(df, normalize: bool, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    """`text_hashes` of a partition of either backend. xxHash64 of the text as it is runs on the
    partition's own memory (the XXH64 kernel, on the GPU for cuDF); md5 and normalised text are
    computed on the host (cuDF has no NFKC)."""
    if algorithm == "xxhash64" and not normalize:
        h1 = seam.kernels_for(df).xxh64_strings(*seam.text_buffers(df[TEXT]))
        return np.asarray(h1, dtype=np.uint64), np.zeros(len(df), dtype=np.uint64)
    return text_hashes(normalized_texts(seam.to_host(df[[TEXT]]), normalize), algorithm)


class ExactKeys:
    """Partition ``i`` -> its rows' hash, position, length and id (what the shuffle moves), a
    frame of ``backend``."""

    def __init__(self, source, normalize: bool, algorithm: str, backend: str = "pandas"):
        self.source, self.normalize, self.algorithm = source, normalize, algorithm
        self.backend = backend

    def __call__(self, i: int):
        df = read_partition(self.source, i, self.backend).frame
        h1, h2 = partition_hashes(df, self.normalize, self.algorithm)
        length = seam.kernels_for(df).count_chars(*seam.text_buffers(df[TEXT]))
        keys = seam.like(df, pd.DataFrame({
            "h1": h1, "h2": h2, POS: np.full(len(df), i, dtype=np.int64),
            ROW: np.arange(len(df), dtype=np.int64),
            "length": np.asarray(length, dtype=np.int64)}))
        return keys.assign(**{ID: df[ID].reset_index(drop=True)})


def _exact_losers(df: pd.DataFrame, keep: str) -> pd.DataFrame:
    return losers(df, ["h1", "h2"], keep)


@stage("exact_dedup")
class ExactDedup(GlobalStage):
    """Keep one document per identical text (md5 or xxHash64 of the UTF-8 bytes).

    ``normalize`` hashes NFKC, lower-cased, whitespace-collapsed text instead. Documents are
    shuffled by hash; the kept one is chosen by ``keep`` (first in input order, longest,
    smallest id). Every removal is written to ``dedup/duplicates.parquet/`` with the kept id.
    On cuDF the keys are computed and shuffled on the GPU (md5 and ``normalize`` hash on the
    host), and the same documents are removed.
    """

    uses_work_dir: ClassVar[bool] = True
    backends: ClassVar[tuple[str, ...]] = ("pandas", "cudf")
    reasons: ClassVar[tuple[str, ...]] = ("exact_duplicate",)

    hash: Literal["md5", "xxhash64"] = "xxhash64"
    normalize: bool = False
    keep: Keep = "first"

    def apply(self, ddf, ctx=None):
        from gpupipe.io import from_partitions

        src = ctx.source
        meta = meta_on(pd.DataFrame({"h1": np.zeros(0, np.uint64), "h2": np.zeros(0, np.uint64),
                                     POS: np.zeros(0, np.int64), ROW: np.zeros(0, np.int64),
                                     "length": np.zeros(0, np.int64),
                                     ID: pd.Series([], dtype=pd.StringDtype("pyarrow"))}),
                       ctx.backend)
        keys = from_partitions(ExactKeys(src, self.normalize, self.hash, ctx.backend),
                               src.npartitions, meta, "gpupipe-exact-keys")
        shuffled = keys.shuffle(on=["h1", "h2"], npartitions=max(1, src.npartitions))
        lost = shuffled.map_partitions(_exact_losers, self.keep,
                                       meta=losers(meta, ["h1", "h2"], "first"))
        losers_dir = os.path.join(ctx.work_dir, "losers")
        write_losers(ctx.client, lost, losers_dir)
        label = f"{ctx.position}:{self.stage_name}"
        audit_dir = os.path.join(ctx.output_dir, "dedup", "duplicates.parquet")
        clear_audit(audit_dir, label)
        reader = DropLosers(src, losers_dir, audit_dir, label, backend=ctx.backend)
        return from_partitions(reader, src.npartitions, ctx.meta(), "gpupipe-exact-drop")

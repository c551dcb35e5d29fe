"""exact_dedup: keep one document per identical (optionally normalised) text."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa

from gpupipe.backends import dispatch
from gpupipe.frame import ID, TEXT, text_array
from gpupipe.stages.base import GlobalStage, stage
from gpupipe.stages.dedup.common import (
    POS,
    ROW,
    AgainstIndexes,
    DropLosers,
    Keep,
    doc_codes,
    group_losers,
    index_parts,
    is_old,
    old_part,
    read_index_part,
    split_codes,
)
from gpupipe.stages.steps import Map, Output, Reduce


def normalized_texts(df, normalize: bool) -> pa.Array:
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
    from gpupipe.kernels.hashing import xxh64_strings
    from gpupipe.kernels.utf8 import utf8_buffers

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
        h1 = dispatch.kernels_for(df).xxh64_strings(*dispatch.text_buffers(df[TEXT]))
        return np.asarray(h1, dtype=np.uint64), np.zeros(len(df), dtype=np.uint64)
    return text_hashes(normalized_texts(dispatch.to_host(df[[TEXT]]), normalize), algorithm)


class ExactKeys:
    """Step ``keys``: partition ``i`` -> its rows' hash, document code, length and id (what the
    shuffle moves); the hashes also go to a side file for this run's index."""

    def __init__(self, normalize: bool, algorithm: str):
        self.normalize, self.algorithm = normalize, algorithm

    def __call__(self, ctx, i: int) -> Output:
        df = ctx.read(i)
        h1, h2 = partition_hashes(df, self.normalize, self.algorithm)
        length = dispatch.kernels_for(df).count_chars(*dispatch.text_buffers(df[TEXT]))
        ids = text_array(dispatch.to_host(df[[ID]])[ID]).cast(pa.string())
        table = pa.table({"h1": h1, "h2": h2, "doc": doc_codes(i, len(df)),
                          "length": np.asarray(length, dtype=np.int64), "id": ids})
        return Output(table, files={"hashes": np.stack([h1, h2], axis=1)},
                      counters={"documents": len(df)})


class EarlierKeys:
    """Step ``earlier``: partition ``i`` of the earlier runs' indexes -> the same rows as
    `ExactKeys`, with the codes of earlier documents."""

    def __init__(self, indexes: list[dict]):
        self.indexes = indexes

    def __call__(self, ctx, i: int) -> Output:
        k, p = index_parts(self.indexes)[i]
        t = read_index_part(self.indexes, k, p)
        return Output(pa.table({"h1": t["h1"], "h2": t["h2"],
                                "doc": doc_codes(old_part(k, p), t.num_rows),
                                "length": np.zeros(t.num_rows, np.int64),
                                "id": t["id"].cast(pa.string())}),
                      counters={"earlier_documents": t.num_rows})


class ExactLosers:
    """Step ``losers``: one bucket of keys -> the documents that lose to an identical one."""

    def __init__(self, keep: str):
        self.keep = keep

    def __call__(self, ctx, table: pa.Table) -> Output:
        lost = group_losers(table.to_pandas(), ["h1", "h2"], self.keep)
        part, row = split_codes(lost["doc"].to_numpy())
        earlier = int(is_old(lost["kept"].to_numpy()).sum())
        out = pa.table({POS: part, ROW: row, "id": lost["id"].astype(str).tolist(),
                        "duplicate_of": lost["duplicate_of"].astype(str).tolist(),
                        "kept": lost["kept"].to_numpy()})
        return Output(out, counters={"duplicates_of_earlier_runs": earlier} if earlier else {})


@stage("exact_dedup")
class ExactDedup(AgainstIndexes, GlobalStage):
    """Keep one document per identical text (md5 or xxHash64 of the UTF-8 bytes).

    ``normalize`` hashes NFKC, lower-cased, whitespace-collapsed text instead. Documents are
    shuffled by hash; the kept one is chosen by ``keep`` (first in input order, longest,
    smallest id). Every removal is written to ``dedup/duplicates.parquet/`` with the kept id
    (similarity 1.0, component null: the columns fuzzy_dedup writes too).
    ``against``: earlier run directories whose kept documents count as already seen (their
    ``dedup/index/exact_dedup/``, which every run writes); a document identical to one of them
    is removed with ``duplicate_run`` naming the run. A run on object storage is named by its
    URL (``s3://bucket/run``), read with ``storage_options`` (or credentials from the
    environment) into a local copy refreshed by ETag. On cuDF the xxHash64 keys are computed on
    the GPU (md5 and ``normalize`` hash on the host), and the same documents are removed.
    """

    backends: ClassVar[tuple[str, ...]] = ("pandas", "cudf")
    reasons: ClassVar[tuple[str, ...]] = ("exact_duplicate",)
    host_steps: ClassVar[str] = "the groups of equal hashes on the host"

    hash: Literal["md5", "xxhash64"] = "xxhash64"
    normalize: bool = False
    keep: Keep = "first"
    against: tuple[str, ...] = ()
    storage_options: dict[str, Any] | None = None


    def index_params(self) -> dict:
        return {"hash": self.hash, "normalize": self.normalize}


    def steps(self, ctx):
        indexes = self.earlier_indexes(ctx.output_dir)
        label = f"{ctx.position}:{self.stage_name}"
        keyed = ("keys", "earlier") if indexes else "keys"
        return [
            Map("keys", ExactKeys(self.normalize, self.hash), shuffle_on=("h1", "h2")),
            *([Map("earlier", EarlierKeys(indexes), items=len(index_parts(indexes)),
                   shuffle_on=("h1", "h2"))] if indexes else []),
            Reduce("losers", ExactLosers(self.keep), of=keyed, split_by=POS),
            Map("drop", DropLosers("exact_duplicate", "losers", label,
                                   [ix["run"] for ix in indexes], index=_index), output=True),
        ]


def _index(ctx, i: int, frame, mask) -> dict:
    """Partition ``i`` of this run's index: the kept documents' hashes and ids."""
    hashes = np.load(ctx.side("keys", "hashes", i, "npy"))[mask]
    ids = text_array(dispatch.to_host(frame[[ID]])[ID]).cast(pa.string())
    return {"parquet": pa.table({"h1": hashes[:, 0], "h2": hashes[:, 1], "id": ids})}

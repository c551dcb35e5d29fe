"""fuzzy_dedup: MinHash -> LSH bands -> candidate pairs -> verified pairs -> kept documents.

Steps (`gpupipe.stages.steps`), each checkpointed by the runner:

1. ``signatures`` (map, on the stage's backend): MinHash signatures and the LSH band keys of
   every document, shuffled by band key; ``earlier`` does the same for the indexes of the runs
   in ``against``;
2. ``candidates`` (reduce per bucket of band keys): the pairs of documents that share a band;
3. ``pairs`` (reduce per bucket of pairs): each pair once, with the signature agreement (a
   Jaccard estimate); with ``verify: signature`` (the default) pairs below the threshold go;
4. ``shingles`` + ``jaccard`` (``verify: jaccard``): the true Jaccard similarity of the shingle
   sets of the candidate pairs only;
5. ``select`` (on the client): connected components of the verified pairs, then, in the order
   ``keep`` gives, each document is kept unless it is similar to a document already kept;
6. ``drop`` (map): the partitions without the removed documents, the audit, and this run's
   index for later runs.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field

from gpupipe.frame import ID, TEXT, text_array
from gpupipe.stages.base import GlobalStage, stage
from gpupipe.stages.dedup.common import (
    OLD_BASE,
    POS,
    ROW,
    AgainstIndexes,
    DropLosers,
    Keep,
    doc_codes,
    index_parts,
    index_path,
    is_old,
    old_part,
    rank_order,
    split_codes,
)
from gpupipe.stages.steps import Map, OnClient, Output, Reduce, read_file

#: presets users know: NeMo Curator's and datatrove's defaults
PRESETS = {
    # NeMo Curator: 24-character shingles of the raw text, MurmurHash3_x86_32, 20 x 13, seed 42
    "nemo": {"shingles": "chars", "width": 24, "bands": 20, "rows": 13, "seed": 42, "bits": 32},
    # datatrove: word 5-grams of normalised text, 14 x 8
    "datatrove": {"shingles": "words", "width": 5, "bands": 14, "rows": 8, "seed": 1, "bits": 64},
}


def candidate_probability(s: float, bands: int, rows: int) -> float:
    """Probability that a pair with Jaccard ``s`` shares at least one band."""
    return 1.0 - (1.0 - s**rows) ** bands


def lsh_threshold(bands: int, rows: int) -> float:
    """The similarity at which the LSH S-curve rises steepest, ``(1 / bands) ** (1 / rows)``:
    0.72 for 14 x 8 (datatrove), 0.79 for 20 x 13 (NeMo Curator)."""
    return (1.0 / bands) ** (1.0 / rows)


def bands_for_threshold(threshold: float, num_hashes: int) -> tuple[int, int]:
    """(bands, rows) with bands * rows <= num_hashes minimising false positives below the
    threshold plus false negatives above it (integrated candidate probability)."""
    xs = np.linspace(0, 1, 201)
    best, best_err = (1, num_hashes), float("inf")
    for rows in range(1, num_hashes + 1):
        bands = num_hashes // rows
        p = 1.0 - (1.0 - xs**rows) ** bands
        err = np.trapezoid(np.where(xs < threshold, p, 1 - p), xs)
        if err < best_err:
            best, best_err = (bands, rows), err
    return best


def normalized_words(arr) -> pa.Array:
    """datatrove-style word lists: accents stripped (NFKD, combining marks removed), lower
    case, ASCII digits -> 0, split on punctuation, symbols and whitespace (compiled kernel)."""
    from gpupipe.kernels.utf8 import split_words

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    # ASCII text is its own NFKD and has no combining marks: only the other rows are rewritten
    other = pc.fill_null(pc.invert(pc.string_is_ascii(arr)), False)
    if pc.any(other).as_py():
        rest = pc.utf8_normalize(arr.filter(other), form="NFKD")
        rest = pc.replace_substring_regex(rest, pattern=r"\p{Mn}+", replacement="")
        arr = pc.replace_with_mask(arr, other, rest.cast(arr.type))
    return split_words(pc.utf8_lower(arr))


#: buckets of band keys up to this size give every pair of their members as candidates; larger
#: ones (boilerplate shared by thousands) tie every member to each of their first ``HUBS``
#: members in keep order, and each member to the next: the first of them that is kept stands
#: for the whole bucket, without m^2 pairs
ALL_PAIRS_MAX = 32
HUBS = 4
_PAIRS = {"a": pa.int64(), "b": pa.int64()}


def band_key_table(sig: np.ndarray, bands: int, rows: int, codes: np.ndarray,
                   rank: np.ndarray, ids: pa.Array | None = None) -> pa.Table:
    """(band, key, doc, rank[, rid]) for every band of every signature: ``rank`` (and ``rid``,
    the id, for ``keep: shortest_id``) order a bucket's members as `rank_order` does."""
    sig = np.asarray(sig)
    n = len(codes)
    cols = {
        "band": np.repeat(np.arange(bands, dtype=np.int64), n),
        "key": np.concatenate([band_keys(sig, b, rows) for b in range(bands)]) if n and bands
        else np.zeros(0, np.uint64),
        "doc": np.tile(codes, bands),
        "rank": np.tile(np.asarray(rank, np.int64), bands),
    }
    if ids is not None:
        cols["rid"] = pa.concat_arrays([ids] * bands) if bands else ids.slice(0, 0)
    return pa.table(cols)


def band_keys(sig: np.ndarray, band: int, rows: int) -> np.ndarray:
    """64-bit key of one band of every signature (vectorised multiply-xor mixing)."""
    h = np.full(sig.shape[0], np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(band), dtype=np.uint64)
    for v in sig[:, band * rows:(band + 1) * rows].astype(np.uint64).T:
        h = (h ^ v) * np.uint64(0x100000001B3)
        h ^= h >> np.uint64(29)
    return h


class SignatureStep:
    """Step ``signatures``: partition ``i`` -> its band keys (shuffled), and its signatures,
    ids and lengths as side files.

    The hashing runs where the partition is (the MinHash kernels on the GPU for cuDF). Word
    shingles are normalised on the host first (NFKD, Arrow), then hashed on the same side."""

    def __init__(self, cfg: dict, a: np.ndarray, b: np.ndarray, keep: Keep):
        self.cfg, self.a, self.b, self.keep = cfg, a, b, keep

    def __call__(self, ctx, i: int) -> Output:
        from gpupipe.backends import dispatch
        from gpupipe.kernels.hashing import list_buffers

        df = ctx.read(i)
        kernels, buffers = dispatch.kernels_for(df), dispatch.text_buffers(df[TEXT])
        cfg = self.cfg
        if cfg["shingles"] == "chars":
            sig = kernels.minhash(*buffers, seed=cfg["seed"], a=self.a, b=self.b,
                                  width=cfg["width"], bits=cfg["bits"])
        else:
            words = normalized_words(text_array(dispatch.to_host(df[[TEXT]])[TEXT]))
            sig = kernels.minhash_ngrams(*list_buffers(words), ngrams=cfg["width"] - 1,
                                         seed=cfg["seed"], a=self.a, b=self.b, bits=cfg["bits"])
        sig = np.asarray(sig)
        ids = text_array(dispatch.to_host(df[[ID]])[ID]).cast(pa.string())
        length = np.asarray(kernels.count_chars(*buffers), dtype=np.int64)
        keys = band_key_table(sig, cfg["bands"], cfg["rows"], doc_codes(i, len(df)),
                              -length if self.keep == "longest" else np.zeros(len(df), np.int64),
                              ids if self.keep == "shortest_id" else None)
        return Output(keys, files={"sig": sig, "meta": pa.table({"id": ids, "length": length})},
                      counters={"documents": len(df)})


class EarlierSignatures:
    """Step ``earlier``: partition ``i`` of the earlier runs' indexes -> their band keys."""

    def __init__(self, indexes: list[dict], cfg: dict, keep: Keep):
        self.indexes, self.cfg, self.keep = indexes, cfg, keep

    def __call__(self, ctx, i: int) -> Output:
        k, p = index_parts(self.indexes)[i]
        sig = np.load(index_path(self.indexes, old_part(k, p), "sig.npy"))
        codes = doc_codes(old_part(k, p), len(sig))
        # earlier runs' documents come first in every bucket (they are kept whatever)
        rank = np.full(len(sig), np.iinfo(np.int64).min, dtype=np.int64)
        ids = pa.array([""] * len(sig), pa.string()) if self.keep == "shortest_id" else None
        return Output(band_key_table(sig, self.cfg["bands"], self.cfg["rows"], codes, rank, ids),
                      counters={"earlier_documents": len(sig)})


class SignatureStore:
    """Signature rows and ids by document code, from the side files of ``signatures`` and the
    earlier runs' indexes (memory-mapped: only the rows asked for are loaded)."""

    def __init__(self, ctx, indexes: list[dict]):
        self.ctx, self.indexes = ctx, indexes

    def _path(self, part: int, what: str) -> str:
        if part >= OLD_BASE:
            return index_path(self.indexes, part, "sig.npy" if what == "sig" else "parquet")
        return self.ctx.side("signatures", what, part, "npy" if what == "sig" else "parquet")

    def rows(self, codes: np.ndarray) -> np.ndarray:
        part, row = split_codes(codes)
        out = None
        for p in np.unique(part):
            sel = np.flatnonzero(part == p)
            got = np.asarray(np.load(self._path(int(p), "sig"), mmap_mode="r")[row[sel]])
            if out is None:
                out = np.empty((len(codes), got.shape[1]), dtype=got.dtype)
            out[sel] = got
        return out if out is not None else np.zeros((0, 0), dtype=np.uint64)

    def meta(self, codes: np.ndarray) -> pd.DataFrame:
        """``doc``, ``id`` and ``length`` (0 for earlier runs) of the given documents."""
        part, row = split_codes(codes)
        ids = np.empty(len(codes), dtype=object)
        length = np.zeros(len(codes), dtype=np.int64)
        for p in np.unique(part):
            sel = np.flatnonzero(part == p)
            t = pq.read_table(self._path(int(p), "meta")).take(pa.array(row[sel]))
            ids[sel] = t["id"].to_numpy(zero_copy_only=False)
            if "length" in t.column_names:
                length[sel] = t["length"].to_numpy()
        return pd.DataFrame({"doc": np.asarray(codes, np.int64), "id": ids, "length": length})

    def agreement(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Fraction of equal MinHash values: an estimate of the Jaccard similarity."""
        if len(a) == 0:
            return np.zeros(0, dtype=np.float64)
        return (self.rows(a) == self.rows(b)).mean(axis=1)


def bucket_pairs(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs ``(a < b)`` of the documents that share a (band, key) bucket of the
    band key ``table``; pairs of two earlier documents are left out (those runs are
    deduplicated already)."""
    order = [("band", "ascending"), ("key", "ascending"), ("rank", "ascending")]
    if "rid" in table.column_names:
        order.append(("rid", "ascending"))
    table = table.sort_by(order + [("doc", "ascending")])
    doc, band, key = (table[c].to_numpy() for c in ("doc", "band", "key"))
    n = len(doc)
    new = np.ones(n, dtype=bool)
    new[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, n))
    left, right = [], []
    for m in np.unique(sizes[sizes >= 2]):
        s = starts[sizes == m][:, None]
        if m <= ALL_PAIRS_MAX:
            i, j = np.triu_indices(int(m), 1)
        else:   # each member to the first HUBS members, and to the next one
            i, j = np.triu_indices(int(m), 1)
            i, j = i[i < HUBS], j[i < HUBS]
            i = np.concatenate([i, np.arange(HUBS, m - 1)])
            j = np.concatenate([j, np.arange(HUBS + 1, m)])
        left.append((s + i).ravel())
        right.append((s + j).ravel())
    if not left:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    x, y = doc[np.concatenate(left)], doc[np.concatenate(right)]
    a, b = np.minimum(x, y), np.maximum(x, y)
    keep = ~(is_old(a) & is_old(b)) & (a != b)
    return a[keep], b[keep]


def _candidates(ctx, table: pa.Table) -> Output:
    """Step ``candidates``: one bucket of band keys -> candidate pairs (shuffled by pair)."""
    a, b = bucket_pairs(table)
    return Output(pa.table({"a": a, "b": b}))


class UniquePairs:
    """Step ``pairs``: one bucket of candidate pairs -> each pair once with its signature
    agreement; with ``threshold`` set, only the pairs at or above it."""

    def __init__(self, indexes: list[dict], threshold: float | None):
        self.indexes, self.threshold = indexes, threshold

    def __call__(self, ctx, table: pa.Table) -> Output:
        both = np.unique(np.stack([table["a"].to_numpy(), table["b"].to_numpy()], axis=1),
                         axis=0)
        a, b = both[:, 0], both[:, 1]
        sim = SignatureStore(ctx, self.indexes).agreement(a, b)
        counters = {"candidate_pairs": len(a)}
        if self.threshold is not None:
            ok = sim >= self.threshold
            counters["rejected_pairs"] = int((~ok).sum())
            a, b, sim = a[ok], b[ok], sim[ok]
        return Output(pa.table({"a": a, "b": b, "similarity": sim}), counters=counters)


_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def ngram_sets(values: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sets of hashed n-grams of token sequences: ``values`` (uint64 token hashes, every
    document's tokens in a row), ``offsets`` (int64[docs + 1]). A document of fewer than ``n``
    tokens is one n-gram of all of them. Returns (sorted unique hashes of every document in a
    row, offsets)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    docs = len(offsets) - 1
    total = int(offsets[-1] - offsets[0])
    values = np.asarray(values, dtype=np.uint64)[offsets[0]: offsets[-1]]
    offsets = offsets - offsets[0]
    doc = np.repeat(np.arange(docs), np.diff(offsets))
    pos = np.arange(total)
    end, begin = offsets[1:][doc], offsets[:-1][doc]
    span = np.minimum(n, end - pos)
    valid = (end - pos >= n) | ((pos == begin) & (end - begin < n))
    mixed = _mix(values)
    h = np.zeros(total, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            idx = np.minimum(pos + k, max(total - 1, 0))
            h = np.where(k < span, h * np.uint64(0x100000001B3) + mixed[idx], h)
    doc, h = doc[valid], h[valid]
    o = np.lexsort((h, doc))
    doc, h = doc[o], h[o]
    first = np.ones(len(h), dtype=bool)
    first[1:] = (doc[1:] != doc[:-1]) | (h[1:] != h[:-1])
    doc, h = doc[first], h[first]
    return h, np.concatenate([[0], np.cumsum(np.bincount(doc, minlength=docs))]).astype(np.int64)


def shingle_sets(texts: pa.Array, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """`ngram_sets` of the shingles the signatures were built from: words of normalised text
    (n-grams of ``width`` words) or characters (``width`` characters)."""
    from gpupipe.kernels.hashing import xxh64_strings
    from gpupipe.kernels.utf8 import utf8_buffers

    if cfg["shingles"] == "words":
        words = normalized_words(texts)
        flat = words.flatten()
        values = xxh64_strings(*utf8_buffers(flat)) if len(flat) else np.zeros(0, np.uint64)
        offsets = np.asarray(words.offsets, dtype=np.int64)
        return ngram_sets(values, offsets - offsets[0], cfg["width"])
    cps = [np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32) for t in texts.to_pylist()]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cps])]).astype(np.int64)
    values = np.concatenate(cps).astype(np.uint64) if cps else np.zeros(0, np.uint64)
    return ngram_sets(values, offsets, cfg["width"])


class ShingleStep:
    """Step ``shingles`` (``verify: jaccard``): partition ``i`` -> the shingle sets of its
    documents that are in a candidate pair (side files ``rows``, ``offsets``, ``hashes``)."""

    def __init__(self, cfg: dict):
        self.cfg = cfg

    def __call__(self, ctx, i: int) -> Output:
        from gpupipe.backends import dispatch

        pairs = ctx.table("pairs")
        codes = np.zeros(0, np.int64) if pairs is None else np.unique(np.concatenate(
            [pairs["a"].to_numpy(), pairs["b"].to_numpy()]))
        part, row = split_codes(codes)
        rows = row[part == i]
        if len(rows):
            texts = text_array(dispatch.to_host(ctx.read(i)[[TEXT]])[TEXT]).take(pa.array(rows))
            hashes, offsets = shingle_sets(texts, self.cfg)
        else:
            hashes, offsets = np.zeros(0, np.uint64), np.zeros(1, np.int64)
        return Output(files={"rows": rows, "offsets": offsets, "hashes": hashes})


class TrueJaccard:
    """Step ``jaccard``: file ``i`` of pairs -> the pairs whose shingle sets have a Jaccard
    similarity at or above ``threshold`` (pairs with an earlier run's document, whose text is
    not at hand, keep the signature estimate)."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def __call__(self, ctx, i: int) -> Output:
        t = read_file(ctx.files("pairs")[i])
        a, b = t["a"].to_numpy(), t["b"].to_numpy()
        sim = t["similarity"].to_numpy().copy()
        sets: dict[int, tuple] = {}

        def get(code):
            p, r = split_codes(np.array([code]))
            p, r = int(p[0]), int(r[0])
            if p not in sets:
                sets[p] = tuple(np.load(ctx.side("shingles", k, p, "npy"))
                                for k in ("rows", "offsets", "hashes"))
            rows, offsets, hashes = sets[p]
            j = int(np.searchsorted(rows, r))
            return hashes[offsets[j]: offsets[j + 1]]

        for k in np.flatnonzero(~(is_old(a) | is_old(b))):
            x, y = get(a[k]), get(b[k])
            inter = np.intersect1d(x, y, assume_unique=True).size
            union = len(x) + len(y) - inter
            sim[k] = inter / union if union else 1.0
        ok = sim >= self.threshold
        return Output(pa.table({"a": a[ok], "b": b[ok], "similarity": sim[ok]}),
                      counters={"rejected_pairs": int((~ok).sum())})


def keep_greedy(a: np.ndarray, b: np.ndarray, sim: np.ndarray, order: np.ndarray,
                fixed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes ``0..n-1`` in ``order``: a node is kept unless an edge ties it to a node kept
    before it; then it is removed for the kept neighbour it is most similar to (ties: the
    earlier one). ``fixed`` nodes are kept whatever. So every removal is similar (an edge) to a
    document that stays, and no chain of pairs ties two unlike documents together.
    Returns (kept, the node each removed node lost to (-1 for kept), its similarity)."""
    n = len(order)
    src, dst, w = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([sim, sim])
    o = np.argsort(src, kind="stable")
    indptr = np.searchsorted(src[o], np.arange(n + 1)).astype(np.int64)
    from gpupipe.kernels.graph import greedy

    # writable copies: pandas hands out read-only arrays, which are other argument types
    # (the kernel's ahead-of-time code takes writable ones)
    return greedy(np.array(order, np.int64), indptr, dst[o].astype(np.int64),
                  w[o].astype(np.float64), np.array(fixed, dtype=np.bool_))


_LOSERS = pa.schema([(POS, pa.int64()), (ROW, pa.int64()), ("id", pa.string()),
                     ("duplicate_of", pa.string()), ("kept", pa.int64()),
                     ("similarity", pa.float64()), ("component", pa.int64())])


class Select:
    """Step ``select`` (client): the verified pairs -> the documents removed, each with the
    document it was removed for, their similarity and its component (the smallest document
    code in it). Memory follows the number of verified pairs, not the size of the corpus."""

    def __init__(self, keep: str, indexes: list[dict], edges: str):
        self.keep, self.indexes, self.edges = keep, indexes, edges

    def __call__(self, ctx) -> Output:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        t = ctx.table(self.edges)
        if t is None or t.num_rows == 0:
            return Output(_LOSERS.empty_table(), counters={"verified_pairs": 0, "components": 0})
        a, b, sim = (t[c].to_numpy() for c in ("a", "b", "similarity"))
        nodes = np.unique(np.concatenate([a, b]))
        ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
        n = len(nodes)
        ncomp, label = connected_components(
            coo_matrix((np.ones(len(ia), np.int8), (ia, ib)), shape=(n, n)), directed=False)
        comp_id = np.full(ncomp, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(comp_id, label, nodes)
        meta = SignatureStore(ctx, self.indexes).meta(nodes)
        old = is_old(nodes)
        kept, dup, best = keep_greedy(ia, ib, sim, rank_order(meta, self.keep), old)
        lost = np.flatnonzero(~kept & ~old)
        part, row = split_codes(nodes[lost])
        sizes = np.bincount(label)
        q = np.quantile(sizes, [0.5, 0.9, 0.99]) if ncomp else np.zeros(3)
        counters = {"verified_pairs": len(a), "components": int(ncomp),
                    "component_size_p50": round(float(q[0]), 2),
                    "component_size_p90": round(float(q[1]), 2),
                    "component_size_p99": round(float(q[2]), 2), "component_size_max": int(sizes.max()),
                    "duplicates_of_earlier_runs": int(old[dup[lost]].sum())}
        ids = meta["id"].to_numpy()
        return Output(pa.table({
            POS: part, ROW: row, "id": pa.array(ids[lost].tolist(), pa.string()),
            "duplicate_of": pa.array(ids[dup[lost]].tolist(), pa.string()),
            "kept": nodes[dup[lost]], "similarity": best[lost],
            "component": comp_id[label[lost]]}, schema=_LOSERS), counters=counters)


@stage("fuzzy_dedup")
class FuzzyDedup(AgainstIndexes, GlobalStage):
    """Remove near-duplicates: MinHash signatures, LSH bands, verified candidate pairs.

    ``preset``: ``nemo`` (24-character shingles, MurmurHash3_x86_32, 20 bands x 13 rows,
    seed 42) or ``datatrove`` (normalised word 5-grams, 14 x 8); any field set explicitly
    overrides the preset, and ``threshold`` picks bands x rows for a Jaccard threshold.

    Candidate pairs (documents sharing a band) are verified before any removal (``verify``):
    ``signature`` (default) keeps pairs whose signatures agree on at least
    ``jaccard_threshold`` of their hashes (default: ``threshold``, else the LSH threshold of
    bands x rows, 0.72 for datatrove, 0.79 for nemo); ``jaccard`` computes the true Jaccard
    similarity of the two shingle sets, for candidate pairs only; ``off`` trusts the buckets.
    Then, in ``keep`` order, a document is kept unless it is similar to one already kept, so
    every removal names a kept document it resembles. Every removal is written to
    ``dedup/duplicates.parquet/`` with that document's id, the similarity and the component.

    ``against``: earlier run directories whose kept documents count as already seen (their
    ``dedup/index/fuzzy_dedup/``, which every run writes; built with the same parameters). A
    near-copy of one of them is removed with ``duplicate_run`` naming the run; runs on object
    storage are URLs, read with ``storage_options`` as in exact_dedup. Signatures are
    the same bits as cuDF's ``str.minhash`` / ``minhash_ngrams``.
    """

    reasons: ClassVar[tuple[str, ...]] = ("near_duplicate",)
    #: the signatures (the bulk of the work) and the final drop run on cuDF; bands, buckets,
    #: candidate checks and the selection on the host (see `host_steps`)
    backends: ClassVar[tuple[str, ...]] = ("pandas", "cudf")
    host_steps: ClassVar[str] = "LSH buckets, candidate checks and the selection on the host"

    preset: Literal["nemo", "datatrove"] = "datatrove"
    shingles: Literal["chars", "words"] | None = None
    width: Annotated[int | None, Field(ge=2)] = None
    bands: Annotated[int | None, Field(ge=1)] = None
    rows: Annotated[int | None, Field(ge=1)] = None
    threshold: Annotated[float | None, Field(gt=0, lt=1)] = None
    num_hashes: Annotated[int | None, Field(ge=1)] = None
    seed: int | None = None
    bits: Literal[32, 64] | None = None
    #: ``signature`` | ``jaccard`` | ``off`` (``true`` = signature, ``false`` = off)
    verify: Literal["signature", "jaccard", "off"] | bool = "signature"
    jaccard_threshold: Annotated[float | None, Field(gt=0, le=1)] = None
    keep: Keep = "first"
    against: tuple[str, ...] = ()
    storage_options: dict[str, Any] | None = None

    def __post_init__(self):
        if self.threshold is not None and (self.bands is not None or self.rows is not None):
            raise ValueError("give threshold or bands/rows, not both")

    def verification(self) -> str:
        if isinstance(self.verify, bool):
            return "signature" if self.verify else "off"
        return self.verify

    def similarity_threshold(self, cfg: dict) -> float:
        if self.jaccard_threshold is not None:
            return self.jaccard_threshold
        if self.threshold is not None:
            return self.threshold
        return round(lsh_threshold(cfg["bands"], cfg["rows"]), 4)


    def index_params(self) -> dict:
        return self.config()


    def explain_notes(self) -> list[str]:
        cfg = self.config()
        mode = self.verification()
        how = {"signature": "signature agreement", "jaccard": "true Jaccard of the shingle sets",
               "off": ""}[mode]
        check = (f"candidate pairs verified: {how} >= {self.similarity_threshold(cfg):g}"
                 if mode != "off" else "candidate pairs NOT verified (verify: off)")
        return [f"{cfg['shingles']} shingles of width {cfg['width']}, {cfg['bands']} bands x "
                f"{cfg['rows']} rows (LSH threshold "
                f"{lsh_threshold(cfg['bands'], cfg['rows']):.2f}); {check}; keep {self.keep}",
                *([f"against earlier runs: {', '.join(self.against)}"] if self.against else [])]

    def config(self) -> dict:
        cfg = dict(PRESETS[self.preset])
        for key in ("shingles", "width", "bands", "rows", "seed", "bits"):
            if getattr(self, key) is not None:
                cfg[key] = getattr(self, key)
        if self.threshold is not None:
            budget = self.num_hashes or cfg["bands"] * cfg["rows"]
            cfg["bands"], cfg["rows"] = bands_for_threshold(self.threshold, budget)
        cfg["num_hashes"] = cfg["bands"] * cfg["rows"]
        return cfg

    def permutations(self, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(cfg["seed"])
        if cfg["bits"] == 32:
            a = rng.integers(1, 2**32, cfg["num_hashes"], dtype=np.uint64).astype(np.uint32)
            b = rng.integers(0, 2**32, cfg["num_hashes"], dtype=np.uint64).astype(np.uint32)
            return a | np.uint32(1), b
        a = rng.integers(1, (1 << 61) - 1, cfg["num_hashes"], dtype=np.uint64)
        b = rng.integers(0, (1 << 61) - 1, cfg["num_hashes"], dtype=np.uint64)
        return a, b

    def steps(self, ctx):
        cfg = self.config()
        indexes = self.earlier_indexes(ctx.output_dir)
        mode, threshold = self.verification(), self.similarity_threshold(cfg)
        label = f"{ctx.position}:{self.stage_name}"
        keyed = ("signatures", "earlier") if indexes else "signatures"
        steps = [Map("signatures", SignatureStep(cfg, *self.permutations(cfg), self.keep),
                     shuffle_on=("band", "key"))]
        if indexes:
            steps.append(Map("earlier", EarlierSignatures(indexes, cfg, self.keep),
                             items=len(index_parts(indexes)), shuffle_on=("band", "key")))
        steps += [Reduce("candidates", _candidates, of=keyed, shuffle_on=("a", "b")),
                  Reduce("pairs", UniquePairs(indexes, threshold if mode == "signature"
                                              else None), of="candidates")]
        edges = "pairs"
        if mode == "jaccard":
            steps += [Map("shingles", ShingleStep(cfg)),
                      Map("jaccard", TrueJaccard(threshold), over="pairs")]
            edges = "jaccard"
        steps += [OnClient("select", Select(self.keep, indexes, edges), split_by=POS),
                  Map("drop", DropLosers("near_duplicate", "select", label,
                                         [ix["run"] for ix in indexes], index=_index),
                      output=True)]
        return steps


def _index(ctx, i: int, frame, mask) -> dict:
    """Partition ``i`` of this run's index: the kept documents' signatures and ids."""
    sig = np.load(ctx.side("signatures", "sig", i, "npy"))[mask]
    ids = pq.read_table(ctx.side("signatures", "meta", i, "parquet"))["id"].filter(pa.array(mask))
    return {"sig.npy": sig, "parquet": pa.table({"id": ids})}

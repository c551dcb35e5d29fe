"""semantic_dedup: SemDeDup on an embedding column (k-means, then near-identical pairs within
each cluster)."""

from __future__ import annotations

import functools
from typing import Annotated, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import Field

from gpupipe.errors import BackendUnavailableError
from gpupipe.frame import ID, TEXT
from gpupipe.stages.base import GlobalStage, stage
from gpupipe.stages.dedup.common import (
    POS,
    ROW,
    DropLosers,
    doc_codes,
    rank_order,
    split_codes,
)
from gpupipe.stages.steps import Map, OnClient, Output, Reduce

_LOSERS = pa.schema([(POS, pa.int64()), (ROW, pa.int64()), ("id", pa.string()),
                     ("duplicate_of", pa.string()), ("kept", pa.int64()),
                     ("similarity", pa.float64()), ("component", pa.int64())])
_PAIRS = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("similarity", pa.float64())])
#: rows of a cluster compared at once (memory: block x cluster size floats)
BLOCK = 2048


def _vectors(column: str, ctx, i: int) -> Output:
    """Step ``vectors``: partition ``i``'s embeddings, normalised, as a side file, and per
    document its code, text length and id."""
    frame = ctx.read(i)
    if column not in frame.columns:
        raise ValueError(f"semantic_dedup: the partition has no column {column!r} (put an "
                         f"embed stage before it, or set column)")
    arr = pa.array(frame[column])
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise ValueError(f"semantic_dedup: {arr.null_count} documents have no {column!r}")
    n = len(frame)
    flat = arr.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    vec = flat.reshape(n, -1) if n else np.zeros((0, 0), np.float32)
    if n and len(flat) != n * vec.shape[1]:
        raise ValueError(f"semantic_dedup: the vectors of {column!r} differ in length")
    vec = vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)
    meta = pa.table({"doc": doc_codes(i, n),
                     "length": frame[TEXT].str.len().to_numpy(dtype=np.int64),
                     "id": pa.array(frame[ID].astype(str).tolist(), pa.string())})
    return Output(meta, files={"vec": vec.astype(np.float32)}, counters={"documents": n})


def _load(ctx, i: int) -> np.ndarray:
    return np.load(ctx.side("vectors", "vec", i, "npy"), mmap_mode="r")


def _fit_sklearn(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    try:
        from sklearn.cluster import MiniBatchKMeans
    except ImportError:
        raise BackendUnavailableError(
            "semantic_dedup needs scikit-learn: pip install 'gpupipe[models]'") from None
    km = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=3,
                         batch_size=min(4096, len(x)))
    km.fit(x)
    return np.asarray(km.cluster_centers_, dtype=np.float32)


def _fit_cuml(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """cuML's KMeans on the GPU (scalable k-means++). Written against cuML's KMeans signature;
    never executed here (no GPU): the centroids differ from scikit-learn's, so a run with
    ``kmeans: cuml`` is reproducible on its own but not byte-identical to a CPU run."""
    try:
        from cuml.cluster import KMeans as CumlKMeans
    except ImportError:
        raise BackendUnavailableError(
            "semantic_dedup kmeans: cuml needs cuML (pip install cuml-cu12, or cuml-cu13) and a "
            "GPU; kmeans: sklearn runs on the CPU") from None
    km = CumlKMeans(n_clusters=k, random_state=seed, n_init=3, output_type="numpy")
    km.fit(x)
    return np.asarray(km.cluster_centers_, dtype=np.float32)


class KMeans:
    """Step ``kmeans`` (client): k-means on at most ``max_fit`` vectors drawn with the seed
    (scikit-learn's MiniBatchKMeans, or cuML's KMeans); the centroids, normalised."""

    def __init__(self, n_clusters: int, seed: int, max_fit: int, library: str = "sklearn"):
        self.n_clusters, self.seed, self.max_fit = n_clusters, seed, max_fit
        self.library = library

    def __call__(self, ctx) -> Output:
        parts = [_load(ctx, i) for i in range(ctx.npartitions)]
        sizes = [len(p) for p in parts]
        total = sum(sizes)
        rng = np.random.default_rng(self.seed)
        if total > self.max_fit:
            pick = np.sort(rng.choice(total, self.max_fit, replace=False))
            starts = np.cumsum([0] + sizes)
            x = np.concatenate([parts[k][pick[(pick >= starts[k]) & (pick < starts[k + 1])]
                                         - starts[k]] for k in range(len(parts))])
        else:
            x = np.concatenate([np.asarray(p) for p in parts if len(p)]) if total else None
        if x is None or len(x) == 0:
            return Output(files={"centroids": np.zeros((0, 0), np.float32)},
                          counters={"clusters": 0})
        k = min(self.n_clusters, len(x))
        fit = _fit_cuml if self.library == "cuml" else _fit_sklearn
        c = fit(np.ascontiguousarray(x, dtype=np.float32), k, self.seed)
        c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
        return Output(files={"centroids": c}, counters={"clusters": k})


def _assign(ctx, i: int) -> Output:
    """Step ``assign``: each document's nearest centroid (cosine) and its distance to it;
    shuffled by cluster."""
    vec = _load(ctx, i)
    c = np.load(ctx.side("kmeans", "centroids", 0, "npy"))
    n = len(vec)
    if n == 0 or len(c) == 0:
        return Output(pa.table({"cluster": np.zeros(0, np.int64), "doc": np.zeros(0, np.int64),
                                "dist": np.zeros(0, np.float64)}))
    sims = np.asarray(vec) @ c.T
    cluster = sims.argmax(axis=1).astype(np.int64)
    dist = 1.0 - sims[np.arange(n), cluster].astype(np.float64)
    return Output(pa.table({"cluster": cluster, "doc": doc_codes(i, n), "dist": dist}))


class Pairs:
    """Step ``pairs`` (one bucket of clusters): inside each cluster, every pair of documents
    with cosine similarity >= ``1 - eps``."""

    def __init__(self, eps: float):
        self.eps = eps

    def __call__(self, ctx, members: pa.Table) -> Output:
        df = members.to_pandas().sort_values(["cluster", "doc"], kind="stable")
        out_a, out_b, out_s = [], [], []
        for _, group in df.groupby("cluster", sort=True):
            docs = group["doc"].to_numpy()
            if len(docs) < 2:
                continue
            parts, rows = split_codes(docs)
            vec = np.empty((len(docs), _load(ctx, int(parts[0])).shape[1]), np.float32)
            for p in np.unique(parts):
                sel = parts == p
                vec[sel] = _load(ctx, int(p))[rows[sel]]
            for start in range(0, len(docs), BLOCK):
                block = vec[start:start + BLOCK] @ vec.T
                i, j = np.nonzero(block >= 1.0 - self.eps)
                i = i + start
                upper = j > i
                out_a.append(docs[i[upper]])
                out_b.append(docs[j[upper]])
                out_s.append(block[i[upper] - start, j[upper]].astype(np.float64))
        a = np.concatenate(out_a) if out_a else np.zeros(0, np.int64)
        b = np.concatenate(out_b) if out_b else np.zeros(0, np.int64)
        s = np.concatenate(out_s) if out_s else np.zeros(0, np.float64)
        return Output(pa.table({"a": a, "b": b, "similarity": np.minimum(s, 1.0)},
                               schema=_PAIRS),
                      counters={"similar_pairs": len(a)})


class Select:
    """Step ``select`` (client): in ``keep`` order, a document is kept unless it is similar to
    one already kept; every removed document names the kept one it is most similar to."""

    def __init__(self, keep: str):
        self.keep = keep

    def __call__(self, ctx) -> Output:
        from gpupipe.stages.dedup.fuzzy import keep_greedy

        where = ctx.table("assign")
        sizes = np.bincount(where["cluster"].to_numpy()) if where is not None else np.zeros(1)
        counters = {"clusters_used": int((sizes > 0).sum()),
                    "cluster_size_max": int(sizes.max()) if len(sizes) else 0}
        t = ctx.table("pairs")
        if t is None or t.num_rows == 0:
            return Output(_LOSERS.empty_table(), counters={**counters, "documents_removed": 0})
        a, b, sim = (t[c].to_numpy() for c in ("a", "b", "similarity"))
        nodes = np.unique(np.concatenate([a, b]))
        ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
        info = self._info(ctx, nodes, where.to_pandas())
        order = self.order(info)
        kept, dup, best = keep_greedy(ia, ib, sim, order, np.zeros(len(nodes), bool))
        lost = np.flatnonzero(~kept)
        part, row = split_codes(nodes[lost])
        ids = info["id"].to_numpy()
        return Output(pa.table({
            POS: part, ROW: row, "id": pa.array(ids[lost].tolist(), pa.string()),
            "duplicate_of": pa.array(ids[dup[lost]].tolist(), pa.string()),
            "kept": nodes[dup[lost]], "similarity": best[lost],
            "component": info["cluster"].to_numpy()[lost]}, schema=_LOSERS),
            counters={**counters, "documents_removed": len(lost)})

    @staticmethod
    def _info(ctx, nodes: np.ndarray, where: pd.DataFrame) -> pd.DataFrame:
        """doc, length, id, cluster and distance to the centroid of the documents in pairs."""
        meta = ctx.table("vectors").to_pandas()
        meta = meta[meta["doc"].isin(nodes)]
        where = where[where["doc"].isin(nodes)]
        info = meta.merge(where, on="doc").set_index("doc").loc[nodes].reset_index()
        return info

    def order(self, info: pd.DataFrame) -> np.ndarray:
        """Positions of ``info``'s rows in the order they claim to be kept; ties in input
        order. ``first`` and ``longest`` are the exact and fuzzy dedup order (`rank_order`)."""
        if self.keep != "centroid_farthest":
            return rank_order(info, self.keep)
        # SemDeDup: the least typical document of the group (farthest from the centroid) stays
        return info.sort_values(["dist", "doc"], ascending=[False, True],
                                kind="stable").index.to_numpy()


@stage("semantic_dedup")
class SemanticDedup(GlobalStage):
    """Remove semantic near-duplicates (SemDeDup, Abbas et al. 2023) using an embedding column
    (from an ``embed`` stage).

    The vectors are clustered with k-means (``n_clusters``, on at most ``max_fit_docs`` vectors
    drawn with ``seed``): scikit-learn's MiniBatchKMeans on the client (``kmeans: sklearn``, the
    default: the same clusters whatever the backend), or cuML's KMeans on the GPU (``kmeans:
    cuml``; reproducible, but other clusters than the CPU's). Inside each cluster every pair
    with cosine similarity >= ``1 - eps`` is a duplicate pair. Then, in ``keep`` order, a
    document is kept unless it is similar to one already kept: ``centroid_farthest`` (SemDeDup's
    choice: the document least like its cluster's centroid stays), ``first`` (input order) or
    ``longest``. Every removal goes to ``dedup/duplicates.parquet/`` with the document it was
    removed for, the cosine similarity and the cluster (``component``). The same input, seed and
    parameters give the same removals whatever the number of workers.
    """

    reasons: ClassVar[tuple[str, ...]] = ("semantic_duplicate",)
    host_steps: ClassVar[str] = "k-means on the client, pairs and selection on the host"

    n_clusters: Annotated[int, Field(ge=1)] = 100
    eps: Annotated[float, Field(gt=0, lt=1)] = 0.05
    keep: Literal["centroid_farthest", "first", "longest"] = "centroid_farthest"
    column: str = "embedding"
    seed: int = 0
    max_fit_docs: Annotated[int, Field(ge=1)] = 200_000
    kmeans: Literal["sklearn", "cuml"] = "sklearn"

    def check(self, ctx=None) -> None:
        """Before any work: the embedding column must come from an earlier stage (``embed``)
        or from the input (``input.columns`` of a Parquet input); raises ``ValueError``."""
        if ctx is None or any(self.column in st.added_columns() for st in ctx.earlier):
            return
        if self.column in ctx.input_columns:
            return
        raise ValueError(f"no stage before it adds the column {self.column!r} and the input "
                         f"does not carry it: put an embed stage before semantic_dedup, or "
                         f"list it in input.columns (Parquet input)")

    def explain_notes(self) -> list[str]:
        return [f"k-means ({self.kmeans}) with {self.n_clusters} clusters on '{self.column}' "
                f"(seed {self.seed}); "
                f"pairs with cosine >= {1 - self.eps:g} inside a cluster; keep {self.keep}"]

    def steps(self, ctx):
        label = f"{ctx.position}:{self.stage_name}"
        return [Map("vectors", functools.partial(_vectors, self.column)),
                OnClient("kmeans", KMeans(self.n_clusters, self.seed, self.max_fit_docs,
                                          self.kmeans)),
                Map("assign", _assign, shuffle_on=("cluster",)),
                Reduce("pairs", Pairs(self.eps), of="assign"),
                OnClient("select", Select(self.keep), split_by=POS),
                Map("drop", DropLosers("semantic_duplicate", "select", label, []), output=True)]

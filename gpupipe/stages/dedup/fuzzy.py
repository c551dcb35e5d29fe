"""fuzzy_dedup: MinHash -> LSH bands -> candidate pairs -> connected components."""

from __future__ import annotations

import glob
import os
import shutil
from typing import Annotated, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field

from gpupipe.frame import ID, TEXT, text_array
from gpupipe.io.writer import write_parquet
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
from gpupipe.stages.dedup.components import LOCAL_EDGE_LIMIT

#: presets users know (shared/FILTERS.md)
PRESETS = {
    # NeMo Curator: 24-character shingles of the raw text, MurmurHash3_x86_32, 20 x 13, seed 42
    "nemo": {"shingles": "chars", "width": 24, "bands": 20, "rows": 13, "seed": 42, "bits": 32},
    # datatrove: word 5-grams of normalised text, 14 x 8
    "datatrove": {"shingles": "words", "width": 5, "bands": 14, "rows": 8, "seed": 1, "bits": 64},
}


def candidate_probability(s: float, bands: int, rows: int) -> float:
    """Probability that a pair with Jaccard ``s`` shares at least one band."""
    return 1.0 - (1.0 - s**rows) ** bands


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

    arr = pc.utf8_normalize(arr, form="NFKD")
    arr = pc.replace_substring_regex(arr, pattern=r"\p{Mn}+", replacement="")
    return split_words(pc.utf8_lower(arr))


class Signatures:
    """Partition ``i`` -> signature matrix, lengths and ids saved under ``work_dir``.

    The hashing runs where the partition is (the MinHash kernels on the GPU for cuDF). Word
    shingles are normalised on the host first (NFKD, Arrow), then hashed on the same side."""

    def __init__(self, source, work_dir: str, cfg: dict, a: np.ndarray, b: np.ndarray,
                 backend: str = "pandas"):
        self.source, self.work_dir, self.cfg, self.a, self.b = source, work_dir, cfg, a, b
        self.backend = backend

    def __call__(self, i: int) -> int:
        from gpupipe import seam
        from gpupipe.backend import read_partition
        from gpupipe.io.writer import write_npy
        from gpupipe.kernels.hashing import list_buffers

        df = read_partition(self.source, i, self.backend).frame
        kernels, buffers = seam.kernels_for(df), seam.text_buffers(df[TEXT])
        cfg = self.cfg
        if cfg["shingles"] == "chars":
            sig = kernels.minhash(*buffers, seed=cfg["seed"], a=self.a, b=self.b,
                                  width=cfg["width"], bits=cfg["bits"])
        else:
            words = normalized_words(text_array(seam.to_host(df[[TEXT]])[TEXT]))
            sig = kernels.minhash_ngrams(*list_buffers(words), ngrams=cfg["width"] - 1,
                                         seed=cfg["seed"], a=self.a, b=self.b, bits=cfg["bits"])
        write_npy(np.asarray(sig), os.path.join(self.work_dir, f"part-{i:05d}.npy"))
        ids = text_array(seam.to_host(df[[ID]])[ID]).cast(pa.string())
        length = np.asarray(kernels.count_chars(*buffers), dtype=np.int64)
        write_parquet(pa.table({"id": ids, "length": pa.array(length)}),
                      os.path.join(self.work_dir, f"part-{i:05d}.meta.parquet"))
        return len(df)


class SignatureStore:
    """Signature rows by global document number, read from the per-partition files on demand
    (memory-mapped): only the rows of candidate pairs are ever loaded."""

    def __init__(self, sig_dir: str, offsets: np.ndarray):
        self.sig_dir, self.offsets = sig_dir, offsets

    def rows(self, gids: np.ndarray) -> np.ndarray:
        part = np.searchsorted(self.offsets, gids, side="right") - 1
        out = None
        for p in np.unique(part):
            sel = np.flatnonzero(part == p)
            mm = np.load(os.path.join(self.sig_dir, f"part-{int(p):05d}.npy"), mmap_mode="r")
            got = np.asarray(mm[gids[sel] - self.offsets[p]])
            if out is None:
                out = np.empty((len(gids), got.shape[1]), dtype=got.dtype)
            out[sel] = got
        return out if out is not None else np.zeros((0, 0), dtype=np.uint64)

    def meta(self, gids: np.ndarray) -> pd.DataFrame:
        """``id`` and ``length`` of the given documents (sorted ``gids``), in that order."""
        part = np.searchsorted(self.offsets, gids, side="right") - 1
        frames = []
        for p in np.unique(part):
            rows = gids[part == p] - self.offsets[p]
            table = pq.read_table(os.path.join(self.sig_dir, f"part-{int(p):05d}.meta.parquet"))
            frames.append(table.take(pa.array(rows)).to_pandas())
        return pd.concat(frames, ignore_index=True)

    def agreement(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Fraction of equal MinHash values: an estimate of the Jaccard similarity."""
        if len(a) == 0:
            return np.zeros(0, dtype=np.float64)
        return (self.rows(a) == self.rows(b)).mean(axis=1)


def band_keys(sig: np.ndarray, band: int, rows: int) -> np.ndarray:
    """64-bit key of one band of every signature (vectorised multiply-xor mixing)."""
    h = np.full(sig.shape[0], np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(band), dtype=np.uint64)
    for v in sig[:, band * rows:(band + 1) * rows].astype(np.uint64).T:
        h = (h ^ v) * np.uint64(0x100000001B3)
        h ^= h >> np.uint64(29)
    return h


class BandEdges:
    """Signature file ``i`` -> (band, key, gid) rows for a group of bands."""

    def __init__(self, work_dir: str, bands: list[int], rows: int, offsets: np.ndarray):
        self.work_dir, self.bands, self.rows, self.offsets = work_dir, bands, rows, offsets

    def __call__(self, i: int) -> pd.DataFrame:
        sig = np.load(os.path.join(self.work_dir, f"part-{i:05d}.npy"), mmap_mode="r")
        gid = np.arange(sig.shape[0], dtype=np.int64) + self.offsets[i]
        frames = [pd.DataFrame({"band": np.full(len(gid), b, np.int64),
                                "key": band_keys(np.asarray(sig), b, self.rows), "gid": gid})
                  for b in self.bands]
        return pd.concat(frames, ignore_index=True) if frames else _EMPTY_KEYS


_EMPTY_KEYS = pd.DataFrame({"band": np.zeros(0, np.int64), "key": np.zeros(0, np.uint64),
                            "gid": np.zeros(0, np.int64)})
_EMPTY_EDGES = pd.DataFrame({"a": np.zeros(0, np.int64), "b": np.zeros(0, np.int64)})


def star_edges(df: pd.DataFrame) -> pd.DataFrame:
    """Within each (band, key) bucket, connect every member to the smallest gid."""
    if df.empty:
        return _EMPTY_EDGES
    df = df.sort_values(["band", "key", "gid"], kind="stable")
    first = ~df.duplicated(["band", "key"], keep="first")
    root = df["gid"].where(first).ffill().astype(np.int64)
    mask = ~first.to_numpy()
    return pd.DataFrame({"a": root.to_numpy()[mask], "b": df["gid"].to_numpy()[mask]})


@stage("fuzzy_dedup")
class FuzzyDedup(GlobalStage):
    """Remove near-duplicates: MinHash signatures, LSH bands, connected components.

    ``preset``: ``nemo`` (24-character shingles, MurmurHash3_x86_32, 20 bands x 13 rows,
    seed 42) or ``datatrove`` (normalised word 5-grams, 14 x 8); any field set explicitly
    overrides the preset, and ``threshold`` picks bands x rows for a Jaccard threshold.
    ``verify`` drops candidate pairs whose signature agreement (a Jaccard estimate) is below
    ``jaccard_threshold``. One document per component is kept (``keep``); every removal is
    written to ``dedup/duplicates.parquet/`` with the kept id, component and Jaccard estimate.
    Signatures are the same bits as cuDF's ``str.minhash`` / ``minhash_ngrams``.
    """

    uses_work_dir: ClassVar[bool] = True
    reasons: ClassVar[tuple[str, ...]] = ("near_duplicate",)
    #: the signatures (the bulk of the work) and the final drop run on cuDF; bands, buckets,
    #: candidate checks and components on the host (see `host_steps`)
    backends: ClassVar[tuple[str, ...]] = ("pandas", "cudf")
    host_steps: ClassVar[str] = "LSH buckets, candidate checks and components on the host"

    preset: Literal["nemo", "datatrove"] = "datatrove"
    shingles: Literal["chars", "words"] | None = None
    width: Annotated[int | None, Field(ge=2)] = None
    bands: Annotated[int | None, Field(ge=1)] = None
    rows: Annotated[int | None, Field(ge=1)] = None
    threshold: Annotated[float | None, Field(gt=0, lt=1)] = None
    num_hashes: Annotated[int | None, Field(ge=1)] = None
    seed: int | None = None
    bits: Literal[32, 64] | None = None
    verify: bool = False
    jaccard_threshold: Annotated[float, Field(gt=0, le=1)] = 0.8
    keep: Keep = "first"
    bands_per_pass: Annotated[int, Field(ge=1)] = 4
    #: connected components: scipy on the client (``local``), on the cluster (``dask``), or
    #: by the size of the candidate graph (``auto``: dask above 20 million candidate pairs)
    components: Literal["auto", "local", "dask"] = "auto"

    def __post_init__(self):
        if self.threshold is not None and (self.bands is not None or self.rows is not None):
            raise ValueError("give threshold or bands/rows, not both")

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

    def apply(self, ddf, ctx=None):
        from gpupipe.io import from_partitions

        client, src = ctx.client, ctx.source
        cfg = self.config()
        a, b = self.permutations(cfg)
        # checkpoints in ctx.work_dir (kept while the stage is unchanged): signatures per
        # partition, then candidate edges per pass of bands — an interrupted run resumes
        sig_dir = os.path.join(ctx.work_dir, "signatures")
        n_parts = src.npartitions
        todo = [i for i in range(n_parts) if not os.path.exists(
            os.path.join(sig_dir, f"part-{i:05d}.meta.parquet"))]
        client.gather(client.map(Signatures(src, sig_dir, cfg, a, b, ctx.backend), todo,
                                 pure=False))
        counts = [pq.read_metadata(os.path.join(sig_dir, f"part-{i:05d}.meta.parquet")).num_rows
                  for i in range(n_parts)]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        pass_dirs = []
        for start in range(0, cfg["bands"], self.bands_per_pass):
            # one directory of edge files per pass of bands, written by the workers; the
            # marker says the pass is complete (an interrupted pass is redone)
            pass_dir = os.path.join(ctx.work_dir, "edges", f"bands-{start:04d}")
            if not os.path.exists(os.path.join(pass_dir, "_complete")):
                shutil.rmtree(pass_dir, ignore_errors=True)
                group = list(range(start, min(start + self.bands_per_pass, cfg["bands"])))
                keys = from_partitions(BandEdges(sig_dir, group, cfg["rows"], offsets), n_parts,
                                       _EMPTY_KEYS, "gpupipe-lsh-keys")
                buckets = keys.shuffle(on=["band", "key"], npartitions=max(1, n_parts))
                client.compute(buckets.map_partitions(star_edges, meta=_EMPTY_EDGES).to_parquet(
                    pass_dir, write_index=False, compute=False)).result()
                with open(os.path.join(pass_dir, "_complete"), "w"):
                    pass
            pass_dirs.append(pass_dir)
        edge_files = sorted(f for d in pass_dirs for f in glob.glob(os.path.join(d, "*.parquet")))
        n_edges = sum(pq.read_metadata(f).num_rows for f in edge_files)
        losers_dir = os.path.join(ctx.work_dir, "losers")
        shutil.rmtree(losers_dir, ignore_errors=True)
        if self.components == "dask" or (self.components == "auto"
                                         and n_edges > LOCAL_EDGE_LIMIT):
            self._losers_on_dask(client, edge_files, sig_dir, offsets, n_parts, losers_dir)
        else:
            self._losers_on_client(edge_files, sig_dir, offsets, losers_dir)
        label = f"{ctx.position}:{self.stage_name}"
        audit_dir = os.path.join(ctx.output_dir, "dedup", "duplicates.parquet")
        clear_audit(audit_dir, label)
        reader = DropLosers(src, losers_dir, audit_dir, label, audit_cols=("component", "jaccard"),
                            backend=ctx.backend)
        return from_partitions(reader, n_parts, ctx.meta(), "gpupipe-fuzzy-drop")

    def _losers_on_client(self, edge_files, sig_dir, offsets, losers_dir):
        """Connected components with scipy on the client: its memory follows the number of
        candidate pairs (only documents in a pair are loaded), not the size of the corpus."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        frames = [pd.read_parquet(f) for f in edge_files]
        pairs = (pd.concat(frames, ignore_index=True) if frames else _EMPTY_EDGES
                 ).drop_duplicates()
        sigs = SignatureStore(sig_dir, offsets)
        if len(pairs) and self.verify:
            agree = sigs.agreement(pairs["a"].to_numpy(), pairs["b"].to_numpy())
            pairs = pairs[agree >= self.jaccard_threshold]
        if len(pairs) == 0:
            return
        a, b = pairs["a"].to_numpy(), pairs["b"].to_numpy()
        nodes = np.unique(np.concatenate([a, b]))  # global document numbers, sorted
        ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
        graph = coo_matrix((np.ones(len(ia), dtype=np.int8), (ia, ib)),
                           shape=(len(nodes), len(nodes)))
        _, label = connected_components(graph, directed=False)
        meta = sigs.meta(nodes)
        part = np.searchsorted(offsets, nodes, side="right") - 1
        df = pd.DataFrame({"component": label, POS: part, ROW: nodes - offsets[part],
                           "length": meta["length"].to_numpy(), "id": meta["id"].to_numpy()})
        lost = ComponentLosers(self.keep, sig_dir, offsets)(df)
        for part_no, group in lost.groupby(POS, sort=True):
            d = os.path.join(losers_dir, f"{POS}={int(part_no)}")
            os.makedirs(d, exist_ok=True)
            pq.write_table(pa.Table.from_pandas(group.drop(columns=[POS]), preserve_index=False),
                           os.path.join(d, "losers.parquet"))

    def _losers_on_dask(self, client, edge_files, sig_dir, offsets, n_parts, losers_dir):
        """Connected components on the cluster (`dask_components`): no machine holds the
        candidate graph; the kept document of each component is chosen after a shuffle by
        component."""
        import dask.dataframe as dd

        from gpupipe.io import from_partitions
        from gpupipe.stages.dedup.components import dask_components

        if not edge_files:
            return
        edges = dd.read_parquet(edge_files)
        if self.verify:
            edges = edges.map_partitions(VerifiedEdges(sig_dir, offsets, self.jaccard_threshold),
                                         meta=_EMPTY_EDGES)
        labels, _ = dask_components(edges, client, npartitions=max(1, n_parts))
        nodes = from_partitions(NodeMeta(sig_dir, offsets), n_parts, _NODE_META,
                                "gpupipe-fuzzy-nodes")
        df = labels.merge(nodes, left_on="node", right_on="gid").rename(
            columns={"label": "component"})
        grouped = df.shuffle(on="component", npartitions=max(1, n_parts))
        lost = grouped.map_partitions(ComponentLosers(self.keep, sig_dir, offsets),
                                      meta=losers(pd.DataFrame(), ["component"], self.keep,
                                                  ("component", "jaccard")))
        write_losers(client, lost, losers_dir)


_NODE_META = pd.DataFrame({"gid": np.zeros(0, np.int64),
                           "id": pd.Series([], dtype=pd.StringDtype("pyarrow")),
                           "length": np.zeros(0, np.int64), POS: np.zeros(0, np.int64),
                           ROW: np.zeros(0, np.int64)})


class NodeMeta:
    """Signature partition ``i`` -> global number, id, length and position of its documents."""

    def __init__(self, sig_dir: str, offsets: np.ndarray):
        self.sig_dir, self.offsets = sig_dir, offsets

    def __call__(self, i: int) -> pd.DataFrame:
        t = pq.read_table(os.path.join(self.sig_dir, f"part-{i:05d}.meta.parquet")).to_pandas()
        rows = np.arange(len(t), dtype=np.int64)
        return pd.DataFrame({"gid": rows + self.offsets[i],
                             "id": t["id"].astype(pd.StringDtype("pyarrow")),
                             "length": t["length"].to_numpy(np.int64),
                             POS: np.full(len(t), i, np.int64), ROW: rows})


class VerifiedEdges:
    """Keeps the candidate pairs whose signatures agree on at least ``threshold``."""

    def __init__(self, sig_dir: str, offsets: np.ndarray, threshold: float):
        self.sig_dir, self.offsets, self.threshold = sig_dir, offsets, threshold

    def __call__(self, df: pd.DataFrame) -> pd.DataFrame:
        if df.empty:
            return df
        agree = SignatureStore(self.sig_dir, self.offsets).agreement(
            df["a"].to_numpy(), df["b"].to_numpy())
        return df[agree >= self.threshold]


class ComponentLosers:
    """Rows of whole components -> the documents that lose to their component's kept one, with
    the component id users see (the kept document's global number) and the Jaccard estimate."""

    def __init__(self, keep: str, sig_dir: str, offsets: np.ndarray):
        self.keep, self.sig_dir, self.offsets = keep, sig_dir, offsets

    def __call__(self, df: pd.DataFrame) -> pd.DataFrame:
        out = losers(df, ["component"], self.keep)
        if out.empty:
            return losers(pd.DataFrame(), ["component"], self.keep, ("component", "jaccard"))
        lost = self.offsets[out[POS].to_numpy()] + out[ROW].to_numpy()
        kept = self.offsets[out["kept_part"].to_numpy()] + out["kept_row"].to_numpy()
        sigs = SignatureStore(self.sig_dir, self.offsets)
        return out.assign(component=kept.astype(np.int64), jaccard=sigs.agreement(lost, kept))

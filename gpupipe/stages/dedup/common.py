"""Shared by the dedup stages: document codes, choosing the kept document, the audit table
``<output>/dedup/duplicates.parquet/``, and the index a run leaves for later runs
(``<output>/dedup/index/<stage>/``) with ``against:``."""

from __future__ import annotations

import json
import os
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpupipe.errors import GpupipeError, SpecError
from gpupipe.io.files import file_identity, is_url
from gpupipe.io.rundir import INDEX_FORMAT, index_dir, index_manifest
from gpupipe.stages.steps import Output

Keep = Literal["first", "longest", "shortest_id"]
POS = "_gp_part"   # partition of the stage input a row came from
ROW = "_gp_row"    # row number inside that partition

#: a document is ``part << 32 | row``: unique, and ordered as the input. Documents of the
#: indexes of earlier runs (``against``) have ``part >= OLD_BASE``: run k, index partition p is
#: ``OLD_BASE + k << OLD_RUN_SHIFT + p``
OLD_BASE = 1 << 30
OLD_RUN_SHIFT = 22


def doc_codes(part: int, n: int) -> np.ndarray:
    return (np.int64(part) << np.int64(32)) | np.arange(n, dtype=np.int64)


def split_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    codes = np.asarray(codes, dtype=np.int64)
    return codes >> np.int64(32), codes & np.int64(0xFFFFFFFF)


def old_part(run: int, p: int) -> int:
    return OLD_BASE + (run << OLD_RUN_SHIFT) + p


def is_old(codes: np.ndarray) -> np.ndarray:
    return split_codes(codes)[0] >= OLD_BASE


def rank_order(frame: pd.DataFrame, keep: Keep) -> np.ndarray:
    """Row order in which documents claim to be kept: documents of earlier runs first (in the
    order of ``against``), then by ``keep`` (first in input order, longest text, smallest id);
    ties fall back to input order, so the choice never depends on scheduling.

    ``frame`` has ``doc`` (int64 code), ``length`` and ``id``."""
    old = is_old(frame["doc"].to_numpy())
    work = pd.DataFrame({"_new": ~old, "doc": frame["doc"].to_numpy()})
    by = {"first": ["_new", "doc"], "longest": ["_new", "_neg", "doc"],
          "shortest_id": ["_new", "id", "doc"]}[keep]
    if keep == "longest":
        work["_neg"] = -frame["length"].to_numpy()
    if keep == "shortest_id":
        work["id"] = frame["id"].astype(str).to_numpy()
    return work.sort_values(by, kind="stable").index.to_numpy()


def group_losers(frame: pd.DataFrame, group_cols: list[str], keep: Keep) -> pd.DataFrame:
    """Rows that lose to the kept row of their group (same key), with ``kept`` = the kept row's
    doc code and ``duplicate_of`` its id. Rows of earlier runs never lose."""
    if frame.empty:
        return frame.assign(kept=np.zeros(0, np.int64), duplicate_of=frame["id"])
    work = frame.iloc[rank_order(frame, keep)]
    work = work.sort_values(group_cols, kind="stable")
    first = ~work.duplicated(group_cols, keep="first").to_numpy()
    lost = ~first & ~is_old(work["doc"].to_numpy())
    # each row's group leader: the last first-of-group row at or before it (integer positions,
    # so 64-bit document codes never pass through float)
    leader = np.flatnonzero(first)[np.cumsum(first) - 1][lost]
    return work.iloc[np.flatnonzero(lost)].assign(
        kept=work["doc"].to_numpy()[leader].astype(np.int64),
        duplicate_of=work["id"].to_numpy()[leader])


# --- the audit: dedup/duplicates.parquet ------------------------------------------------------

#: every audit file has these columns, so the directory reads as one table (pandas, Dask,
#: Arrow datasets take the schema of the first file)
AUDIT_SCHEMA = pa.schema([("id", pa.string()), ("duplicate_of", pa.string()),
                          ("duplicate_run", pa.string()), ("stage", pa.string()),
                          ("similarity", pa.float64()), ("component", pa.int64())])


def audit_table(lost: pd.DataFrame, label: str, runs: list[str]) -> pa.Table:
    """Audit rows of removed documents: id, duplicate_of, duplicate_run (the earlier run the kept
    document is in; null within this run), stage, similarity (1.0 for exact copies) and
    component (the near-duplicate component; null for exact dedup)."""
    kept_part, _ = split_codes(lost["kept"].to_numpy())
    run = [runs[(int(p) - OLD_BASE) >> OLD_RUN_SHIFT] if p >= OLD_BASE else None
           for p in kept_part]
    n = len(lost)
    similarity = (pa.array(lost["similarity"].to_numpy(), pa.float64()) if "similarity" in lost
                  else pa.array(np.ones(n), pa.float64()))
    component = (pa.array(lost["component"].to_numpy(), pa.int64()) if "component" in lost
                 else pa.nulls(n, pa.int64()))
    return pa.table({
        "id": pa.array(lost["id"].astype(str).tolist(), pa.string()),
        "duplicate_of": pa.array(lost["duplicate_of"].astype(str).tolist(), pa.string()),
        "duplicate_run": pa.array(run, pa.string()),
        "stage": pa.array([label] * n, pa.string()),
        "similarity": similarity,
        "component": component,
    }, schema=AUDIT_SCHEMA)


class DropLosers:
    """The output step of a dedup stage (``drop``): partition ``i`` of the stage input without
    the documents that lost (bucket ``i`` of step ``losers``, rows ``_gp_row``). The runner
    writes what it returns: the kept rows, the audit rows of the removed ones, and, with
    ``index`` (``index(ctx, i, frame, kept mask) -> {suffix: table or array}``), partition ``i``
    of this run's index for later runs."""

    def __init__(self, reason: str, losers: str, label: str, runs: list[str], index=None):
        self.reason, self.losers, self.label, self.runs = reason, losers, label, runs
        self.index = index

    def __call__(self, ctx, i: int) -> Output:
        from gpupipe.backends import dispatch

        frame = ctx.read(i)
        lost = ctx.bucket(self.losers, i)
        mask = np.ones(len(frame), dtype=bool)
        audit = None
        if lost is not None and lost.num_rows:
            lost = lost.to_pandas().sort_values(ROW, kind="stable")
            mask[lost[ROW].to_numpy()] = False
            audit = audit_table(lost, self.label, self.runs)
            frame = dispatch.filter_rows(frame, mask)
        n = int((~mask).sum())
        return Output(frame, drops={self.reason: n} if n else {}, audit=audit,
                      index=self.index(ctx, i, frame, mask) if self.index is not None else {})


# --- the index of kept documents for later runs ------------------------------------------------

class AgainstIndexes:
    """What a dedup stage with ``against`` (earlier runs: directories or URLs) and
    ``storage_options`` (for those URLs) shares: its identity, its check, its indexes."""

    def identity(self) -> dict:
        return ({"against": against_identity(self.against, self.stage_name,
                                             self.storage_options)} if self.against else {})

    def check(self, ctx=None) -> None:
        self.earlier_indexes(ctx.output_dir if ctx is not None else None)

    def earlier_indexes(self, output_dir: str | None) -> list[dict]:
        return open_indexes(self.against, self.stage_name, self.index_params(), output_dir,
                            self.storage_options)


def open_indexes(against: list[str], stage_name: str, params: dict,
                 output_dir: str | None = None,
                 storage_options: dict | None = None) -> list[dict]:
    """The indexes of earlier runs, checked: each ``{"run", "dir", "partitions"}``. A run on
    object storage is read from a local copy of its run.json and index, refreshed by ETag.

    Refuses, naming the run and the differing parameters, an index built with other parameters
    (its documents would never match), a run that did not complete, or a path with no index."""
    out = []
    for name in against:
        run = name
        if is_url(name):
            from gpupipe.io.mirror import fetch_run

            try:
                run = fetch_run(name, ("run.json", f"dedup/index/{stage_name}/"),
                                storage_options)
            except GpupipeError as e:
                raise SpecError(f"{stage_name}.against: {e}") from None
        elif output_dir is not None and os.path.abspath(run) == os.path.abspath(output_dir):
            raise SpecError(f"{stage_name}.against: {run!r} is this run's own output directory; "
                            f"name earlier runs only")
        d = index_dir(run, stage_name)
        manifest = index_manifest(run, stage_name)
        try:
            with open(os.path.join(run, "run.json"), encoding="utf-8") as f:
                status = json.load(f).get("status")
        except (OSError, ValueError):
            raise SpecError(f"{stage_name}.against: {name!r} is not a gpupipe run directory "
                            f"(no run.json)") from None
        if status != "complete":
            raise SpecError(f"{stage_name}.against: the run in {name!r} is {status!r}, not "
                            f"complete; finish it before deduplicating against it")
        try:
            with open(manifest, encoding="utf-8") as f:
                m = json.load(f)
        except (OSError, ValueError):
            raise SpecError(f"{stage_name}.against: {name!r} has no {stage_name} index "
                            f"({os.path.relpath(manifest, run)}); that run had no "
                            f"{stage_name} stage, or ran before gpupipe wrote indexes") from None
        if m.get("format") != INDEX_FORMAT or m.get("params") != params:
            theirs = m.get("params") or {}
            diff = ", ".join(f"{k}={theirs.get(k)!r} there, {params.get(k)!r} here"
                             for k in sorted(set(theirs) | set(params))
                             if theirs.get(k) != params.get(k))
            raise SpecError(f"{stage_name}.against: the index in {d} was built with other "
                            f"parameters ({diff}); its documents cannot match this stage's. "
                            f"Use the same parameters as that run, or drop it from against")
        n = int(m["partitions"])
        missing = [p for p in range(n) if not os.path.exists(os.path.join(d, f"part-{p:05d}.parquet"))]
        if missing:
            raise SpecError(f"{stage_name}.against: the index in {d} is incomplete "
                            f"({len(missing)} of {n} partitions missing)")
        out.append({"run": name, "dir": d, "partitions": n})
    return out


def against_identity(against: tuple[str, ...], stage_name: str,
                     storage_options: dict | None = None) -> dict:
    """The earlier runs' index manifests and completion times (ETags on object storage): a
    rerun of one of them changes the fingerprint of a stage deduplicating against it."""
    out = {}
    for run in against:
        if is_url(run):
            stamp = []
            for rel in ("run.json", f"dedup/index/{stage_name}/manifest.json"):
                try:
                    stamp.append(file_identity(f"{run.rstrip('/')}/{rel}", storage_options)[1:])
                except GpupipeError:
                    stamp.append(None)
            out[run] = stamp
            continue
        stamp = []
        for path in (os.path.join(run, "run.json"),
                     index_manifest(run, stage_name)):
            try:
                st = os.stat(path)
                stamp.append([st.st_size, st.st_mtime_ns])
            except OSError:
                stamp.append(None)
        out[run] = stamp
    return out


def index_parts(indexes: list[dict]) -> list[tuple[int, int]]:
    """(run number, partition) of every partition of every index, in order."""
    return [(k, p) for k, ix in enumerate(indexes) for p in range(ix["partitions"])]


def index_path(indexes: list[dict], part: int, suffix: str) -> str:
    k, p = (part - OLD_BASE) >> OLD_RUN_SHIFT, (part - OLD_BASE) & ((1 << OLD_RUN_SHIFT) - 1)
    return os.path.join(indexes[k]["dir"], f"part-{p:05d}.{suffix}")


def read_index_part(indexes: list[dict], k: int, p: int) -> pa.Table:
    return pq.read_table(os.path.join(indexes[k]["dir"], f"part-{p:05d}.parquet"))

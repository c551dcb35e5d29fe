"""Shared by the dedup stages: choosing the kept document of a group, dropping the others, and
the audit table ``<output>/dedup/duplicates.parquet/``."""

from __future__ import annotations

import glob
import os
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

Keep = Literal["first", "longest", "shortest_id"]
POS = "_gp_part"   # partition of the stage input a row came from
ROW = "_gp_row"    # row number inside that partition


def losers(df: pd.DataFrame, group_cols: list[str], keep: Keep,
           extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rows that lose to the kept row of their group, with ``duplicate_of`` = the kept id and
    ``kept_part`` / ``kept_row`` = where the kept row is.

    ``df`` has the group columns, ``_gp_part``, ``_gp_row``, ``length`` and ``id``. The kept row
    is the first by input position (``first``), the longest text, or the smallest id; ties fall
    back to input position, so the choice never depends on how the work was scheduled.
    """
    from gpupipe import seam

    cols = [POS, ROW, "id", "duplicate_of", "kept_part", "kept_row", *extra]
    if df.empty:
        return seam.like(df, pd.DataFrame({c: pd.Series([], dtype=_dtype(c)) for c in cols}))
    rank = {"first": [POS, ROW], "longest": ["_neg_len", POS, ROW],
            "shortest_id": ["id", POS, ROW]}[keep]
    work = df.assign(_neg_len=-df["length"]) if keep == "longest" else df
    # (part, row) is unique, so the order is total and no stable sort is needed (cuDF has none)
    work = work.sort_values(group_cols + rank)
    first = ~work.duplicated(group_cols, keep="first")
    lost = ~first
    out = work.loc[lost].assign(
        duplicate_of=work["id"].where(first).ffill()[lost],
        kept_part=work[POS].where(first).ffill()[lost].astype("int64"),
        kept_row=work[ROW].where(first).ffill()[lost].astype("int64"))
    return out[cols].reset_index(drop=True)


def _dtype(col: str):
    return {POS: "int64", ROW: "int64", "kept_part": "int64", "kept_row": "int64",
            "component": "int64", "jaccard": "float64"}.get(col, pd.StringDtype("pyarrow"))


def audit_prefix(label: str) -> str:
    return label.replace(":", "-")


def clear_audit(audit_dir: str, label: str) -> None:
    """Remove this stage's audit files of an earlier run (the partition count may differ)."""
    for f in glob.glob(os.path.join(audit_dir, f"{audit_prefix(label)}-part-*.parquet")):
        os.remove(f)


class DropLosers:
    """Reads partition ``i`` of the stage input without its losing rows, and writes the audit
    rows of that partition to ``dedup/duplicates.parquet/``."""

    def __init__(self, source, losers_dir: str, audit_dir: str, label: str,
                 audit_cols: tuple[str, ...] = (), backend: str = "pandas"):
        self.source, self.losers_dir, self.audit_dir = source, losers_dir, audit_dir
        self.label, self.audit_cols, self.backend = label, audit_cols, backend

    def __call__(self, i: int):
        from gpupipe import seam
        from gpupipe.backend import read_partition
        from gpupipe.io.writer import write_parquet

        frame = read_partition(self.source, i, self.backend).frame
        files = sorted(glob.glob(os.path.join(self.losers_dir, f"{POS}={i}", "*.parquet")))
        if not files:
            return frame
        lost = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
        lost = lost.sort_values(ROW)
        mask = np.ones(len(frame), dtype=bool)
        mask[lost[ROW].to_numpy()] = False
        audit = pa.table({
            "id": pa.array(lost["id"].astype(str).tolist(), pa.string()),
            "duplicate_of": pa.array(lost["duplicate_of"].astype(str).tolist(), pa.string()),
            "stage": pa.array([self.label] * len(lost), pa.string()),
            **{c: pa.array(lost[c].to_numpy()) for c in self.audit_cols},
        })
        write_parquet(audit, os.path.join(self.audit_dir,
                                          f"{audit_prefix(self.label)}-part-{i:05d}.parquet"))
        return seam.filter_rows(frame, mask)


def write_losers(client, losers_ddf, path: str) -> None:
    """Materialise the losers, one directory per input partition (``_gp_part=K/``). They are
    written from the host with pyarrow on either backend: cuDF's Parquet writer fails on an empty
    partition with ``partition_on`` (every hash bucket without duplicates), and the losers are
    small."""
    import shutil

    from gpupipe import seam

    host_meta = seam.to_host(losers_ddf._meta)
    if host_meta is not losers_ddf._meta:
        losers_ddf = losers_ddf.map_partitions(seam.to_host, meta=host_meta)

    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    task = losers_ddf.to_parquet(path, partition_on=[POS], write_index=False, compute=False)
    client.compute(task).result()

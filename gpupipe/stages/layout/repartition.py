"""repartition: change the number or size of partitions (a global stage)."""

from __future__ import annotations

import functools
from typing import Annotated

import numpy as np
import pyarrow as pa
from pydantic import ByteSize, Field

from gpupipe.stages.base import GlobalStage, stage
from gpupipe.stages.steps import Map, OnClient, Output

#: a piece of an output partition: rows [start, end) of input partition ``part``
PIECES = pa.schema([("out", pa.int64()), ("part", pa.int64()), ("start", pa.int64()),
                    ("end", pa.int64())])


def _sizes(ctx, i: int) -> Output:
    """Step ``sizes``: rows and in-memory bytes (deep) of input partition ``i``."""
    frame = ctx.read(i)
    mem = int(frame.memory_usage(deep=True, index=True).sum())
    return Output(pa.table({"rows": [len(frame)], "mem": [mem]}))


def _even(rows: int, k: int) -> list[tuple[int, int]]:
    """``rows`` cut into ``k`` nearly equal ranges (as ``dask.dataframe``'s split_evenly)."""
    cuts = np.linspace(0, rows, k + 1).astype(int)
    return [(int(cuts[m]), int(cuts[m + 1])) for m in range(k)]


def _boundaries(cuts, n_parts: int) -> list[int]:
    """Cut points starting at 0 and reaching at least ``n_parts`` (dask's cleaning)."""
    out = [int(c) for c in cuts]
    if out[0] > 0:
        out.insert(0, 0)
    if out[-1] < n_parts:
        out[-1] = n_parts
    return out


def plan_pieces(rows: list[int], mem: list[int], *, npartitions: int | None = None,
                partition_size: int | None = None) -> list[list[tuple[int, int, int]]]:
    """The output partitions as lists of ``(input partition, start row, end row)``, in order,
    with the boundaries dask's ``repartition`` draws: fewer partitions merge neighbours
    (``int(k * n_in / n_out)``), more split each partition evenly (the last takes the rest),
    and ``partition_size`` first splits partitions larger than it, then fills each output
    partition with whole pieces up to that many bytes."""
    n = len(rows)
    whole = [(j, 0, rows[j]) for j in range(n)]
    if npartitions is not None:
        if npartitions == n or n == 0:
            return [[w] for w in whole]
        if npartitions < n:
            cuts = _boundaries([int(k * (n / npartitions)) for k in range(npartitions + 1)], n)
            return [whole[a:b] for a, b in zip(cuts, cuts[1:])]
        div, mod = divmod(npartitions, n)
        splits = [div] * n
        splits[-1] += mod
        return [[(j, a, b)] for j, k in enumerate(splits) for a, b in _even(rows[j], k)]
    splits = [1 + m // partition_size for m in mem]
    units, usage = [], []
    for j, k in enumerate(splits):
        for a, b in _even(rows[j], k) if k > 1 else [(0, rows[j])]:
            units.append((j, a, b))
            usage.append(mem[j] / k)
    counts, total, size = [], 0.0, 0
    for u in usage:   # whole pieces, at most partition_size bytes per output partition
        if size and total + u > partition_size:
            counts.append(size)
            total, size = 0.0, 0
        total += u
        size += 1
    if size:
        counts.append(size)
    cuts = _boundaries(np.cumsum(counts), n)
    return [units[a:b] for a, b in zip(cuts, cuts[1:])]


def _plan(npartitions, partition_size, ctx) -> Output:
    """Step ``plan`` (client): the pieces of every output partition."""
    sizes = ctx.table("sizes")
    rows = sizes["rows"].to_pylist() if sizes is not None else []
    mem = sizes["mem"].to_pylist() if sizes is not None else []
    plan = plan_pieces(rows, mem, npartitions=npartitions, partition_size=partition_size)
    table = pa.table([pa.array(c, pa.int64()) for c in zip(*[
        (o, j, a, b) for o, pieces in enumerate(plan) for j, a, b in pieces])] or
        [pa.array([], pa.int64())] * 4, schema=PIECES)
    return Output(table, counters={"partitions_out": len(plan)})


def _outputs(ctx) -> int:
    plan = ctx.table("plan")
    return int(plan["out"].to_numpy().max()) + 1 if plan is not None and plan.num_rows else 0


def _write(ctx, i: int) -> Output:
    """Step ``write``: output partition ``i``, its pieces read and joined in order."""
    import pandas as pd

    from gpupipe.backends import dispatch

    plan = ctx.table("plan").to_pandas()
    frames = [ctx.read(int(r.part)).iloc[int(r.start):int(r.end)]
              for r in plan[plan["out"] == i].itertuples()]
    host = [dispatch.to_host(f) for f in frames]
    joined = pd.concat(host, ignore_index=True) if len(host) > 1 else host[0]
    return Output(dispatch.like(frames[0], joined.reset_index(drop=True)))


@stage("repartition")
class Repartition(GlobalStage):
    """Merge or split partitions to ``npartitions`` or to about ``partition_size`` bytes each.

    Many small input files make many tiny tasks; one huge file makes one huge task. Row order is
    kept, and the result depends only on the data, never on the number of workers.
    """

    npartitions: Annotated[int | None, Field(ge=1)] = None
    partition_size: ByteSize | None = None

    def __post_init__(self):
        if (self.npartitions is None) == (self.partition_size is None):
            raise ValueError("give exactly one of npartitions or partition_size (e.g. '128MB')")

    def steps(self, ctx):
        size = int(self.partition_size) if self.partition_size is not None else None
        return [Map("sizes", _sizes),
                OnClient("plan", functools.partial(_plan, self.npartitions, size)),
                Map("write", _write, items=_outputs, output=True)]
